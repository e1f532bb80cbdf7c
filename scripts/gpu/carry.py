"""What travels to the device machine: the working tree and the carried folder against the limit, an archive in
parts (one per call)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

MIB = 2**20
CARRY = ".gpu_carry"
"""What travels to the device machine besides the tree (a carried path, relative to the repository root)."""

CARRY_LIMIT_MIB = 64
"""The device tool's limit on the working tree that travels (tracked + untracked-not-ignored files + carried paths)."""


def log(message: str) -> None:
    print(f"[gpu_session] {message}", flush=True)


def tree_size(root: Path = ROOT) -> int:
    """Bytes of the working tree that travels without carried paths: tracked + untracked-not-ignored files."""
    names = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=root,
        check=True,
        capture_output=True,
    ).stdout.split(b"\0")
    return sum((root / os.fsdecode(n)).stat().st_size for n in names if n and (root / os.fsdecode(n)).is_file())


def folder_size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.exists() else 0


def carry_report(carry: Path) -> int:
    """Print what travels: the tree, the carried folder and their sum against the limit."""
    tree = tree_size()
    carried = folder_size(carry)
    total = tree + carried
    over = (total - CARRY_LIMIT_MIB * MIB) / MIB
    verdict = "fits" if over <= 0 else f"TOO BIG by {over:.1f} MiB"
    print(
        f"travels: working tree {tree / MIB:.1f} MiB + {carry} {carried / MIB:.1f} MiB = {total / MIB:.1f} MiB of "
        f"{CARRY_LIMIT_MIB} MiB: {verdict}"
    )
    for path in sorted(carry.iterdir()) if carry.is_dir() else []:
        print(f"  {path.name}: {folder_size(path) / MIB if path.is_dir() else path.stat().st_size / MIB:.1f} MiB")
    return 0 if total <= CARRY_LIMIT_MIB * MIB else 1


def split(archive: Path, carry: Path, beside: Path) -> int:
    """``carry/part1``, ``part2``, ...: ``archive`` in pieces that each travel in one call (the tree, 1 MiB to spare),
    part1 beside the folder ``beside`` (the wheels). On the machine, ``cat`` of the pieces in order restores it."""
    room = CARRY_LIMIT_MIB * MIB - tree_size() - MIB
    for old in carry.glob("part[0-9]*"):
        shutil.rmtree(old)
    with archive.open("rb") as handle:
        number, chunk = 1, room - folder_size(beside)
        while piece := handle.read(chunk):
            folder = carry / f"part{number}"
            folder.mkdir()
            (folder / f"{archive.name}.{number:02d}").write_bytes(piece)
            log(f"{folder}: {len(piece) / MIB:.1f} MiB")
            number, chunk = number + 1, room
    log(f"{number - 1} calls: part1 with {beside}, then one part each")
    return 0


def exclude_carry() -> None:
    """The carried folder in .git/info/exclude: it travels as a carried path, not in the tree."""
    exclude = ROOT / ".git" / "info" / "exclude"
    exclude.parent.mkdir(parents=True, exist_ok=True)
    lines = exclude.read_text().splitlines() if exclude.is_file() else []
    if f"/{CARRY}/" not in lines:
        with exclude.open("a") as handle:
            handle.write(f"/{CARRY}/\n")

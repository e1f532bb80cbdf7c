"""The corpora: packed here into one archive that travels (``gpu_session.py pack-data``), and cut to a tiny copy
for ``--size tiny`` on the machine."""

from __future__ import annotations

import gzip
import io
import lzma
import shutil
import tarfile
import tempfile
from pathlib import Path

from .carry import MIB, log

# the corpora a session reads: the training mix (hf_tlaser.data.DEFAULT_TRAIN_CORPORA), NTREX-128 (retrieval, the
# benchmarks' texts) and SIB-200 (classification); Europarl is cut to what fits (the only large one)
DATA_FOLDERS = ("wmt-newstest-multiway", "multi30k", "wmt-newstest-bilingual", "stsb-multi-mt", "ntrex128", "sib200")
RELEASE_FOLDERS = ("wmt-newstest-more", "flores-devtest", "ud-pud", "tico19-test", "multilingual-e5-small")
"""What the release stage reads besides: the release recipe's last corpus, its dev sets and its pretrained start
(121 MiB: the archive then travels in parts, ``--release``)."""
EUROPARL = "europarl-v2-it-en"
EUROPARL_FILES = ("europarl.it-en.en.gz", "europarl.it-en.it.gz", "europarl.it-en.session.gz")

TINY_CUTS = {"train.tsv": 141, "dev.tsv": 31}
"""Lines kept of SIB-200's files in the tiny corpora (header included; the other files: ``TINY_SIB_LINES``)."""
TINY_SIB_LINES = 71
TINY_NTREX_LINES = 300


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode = len(data), 0o644
    tar.addfile(info, io.BytesIO(data))


def _europarl_head(data_dir: Path, lines: int | None) -> dict[str, bytes]:
    """The first ``lines`` lines of each Europarl file, uncompressed (xz packs text better than gz inside it)."""
    out = {}
    for name in EUROPARL_FILES:
        with gzip.open(data_dir / EUROPARL / name, "rb") as handle:
            if lines is None:
                out[name.removesuffix(".gz")] = handle.read()
            else:
                out[name.removesuffix(".gz")] = b"".join(line for _, line in zip(range(lines), handle))
    return out


def pack_data(out: Path, data_dir: Path, budget_mib: float, folders: tuple[str, ...] = DATA_FOLDERS) -> int:
    """``out/data.tar.xz``: the session's corpora (``folders``), Europarl cut to its first N pairs so that the archive
    stays within ``budget_mib``; ``out/DATA.txt`` says what is in it."""
    out.mkdir(parents=True, exist_ok=True)
    archive = out / "data.tar.xz"
    budget = budget_mib * MIB
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp, "base.tar")
        with tarfile.open(base, "w") as tar:
            for folder in folders:
                tar.add(data_dir / folder, arcname=folder)
        base_xz = len(lzma.compress(base.read_bytes(), preset=6))
        log(f"{', '.join(folders)}: {base.stat().st_size / MIB:.1f} MiB, {base_xz / MIB:.1f} MiB as xz")
        sample_lines = 20_000
        sample = _europarl_head(data_dir, sample_lines)
        per_line = len(lzma.compress(b"".join(sample.values()), preset=6)) / sample_lines
        total_lines = sum(1 for _ in gzip.open(data_dir / EUROPARL / EUROPARL_FILES[2], "rb"))
        lines = int(min(total_lines, max(0, (budget - base_xz) * 0.97 / per_line)))
        while True:
            head = _europarl_head(data_dir, lines if lines < total_lines else None)
            with lzma.open(archive, "wb", preset=6) as xz, tarfile.open(fileobj=xz, mode="w") as tar:
                with tarfile.open(base) as src:
                    for member in src.getmembers():
                        tar.addfile(member, src.extractfile(member) if member.isfile() else None)
                for name, data in head.items():
                    _add_bytes(tar, f"{EUROPARL}/{name}", data)
                _add_bytes(tar, f"{EUROPARL}/PROVENANCE.md", (data_dir / EUROPARL / "PROVENANCE.md").read_bytes())
            if archive.stat().st_size <= budget or lines < 1000:
                break
            lines = int(lines * 0.9)
    note = (
        f"data.tar.xz ({archive.stat().st_size / MIB:.1f} MiB) from {data_dir}: {', '.join(folders)} whole; "
        f"{EUROPARL}: the first {lines:,} of {total_lines:,} pairs (uncompressed text in the archive).\n"
    )
    (out / "DATA.txt").write_text(note)
    log(note.strip())
    return 0


def make_tiny_data(source: Path, dest: Path) -> None:
    """A copy of the corpora with NTREX-128 and SIB-200 cut to their first lines (every evaluation then takes seconds
    on a CPU), the other folders linked whole."""
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    for folder in sorted(p for p in source.iterdir() if p.is_dir() and not p.name.startswith(".")):
        if folder.name in ("ntrex128", "sib200"):
            shutil.copytree(folder, dest / folder.name)
            for path in [dest / folder.name, *(dest / folder.name).rglob("*")]:  # chmod -R u+w: the cuts, a rm -r
                path.chmod(path.stat().st_mode | 0o200)
        else:
            (dest / folder.name).symlink_to(folder)
    cuts = {}
    if (dest / "ntrex128").is_dir():
        for path in [*(dest / "ntrex128").glob("*.txt"), dest / "ntrex128" / "DOCUMENT_IDS.tsv"]:
            cuts[path] = TINY_NTREX_LINES
    for path in (dest / "sib200").glob("*/*.tsv"):
        cuts[path] = TINY_CUTS.get(path.name, TINY_SIB_LINES)
    for path, lines in cuts.items():
        if path.is_file():
            with path.open("rb") as handle:
                head = b"".join(line for _, line in zip(range(lines), handle))
            path.write_bytes(head)
    (dest / ".made").touch()

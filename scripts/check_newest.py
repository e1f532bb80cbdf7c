"""Check hf_tlaser against the newest releases its ranges allow, before they reach users.

Creates a fresh venv WITHOUT constraints.txt, installs torch at its pin (the platform build: a newer torch from PyPI is
a multi-GB CUDA wheel on a CPU machine) and then the newest versions of everything else that pyproject.toml allows,
runs the test suite there, and prints side by side which packages differ from the pinned stack and which tests
failed. Not part of .ci/run: an upstream release must not block unrelated work. Run it before every stop.

    python scripts/check_newest.py                      # fresh temporary venv, the whole suite
    python scripts/check_newest.py --keep-venv /tmp/nv  # keep (or reuse) the venv
    python scripts/check_newest.py --write-constraints  # if the suite passes, pin the stack it passed with
    python scripts/check_newest.py -- tests/test_generation.py -x   # pytest arguments after --
    python scripts/check_newest.py --oldest-transformers  # the lowest transformers minor pyproject.toml promises
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONSTRAINTS = ROOT / "constraints.txt"
NOT_PINNED = {"hf-tlaser", "hf_tlaser", "pip", "setuptools", "wheel"}
FLOOR_TESTS = [
    "tests/test_generation.py",
    "tests/test_tlaser_model.py",
    "tests/test_laser_model.py",
    "tests/test_yu2018_model.py",
    "tests/test_ldt_model.py",
    "tests/test_cnv_model.py",
    "tests/test_encode.py",
]
"""What ``--oldest-transformers`` runs by default: the models, their remote-code loading and generation."""


def transformers_floor() -> str:
    """The lowest transformers minor that pyproject.toml promises, as a pip requirement (``transformers==4.57.*``)."""
    found = re.search(r'"transformers>=(\d+)\.(\d+)', (ROOT / "pyproject.toml").read_text())
    if found is None:
        sys.exit("[check_newest] pyproject.toml has no transformers>=X.Y requirement")
    return f"transformers=={found[1]}.{found[2]}.*"


def canonical(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def read_pins(path: Path) -> dict[str, str]:
    """``name==version`` lines of a constraints file (comments and blank lines skipped), by canonical name."""
    pins = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if "==" in line:
            name, version = line.split("==", 1)
            pins[canonical(name)] = version.strip()
    return pins


def run(cmd: list[str], **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, check=True, text=True, **kwargs)


def pip_install(python: Path, *args: str) -> None:
    """pip install, quiet; its whole output only when it fails."""
    cmd = [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *args]
    done = subprocess.run(cmd, cwd=ROOT, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    if done.returncode != 0:
        sys.exit(f"{done.stdout}\n[check_newest] pip install {' '.join(args)} failed (output above)")


def installed(python: Path) -> dict[str, tuple[str, str]]:
    """Installed distributions of a venv: canonical name -> (name as published, version)."""
    out = run(
        [str(python), "-m", "pip", "list", "--format", "json", "--disable-pip-version-check"], capture_output=True
    )
    return {canonical(d["name"]): (d["name"], d["version"]) for d in json.loads(out.stdout)}


def failed_tests(junit: Path) -> list[str]:
    """Test ids that failed or errored in a pytest junit report."""
    if not junit.exists():
        return []
    failed = []
    for case in ET.parse(junit).getroot().iter("testcase"):
        if case.find("failure") is not None or case.find("error") is not None:
            failed.append(f"{case.get('classname', '')}::{case.get('name', '')}")
    return failed


def write_constraints(packages: dict[str, tuple[str, str]], python_version: str) -> None:
    lines = [
        "# The tested stack: every package the test suite passed with (scripts/setup.sh installs with it).",
        f"# Written by scripts/check_newest.py --write-constraints on {datetime.date.today()}, "
        f"Python {python_version}, {platform.machine()}.",
        "# torch is pinned without its local label (+cpu / +cu*), so that either build satisfies it.",
    ]
    for key in sorted(packages):
        if key in NOT_PINNED:
            continue
        name, version = packages[key]
        lines.append(f"{name}=={version.split('+', 1)[0] if key == 'torch' else version}")
    CONSTRAINTS.write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keep-venv", type=Path, help="venv folder to create (or reuse) and keep")
    parser.add_argument("--python", default=sys.executable, help="interpreter for the venv (default: this one)")
    parser.add_argument(
        "--write-constraints", action="store_true", help="if every test passes, write constraints.txt from this stack"
    )
    parser.add_argument(
        "--oldest-transformers",
        action="store_true",
        help="install the lowest transformers minor pyproject.toml allows (newest patch) instead of the newest; "
        "default tests: the models, remote code and generation",
    )
    parser.add_argument("pytest_args", nargs="*", help="pytest arguments (after --; default: the whole suite)")
    args = parser.parse_args(argv)
    if not CONSTRAINTS.exists():
        parser.error(f"{CONSTRAINTS} is missing; restore it with git checkout constraints.txt")
    pins = read_pins(CONSTRAINTS)
    if args.write_constraints and (args.pytest_args or args.oldest_transformers):
        parser.error("--write-constraints needs the whole suite on the newest releases")

    start = time.time()
    tmp = None
    venv = args.keep_venv
    if venv is None:
        tmp = tempfile.mkdtemp(prefix="hf_tlaser-newest-")
        venv = Path(tmp) / "venv"
    python = venv / "bin" / "python"
    try:
        if not python.exists():
            run([args.python, "-m", "venv", str(venv)])
        print(f"[check_newest] venv {venv}: torch=={pins['torch']}, then the newest allowed of everything else")
        floor = [transformers_floor()] if args.oldest_transformers else []
        if floor:
            print(f"[check_newest] holding {floor[0]}")
        torch_pin = f"torch=={pins['torch']}"  # named again, or the eager upgrade replaces it
        pip_install(python, "--upgrade", "--upgrade-strategy", "eager", "-e", f"{ROOT}[dev]", torch_pin, *floor)
        setup_s = time.time() - start
        packages = installed(python)
        junit = venv / "newest-junit.xml"
        tests = args.pytest_args or (FLOOR_TESTS if args.oldest_transformers else ["tests"])
        print(f"[check_newest] set-up {setup_s:.0f} s; running pytest {' '.join(tests)}")
        cpus = [str(python), "-c", "from hf_tlaser.hardware import available_cpus; print(available_cpus())"]
        workers = int(run(cpus, capture_output=True).stdout)
        parallel = ["-n", str(workers)] if workers > 1 else []  # as scripts/test.sh: one worker per CPU
        result = subprocess.run(
            [str(python), "-m", "pytest", "-q", *parallel, "-p", "no:cacheprovider", f"--junitxml={junit}", *tests],
            cwd=ROOT,
        )
        failed = failed_tests(junit)
        py_version = run([str(python), "-c", "import platform; print(platform.python_version())"], capture_output=True)
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)

    print(f"\n== newest releases vs the pinned stack (constraints.txt), {time.time() - start:.0f} s in all ==")
    rows = []
    for key in sorted(set(pins) | {k for k in packages if k not in NOT_PINNED}):
        pinned = pins.get(key, "-")
        newest = packages[key][1] if key in packages else "-"
        if pinned.split("+", 1)[0] != newest.split("+", 1)[0]:
            rows.append((packages.get(key, (key,))[0], pinned, newest))
    if rows:
        width = max(len(r[0]) for r in rows)
        print(f"{'package':<{width}}  {'pinned':<12}  newest")
        for name, pinned, newest in rows:
            print(f"{name:<{width}}  {pinned:<12}  {newest}")
    else:
        print("every package is at its pinned version")
    print(f"\ntests: pytest exit code {result.returncode}; {len(failed)} failed or errored")
    for test in failed:
        print(f"  FAILED {test}")
    if result.returncode == 0 and args.write_constraints:
        write_constraints(packages, py_version.stdout.strip())
        print(f"wrote {CONSTRAINTS.relative_to(ROOT)}: commit it with the change that made the suite pass")
    return result.returncode


if __name__ == "__main__":
    sys.exit(main())

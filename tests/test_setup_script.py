"""scripts/setup.sh stops with one line and exit code 2 before pip runs, for a Python outside the supported range and
for an installed torch other than the pin (a stand-in interpreter answers the two questions the script asks)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def fake_python(tmp_path: Path, version: str, torch_version: str) -> Path:
    """An executable that answers setup.sh's version probe and torch-version probe, and fails anything else."""
    path = tmp_path / "python"
    path.write_text(
        "#!/usr/bin/env bash\n"
        'case "$2" in\n'
        f'  *sys.version_info*) echo "{version}" ;;\n'
        f'  *m.version*) echo "{torch_version}" ;;\n'
        '  *) echo "unexpected call: $*" >&2; exit 99 ;;\n'
        "esac\n"
    )
    path.chmod(0o755)
    return path


def run_setup(python: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHON": str(python)}
    env.pop("HF_TLASER_KEEP_TORCH", None)
    return subprocess.run(
        ["bash", str(ROOT / "scripts" / "setup.sh")], env=env, capture_output=True, text=True, timeout=60
    )


@pytest.mark.parametrize(
    "version, torch_version, message",
    [
        ("3.9 0", "", "Python 3.9 is outside the supported range 3.11-3.13"),
        ("3.11 1", "2.9.1", "torch 2.9.1 is installed but the tested stack pins torch 2.13.0"),
    ],
)
def test_setup_refuses_with_one_line(tmp_path, version, torch_version, message):
    done = run_setup(fake_python(tmp_path, version, torch_version))
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("setup: ") and message in lines[0], done.stderr
    assert "Traceback" not in done.stderr and "unexpected call" not in done.stderr


def test_constraints_pin_the_stack():
    pins = dict(line.split("==", 1) for line in (ROOT / "constraints.txt").read_text().splitlines() if "==" in line)
    for package in ("torch", "transformers", "accelerate", "datasets", "tokenizers", "sentence-transformers"):
        assert package in pins, package
    assert "+" not in pins["torch"]  # either build of the pinned torch satisfies it

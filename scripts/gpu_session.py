"""One GPU lease, run-ready: the command line of ``scripts/gpu_session.sh`` and of its preparations and records
(``--help``). Its parts are the package ``scripts/gpu``; the commands are ``gpu/cli.py``'s (its docstring)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the package gpu, and check_newest beside it
from gpu.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())

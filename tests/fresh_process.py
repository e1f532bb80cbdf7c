"""A fresh Python process that cannot import hf_tlaser: what a user of a saved folder without the package runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np

NO_PACKAGE = 'import sys\nsys.modules["hf_tlaser"] = None  # the saved code must not need the package\n'


def fresh_vectors(script: str, cwd: Path) -> np.ndarray:
    """Run ``script`` (dedented, hf_tlaser made unimportable, Hub offline, a private HF_HOME under ``cwd``) and read
    its last stdout line as a JSON list of vectors (float32); fails the test on a non-zero exit."""
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    env.update(HF_HUB_OFFLINE="1", HF_HOME=str(cwd / "hf_home"), TRANSFORMERS_VERBOSITY="error")
    code = NO_PACKAGE + textwrap.dedent(script)
    proc = subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return np.array(json.loads(proc.stdout.strip().splitlines()[-1]), dtype=np.float32)

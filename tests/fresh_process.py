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


def auto_model_vectors(
    folder: Path, texts: list[str], cwd: Path, *, route: str = "pooler", check: str = ""
) -> np.ndarray:
    """The vectors of ``texts`` from ``AutoModel`` / ``AutoTokenizer`` with ``trust_remote_code`` on ``folder``, in a
    fresh process (``fresh_vectors``): ``route`` "pooler" runs the forward on a padded batch and reads its
    ``pooler_output``, "encode" calls the saved code's ``encode(texts, tok)``; ``check`` is code run after loading
    (``model`` and ``tok`` in scope), e.g. an assert on the class."""
    call = {
        "pooler": f'model(**tok({texts!r}, padding=True, return_tensors="pt")).pooler_output',
        "encode": f"torch.as_tensor(model.encode({texts!r}, tok))",
    }[route]
    script = (
        "import json, torch\n"
        "from transformers import AutoModel, AutoTokenizer\n"
        f"model = AutoModel.from_pretrained({str(folder)!r}, trust_remote_code=True).eval()\n"
        f"tok = AutoTokenizer.from_pretrained({str(folder)!r}, trust_remote_code=True)\n"
        f"{textwrap.dedent(check)}\n"
        "with torch.no_grad():\n"
        f"    vectors = {call}\n"
        "print(json.dumps(vectors.tolist()))\n"
    )
    return fresh_vectors(script, cwd)

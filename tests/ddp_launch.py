"""``accelerate launch`` of ddp_worker.py with 2 CPU processes (gloo), for the training tests of every family."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path


def launch_ddp(out: Path, train_args: list[str]) -> list[dict]:
    """Train with ``hf-tlaser train`` arguments ``train_args`` (their ``--output-dir`` is ``out``) under 2-process
    gloo DDP; returns each rank's record (weight checksum, planned and trained micro-batches)."""
    worker = Path(__file__).with_name("ddp_worker.py")
    cmd = [
        sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
        "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no", str(worker),
        "--use-cpu", *train_args,
    ]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"}, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return [json.loads((out / f"rank{rank}.json").read_text()) for rank in (0, 1)]

"""Run under ``accelerate launch --config_file docs/configs/accelerate_cpu_fsdp.yaml`` by test_distributed_fsdp:
``fsdp_worker.py ROOT STEP TRAIN_ARGS...`` trains the run of ``TRAIN_ARGS`` three times in one process group, into
``ROOT/ddp`` (the launcher's FSDP plugin turned off: DDP), ``ROOT/fsdp`` (FSDP2) and ``ROOT/resumed`` (FSDP2 resumed
from ``ROOT/fsdp/checkpoint-STEP``), then writes how each run was wrapped to ``ROOT/rank{rank}.json``."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch
from accelerate.state import AcceleratorState, PartialState
from accelerate.utils import DistributedType, FullyShardedDataParallelPlugin

from hf_tlaser.training.cli import parse_args, train


def keep_fsdp_on_cpu() -> None:
    """Let accelerate run its FSDP plugin on CPU processes. accelerate 1.15 switches to FSDP only from a GPU-like
    distributed type (``AcceleratorState.__init__``: MULTI_GPU, MULTI_XPU, ...); from MULTI_CPU (gloo) it drops the
    plugin without a word and the Trainer wraps the model in DDP. This does for MULTI_CPU what it does for MULTI_GPU."""
    init = AcceleratorState.__init__

    def init_keeping_fsdp(
        self: AcceleratorState, *args, fsdp_plugin: FullyShardedDataParallelPlugin | None = None, **kwargs
    ) -> None:
        init(self, *args, fsdp_plugin=fsdp_plugin, **kwargs)
        if fsdp_plugin is not None and self.distributed_type == DistributedType.MULTI_CPU:
            self.distributed_type = PartialState._shared_state["distributed_type"] = DistributedType.FSDP
            if self._mixed_precision != "no":
                fsdp_plugin.set_mixed_precision(self._mixed_precision)
            self.fsdp_plugin = fsdp_plugin

    AcceleratorState.__init__ = init_keeping_fsdp


keep_fsdp_on_cpu()
root, step, train_args = Path(sys.argv[1]), sys.argv[2], sys.argv[3:]
use_fsdp = os.environ.pop("ACCELERATE_USE_FSDP")  # the Accelerator builds its FSDP plugin when this says "true"
runs = {
    "ddp": [],
    "fsdp": [],
    "resumed": ["--resume", str(root / "fsdp" / f"checkpoint-{step}")],
}
record = {}
for name, extra in runs.items():
    if name != "ddp":
        os.environ["ACCELERATE_USE_FSDP"] = use_fsdp
    trainer = train(parse_args([*train_args, "--output-dir", str(root / name), *extra]))
    record[name] = {
        "distributed_type": str(trainer.accelerator.distributed_type),
        "wrapper": type(trainer.model_wrapped).__name__,
        "world_size": trainer.args.world_size,
    }
(root / f"rank{trainer.args.process_index}.json").write_text(json.dumps(record))
torch.distributed.barrier()
torch.distributed.destroy_process_group()

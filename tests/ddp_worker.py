"""Run under ``accelerate launch`` by test_training: train a few steps, then write this rank's weight checksum and
its first micro-batches."""

import hashlib
import json
import sys
from pathlib import Path

import torch

from hf_tlaser.training.cli import parse_args, train

trainer = train(parse_args(sys.argv[1:]))
digest = hashlib.sha256()
for name, tensor in sorted(trainer.model.state_dict().items()):
    digest.update(name.encode())
    digest.update(tensor.detach().cpu().float().numpy().tobytes())
rank = trainer.args.process_index
record = {
    "world_size": trainer.args.world_size,
    "checksum": digest.hexdigest(),
    "batches": [rows for _, rows in trainer.batch_sampler.plan()[:3]],
}
(Path(trainer.args.output_dir) / f"rank{rank}.json").write_text(json.dumps(record))
torch.distributed.barrier()
torch.distributed.destroy_process_group()

"""Run under ``accelerate launch`` by test_training: train, then write this rank's weight checksum, its first planned
micro-batches (none with ``--streaming``) and a fingerprint of every micro-batch it trained on, by global step."""

import hashlib
import json
import sys
from pathlib import Path

import torch

from hf_tlaser.training.cli import parse_args, train
from hf_tlaser.training.trainer import LaserTrainer

seen: list[tuple[int, str]] = []
compute_loss = LaserTrainer.compute_loss


def recording_compute_loss(self, model, inputs, *args, **kwargs):
    if model.training:
        ids = inputs["input_ids"] if "input_ids" in inputs else inputs["input_ids_a"]  # cNV: the a-side sentences
        seen.append((self.state.global_step, hashlib.sha1(ids.numpy().tobytes()).hexdigest()[:16]))
    return compute_loss(self, model, inputs, *args, **kwargs)


LaserTrainer.compute_loss = recording_compute_loss
trainer = train(parse_args(sys.argv[1:]))
digest = hashlib.sha256()
for name, tensor in sorted(trainer.model.state_dict().items()):
    digest.update(name.encode())
    digest.update(tensor.detach().cpu().float().numpy().tobytes())
rank = trainer.args.process_index
sampler = trainer.batch_sampler  # None with --streaming: the micro-batches come from the stream
record = {
    "world_size": trainer.args.world_size,
    "checksum": digest.hexdigest(),
    "batches": None if sampler is None else [rows for _, rows in sampler.plan()[:3]],
    "micro_batches_per_epoch": None if sampler is None else len(sampler),
    "accumulation": trainer.args.gradient_accumulation_steps,
    "seen": seen,
}
(Path(trainer.args.output_dir) / f"rank{rank}.json").write_text(json.dumps(record))
torch.distributed.barrier()
torch.distributed.destroy_process_group()

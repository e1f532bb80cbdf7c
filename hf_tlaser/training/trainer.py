"""``transformers.Trainer`` for T-LASER / LASER: curriculum batch sampler, token-normalised loss, fairseq's
inverse-sqrt schedule, loss parts and tokens/s in the logs, and a wall-clock budget."""

from __future__ import annotations

import math
import time

import torch
from torch.optim.lr_scheduler import LambdaLR
from torch.utils.data import DataLoader, Sampler
from transformers import Trainer, TrainerCallback, TrainerControl, TrainerState, TrainingArguments

# per-micro-batch model outputs averaged into each log line (collapse signals of cT-LASER included)
MEAN_PARTS = ("loss_align", "d_p", "d_n", "hinge", "v_norm", "mean_cosine")
SUM_PARTS = ("loss_mt", "loss_distance")


def inverse_sqrt_schedule(optimizer: torch.optim.Optimizer, warmup_updates: int, warmup_init_lr: float) -> LambdaLR:
    """fairseq ``inverse_sqrt``: linear warm-up from ``warmup_init_lr`` to the peak lr over ``warmup_updates``, then
    ``lr * sqrt(warmup_updates / update)``."""
    peak = optimizer.param_groups[0]["lr"]
    start = min(warmup_init_lr / peak, 1.0)

    def factor(step: int) -> float:
        if step < warmup_updates:
            return start + (1.0 - start) * step / warmup_updates
        return math.sqrt(warmup_updates / max(step, 1))

    return LambdaLR(optimizer, factor)


class TimeBudgetCallback(TrainerCallback):
    """Stop (and save) once ``max_minutes`` of training have passed."""

    def __init__(self, max_minutes: float):
        self.max_seconds = max_minutes * 60
        self.start = None

    def on_train_begin(self, args, state, control, **kwargs):
        self.start = time.monotonic()

    def on_step_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs):
        if time.monotonic() - self.start > self.max_seconds:
            control.should_training_stop = True
            control.should_save = True
        return control


class LaserTrainer(Trainer):
    """Trainer whose micro-batches come from a curriculum ``batch_sampler`` (one language pair or one multi-way
    group set per micro-batch).

    The model's forward takes ``num_items_in_batch`` (the target tokens of the whole update, all processes), so the
    loss of every update is sum / tokens as in fairseq, whatever the accumulation and the number of processes.
    """

    def __init__(
        self,
        *args,
        batch_sampler: Sampler,
        warmup_init_lr: float = 1e-7,
        **kwargs,
    ):
        super().__init__(*args, **kwargs)
        self.batch_sampler = batch_sampler
        self.warmup_init_lr = warmup_init_lr
        self._parts: dict[str, float] = {}
        self._part_steps = 0
        self._tokens = 0
        self._last_log_time = time.monotonic()

    def get_train_dataloader(self) -> DataLoader:
        loader = DataLoader(
            self.train_dataset,
            batch_sampler=self.batch_sampler,
            collate_fn=self.data_collator,
            num_workers=self.args.dataloader_num_workers,
            pin_memory=self.args.dataloader_pin_memory,
        )
        prepared = self.accelerator.prepare(loader)
        # the sampler is already rank-aware: make accelerate's sharding wrapper a passthrough
        shard = getattr(prepared, "batch_sampler", None)
        if shard is not None and getattr(shard, "batch_sampler", None) is self.batch_sampler:
            shard.num_processes, shard.process_index = 1, 0
        return prepared

    def create_scheduler(self, num_training_steps: int, optimizer: torch.optim.Optimizer | None = None):
        if self.lr_scheduler is None:
            self.lr_scheduler = inverse_sqrt_schedule(
                optimizer or self.optimizer, self.args.warmup_steps, self.warmup_init_lr
            )
        return self.lr_scheduler

    def compute_loss(self, model, inputs, return_outputs: bool = False, num_items_in_batch=None):
        if model.training and not self._part_steps:
            self._last_log_time = time.monotonic()  # tokens/s counts from the first micro-batch after a log
        loss, outputs = super().compute_loss(model, inputs, return_outputs=True, num_items_in_batch=num_items_in_batch)
        if model.training:
            self._record(outputs)
        return (loss, outputs) if return_outputs else loss

    def _record(self, outputs) -> None:
        """Accumulate detached tensors (no device sync per micro-batch); they become floats at log time."""
        self._tokens = self._tokens + outputs.num_tokens.detach()
        self._part_steps += 1
        for name in MEAN_PARTS + SUM_PARTS:
            value = getattr(outputs, name, None)
            if value is not None:
                self._parts[name] = self._parts.get(name, 0.0) + value.detach().float()

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        """Add loss parts (per target token), collapse signals and target tokens/s to each training log."""
        if "loss" in logs and self._part_steps:
            now = time.monotonic()
            tokens = max(float(self._tokens), 1.0)
            for name in SUM_PARTS:
                if name in self._parts:
                    logs[f"{name}_per_token"] = round(float(self._parts[name]) / tokens, 4)
            for name in MEAN_PARTS:
                if name in self._parts:
                    logs[name] = round(float(self._parts[name]) / self._part_steps, 4)
            logs["tokens_per_second"] = round(float(self._tokens) / max(now - self._last_log_time, 1e-9), 1)
            self._parts, self._part_steps, self._tokens, self._last_log_time = {}, 0, 0, now
        super().log(logs, start_time)

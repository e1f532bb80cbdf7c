"""``transformers.Trainer`` for T-LASER / LASER: curriculum batch sampler, token-normalised loss, fairseq's
inverse-sqrt schedule, loss parts and tokens/s in the logs, and a wall-clock budget."""

from __future__ import annotations

import json
import logging
import math
import time
from pathlib import Path

import torch
from accelerate.data_loader import prepare_data_loader
from safetensors.torch import load_file, save_file
from torch.optim.lr_scheduler import LambdaLR
from torch.utils.data import DataLoader, Sampler
from transformers import Trainer, TrainerCallback, TrainerControl, TrainerState, TrainingArguments
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from hf_tlaser.models.common.losses import NegativeMemory, distill_loss

logger = logging.getLogger(__name__)

# per-micro-batch model outputs put into each log line: MEAN parts are averaged over the micro-batches that have
# them (collapse signals of cT-LASER included), SUM parts are divided by the target tokens, COUNT parts are summed
MEAN_PARTS = (
    "loss_align",
    "loss_sim",
    "loss_generative",
    "loss_smlm",
    "loss_mlm",
    "loss_xtr",
    "d_p",
    "d_n",
    "hinge",
    "v_norm",
    "mean_cosine",
    "centered_cosine",
    "loss_distill",
    "distill_cosine",
)
SUM_PARTS = ("loss_mt", "loss_distance")
COUNT_PARTS = ("skipped_pair_losses",)
DISTILL_INPUTS = ("distill_input_ids", "distill_attention_mask", "distill_targets")
"""Batch keys of ``--teacher`` runs: every sentence of the micro-batch in encoder format and the teacher's vector of
its pivot text; the trainer takes them out of the batch before the model's forward."""


LR_SCHEDULES = ("inverse_sqrt", "step")
"""``Recipe.lr_schedule`` values: fairseq's ``inverse_sqrt`` decay, or ``step`` (hold the peak, then divide by 10)."""


def _warmup(step: int, warmup_updates: int, start: float) -> float:
    """Linear warm-up factor from ``start`` to 1 over ``warmup_updates`` updates."""
    return start + (1.0 - start) * step / warmup_updates


def _warmup_start(optimizer: torch.optim.Optimizer, warmup_init_lr: float) -> float:
    """The warm-up's first factor: ``warmup_init_lr`` over the highest peak lr of the parameter groups."""
    return min(warmup_init_lr / max(group["lr"] for group in optimizer.param_groups), 1.0)


def inverse_sqrt_schedule(optimizer: torch.optim.Optimizer, warmup_updates: int, warmup_init_lr: float) -> LambdaLR:
    """fairseq ``inverse_sqrt``: linear warm-up from ``warmup_init_lr`` to the peak lr over ``warmup_updates``, then
    ``lr * sqrt(warmup_updates / update)``.

    ``warmup_updates=0`` means no warm-up: the peak lr at the first update, then ``lr / sqrt(update)`` (fairseq's
    formula with a warm-up of one update; fairseq itself would keep the lr at 0).
    """
    start = _warmup_start(optimizer, warmup_init_lr)
    decay_from = max(warmup_updates, 1)

    def factor(step: int) -> float:
        if step < warmup_updates:
            return _warmup(step, warmup_updates, start)
        return math.sqrt(decay_from / max(step, 1))

    return LambdaLR(optimizer, factor)


def step_schedule(
    optimizer: torch.optim.Optimizer, warmup_updates: int, warmup_init_lr: float, step_at: int, gamma: float = 0.1
) -> LambdaLR:
    """LDT's schedule (Mao et al. 2021, sec. 4.1, and the authors' code): linear warm-up from ``warmup_init_lr`` to
    the peak lr over ``warmup_updates``, the peak held until update ``step_at``, then ``gamma`` x the peak."""
    start = _warmup_start(optimizer, warmup_init_lr)

    def factor(step: int) -> float:
        held = _warmup(step, warmup_updates, start) if step < warmup_updates else 1.0
        return held * (gamma if step >= step_at else 1.0)

    return LambdaLR(optimizer, factor)


class TimeBudgetCallback(TrainerCallback):
    """Safety stop: stop (and save) once ``max_minutes`` of training have passed, saying after how many updates."""

    def __init__(self, max_minutes: float):
        self.max_seconds = max_minutes * 60
        self.start = None

    def on_train_begin(self, args, state, control, **kwargs):
        self.start = time.monotonic()

    def on_step_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs):
        if time.monotonic() - self.start > self.max_seconds and state.global_step < state.max_steps:
            control.should_training_stop = True
            control.should_save = True
            logger.warning(
                "stopped by --max-minutes after %d of %d updates (%.1f minutes)",
                state.global_step,
                state.max_steps,
                self.max_seconds / 60,
            )
        return control


class FreezeEncoderCallback(TrainerCallback):
    """``--freeze-encoder-steps N``: nothing of ``model.encoder`` changes during the first N updates, so that a decoder
    at random init does not send noise into a pretrained encoder. ``encoder.frozen`` (its forward builds no graph, so
    the backward through it costs nothing), and its parameters without ``requires_grad``: a weight it shares with the
    decoder (a tied output layer) gets no gradient through the decoder either, and the optimizer, which skips a
    parameter whose ``grad`` is None, moves none of them (no weight decay). Set from the update count at every update
    (after the optimizer is built with every parameter), so a resumed run freezes exactly as the uninterrupted one;
    the model is left trainable at the end."""

    def __init__(self, steps: int) -> None:
        self.steps = steps
        self.trainable: list[torch.nn.Parameter] | None = None

    def freeze(self, model: torch.nn.Module, frozen: bool) -> None:
        """Freeze (or release) ``model.encoder``: its ``frozen`` flag and the parameters it trains."""
        encoder = model.encoder
        if self.trainable is None:  # the encoder's parameters that train at all (a part frozen for good stays so)
            self.trainable = [p for p in encoder.parameters() if p.requires_grad]
        encoder.frozen = frozen
        for parameter in self.trainable:
            parameter.requires_grad_(not frozen)

    def on_step_begin(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs):
        frozen = state.global_step < self.steps
        if kwargs["model"].encoder.frozen != frozen:
            logger.info("update %d: encoder %s", state.global_step, "frozen" if frozen else "trained from here")
        self.freeze(kwargs["model"], frozen)
        return control

    def on_train_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs):
        self.freeze(kwargs["model"], False)
        return control


STREAM_STATE = "stream_state_rank{rank}.json"
"""``--streaming``: each rank's stream state in a checkpoint folder (``StreamingPairBatches.state``)."""


class StreamStateCallback(TrainerCallback):
    """``--streaming``: write each rank's stream state next to the checkpoint the Trainer just saved, as it was
    before the first micro-batch not trained yet (the loader runs ahead of training)."""

    def __init__(self, stream) -> None:
        self.stream = stream

    def on_save(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs):
        folder = Path(args.output_dir) / f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}"
        folder.mkdir(parents=True, exist_ok=True)
        consumed = state.global_step * args.gradient_accumulation_steps
        path = folder / STREAM_STATE.format(rank=args.process_index)
        path.write_text(json.dumps(self.stream.state(consumed)), encoding="utf-8")
        return control


MEMORY_STATE = "negative_memory_rank{rank}.safetensors"
"""``negative_memory_size`` > 0: each rank's cross-batch memory in a checkpoint folder (``NegativeMemory.state``)."""


class NegativeMemoryCallback(TrainerCallback):
    """A model with a cross-batch memory (``config.negative_memory_size``): write each rank's memory next to the
    checkpoint the Trainer just saved, and put it back into the model when the run resumes from ``checkpoint``, so
    that the resumed run's negatives are the uninterrupted run's (a checkpoint without the file: a warning, and the
    memory fills again). The file is written whole or not at all (a sibling, then renamed); a damaged one is refused
    before the run starts (``resume.check_checkpoint``)."""

    def __init__(self, checkpoint: Path | None) -> None:
        self.checkpoint = checkpoint

    def on_train_begin(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs):
        if self.checkpoint is None:
            return control
        path = self.checkpoint / MEMORY_STATE.format(rank=args.process_index)
        if not path.is_file():
            logger.warning("--resume %s: no %s; the negative memory fills again from empty", self.checkpoint, path.name)
            return control
        model = kwargs["model"]
        model.negative_memory = NegativeMemory(model.config.negative_memory_size).to(model.device)
        model.negative_memory.load_state(load_file(path))
        logger.info("--resume: %d entries of the negative memory restored", len(model.negative_memory))
        return control

    def on_save(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs):
        memory = getattr(kwargs["model"], "negative_memory", None)
        if memory is not None:
            folder = Path(args.output_dir) / f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}"
            folder.mkdir(parents=True, exist_ok=True)
            path = folder / MEMORY_STATE.format(rank=args.process_index)
            partial = path.with_name(f"{path.name}.partial")  # a run killed while writing leaves no half file
            save_file({k: v.cpu() for k, v in memory.state().items()}, partial)
            partial.replace(path)
        return control


class LogParts:
    """Model outputs of the micro-batches since the last training log, kept as detached tensors (no device sync per
    micro-batch); a part absent from some micro-batches is averaged over those that had it. A training log is shown
    in its ``compact`` form; its full record goes to the run's ``FILE``."""

    SHORT_NAMES = {
        "loss": "loss",
        "loss_mt_per_token": "mt",
        "loss_distance_per_token": "dist",
        "loss_align": "align",
        "loss_sim": "sim",
        "loss_generative": "gen",
        "loss_smlm": "smlm",
        "loss_mlm": "mlm",
        "loss_xtr": "xtr",
        "loss_distill": "distill",
        "mean_cosine": "cos",
        "centered_cosine": "ccos",
        "distill_cosine": "tcos",
        "tokens_per_second": "tok/s",
        "learning_rate": "lr",
    }
    """The entries of a training log shown beside the progress bar (loss parts, collapse signals, tokens/s, lr), by
    their short names."""
    FILE = "train_log.jsonl"
    """The run's log in its output dir: every log record in full, one JSON object a line (``trainer_state.json``'s
    ``log_history`` as it grows)."""

    @classmethod
    def compact(cls, logs: dict[str, float]) -> dict[str, float]:
        """The ``SHORT_NAMES`` entries of a training log, by short name, to 4 significant digits."""
        return {short: float(f"{logs[name]:.4g}") for name, short in cls.SHORT_NAMES.items() if name in logs}

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        self.steps = self.pairs = 0
        self.tokens: torch.Tensor | int = 0
        self.sums: dict[str, torch.Tensor] = {}
        self.counts: dict[str, int] = {}

    def __bool__(self) -> bool:
        return self.steps > 0

    def add(self, outputs, extra: dict[str, torch.Tensor] | None = None) -> None:
        """Record one micro-batch's ``num_tokens``, translation pairs (sentence embeddings) and the parts it has
        (``extra``: parts computed outside the model, the distillation's)."""
        extra = extra or {}
        self.steps += 1
        self.tokens = self.tokens + outputs.num_tokens.detach()
        self.pairs += outputs.sentence_embedding.shape[0]
        for name in MEAN_PARTS + SUM_PARTS + COUNT_PARTS:
            value = extra.get(name, getattr(outputs, name, None))
            if value is not None:
                self.sums[name] = self.sums.get(name, 0.0) + value.detach().float()
                self.counts[name] = self.counts.get(name, 0) + 1

    def flush(self, seconds: float) -> dict[str, float]:
        """The log entries of the window (``{}`` if empty): SUM parts per target token, MEAN parts averaged, COUNT
        parts summed, this process's translation ``pairs`` and target tokens per second over ``seconds``; then start
        a new window."""
        if not self.steps:
            return {}
        tokens = float(self.tokens)
        logs: dict[str, float] = {}
        for name, total in self.sums.items():
            if name in SUM_PARTS:
                logs[f"{name}_per_token"] = round(float(total) / max(tokens, 1.0), 4)
            elif name in MEAN_PARTS:
                logs[name] = round(float(total) / self.counts[name], 4)
            else:
                logs[name] = int(total)
        logs["tokens_per_second"] = round(tokens / max(seconds, 1e-9), 1)
        logs["pairs"] = self.pairs
        self._reset()
        return logs


class LaserTrainer(Trainer):
    """Trainer whose micro-batches come from a curriculum ``batch_sampler`` (one language pair or one multi-way
    group set per micro-batch), or from an iterable train dataset of micro-batches (``--streaming``, no sampler).

    The model's forward takes ``num_items_in_batch`` (the target tokens of the whole update, all processes), so the
    loss of every update is sum / tokens as in fairseq, whatever the accumulation and the number of processes.
    """

    def __init__(
        self,
        *args,
        batch_sampler: Sampler | None,
        warmup_init_lr: float = 1e-7,
        lr_schedule: str = "inverse_sqrt",
        lr_step_epochs: float = 3.0,
        distill_weight: float = 1.0,
        encoder_lr: float | None = None,
        **kwargs,
    ):
        super().__init__(*args, **kwargs)
        self.encoder_lr = encoder_lr
        if lr_schedule not in LR_SCHEDULES:
            raise ValueError(f"lr_schedule={lr_schedule!r}; expected one of {LR_SCHEDULES}")
        if lr_schedule == "step" and batch_sampler is None:
            raise ValueError("the step schedule counts epochs: it needs a batch sampler (not a stream)")
        self.batch_sampler = batch_sampler
        self.distill_weight = distill_weight
        self.warmup_init_lr = warmup_init_lr
        self.lr_schedule, self.lr_step_epochs = lr_schedule, lr_step_epochs
        self._parts = LogParts()
        self._last_log_time = time.monotonic()

    def get_train_dataloader(self) -> DataLoader:
        """The curriculum sampler's micro-batches, on this process's device.

        The sampler is already rank-aware, so the loader is prepared as for one process: accelerate adds no sharding
        wrapper, and the Trainer's ``set_epoch`` and its resume skip (``skip_first_batches``) act on the sampler
        itself. Behind a sharding wrapper ``set_epoch`` got lost on resume and a DDP run resumed past epoch 0
        replayed epoch 0. Without a batch sampler (``--streaming``) the dataset is an iterable of micro-batches,
        already split between the ranks.
        """
        if self.batch_sampler is not None:
            batching = {"batch_sampler": self.batch_sampler}
        else:  # a stream of micro-batches; its own generator keeps the loader's seed draw off the global RNG, which a
            # resume restores before the loader starts (else the dropout masks after a resume shift by one draw)
            batching = {"batch_size": None, "generator": torch.Generator()}
        loader = DataLoader(
            self.train_dataset,
            collate_fn=self.data_collator,
            num_workers=self.args.dataloader_num_workers,
            pin_memory=self.args.dataloader_pin_memory,
            **batching,
        )
        return prepare_data_loader(
            loader,
            self.accelerator.device,
            num_processes=1,
            process_index=0,
            put_on_device=self.accelerator.device_placement,
            rng_types=self.accelerator.rng_types.copy(),
            non_blocking=self.accelerator.non_blocking,
            dispatch_batches=False,  # every rank reads its own share of a stream (never rank 0 for all)
        )

    def _run_epoch(self, *args, **kwargs):
        # the epoch goes to the sampler itself, whatever wraps it (the resume skip, accelerate's loaders). A private
        # Trainer method: no public hook gives the epoch number before the epoch's iterator is built (a callback's
        # on_epoch_begin sees state.epoch, a float, fractional after a resume)
        if self.batch_sampler is not None:
            self.batch_sampler.set_epoch(kwargs["epoch"])
        return super()._run_epoch(*args, **kwargs)

    def create_optimizer(self, model=None) -> torch.optim.Optimizer:
        """The Trainer's optimizer; with ``encoder_lr`` each of its parameter groups split in two, the weights of
        ``model.encoder`` at ``encoder_lr`` (the schedule scales both alike)."""
        optimizer = super().create_optimizer(model)
        if self.encoder_lr is None or getattr(self, "_encoder_groups", False):
            return optimizer
        encoder = {id(p) for p in (self.model if model is None else model).encoder.parameters()}
        groups = []
        for group in optimizer.param_groups:
            for mine, lr in ((False, group["lr"]), (True, self.encoder_lr)):
                params = [p for p in group["params"] if (id(p) in encoder) == mine]
                if params:
                    groups.append({**group, "params": params, "lr": lr})
        optimizer.param_groups = groups
        self._encoder_groups = True
        return optimizer

    def create_scheduler(self, num_training_steps: int, optimizer: torch.optim.Optimizer | None = None):
        optimizer = optimizer or self.optimizer
        if self.lr_scheduler is None and self.lr_schedule == "step":
            per_epoch = max(len(self.batch_sampler) // self.args.gradient_accumulation_steps, 1)
            step_at = max(round(self.lr_step_epochs * per_epoch), 1)
            logger.info(
                "lr schedule: step, lr / 10 from update %d (%g epochs of %d updates)",
                step_at,
                self.lr_step_epochs,
                per_epoch,
            )
            self.lr_scheduler = step_schedule(optimizer, self.args.warmup_steps, self.warmup_init_lr, step_at)
        elif self.lr_scheduler is None:
            self.lr_scheduler = inverse_sqrt_schedule(optimizer, self.args.warmup_steps, self.warmup_init_lr)
        return self.lr_scheduler

    def compute_loss(self, model, inputs, return_outputs: bool = False, num_items_in_batch=None):
        if model.training and not self._parts:
            self._last_log_time = time.monotonic()  # tokens/s counts from the first micro-batch after a log
        distill = [inputs.pop(key) for key in DISTILL_INPUTS] if DISTILL_INPUTS[0] in inputs else None
        loss, outputs = super().compute_loss(model, inputs, return_outputs=True, num_items_in_batch=num_items_in_batch)
        extra = {}
        if distill is not None:
            term, extra = self.distill_term(model, *distill, outputs.num_tokens, num_items_in_batch)
            loss = loss + term
        if model.training:
            self._parts.add(outputs, extra)
        return (loss, outputs) if return_outputs else loss

    def distill_term(self, model, input_ids, attention_mask, targets, num_tokens, num_items_in_batch):
        """The ``--teacher`` term of one micro-batch, scaled as the model's own loss: ``distill_weight`` x MSE of the
        student's sentence vectors (``model.encoder``'s ``pooler_output``, what ``encode`` returns) against the
        teacher's, weighted by the micro-batch's share of the update's target tokens (as the alignment loss), and by
        the processes where the Trainer averages the tokens across them. Returns (term, loss parts)."""
        encoder = self.accelerator.unwrap_model(model).encoder
        student = encoder(input_ids=input_ids, attention_mask=attention_mask).pooler_output
        mse, cosine = distill_loss(student, targets)
        term = self.distill_weight * mse
        if num_items_in_batch is not None:
            term = term * num_tokens / num_items_in_batch
            if self.args.average_tokens_across_devices:
                term = term * self.accelerator.num_processes
        return term, {"loss_distill": mse.detach(), "distill_cosine": cosine}

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        """Add loss parts (per target token), collapse signals, skipped pair losses, translation pairs and target
        tokens/s to each training log. The callbacks (the progress bar) get a training log's ``LogParts.compact``
        form; the full record goes to ``trainer_state.json``'s log history and, on the main process, to
        ``LogParts.FILE`` in the output dir (written again from the log history at a process's first log: a resumed
        run keeps its records up to its checkpoint, a run started over drops the old ones)."""
        if "loss" not in logs:
            super().log(logs, start_time)
        else:
            if self._parts:
                now = time.monotonic()
                logs.update(self._parts.flush(now - self._last_log_time))
                self._last_log_time = now
            shown = LogParts.compact(logs)
            keys = set(shown)
            super().log(shown, start_time)
            added = {key: value for key, value in self.state.log_history[-1].items() if key not in keys}
            self.state.log_history[-1] = {**logs, **added}  # epoch and step, added by Trainer.log
        if not self.is_world_process_zero():
            return
        started = getattr(self, "_log_file_started", False)
        path = Path(self.args.output_dir) / LogParts.FILE
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a" if started else "w", encoding="utf-8") as file:
            records = self.state.log_history[-1:] if started else self.state.log_history
            file.writelines(json.dumps(record) + "\n" for record in records)
        self._log_file_started = True

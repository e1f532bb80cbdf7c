"""A run's output dir and the life cycle every family's training shares.

The output dir: the guard (a folder holding a run or other files needs ``--resume`` or ``--overwrite``),
``--overwrite``'s removal of the previous run's own files, and the run's record (``hf_tlaser_train.json``):
read-only checks, cheap, made while the run is planned (a resumed run's checkpoint is ``resume.py``'s).

The life cycle, after the plan:

``Run.open(plan)`` (threads, precision, seed, the ``TrainingArguments``, built once from the plan and never changed
after: they join the process group; the output dir emptied under ``--overwrite`` and created, the record started) ->
``Run.plan_batches`` (this rank's curriculum sampler) -> ``Run.fit`` (the ``LaserTrainer``, trained from the
checkpoint, the model (in the start's dtype, without pickles), trainer state, tokenizer and record saved).

A family brings its model (whose forward returns its loss), its dataset and collator, and adds its own entries to
``Run.record``; ``Run.fit`` is the one place where every family's trainer is built, so a run-wide addition to the
training (a callback, or a loss term every family gets, e.g. a teacher's vectors for each batch) goes there.
"""

from __future__ import annotations

import json
import logging
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from accelerate.utils import get_int_from_env, parse_flag_from_env
from torch.utils.data import Dataset, Sampler
from transformers import (
    PreTrainedModel,
    PreTrainedTokenizerBase,
    TrainerCallback,
    TrainingArguments,
    set_seed,
)
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR, get_last_checkpoint

from hf_tlaser.data import PairBatchSampler
from hf_tlaser.encoders.identity import folder_fingerprint
from hf_tlaser.errors import UsageError
from hf_tlaser.guards import refuse_outputs_over_inputs
from hf_tlaser.hardware import PrecisionChoice, configure_threads, resolve_precision
from hf_tlaser.model_folders import ADD_LANGUAGE_RECORD, model_folder
from hf_tlaser.tokenization import TOKEN_REPORT, save_tokenizer
from hf_tlaser.training.presets import Recipe
from hf_tlaser.training.resolve import RunPlan
from hf_tlaser.training.spec import INIT_HINT, RunSpec
from hf_tlaser.training.trainer import (
    FreezeEncoderCallback,
    LaserTrainer,
    NegativeMemoryCallback,
    TimeBudgetCallback,
)

logger = logging.getLogger("hf_tlaser.train")

RECORD = "hf_tlaser_train.json"
"""The run's record in its output dir: arguments, recipe, precision and (once finished) the entries it wrote."""
RUN_FILES = (
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "pytorch_model.bin",
    "training_args.bin",
    "trainer_state.json",
    "train_log.jsonl",
    "hf_tlaser_train.json",
    ADD_LANGUAGE_RECORD,
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "chat_template.jinja",
    TOKEN_REPORT,
)
"""Files a run writes into its output dir besides ``checkpoint-*`` folders and those listed under ``outputs`` in its
record (what ``--overwrite`` may remove)."""
START = "start"
"""The record's entry of the ``--init-from`` start as the run resolved it (``start_record``): what ``hf-tlaser merge``
merges toward by default, and what a resumed run must start from."""
FORCE = "force"
"""``--resume force``: continue the last checkpoint (as ``auto``) even where the plan differs from the run's."""
INPUT_FLAGS = ("init_from", "teacher", "cluster_model", "tokenizer", "nmt_pair")
"""The flags whose model folders a run reads: its output dir is never one of them, nor holds one."""
WORLD_SIZE_ENV = ["WORLD_SIZE", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE"]
"""Where a launcher (accelerate, torchrun, MPI) states its number of processes, read as accelerate reads it."""


def read_record(out: Path) -> dict | None:
    """The record of the run in ``out`` (None if there is none or it does not parse)."""
    try:
        return json.loads((out / RECORD).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def write_record(out: Path, record: dict) -> None:
    (out / RECORD).write_text(json.dumps(record, indent=2, default=str))


def recorded_outputs(out: Path) -> list[str]:
    """The entries a finished run in ``out`` listed as its own (none for a killed or older run)."""
    try:
        return list((read_record(out) or {}).get("outputs", []))
    except (AttributeError, TypeError):
        return []


def split_output_dir(out: Path) -> tuple[list[Path], list[Path]]:
    """(the entries a run wrote, every other entry) of ``out``, sorted by name."""
    entries = sorted(out.iterdir()) if out.is_dir() else []
    names = set(RUN_FILES) | set(recorded_outputs(out))
    own = [e for e in entries if e.name in names or (e.is_dir() and e.name.startswith(f"{PREFIX_CHECKPOINT_DIR}-"))]
    return own, [e for e in entries if e not in own]


def _names(paths: list[Path], limit: int = 8) -> str:
    names = [p.name for p in paths]
    return ", ".join(names[:limit]) + (f" and {len(names) - limit} more" if len(names) > limit else "")


def start_record(spec: str) -> dict:
    """``--init-from SPEC`` as this run resolves it: the SPEC, the folder or Hub commit it names (``model_folder``'s
    identity: an absolute path, or ``hub:ID@COMMIT``) and the fingerprint of its files (``folder_fingerprint``: by
    content, so that a copy elsewhere has the same one)."""
    folder, identity = model_folder(spec, f"--init-from {spec!r}", hint=INIT_HINT)
    return {"init_from": spec, "identity": identity, "fingerprint": folder_fingerprint(folder)}


def input_folders(spec: RunSpec) -> dict[str, Path]:
    """The local folders among the run's model inputs (``INPUT_FLAGS``; a Hub id is none; ``--nmt-pair`` names two),
    by flag."""
    inputs = {}
    for name in INPUT_FLAGS:
        flag, values = f"--{name.replace('_', '-')}", str(getattr(spec, name) or "")
        for value in values.split(",") if name == "nmt_pair" else [values]:
            if value and Path(value).expanduser().exists():
                inputs[flag if name != "nmt_pair" else f"{flag} {value}"] = Path(value).expanduser()
    return inputs


def check_output_dir(spec: RunSpec) -> Path | None:
    """Refuse an output dir that holds a run (or other files) unless ``--resume``/``--overwrite``, and one that is,
    or holds, a model the run reads (``input_folders``), whatever the flags; return the checkpoint to resume from,
    if any."""
    out = spec.out
    if out.exists() and not out.is_dir():
        raise UsageError(f"--output-dir {out} is a file; give a folder")
    if spec.resume and spec.overwrite:
        raise UsageError("--resume continues the run in --output-dir and --overwrite replaces it: give one of them")
    refuse_outputs_over_inputs({"--output-dir": out}, input_folders(spec))
    own, other = split_output_dir(out)
    if spec.resume in ("auto", FORCE):
        last = get_last_checkpoint(str(out)) if out.is_dir() else None
        if last is not None:
            return Path(last)
        if own or other:
            raise UsageError(
                f"--resume {spec.resume}: {out} holds no {PREFIX_CHECKPOINT_DIR}-* folder to resume from "
                f"({_names(own + other)}); pass --overwrite to start a new run there, or another --output-dir"
            )
        logger.info("--resume %s: no checkpoint in %s yet, starting a new run", spec.resume, out)
        return None
    if spec.resume:
        checkpoint = Path(spec.resume)
        if not checkpoint.is_dir():
            raise UsageError(f"--resume {checkpoint}: no such checkpoint folder")
        return checkpoint
    if own and not spec.overwrite:
        raise UsageError(
            f"--output-dir {out} already holds a run ({_names(own)}): pass --resume auto to continue it, "
            f"or --overwrite to replace it, or choose another --output-dir"
        )
    if other and not spec.overwrite:
        raise UsageError(
            f"--output-dir {out} is not empty ({_names(other)}): choose an empty folder, or pass --overwrite "
            f"to write the run next to these files (they are kept)"
        )
    return None


def remove_previous_run(out: Path) -> None:
    """``--overwrite``: delete the previous run's own outputs (logged); other files stay (logged too)."""
    own, other = split_output_dir(out)
    if own:
        logger.warning("--overwrite: removing the previous run's outputs in %s: %s", out, _names(own, limit=50))
    for path in own:
        shutil.rmtree(path) if path.is_dir() else path.unlink()
    if other:
        logger.info("--overwrite: keeping %d other file(s) in %s: %s", len(other), out, _names(other))


def run_precision(spec: RunSpec) -> PrecisionChoice:
    """The run's precision on its device (``--precision``; auto: what this CPU or GPU runs natively); sets and logs
    the torch threads, logs the precision chosen."""
    logger.info("torch threads: %d", configure_threads())
    precision = resolve_precision(spec.precision, "cpu" if uses_cpu(spec) else "cuda")
    logger.info("precision: %s (%s)", precision.precision, precision.reason)
    return precision


def uses_cpu(spec: RunSpec) -> bool:
    """Whether the run trains on CPU (``--use-cpu``, or no GPU)."""
    return spec.use_cpu or not torch.cuda.is_available()


def training_arguments(
    spec: RunSpec,
    precision: PrecisionChoice | None,
    output_dir: Path,
    recipe: Recipe,
    max_steps: int,
    *,
    frozen: bool = False,
) -> TrainingArguments:
    """The one place where ``TrainingArguments`` are built: ``recipe`` for ``max_steps`` updates into ``output_dir``
    with the run's device, seed, logging and checkpoints (``spec``) and ``precision`` (None: the default fp32); the
    micro-batches per update and process that reach the recipe's ``update_tokens`` for the launcher's number of
    processes; ``--streaming``: the data continues from the stream's state, not a replay; ``frozen``: some updates
    leave the encoder without gradients (DDP must look for unused parameters). They join the process group (under a
    launcher) and are never changed after."""
    world = get_int_from_env(WORLD_SIZE_ENV, 1)
    training_args = TrainingArguments(
        output_dir=str(output_dir),
        max_steps=max_steps,
        per_device_train_batch_size=1,  # micro-batches come from the token-budget batch sampler
        gradient_accumulation_steps=max(1, round(recipe.update_tokens / (recipe.max_tokens * world))),
        learning_rate=recipe.learning_rate,
        warmup_steps=int(recipe.warmup_updates),
        weight_decay=recipe.weight_decay,
        adam_beta1=recipe.adam_betas[0],
        adam_beta2=recipe.adam_betas[1],
        max_grad_norm=recipe.max_grad_norm or 0.0,
        logging_steps=spec.logging_steps,
        logging_first_step=True,
        save_steps=spec.save_steps,
        save_total_limit=spec.save_total_limit,
        bf16=precision is not None and precision.bf16,
        fp16=precision is not None and precision.fp16,
        use_cpu=uses_cpu(spec),
        seed=spec.seed,
        report_to="none",
        remove_unused_columns=False,
        dataloader_num_workers=0,
        ignore_data_skip=spec.streaming,
        ddp_find_unused_parameters=True if frozen else None,
    )
    if training_args.world_size != world:
        raise RuntimeError(f"{training_args.world_size} processes joined, the launcher's environment says {world}")
    return training_args


def rank_batching(recipe: Recipe, training_args: TrainingArguments) -> dict:
    """The options every curriculum (sampler or stream) takes: this rank, the world size, the seed, the sentence cap
    and the batch composition."""
    return dict(
        seed=training_args.seed,
        max_sentences=recipe.max_sentences,
        composition=recipe.batch_composition,
        rank=training_args.process_index,
        world_size=training_args.world_size,
    )


def plan_batches(
    lengths: dict,
    recipe: Recipe,
    pairs: list,
    training_args: TrainingArguments,
    source: str,
    sampler_class: type = PairBatchSampler,
):
    """This rank's curriculum batch sampler for ``recipe``; UsageError naming ``source`` when the corpora give no
    batch."""
    options = rank_batching(recipe, training_args)
    try:
        return sampler_class(lengths, int(recipe.max_tokens), pairs, **options)
    except ValueError as err:
        raise UsageError(f"no training batches from {source}: {err}") from None


def cast_state(state: dict[str, torch.Tensor], dtype: torch.dtype) -> dict[str, torch.Tensor] | None:
    """``state`` with its floating tensors in ``dtype`` (tensors that share storage, tied weights, stay shared); None
    where a finite value does not fit ``dtype`` (it would load back as inf), with a warning naming the tensor."""
    cast, done = {}, {}
    for name, tensor in state.items():
        if not tensor.is_floating_point() or tensor.dtype == dtype:
            cast[name] = tensor
            continue
        key = (tensor.untyped_storage().data_ptr(), tensor.storage_offset(), tuple(tensor.shape), tensor.stride())
        if key not in done:
            done[key] = tensor.to(dtype)
            if not torch.equal(done[key].isfinite(), tensor.isfinite()):
                logger.warning("%s does not fit %s: the model is saved as trained (%s)", name, dtype, tensor.dtype)
                return None
        cast[name] = done[key]
    return cast


def save_published(
    model: PreTrainedModel, out: Path, dtype: torch.dtype | None, state: dict[str, torch.Tensor] | None = None
) -> None:
    """Save ``model`` into the run's folder, the one that gets published: its weights (``state``, by default its own
    state dict; under FSDP the full one that ``Accelerator.get_state_dict`` gathered) in ``dtype`` (a warm start's
    stored dtype, e.g. fp16) where they fit, while ``config.dtype`` stays the trained dtype, so that loaders with
    ``dtype="auto"`` (the default) upcast them and a CPU computes in float32 as before. No pickle: the Trainer's
    ``training_args.bin`` stays in the checkpoints, with everything else a resume reads."""
    state = model.state_dict() if state is None else state
    model.save_pretrained(out, state_dict=(cast_state(state, dtype) if dtype is not None else None) or state)


@dataclass
class Run:
    """An opened run: its plan, the Trainer settings built from it, what was in the output dir before (``present``:
    not this run's) and its record (written by the main process)."""

    plan: RunPlan
    precision: PrecisionChoice
    training_args: TrainingArguments
    present: set[str]
    record: dict

    @classmethod
    def open(cls, plan: RunPlan) -> Run:
        """Threads and precision (logged), the seed, the ``TrainingArguments`` (joining the process group under a
        launcher: every rank has passed the family's checks), then the output dir: the main process empties it
        first under ``--overwrite`` and creates it. Call it once the cheap checks have passed."""
        spec, recipe = plan.spec, plan.recipe
        precision = run_precision(spec)
        set_seed(spec.seed)
        out = spec.out
        training_args = training_arguments(
            spec, precision, out, recipe, spec.max_steps, frozen=plan.freeze_encoder_steps > 0
        )
        with training_args.main_process_first(local=False, desc="output dir"):
            if training_args.process_index == 0:
                if spec.overwrite:
                    remove_previous_run(out)
                out.mkdir(parents=True, exist_ok=True)
        present = {entry.name for entry in out.iterdir()} - set(recorded_outputs(out))
        record = {"args": spec.to_dict(), "recipe": asdict(recipe), "preset": plan.preset.name}
        record["precision"] = precision.to_dict()
        if spec.init_from and training_args.process_index == 0:
            record[START] = start_record(spec.init_from)
        return cls(plan, precision, training_args, present, record)

    @property
    def spec(self) -> RunSpec:
        return self.plan.spec

    @property
    def recipe(self) -> Recipe:
        return self.plan.recipe

    @property
    def out(self) -> Path:
        return self.plan.spec.out

    @property
    def main_process(self) -> bool:
        return self.training_args.process_index == 0

    def write_record(self) -> None:
        """Write the record into the output dir (main process only)."""
        if self.main_process:
            write_record(self.out, self.record)

    def plan_batches(self, lengths: dict, pairs: list, source: str, sampler_class: type = PairBatchSampler):
        """``plan_batches`` for this run's recipe and Trainer settings."""
        return plan_batches(lengths, self.recipe, pairs, self.training_args, source, sampler_class)

    def fit(
        self,
        model: PreTrainedModel,
        dataset: Dataset,
        collator,
        sampler: Sampler | None,
        *,
        callbacks: list[TrainerCallback] | None = None,
        tokenizer: PreTrainedTokenizerBase | None = None,
        distill_weight: float = 1.0,
        save_dtype: torch.dtype | None = None,
    ) -> LaserTrainer:
        """Train ``model`` on ``dataset`` (micro-batches of ``sampler``, or a stream of them without one) through
        ``collator`` for ``--max-steps`` updates, from the checkpoint if any (stopped by ``--max-minutes``); save the
        model, the trainer state and ``tokenizer`` into the output dir and, on the main process, list the entries
        the run wrote in its record (for a later ``--overwrite``). ``distill_weight``: of the teacher term of a
        collator that adds the teacher's vectors (``--teacher``). The plan's ``freeze_encoder_steps``: updates
        during which nothing of ``model.encoder`` changes; its ``encoder_lr``: the encoder's peak learning rate
        (None: the recipe's). ``save_dtype``: of the saved model's weights (``save_published``; None: as
        trained). Returns the trainer."""
        plan, minutes = self.plan, self.plan.spec.max_minutes
        callbacks = ([TimeBudgetCallback(minutes)] if minutes else []) + (callbacks or [])
        if getattr(model.config, "negative_memory_size", 0):
            callbacks.append(NegativeMemoryCallback(plan.checkpoint))
        if plan.freeze_encoder_steps:
            callbacks.append(FreezeEncoderCallback(plan.freeze_encoder_steps))
        trainer = LaserTrainer(
            model=model,
            args=self.training_args,
            train_dataset=dataset,
            data_collator=collator,
            batch_sampler=sampler,
            warmup_init_lr=self.recipe.warmup_init_lr,
            lr_schedule=self.recipe.lr_schedule,
            lr_step_epochs=self.recipe.lr_step_epochs,
            distill_weight=distill_weight,
            encoder_lr=plan.encoder_lr,
            callbacks=callbacks or None,
        )
        if parse_flag_from_env("ACCELERATE_USE_FSDP") and not trainer.is_fsdp_enabled:
            raise UsageError(
                "the accelerate config asks for FSDP, which accelerate runs only on GPUs: on CPU processes it would "
                "train under DDP; launch with docs/configs/accelerate_cpu_ddp.yaml instead"
            )
        out = self.out
        trainer.train(resume_from_checkpoint=None if plan.checkpoint is None else str(plan.checkpoint))
        # FSDP: every rank takes part in gathering the shards (only the main process gets them)
        state = trainer.accelerator.get_state_dict(trainer.model) if trainer.is_fsdp_enabled else None
        if self.main_process:
            save_published(trainer.accelerator.unwrap_model(trainer.model), out, save_dtype, state)
        trainer.save_state()
        if self.main_process:
            if tokenizer is not None:
                save_tokenizer(tokenizer, out)
            self.record["outputs"] = sorted({entry.name for entry in out.iterdir()} - self.present)
            write_record(out, self.record)
        return trainer

"""A run's output dir and the life cycle every family's training shares.

The output dir: the guard (a folder holding a run or other files needs ``--resume`` or ``--overwrite``),
``--overwrite``'s removal of the previous run's own files, the checks of a checkpoint to resume from, and the run's
record (``hf_tlaser_train.json``): read-only checks, cheap, made while the run is planned (``resolve``).

The life cycle, after the plan:

``Run.open`` (threads, precision, seed, ``TrainingArguments`` joining the process group, the output dir emptied
under ``--overwrite`` and created, the record started) -> ``Run.plan_batches`` (the micro-batches per update that
reach the recipe's ``update_tokens``, this rank's curriculum sampler) -> ``Run.fit`` (the ``LaserTrainer``, trained
from the checkpoint, the model (in the start's dtype, without pickles), trainer state, tokenizer and record saved).

A family brings its model (whose forward returns its loss), its dataset and collator, and adds its own entries to
``Run.record``; ``Run.fit`` is the one place where every family's trainer is built, so a run-wide addition to the
training (a callback, or a loss term every family gets, e.g. a teacher's vectors for each batch) goes there.
"""

from __future__ import annotations

import json
import logging
import shutil
import zipfile
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from accelerate.utils import parse_flag_from_env
from accelerate.utils.constants import FSDP_MODEL_NAME
from safetensors import SafetensorError, safe_open
from torch.utils.data import Dataset, Sampler
from transformers import (
    PretrainedConfig,
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
from hf_tlaser.training.presets import Preset, Recipe
from hf_tlaser.training.resolve import decide, plan_data
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
PLAN_FLAGS = (
    "corpora",
    "streaming",
    "shuffle_buffer",
    "seed",
    "teacher",
    "distill_weight",
    "cluster_model",
    "cluster_size",
    "cluster_pool",
    "init_layers",
    "freeze_word_embeddings",
    "freeze_layers",
    "pooling",
    "decoder_vocab",
    "freeze_encoder_steps",
    "encoder_lr",
)
"""The flags besides the family, preset, recipe, curriculum pairs, start and ``--set`` (the checkpoint's config) that
change what a run computes: a resumed run must ask for the values it was trained with (``check_resume``). Not
compared: the steps and time it trains for, logging, saving, precision and device, and where the corpora and caches
are."""


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


def check_checkpoint(checkpoint: Path) -> int:
    """Refuse a checkpoint folder with missing, truncated or corrupt files (named); return its global step."""
    state_file = checkpoint / "trainer_state.json"
    if not state_file.is_file():
        raise UsageError(f"--resume {checkpoint}: no trainer_state.json there, not a checkpoint folder")
    hint = f"resume from an earlier checkpoint (--resume {checkpoint.parent}/{PREFIX_CHECKPOINT_DIR}-N) instead"
    try:
        step = int(json.loads(state_file.read_text(encoding="utf-8"))["global_step"])
    except (ValueError, KeyError) as err:
        raise UsageError(f"{state_file} is truncated or corrupt ({err}); {hint}") from None
    saved_fsdp = any(checkpoint.glob(f"{FSDP_MODEL_NAME}*"))  # the Trainer reads only its launch mode's files
    if saved_fsdp != parse_flag_from_env("ACCELERATE_USE_FSDP"):
        saved, now = ("under FSDP", "without it") if saved_fsdp else ("without FSDP", "under FSDP")
        raise UsageError(
            f"--resume {checkpoint}: saved {saved}, resumed {now}; the Trainer cannot read another launch mode's "
            "checkpoint: resume with the accelerate config it was saved with"
        )
    weights = checkpoint / "model.safetensors"
    for path in [weights, *sorted(set(checkpoint.glob("*.safetensors")) - {weights})]:
        try:
            with safe_open(str(path), "pt") as handle:
                handle.keys()
        except (SafetensorError, OSError) as err:
            also = f", or delete {path.name} to resume without it" if path != weights else ""
            raise UsageError(f"{path} is truncated or corrupt ({' '.join(str(err).split())}); {hint}{also}") from None
    for path in sorted(checkpoint.glob("*.pt")) + sorted(checkpoint.glob("*.pth")):
        if not zipfile.is_zipfile(path):  # torch.save writes zip archives; a truncated one has no central directory
            raise UsageError(f"{path} is truncated or corrupt; {hint}")
    return step


def comparable(name: str, value: object) -> object:
    """A flag's value as the plan compares it: ``--corpora`` as its list of specs (a comma-separated string or a
    YAML list)."""
    if name == "corpora" and isinstance(value, str):
        return [part.strip() for part in value.split(",") if part.strip()]
    return value


def plan_differences(saved: dict, spec: RunSpec) -> list[str]:
    """What ``spec`` asks for that the run recorded in ``saved`` (its record) was not trained with: the ``PLAN_FLAGS``,
    the curriculum pairs (``--pairs``, else what ``--pivots`` make of the corpora), the recipe (the preset's with the
    recipe flags, as ``decide`` resolves it) and the start (its fingerprint where the run recorded one); each as
    ``--flag NOW (the run: THEN)``."""
    args, defaults = saved.get("args") or {}, RunSpec.defaults()
    differ = []
    then = ",".join((saved.get("data") or {}).get("pairs") or []) or args.get("pairs")
    pairs = ",".join("-".join(pair) for pair in plan_data(spec).pairs)
    if then and pairs != then:  # a run that recorded no pairs had its corpora's default curriculum
        differ.append(f"--pairs {pairs} (the run: {then})")
    for name in PLAN_FLAGS:  # a flag newer than the run's version: the run had its default
        now, then = comparable(name, getattr(spec, name)), comparable(name, args.get(name, defaults.get(name)))
        if now != then:
            differ.append(f"--{name.replace('_', '-')} {now} (the run: {then})")
    recipe = asdict(decide(spec).recipe)
    for name, then in (saved.get("recipe") or {}).items():
        now = recipe.get(name)
        if now != (tuple(then) if isinstance(now, tuple) and isinstance(then, list) else then):
            differ.append(f"--{name.replace('_', '-')} {now} (the run: {then})")
    start = saved.get(START)
    if start and spec.init_from:
        fingerprint = start_record(spec.init_from)["fingerprint"]
        if fingerprint != start["fingerprint"]:
            differ.append(f"--init-from {spec.init_from}: other files (the run: {start['identity']})")
    elif spec.init_from != args.get("init_from"):
        differ.append(f"--init-from {spec.init_from} (the run: {args.get('init_from')})")
    return differ


def check_resume(checkpoint: Path, spec: RunSpec) -> None:
    """Refuse to resume with another model family or preset than the run of ``checkpoint`` was trained with, and with
    another plan (``plan_differences``: data, batches, clusters, teacher, start, recipe; the model config, ``--set``'s
    negative memory included, is ``check_resume_config``'s) unless ``--resume force`` (a warning naming each
    difference)."""
    run_dir = checkpoint.parent
    record = run_dir / RECORD
    if not record.is_file():
        return
    saved = json.loads(record.read_text(encoding="utf-8"))
    args = saved["args"]
    asked = [f"--{flag} {getattr(spec, flag)}" for flag in ("model", "preset") if args[flag] != getattr(spec, flag)]
    if asked:
        raise UsageError(
            f"--resume {checkpoint}: this command asks for {' '.join(asked)}, but {run_dir} was trained with "
            f"--model {args['model']} --preset {args['preset']}; use those, or start a new run with --overwrite"
        )
    differ = plan_differences(saved, spec)
    if differ and spec.resume == FORCE:
        logger.warning(
            "--resume force: continuing %s with another plan than it was trained with: %s (the result is not an "
            "uninterrupted run's)",
            run_dir,
            "; ".join(differ),
        )
    elif differ:
        raise UsageError(
            f"--resume {checkpoint}: {run_dir} was trained with another plan: {'; '.join(differ)}; resume with the "
            f"run's values, or --resume {FORCE} to continue with these (the result then differs from an uninterrupted "
            "run's), or start a new run with --overwrite"
        )


def check_resume_config(checkpoint: Path, config: PretrainedConfig) -> None:
    """Refuse to resume with another model config (``--set`` values included) than the checkpoint's."""
    config_file = checkpoint / "config.json"
    if not config_file.is_file():
        raise UsageError(f"--resume {checkpoint}: no config.json there, not a model checkpoint")
    saved = json.loads(config_file.read_text(encoding="utf-8"))
    now = json.loads(config.to_json_string())
    ignored = {"transformers_version", "architectures", "dtype", "torch_dtype", "_name_or_path"}
    differ = [key for key in now if key not in ignored and key in saved and saved[key] != now[key]]
    if saved.get("model_type") != now.get("model_type") or differ:
        detail = "; ".join(f"{key}: {saved[key]} in the checkpoint, {now[key]} now" for key in differ)
        raise UsageError(
            f"--resume {checkpoint}: the model config differs from the checkpoint's config.json "
            f"({detail or 'model_type'}); resume with the same --model/--preset/--set, or start a new run"
        )


@dataclass
class RunOptions:
    """The Trainer settings of a run that do not come from the recipe (one set for every stage of a run)."""

    use_cpu: bool = True
    precision: PrecisionChoice | None = None
    seed: int = 1
    logging_steps: int = 10
    save_steps: int = 200
    save_total_limit: int = 2

    @classmethod
    def from_spec(cls, spec: RunSpec) -> RunOptions:
        """From the run's spec; sets and logs the torch threads, logs the precision chosen."""
        logger.info("torch threads: %d", configure_threads())
        use_cpu = spec.use_cpu or not torch.cuda.is_available()
        precision = resolve_precision(spec.precision, "cpu" if use_cpu else "cuda")
        logger.info("precision: %s (%s)", precision.precision, precision.reason)
        return cls(use_cpu, precision, spec.seed, spec.logging_steps, spec.save_steps, spec.save_total_limit)

    def training_arguments(self, output_dir: Path, recipe: Recipe, max_steps: int) -> TrainingArguments:
        """TrainingArguments of ``recipe`` for ``max_steps`` updates into ``output_dir`` (gradient accumulation is
        set once the world size is known: ``plan_batches``). Under a launcher this joins the process group."""
        return TrainingArguments(
            output_dir=str(output_dir),
            max_steps=max_steps,
            per_device_train_batch_size=1,  # micro-batches come from the token-budget batch sampler
            learning_rate=recipe.learning_rate,
            warmup_steps=int(recipe.warmup_updates),
            weight_decay=recipe.weight_decay,
            adam_beta1=recipe.adam_betas[0],
            adam_beta2=recipe.adam_betas[1],
            max_grad_norm=recipe.max_grad_norm or 0.0,
            logging_steps=self.logging_steps,
            logging_first_step=True,
            save_steps=self.save_steps,
            save_total_limit=self.save_total_limit,
            bf16=self.precision is not None and self.precision.bf16,
            fp16=self.precision is not None and self.precision.fp16,
            use_cpu=self.use_cpu,
            seed=self.seed,
            report_to="none",
            remove_unused_columns=False,
            dataloader_num_workers=0,
        )


def rank_batching(recipe: Recipe, training_args: TrainingArguments) -> dict:
    """Set the micro-batches per update and process that reach the recipe's ``update_tokens``; return the options
    every curriculum (sampler or stream) takes: this rank, the world size, the seed, the sentence cap and the batch
    composition."""
    world = training_args.world_size
    training_args.gradient_accumulation_steps = max(1, round(recipe.update_tokens / (recipe.max_tokens * world)))
    return dict(
        seed=training_args.seed,
        max_sentences=recipe.max_sentences,
        composition=recipe.batch_composition,
        rank=training_args.process_index,
        world_size=world,
    )


def plan_batches(
    lengths: dict,
    recipe: Recipe,
    pairs: list,
    training_args: TrainingArguments,
    source: str,
    sampler_class: type = PairBatchSampler,
):
    """This rank's curriculum batch sampler for ``recipe``, after setting the micro-batches per update and process
    that reach its ``update_tokens``; UsageError naming ``source`` when the corpora give no batch."""
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
    """An opened run: its spec, preset and recipe, the Trainer settings, the checkpoint it continues (if any), what
    was in the output dir before (``present``: not this run's) and its record (written by the main process)."""

    spec: RunSpec
    preset: Preset
    recipe: Recipe
    options: RunOptions
    training_args: TrainingArguments
    checkpoint: Path | None
    present: set[str]
    record: dict

    @classmethod
    def open(cls, spec: RunSpec, preset: Preset, recipe: Recipe, checkpoint: Path | None) -> Run:
        """Threads and precision (logged), the seed, the ``TrainingArguments`` (joining the process group under a
        launcher: every rank has passed the family's checks), then the output dir: the main process empties it
        first under ``--overwrite`` and creates it. Call it once the cheap checks have passed."""
        options = RunOptions.from_spec(spec)
        set_seed(spec.seed)
        out = spec.out
        training_args = options.training_arguments(out, recipe, spec.max_steps)
        with training_args.main_process_first(local=False, desc="output dir"):
            if training_args.process_index == 0:
                if spec.overwrite:
                    remove_previous_run(out)
                out.mkdir(parents=True, exist_ok=True)
        present = {entry.name for entry in out.iterdir()} - set(recorded_outputs(out))
        precision = options.precision.to_dict() if options.precision is not None else None
        record = {"args": spec.to_dict(), "recipe": asdict(recipe), "preset": preset.name, "precision": precision}
        if spec.init_from and training_args.process_index == 0:
            record[START] = start_record(spec.init_from)
        return cls(spec, preset, recipe, options, training_args, checkpoint, present, record)

    @property
    def out(self) -> Path:
        return self.spec.out

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
        freeze_encoder_steps: int = 0,
        encoder_lr: float | None = None,
        save_dtype: torch.dtype | None = None,
    ) -> LaserTrainer:
        """Train ``model`` on ``dataset`` (micro-batches of ``sampler``, or a stream of them without one) through
        ``collator`` for ``--max-steps`` updates, from the checkpoint if any (stopped by ``--max-minutes``); save the
        model, the trainer state and ``tokenizer`` into the output dir and, on the main process, list the entries
        the run wrote in its record (for a later ``--overwrite``). ``distill_weight``: of the teacher term of a
        collator that adds the teacher's vectors (``--teacher``). ``freeze_encoder_steps``: updates during which
        nothing of ``model.encoder`` changes; ``encoder_lr``: its peak learning rate (None: the recipe's);
        ``save_dtype``: of the saved model's weights (``save_published``; None: as trained). Returns the trainer."""
        callbacks = ([TimeBudgetCallback(self.spec.max_minutes)] if self.spec.max_minutes else []) + (callbacks or [])
        if getattr(model.config, "negative_memory_size", 0):
            callbacks.append(NegativeMemoryCallback(self.checkpoint))
        if freeze_encoder_steps:
            callbacks.append(FreezeEncoderCallback(freeze_encoder_steps))
            self.training_args.ddp_find_unused_parameters = True  # the frozen updates leave the encoder without grads
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
            encoder_lr=encoder_lr,
            callbacks=callbacks or None,
        )
        if parse_flag_from_env("ACCELERATE_USE_FSDP") and not trainer.is_fsdp_enabled:
            raise UsageError(
                "the accelerate config asks for FSDP, which accelerate runs only on GPUs: on CPU processes it would "
                "train under DDP; launch with docs/configs/accelerate_cpu_ddp.yaml instead"
            )
        out = self.out
        trainer.train(resume_from_checkpoint=None if self.checkpoint is None else str(self.checkpoint))
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

"""``hf-tlaser train``: corpora -> joint BPE -> curriculum batches -> Trainer -> a ``save_pretrained`` model folder.

Single process: ``hf-tlaser train --model ctlaser --preset tiny --output-dir runs/ct``. Two CPU processes (gloo):
``accelerate launch --multi_gpu --num_processes 2 --num_machines 1 --mixed_precision no --dynamo_backend no
-m hf_tlaser.training.cli --use-cpu ...`` (``--cpu --num_processes 2`` silently runs one process) or
``torchrun --standalone --nproc_per_node 2 -m hf_tlaser.training.cli --use-cpu ...``.

A user mistake (argument, file, data, output-dir state) ends with one ``hf-tlaser train: error: ...`` line on stderr
and exit code 2; the cheap checks run before any data is read.
"""

from __future__ import annotations

import argparse
import inspect
import json
import logging
import os
import shutil
import sys
import zipfile
from collections.abc import Iterator
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch
import yaml
from safetensors import SafetensorError, safe_open
from transformers import AutoTokenizer, PretrainedConfig, PreTrainedTokenizerBase, TrainingArguments, set_seed
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR, get_last_checkpoint

from hf_tlaser.data import (
    DEFAULT_PAIRS,
    DEFAULT_PIVOTS,
    DEFAULT_TRAIN_CORPORA,
    REGISTRY,
    SPEC_HELP,
    CleaningConfig,
    MultiwayBatchSampler,
    Pair,
    PairBatchSampler,
    ParallelExamples,
    Source,
    TranslationCollator,
    corpus_languages,
    corpus_sentences,
    curriculum_pairs,
    decoder_languages,
    load_corpora,
    parse_languages,
    parse_pairs,
    resolve_corpora,
    sentence_lengths,
)
from hf_tlaser.data.sources import stream_source
from hf_tlaser.data.streaming import StreamingPairBatches, stream_sentences
from hf_tlaser.errors import UsageError
from hf_tlaser.hardware import PRECISIONS, PrecisionChoice, configure_threads, resolve_precision
from hf_tlaser.tokenization import (
    TOKEN_REPORT,
    LanguageSample,
    language_token_report,
    save_tokenizer,
    train_tokenizer,
    write_token_report,
)
from hf_tlaser.training.presets import MODELS, SIZES, Preset, Recipe, get_preset
from hf_tlaser.training.trainer import STREAM_STATE, LaserTrainer, StreamStateCallback, TimeBudgetCallback

logger = logging.getLogger("hf_tlaser.train")

RECIPE_FLAGS = (
    "vocab_size",
    "max_tokens",
    "update_tokens",
    "learning_rate",
    "warmup_updates",
    "warmup_init_lr",
    "weight_decay",
    "max_grad_norm",
    "max_sentence_tokens",
    "batching",
    "max_lines",
    "max_sentences",
)
BATCHING = ("pair", "multiway")
RECORD = "hf_tlaser_train.json"
"""The run's record in its output dir: arguments, recipe, precision and (once finished) the entries it wrote."""
RUN_FILES = (
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "pytorch_model.bin",
    "training_args.bin",
    "trainer_state.json",
    "hf_tlaser_train.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "chat_template.jinja",
    TOKEN_REPORT,
)
"""Files a run writes into its output dir besides ``checkpoint-*`` folders and those listed under ``outputs`` in its
record (what ``--overwrite`` may remove)."""
STREAM_TOKENIZER_SENTENCES = 200_000
"""``--streaming`` without ``--max-lines``: sentences per language the joint BPE is trained on (the first ones)."""
SPECIAL_TOKEN_IDS = {"pad_token_id": "pad_token", "eos_token_id": "eos_token", "cls_token_id": "cls_token"}
"""Config fields that must match the tokenizer (``unk_token_id`` too where the tokenizer has one)."""


class _DeprecatedBf16(argparse.Action):
    """``--bf16``: the old flag, kept as ``--precision bf16`` with a warning."""

    def __init__(self, option_strings: list[str], dest: str, **kwargs) -> None:
        super().__init__(option_strings, dest, nargs=0, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        logger.warning("--bf16 is deprecated: use --precision bf16 (or --precision auto)")
        setattr(namespace, self.dest, "bf16")


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows ``(default: ...)`` except where the default is None (the help text says what None means)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        return action.help if action.default is None else super()._get_help_string(action)


def _recipe_help(name: str) -> str:
    values = [getattr(get_preset(MODELS[0], size).recipe, name) for size in SIZES]
    values = ", ".join(f"{size} {'all' if value is None else value}" for size, value in zip(SIZES, values))
    return f"recipe override (default: the preset's: {values})"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="hf-tlaser train", description=__doc__.split("\n")[0], formatter_class=_HelpFormatter
    )
    p.add_argument("--config", help="YAML/JSON file whose keys are these options, dashed or not (flags win)")
    p.add_argument("--model", choices=MODELS, default="ctlaser")
    p.add_argument("--preset", choices=SIZES, default="tiny")
    p.add_argument(
        "--corpora",
        default=",".join(DEFAULT_TRAIN_CORPORA),
        help=f"comma-separated corpus specs (or a YAML list), each one of: {SPEC_HELP}; registered: "
        f"{','.join(REGISTRY)} (docs/data.md)",
    )
    p.add_argument(
        "--pivots",
        default=",".join(DEFAULT_PIVOTS),
        help="pivot (target) languages of the default curriculum; language codes are ISO 639-1/3, with an optional "
        "script: zh_Hans",
    )
    p.add_argument(
        "--pairs",
        default=None,
        help="curriculum pairs src-tgt, comma-separated (default: every language of the corpora toward every pivot, "
        "the pivots toward each other; the default corpora and pivots give the paper's "
        + ",".join("-".join(pair) for pair in DEFAULT_PAIRS)
        + ")",
    )
    p.add_argument(
        "--streaming",
        action="store_true",
        help="read the corpora as streams (datasets.IterableDataset): flat memory for corpora of any size, pair "
        "batching only, no English pivot join (docs/data.md)",
    )
    p.add_argument(
        "--shuffle-buffer",
        type=int,
        default=10_000,
        help="--streaming: groups per pair read, cleaned, sorted and packed at once (the shuffle buffer)",
    )
    p.add_argument("--data-dir", default=None, help="corpora folder (default: $HF_TLASER_DATA or ../shared/data)")
    p.add_argument("--tokenizer", default=None, help="existing tokenizer folder (default: train a joint BPE)")
    p.add_argument("--output-dir", required=True, help="run folder; must be empty unless --resume or --overwrite")
    p.add_argument("--overwrite", action="store_true", help="replace the run in --output-dir (other files are kept)")
    p.add_argument("--max-steps", type=int, default=1000, help="optimizer updates the run trains for")
    p.add_argument("--max-minutes", type=float, default=None, help="safety stop (and save) after this wall-clock time")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--precision", choices=PRECISIONS, default="auto", help="auto: what is fast on this hardware")
    p.add_argument("--bf16", dest="precision", action=_DeprecatedBf16, help="deprecated alias of --precision bf16")
    p.add_argument("--use-cpu", action="store_true", help="train on CPU even if a GPU is present (gloo for DDP)")
    p.add_argument("--logging-steps", type=int, default=10)
    p.add_argument("--save-steps", type=int, default=200)
    p.add_argument("--save-total-limit", type=int, default=2, help="checkpoints kept (older ones are deleted)")
    p.add_argument("--resume", default=None, help="checkpoint folder, or 'auto' for the last one in --output-dir")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="model config override (cnv: nmt.KEY=VALUE for the Marian config of its NMT pair)",
    )
    p.add_argument(
        "--nmt-steps",
        type=int,
        default=None,
        help="cnv: updates of each NMT direction in stage 1 (default: the preset's: "
        + ", ".join(f"{size} {get_preset('cnv', size).nmt.steps}" for size in SIZES)
        + ")",
    )
    p.add_argument(
        "--nmt-pair",
        default=None,
        metavar="A_TO_B,B_TO_A",
        help="cnv: two existing Hugging Face seq2seq folders or Hub ids (a->b, b->a) instead of training them",
    )
    for name in RECIPE_FLAGS:
        kind = {"batching": str, "max_lines": int, "max_sentences": int}.get(name, float)
        choices = BATCHING if name == "batching" else None
        p.add_argument(f"--{name.replace('_', '-')}", default=None, type=kind, choices=choices, help=_recipe_help(name))
    return p


def _read_config(path: Path) -> dict:
    """The options of a ``--config`` file, keys spelled with underscores."""
    if not path.is_file():
        raise UsageError(f"--config {path}: no such file")
    text = path.read_text(encoding="utf-8")
    try:
        values = yaml.safe_load(text) if path.suffix in (".yaml", ".yml") else json.loads(text)
    except (yaml.YAMLError, json.JSONDecodeError) as err:
        kind = "YAML" if path.suffix in (".yaml", ".yml") else "JSON"
        raise UsageError(f"--config {path}: not valid {kind} ({' '.join(str(err).split())})") from None
    if not isinstance(values, dict):
        raise UsageError(f"--config {path}: expected a mapping of option: value")
    return {str(key).replace("-", "_"): value for key, value in values.items()}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Command-line flags over ``--config`` values over the defaults."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.config:
        path = Path(args.config)
        values = _read_config(path)
        known = {action.dest for action in parser._actions} - {"help"}
        unknown = sorted(set(values) - known)
        if unknown:
            raise UsageError(f"--config {path}: unknown option(s) {unknown}; known: {', '.join(sorted(known))}")
        parser.set_defaults(**values)
        args = parser.parse_args(argv)
    return args


def config_overrides(items: list[str], config_class: type[PretrainedConfig]) -> dict:
    """``["distance_beta=0.5", "distance_vnorm_grad=false"]`` -> typed dict (values parsed as YAML scalars).

    UsageError on a malformed item or a key that is not a parameter of ``config_class``.
    """
    known = [name for name in inspect.signature(config_class.__init__).parameters if name not in ("self", "kwargs")]
    out = {}
    for item in items:
        if "=" not in item:
            raise UsageError(f"--set {item!r}: expected KEY=VALUE")
        key, value = (part.strip() for part in item.split("=", 1))
        if key not in known:
            raise UsageError(f"unknown --set key {key!r}; known keys: {', '.join(known)}")
        out[key] = yaml.safe_load(value)
    return out


def _flag_error(flag: str, err: Exception) -> UsageError:
    return UsageError(f"{flag}: {err}")


def _recipe(args: argparse.Namespace, preset: Preset) -> Recipe:
    """The preset's recipe with the command-line overrides, checked."""
    recipe = replace(
        preset.recipe,
        **{
            name: getattr(args, name)
            if getattr(preset.recipe, name) is None
            else type(getattr(preset.recipe, name))(getattr(args, name))
            for name in RECIPE_FLAGS
            if getattr(args, name) is not None
        },
    )
    positive = (
        "learning_rate",
        "max_tokens",
        "update_tokens",
        "vocab_size",
        "max_sentence_tokens",
        "max_lines",
        "max_sentences",
    )
    for name in positive:
        value = getattr(recipe, name)
        if value is not None and value <= 0:
            raise UsageError(f"--{name.replace('_', '-')} {value}: must be > 0")
    for name in ("warmup_updates", "warmup_init_lr", "weight_decay", "max_grad_norm"):
        if getattr(recipe, name) < 0:
            raise UsageError(f"--{name.replace('_', '-')} {getattr(recipe, name)}: must be >= 0")
    for flag, value in (("--max-steps", args.max_steps), ("--logging-steps", args.logging_steps)):
        if value < 1:
            raise UsageError(f"{flag} {value}: must be at least 1")
    if args.save_steps < 1:
        raise UsageError(f"--save-steps {args.save_steps}: must be at least 1")
    if args.max_minutes is not None and args.max_minutes <= 0:
        raise UsageError(f"--max-minutes {args.max_minutes}: must be > 0")
    return recipe


def _recorded_outputs(out: Path) -> list[str]:
    """The entries a finished run in ``out`` listed as its own (none for a killed or older run)."""
    try:
        return list(json.loads((out / RECORD).read_text(encoding="utf-8")).get("outputs", []))
    except (OSError, ValueError, AttributeError):
        return []


def _split_output_dir(out: Path) -> tuple[list[Path], list[Path]]:
    """(the entries a run wrote, every other entry) of ``out``, sorted by name."""
    entries = sorted(out.iterdir()) if out.is_dir() else []
    names = set(RUN_FILES) | set(_recorded_outputs(out))
    own = [e for e in entries if e.name in names or (e.is_dir() and e.name.startswith(f"{PREFIX_CHECKPOINT_DIR}-"))]
    return own, [e for e in entries if e not in own]


def _names(paths: list[Path], limit: int = 8) -> str:
    names = [p.name for p in paths]
    return ", ".join(names[:limit]) + (f" and {len(names) - limit} more" if len(names) > limit else "")


def check_output_dir(args: argparse.Namespace) -> Path | None:
    """Refuse an output dir that holds a run (or other files) unless ``--resume``/``--overwrite``; return the
    checkpoint to resume from, if any."""
    out = Path(args.output_dir)
    if out.exists() and not out.is_dir():
        raise UsageError(f"--output-dir {out} is a file; give a folder")
    if args.resume and args.overwrite:
        raise UsageError("--resume continues the run in --output-dir and --overwrite replaces it: give one of them")
    own, other = _split_output_dir(out)
    if args.resume == "auto":
        last = get_last_checkpoint(str(out)) if out.is_dir() else None
        if last is not None:
            return Path(last)
        if own or other:
            raise UsageError(
                f"--resume auto: {out} holds no {PREFIX_CHECKPOINT_DIR}-* folder to resume from "
                f"({_names(own + other)}); pass --overwrite to start a new run there, or another --output-dir"
            )
        logger.info("--resume auto: no checkpoint in %s yet, starting a new run", out)
        return None
    if args.resume:
        checkpoint = Path(args.resume)
        if not checkpoint.is_dir():
            raise UsageError(f"--resume {checkpoint}: no such checkpoint folder")
        return checkpoint
    if own and not args.overwrite:
        raise UsageError(
            f"--output-dir {out} already holds a run ({_names(own)}): pass --resume auto to continue it, "
            f"or --overwrite to replace it, or choose another --output-dir"
        )
    if other and not args.overwrite:
        raise UsageError(
            f"--output-dir {out} is not empty ({_names(other)}): choose an empty folder, or pass --overwrite "
            f"to write the run next to these files (they are kept)"
        )
    return None


def remove_previous_run(out: Path) -> None:
    """``--overwrite``: delete the previous run's own outputs (logged); other files stay (logged too)."""
    own, other = _split_output_dir(out)
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
    weights = checkpoint / "model.safetensors"
    try:
        with safe_open(str(weights), "pt") as handle:
            handle.keys()
    except (SafetensorError, OSError) as err:
        raise UsageError(f"{weights} is truncated or corrupt ({' '.join(str(err).split())}); {hint}") from None
    for path in sorted(checkpoint.glob("*.pt")) + sorted(checkpoint.glob("*.pth")):
        if not zipfile.is_zipfile(path):  # torch.save writes zip archives; a truncated one has no central directory
            raise UsageError(f"{path} is truncated or corrupt; {hint}")
    return step


def check_resume(checkpoint: Path, args: argparse.Namespace) -> None:
    """Refuse to resume with another model family or preset than the run of ``checkpoint`` was trained with."""
    run_dir = checkpoint.parent
    record = run_dir / RECORD
    if not record.is_file():
        return
    saved = json.loads(record.read_text(encoding="utf-8"))["args"]
    asked = [f"--{flag} {getattr(args, flag)}" for flag in ("model", "preset") if saved[flag] != getattr(args, flag)]
    if asked:
        raise UsageError(
            f"--resume {checkpoint}: this command asks for {' '.join(asked)}, but {run_dir} was trained with "
            f"--model {saved['model']} --preset {saved['preset']}; use those, or start a new run with --overwrite"
        )
    if bool(saved.get("streaming")) != bool(getattr(args, "streaming", False)):
        was = "with" if saved.get("streaming") else "without"
        raise UsageError(
            f"--resume {checkpoint}: {run_dir} was trained {was} --streaming; resume the same way (the data order of "
            "the two paths differs)"
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


def special_token_ids(tokenizer: PreTrainedTokenizerBase, source: str, config_class: type) -> dict[str, int]:
    """The config fields that must follow the tokenizer's special tokens; UsageError if pad, ``</s>`` or the
    STR_TAG (cls) token is missing. Ids that differ from the config defaults are logged."""
    ids = {}
    for key, token in SPECIAL_TOKEN_IDS.items():
        token_id = getattr(tokenizer, key)
        if getattr(tokenizer, token) is None or token_id is None:
            raise UsageError(
                f"--tokenizer {source} has no {token}; the models need pad, eos (</s>) and cls (STR_TAG) tokens "
                f"(set them in its tokenizer_config.json)"
            )
        ids[key] = token_id
    if tokenizer.unk_token is not None:
        ids["unk_token_id"] = tokenizer.unk_token_id
    ids["decoder_start_token_id"] = ids["eos_token_id"]
    defaults = inspect.signature(config_class.__init__).parameters
    ids = {key: value for key, value in ids.items() if key in defaults}  # an encoder-only config has no decoder start
    changed = [
        f"{key}={value} (config default {defaults[key].default})"
        for key, value in ids.items()
        if value != defaults[key].default
    ]
    if changed:
        logger.warning("special-token ids from the tokenizer: %s", ", ".join(changed))
    return ids


def _load_tokenizer(folder: Path, flag: str) -> PreTrainedTokenizerBase:
    if not (folder / "tokenizer.json").is_file() and not (folder / "tokenizer_config.json").is_file():
        raise UsageError(f"{flag} {folder}: no tokenizer files there")
    return AutoTokenizer.from_pretrained(folder)


def _resume_tokenizer(checkpoint: Path) -> Path:
    """The folder of the tokenizer saved with the run of ``checkpoint`` (the checkpoint, else the run dir)."""
    for folder in (checkpoint, checkpoint.parent):
        if (folder / "tokenizer.json").is_file():
            return folder
    raise UsageError(f"--resume {checkpoint}: no tokenizer.json in {checkpoint} or {checkpoint.parent}")


def check_corpora_flag(spec: str | list[str], data_dir: str | None = None) -> list[Source]:
    """``--corpora`` -> its Sources, checked without reading text; UsageError prefixed with the flag."""
    try:
        return resolve_corpora(spec, data_dir)
    except UsageError as err:
        raise _flag_error("--corpora", err) from None


@dataclass
class DataPlan:
    """What ``--corpora``, ``--pivots`` and ``--pairs`` ask for, checked before any text is read."""

    sources: list[Source]
    pivots: list[str]
    pairs: list[Pair]

    @property
    def languages(self) -> list[str]:
        """The languages of the curriculum (the columns read, what the BPE covers)."""
        return sorted({lang for pair in self.pairs for lang in pair})

    def describe(self) -> str:
        return f"--corpora {','.join(s.spec for s in self.sources)} --pairs {','.join('-'.join(p) for p in self.pairs)}"


def plan_data(args: argparse.Namespace) -> DataPlan:
    """The checked corpora, pivots and curriculum pairs of the command line (``--pairs``, else the paper's pattern
    over the corpora's languages); UsageError naming the flag for a malformed spec or code, a missing file, a pivot
    or a ``--pairs`` language that no corpus has."""
    try:
        pivots = parse_languages(args.pivots, "pivot")
    except ValueError as err:
        raise _flag_error("--pivots", err) from None
    explicit = None
    if args.pairs:
        try:
            explicit = parse_pairs(args.pairs)
        except ValueError as err:
            raise _flag_error("--pairs", err) from None
    sources = check_corpora_flag(args.corpora, args.data_dir)
    try:
        available = corpus_languages(sources)
    except UsageError as err:
        raise _flag_error("--corpora", err) from None
    names = ", ".join(source.spec for source in sources)
    if explicit is not None:
        for lang in sorted({lang for pair in explicit for lang in pair}):
            if lang not in available:
                raise UsageError(
                    f"--pairs {args.pairs}: no corpus has {lang!r} text (the corpora {names} have "
                    f"{', '.join(available)}); add a corpus with {lang} to --corpora (e.g. moses:FOLDER or hf:ID) or "
                    "drop the pair"
                )
        return DataPlan(sources, pivots, explicit)
    for pivot in pivots:
        if pivot not in available:
            raise UsageError(
                f"--pivots {args.pivots}: {pivot!r} is not in the data (the corpora {names} have "
                f"{', '.join(available)}); choose pivots among them, or give --pairs"
            )
    if len(available) < 2:
        raise UsageError(f"--corpora {names}: one language ({', '.join(available)}); parallel text needs two")
    return DataPlan(sources, pivots, curriculum_pairs(available, pivots))


def _model_config(preset: Preset, tokenizer: PreTrainedTokenizerBase, source: str, overrides: dict) -> PretrainedConfig:
    """The preset's config for ``tokenizer``: its vocabulary size and special-token ids, then the ``--set`` values."""
    ids = special_token_ids(tokenizer, source, preset.config_class)
    return preset.make_config(len(tokenizer), **{**ids, **overrides})


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
    def from_args(cls, args: argparse.Namespace) -> RunOptions:
        """From the command line; logs the torch threads and the precision chosen."""
        logger.info("torch threads: %d", configure_threads())
        use_cpu = args.use_cpu or not torch.cuda.is_available()
        precision = resolve_precision(args.precision, "cpu" if use_cpu else "cuda")
        logger.info("precision: %s (%s)", precision.precision, precision.reason)
        return cls(use_cpu, precision, args.seed, args.logging_steps, args.save_steps, args.save_total_limit)

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


def new_record(args: argparse.Namespace, recipe: Recipe, preset: Preset, run: RunOptions) -> dict:
    """The run's record (RECORD): arguments, recipe, preset and precision."""
    precision = run.precision.to_dict() if run.precision is not None else None
    return {"args": vars(args), "recipe": asdict(recipe), "preset": preset.name, "precision": precision}


def write_record(out: Path, record: dict) -> None:
    (out / RECORD).write_text(json.dumps(record, indent=2, default=str))


def rank_batching(recipe: Recipe, training_args: TrainingArguments) -> dict:
    """Set the micro-batches per update and process that reach the recipe's ``update_tokens``; return the options
    every curriculum (sampler or stream) takes: this rank, the world size, the seed and the sentence cap."""
    world = training_args.world_size
    training_args.gradient_accumulation_steps = max(1, round(recipe.update_tokens / (recipe.max_tokens * world)))
    return dict(
        seed=training_args.seed, max_sentences=recipe.max_sentences, rank=training_args.process_index, world_size=world
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


def plan_stream(
    plan: DataPlan,
    tokenizer: PreTrainedTokenizerBase,
    recipe: Recipe,
    training_args: TrainingArguments,
    args: argparse.Namespace,
    checkpoint: Path | None,
) -> StreamingPairBatches:
    """``--streaming``: this rank's stream of micro-batches (continued from ``checkpoint``'s stream state), after
    setting the accumulation as ``plan_batches`` does."""
    options = rank_batching(recipe, training_args)
    streams = [item for source in plan.sources for item in stream_source(source, recipe.max_lines)]
    cleaning = CleaningConfig(max_tokens=recipe.max_sentence_tokens - 2)
    try:
        stream = StreamingPairBatches(
            streams, plan.pairs, tokenizer, int(recipe.max_tokens), cleaning=cleaning, buffer_size=args.shuffle_buffer,
            **options,
        )  # fmt: skip
    except ValueError as err:
        raise UsageError(f"no training batches from {plan.describe()}: {err}") from None
    if checkpoint is not None:
        saved = checkpoint / STREAM_STATE.format(rank=training_args.process_index)
        state = json.loads(saved.read_text(encoding="utf-8")) if saved.is_file() else None
        if state is None or state["world_size"] != training_args.world_size:
            logger.warning(
                "--resume %s: %s; the streams start again from the beginning of the corpora (the data order is not "
                "the uninterrupted run's)",
                checkpoint,
                f"no {saved.name}"
                if state is None
                else f"its streams were split between {state['world_size']} processes, not {training_args.world_size}",
            )
        else:
            stream.load_state(state)
            logger.info("--resume: the streams continue at micro-batch %d of this rank", state["batches"])
    return stream


def tokenizer_texts(plan: DataPlan, data_dir: str | None, recipe: Recipe, streaming: bool) -> Iterator[tuple]:
    """``(language, sentence)`` for the joint BPE: at most ``max_lines`` sentences per language (streaming: at most
    STREAM_TOKENIZER_SENTENCES when the recipe reads everything)."""
    if not streaming:
        return corpus_sentences(plan.sources, data_dir, plan.languages, max_sentences=recipe.max_lines)
    cap = recipe.max_lines or STREAM_TOKENIZER_SENTENCES
    streams = [item for source in plan.sources for item in stream_source(source, recipe.max_lines)]
    return stream_sentences(streams, plan.languages, cap)


def model_languages_for(preset: Preset, pairs: list[Pair], overrides: dict) -> list[str]:
    """``config.languages`` for the curriculum: the rows of the model's language table (the targets of ``pairs``,
    and their sources for a model that also translates back, Yu 2018), or every curriculum language for a model
    without one (LDT)."""
    with torch.device("meta"):  # a probe: which tables and inputs the architecture has, no weights allocated
        probe = preset.model_class(preset.make_config(1000, **overrides))
    if not any(name.endswith("embed_langs") for name, _ in probe.named_modules()):
        return decoder_languages(pairs, with_sources=True)
    return decoder_languages(pairs, with_sources=getattr(probe, "needs_source_language", False))


def _resumed_languages(checkpoint: Path, needed: list[str]) -> list[str] | None:
    """The checkpoint's ``config.languages`` when it holds every language the curriculum needs (a run saved before
    the table followed the pivots keeps its table), else None."""
    path = checkpoint / "config.json"
    saved = json.loads(path.read_text(encoding="utf-8")).get("languages") if path.is_file() else None
    return list(saved) if saved and set(needed) <= set(saved) else None


def train(args: argparse.Namespace) -> LaserTrainer:
    """Run one training job; returns the trainer (its ``args.output_dir`` holds the saved model).

    Raises UsageError (before reading any corpus where it can) on a mistake the user can fix.
    """
    if args.model == "cnv":
        from hf_tlaser.training.cnv import train_cnv  # imports this module

        return train_cnv(args)
    for flag in ("nmt_steps", "nmt_pair"):
        if getattr(args, flag, None) is not None:
            raise UsageError(f"--{flag.replace('_', '-')} is an option of --model cnv, not of --model {args.model}")
    preset = get_preset(args.model, args.preset)
    recipe = _recipe(args, preset)
    if recipe.batching == "multiway" and not getattr(preset.model_class, "supports_multiway", True):
        raise UsageError(f"--batching multiway: --model {args.model} trains on bilingual batches only (use pair)")
    if args.streaming and recipe.batching != "pair":
        raise UsageError(
            "--streaming trains with --batching pair: multi-way batching assigns every group by the rarest pair of "
            "the whole corpus"
        )
    checkpoint = check_output_dir(args)
    if checkpoint is not None:
        check_resume(checkpoint, args)
        step = check_checkpoint(checkpoint)
    overrides = config_overrides(args.set, preset.config_class)
    try:
        preset.make_config(recipe.vocab_size, **overrides)
    except ValueError as err:
        raise UsageError(f"model config ({preset.name} with --set {args.set}): {err}") from None
    plan = plan_data(args)
    languages = plan.languages
    evaluation = [source.spec for source in plan.sources if source.evaluation]
    if evaluation:
        logger.warning(
            "--corpora %s: evaluation corpora (retrieval sets of hf-tlaser evaluate); their scores will not measure "
            "generalisation",
            ", ".join(evaluation),
        )
    needed = model_languages_for(preset, plan.pairs, overrides)
    table = overrides.get("languages") or (checkpoint and _resumed_languages(checkpoint, needed)) or needed
    missing = sorted(set(needed) - set(table))
    if missing:
        raise UsageError(f"--set languages={table} lacks {missing}, which the curriculum {plan.describe()} needs")
    overrides = {**overrides, "languages": list(table), "training_languages": languages}
    config = preset.make_config(recipe.vocab_size, **overrides)  # vocab size and special ids follow below
    if checkpoint is not None:
        tokenizer_source = _resume_tokenizer(checkpoint)
        logger.info(
            "resuming from %s (step %d); tokenizer: %s (saved with the run)", checkpoint, step, tokenizer_source
        )
        if args.tokenizer and Path(args.tokenizer).resolve() != tokenizer_source.resolve():
            logger.warning(
                "--tokenizer %s is ignored: a resumed run keeps the tokenizer it was trained with", args.tokenizer
            )
    else:
        tokenizer_source = Path(args.tokenizer) if args.tokenizer else None
    tokenizer = None
    if tokenizer_source is not None:
        tokenizer = _load_tokenizer(tokenizer_source, "--resume" if checkpoint else "--tokenizer")
        config = _model_config(preset, tokenizer, str(tokenizer_source), overrides)
    if checkpoint is not None:
        check_resume_config(checkpoint, config)

    run = RunOptions.from_args(args)
    set_seed(args.seed)
    out = Path(args.output_dir)
    # under a launcher this joins the process group: every rank has passed the checks above
    training_args, main_process, present = open_output_dir(run, out, recipe, args)
    logger.info(
        "languages %s; pivots %s; %d curriculum pairs: %s",
        languages,
        plan.pivots,
        len(plan.pairs),
        ",".join("-".join(pair) for pair in plan.pairs),
    )

    token_report = None
    if tokenizer is None:
        logger.info("training a %d-token joint BPE on %s (%s)", recipe.vocab_size, plan.describe(), languages)
        sample = LanguageSample()
        texts = sample.watch(tokenizer_texts(plan, args.data_dir, recipe, args.streaming))
        tokenizer = train_tokenizer(vocab_size=recipe.vocab_size, texts=texts)
        token_report = language_token_report(tokenizer, sample)
        config = _model_config(preset, tokenizer, "the trained BPE", overrides)

    if args.streaming:
        dataset = plan_stream(plan, tokenizer, recipe, training_args, args, checkpoint)
        sampler, groups = None, "streamed"
        training_args.ignore_data_skip = True  # the stream state continues the data, not a replay
    else:
        cleaning = CleaningConfig(max_tokens=recipe.max_sentence_tokens - 2)
        corpus = load_corpora(
            plan.sources, args.data_dir, languages, cleaning=cleaning, tokenizer=tokenizer, max_lines=recipe.max_lines
        )
        lengths = sentence_lengths(corpus, tokenizer, languages)
        sampler_class = MultiwayBatchSampler if recipe.batching == "multiway" else PairBatchSampler
        sampler = plan_batches(lengths, recipe, plan.pairs, training_args, plan.describe(), sampler_class)
        dataset, groups = ParallelExamples(corpus, languages), f"{len(corpus)} groups"
    model = preset.model_class(config)
    collator = TranslationCollator(
        tokenizer,
        config.languages,
        with_target_encoding=model.needs_target_encoding,
        pairs=plan.pairs,
        max_length=None,
        with_source_language=getattr(model, "needs_source_language", False),
    )
    logger.info(
        "%s: %.1fM parameters, %s, %s micro-batches/epoch/rank, accumulation %d, batching=%s, language table %s; "
        "training %d updates",
        preset.name,
        sum(p.numel() for p in model.parameters()) / 1e6,
        groups,
        "endless (streaming)" if sampler is None else len(sampler),
        training_args.gradient_accumulation_steps,
        recipe.batching,
        config.languages,
        args.max_steps,
    )
    if main_process:  # the first files of the run: a mistake found above leaves the output dir as it was
        save_tokenizer(tokenizer, out)
        if token_report is not None:
            write_token_report(token_report, out)
        record = new_record(args, recipe, preset, run)
        record["data"] = {
            "corpora": [source.spec for source in plan.sources],
            "languages": languages,
            "pivots": plan.pivots,
            "pairs": ["-".join(pair) for pair in plan.pairs],
            "streaming": args.streaming,
        }
        write_record(out, record)
    callbacks = [TimeBudgetCallback(args.max_minutes)] if args.max_minutes else []
    if args.streaming:
        callbacks.append(StreamStateCallback(dataset))
    trainer = LaserTrainer(
        model=model,
        args=training_args,
        train_dataset=dataset,
        data_collator=collator,
        batch_sampler=sampler,
        warmup_init_lr=recipe.warmup_init_lr,
        callbacks=callbacks or None,
    )
    return fit_and_save(trainer, checkpoint, record if main_process else None, present, tokenizer)


def open_output_dir(
    run: RunOptions, out: Path, recipe: Recipe, args: argparse.Namespace
) -> tuple[TrainingArguments, bool, set[str]]:
    """The run's ``TrainingArguments`` (joining the process group under a launcher), whether this is the main
    process, and the entries of the output dir that are not this run's; the main process empties it first under
    ``--overwrite`` and creates it."""
    training_args = run.training_arguments(out, recipe, args.max_steps)
    main_process = training_args.process_index == 0
    with training_args.main_process_first(local=False, desc="output dir"):
        if main_process:
            if args.overwrite:
                remove_previous_run(out)
            out.mkdir(parents=True, exist_ok=True)
    return training_args, main_process, {entry.name for entry in out.iterdir()} - set(_recorded_outputs(out))


def fit_and_save(
    trainer: LaserTrainer,
    checkpoint: Path | None,
    record: dict | None,
    present: set[str],
    tokenizer: PreTrainedTokenizerBase | None = None,
) -> LaserTrainer:
    """Train (from ``checkpoint`` if given), save the model, trainer state and ``tokenizer`` into the output dir and,
    on the main process (``record`` given), list the entries the run wrote in its record (for a later
    ``--overwrite``; ``present``: what was there before)."""
    out = Path(trainer.args.output_dir)
    trainer.train(resume_from_checkpoint=None if checkpoint is None else str(checkpoint))
    trainer.save_model(str(out))
    trainer.save_state()
    if record is not None:
        if tokenizer is not None:
            save_tokenizer(tokenizer, out)
        record["outputs"] = sorted({entry.name for entry in out.iterdir()} - present)
        write_record(out, record)
    return trainer


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``hf-tlaser train`` (and of ``python -m hf_tlaser.training.cli`` under a launcher)."""
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
    try:
        out = train(parse_args(argv)).args.output_dir
    except UsageError as err:
        print(f"hf-tlaser train: error: {' '.join(str(err).splitlines())}", file=sys.stderr)
        return 2
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        # a clean exit under torchrun/accelerate: see ../shared/notes (rank 0 could abort at interpreter exit)
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()
        sys.stdout.flush()
        os._exit(0)
    print(f"saved model and tokenizer to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

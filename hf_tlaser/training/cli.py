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
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch
import yaml
from safetensors import SafetensorError, safe_open
from transformers import AutoTokenizer, PretrainedConfig, PreTrainedTokenizerBase, TrainingArguments, set_seed
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR, get_last_checkpoint

from hf_tlaser.data import (
    DEFAULT_TRAIN_CORPORA,
    LANGUAGES,
    REGISTRY,
    CleaningConfig,
    MultiwayBatchSampler,
    PairBatchSampler,
    ParallelExamples,
    TranslationCollator,
    check_corpora,
    corpus_texts,
    get_data_dir,
    load_corpora,
    parse_pairs,
    sentence_lengths,
)
from hf_tlaser.errors import UsageError
from hf_tlaser.hardware import PRECISIONS, PrecisionChoice, configure_threads, resolve_precision
from hf_tlaser.tokenization import save_tokenizer, train_tokenizer
from hf_tlaser.training.presets import MODELS, SIZES, Preset, Recipe, get_preset
from hf_tlaser.training.trainer import LaserTrainer, TimeBudgetCallback

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
)
"""Files a run writes into its output dir besides ``checkpoint-*`` folders and those listed under ``outputs`` in its
record (what ``--overwrite`` may remove)."""
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
        "--pairs",
        default="de-en,de-es,en-es,es-en,fr-en,fr-es,it-en,it-es",
        help=f"curriculum pairs src-tgt, comma-separated, over the languages {','.join(LANGUAGES)}",
    )
    p.add_argument(
        "--corpora",
        default=",".join(DEFAULT_TRAIN_CORPORA),
        help=f"comma-separated registered corpora, of {','.join(REGISTRY)}",
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


def check_corpora_flag(spec: str) -> list[str]:
    """``--corpora a,b`` -> registered names; UsageError listing the known corpora."""
    try:
        return check_corpora([name for name in spec.split(",") if name])
    except UsageError as err:
        raise _flag_error("--corpora", err) from None


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
    world = training_args.world_size
    training_args.gradient_accumulation_steps = max(1, round(recipe.update_tokens / (recipe.max_tokens * world)))
    try:
        return sampler_class(
            lengths,
            int(recipe.max_tokens),
            pairs,
            seed=training_args.seed,
            max_sentences=recipe.max_sentences,
            rank=training_args.process_index,
            world_size=world,
        )
    except ValueError as err:
        raise UsageError(f"no training batches from {source}: {err}") from None


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
    checkpoint = check_output_dir(args)
    if checkpoint is not None:
        check_resume(checkpoint, args)
        step = check_checkpoint(checkpoint)
    try:
        pairs = parse_pairs(args.pairs)
    except ValueError as err:
        raise _flag_error("--pairs", err) from None
    languages = sorted({lang for pair in pairs for lang in pair})
    corpora = check_corpora_flag(args.corpora)
    overrides = config_overrides(args.set, preset.config_class)
    try:
        config = preset.make_config(recipe.vocab_size, **overrides)  # vocab size and special ids follow below
    except ValueError as err:
        raise UsageError(f"model config ({preset.name} with --set {args.set}): {err}") from None
    unknown = sorted(set(languages) - set(config.languages))
    if unknown:
        raise UsageError(f"--pairs uses languages {unknown} that the model config does not know ({config.languages})")
    data_dir = get_data_dir(args.data_dir)
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

    if tokenizer is None:
        logger.info("training a %d-token joint BPE on %s", recipe.vocab_size, corpora)
        texts = corpus_texts(corpora, data_dir, languages, max_sentences=recipe.max_lines)
        tokenizer = train_tokenizer(vocab_size=recipe.vocab_size, texts=texts)
        config = _model_config(preset, tokenizer, "the trained BPE", overrides)

    cleaning = CleaningConfig(max_tokens=recipe.max_sentence_tokens - 2)
    dataset = load_corpora(
        corpora, data_dir, languages, cleaning=cleaning, tokenizer=tokenizer, max_lines=recipe.max_lines
    )
    lengths = sentence_lengths(dataset, tokenizer, languages)
    sampler_class = MultiwayBatchSampler if recipe.batching == "multiway" else PairBatchSampler
    source = f"--corpora {args.corpora} --pairs {args.pairs}"
    sampler = plan_batches(lengths, recipe, pairs, training_args, source, sampler_class)
    model = preset.model_class(config)
    collator = TranslationCollator(
        tokenizer,
        config.languages,
        with_target_encoding=model.needs_target_encoding,
        pairs=pairs,
        max_length=None,
        with_source_language=getattr(model, "needs_source_language", False),
    )
    logger.info(
        "%s: %.1fM parameters, %d groups, %d micro-batches/epoch/rank, accumulation %d, batching=%s, languages %s; "
        "training %d updates",
        preset.name,
        sum(p.numel() for p in model.parameters()) / 1e6,
        len(dataset),
        len(sampler),
        training_args.gradient_accumulation_steps,
        recipe.batching,
        config.languages,
        args.max_steps,
    )
    if main_process:  # the first files of the run: a mistake found above leaves the output dir as it was
        save_tokenizer(tokenizer, out)
        record = new_record(args, recipe, preset, run)
        write_record(out, record)
    trainer = LaserTrainer(
        model=model,
        args=training_args,
        train_dataset=ParallelExamples(dataset, config.languages),
        data_collator=collator,
        batch_sampler=sampler,
        warmup_init_lr=recipe.warmup_init_lr,
        callbacks=[TimeBudgetCallback(args.max_minutes)] if args.max_minutes else None,
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

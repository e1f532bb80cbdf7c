"""Resuming a run: the checks of a checkpoint (its files whole, its launch mode) and of what the resumed command
asks for against what the run was trained with (its family and preset, its plan, its model config), made while the
run is planned (``check(plan)`` of the family's training), before any corpus text is read. ``--resume force``
continues with another plan, with a warning that names each difference."""

from __future__ import annotations

import json
import logging
import zipfile
from dataclasses import asdict
from pathlib import Path

from accelerate.utils import parse_flag_from_env
from accelerate.utils.constants import FSDP_MODEL_NAME
from safetensors import SafetensorError, safe_open
from transformers import PretrainedConfig
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from hf_tlaser.errors import UsageError
from hf_tlaser.training.resolve import decide, plan_data
from hf_tlaser.training.run import FORCE, RECORD, START, start_record
from hf_tlaser.training.spec import RunSpec

logger = logging.getLogger("hf_tlaser.train")

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

"""A run's output dir: the guard (a folder holding a run or other files needs ``--resume`` or ``--overwrite``),
``--overwrite``'s removal of the previous run's own files, the checks of a checkpoint to resume from, and the run's
record (``hf_tlaser_train.json``). Read-only checks, cheap, run before any data is read."""

from __future__ import annotations

import json
import logging
import shutil
import zipfile
from pathlib import Path

from safetensors import SafetensorError, safe_open
from transformers import PretrainedConfig
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR, get_last_checkpoint

from hf_tlaser.errors import UsageError
from hf_tlaser.model_folders import ADD_LANGUAGE_RECORD
from hf_tlaser.tokenization import TOKEN_REPORT
from hf_tlaser.training.spec import RunSpec

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


def check_output_dir(spec: RunSpec) -> Path | None:
    """Refuse an output dir that holds a run (or other files) unless ``--resume``/``--overwrite``; return the
    checkpoint to resume from, if any."""
    out = spec.out
    if out.exists() and not out.is_dir():
        raise UsageError(f"--output-dir {out} is a file; give a folder")
    if spec.resume and spec.overwrite:
        raise UsageError("--resume continues the run in --output-dir and --overwrite replaces it: give one of them")
    own, other = split_output_dir(out)
    if spec.resume == "auto":
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


def check_resume(checkpoint: Path, spec: RunSpec) -> None:
    """Refuse to resume with another model family or preset than the run of ``checkpoint`` was trained with."""
    run_dir = checkpoint.parent
    record = run_dir / RECORD
    if not record.is_file():
        return
    saved = json.loads(record.read_text(encoding="utf-8"))["args"]
    asked = [f"--{flag} {getattr(spec, flag)}" for flag in ("model", "preset") if saved[flag] != getattr(spec, flag)]
    if asked:
        raise UsageError(
            f"--resume {checkpoint}: this command asks for {' '.join(asked)}, but {run_dir} was trained with "
            f"--model {saved['model']} --preset {saved['preset']}; use those, or start a new run with --overwrite"
        )
    if bool(saved.get("streaming")) != bool(spec.streaming):
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

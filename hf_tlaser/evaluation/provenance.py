"""What was evaluated: a model folder described from its ``config.json``, ``hf_tlaser_train.json`` and
``trainer_state.json`` (read as JSON, no model code runs); every file but ``config.json`` may be missing."""

from __future__ import annotations

import json
import os
from pathlib import Path

from hf_tlaser.errors import UsageError
from hf_tlaser.models.tlaser.sentence_embedding import POOLING

TRAIN_HINT = "pass the --output-dir of `hf-tlaser train` (a folder with config.json, weights and tokenizer)"


def read_json(path: str | os.PathLike) -> dict | None:
    """A JSON file as a dict, or None when it does not exist."""
    path = Path(path)
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def check_model_folder(model_dir: str | os.PathLike, argument: str = "MODEL_DIR") -> dict:
    """The ``config.json`` of an hf_tlaser model folder; raises ``UsageError`` naming ``argument`` and what is wrong
    (missing path, not a folder, no config, another library's model, no weights, no tokenizer)."""
    folder = Path(model_dir)
    where = f"{argument} {str(model_dir)!r}"
    if not folder.exists():
        raise UsageError(f"{where} does not exist; {TRAIN_HINT}")
    if not folder.is_dir():
        raise UsageError(f"{where} is a file, not a model folder; {TRAIN_HINT}")
    config = read_json(folder / "config.json")
    if config is None:
        raise UsageError(f"{where} is not a model folder (no config.json); {TRAIN_HINT}")
    if config.get("model_type") not in POOLING:
        raise UsageError(
            f"{where} holds a {config.get('model_type')!r} model, not an hf_tlaser model ({' or '.join(POOLING)})"
        )
    if not any(folder.glob("*.safetensors")) and not any(folder.glob("pytorch_model*.bin")):
        raise UsageError(f"{where} has no weights (model.safetensors); {TRAIN_HINT}")
    if not (folder / "tokenizer.json").is_file():
        raise UsageError(f"{where} has no tokenizer.json; {TRAIN_HINT}")
    return config


def model_name(config: dict) -> str:
    """Display name of an hf_tlaser config: T-LASER / cT-LASER, LASER-n / cLASER-n (n BiLSTM layers)."""
    constrained = float(config.get("distance_beta") or 0) > 0
    if config["model_type"] == "tlaser":
        return "cT-LASER" if constrained else "T-LASER"
    return f"{'cLASER' if constrained else 'LASER'}-{config.get('num_layers', 1)}"


def training_precision(train: dict | None) -> dict | None:
    """``{"precision", "reason"}`` of the training run: the train CLI's record, else its ``--bf16``/``--fp16`` flags."""
    if not train:
        return None
    if isinstance(train.get("precision"), dict):
        return train["precision"]
    args = train.get("args") or {}
    precision = "bf16" if args.get("bf16") else "fp16" if args.get("fp16") else "fp32"
    return {"precision": precision, "reason": "training flags; no precision record"}


def describe_model(model_dir: str | os.PathLike) -> dict:
    """Path, model name and type, preset, optimizer updates, tokens seen and training precision of a model folder.

    ``tokens_seen`` is Trainer's ``num_input_tokens_seen`` when it counted; otherwise ``token_budget`` (updates x
    the recipe's tokens per update) bounds it from above.
    """
    folder = Path(model_dir)
    config = read_json(folder / "config.json") or {}
    train = read_json(folder / "hf_tlaser_train.json")
    state = read_json(folder / "trainer_state.json") or {}
    updates = state.get("global_step")
    per_update = ((train or {}).get("recipe") or {}).get("update_tokens")
    return {
        "path": str(folder.resolve()),
        "model": model_name(config) if config.get("model_type") else None,
        "model_type": config.get("model_type"),
        "preset": (train or {}).get("preset"),
        "updates": updates,
        "tokens_seen": state.get("num_input_tokens_seen") or None,
        "token_budget": updates * per_update if updates is not None and per_update else None,
        "training_precision": training_precision(train),
    }

"""What was evaluated: a model folder described from its ``config.json``, ``hf_tlaser_train.json`` and
``trainer_state.json`` (read as JSON, no model code runs); every file but ``config.json`` may be missing."""

from __future__ import annotations

import json
import math
import os
import struct
from pathlib import Path

from hf_tlaser.encoding import model_languages
from hf_tlaser.model_folders import model_name, read_json, sentence_vector_size

FROZEN_PREFIXES = ("nmt_a_to_b.", "nmt_b_to_a.")
"""Checkpoint keys of a cNV model's NMT pair, which cNV training keeps fixed (``freeze_nmt``)."""


def parameter_counts(model_dir: str | os.PathLike) -> dict[str, int] | None:
    """Number of values of every tensor in ``model.safetensors``, from its header (no tensor is loaded); None
    without that file."""
    path = Path(model_dir) / "model.safetensors"
    if not path.is_file():
        return None
    with path.open("rb") as handle:
        header = json.loads(handle.read(struct.unpack("<Q", handle.read(8))[0]))
    return {key: math.prod(info["shape"]) for key, info in header.items() if key != "__metadata__"}


def trainable_parameters(model_dir: str | os.PathLike, config: dict) -> tuple[int, int] | None:
    """(all parameters, those training updates) of a saved model folder, from its safetensors header; a cNV model
    trains only its shared layers unless ``freeze_nmt`` is false."""
    counts = parameter_counts(model_dir)
    if counts is None:
        return None
    frozen = FROZEN_PREFIXES if config.get("model_type") == "cnv" and config.get("freeze_nmt", True) else ()
    return sum(counts.values()), sum(n for key, n in counts.items() if not key.startswith(frozen))


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
    """Path, model name and type, preset, optimizer updates, tokens seen and training precision of a model folder;
    for a cNV folder also its languages, sentence vector, and parameters (all, and those cNV training updates: the
    shared layers, not the frozen NMT pair).

    ``tokens_seen`` is Trainer's ``num_input_tokens_seen`` when it counted; otherwise ``token_budget`` (updates x
    the recipe's tokens per update) bounds it from above.
    """
    folder = Path(model_dir)
    config = read_json(folder / "config.json") or {}
    train = read_json(folder / "hf_tlaser_train.json")
    state = read_json(folder / "trainer_state.json") or {}
    updates = state.get("global_step")
    per_update = ((train or {}).get("recipe") or {}).get("update_tokens")
    about = {
        "path": str(folder.resolve()),
        "model": model_name(config) if config.get("model_type") else None,
        "model_type": config.get("model_type"),
        "preset": (train or {}).get("preset"),
        "updates": updates,
        "tokens_seen": state.get("num_input_tokens_seen") or None,
        "token_budget": updates * per_update if updates is not None and per_update else None,
        "training_precision": training_precision(train),
    }
    if model_languages(config) is not None:
        total, trained = trainable_parameters(folder, config) or (None, None)
        about.update(
            languages=", ".join(config["languages"]),
            sentence_vector=f"{config.get('sentence_vector')} ({sentence_vector_size(config)} dimensions)",
            parameters=total,
            trainable_parameters=trained,
        )
    return about

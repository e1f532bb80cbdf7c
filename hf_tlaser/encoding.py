"""``hf_tlaser.encode``: sentences and documents to vectors with any hf_tlaser encoder."""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable
from pathlib import Path
from types import EllipsisType

import numpy as np
import torch

from hf_tlaser.backend.runtime import ExportedEncoder, load_backend
from hf_tlaser.hardware import default_device, resolve_precision
from hf_tlaser.models.common.encode import repeated_prompt_message
from hf_tlaser.models.registry import FAMILIES

logger = logging.getLogger(__name__)

DOCUMENT_MODES = ("whole", "sentences")
DOCUMENT_WORDS = 750
"""T-LASER embeds a document whole, cut to its first 750 words (Li & Mak 2020)."""
# LASER's tasks/mldoc/mldoc.sh removes text "not useful for classification" with sed before embedding:
# ' Co .' -> ' Co.', ' Inc . ' -> ' Inc. ', and the Reuters copyright line '(c) Reuters Limited 199x.'.
LASER_MLDOC_CLEANUP = (
    (re.compile(r" Co \."), " Co."),
    (re.compile(r" Inc \. "), " Inc. "),
    (re.compile(r"\([cC]\) Reuters Limited 199[0-9]\."), ""),
)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n+")


def split_sentences(document: str) -> list[str]:
    """Split a document at line breaks and at whitespace after . ! or ? (LASER-style rough segmentation)."""
    return [s.strip() for s in _SENTENCE_END.split(document) if s.strip()] or [""]


def cut_words(texts: list[str], max_words: int) -> tuple[list[str], np.ndarray]:
    """The first ``max_words`` whitespace-separated words of each text, and which texts were cut (bool [N])."""
    words = [text.split() for text in texts]
    cut = np.asarray([len(w) > max_words for w in words], dtype=bool)
    return [" ".join(w[:max_words]) if c else text for text, w, c in zip(texts, words, cut)], cut


def document_sentences(documents: list[str]) -> tuple[list[str], np.ndarray]:
    """The sentences of every document (``split_sentences``), in order, and the document each belongs to."""
    pieces = [split_sentences(doc) for doc in documents]
    owner = np.repeat(np.arange(len(documents)), [len(p) for p in pieces])
    return [sentence for piece in pieces for sentence in piece], owner


def mean_by_document(vectors: torch.Tensor, owner: np.ndarray, documents: int) -> torch.Tensor:
    """LASER's document vector: the mean of each document's sentence vectors (``owner``: ``document_sentences``)."""
    index = torch.from_numpy(owner)
    sums = torch.zeros(documents, vectors.shape[1], dtype=vectors.dtype).index_add_(0, index, vectors)
    return sums / torch.bincount(index, minlength=documents)[:, None].to(vectors.dtype)


def laser_mldoc_cleanup(text: str) -> str:
    """An MLDoc document as LASER's ``mldoc.sh`` feeds it to the encoder (its three ``sed`` substitutions)."""
    for pattern, replacement in LASER_MLDOC_CLEANUP:
        text = pattern.sub(replacement, text)
    return text


def embed_documents(
    encode: Callable[[list[str]], tuple[torch.Tensor, np.ndarray]],
    documents: list[str],
    mode: str = "whole",
    max_words: int | None = DOCUMENT_WORDS,
) -> tuple[torch.Tensor, np.ndarray]:
    """The document policy, once for every caller: ``whole`` embeds each document as one text cut to its first
    ``max_words`` words (T-LASER; None: not cut), ``sentences`` as the mean of its sentences' vectors (LASER).

    ``encode(texts) -> (vectors [n, d], over)``, ``over`` (bool [n]) the texts cut at the model's token limit.
    Returns the document vectors [len(documents), d] and which documents were truncated (cut to ``max_words``, or a
    text of theirs over the token limit)."""
    if mode == "sentences":
        sentences, owner = document_sentences(documents)
        vectors, over = encode(sentences)
        truncated = np.zeros(len(documents), dtype=bool)
        truncated[owner[over]] = True
        return mean_by_document(vectors, owner, len(documents)), truncated
    cut = np.zeros(len(documents), dtype=bool)
    if max_words is not None:
        documents, cut = cut_words(documents, max_words)
    vectors, over = encode(documents)
    return vectors, cut | over


PER_LANGUAGE_MODELS = tuple(model_type for model_type, family in FAMILIES.items() if family.per_language)
"""``model_type`` of models with one encoder and tokenizer per language: ``encode`` needs their ``lang``."""


def model_languages(model_or_config) -> list[str] | None:
    """The languages of a model (or its config, a dict or a ``PretrainedConfig``) with one encoder per language
    (cNV), else None: multilingual encoders read every language the same way."""
    config = getattr(model_or_config, "config", model_or_config)
    get = config.get if isinstance(config, dict) else lambda key: getattr(config, key, None)
    return list(get("languages") or []) if get("model_type") in PER_LANGUAGE_MODELS else None


def trained_languages(config) -> list[str]:
    """The languages a model was trained on (a config dict or ``PretrainedConfig``): its ``training_languages``
    (recorded by ``hf-tlaser train``), else its ``languages`` (older models, cNV)."""
    get = config.get if isinstance(config, dict) else lambda key: getattr(config, key, None)
    return list(get("training_languages") or get("languages") or [])


def check_language(model: torch.nn.Module, lang: str | None) -> None:
    """``ValueError`` unless ``lang`` suits ``model``: one of its languages for a per-language model (cNV), None
    for any other."""
    languages = model_languages(model)
    if languages is None and lang is not None:
        raise ValueError(
            f"lang={lang!r} was given, but {type(model).__name__} has one encoder for every language; leave lang out"
        )
    if languages is not None and lang not in languages:
        given = "no lang was given" if lang is None else f"unknown lang {lang!r}"
        raise ValueError(
            f"{given}: this {model.config.model_type} model embeds each language through its own encoder; "
            f"pass lang= one of {', '.join(languages)}"
        )


def model_encoder(model: torch.nn.Module, tokenizer, lang: str | None) -> tuple[torch.nn.Module, object, dict]:
    """What embeds ``lang``'s texts (``check_language`` first): the model itself for a per-language model (cNV),
    with that language's tokenizer when ``tokenizer`` is None and ``{"lang": lang}`` for its ``encode``; else its
    sentence encoder (``model.encoder`` of a translation model), ``tokenizer`` and no options."""
    check_language(model, lang)
    if lang is None:
        return getattr(model, "encoder", model), tokenizer, {}
    return model, tokenizer if tokenizer is not None else model.get_tokenizer(lang), {"lang": lang}


def warn_passed_prompt(encoder: torch.nn.Module, texts: list[str]) -> None:
    """Warn once per model (``encoder.prompt_warned``, which its forward's check shares) when a text starts with the
    prompt that the model's tokenizer already adds (``config.prompt``, e.g. e5's ``"query: "``)."""
    prompt = getattr(getattr(encoder, "config", None), "prompt", None)
    if not prompt or getattr(encoder, "prompt_warned", False):
        return
    if any(text.lstrip().startswith(prompt.strip()) for text in texts):
        encoder.prompt_warned = True
        logger.warning(repeated_prompt_message(prompt))


def load_model(
    folder: str | os.PathLike, backend: str = "auto", precision: str = "auto", random_init: bool = False
) -> tuple[torch.nn.Module, object]:
    """The encoder and tokenizer of a saved model folder on ``backend`` (``hf_tlaser.backend``: "torch", "onnx",
    "onnx-int8", "openvino", "openvino-int8"; "auto": the fastest backend measured on this CPU class without quality
    loss where ``precision`` is "auto", else torch). Load once, then ``encode`` as often as needed.

    The one place a folder's weights and tokenizer are read: :func:`hf_tlaser.encoders.load` (what the commands and
    the teachers load a model SPEC with) calls it for an hf_tlaser folder. A model with one encoder per language
    (cNV) comes with None for the tokenizer: its per-language tokenizers come with it (``model.get_tokenizer``).
    ``random_init``: the same architecture with fresh weights (``torch.manual_seed(0)``), in torch; a cNV model's
    NMT encoders are fresh too, its saved tokenizers kept."""
    from transformers import AutoModel, AutoTokenizer

    exported = None if random_init else load_backend(folder, backend, precision)
    if exported is not None:
        return exported, AutoTokenizer.from_pretrained(folder)
    model = AutoModel.from_pretrained(folder)
    languages = model_languages(model)
    tokenizer = AutoTokenizer.from_pretrained(folder) if languages is None else None
    if random_init:
        torch.manual_seed(0)
        fresh = type(model)(model.config)
        if languages is not None:
            fresh.tokenizers.update({lang: model.get_tokenizer(lang) for lang in languages})
        model = fresh
    return model.eval(), tokenizer


def encode(
    model: torch.nn.Module | str | os.PathLike,
    tokenizer,
    texts: str | list[str],
    *,
    backend: str | None = None,
    lang: str | None = None,
    max_tokens: int = 16000,
    batch_size: int = 512,
    normalize: bool = False,
    device: str | torch.device | None = None,
    show_progress: bool | None = None,
    convert_to_tensor: bool = False,
    precision: str = "auto",
    autocast_dtype: torch.dtype | None | EllipsisType = ...,
    documents: bool = False,
    document_mode: str = "whole",
    max_words: int | None = 750,
    truncation: bool = False,
) -> np.ndarray | torch.Tensor:
    """Embed ``texts`` with an hf_tlaser encoder (``TLaserModel``, ``LaserModel``, a ``*ForTranslation`` model or a
    bilingual ``CNVModel``).

    A cNV model embeds each language through its own encoder: ``lang`` (one of ``model.languages``) is required and
    every text must be in it; ``tokenizer`` may be None (then ``model.get_tokenizer(lang)``). Other models read
    every language with one encoder and take no ``lang`` (``ValueError`` if given).

    Inputs are sorted by length and batched by a token budget (``max_tokens`` padded tokens, at most
    ``batch_size`` rows), and returned in input order as float32 numpy [N, d] (or a tensor with
    ``convert_to_tensor``). As in sentence-transformers, a single ``str`` is one text and gives one vector [d];
    an empty list gives an empty [0, d] array.

    The model moves to ``device`` (default: ``hf_tlaser.hardware.default_device()``: cuda, else mps, else cpu).
    ``precision`` ("auto", "fp32", "bf16", "fp16") picks the autocast dtype through ``resolve_precision``: "auto"
    is bf16 on CUDA with bf16 and on CPUs that run it natively, fp16 on older CUDA, else fp32. Passing
    ``autocast_dtype`` overrides it: a dtype autocasts to it, ``None`` runs fp32 without autocast.

    Documents (``documents=True``): ``document_mode="whole"`` embeds each document as one sequence, as the
    paper does, truncated to its first ``max_words`` words (750 by default; a warning counts the truncated ones);
    ``document_mode="sentences"`` is LASER's way: split into sentences and average their vectors.

    A model whose tokenizer adds a prompt (``config.prompt``: a warm start from e5 adds ``"query: "``) warns once
    when texts start with it: the prompt is built in and must not be passed again.

    ``backend`` runs the files that ``hf-tlaser export`` wrote into the model's folder instead of torch
    (``hf_tlaser.backend``: "onnx", "onnx-int8", "openvino", "openvino-int8"; "auto": the fastest one measured on
    this CPU class without quality loss, else torch; "torch"). ``model`` may then be the folder itself (or a model
    loaded from it, whose folder is ``config.name_or_path``; ``tokenizer`` None: the folder's). Each call loads the
    backend: for repeated calls, load it once with ``load_model(folder, backend)`` and pass that as ``model``.
    """
    if isinstance(model, (str, os.PathLike)) or backend not in (None, "torch"):
        folder = Path(model if isinstance(model, (str, os.PathLike)) else model.config.name_or_path)
        if not (folder / "config.json").is_file():
            raise ValueError(f"backend={backend!r} needs the model's saved folder; {folder} has no config.json")
        loaded, folder_tokenizer = load_model(folder, backend or "auto", precision)
        model, tokenizer = loaded, tokenizer or folder_tokenizer
    if isinstance(model, ExportedEncoder):
        device, autocast_dtype = torch.device("cpu"), None
    if documents and document_mode not in DOCUMENT_MODES:
        raise ValueError(f"document_mode={document_mode!r}; expected one of {DOCUMENT_MODES}")
    encoder, tokenizer, language = model_encoder(model, tokenizer, lang)
    device = torch.device(device) if device is not None else default_device()
    encoder.to(device)
    if autocast_dtype is ...:
        autocast_dtype = resolve_precision(precision, device).autocast_dtype
    options = dict(
        max_tokens=max_tokens,
        batch_size=batch_size,
        autocast_dtype=autocast_dtype,
        show_progress=show_progress,
        truncation=truncation,
        convert_to_tensor=True,
        **language,
    )
    single = isinstance(texts, str)
    texts = [texts] if single else list(texts)
    warn_passed_prompt(encoder, texts)

    def run(batch: list[str]) -> tuple[torch.Tensor, np.ndarray]:
        return encoder.encode(batch, tokenizer, **options), np.zeros(len(batch), dtype=bool)

    if documents:
        vectors, truncated = embed_documents(run, texts, document_mode, max_words)
        if document_mode == "whole" and truncated.any():
            logger.warning(
                "truncated %d of %d documents to their first %d words", truncated.sum(), len(texts), max_words
            )
    else:
        vectors, _ = run(texts)
    if normalize:
        vectors = torch.nn.functional.normalize(vectors, dim=-1)
    if single:
        vectors = vectors[0]
    return vectors if convert_to_tensor else vectors.numpy()

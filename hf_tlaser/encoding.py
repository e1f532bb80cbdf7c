"""``hf_tlaser.encode``: sentences and documents to vectors with any hf_tlaser encoder."""

from __future__ import annotations

import logging
import re
from types import EllipsisType

import numpy as np
import torch

from hf_tlaser.hardware import default_device, resolve_precision

logger = logging.getLogger(__name__)

DOCUMENT_MODES = ("whole", "sentences")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n+")


def split_sentences(document: str) -> list[str]:
    """Split a document at line breaks and at whitespace after . ! or ? (LASER-style rough segmentation)."""
    return [s.strip() for s in _SENTENCE_END.split(document) if s.strip()] or [""]


def truncate_words(texts: list[str], max_words: int) -> tuple[list[str], int]:
    """Keep the first ``max_words`` whitespace-separated words of each text; return texts and how many were cut."""
    out, cut = [], 0
    for text in texts:
        words = text.split()
        if len(words) > max_words:
            cut += 1
            text = " ".join(words[:max_words])
        out.append(text)
    return out, cut


def encode(
    model: torch.nn.Module,
    tokenizer,
    texts: str | list[str],
    *,
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
    """Embed ``texts`` with an hf_tlaser encoder (``TLaserModel``, ``LaserModel`` or a ``*ForTranslation`` model).

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
    """
    if documents and document_mode not in DOCUMENT_MODES:
        raise ValueError(f"document_mode={document_mode!r}; expected one of {DOCUMENT_MODES}")
    encoder = getattr(model, "encoder", model)
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
    )
    single = isinstance(texts, str)
    texts = [texts] if single else list(texts)
    if documents and document_mode == "whole" and max_words is not None:
        texts, cut = truncate_words(texts, max_words)
        if cut:
            logger.warning("truncated %d of %d documents to their first %d words", cut, len(texts), max_words)
    if documents and document_mode == "sentences":
        pieces = [split_sentences(doc) for doc in texts]
        flat = encoder.encode([s for p in pieces for s in p], tokenizer, **options)
        counts = torch.tensor([len(p) for p in pieces], dtype=torch.long)
        owner = torch.repeat_interleave(torch.arange(len(pieces)), counts)
        sums = torch.zeros(len(pieces), flat.shape[1]).index_add_(0, owner, flat)
        vectors = sums / counts[:, None]
    else:
        vectors = encoder.encode(texts, tokenizer, **options)
    if normalize:
        vectors = torch.nn.functional.normalize(vectors, dim=-1)
    if single:
        vectors = vectors[0]
    return vectors if convert_to_tensor else vectors.numpy()

"""``hf_tlaser.encode``: sentences and documents to vectors with any hf_tlaser encoder."""

from __future__ import annotations

import logging
import re

import numpy as np
import torch

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
    texts: list[str],
    *,
    max_tokens: int = 16000,
    batch_size: int = 512,
    normalize: bool = False,
    device: str | torch.device | None = None,
    show_progress: bool | None = None,
    convert_to_tensor: bool = False,
    autocast_dtype: torch.dtype | None = None,
    documents: bool = False,
    document_mode: str = "whole",
    max_words: int | None = 750,
    truncation: bool = False,
) -> np.ndarray | torch.Tensor:
    """Embed ``texts`` with an hf_tlaser encoder (``TLaserModel``, ``LaserModel`` or a ``*ForTranslation`` model).

    Inputs are sorted by length and batched by a token budget (``max_tokens`` padded tokens, at most
    ``batch_size`` rows), and returned in input order as float32 numpy (or a tensor with ``convert_to_tensor``).

    Documents (``documents=True``): ``document_mode="whole"`` embeds each document as one sequence, as the
    paper does, truncated to its first ``max_words`` words (750 by default; a warning counts the truncated ones);
    ``document_mode="sentences"`` is LASER's way: split into sentences and average their vectors.
    """
    encoder = getattr(model, "encoder", model)
    if device is not None:
        encoder.to(device)
    options = dict(
        max_tokens=max_tokens,
        batch_size=batch_size,
        autocast_dtype=autocast_dtype,
        show_progress=show_progress,
        truncation=truncation,
        convert_to_tensor=True,
    )
    texts = list(texts)
    if documents:
        if document_mode not in DOCUMENT_MODES:
            raise ValueError(f"document_mode={document_mode!r}; expected one of {DOCUMENT_MODES}")
        if document_mode == "whole":
            if max_words is not None:
                texts, cut = truncate_words(texts, max_words)
                if cut:
                    logger.warning("truncated %d of %d documents to their first %d words", cut, len(texts), max_words)
            vectors = encoder.encode(texts, tokenizer, **options)
        else:
            pieces = [split_sentences(doc) for doc in texts]
            flat = encoder.encode([s for p in pieces for s in p], tokenizer, **options)
            owner = torch.repeat_interleave(torch.arange(len(pieces)), torch.tensor([len(p) for p in pieces]))
            sums = torch.zeros(len(pieces), flat.shape[1]).index_add_(0, owner, flat)
            vectors = sums / torch.bincount(owner, minlength=len(pieces)).clamp(min=1)[:, None]
    else:
        vectors = encoder.encode(texts, tokenizer, **options)
    if normalize:
        vectors = torch.nn.functional.normalize(vectors, dim=-1)
    return vectors if convert_to_tensor else vectors.numpy()

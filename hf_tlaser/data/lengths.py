"""Sentence lengths in tokens, computed once (by cleaning) and read by the batch samplers."""

from __future__ import annotations

from collections.abc import Sequence

import datasets
import numpy as np
from transformers import PreTrainedTokenizerBase

from hf_tlaser.data.languages import language_columns

LENGTH_PREFIX = "_len_"
"""``clean_groups(..., tokenizer=tok)`` leaves a column ``_len_<lang>``: encoder-format length, 0 where absent."""


def token_counts(
    texts: list[str], tokenizer: PreTrainedTokenizerBase | None, add_special_tokens: bool = False
) -> list[int]:
    """Subword count of each text (whitespace words without a tokenizer).

    Uses the Rust backend's parallel ``encode_batch`` directly: several times faster than ``tokenizer(texts)``.
    """
    if not texts:  # tokenizers fail on an empty batch
        return []
    if tokenizer is None:
        return [len(text.split()) + (2 if add_special_tokens else 0) for text in texts]
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        return [len(ids) for ids in tokenizer(texts, add_special_tokens=add_special_tokens)["input_ids"]]
    # a loaded tokenizer may carry padding/truncation settings in its backend: count without them, then restore them
    padding, truncation = backend.padding, backend.truncation
    backend.no_padding()
    backend.no_truncation()
    try:
        return [len(enc.ids) for enc in backend.encode_batch(texts, add_special_tokens=add_special_tokens)]
    finally:
        if padding is not None:
            backend.enable_padding(**padding)
        if truncation is not None:
            backend.enable_truncation(**truncation)


def sentence_lengths(
    dataset: datasets.Dataset,
    tokenizer: PreTrainedTokenizerBase | None = None,
    languages: Sequence[str] | None = None,
    batch_size: int = 10_000,
) -> dict[str, np.ndarray]:
    """Encoder-format length (tokens incl. ``STR_TAG`` and ``</s>``) of every sentence of ``languages`` (default:
    every language column), 0 where absent or empty.

    Reads the ``_len_<lang>`` columns that ``clean_groups`` wrote with the same tokenizer when they exist;
    otherwise tokenizes (without a tokenizer: whitespace tokens + 2, an approximation).
    """
    languages = language_columns(dataset.column_names, languages)
    stored = [LENGTH_PREFIX + lang for lang in languages]
    if tokenizer is not None and set(stored) <= set(dataset.column_names):
        table = dataset.select_columns(stored).with_format("numpy")[:]  # one batched read, not row by row
        return {lang: np.asarray(table[col], dtype=np.int64) for lang, col in zip(languages, stored)}

    def lengths(batch: dict[str, list]) -> dict[str, list[int]]:
        out = {}
        for lang in languages:
            texts = batch[lang]
            present = [i for i, text in enumerate(texts) if text]
            column = [0] * len(texts)
            for i, count in zip(present, token_counts([texts[i] for i in present], tokenizer, add_special_tokens=True)):
                column[i] = count
            out[lang] = column
        return out

    features = datasets.Features({lang: datasets.Value("int32") for lang in languages})
    table = (
        dataset.select_columns(languages)
        .map(lengths, batched=True, batch_size=batch_size, features=features, desc="sentence lengths")
        .with_format("numpy")[:]
    )
    return {lang: np.asarray(table[lang], dtype=np.int64) for lang in languages}

"""Non-English pairs from English-centric bitexts: join bitexts that share their English sentence."""

from __future__ import annotations

import hashlib
import logging
from collections import Counter
from collections.abc import Sequence

import datasets
import numpy as np

from hf_tlaser.data.languages import LANGUAGES

logger = logging.getLogger(__name__)


def normalize_whitespace(text: str) -> str:
    """Collapse every whitespace run to one space and strip the ends (the join key)."""
    return " ".join(text.split())


def _key(text: str) -> int:
    return int.from_bytes(
        hashlib.blake2b(normalize_whitespace(text).encode(), digest_size=8).digest(), "little", signed=True
    )


def join_on_english(
    dataset: datasets.Dataset, languages: Sequence[str] = LANGUAGES, pivot: str = "en", batch_size: int = 10_000
) -> datasets.Dataset:
    """Merge bitexts (pivot + one other language) whose pivot sentences match after whitespace normalisation.

    For every pivot sentence found in bitexts of >= 2 different languages, the first bitext of each language is
    replaced by one multi-way group (pivot + those languages), which yields e.g. de-es from de-en and en-es.
    Other rows (multi-way groups, unmatched bitexts, repeated same-language bitexts) are kept unchanged.
    Only 64-bit hashes are held in memory for the whole dataset.
    """
    others = [lang for lang in languages if lang != pivot and lang in dataset.column_names]
    keys = np.zeros(len(dataset), dtype=np.int64)
    other_lang = np.full(len(dataset), -1, dtype=np.int8)
    offset = 0
    for batch in dataset.select_columns([pivot, *others]).iter(batch_size=batch_size):
        for i, text in enumerate(batch[pivot]):
            present = [j for j, lang in enumerate(others) if batch[lang][i]]
            if text and len(present) == 1:
                keys[offset + i] = _key(text)
                other_lang[offset + i] = present[0]
        offset += len(batch[pivot])

    rows = np.nonzero(other_lang >= 0)[0]
    rows = rows[np.lexsort((rows, other_lang[rows], keys[rows]))]
    first = np.ones(len(rows), dtype=bool)  # first bitext of each (key, language)
    first[1:] = (keys[rows[1:]] != keys[rows[:-1]]) | (other_lang[rows[1:]] != other_lang[rows[:-1]])
    rows = rows[first]
    unique_keys, n_langs = np.unique(keys[rows], return_counts=True)
    candidates = np.sort(rows[np.isin(keys[rows], unique_keys[n_langs >= 2])])
    if len(candidates) == 0:
        logger.info("pivot join on %r: no shared %s sentences between bitexts of different languages", pivot, pivot)
        return dataset

    groups: dict[str, dict[str, str | None]] = {}  # exact normalised pivot text -> merged group (no hash collisions)
    members: dict[str, list[int]] = {}
    for row, item in zip(candidates.tolist(), dataset.select(candidates)):
        norm = normalize_whitespace(item[pivot])
        group = groups.setdefault(norm, {**dict.fromkeys(dataset.column_names), pivot: item[pivot], "corpus": None})
        lang = next(lang for lang in others if item[lang])
        if group[lang] is None:
            group[lang] = item[lang]
            group["corpus"] = item["corpus"] if group["corpus"] is None else f"{group['corpus']}+{item['corpus']}"
            members.setdefault(norm, []).append(row)
    merged = [norm for norm in groups if len(members[norm]) >= 2]
    consumed = np.zeros(len(dataset), dtype=bool)
    for norm in merged:
        consumed[members[norm]] = True
    new_pairs = Counter(
        f"{a}-{b}" for norm in merged for a in others for b in others if a < b and groups[norm][a] and groups[norm][b]
    )
    logger.info(
        "pivot join on %r: %d bitexts merged into %d multi-way groups (new pairs: %s)",
        pivot,
        int(consumed.sum()),
        len(merged),
        dict(sorted(new_pairs.items())),
    )
    joined = datasets.Dataset.from_list([groups[norm] for norm in merged], features=dataset.features)
    kept = dataset.select(np.nonzero(~consumed)[0])
    return datasets.concatenate_datasets([kept, joined])

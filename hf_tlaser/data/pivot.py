"""Non-English pairs from English-centric bitexts: join bitexts that share their English sentence."""

from __future__ import annotations

import hashlib
import logging
from collections import Counter
from collections.abc import Sequence

import datasets
import numpy as np

from hf_tlaser.data.languages import language_columns

logger = logging.getLogger(__name__)


MULTIWAY = np.iinfo(np.int16).max
"""``kind`` of a row with the pivot and two or more other languages (sorted after every bitext language)."""


def normalize_whitespace(text: str) -> str:
    """Collapse every whitespace run to one space and strip the ends (the join key)."""
    return " ".join(text.split())


def _key(text: str) -> int:
    return int.from_bytes(
        hashlib.blake2b(normalize_whitespace(text).encode(), digest_size=8).digest(), "little", signed=True
    )


def join_on_english(
    dataset: datasets.Dataset,
    languages: Sequence[str] | None = None,
    pivot: str = "en",
    batch_size: int = 10_000,
) -> datasets.Dataset:
    """Merge bitexts (pivot + one other language) into the groups whose pivot sentence they share (after whitespace
    normalisation), which yields e.g. de-es from de-en and en-es, or cs-es from a cs-en bitext and a multi-way set.

    For every pivot sentence, the first multi-way group (pivot + two or more languages) that has it, if any, and the
    first bitext of each language are candidates; the bitexts of languages that group lacks (or, without such a
    group, the bitexts of two or more languages) are merged into one group that replaces its members. Other rows
    (unmatched bitexts, repeated same-language bitexts, other multi-way groups) are kept unchanged. Only 64-bit
    hashes are held in memory for the whole dataset.
    """
    others = [lang for lang in language_columns(dataset.column_names, languages) if lang != pivot]
    keys = np.zeros(len(dataset), dtype=np.int64)
    kind = np.full(len(dataset), -1, dtype=np.int16)  # language index of a bitext, MULTIWAY, or -1 (neither)
    offset = 0
    for batch in dataset.select_columns([pivot, *others]).iter(batch_size=batch_size):
        for i, text in enumerate(batch[pivot]):
            present = [j for j, lang in enumerate(others) if batch[lang][i]]
            if text and present:
                keys[offset + i] = _key(text)
                kind[offset + i] = present[0] if len(present) == 1 else MULTIWAY
        offset += len(batch[pivot])

    rows = np.nonzero(kind >= 0)[0]
    rows = rows[np.lexsort((rows, kind[rows], keys[rows]))]  # per key: bitexts by language, then multi-way groups
    first = np.ones(len(rows), dtype=bool)  # the first row of each (key, language or MULTIWAY)
    first[1:] = (keys[rows[1:]] != keys[rows[:-1]]) | (kind[rows[1:]] != kind[rows[:-1]])
    rows = rows[first]
    unique_keys, n_units = np.unique(keys[rows], return_counts=True)
    candidates = np.sort(rows[np.isin(keys[rows], unique_keys[n_units >= 2])])
    if len(candidates) == 0:
        logger.info("pivot join on %r: no shared %s sentences between bitexts or groups", pivot, pivot)
        return dataset

    groups: dict[str, dict[str, str | None]] = {}  # exact normalised pivot text -> merged group (no hash collisions)
    anchors: dict[str, tuple[int, set[str]]] = {}  # normalised pivot text -> (row, languages) of its multi-way group
    added: dict[str, list[int]] = {}  # normalised pivot text -> rows of the bitexts merged into it
    multiway = kind[candidates] == MULTIWAY
    for row, item in zip(candidates[multiway].tolist(), dataset.select(candidates[multiway])):
        norm = normalize_whitespace(item[pivot])
        if norm not in groups:
            groups[norm], anchors[norm] = dict(item), (row, {lang for lang in others if item[lang]})
    for row, item in zip(candidates[~multiway].tolist(), dataset.select(candidates[~multiway])):
        norm = normalize_whitespace(item[pivot])
        group = groups.setdefault(norm, {**dict.fromkeys(dataset.column_names), pivot: item[pivot], "corpus": None})
        lang = others[kind[row]]
        if group[lang] is None:
            group[lang] = item[lang]
            group["corpus"] = item["corpus"] if group["corpus"] is None else f"{group['corpus']}+{item['corpus']}"
            added.setdefault(norm, []).append(row)
    merged = [norm for norm in groups if len(added.get(norm, [])) + (norm in anchors) >= 2]
    consumed = np.zeros(len(dataset), dtype=bool)
    for norm in merged:
        consumed[added[norm] + ([anchors[norm][0]] if norm in anchors else [])] = True
    new_pairs = Counter(
        f"{a}-{b}"
        for norm in merged
        for a in others
        for b in others
        if a < b and groups[norm][a] and groups[norm][b] and not {a, b} <= anchors.get(norm, (0, set()))[1]
    )
    logger.info(
        "pivot join on %r: %d bitexts merged into %d groups (%d of them multi-way groups that gained languages; "
        "new pairs: %s)",
        pivot,
        sum(len(added[norm]) for norm in merged),
        len(merged),
        sum(norm in anchors for norm in merged),
        dict(sorted(new_pairs.items())),
    )
    joined = datasets.Dataset.from_list([groups[norm] for norm in merged], features=dataset.features)
    kept = dataset.select(np.nonzero(~consumed)[0])
    return datasets.concatenate_datasets([kept, joined])

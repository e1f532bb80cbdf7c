"""Which scored candidates become pairs: LASER's retrieval modes, each sentence used once, the threshold."""

from __future__ import annotations

import heapq
import shutil
from array import array
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import TypeVar

import numpy as np

from .margin import Candidates
from .texts import KEY_DTYPE

RETRIEVALS = ("fwd", "bwd", "max", "intersect")
T = TypeVar("T")
DEFAULT_THRESHOLDS = {"ratio": 1.04, "distance": 0.0, "absolute": 0.0}
"""``--threshold`` by margin: 1.04 is the ratio threshold LASER's WikiMatrix README recommends for most pairs."""


def check_retrieval(retrieval: str) -> None:
    """Raise on an unknown retrieval mode, listing the valid ones."""
    if retrieval not in RETRIEVALS:
        raise ValueError(f"unknown retrieval {retrieval!r}; valid: {', '.join(RETRIEVALS)}")


RUNS = {"fwd": ("fwd",), "bwd": ("bwd",), "intersect": ("fwd",), "max": ("fwd", "bwd")}
"""The directions whose best candidates each retrieval mode takes, in the order that breaks ties of equal score."""
PAIR_DTYPE = np.dtype([("score", "<f4"), ("src", "<i8"), ("tgt", "<i8")])
"""A scored pair as one record: what a staged pipeline's sorted runs (``margin`` stage) hold."""
Pairs = tuple[np.ndarray, np.ndarray, np.ndarray]
"""``(scores, src_ids, tgt_ids)``."""


def direction_pairs(best: np.ndarray, score: np.ndarray, direction: str, offset: int = 0) -> Pairs:
    """Each query's best candidate as a pair: ``fwd`` queries are sources, ``bwd`` queries are targets, numbered
    from ``offset`` (a shard of the queries)."""
    queries = np.arange(offset, offset + len(best))
    return (score, queries, best) if direction == "fwd" else (score, best, queries)


def mutual(pairs: Pairs, bwd_best: np.ndarray) -> Pairs:
    """The forward pairs whose target's best source (``bwd_best``, -1: none) is their source (``intersect``)."""
    scores, src, tgt = pairs
    both = bwd_best[np.maximum(tgt, 0)] == src
    return scores[both], src[both], tgt[both]


def best_first(pairs: Pairs) -> Pairs:
    """The pairs with a finite score (an approximate index's missing candidates score ``-inf``), by decreasing score;
    equal scores keep their order."""
    scores, src, tgt = pairs
    keep = np.flatnonzero(np.isfinite(scores))
    order = keep[np.argsort(-scores[keep], kind="stable")]
    return scores[order], src[order], tgt[order]


def select_pairs(
    fwd: Candidates,
    bwd: Candidates,
    retrieval: str = "max",
    *,
    threshold: float | None = None,
    one_to_one: bool = False,
) -> Pairs:
    """Pairs ``(scores, src_ids, tgt_ids)`` chosen from margin-scored candidates, by decreasing score.

    ``fwd``: each source's candidate targets, ``bwd``: each target's candidate sources (see ``margin_scores``).
    ``fwd``/``bwd``/``intersect``/``max`` as in :func:`mine`; ``max`` (and every mode with ``one_to_one``) walks the
    pairs by decreasing score and keeps a pair only when neither sentence is used yet. Pairs with a score <=
    ``threshold`` and candidates an approximate index did not find (score ``-inf``) are dropped.
    """
    check_retrieval(retrieval)
    fwd_best, fwd_score = fwd.best()
    bwd_best, bwd_score = bwd.best()
    pairs = {"fwd": direction_pairs(fwd_best, fwd_score, "fwd"), "bwd": direction_pairs(bwd_best, bwd_score, "bwd")}
    if retrieval == "intersect":
        pairs["fwd"] = mutual(pairs["fwd"], bwd_best)
    chosen = [pairs[direction] for direction in RUNS[retrieval]]
    scores, src, tgt = best_first(tuple(np.concatenate(column) for column in zip(*chosen)))
    if retrieval == "max" or one_to_one:
        first = greedy_one_to_one(src, tgt)
        scores, src, tgt = scores[first], src[first], tgt[first]
    if threshold is not None:
        above = scores > threshold
        scores, src, tgt = scores[above], src[above], tgt[above]
    return scores, src, tgt


def first_uses(pairs: Iterable[tuple[T, int, int]], sizes: tuple[int, int]) -> Iterator[tuple[T, int, int]]:
    """The ``(tag, src, tgt)`` pairs, taken in order, whose source and target are both still unused (``sizes``: how
    many sources and targets there are; a byte of memory each)."""
    used_src, used_tgt = bytearray(sizes[0]), bytearray(sizes[1])
    for tag, i, j in pairs:
        if not used_src[i] and not used_tgt[j]:
            used_src[i] = used_tgt[j] = 1
            yield tag, i, j


def greedy_one_to_one(src: np.ndarray, tgt: np.ndarray) -> np.ndarray:
    """Positions of the pairs ``(src[p], tgt[p])``, taken in order, whose source and target are both still unused."""
    sizes = int(src.max(initial=-1)) + 1, int(tgt.max(initial=-1)) + 1
    kept = first_uses(zip(range(len(src)), src.tolist(), tgt.tolist()), sizes)
    return np.fromiter((position for position, _, _ in kept), dtype=np.int64)


def merged_one_to_one(runs: Sequence[np.ndarray], sizes: tuple[int, int], block: int = 65536) -> Pairs:
    """The pairs of ``runs`` (arrays of :data:`PAIR_DTYPE` records, each best first: memory maps, read ``block``
    records at a time) taken as :func:`select_pairs` takes the pairs of their concatenation: by decreasing score,
    equal scores in the runs' order (``heapq.merge`` is stable), each sentence used once. What a staged pipeline's
    ``mine`` stage does with its query shards' runs, in the memory of the pairs it keeps and a byte per sentence."""

    def records(run: np.ndarray) -> Iterator[tuple[float, int, int]]:
        for start in range(0, len(run), block):
            part = np.asarray(run[start : start + block])
            yield from zip(part["score"].tolist(), part["src"].tolist(), part["tgt"].tolist())

    scores, src, tgt = array("f"), array("q"), array("q")
    for score, i, j in first_uses(heapq.merge(*map(records, runs), key=lambda pair: -pair[0]), sizes):
        scores.append(score)
        src.append(i)
        tgt.append(j)
    return np.frombuffer(scores, np.float32), np.frombuffer(src, np.int64), np.frombuffer(tgt, np.int64)


def unique_rows(texts: list[str]) -> np.ndarray:
    """Row numbers of the first occurrence of every distinct non-blank line, in file order."""
    first: dict[str, int] = {}
    for row, text in enumerate(texts):
        if text.strip():
            first.setdefault(text, row)
    return np.fromiter(first.values(), dtype=np.int64, count=len(first))


BUCKET_ROWS = 1 << 24
"""Keys :func:`first_rows` holds at a time (24 bytes each: 400 MB)."""
_RECORD = np.dtype([("key", KEY_DTYPE), ("row", "<i8")])


def first_rows(parts: Sequence[np.ndarray], path: Path, bucket_rows: int = BUCKET_ROWS, block: int = 1 << 20) -> int:
    """Write (``.npy``) what :func:`unique_rows` gives for a file's lines, from their keys (``parts``: the
    :data:`~hf_tlaser.bitext.texts.KEY_DTYPE` keys of its lines, part after part in file order, zero for a blank
    line), in bounded memory: the (key, line) records are dealt into buckets of about ``bucket_rows`` by key (files
    beside ``path``), each bucket's first occurrences found apart, and the buckets' sorted line numbers merged by
    ranges of ``block`` lines into a memory map. Returns how many lines were written."""
    total = sum(len(part) for part in parts)
    buckets = max(1, -(-total // bucket_rows))
    folder = path.with_name(path.name + ".buckets")
    shutil.rmtree(folder, ignore_errors=True)  # a killed task's
    folder.mkdir(parents=True)
    try:
        handles = [(folder / f"{bucket}.bin").open("wb") for bucket in range(buckets)]
        offset = 0
        for part in parts:
            for start in range(0, len(part), block):
                records = np.empty(min(block, len(part) - start), dtype=_RECORD)
                records["key"], records["row"] = part[start : start + len(records)], offset + start
                records["row"] += np.arange(len(records))
                records = records[(records["key"]["hi"] | records["key"]["lo"]) != 0]  # blank lines are not mined
                which = records["key"]["lo"] % buckets
                for bucket in np.unique(which).tolist():
                    records[which == bucket].tofile(handles[bucket])
            offset += len(part)
        for handle in handles:
            handle.close()
        firsts = []
        for bucket in range(buckets):
            records = np.fromfile(folder / f"{bucket}.bin", dtype=_RECORD)
            _, first = np.unique(records["key"], return_index=True)  # the first of equal keys: the earliest line
            np.save(folder / f"{bucket}.npy", np.sort(records["row"][first]))
            firsts.append(np.load(folder / f"{bucket}.npy", mmap_mode="r"))
        count = sum(len(first) for first in firsts)
        out = np.lib.format.open_memmap(path, mode="w+", dtype=np.int64, shape=(count,))
        written = 0
        for low in range(0, total, block):
            ranges = [(first, np.searchsorted(first, [low, low + block])) for first in firsts]
            merged = np.sort(np.concatenate([first[a:b] for first, (a, b) in ranges]))
            out[written : written + len(merged)] = merged
            written += len(merged)
        out.flush()
        del out, firsts
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return count

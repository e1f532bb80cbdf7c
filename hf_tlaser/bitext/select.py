"""Which scored candidates become pairs: LASER's retrieval modes, each sentence used once, the threshold."""

from __future__ import annotations

import numpy as np

from .margin import Candidates

RETRIEVALS = ("fwd", "bwd", "max", "intersect")
DEFAULT_THRESHOLDS = {"ratio": 1.04, "distance": 0.0, "absolute": 0.0}
"""``--threshold`` by margin: 1.04 is the ratio threshold LASER's WikiMatrix README recommends for most pairs."""


def check_retrieval(retrieval: str) -> None:
    """Raise on an unknown retrieval mode, listing the valid ones."""
    if retrieval not in RETRIEVALS:
        raise ValueError(f"unknown retrieval {retrieval!r}; valid: {', '.join(RETRIEVALS)}")


def select_pairs(
    fwd: Candidates,
    bwd: Candidates,
    retrieval: str = "max",
    *,
    threshold: float | None = None,
    one_to_one: bool = False,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pairs ``(scores, src_ids, tgt_ids)`` chosen from margin-scored candidates, by decreasing score.

    ``fwd``: each source's candidate targets, ``bwd``: each target's candidate sources (see ``margin_scores``).
    ``fwd``/``bwd``/``intersect``/``max`` as in :func:`mine`; ``max`` (and every mode with ``one_to_one``) walks the
    pairs by decreasing score and keeps a pair only when neither sentence is used yet. Pairs with a score <=
    ``threshold`` and candidates an approximate index did not find (score ``-inf``) are dropped.
    """
    check_retrieval(retrieval)
    fwd_best, fwd_score = fwd.best()
    bwd_best, bwd_score = bwd.best()
    src_ids, tgt_ids = np.arange(len(fwd_best)), np.arange(len(bwd_best))
    if retrieval == "fwd":
        scores, src, tgt = fwd_score, src_ids, fwd_best
    elif retrieval == "bwd":
        scores, src, tgt = bwd_score, bwd_best, tgt_ids
    elif retrieval == "intersect":
        mutual = bwd_best[np.maximum(fwd_best, 0)] == src_ids
        scores, src, tgt = fwd_score[mutual], src_ids[mutual], fwd_best[mutual]
    else:
        scores = np.concatenate([fwd_score, bwd_score])
        src, tgt = np.concatenate([src_ids, bwd_best]), np.concatenate([fwd_best, tgt_ids])
    keep = np.isfinite(scores)
    scores, src, tgt = scores[keep], src[keep], tgt[keep]
    order = np.argsort(-scores, kind="stable")
    scores, src, tgt = scores[order], src[order], tgt[order]
    if retrieval == "max" or one_to_one:
        first = greedy_one_to_one(src, tgt)
        scores, src, tgt = scores[first], src[first], tgt[first]
    if threshold is not None:
        above = scores > threshold
        scores, src, tgt = scores[above], src[above], tgt[above]
    return scores, src, tgt


def greedy_one_to_one(src: np.ndarray, tgt: np.ndarray) -> np.ndarray:
    """Positions of the pairs ``(src[p], tgt[p])``, taken in order, whose source and target are both still unused."""
    used_src, used_tgt, kept = set(), set(), []
    for position, (i, j) in enumerate(zip(src.tolist(), tgt.tolist())):
        if i not in used_src and j not in used_tgt:
            used_src.add(i)
            used_tgt.add(j)
            kept.append(position)
    return np.asarray(kept, dtype=np.int64)


def unique_rows(texts: list[str]) -> np.ndarray:
    """Row numbers of the first occurrence of every distinct non-blank line, in file order."""
    first: dict[str, int] = {}
    for row, text in enumerate(texts):
        if text.strip():
            first.setdefault(text, row)
    return np.fromiter(first.values(), dtype=np.int64, count=len(first))

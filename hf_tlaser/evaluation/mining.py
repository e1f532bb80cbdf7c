"""Margin-based bitext mining (LASER's ``mine_bitexts.py`` scoring and retrieval modes).

kNN runs on faiss (``IndexFlatIP``) when ``faiss-cpu`` is importable, else on batched torch matmul.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from .knn import Backend, Candidates, as_matrix, check_pair, l2_normalize, margin_candidates
from .retrieval import Array

RETRIEVALS = ("fwd", "bwd", "max", "intersect")


def mine(
    src_emb: Array,
    tgt_emb: Array,
    src_texts: list[str] | None = None,
    tgt_texts: list[str] | None = None,
    *,
    k: int = 4,
    retrieval: str = "max",
    margin: str = "ratio",
    threshold: float | None = None,
    output: str | os.PathLike | None = None,
    backend: Backend = "auto",
) -> list[tuple[float, int, int]]:
    """Mine translation pairs; returns ``(score, src_idx, tgt_idx)`` sorted by decreasing score.

    Retrieval: ``fwd`` best target per source, ``bwd`` best source per target, ``intersect`` pairs that are
    best in both directions, ``max`` the union of both directions taken greedily by score so that each
    sentence is used once. Pairs with score <= ``threshold`` are dropped. With ``output``, writes a TSV
    ``score<TAB>src<TAB>tgt`` (texts when given, else indices).
    """
    check_retrieval(retrieval)
    src = as_matrix(src_emb, "src_emb")
    tgt = as_matrix(tgt_emb, "tgt_emb")
    check_pair(src, tgt)
    for texts, emb, name in ((src_texts, src, "src_texts"), (tgt_texts, tgt, "tgt_texts")):
        if texts is not None and len(texts) != emb.shape[0]:
            raise ValueError(f"{name} has {len(texts)} entries but its embeddings have {emb.shape[0]} rows")
    fwd, bwd = margin_candidates(l2_normalize(src), l2_normalize(tgt), k=k, margin=margin, backend=backend)
    scores, src_ids, tgt_ids = select_pairs(fwd, bwd, retrieval, threshold=threshold)
    result = [(float(s), int(i), int(j)) for s, i, j in zip(scores, src_ids, tgt_ids)]
    if output is not None:
        write_bitexts(result, output, src_texts, tgt_texts)
    return result


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


def write_bitexts(
    pairs: list[tuple[float, int, int]],
    output: str | os.PathLike,
    src_texts: list[str] | None = None,
    tgt_texts: list[str] | None = None,
) -> Path:
    """Write mined pairs as ``score<TAB>src<TAB>tgt`` lines (texts when given, else indices)."""
    path = Path(output)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8", newline="\n") as f:
        for score, i, j in pairs:
            src = src_texts[i] if src_texts is not None else str(i)
            tgt = tgt_texts[j] if tgt_texts is not None else str(j)
            f.write(f"{score:.6f}\t{src}\t{tgt}\n")
    return path


def mining_f1(
    src_emb: Array, tgt_emb: Array, *, k: int = 4, margin: str = "ratio", backend: Backend = "auto"
) -> dict[str, float]:
    """Mine (``retrieval="max"``) between two aligned sets whose row i translates row i and score it as BUCC does:
    precision, recall and F1 (%) of the mined pairs above the score threshold that maximises F1."""
    pairs = mine(src_emb, tgt_emb, k=k, retrieval="max", margin=margin, backend=backend)
    return pairs_f1(pairs, as_matrix(src_emb, "src_emb").shape[0])


def candidates_f1(fwd: Candidates, bwd: Candidates) -> dict[str, float]:
    """``mining_f1`` of margin-scored candidates (``margin_candidates`` of two aligned sets)."""
    scores, src_ids, tgt_ids = select_pairs(fwd, bwd, "max")
    pairs = [(float(s), int(i), int(j)) for s, i, j in zip(scores, src_ids, tgt_ids)]
    return pairs_f1(pairs, len(fwd.ids))


def pairs_f1(pairs: list[tuple[float, int, int]], n_src: int) -> dict[str, float]:
    """BUCC scores (%) of mined ``(score, src, tgt)`` pairs, best first, between ``n_src`` aligned rows."""
    if not pairs:
        return {"f1": 0.0, "precision": 0.0, "recall": 0.0, "threshold": float("nan")}
    correct = np.cumsum([i == j for _, i, j in pairs])
    precision = correct / np.arange(1, len(pairs) + 1)
    recall = correct / n_src
    f1 = np.where(correct > 0, 2 * precision * recall / np.maximum(precision + recall, 1e-12), 0.0)
    best = int(np.argmax(f1))
    return {
        "f1": round(100 * float(f1[best]), 2),
        "precision": round(100 * float(precision[best]), 2),
        "recall": round(100 * float(recall[best]), 2),
        "threshold": round(pairs[best][0], 4),
    }

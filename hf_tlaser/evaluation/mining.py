"""BUCC's scores of margin-based mining between aligned sets (the mining itself: :mod:`hf_tlaser.bitext`)."""

from __future__ import annotations

import numpy as np

from hf_tlaser.bitext.knn import Array, Backend, as_matrix
from hf_tlaser.bitext.margin import Candidates
from hf_tlaser.bitext.mining import mine
from hf_tlaser.bitext.select import select_pairs


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

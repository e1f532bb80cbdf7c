"""LASER's margin scores of k-nearest-neighbour lists (``mine_bitexts.py``), for evaluation and for mining alike."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass

import numpy as np

from .knn import Backend, NeighbourLists, knn

MARGINS: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "absolute": lambda cos, avg: cos,
    "distance": lambda cos, avg: cos - avg,
    # a row whose k nearest neighbours all have cosine 0 (sparse lexical vectors sharing no n-gram, e.g. Han text
    # against Latin) has no margin: score 0 instead of 0/0 = NaN, which argmax would pick as the best candidate
    "ratio": lambda cos, avg: np.divide(cos, avg, out=np.zeros_like(cos), where=avg != 0),
}


def check_margin(margin: str) -> None:
    """Raise on an unknown margin mode, listing the valid ones."""
    if margin not in MARGINS:
        raise ValueError(f"unknown margin {margin!r}; valid: {', '.join(MARGINS)}")


@dataclass
class Candidates:
    """k candidates per query (``ids``) with their margin scores (``scores``), both ``(n_queries, k)``."""

    ids: np.ndarray
    scores: np.ndarray

    def best(self) -> tuple[np.ndarray, np.ndarray]:
        """Best candidate per query and its score (first of the k on ties)."""
        col = self.scores.argmax(axis=1)
        rows = np.arange(len(col))
        return self.ids[rows, col], self.scores[rows, col]


def margin_candidates(
    x: np.ndarray, y: np.ndarray, k: int = 4, margin: str = "ratio", backend: Backend = "auto"
) -> tuple[Candidates, Candidates]:
    """Forward (x -> y) and backward (y -> x) candidates scored with LASER's margin (see ``margin_scores``).

    ``x`` and ``y`` must be L2-normalised; the candidates are the k nearest neighbours by cosine (exact search).
    """
    check_margin(margin)
    fwd_sim, fwd_ids = knn(x, y, min(k, y.shape[0]), backend)
    bwd_sim, bwd_ids = knn(y, x, min(k, x.shape[0]), backend)
    return margin_scores(fwd_sim, fwd_ids, bwd_sim, bwd_ids, margin)


def neighbour_means(sims: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Mean cosine of each row's neighbours, ignoring the slots whose id is -1 (not found by an approximate index)."""
    found = ids >= 0
    return np.where(found, sims, 0).sum(axis=1) / np.maximum(found.sum(axis=1), 1)


def margin_scores(
    fwd_sim: np.ndarray, fwd_ids: np.ndarray, bwd_sim: np.ndarray, bwd_ids: np.ndarray, margin: str = "ratio"
) -> tuple[Candidates, Candidates]:
    """LASER's margin scores (``mine_bitexts.py``) of the kNN lists of both directions.

    ``fwd_sim``/``fwd_ids`` are the cosines and ids of each x's nearest y's, ``bwd_*`` of each y's nearest x's. A
    pair (x, y) scores ``margin(cos(x, y), (avg_knn(x) + avg_knn(y)) / 2)`` where ``avg_knn`` is the mean cosine of
    a row's neighbours in the other set: ``ratio`` divides, ``distance`` subtracts, ``absolute`` keeps the cosine.
    Slots with id -1 score ``-inf``.
    """
    check_margin(margin)
    fwd_mean, bwd_mean = neighbour_means(fwd_sim, fwd_ids), neighbour_means(bwd_sim, bwd_ids)
    return (
        scored_candidates(fwd_sim, fwd_ids, fwd_mean, bwd_mean, margin),
        scored_candidates(bwd_sim, bwd_ids, bwd_mean, fwd_mean, margin),
    )


def scored_candidates(sims: np.ndarray, ids: np.ndarray, own: np.ndarray, other: np.ndarray, margin: str) -> Candidates:
    """One direction's candidates (``sims``/``ids``: its queries' kNN lists) scored with LASER's margin (see
    ``margin_scores``): ``own`` is the mean neighbour cosine of each query (:func:`neighbour_means`), ``other`` that of
    every row of the other side (a staged pipeline's query shard scores its lists alone with them)."""
    found = ids >= 0
    values = MARGINS[margin](
        np.where(found, sims, 0).astype(np.float32), (own[:, None] + other[np.where(found, ids, 0)]) / 2
    )
    return Candidates(ids, np.where(found, values, -np.inf).astype(np.float32))


def list_candidates(
    lists: NeighbourLists, x: Hashable, y: Hashable, margin: str = "ratio"
) -> tuple[Candidates, Candidates]:
    """``margin_candidates`` of ``x`` against ``y`` from their kNN lists: forward (x -> y) and backward (y -> x)."""
    check_margin(margin)
    return margin_scores(*lists(x, y), *lists(y, x), margin)

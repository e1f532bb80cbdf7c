"""k-nearest-neighbour search and LASER's margin scores.

Backends: ``faiss`` (exact ``IndexFlatIP``, used when ``faiss-cpu`` is importable) and ``torch`` (batched exact
matmul + ``topk``). ``backend="auto"`` picks faiss when available, else torch; both return the same neighbours.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch

Backend = Literal["auto", "faiss", "torch"]

MARGINS: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "absolute": lambda cos, avg: cos,
    "distance": lambda cos, avg: cos - avg,
    "ratio": lambda cos, avg: cos / avg,
}


def faiss_available() -> bool:
    """Whether ``faiss`` can be imported."""
    try:
        import faiss  # noqa: F401
    except ImportError:
        return False
    return True


def as_matrix(emb: np.ndarray | torch.Tensor, name: str) -> np.ndarray:
    """Return ``emb`` as a C-contiguous float32 2-D numpy array; ``name`` is used in error messages."""
    if isinstance(emb, torch.Tensor):
        emb = emb.detach().cpu().float().numpy()
    arr = np.ascontiguousarray(np.asarray(emb, dtype=np.float32))
    if arr.ndim != 2 or arr.shape[0] == 0:
        raise ValueError(f"{name} must be a non-empty 2-D array (n, dim), got shape {arr.shape}")
    return arr


def l2_normalize(x: np.ndarray) -> np.ndarray:
    """Row-wise L2 normalisation (zero rows stay zero)."""
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return (x / np.maximum(norms, 1e-12)).astype(np.float32)


def check_pair(src: np.ndarray, tgt: np.ndarray, src_name: str = "src_emb", tgt_name: str = "tgt_emb") -> None:
    """Raise if the two embedding matrices have different dimensions."""
    if src.shape[1] != tgt.shape[1]:
        raise ValueError(f"{src_name} has dimension {src.shape[1]} but {tgt_name} has dimension {tgt.shape[1]}")


def check_margin(margin: str) -> None:
    """Raise on an unknown margin mode, listing the valid ones."""
    if margin not in MARGINS:
        raise ValueError(f"unknown margin {margin!r}; valid: {', '.join(MARGINS)}")


def knn(
    queries: np.ndarray, database: np.ndarray, k: int, backend: Backend = "auto", batch_size: int = 4096
) -> tuple[np.ndarray, np.ndarray]:
    """Exact inner-product kNN: ``(sims, ids)``, both ``(len(queries), k)``, best first.

    ``faiss`` uses ``IndexFlatIP``; ``torch`` does batched ``queries @ database.T`` and ``topk``.
    """
    if backend == "auto":
        backend = "faiss" if faiss_available() else "torch"
    if backend == "faiss":
        import faiss

        index = faiss.IndexFlatIP(database.shape[1])
        index.add(database)
        sims, ids = index.search(queries, k)
        return sims.astype(np.float32), ids.astype(np.int64)
    if backend != "torch":
        raise ValueError(f"unknown backend {backend!r}; valid: auto, faiss, torch")
    db = torch.from_numpy(database)
    sims, ids = [], []
    for start in range(0, queries.shape[0], batch_size):
        scores = torch.from_numpy(queries[start : start + batch_size]) @ db.T
        top = scores.topk(k, dim=1)
        sims.append(top.values.numpy())
        ids.append(top.indices.numpy())
    return np.concatenate(sims).astype(np.float32), np.concatenate(ids).astype(np.int64)


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
    """Forward (x -> y) and backward (y -> x) candidates scored with LASER's margin.

    ``x`` and ``y`` must be L2-normalised. The candidates are the k nearest neighbours by cosine; each pair
    (x, y) is scored ``margin(cos(x, y), (avg_knn(x, y) + avg_knn(y, x)) / 2)`` where ``avg_knn(x, y)`` is the
    mean cosine of x's k nearest neighbours in y (``absolute`` just keeps the cosine).
    """
    check_margin(margin)
    fwd_sim, fwd_ids = knn(x, y, min(k, len(y)), backend)
    bwd_sim, bwd_ids = knn(y, x, min(k, len(x)), backend)
    fwd_mean, bwd_mean = fwd_sim.mean(axis=1), bwd_sim.mean(axis=1)
    score = MARGINS[margin]
    fwd = Candidates(fwd_ids, score(fwd_sim, (fwd_mean[:, None] + bwd_mean[fwd_ids]) / 2))
    bwd = Candidates(bwd_ids, score(bwd_sim, (bwd_mean[:, None] + fwd_mean[bwd_ids]) / 2))
    return fwd, bwd

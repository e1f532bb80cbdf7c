"""Exact k-nearest-neighbour search of embedding matrices held in memory (evaluation sets, ``hf_tlaser.mine``).

Backends: ``faiss`` (exact ``IndexFlatIP``, used when ``faiss-cpu`` is importable) and ``torch`` (batched exact
matmul + ``topk``). ``backend="auto"`` picks faiss when available, else torch; both return the same neighbours.
Sparse embeddings (scipy CSR, e.g. TF-IDF vectors) are searched with batched sparse products whatever the backend.
``NeighbourLists`` computes the kNN lists of a multi-way set once per ordered pair (one sparse product per pair).
Vectors on disk, too many for memory, are searched by :mod:`hf_tlaser.bitext.index` with the same faiss loader.
"""

from __future__ import annotations

import logging
from collections.abc import Hashable, Iterable, Iterator, Mapping
from types import ModuleType
from typing import Literal

import numpy as np
import torch
from scipy import sparse

Backend = Literal["auto", "faiss", "torch"]
Array = np.ndarray | torch.Tensor


def import_faiss() -> ModuleType | None:
    """``faiss``, or None when not installed; its loader's probing of CPU-specific builds is not logged."""
    loader = logging.getLogger("faiss.loader")
    level = loader.level
    loader.setLevel(logging.WARNING)
    try:
        import faiss
    except ImportError:
        return None
    finally:
        loader.setLevel(level)
    return faiss


def faiss_available() -> bool:
    """Whether ``faiss`` can be imported."""
    return import_faiss() is not None


def as_matrix(emb: np.ndarray | torch.Tensor | sparse.sparray, name: str) -> np.ndarray | sparse.csr_matrix:
    """Return ``emb`` as a C-contiguous float32 2-D numpy array (a float32 CSR matrix when sparse); ``name`` is used
    in error messages."""
    if isinstance(emb, torch.Tensor):
        emb = emb.detach().cpu().float().numpy()
    if sparse.issparse(emb):
        arr = sparse.csr_matrix(emb, dtype=np.float32)
    else:
        arr = np.ascontiguousarray(np.asarray(emb, dtype=np.float32))
    if arr.ndim != 2 or arr.shape[0] == 0:
        raise ValueError(f"{name} must be a non-empty 2-D array (n, dim), got shape {arr.shape}")
    return arr


def l2_normalize(x: np.ndarray | sparse.csr_matrix) -> np.ndarray | sparse.csr_matrix:
    """Row-wise L2 normalisation (zero rows stay zero)."""
    if sparse.issparse(x):
        norms = np.sqrt(np.asarray(x.multiply(x).sum(axis=1))).ravel()
        return sparse.csr_matrix(sparse.diags(1.0 / np.maximum(norms, 1e-12)) @ x, dtype=np.float32)
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return (x / np.maximum(norms, 1e-12)).astype(np.float32)


def check_pair(
    src: np.ndarray | sparse.csr_matrix,
    tgt: np.ndarray | sparse.csr_matrix,
    src_name: str = "src_emb",
    tgt_name: str = "tgt_emb",
) -> None:
    """Raise if the two embedding matrices have different dimensions."""
    if src.shape[1] != tgt.shape[1]:
        raise ValueError(f"{src_name} has dimension {src.shape[1]} but {tgt_name} has dimension {tgt.shape[1]}")


def knn(
    queries: np.ndarray | sparse.csr_matrix,
    database: np.ndarray | sparse.csr_matrix,
    k: int,
    backend: Backend = "auto",
    batch_size: int = 4096,
) -> tuple[np.ndarray, np.ndarray]:
    """Exact inner-product kNN: ``(sims, ids)``, both ``(len(queries), k)``, best first.

    ``faiss`` uses ``IndexFlatIP``; ``torch`` does batched ``queries @ database.T`` and ``topk``; sparse inputs use
    batched sparse products.
    """
    if sparse.issparse(queries) or sparse.issparse(database):
        return _sparse_knn(sparse.csr_matrix(queries), sparse.csr_matrix(database), k, batch_size)
    if backend == "auto":
        backend = "faiss" if faiss_available() else "torch"
    if backend == "faiss":
        faiss = import_faiss()
        if faiss is None:
            raise ImportError("backend='faiss' needs faiss-cpu: pip install faiss-cpu")
        index = faiss.IndexFlatIP(database.shape[1])
        index.add(database)
        sims, ids = index.search(queries, k)
        return sims.astype(np.float32), ids.astype(np.int64)
    if backend != "torch":
        raise ValueError(f"unknown backend {backend!r}; valid: auto, faiss, torch")
    db = torch.from_numpy(database)
    return _top_k((torch.from_numpy(block) @ db.T for block in _blocks(queries, batch_size)), k)


def _blocks(queries: np.ndarray | sparse.csr_matrix, batch_size: int) -> Iterator:
    return (queries[start : start + batch_size] for start in range(0, queries.shape[0], batch_size))


def _top_k(scores: Iterable[torch.Tensor], k: int) -> tuple[np.ndarray, np.ndarray]:
    """Concatenated ``(sims, ids)`` of the k best columns of each block of query rows."""
    tops = [block.topk(k, dim=1) for block in scores]
    sims = np.concatenate([top.values.numpy() for top in tops]).astype(np.float32)
    return sims, np.concatenate([top.indices.numpy() for top in tops]).astype(np.int64)


def _sparse_knn(
    queries: sparse.csr_matrix, database: sparse.csr_matrix, k: int, batch_size: int
) -> tuple[np.ndarray, np.ndarray]:
    """``knn`` for sparse matrices: dense score blocks of ``batch_size`` queries, then a top-k per row."""
    db_t = database.T.tocsc()
    return _top_k((torch.from_numpy((block @ db_t).toarray()) for block in _blocks(queries, batch_size)), k)


def _index_order(m: sparse.csr_matrix) -> tuple[bool, bool]:
    """Whether the column indices of every row strictly increase, and whether they strictly decrease."""
    steps = np.diff(m.indices.astype(np.int64))
    cuts = m.indptr[1:-1]
    within = np.ones(len(steps), dtype=bool)
    within[cuts[(cuts > 0) & (cuts < m.nnz)] - 1] = False  # a step from one row's last entry to the next row's first
    steps = steps[within]
    return bool((steps > 0).all()), bool((steps < 0).all())


def _one_product(a: sparse.csr_matrix, b: sparse.csr_matrix, batch_size: int) -> bool:
    """Whether ``(b @ a.T).toarray()`` equals ``(a @ b.T).toarray().T`` bit for bit, and both fit one batch.

    scipy's CSR product sums the terms of entry (i, j) in the storage order of row i of the left factor; when the rows
    of both sides are sorted the same way, both products add the same terms in the same order.
    """
    if max(a.shape[0], b.shape[0]) > batch_size:
        return False
    (a_up, a_down), (b_up, b_down) = _index_order(a), _index_order(b)
    return (a_up and b_up) or (a_down and b_down)


class NeighbourLists:
    """Exact kNN lists between the named embedding matrices of a multi-way set, each ordered pair computed once.

    ``mats`` (name -> ``as_matrix`` output) are L2-normalised once. ``lists(x, y)`` is ``knn(x, y, min(k, rows of
    y), backend)`` of the normalised matrices, bit for bit; two sparse matrices share one product for both directions
    (``_one_product``), a sparse set of n languages takes n (n - 1) / 2 products.
    """

    def __init__(
        self,
        mats: Mapping[Hashable, np.ndarray | sparse.csr_matrix],
        k: int = 4,
        backend: Backend = "auto",
        batch_size: int = 4096,
    ) -> None:
        self.mats = {name: l2_normalize(m) for name, m in mats.items()}
        self.k, self.backend, self.batch_size = k, backend, batch_size
        self._lists: dict[tuple[Hashable, Hashable], tuple[np.ndarray, np.ndarray]] = {}

    def __call__(self, x: Hashable, y: Hashable) -> tuple[np.ndarray, np.ndarray]:
        """``(sims, ids)`` of the rows of ``x`` among the rows of ``y``, best first."""
        if (x, y) not in self._lists:
            a, b = self.mats[x], self.mats[y]
            k_ab, k_ba = min(self.k, b.shape[0]), min(self.k, a.shape[0])
            if sparse.issparse(a) and sparse.issparse(b) and _one_product(a, b, self.batch_size):
                scores = torch.from_numpy((a @ b.T.tocsc()).toarray())
                self._lists[(x, y)] = _top_k([scores], k_ab)
                self._lists[(y, x)] = _top_k([scores.T.contiguous()], k_ba)
            else:
                self._lists[(x, y)] = knn(a, b, k_ab, self.backend, self.batch_size)
        return self._lists[(x, y)]

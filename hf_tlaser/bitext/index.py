"""The k-nearest-neighbour search of mining at any size that fits on disk (``hf-tlaser mine``).

* the vectors stay memory-mapped on disk (``hf-tlaser embed`` outputs, :class:`Rows`); queries are read and searched
  in blocks;
* below :data:`EXACT_MAX_ROWS` database rows the index is exact (``Flat``: inner product of unit vectors); above it
  a faiss index-factory string (``--index``; default :func:`default_index`: an inverted file of about
  ``4 sqrt(N)`` lists with product-quantised codes), trained on a random sample. An approximate index returns
  ``refine x k`` candidates whose exact cosines are recomputed from the vectors on disk, and the best k are kept;
* the database is cut into shards that fit ``--index-memory``; each shard's index is searched by every query block
  and the top-k lists are merged, so no N x M matrix and no index larger than the budget is ever held;
* faiss runs on all GPUs when faiss sees one (``faiss.get_num_gpus() > 0``), else on the CPU.

Matrices that fit in memory (evaluation sets) are searched by :func:`hf_tlaser.bitext.knn.knn`.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from types import ModuleType

import numpy as np

from hf_tlaser.errors import UsageError

from .knn import import_faiss, l2_normalize

logger = logging.getLogger(__name__)

EXACT_MAX_ROWS = 50_000
"""Databases up to this many rows are searched exactly by default: measured, exact mining is faster than the
compressed index up to about 40,000 lines a side on a CPU (docs/embed_and_mine.md)."""


@dataclass
class Rows:
    """The unit-length float32 rows ``rows`` of a (memory-mapped) [N, d] array, read on demand."""

    array: np.ndarray
    rows: np.ndarray

    def __len__(self) -> int:
        return len(self.rows)

    @property
    def dim(self) -> int:
        return int(self.array.shape[1])

    def take(self, positions: np.ndarray) -> np.ndarray:
        """The normalised vectors at ``positions`` (indices into ``rows``), as a float32 [len, d] array."""
        return l2_normalize(np.asarray(self.array[self.rows[positions]], dtype=np.float32))

    def blocks(self, size: int, start: int = 0, stop: int | None = None) -> Iterator[tuple[int, np.ndarray]]:
        """``(offset, vectors)`` of consecutive blocks of at most ``size`` rows in ``[start, stop)``."""
        stop = len(self) if stop is None else stop
        for offset in range(start, stop, size):
            yield offset, self.take(np.arange(offset, min(offset + size, stop)))


@dataclass
class SearchPlan:
    """How the kNN search runs (``--index``, ``--nprobe``, ...); see the module docstring."""

    index: str = "auto"
    nprobe: int = 32
    refine: int = 4
    batch_size: int = 32768
    index_memory: float = 4e9
    train_size: int = 0
    device: str = "auto"
    seed: int = 0

    def spec(self, rows: int, dim: int) -> str:
        """The index-factory string for a database of ``rows`` vectors."""
        return default_index(rows, dim) if self.index == "auto" else self.index


def default_index(rows: int, dim: int) -> str:
    """``Flat`` (exact) up to :data:`EXACT_MAX_ROWS` rows; above, ``IVF{L},PQ{m}x4fs``: L, a power of two near
    ``4 sqrt(rows)``, inverted lists, and m half-byte fast-scan codes (m the largest even divisor of ``dim`` up to
    ``dim / 4``; 48 bytes a 384-d vector). 8-bit PQ trains two orders of magnitude slower on CPU (measured)."""
    if rows <= EXACT_MAX_ROWS:
        return "Flat"
    lists = 2 ** round(math.log2(4 * math.sqrt(rows)))
    width = max([m for m in range(2, dim // 4 + 1, 2) if dim % m == 0], default=0)
    return f"IVF{lists},PQ{width}x4fs" if width else f"IVF{lists},SQ8"


def require_faiss() -> ModuleType:
    """``faiss``, or ``UsageError`` saying how to install it."""
    faiss = import_faiss()
    if faiss is None:
        raise UsageError("hf-tlaser mine needs faiss: pip install faiss-cpu (or faiss-gpu)")
    return faiss


INDEX_HINT = "give a faiss index-factory string such as Flat or IVF4096,PQ48"


def faiss_reason(err: RuntimeError) -> str:
    """The failed condition of a faiss error (its last line after ``Error: ``)."""
    return str(err).strip().splitlines()[-1].split("Error: ", 1)[-1]


def make_index(spec: str, dim: int):
    """An empty faiss inner-product index from an index-factory string; ``UsageError`` when faiss refuses it."""
    faiss = require_faiss()
    try:
        return faiss.index_factory(dim, spec, faiss.METRIC_INNER_PRODUCT)
    except RuntimeError as err:
        raise UsageError(f"--index {spec!r}: faiss refuses it ({faiss_reason(err)}); {INDEX_HINT}") from None


TRIAL_ROWS = 8
"""Rows a trained (or training-free) index is built and searched with before the real work."""


def graph_index(index) -> str | None:
    """The class name of the graph index (HNSW, NSG) ``index`` is or wraps (a pre-transform, an id map, a refine
    stage), else ``None``. An IVF index whose coarse quantizer is a graph (``IVF65536_HNSW32,PQ48``) is no graph."""
    faiss = require_faiss()
    while index is not None:
        index = faiss.downcast_index(index)
        if isinstance(index, faiss.IndexHNSW | faiss.IndexNSG):
            return type(index).__name__
        index = getattr(index, "index", None) or getattr(index, "base_index", None)
    return None


def check_index(spec: str, rows: int, dim: int) -> None:
    """``UsageError`` unless the search can run ``spec`` on a database of ``rows`` vectors: faiss builds it, it is
    no graph index (:func:`graph_index`), it has no more inverted lists than rows to train them on, it gives its code
    size (the shard size needs it), and, where it needs no training, it adds and searches ``TRIAL_ROWS`` random
    vectors."""
    faiss = require_faiss()
    index = make_index(spec, dim)
    graph = graph_index(index)
    if graph is not None:
        raise UsageError(
            f"--index {spec!r}: graph indexes ({graph}; HNSW, NSG) are not supported: the search cuts the database "
            "into shards by a fixed code size per vector, which a graph's links do not have; give Flat (exact) or an "
            "inverted file such as IVF4096,PQ48 (a graph as its coarse quantizer is fine: IVF65536_HNSW32,PQ48)"
        )
    ivf = faiss.try_extract_index_ivf(index)
    if ivf is not None and ivf.nlist > rows:
        lists = 2 ** max(0, round(math.log2(max(1.0, math.sqrt(rows)))))
        raise UsageError(
            f"--index {spec!r}: {ivf.nlist} inverted lists need at least as many rows to train on, the database has "
            f"{rows}; give fewer lists (e.g. IVF{lists}) or Flat"
        )
    try:
        index.sa_code_size()
        if index.is_trained:
            sample = l2_normalize(np.random.default_rng(0).normal(size=(TRIAL_ROWS, dim)).astype(np.float32))
            index.add(sample)
            index.search(sample[:1], 1)
    except RuntimeError as err:
        raise UsageError(
            f"--index {spec!r}: faiss cannot run it as the search does (add, search, code size: "
            f"{faiss_reason(err)}); {INDEX_HINT}"
        ) from None


def use_gpu(device: str) -> bool:
    """Whether to search on GPUs: ``auto`` when faiss sees one, ``gpu`` (``UsageError`` without one), ``cpu`` never."""
    gpus = require_faiss().get_num_gpus() if device != "cpu" else 0
    if device == "gpu" and gpus == 0:
        raise UsageError("--device gpu: faiss sees no GPU (install faiss-gpu, or give --device cpu)")
    return gpus > 0


def train(index, database: Rows, plan: SearchPlan) -> None:
    """Train ``index`` (when it needs it) on a random sample of ``database``: ``plan.train_size`` rows, by default
    64 per inverted list and at least 65536 (all rows when fewer)."""
    if index.is_trained:
        return
    ivf = require_faiss().try_extract_index_ivf(index)
    size = plan.train_size or max(64 * (ivf.nlist if ivf is not None else 0), 65536)
    size = min(size, len(database))
    sample = np.sort(np.random.default_rng(plan.seed).choice(len(database), size, replace=False))
    started = time.perf_counter()
    index.train(database.take(sample))
    logger.info("trained %d-row index on %d rows in %.1fs", len(database), size, time.perf_counter() - started)


def shard_rows(index, budget: float) -> int:
    """Database rows per shard so that one shard's index takes about ``budget`` bytes (codes and 8-byte ids)."""
    return max(1, int(budget // (index.sa_code_size() + 8)))


def merge_top_k(
    sims: np.ndarray, ids: np.ndarray, new_sims: np.ndarray, new_ids: np.ndarray, k: int
) -> tuple[np.ndarray, np.ndarray]:
    """The k best of two ``(sims, ids)`` lists per row (missing entries: id -1, lowest sims)."""
    all_sims, all_ids = np.concatenate([sims, new_sims], axis=1), np.concatenate([ids, new_ids], axis=1)
    order = np.argsort(-all_sims, axis=1, kind="stable")[:, :k]
    return np.take_along_axis(all_sims, order, axis=1), np.take_along_axis(all_ids, order, axis=1)


def exact_cosines(queries: np.ndarray, database: Rows, ids: np.ndarray) -> np.ndarray:
    """Cosines of each query with its candidate ``ids`` (-1: ``-inf``), from the vectors themselves."""
    found = ids >= 0
    vectors = database.take(np.where(found, ids, 0).ravel()).reshape(*ids.shape, database.dim)
    return np.where(found, np.einsum("qd,qkd->qk", queries, vectors), -np.inf).astype(np.float32)


def search(queries: Rows, database: Rows, k: int, plan: SearchPlan) -> tuple[np.ndarray, np.ndarray]:
    """The k nearest ``database`` rows of every query by cosine: ``(sims, ids)``, [len(queries), k], best first.

    Exact (``Flat``) or approximate (any other index-factory string; candidates re-scored exactly), database
    sharded to fit ``plan.index_memory``, queries searched in blocks of ``plan.batch_size``.
    """
    spec = plan.spec(len(database), database.dim)
    try:
        return _search(queries, database, k, plan, spec)
    except RuntimeError as err:  # what check_index could not try (an index that trains first)
        raise UsageError(f"--index {spec!r}: faiss failed with it ({faiss_reason(err)}); {INDEX_HINT}") from None


def _search(queries: Rows, database: Rows, k: int, plan: SearchPlan, spec: str) -> tuple[np.ndarray, np.ndarray]:
    faiss = require_faiss()
    trained = trained_index(database, plan, spec)
    gpu = use_gpu(plan.device)
    per_shard = shard_rows(trained, plan.index_memory)
    k, wanted = candidates(k, len(database), spec, plan)

    def shards() -> Iterator[tuple[int, int, object]]:
        for start, stop in database_shards(len(database), per_shard):
            index = faiss.clone_index(trained)
            if gpu:
                index = faiss.index_cpu_to_all_gpus(index)
            for _, block in database.blocks(plan.batch_size, start, stop):
                index.add(block)
            yield start, stop, index
            del index  # one shard's index in memory at a time (search_shards drops its own reference)

    sims, ids = search_shards(queries, shards(), wanted, plan, spec)
    return rescore(queries, database, sims, ids, k, plan, spec)


def database_shards(rows: int, per_shard: int) -> list[tuple[int, int]]:
    """``[start, stop)`` of the database shards of ``per_shard`` rows each (:func:`shard_rows`: what fits
    ``--index-memory``); the staged pipeline populates the same shards."""
    return [(start, min(start + per_shard, rows)) for start in range(0, rows, per_shard)]


def trained_index(database: Rows, plan: SearchPlan, spec: str):
    """The empty index of ``spec`` for ``database``, trained on its sample (:func:`train`), with ``plan.nprobe``."""
    trained = make_index(spec, database.dim)
    train(trained, database, plan)
    ivf = require_faiss().try_extract_index_ivf(trained)
    if ivf is not None:
        ivf.nprobe = plan.nprobe  # clones (and GPU copies) keep it
    return trained


def candidates(k: int, rows: int, spec: str, plan: SearchPlan) -> tuple[int, int]:
    """``(k, candidates searched)`` for a database of ``rows``: an approximate index returns ``refine x k`` candidates,
    re-scored exactly (:func:`rescore`)."""
    k = min(k, rows)
    return k, k if spec == "Flat" else min(k * plan.refine, rows)


def search_shards(
    queries: Rows, shards: Iterable[tuple[int, int, object]], wanted: int, plan: SearchPlan, spec: str
) -> tuple[np.ndarray, np.ndarray]:
    """The ``wanted`` best ``(sims, ids)`` of every query over database shards ``(start, stop, index)`` (an index of
    the rows ``[start, stop)``), queries searched in blocks of ``plan.batch_size``, lists merged shard after shard."""
    sims = np.full((len(queries), wanted), -np.inf, dtype=np.float32)
    ids = np.full((len(queries), wanted), -1, dtype=np.int64)
    for start, stop, index in shards:
        for offset, block in queries.blocks(plan.batch_size):
            block_sims, block_ids = index.search(block, min(wanted, stop - start))
            block_ids = np.where(block_ids >= 0, block_ids + start, -1)
            rows = slice(offset, offset + len(block))
            sims[rows], ids[rows] = merge_top_k(sims[rows], ids[rows], block_sims, block_ids, wanted)
        del index
        logger.info("searched %s database rows %d-%d with %d queries", spec, start, stop, len(queries))
    return sims, ids


def rescore(
    queries: Rows, database: Rows, sims: np.ndarray, ids: np.ndarray, k: int, plan: SearchPlan, spec: str
) -> tuple[np.ndarray, np.ndarray]:
    """The k best of the candidate lists: as they are for ``Flat``, else by their exact cosines."""
    if spec != "Flat":
        wanted = ids.shape[1]
        for offset, block in queries.blocks(max(1, plan.batch_size // wanted)):
            rows = slice(offset, offset + len(block))
            rescored = exact_cosines(block, database, ids[rows])
            order = np.argsort(-rescored, axis=1, kind="stable")
            sims[rows] = np.take_along_axis(rescored, order, axis=1)
            ids[rows] = np.take_along_axis(ids[rows], order, axis=1)
    return sims[:, :k], ids[:, :k]

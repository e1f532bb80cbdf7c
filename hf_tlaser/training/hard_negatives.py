"""``--batch-composition cluster``: in-batch hard negatives mined with a model before training.

A model (``--cluster-model``; default: the ``--init-from`` start) embeds the pivot sentence of every row of the
curriculum's streams (the pivot side of a pair, a multi-way group's first pivot: ``distill.pivot_of_pair`` /
``pivot_of_group``); the vectors are cached by the model's fingerprint and the text (``TeacherCache``, under
``--teacher-cache``), so a second run, or a resumed one, reads them. Each stream's rows are then clustered by these
vectors (spherical k-means, faiss, about ``--cluster-size`` rows per cluster, seeded by the run's seed: a resumed run
gets the same clusters), and the sampler orders each stream by cluster, then length, before packing
(``PairBatchSampler.set_clusters``): a micro-batch's pairs are near neighbours on the pivot side, so the alignment
loss and the distance constraint compare each pair with sentences that are about the same thing (the nearest
non-translations; DPR's and ANCE's hard negatives, here as a batch composition: no extra sentence is encoded; but a
cluster's rows differ in length, so under the same padded budget a micro-batch holds fewer pairs: 25 against 35 on
the main job's recipe, docs/history.md). Pairs that share a sentence are never each other's negatives: the
collator gives them one group (``data.collator.merge_shared_texts``).
"""

from __future__ import annotations

import logging
import time

import numpy as np

from hf_tlaser.data import MultiwayBatchSampler, Pair, ParallelExamples
from hf_tlaser.encoders import Encoder, load
from hf_tlaser.errors import UsageError
from hf_tlaser.training.distill import pivot_of_group, pivot_of_pair, teacher_matrix
from hf_tlaser.training.resolve import Built, Plugin, RunPlan
from hf_tlaser.training.spec import RunSpec

logger = logging.getLogger("hf_tlaser.train")

KMEANS_ITERATIONS = 20
KMEANS_STARTS = 3
"""k-means keeps the best of this many starts (one start split a blob in two and merged two others in 12 of 40 seeds
on four separated blobs; three starts: 0 of 40)."""
DIAGNOSTIC_BATCHES = 200
"""The planned micro-batches whose in-batch pivot cosine the log reports (against random micro-batches)."""


def stream_pivot_texts(
    dataset: ParallelExamples, streams: dict[Pair, np.ndarray], multiway: bool, pivots: list[str], pairs: list[Pair]
) -> dict[Pair, list[str]]:
    """The pivot sentence of each row of each stream (``streams``: the stream's dataset rows): the pair's pivot side
    (``multiway``: the group's first pivot)."""
    columns = {lang: dataset.dataset[lang] for lang in dataset.languages}
    out = {}
    for (a, b), rows in streams.items():
        if multiway:
            groups = ({lang: columns[lang][row] for lang in columns} for row in rows.tolist())
            out[(a, b)] = [group[pivot_of_group(group, pairs, pivots)] for group in groups]
        else:
            column = columns[pivot_of_pair(a, b, pivots)]
            out[(a, b)] = [column[row] for row in rows.tolist()]
    return out


def pool_rows(rows: np.ndarray, size: int | None, seed: int) -> np.ndarray:
    """At most ``size`` of ``rows`` (all: None), a random sample fixed by ``seed``, in their order."""
    if size is None or len(rows) <= size:
        return rows
    return np.sort(np.random.default_rng(seed).choice(rows, size=size, replace=False))


def cluster_rows(vectors: np.ndarray, size: int, seed: int) -> np.ndarray:
    """Cluster ids [N] of ``vectors`` [N, d] by spherical k-means into about N / ``size`` clusters (one for fewer
    than ``2 * size`` rows; the best of ``KMEANS_STARTS`` starts), deterministic for a seed."""
    k = len(vectors) // size
    if k < 2:
        return np.zeros(len(vectors), dtype=np.int64)
    unit = np.ascontiguousarray(vectors, dtype=np.float32)
    import faiss  # the cluster composition's own need: a plain run trains where faiss is not installed

    faiss.normalize_L2(unit)
    kmeans = faiss.Kmeans(
        unit.shape[1], k, niter=KMEANS_ITERATIONS, nredo=KMEANS_STARTS, seed=seed, spherical=True,
        min_points_per_centroid=1, max_points_per_centroid=len(unit),
    )  # fmt: skip
    kmeans.train(unit)
    return kmeans.index.search(unit, 1)[1][:, 0].astype(np.int64)


def check_cluster_size(streams: dict[Pair, np.ndarray], size: int) -> None:
    """UsageError (one line) when a stream has fewer than two clusters' rows: ``cluster_rows`` would make it one
    cluster, batches drawn from the whole stream as without ``--batch-composition cluster``."""
    for (a, b), rows in streams.items():
        if len(rows) < 2 * size:
            raise UsageError(
                f"--cluster-size {size}: the {a}-{b} stream has {len(rows)} rows to cluster, fewer than two clusters "
                f"of {size} (one cluster: no hard negatives); give --cluster-size {max(len(rows) // 2, 2)} or less, or "
                "more data"
            )


def in_batch_cosine(batches: list[np.ndarray]) -> float:
    """Mean cosine between the pivot vectors of two different rows of one micro-batch, over ``batches`` (each the
    [n, d] vectors of a micro-batch's rows): how near a pair's in-batch negatives are."""
    total = count = 0.0
    for vectors in batches:
        unit = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
        gram = unit @ unit.T
        total += float(gram.sum() - np.trace(gram))
        count += len(unit) * (len(unit) - 1)
    return total / max(count, 1.0)


class HardNegatives(Plugin):
    """``--batch-composition cluster``: the clustering model loaded before any data is read; the sampler's clusters
    set once the data is read (module docstring)."""

    describes = ", hard-negative batches"

    def __init__(self, model: Encoder, spec: RunSpec) -> None:
        self.model, self.spec = model, spec

    @classmethod
    def check(cls, plan: RunPlan) -> HardNegatives:
        spec = plan.spec
        if spec.streaming:
            raise UsageError(
                "--batch-composition cluster clusters every row of the corpora before training: not with --streaming"
            )
        if spec.cluster_size < 2:
            raise UsageError(f"--cluster-size {spec.cluster_size}: must be at least 2 rows")
        if spec.cluster_pool is not None and spec.cluster_pool < spec.cluster_size:
            raise UsageError(
                f"--cluster-pool {spec.cluster_pool}: must be at least --cluster-size ({spec.cluster_size})"
            )
        source = spec.cluster_model or spec.init_from
        if source is None:
            raise UsageError(
                "--batch-composition cluster needs a model that embeds the pivot sentences: --cluster-model SPEC "
                "(default: the --init-from model)"
            )
        return cls(load(source, argument="--cluster-model"), spec)

    def attach(self, built: Built):
        sampler, data = built.sampler, built.data
        start = time.perf_counter()
        every = sampler.stream_rows()
        streams = {pair: pool_rows(rows, self.spec.cluster_pool, self.spec.seed) for pair, rows in every.items()}
        check_cluster_size(streams, self.spec.cluster_size)
        left_out = sum(len(every[pair]) - len(rows) for pair, rows in streams.items())
        if left_out:
            logger.info(
                "--cluster-pool %d: %d of %d stream rows are not clustered and not drawn",
                self.spec.cluster_pool,
                left_out,
                sum(map(len, every.values())),
            )
        multiway = isinstance(sampler, MultiwayBatchSampler)
        texts = stream_pivot_texts(built.dataset, streams, multiway, data.pivots, data.pairs)
        distinct = sorted({text for stream in texts.values() for text in stream})
        matrix, row_of = teacher_matrix(self.model, self.spec.teacher_cache, distinct)
        embedded = time.perf_counter() - start
        # each stream row's row of the matrix
        where = {pair: np.array([row_of[text] for text in texts[pair]], dtype=np.int64) for pair in streams}
        clusters = {}
        for pair, rows in every.items():
            clusters[pair] = np.full(len(rows), -1, dtype=np.int64)
            clusters[pair][np.isin(rows, streams[pair])] = cluster_rows(
                matrix[where[pair]], self.spec.cluster_size, self.spec.seed
            )
        sampler.set_clusters(clusters)
        planned = sampler.plan()[:DIAGNOSTIC_BATCHES]
        position = {pair: {row: i for i, row in enumerate(rows.tolist())} for pair, rows in streams.items()}
        rng = np.random.default_rng(self.spec.seed)
        centred = matrix - matrix.mean(0)  # without the direction every sentence shares (e5's cosines are ~0.8)
        clustered, drawn = [], []
        for pair, rows in planned:
            clustered.append(centred[where[pair][[position[pair][row] for row in rows]]])
            drawn.append(centred[rng.choice(where[pair], size=len(rows), replace=False)])
        logger.info(
            "hard negatives: %d pivot sentences embedded by %s in %.0f s; %d streams clustered into groups of about %d "
            "rows (%.0f s in all); mean centred cosine between the pivots of one micro-batch %.3f (micro-batches of "
            "the same sizes drawn at random from their streams: %.3f; the first %d micro-batches)",
            len(distinct),
            self.model.spec,
            embedded,
            len(streams),
            self.spec.cluster_size,
            time.perf_counter() - start,
            in_batch_cosine(clustered),
            in_batch_cosine(drawn),
            len(planned),
        )
        del self.model  # not needed in training: its memory goes back
        return built.collator

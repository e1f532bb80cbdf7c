"""xsim: LASER's similarity-search error rate, and precision@1 with distractors.

Row i of the source matrix is the translation of row i of the target matrix. Embeddings are L2-normalised,
the k nearest targets by cosine are re-scored with the margin (``absolute``: cosine, ``distance``:
cos - avg_knn, ``ratio``: cos / avg_knn, avg_knn as in LASER's ``xsim.py``) and the best one is retrieved.
kNN runs on faiss when importable, else torch (see :mod:`hf_tlaser.bitext.knn`).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from hf_tlaser.bitext.knn import Array, Backend, NeighbourLists, as_matrix, check_pair, l2_normalize
from hf_tlaser.bitext.margin import Candidates, list_candidates, margin_candidates


def _retrieve(src: np.ndarray, tgt: np.ndarray, margin: str, k: int, backend: Backend) -> np.ndarray:
    """Index of the retrieved target for every source row."""
    fwd, _ = margin_candidates(l2_normalize(src), l2_normalize(tgt), k=k, margin=margin, backend=backend)
    return fwd.best()[0]


def precision_at_1(
    src_emb: Array,
    tgt_emb: Array,
    distractors: Array | None = None,
    margin: str = "absolute",
    k: int = 4,
    backend: Backend = "auto",
) -> float:
    """Percentage of source rows whose retrieved target is their own translation (row i of ``tgt_emb``).

    ``distractors`` (optional, ``(m, dim)``) are appended to the target pool and are always wrong answers.
    """
    src = as_matrix(src_emb, "src_emb")
    tgt = as_matrix(tgt_emb, "tgt_emb")
    check_pair(src, tgt)
    if src.shape[0] != tgt.shape[0]:
        raise ValueError(f"src_emb has {src.shape[0]} rows but tgt_emb has {tgt.shape[0]}; they must be aligned")
    if distractors is not None:
        extra = as_matrix(distractors, "distractors")
        check_pair(tgt, extra, "tgt_emb", "distractors")
        tgt = np.concatenate([tgt, extra])
    found = _retrieve(src, tgt, margin, k, backend)
    return float(100.0 * np.mean(found == np.arange(src.shape[0])))


def xsim(src_emb: Array, tgt_emb: Array, margin: str = "ratio", k: int = 4, backend: Backend = "auto") -> float:
    """xsim error rate in percent of retrieving row i of ``tgt_emb`` for row i of ``src_emb``."""
    return 100.0 - precision_at_1(src_emb, tgt_emb, margin=margin, k=k, backend=backend)


def xsim_both(
    src_emb: Array, tgt_emb: Array, margin: str = "ratio", k: int = 4, backend: Backend = "auto"
) -> tuple[float, float]:
    """xsim in both directions: ``(src -> tgt, tgt -> src)`` error rates in percent."""
    return (
        xsim(src_emb, tgt_emb, margin=margin, k=k, backend=backend),
        xsim(tgt_emb, src_emb, margin=margin, k=k, backend=backend),
    )


class AlignedSearch:
    """The kNN lists of every ordered language pair of a multi-way aligned set (row i of each language translates
    row i of the others), each computed once and shared by every margin and the mining (:class:`NeighbourLists`).

    ``targets`` (the same set embedded by another model, same width) are searched instead of ``embs``: the queries
    come from ``embs``, the targets from ``targets`` (a cross-model search).
    """

    def __init__(
        self,
        embs: Mapping[str, Array],
        k: int = 4,
        backend: Backend = "auto",
        targets: Mapping[str, Array] | None = None,
        name: str = "xsim_matrix",
    ) -> None:
        self.langs = list(embs)
        if len(self.langs) < 2:
            raise ValueError(f"{name} needs at least 2 languages, got {self.langs}")
        if targets is not None and list(targets) != self.langs:
            raise ValueError(f"targets must have the languages of embs {self.langs}, got {list(targets)}")
        mats = {("query", lang): as_matrix(emb, f"embs[{lang!r}]") for lang, emb in embs.items()}
        if targets is not None:
            mats |= {("target", lang): as_matrix(emb, f"targets[{lang!r}]") for lang, emb in targets.items()}
        sizes = {f"{side} {lang}" if targets is not None else lang: m.shape[0] for (side, lang), m in mats.items()}
        if len(set(sizes.values())) != 1:
            raise ValueError(f"embs must be aligned (same number of rows), got {sizes}")
        self.size = next(iter(sizes.values()))
        self._target = "query" if targets is None else "target"
        self.lists = NeighbourLists(mats, k, backend)

    def candidates(self, a: str, b: str, margin: str = "ratio") -> tuple[Candidates, Candidates]:
        """Margin-scored candidates of the ``a`` queries among the ``b`` targets, and of those targets among them."""
        query, target = ("query", a), (self._target, b)
        check_pair(self.lists.mats[query], self.lists.mats[target])
        return list_candidates(self.lists, query, target, margin)

    def xsim(self, a: str, b: str, margin: str = "ratio") -> float:
        """xsim error (%) searching ``b`` for the ``a`` queries (as :func:`xsim`)."""
        found = self.candidates(a, b, margin)[0].best()[0]
        return 100.0 - float(100.0 * np.mean(found == np.arange(self.size)))

    def matrix(self, margin: str = "ratio", pivot: str | None = None) -> np.ndarray:
        """``matrix[i, j]``: xsim error (%) searching ``langs[j]`` for ``langs[i]`` queries; NaN diagonal. With
        ``pivot`` only the directions to and from it are searched (2 (n - 1) searches instead of n (n - 1)), the other
        cells are NaN."""
        if pivot is not None and pivot not in self.langs:
            raise ValueError(f"pivot {pivot!r} is not one of the languages {self.langs}")
        matrix = np.full((len(self.langs), len(self.langs)), np.nan)
        for i, a in enumerate(self.langs):
            for j, b in enumerate(self.langs):
                if i != j and (pivot is None or pivot in (a, b)):
                    matrix[i, j] = self.xsim(a, b, margin)
        return matrix


def xsim_matrix(
    embs: dict[str, Array],
    margin: str = "ratio",
    k: int = 4,
    backend: Backend = "auto",
    targets: dict[str, Array] | None = None,
) -> tuple[list[str], np.ndarray]:
    """xsim for every ordered language pair of a multi-way aligned set.

    Returns ``(langs, matrix)`` with ``matrix[i, j]`` = error (%) searching ``langs[j]`` for ``langs[i]``
    queries; the diagonal is NaN. ``targets`` (the same set embedded by another model, same width) are searched
    instead of ``embs``: row i holds the queries of ``embs``, column j the targets of ``targets`` (a cross-model
    matrix: do two models share one space?). :class:`AlignedSearch` scores several margins from one search.
    """
    search = AlignedSearch(embs, k, backend, targets)
    return search.langs, search.matrix(margin)

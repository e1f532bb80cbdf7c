"""The lexical reference row of every evaluation: character n-gram TF-IDF, which needs no training.

A trained embedding model is worth using only where it beats this. Retrieval: character 3-5-grams inside word
boundaries (``char_wb``), sublinear tf, fit on the texts being compared, L2-normalised rows. Classification: the same
features fit on every text of the dataset, reduced to 512 dimensions by TruncatedSVD so that the MLDoc-protocol
classifier sees dense vectors of a model's size.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

NAME = "tfidf-char"
"""Name of the reference row in reports."""


class TfidfCharEmbedder:
    """An ``Embed`` (list of texts -> float32 array with unit rows) fit once on ``fit_texts``.

    ``svd_dim``: reduce the TF-IDF vectors with TruncatedSVD (fit on ``fit_texts``) to at most that many dimensions
    (the classification protocol uses 512); None keeps the TF-IDF space (retrieval), returned as a scipy CSR matrix
    when ``sparse`` (a dense one over 5 NTREX languages would take ~6 GB).
    """

    def __init__(
        self, fit_texts: Sequence[str], svd_dim: int | None = 512, seed: int = 0, sparse: bool = False
    ) -> None:
        from sklearn.decomposition import TruncatedSVD
        from sklearn.feature_extraction.text import CountVectorizer, TfidfTransformer

        self.sparse = sparse and svd_dim is None
        self.fit_texts = list(fit_texts)
        if not self.fit_texts:
            raise ValueError("TfidfCharEmbedder needs at least one text to fit on")
        # TfidfVectorizer(analyzer="char_wb", ngram_range=(3, 5), sublinear_tf=True) in its two steps, keeping the
        # counts of the fit texts: embedding those texts (the usual call) does not analyse them a second time
        self.counter = CountVectorizer(analyzer="char_wb", ngram_range=(3, 5), dtype=np.float32)
        self._fit_counts = self.counter.fit_transform(self.fit_texts)
        self.tfidf = TfidfTransformer(sublinear_tf=True).fit(self._fit_counts)
        self.svd = None
        if svd_dim is not None:
            fitted = self.tfidf.transform(self._fit_counts)  # a copy: the counts stay
            components = max(1, min(svd_dim, fitted.shape[1] - 1, fitted.shape[0] - 1))
            self.svd = TruncatedSVD(n_components=components, random_state=seed).fit(fitted)

    @property
    def dim(self) -> int:
        return int(self.svd.n_components) if self.svd is not None else len(self.counter.vocabulary_)

    def _counts(self, texts: list[str]):
        """n-gram counts of ``texts`` as ``CountVectorizer.transform`` gives them (sorted column indices); the fit
        texts reuse the fit's counts (the same entries, in the order of first occurrence)."""
        if texts != self.fit_texts:
            return self.counter.transform(texts)
        counts = self._fit_counts.copy()
        counts.has_sorted_indices = False  # check again: the fit renumbered the columns after sorting them
        counts.sort_indices()
        return counts

    def __call__(self, texts: Sequence[str]):
        """float32 [n, dim] with unit rows (a CSR matrix when ``sparse``)."""
        from sklearn.preprocessing import normalize

        texts = list(texts)
        features = self.tfidf.transform(self._counts(texts), copy=False)  # unit rows: TfidfTransformer's l2 norm
        if self.sparse:
            return features
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        if self.svd is None:
            return features.toarray()
        return normalize(self.svd.transform(features)).astype(np.float32)


def tfidf_char_embed(
    texts: Sequence[str],
    fit_texts: Sequence[str] | None = None,
    svd_dim: int | None = None,
    seed: int = 0,
    sparse: bool = False,
):
    """Character 3-5-gram TF-IDF vectors of ``texts`` (float32, unit rows), fit on ``fit_texts`` (default: ``texts``);
    ``svd_dim`` and ``sparse`` as in ``TfidfCharEmbedder``."""
    texts = list(texts)
    fit = texts if fit_texts is None else fit_texts
    return TfidfCharEmbedder(fit, svd_dim=svd_dim, seed=seed, sparse=sparse)(texts)

"""The embedder an evaluation takes: ``embed(texts: list[str]) -> np.ndarray (n, dim)`` (:data:`Embed`), called
through :func:`embed_texts`, which checks one row per text.

An embedder is called once per dataset with all its texts (every language, every split), so one that fits on its
input (the ``tfidf-char`` reference) sees exactly the texts being compared. Document sets (MLDoc) go to the
embedder's ``embed_documents`` method when it has one. An embedder with ``per_language = True`` (a model with one
encoder per language, such as cNV) is called as ``embed(texts, langs=[...])`` with the language of every text.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
from scipy import sparse

Embed = Callable[..., np.ndarray]
"""``embed(texts) -> (n, dim)``; with a true ``per_language`` attribute ``embed(texts, langs=[lang of each text])``."""


def embed_texts(
    embed: Embed, texts: list[str], documents: bool = False, langs: Sequence[str] | None = None
) -> np.ndarray | sparse.csr_matrix:
    """Call ``embed`` (``embed.embed_documents`` for ``documents`` when it has one); check one row per text.

    ``langs`` (the language of each text) goes to embedders with ``per_language = True``, which need it. Dense
    results come back as float32 numpy, sparse ones (TF-IDF) as CSR.
    """
    call = getattr(embed, "embed_documents", embed) if documents else embed
    if getattr(embed, "per_language", False):
        if langs is None or len(langs) != len(texts):
            raise ValueError(
                f"{type(embed).__name__} is per-language: pass the language of each of the {len(texts)} texts"
            )
        emb = call(list(texts), langs=list(langs))
    else:
        emb = call(list(texts))
    emb = sparse.csr_matrix(emb, dtype=np.float32) if sparse.issparse(emb) else np.asarray(emb, dtype=np.float32)
    if emb.ndim != 2 or emb.shape[0] != len(texts):
        raise ValueError(f"embed returned shape {emb.shape} for {len(texts)} texts; expected (n, dim)")
    return emb


def split_rows(emb: np.ndarray | sparse.csr_matrix, sizes: Sequence[int]) -> list:
    bounds = np.cumsum([0, *sizes])
    return [emb[a:b] for a, b in zip(bounds[:-1], bounds[1:])]

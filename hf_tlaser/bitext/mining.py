"""Margin-based bitext mining (LASER's ``mine_bitexts.py`` scoring and retrieval modes): :func:`mine` for
embeddings held in memory, :func:`mine_vectors` for memory-mapped vectors at any size (``hf-tlaser mine``)."""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .index import Rows, SearchPlan, search
from .knn import Array, Backend, as_matrix, check_pair, l2_normalize
from .margin import margin_candidates, margin_scores
from .select import check_retrieval, select_pairs
from .texts import write_tsv

logger = logging.getLogger(__name__)


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


@dataclass
class Mined:
    """Pairs chosen by the retrieval mode, best first: ``scores``, and ``src``/``tgt`` positions in the mined rows.
    ``kept`` is how many of them (the first ones) pass the threshold."""

    scores: np.ndarray
    src: np.ndarray
    tgt: np.ndarray
    kept: int

    @classmethod
    def above(cls, pairs: tuple[np.ndarray, np.ndarray, np.ndarray], threshold: float | None) -> Mined:
        """The pairs ``(scores, src, tgt)``, best first, with ``kept`` counting those above ``threshold``."""
        kept = len(pairs[0]) if threshold is None else int(np.sum(pairs[0] > threshold))
        return cls(*pairs, kept)


def mine_vectors(
    src: Rows,
    tgt: Rows,
    *,
    k: int = 4,
    margin: str = "ratio",
    retrieval: str = "max",
    threshold: float | None = None,
    plan: SearchPlan | None = None,
) -> Mined:
    """Mine ``src`` against ``tgt``: kNN both ways, LASER's margin, the retrieval mode, each sentence used once."""
    plan = plan or SearchPlan()
    started = time.perf_counter()
    lists = (*search(src, tgt, k, plan), *search(tgt, src, k, plan))
    mined = select_mined(lists, margin=margin, retrieval=retrieval, threshold=threshold)
    logger.info(
        "mined %d pairs (%d above the threshold) in %.1fs", len(mined.scores), mined.kept, time.perf_counter() - started
    )
    return mined


def select_mined(
    lists: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
    *,
    margin: str = "ratio",
    retrieval: str = "max",
    threshold: float | None = None,
) -> Mined:
    """The pairs of the kNN lists of both directions (``fwd_sim, fwd_ids, bwd_sim, bwd_ids``: every source's
    nearest targets, every target's nearest sources): LASER's margin, the retrieval mode, each sentence used once,
    best first; ``kept`` counts those above ``threshold``. What :func:`mine_vectors` does with its lists (a staged
    pipeline's ``margin`` and ``mine`` stages, ``hf_tlaser.inference.stages``, do it shard by shard)."""
    fwd, bwd = margin_scores(*lists, margin)
    return Mined.above(select_pairs(fwd, bwd, retrieval, one_to_one=True), threshold)


def write_bitexts(
    pairs: list[tuple[float, int, int]],
    output: str | os.PathLike,
    src_texts: list[str] | None = None,
    tgt_texts: list[str] | None = None,
) -> Path:
    """Write mined ``(score, src, tgt)`` pairs as ``score<TAB>src<TAB>tgt`` lines (texts when given, else indices)
    with :func:`~hf_tlaser.bitext.texts.write_tsv`, creating the output's folder."""
    path = Path(output)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_tsv(
        (
            (score, str(i) if src_texts is None else src_texts[i], str(j) if tgt_texts is None else tgt_texts[j])
            for score, i, j in pairs
        ),
        path,
    )
    return path

"""The retrieval suite: aligned sets read (:func:`read_retrieval_sets`), embedded once per set
(:func:`embed_retrieval`) and scored by xsim for every margin and direction and by bitext-mining F1
(:func:`score_retrieval`), into a :class:`RetrievalResult`."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
from scipy import sparse

from hf_tlaser.bitext.knn import Backend
from hf_tlaser.errors import UsageError

from .embedding import Embed, embed_texts, split_rows
from .mining import candidates_f1
from .readers import LANGS, OPEN_SETS, PIVOT_SETS, RETRIEVAL_SETS, SAMPLE_SETS, PivotPairs, set_languages
from .report import english_cells, markdown_table
from .retrieval import AlignedSearch
from .user_sets import is_spec, read_retrieval_spec

logger = logging.getLogger(__name__)

EVALUATION_LANGS: tuple[str, ...] = tuple(sorted({lang for _, langs in RETRIEVAL_SETS.values() for lang in langs}))
"""Every language of the registered retrieval sets."""
DIRECTIONS = ("auto", "all", "english")
"""Which xsim directions of a multi-way set are searched: every ordered pair, or to and from English only; ``auto``:
every pair up to ``FULL_MATRIX_LANGUAGES`` languages, to and from English beyond. A set of en-X pairs (xed-dev) is
always scored to and from English."""
FULL_MATRIX_LANGUAGES = 10
"""``auto`` directions: the most languages a multi-way set is scored on every ordered pair for (NTREX-128's ten: 90
directions); a larger one (FLORES-200 over many languages) is scored to and from English, 2 (n - 1) directions."""
PIVOT = "en"


@dataclass
class RetrievalResult:
    """xsim matrices (error %, row = query language, column = searched language) per set and margin, and the bitext
    mining F1 of every language pair of each set (gold: the aligned rows). P@1 is 100 - xsim with the absolute
    margin (plain nearest neighbour)."""

    k: int
    matrices: dict[str, dict[str, tuple[list[str], np.ndarray]]] = field(default_factory=dict)
    sizes: dict[str, int] = field(default_factory=dict)
    mining: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)
    directions: dict[str, str] = field(default_factory=dict)
    """``all`` (every ordered pair) or ``english`` (to and from English only, the other cells NaN) per set"""
    pair_sizes: dict[str, dict[str, int]] = field(default_factory=dict)
    """pairs per language of the en-X pair sets (their ``sizes`` entry is the total)"""

    def average(self, dataset: str, margin: str) -> float:
        """Mean xsim error over the searched ordered language pairs."""
        return float(np.nanmean(self.matrices[dataset][margin][1]))

    def _size(self, name: str) -> str:
        if name in self.pair_sizes:
            return "en-X pairs: " + ", ".join(f"{lang} {n}" for lang, n in self.pair_sizes[name].items())
        return f"{self.sizes[name]} sentences"

    def to_markdown(self) -> str:
        """One table per set and margin (to and from English: one row per language), the mining F1 per pair, then a
        summary table of averages."""
        parts = []
        for name, by_margin in self.matrices.items():
            for margin, (langs, matrix) in by_margin.items():
                title = f"**{name}** ({self._size(name)}), xsim error %, margin={margin}, k={self.k}"
                if self.directions.get(name) == "english":
                    others, cells = english_cells(langs, matrix)
                    rows = [[lang, *map(float, cells[i])] for i, lang in enumerate(others)]
                    parts += [title, markdown_table(["language", "xx → en", "en → xx"], rows), ""]
                    continue
                rows = [
                    [a, *("-" if i == j else float(matrix[i, j]) for j in range(len(langs)))]
                    for i, a in enumerate(langs)
                ]
                parts.append(title)
                parts.append(markdown_table(["query \\ target", *langs], rows))
                parts.append("")
            if self.mining.get(name):
                rows = [[pair, *(m[key] for key in MINING_KEYS)] for pair, m in self.mining[name].items()]
                parts.append(f"**{name}**: bitext mining (ratio margin, best-F1 threshold), %")
                parts.append(markdown_table(["pair", *MINING_KEYS], rows))
                parts.append("")
        margins = list(next(iter(self.matrices.values()), {}))  # every set has the same margins
        rows = [[name, *(self.average(name, m) for m in margins)] for name in self.matrices]
        parts.append(markdown_table(["set", *(f"avg xsim ({m})" for m in margins)], rows))
        return "\n".join(parts)

    def to_dict(self) -> dict:
        """JSON-serialisable form (NaN diagonals as null)."""
        return {
            "k": self.k,
            "sizes": self.sizes,
            "directions": self.directions,
            "pair_sizes": self.pair_sizes,
            "matrices": {
                name: {
                    m: {"langs": langs, "xsim": [[None if np.isnan(v) else float(v) for v in r] for r in mat]}
                    for m, (langs, mat) in by.items()
                }
                for name, by in self.matrices.items()
            },
            "p_at_1": {
                name: {
                    "langs": by["absolute"][0],
                    "p_at_1": [[None if np.isnan(v) else round(100.0 - v, 2) for v in r] for r in by["absolute"][1]],
                }
                for name, by in self.matrices.items()
                if "absolute" in by
            },
            "mining": self.mining,
        }


MINING_KEYS = ("f1", "precision", "recall", "threshold")


def _check_retrieval_sets(sets: Sequence[str]) -> None:
    unknown = [s for s in sets if s not in RETRIEVAL_SETS and not is_spec(s)]
    if unknown:
        raise UsageError(
            f"unknown retrieval set(s) {unknown}; valid: {', '.join(RETRIEVAL_SETS)}, or a corpus spec of aligned text "
            "(files:de=PATH:en=PATH, moses:FOLDER, tsv:PATH, hf:ID_OR_FOLDER; docs/data.md)"
        )


def read_retrieval(
    name: str, data_dir: str | os.PathLike | None, langs: Sequence[str]
) -> dict[str, dict[str, list[str]] | PivotPairs]:
    """``{set: {lang: lines}}`` (``{set: PivotPairs}`` for a set of en-X pairs) of a registered set or a user spec,
    over its languages of ``langs`` (none when it has fewer than two of them, or a pair set lacks English)."""
    if is_spec(name):
        return read_retrieval_spec(name, langs)
    here = set_languages(name, langs)
    if not here:
        return {}
    if name in OPEN_SETS:
        left_out = [lang for lang in langs if lang not in here]
        if left_out:
            logger.info("%s: %d of the languages have no file here (left out): %s", name, len(left_out), left_out)
    texts = RETRIEVAL_SETS[name][0](data_dir, here)
    if isinstance(texts, PivotPairs) and not texts.pairs:
        logger.info("%s: none of %s has pairs here (set left out)", name, ", ".join(here))
        return {}
    return {name: texts}


def read_retrieval_sets(
    data_dir: str | os.PathLike | None, sets: Sequence[str], langs: Sequence[str]
) -> dict[str, dict[str, list[str]] | PivotPairs]:
    """``{set: {lang: lines}}`` (or ``PivotPairs``) of every set (registered or user spec) over its languages of
    ``langs``."""
    _check_retrieval_sets(sets)
    return {set_name: texts for name in sets for set_name, texts in read_retrieval(name, data_dir, langs).items()}


def embed_retrieval(embed: Embed, texts: Mapping[str, Mapping[str, list[str]] | PivotPairs]) -> dict[str, object]:
    """``{set: {lang: embeddings}}`` (``PivotPairs`` of embeddings for a set of en-X pairs): ``embed`` called once
    per set with the sentences of all its languages (each language of a multi-way set, English included, once)."""
    out: dict[str, object] = {}
    for set_name, by_lang in texts.items():
        if isinstance(by_lang, PivotPairs):
            pivot = by_lang.pivot
            sides = [(tag, side) for other, pair in by_lang.pairs.items() for tag, side in zip((pivot, other), pair)]
        else:
            sides = list(by_lang.items())
        emb = embed_texts(
            embed, [t for _, lines in sides for t in lines], langs=[lang for lang, lines in sides for _ in lines]
        )
        parts = split_rows(emb, [len(lines) for _, lines in sides])
        if isinstance(by_lang, PivotPairs):
            pairs = {lang: (parts[2 * i], parts[2 * i + 1]) for i, lang in enumerate(by_lang.pairs)}
            out[set_name] = PivotPairs(by_lang.pivot, pairs)
        else:
            out[set_name] = dict(zip(by_lang, parts))
    return out


def _english_only(name: str, langs: Sequence[str], directions: str) -> bool:
    """Whether a multi-way set is scored to and from English only (``DIRECTIONS``); UsageError when that needs an
    English it lacks."""
    if directions not in DIRECTIONS:
        raise UsageError(f"unknown directions {directions!r}; valid: {', '.join(DIRECTIONS)}")
    english = directions == "english" or (directions == "auto" and len(langs) > FULL_MATRIX_LANGUAGES)
    if english and PIVOT not in langs:
        raise UsageError(
            f"retrieval set {name}: {len(langs)} languages without English; xsim to and from English needs en among "
            f"the evaluated languages (or --directions all)"
        )
    return english


def _score_pairs(
    name: str, pairs: PivotPairs, margins: Sequence[str], k: int, backend: Backend, other: PivotPairs | None
) -> tuple[list[str], dict[str, np.ndarray], dict[str, dict[str, float]]]:
    """The to/from-pivot cells of every language of a set of en-X pairs (one search per language: its own pivot
    side), and the mining F1 of each pair (none with ``other``, a cross-model search)."""
    langs = pairs.languages
    matrices = {m: np.full((len(langs), len(langs)), np.nan) for m in margins}
    mining = {}
    for j, (lang, (pivot_side, side)) in enumerate(pairs.pairs.items(), start=1):
        targets = None if other is None else dict(zip((pairs.pivot, lang), other.pairs[lang]))
        search = AlignedSearch({pairs.pivot: pivot_side, lang: side}, k, backend, targets, name)
        for m in margins:
            matrices[m][j, 0] = search.xsim(lang, pairs.pivot, m)
            matrices[m][0, j] = search.xsim(pairs.pivot, lang, m)
        if other is None:
            mining[f"{pairs.pivot}-{lang}"] = candidates_f1(*search.candidates(pairs.pivot, lang, "ratio"))
    return langs, matrices, mining


def score_retrieval(
    embs: Mapping[str, object],
    margins: Sequence[str] = ("absolute", "ratio"),
    k: int = 4,
    backend: Backend = "auto",
    targets: Mapping[str, object] | None = None,
    directions: str = "auto",
) -> RetrievalResult:
    """xsim matrices and mining F1 of embedded sets (:func:`embed_retrieval`). With ``targets`` (the same sets
    embedded by another embedder) the queries of ``embs`` search the targets of ``targets`` (a cross-model matrix;
    no mining). ``directions`` (``DIRECTIONS``) chooses the searched directions of multi-way sets; a set of en-X
    pairs is scored to and from English, each language against its own English side. Unsearched cells are NaN."""
    result = RetrievalResult(k=k)
    for set_name, by_lang in embs.items():
        other = None if targets is None else targets[set_name]
        if isinstance(by_lang, PivotPairs):
            langs, matrices, mining = _score_pairs(set_name, by_lang, margins, k, backend, other)
            result.pair_sizes[set_name] = by_lang.sizes()
            result.sizes[set_name] = sum(result.pair_sizes[set_name].values())
            result.directions[set_name] = "english"
            result.matrices[set_name] = {m: (langs, matrices[m]) for m in margins}
            if other is None:
                result.mining[set_name] = mining
            continue
        langs = list(by_lang)
        english = _english_only(set_name, langs, directions)
        result.directions[set_name] = "english" if english else "all"
        result.sizes[set_name] = next(iter(by_lang.values())).shape[0]
        search = AlignedSearch(by_lang, k, backend, other)  # every kNN list computed once, for all margins
        pivot = PIVOT if english else None
        result.matrices[set_name] = {m: (list(search.langs), search.matrix(m, pivot)) for m in margins}
        if other is None:
            result.mining[set_name] = {
                f"{a}-{b}": candidates_f1(*search.candidates(a, b, "ratio"))
                for i, a in enumerate(langs)
                for b in langs[i + 1 :]
                if not english or PIVOT in (a, b)
            }
    return result


def evaluate_retrieval(
    embed: Embed,
    data_dir: str | os.PathLike | None = None,
    sets: Sequence[str] = tuple(RETRIEVAL_SETS),
    langs: Sequence[str] = LANGS,
    margins: Sequence[str] = ("absolute", "ratio"),
    k: int = 4,
    backend: Backend = "auto",
    directions: str = "auto",
) -> RetrievalResult:
    """xsim matrices and mining F1 on registered sets (NTREX-128: 10 languages, TICO-19: en/es/fr, FLORES-200: any
    of its languages, xed-dev: en-X pairs ...) or user specs (aligned files); each set uses the languages of ``langs``
    it has. ``directions``: see ``score_retrieval``.

    ``embed`` is called once per set with the sentences of all its languages.
    """
    texts = read_retrieval_sets(data_dir, sets, langs)
    return score_retrieval(embed_retrieval(embed, texts), margins, k, backend, directions=directions)


def first_matrix(by_lang: object) -> object:
    if isinstance(by_lang, PivotPairs):
        return next(iter(by_lang.pairs.values()))[0]
    return next(iter(by_lang.values()))


def same_space(a: Mapping[str, object], b: Mapping[str, object]) -> bool:
    """Whether two embeddings of the same sets are dense vectors of one width (a cross-model search makes sense)."""
    first = [first_matrix(by_lang) for by_lang in (*a.values(), *b.values())]
    return bool(first) and not any(sparse.issparse(e) for e in first) and len({e.shape[1] for e in first}) == 1


def evaluation_languages(model_langs: Sequence[str]) -> list[str]:
    """The languages of a model with its own language list (cNV) that the suite can evaluate, in the model's order;
    ``UsageError`` unless there are two (a cross-lingual evaluation needs a pair)."""
    shared = [lang for lang in model_langs if lang in EVALUATION_LANGS]
    if len(shared) < 2:
        raise UsageError(
            f"the model's languages ({', '.join(model_langs)}) include {len(shared)} of the evaluation languages "
            f"({', '.join(EVALUATION_LANGS)}); a cross-lingual evaluation needs two of them"
        )
    return shared


def retrieval_sets_for(langs: Sequence[str], sets: Sequence[str] | None = None) -> tuple[str, ...]:
    """The retrieval ``sets`` (None: every registered set but the samples of another, ``SAMPLE_SETS``) that have at
    least two of ``langs``; a named registered set with fewer is a ``UsageError`` (a user spec is checked when read)."""
    if sets is None:
        return tuple(name for name in RETRIEVAL_SETS if name not in SAMPLE_SETS and set_languages(name, langs))
    _check_retrieval_sets(sets)
    for name in sets:
        if is_spec(name) or set_languages(name, langs):
            continue
        have = ", ".join(RETRIEVAL_SETS[name][1]) + (f" and {OPEN_SETS[name][1]}" if name in OPEN_SETS else "")
        need = "English and one other of its languages" if name in PIVOT_SETS else "two of its languages"
        raise UsageError(
            f"retrieval set {name} has {have}; the evaluated {', '.join(langs)} do not include {need}: leave it out"
        )
    return tuple(sets)

"""Model-agnostic evaluation runners: everything takes ``embed(texts: list[str]) -> np.ndarray (n, dim)``.

An embedder is called once per dataset with all its texts (every language, every split), so one that fits on its input
(the ``tfidf-char`` reference) sees exactly the texts being compared. Document sets (MLDoc) go to the embedder's
``embed_documents`` method when it has one. An embedder with ``per_language = True`` (a model with one encoder per
language, such as cNV) is called as ``embed(texts, langs=[...])`` with the language of every text. ``run_suite``
evaluates reference rows (random init, the lexical baseline, the majority class) with the same protocol on the same
texts and reports them in the same tables.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from scipy import sparse

from hf_tlaser.bitext.knn import Backend
from hf_tlaser.errors import UsageError

from .classifier import ClassifierConfig, Split, TransferResult, zero_shot_transfer
from .lexical import NAME as LEXICAL_NAME
from .lexical import tfidf_char_embed
from .mining import candidates_f1
from .plots import plot_embeddings, plot_heatmap, plot_result_rows, plot_training_curves, plot_transfer_matrix
from .readers import (
    CLASSIFICATION_LANGS,
    CLASSIFICATION_SETS,
    LANGS,
    OPEN_SETS,
    PIVOT_SETS,
    RETRIEVAL_SETS,
    ClassificationData,
    PivotPairs,
    corpus_folder,
    is_spec,
    read_classification_spec,
    read_mldoc,
    read_retrieval_spec,
    set_languages,
)
from .report import (
    CROSS_PREFIX,
    about_table,
    english_cells,
    english_summary,
    english_table,
    markdown_table,
    pair_table,
    retrieval_directions,
    summary_table,
    write_report,
)
from .retrieval import AlignedSearch

logger = logging.getLogger(__name__)

Embed = Callable[..., np.ndarray]
"""``embed(texts) -> (n, dim)``; with a true ``per_language`` attribute ``embed(texts, langs=[lang of each text])``."""
SUITES = ("retrieval", "sib200", "umsab", "mldoc")
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
DOCUMENT_SETS = ("mldoc",)
"""Classification sets whose texts are documents (embedded with the embedder's ``embed_documents``)."""


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


def _split_rows(emb: np.ndarray | sparse.csr_matrix, sizes: Sequence[int]) -> list:
    bounds = np.cumsum([0, *sizes])
    return [emb[a:b] for a, b in zip(bounds[:-1], bounds[1:])]


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
        parts = _split_rows(emb, [len(lines) for _, lines in sides])
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


def _first_matrix(by_lang: object) -> object:
    if isinstance(by_lang, PivotPairs):
        return next(iter(by_lang.pairs.values()))[0]
    return next(iter(by_lang.values()))


def same_space(a: Mapping[str, object], b: Mapping[str, object]) -> bool:
    """Whether two embeddings of the same sets are dense vectors of one width (a cross-model search makes sense)."""
    first = [_first_matrix(by_lang) for by_lang in (*a.values(), *b.values())]
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
    """The retrieval ``sets`` (None: every registered set) that have at least two of ``langs``; a named registered
    set with fewer is a ``UsageError`` (a user spec is checked when read)."""
    if sets is None:
        return tuple(name for name in RETRIEVAL_SETS if set_languages(name, langs))
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


def read_classification(
    dataset: str, data_dir: str | os.PathLike | None = None, langs: Sequence[str] = LANGS
) -> ClassificationData:
    """``sib200`` / ``umsab`` from the data folder, ``mldoc`` from ``<data_dir>/mldoc`` (not shipped), or a user
    dataset spec (``hf:...``, ``read_classification_spec``); each over its languages of ``langs``."""
    if is_spec(dataset):
        return read_classification_spec(dataset, langs)
    if dataset not in CLASSIFICATION_LANGS:
        raise UsageError(
            f"unknown dataset {dataset!r}; valid: {', '.join([*CLASSIFICATION_SETS, 'mldoc'])}, or a user dataset "
            "hf:FOLDER_OR_ID[:text=COL][:label=COL][:language=COL]"
        )
    here = [lang for lang in langs if lang in CLASSIFICATION_LANGS[dataset]]
    if not here:
        raise UsageError(f"{dataset} has {', '.join(CLASSIFICATION_LANGS[dataset])}: none of {', '.join(langs)}")
    if dataset == "mldoc":
        return read_mldoc(corpus_folder(data_dir, "mldoc"), here)
    return CLASSIFICATION_SETS[dataset](data_dir, here)


def embed_classification(
    embed: Embed, data: ClassificationData, documents: bool = False
) -> tuple[dict[str, dict[str, Split]], list[str]]:
    """Embed every split of every language in one ``embed`` call; labels become indices into the returned names."""
    names = sorted({label for splits in data.values() for s in splits.values() for label in s.labels})
    index = {name: i for i, name in enumerate(names)}
    splits = [(lang, split, part) for lang, by_split in data.items() for split, part in by_split.items()]
    emb = embed_texts(
        embed,
        [t for _, _, part in splits for t in part.texts],
        documents,
        [lang for lang, _, part in splits for _ in part.texts],
    )
    embedded: dict[str, dict[str, Split]] = {}
    for (lang, split, part), x in zip(splits, _split_rows(emb, [len(part) for _, _, part in splits])):
        embedded.setdefault(lang, {})[split] = (x, np.array([index[label] for label in part.labels]))
    return embedded, names


def majority_rate(data: dict[str, dict[str, Split]]) -> float:
    """Accuracy (%) of always answering the most frequent train label, averaged over (train, test) languages."""
    rates = [
        100.0 * np.mean(test["test"][1] == np.bincount(train["train"][1]).argmax())
        for train in data.values()
        for test in data.values()
    ]
    return float(np.mean(rates))


def evaluate_classification(
    embed: Embed,
    data_dir: str | os.PathLike | None = None,
    dataset: str = "sib200",
    langs: Sequence[str] = LANGS,
    train_langs: Sequence[str] | None = None,
    seeds: Sequence[int] = (0, 1, 2, 3, 4),
    config: ClassifierConfig | None = None,
) -> TransferResult:
    """Zero-shot transfer matrix (MLDoc protocol) on ``sib200``, ``umsab`` or ``mldoc``."""
    data = read_classification(dataset, data_dir, langs)
    embedded, names = embed_classification(embed, data, dataset in DOCUMENT_SETS)
    return zero_shot_transfer(embedded, train_langs, seeds=seeds, config=config, label_names=names)


@dataclass(frozen=True)
class Reference:
    """A reference row: ``embed_for(suite)`` gives the embedder used for that suite; ``label`` names the row in
    tables and ``about`` says what it is. ``cross``: also a cross-model row when the evaluated model's vectors have
    this reference's width (the model's queries searched among the reference's targets, see ``run_suite``)."""

    label: str
    about: str
    embed_for: Callable[[str], Embed]
    cross: bool = False


def lexical_reference(svd_dim: int = 512) -> Reference:
    """``tfidf-char``: character 3-5-gram TF-IDF fit on each dataset's texts (sparse for retrieval, reduced to
    ``svd_dim`` dimensions for classification), the score a model must beat to be worth its training."""

    def sparse_tfidf(texts: list[str]) -> sparse.csr_matrix:
        return tfidf_char_embed(texts, svd_dim=None, sparse=True)

    def reduced(texts: list[str]) -> np.ndarray:
        return tfidf_char_embed(texts, svd_dim=svd_dim)

    return Reference(
        f"{LEXICAL_NAME} (lexical reference)",
        "character 3-5-gram TF-IDF, fit on the texts of each dataset: a lexical baseline, not a model",
        lambda suite: sparse_tfidf if suite == "retrieval" else reduced,
    )


FILE_NAME_CHARS = 60
"""Longest file-name part made from a set name: a user spec of several file paths would pass the file system's limit
(255 bytes)."""


def file_name(name: str) -> str:
    """A set name (a user spec may hold ``/`` and ``:``) as a file-name part: a long one is cut and keeps a hash of
    the whole, so that two specs never share a file."""
    part = re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("_")
    if len(part) <= FILE_NAME_CHARS:
        return part
    return f"{part[: FILE_NAME_CHARS - 11]}-{hashlib.sha1(name.encode()).hexdigest()[:10]}"


def run_suite(
    embed: Embed,
    output_dir: str | os.PathLike,
    suites: Sequence[str] = ("retrieval", "sib200"),
    data_dir: str | os.PathLike | None = None,
    langs: Sequence[str] = LANGS,
    seeds: Sequence[int] = (0, 1, 2, 3, 4),
    config: ClassifierConfig | None = None,
    retrieval_sets: Sequence[str] = tuple(RETRIEVAL_SETS),
    projection: str | None = "tsne",
    trainer_state: str | os.PathLike | None = None,
    title: str = "hf_tlaser evaluation",
    references: Mapping[str, Reference] | None = None,
    about: Mapping[str, object] | None = None,
    directions: str = "auto",
) -> dict:
    """Run suites, write ``report.md``, ``results.json`` and PNG plots to ``output_dir``; return the results.

    ``suites``: any of ``retrieval``, ``sib200``, ``umsab``, ``mldoc``. ``references`` (name -> :class:`Reference`)
    are evaluated on the same texts with the same protocol and reported next to ``embed`` (``results["references"]``);
    classification results also carry the majority-class rate. ``about`` (what was evaluated: path, model,
    precision...) heads the report and is stored as ``results["evaluated"]`` (its ``label`` names the main row).
    ``projection`` (``tsne``/``pca``/None) plots the test embeddings of each classification set by language and
    class. ``trainer_state`` adds training curves from a Trainer ``trainer_state.json``. ``directions``
    (``DIRECTIONS``): the xsim directions of the multi-way retrieval sets.
    """
    unknown = [s for s in suites if s not in SUITES and not is_spec(s)]
    if unknown:
        raise UsageError(f"unknown suite(s) {unknown}; valid: {', '.join(SUITES)}, or a user dataset hf:...")
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    references = dict(references or {})
    results: dict = {"evaluated": dict(about or {})}
    ref_results: dict[str, dict] = {name: {} for name in references}
    transfers: dict[str, TransferResult] = {}
    plots: list[tuple[str, Path]] = []
    for suite in suites:
        if suite == "retrieval":
            texts = read_retrieval_sets(data_dir, retrieval_sets, langs)
            model_embs = embed_retrieval(embed, texts)
            retrieval = score_retrieval(model_embs, directions=directions)
            results[suite] = retrieval.to_dict()
            plots += _xsim_plots(retrieval, out)
            for name, reference in references.items():
                ref_embs = embed_retrieval(reference.embed_for(suite), texts)
                ref_results[name][suite] = score_retrieval(ref_embs, directions=directions).to_dict()
                if reference.cross and same_space(model_embs, ref_embs):
                    cross = score_retrieval(model_embs, targets=ref_embs, directions=directions)
                    ref_results.setdefault(CROSS_PREFIX + name, {})[suite] = cross.to_dict()
                    plots += _xsim_plots(cross, out, f"cross-model {name}", ("ratio",))
            continue
        data = read_classification(suite, data_dir, langs)
        documents = suite in DOCUMENT_SETS
        embedded, names = embed_classification(embed, data, documents)
        transfer = transfers[suite] = zero_shot_transfer(embedded, seeds=seeds, config=config, label_names=names)
        majority = majority_rate(embedded)
        results[suite] = {**transfer.to_dict(), "majority_class": majority}
        for name, reference in references.items():
            ref_embedded, _ = embed_classification(reference.embed_for(suite), data, documents)
            ref_transfer = zero_shot_transfer(ref_embedded, seeds=seeds, config=config, label_names=names)
            ref_results[name][suite] = ref_transfer.to_dict()
        png = plot_transfer_matrix(transfer, out / f"transfer_{file_name(suite)}.png", majority=majority)
        plots.append((f"{suite} transfer matrix", png))
        if projection is not None:
            emb = np.concatenate([embedded[lang]["test"][0] for lang in embedded])
            lang_tags = [lang for lang in embedded for _ in embedded[lang]["test"][1]]
            classes = [names[i] for lang in embedded for i in embedded[lang]["test"][1]]
            png = plot_embeddings(
                emb, lang_tags, out / f"embeddings_{file_name(suite)}.png", classes, projection, suite
            )
            plots.append((f"{suite} test embeddings", png))
    if references:
        results["references"] = {
            name: {"label": reference.label, "about": reference.about, **ref_results[name]}
            for name, reference in references.items()
        }
        label = results["evaluated"].get("label", "model")
        for name in references:
            if CROSS_PREFIX + name in ref_results:
                results["references"][CROSS_PREFIX + name] = {
                    "label": f"{label} queries → {name} targets (cross-model)",
                    "about": f"queries embedded by {label}, searched among the targets embedded by {name} (same "
                    f"width): the xx → en cells show whether {label} shares {name}'s space (a distilled student)",
                    **ref_results[CROSS_PREFIX + name],
                }
        png = plot_result_rows(results, out / "rows.png")
        if png is not None:
            plots.append(("Every row of the results table", png))
    if trainer_state is not None:
        plots.append(("Training curves", plot_training_curves(trainer_state, out / "training_curves.png")))
    (out / "results.json").write_text(json.dumps(results, indent=2), encoding="utf-8")
    write_report(out / "report.md", title, _report_sections(results, transfers, plots))
    return results


def _xsim_plots(
    retrieval: RetrievalResult, out: Path, who: str = "", margins: Sequence[str] | None = None
) -> list[tuple[str, Path]]:
    """xsim heatmaps of every set and margin (of ``margins``); ``who`` names a row other than the model's."""
    plots = []
    for name, by_margin in retrieval.matrices.items():
        for margin, (set_langs, matrix) in by_margin.items():
            if margins is not None and margin not in margins:
                continue
            suffix = f"_{file_name(who)}" if who else ""
            rows, columns = set_langs, set_langs
            xlabel = f"target{' (' + who.removeprefix('cross-model ') + ')' if who else ''}"
            ylabel = f"query{' (evaluated model)' if who else ''}"
            if retrieval.directions.get(name) == "english":  # one row per language: xx -> en, en -> xx
                rows, matrix = english_cells(set_langs, matrix)
                columns, xlabel, ylabel = ["xx → en", "en → xx"], "direction", "language"
            png = plot_heatmap(
                matrix,
                rows,
                columns,
                out / f"xsim_{file_name(name)}_{margin}{suffix}.png",
                f"{name} xsim error % ({margin}){': ' + who if who else ''}",
                xlabel,
                ylabel,
                "viridis_r",
            )
            plots.append((f"{name} xsim ({margin}){', ' + who if who else ''}", png))
    return plots


def _report_sections(
    results: dict, transfers: dict[str, TransferResult], plots: list[tuple[str, Path]]
) -> list[tuple[str, object]]:
    """What was evaluated, one table of every row (model and references), per-pair retrieval tables, the model's
    transfer matrices, then the plots."""
    sections: list[tuple[str, object]] = [("Evaluated", about_table(results["evaluated"]))]
    sections.append(("Results", summary_table(results)))
    for name, by_margin in ((results.get("retrieval") or {}).get("matrices") or {}).items():
        english = retrieval_directions(results, name) == "english"
        for margin in by_margin:
            if english:
                summary = english_summary(results, name, margin)
                if summary is not None:
                    sections.append((f"{name}: xsim error % to and from English, summary ({margin} margin)", summary))
                table = english_table(results, name, margin) or "(no English)"
                sections.append((f"{name}: xsim error % to and from English per language ({margin} margin)", table))
                continue
            heading = f"{name}: xsim error % per language pair ({margin} margin)"
            sections.append((heading, pair_table(results, name, margin)))
    label = results["evaluated"].get("label", "model")
    sections += [(f"{suite}: zero-shot transfer accuracy % ({label})", t) for suite, t in transfers.items()]
    return sections + plots

"""Model-agnostic evaluation: :func:`run_suite` runs the suites on ``embed(texts: list[str]) -> np.ndarray (n, dim)``
(:mod:`hf_tlaser.evaluation.embedding`), the retrieval suite (:mod:`~hf_tlaser.evaluation.suite_retrieval`) and the
classification suites (:mod:`~hf_tlaser.evaluation.suite_classification`), and evaluates reference rows (random init,
the lexical baseline, the majority class) with the same protocol on the same texts, reported in the same tables.
The suites' public names are importable from here too.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy import sparse

from hf_tlaser.errors import UsageError

from .classifier import ClassifierConfig, TransferResult, zero_shot_transfer
from .embedding import Embed, embed_texts
from .lexical import NAME as LEXICAL_NAME
from .lexical import tfidf_char_embed
from .plots import plot_embeddings, plot_heatmap, plot_result_rows, plot_training_curves, plot_transfer_matrix
from .readers import CLASSIFICATION_SETS, LANGS, RETRIEVAL_SETS
from .report import (
    CROSS_PREFIX,
    about_table,
    english_cells,
    english_summary,
    english_table,
    pair_table,
    retrieval_directions,
    summary_table,
    write_report,
)
from .suite_classification import (
    DOCUMENT_SETS,
    embed_classification,
    evaluate_classification,
    majority_rate,
    read_classification,
)
from .suite_retrieval import (
    DIRECTIONS,
    EVALUATION_LANGS,
    FULL_MATRIX_LANGUAGES,
    PIVOT,
    RetrievalResult,
    embed_retrieval,
    evaluate_retrieval,
    evaluation_languages,
    read_retrieval,
    read_retrieval_sets,
    retrieval_sets_for,
    same_space,
    score_retrieval,
)
from .user_sets import is_spec

__all__ = [
    "CLASSIFICATION_SETS",
    "DIRECTIONS",
    "DOCUMENT_SETS",
    "EVALUATION_LANGS",
    "FULL_MATRIX_LANGUAGES",
    "PIVOT",
    "RETRIEVAL_SETS",
    "SUITES",
    "Embed",
    "Reference",
    "RetrievalResult",
    "embed_classification",
    "embed_retrieval",
    "embed_texts",
    "evaluate_classification",
    "evaluate_retrieval",
    "evaluation_languages",
    "file_name",
    "lexical_reference",
    "majority_rate",
    "read_classification",
    "read_retrieval",
    "read_retrieval_sets",
    "retrieval_sets_for",
    "run_suite",
    "same_space",
    "score_retrieval",
]

SUITES = ("retrieval", "sib200", "umsab", "mldoc")


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

"""Model-agnostic evaluation runners: everything takes ``embed(texts: list[str]) -> np.ndarray (n, dim)``."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from hf_tlaser.data.paths import get_data_dir

from .classifier import ClassifierConfig, Split, TransferResult, zero_shot_transfer
from .knn import Backend
from .plots import plot_embeddings, plot_heatmap, plot_training_curves, plot_transfer_matrix
from .readers import CLASSIFICATION_SETS, LANGS, RETRIEVAL_SETS, ClassificationData, read_mldoc
from .report import markdown_table, write_report
from .retrieval import xsim_matrix

Embed = Callable[[list[str]], np.ndarray]
SUITES = ("retrieval", "sib200", "umsab", "mldoc")


@dataclass
class RetrievalResult:
    """xsim matrices (error %, row = query language, column = searched language) per set and margin."""

    k: int
    matrices: dict[str, dict[str, tuple[list[str], np.ndarray]]] = field(default_factory=dict)
    sizes: dict[str, int] = field(default_factory=dict)

    def average(self, dataset: str, margin: str) -> float:
        """Mean xsim error over all ordered language pairs."""
        return float(np.nanmean(self.matrices[dataset][margin][1]))

    def to_markdown(self) -> str:
        """One table per set and margin, then a summary table of averages."""
        parts = []
        for name, by_margin in self.matrices.items():
            for margin, (langs, matrix) in by_margin.items():
                rows = [
                    [a, *("-" if i == j else float(matrix[i, j]) for j in range(len(langs)))]
                    for i, a in enumerate(langs)
                ]
                parts.append(f"**{name}** ({self.sizes[name]} sentences), xsim error %, margin={margin}, k={self.k}")
                parts.append(markdown_table(["query \\ target", *langs], rows))
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
            "matrices": {
                name: {
                    m: {"langs": langs, "xsim": [[None if np.isnan(v) else float(v) for v in r] for r in mat]}
                    for m, (langs, mat) in by.items()
                }
                for name, by in self.matrices.items()
            },
        }


def embed_texts(embed: Embed, texts: list[str]) -> np.ndarray:
    """Call ``embed`` and check it returns one row per text."""
    emb = np.asarray(embed(list(texts)), dtype=np.float32)
    if emb.ndim != 2 or emb.shape[0] != len(texts):
        raise ValueError(f"embed returned shape {emb.shape} for {len(texts)} texts; expected (n, dim)")
    return emb


def evaluate_retrieval(
    embed: Embed,
    data_dir: str | os.PathLike | None = None,
    sets: Sequence[str] = tuple(RETRIEVAL_SETS),
    langs: Sequence[str] = LANGS,
    margins: Sequence[str] = ("absolute", "ratio"),
    k: int = 4,
    backend: Backend = "auto",
) -> RetrievalResult:
    """xsim matrices on multi-way sets; each set uses the languages of ``langs`` it has (TICO-19: en/es/fr)."""
    unknown = [s for s in sets if s not in RETRIEVAL_SETS]
    if unknown:
        raise ValueError(f"unknown retrieval set(s) {unknown}; valid: {', '.join(RETRIEVAL_SETS)}")
    unknown = [lang for lang in langs if lang not in LANGS]
    if unknown:
        raise ValueError(f"unknown language(s) {unknown}; valid: {', '.join(LANGS)}")
    result = RetrievalResult(k=k)
    for name in sets:
        reader, available = RETRIEVAL_SETS[name]
        here = [lang for lang in langs if lang in available]
        if len(here) < 2:
            continue
        texts = reader(data_dir, here)
        embs = {lang: embed_texts(embed, lines) for lang, lines in texts.items()}
        result.sizes[name] = len(texts[here[0]])
        result.matrices[name] = {m: xsim_matrix(embs, margin=m, k=k, backend=backend) for m in margins}
    return result


def read_classification(
    dataset: str, data_dir: str | os.PathLike | None = None, langs: Sequence[str] = LANGS
) -> ClassificationData:
    """``sib200`` / ``umsab`` from the data folder, ``mldoc`` from ``<data_dir>/mldoc`` (not shipped)."""
    if dataset == "mldoc":
        return read_mldoc(get_data_dir(data_dir) / "mldoc", langs)
    if dataset not in CLASSIFICATION_SETS:
        raise ValueError(f"unknown dataset {dataset!r}; valid: {', '.join([*CLASSIFICATION_SETS, 'mldoc'])}")
    return CLASSIFICATION_SETS[dataset](data_dir, langs)


def embed_classification(embed: Embed, data: ClassificationData) -> tuple[dict[str, dict[str, Split]], list[str]]:
    """Embed every split (one ``embed`` call per language); labels become indices into the returned names."""
    names = sorted({label for splits in data.values() for s in splits.values() for label in s.labels})
    index = {name: i for i, name in enumerate(names)}
    embedded: dict[str, dict[str, Split]] = {}
    for lang, splits in data.items():
        texts = [t for s in splits.values() for t in s.texts]
        parts = np.split(embed_texts(embed, texts), np.cumsum([len(s) for s in splits.values()])[:-1])
        embedded[lang] = {
            split: (x, np.array([index[label] for label in s.labels])) for (split, s), x in zip(splits.items(), parts)
        }
    return embedded, names


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
    embedded, names = embed_classification(embed, read_classification(dataset, data_dir, langs))
    return zero_shot_transfer(embedded, train_langs, seeds=seeds, config=config, label_names=names)


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
) -> dict:
    """Run suites, write ``report.md``, ``results.json`` and PNG plots to ``output_dir``; return the results.

    ``suites``: any of ``retrieval``, ``sib200``, ``umsab``, ``mldoc``. ``projection`` (``tsne``/``pca``/None)
    plots the test embeddings of each classification set by language and class. ``trainer_state`` adds
    training curves from a Trainer ``trainer_state.json``.
    """
    unknown = [s for s in suites if s not in SUITES]
    if unknown:
        raise ValueError(f"unknown suite(s) {unknown}; valid: {', '.join(SUITES)}")
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    sections: list[tuple[str, object]] = []
    results: dict = {}
    for suite in suites:
        if suite == "retrieval":
            retrieval = evaluate_retrieval(embed, data_dir, retrieval_sets, langs)
            results[suite] = retrieval.to_dict()
            sections.append(("Retrieval (xsim)", retrieval))
            for name, by_margin in retrieval.matrices.items():
                for margin, (set_langs, matrix) in by_margin.items():
                    png = plot_heatmap(
                        matrix,
                        set_langs,
                        set_langs,
                        out / f"xsim_{name}_{margin}.png",
                        f"{name} xsim error % ({margin})",
                        "target",
                        "query",
                        "viridis_r",
                    )
                    sections.append((f"{name} xsim ({margin})", png))
            continue
        embedded, names = embed_classification(embed, read_classification(suite, data_dir, langs))
        transfer = zero_shot_transfer(embedded, seeds=seeds, config=config, label_names=names)
        results[suite] = transfer.to_dict()
        sections.append((f"{suite} zero-shot transfer accuracy (%)", transfer))
        sections.append((f"{suite} transfer matrix", plot_transfer_matrix(transfer, out / f"transfer_{suite}.png")))
        if projection is not None:
            emb = np.concatenate([embedded[lang]["test"][0] for lang in embedded])
            lang_tags = [lang for lang in embedded for _ in embedded[lang]["test"][1]]
            classes = [names[i] for lang in embedded for i in embedded[lang]["test"][1]]
            png = plot_embeddings(emb, lang_tags, out / f"embeddings_{suite}.png", classes, projection, suite)
            sections.append((f"{suite} test embeddings", png))
    if trainer_state is not None:
        sections.append(("Training curves", plot_training_curves(trainer_state, out / "training_curves.png")))
    (out / "results.json").write_text(json.dumps(results, indent=2), encoding="utf-8")
    write_report(out / "report.md", title, sections)
    return results

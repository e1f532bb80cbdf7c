"""PNG plots (matplotlib, Agg backend): transfer heatmaps, 2-D embedding projections, training curves.

Legends sit outside the axes so that they never cover data; heatmaps use a fixed 0-100 % colour scale.
"""

from __future__ import annotations

import json
import os
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from .report import classification_suites, mean_std, mean_xsim, result_rows  # noqa: E402

_SPEED_KEYS = ("runtime", "samples_per_second", "steps_per_second")
COLLAPSE_SIGNALS = ("mean_cosine", "centered_cosine", "d_p", "d_n")
"""Logged by the trainer: mean (and mean-centred) pairwise cosine of a batch's sentence vectors (near 1: collapse),
mean distance of translation pairs and of negatives (cT-LASER's constraint)."""


def _save(fig, path: str | os.PathLike) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return path


def plot_heatmap(
    matrix: np.ndarray,
    row_labels: Sequence[str],
    col_labels: Sequence[str],
    path: str | os.PathLike,
    title: str = "",
    xlabel: str = "test",
    ylabel: str = "train",
    cmap: str = "viridis",
    value_range: tuple[float, float] = (0.0, 100.0),
    marks: Mapping[str, float] | None = None,
) -> Path:
    """Annotated heatmap of a percentage ``matrix`` (a train x test accuracy or an xsim matrix; NaN cells blank).

    The colour scale is fixed to ``value_range`` (0-100 %), so plots of different models compare by colour.
    ``marks`` (label -> value) draws a labelled line on the colour bar, e.g. the majority-class rate.
    """
    matrix = np.asarray(matrix, dtype=float)
    if matrix.shape != (len(row_labels), len(col_labels)):
        raise ValueError(f"matrix has shape {matrix.shape} but labels give {(len(row_labels), len(col_labels))}")
    fig, ax = plt.subplots(figsize=(1.6 + 0.9 * len(col_labels), 0.8 + 0.7 * len(row_labels)))
    image = ax.imshow(np.ma.masked_invalid(matrix), cmap=cmap, vmin=value_range[0], vmax=value_range[1])
    colorbar = fig.colorbar(image, ax=ax)
    if marks:  # a red line and a red tick label per mark; default ticks too close to a mark make room
        low, high = value_range
        ticks = [t for t in np.linspace(low, high, 6) if all(abs(t - v) > (high - low) / 15 for v in marks.values())]
        colorbar.set_ticks(
            [*ticks, *marks.values()],
            labels=[f"{t:g}" for t in ticks] + [f"{label} {value:.1f}" for label, value in marks.items()],
        )
        for value, tick in zip(marks.values(), colorbar.ax.get_yticklabels()[len(ticks) :]):
            colorbar.ax.axhline(value, color="red", linewidth=2)
            tick.set_color("red")
    ax.set_xticks(range(len(col_labels)), labels=list(col_labels))
    ax.set_yticks(range(len(row_labels)), labels=list(row_labels))
    ax.set(xlabel=xlabel, ylabel=ylabel, title=title)
    for (i, j), value in np.ndenumerate(matrix):
        if np.isfinite(value):
            red, green, blue, _ = image.cmap(image.norm(value))
            color = "black" if 0.299 * red + 0.587 * green + 0.114 * blue > 0.5 else "white"
            ax.text(j, i, f"{value:.1f}", ha="center", va="center", color=color, fontsize=9)
    return _save(fig, path)


def plot_transfer_matrix(
    result, path: str | os.PathLike, title: str = "Zero-shot transfer accuracy (%)", majority: float | None = None
) -> Path:
    """Heatmap of a :class:`~hf_tlaser.evaluation.classifier.TransferResult` mean matrix on a 0-100 scale;
    ``majority`` (the majority-class rate, %) is marked on the colour bar and named in the title."""
    marks = None
    if majority is not None:
        title, marks = f"{title}\nmajority class: {majority:.1f}% (red on the colour bar)", {"majority": majority}
    return plot_heatmap(result.mean, result.train_langs, result.test_langs, path, title, marks=marks)


def project_2d(emb: np.ndarray, method: str = "tsne", seed: int = 0) -> np.ndarray:
    """2-D projection with scikit-learn: ``tsne`` (PCA-initialised t-SNE) or ``pca``."""
    emb = np.asarray(emb, dtype=np.float32)
    if method == "pca":
        from sklearn.decomposition import PCA

        return PCA(n_components=2, random_state=seed).fit_transform(emb)
    if method == "tsne":
        from sklearn.manifold import TSNE

        perplexity = float(min(30, max(2, (len(emb) - 1) // 3)))
        return TSNE(n_components=2, init="pca", perplexity=perplexity, random_state=seed).fit_transform(emb)
    raise ValueError(f"unknown projection {method!r}; valid: tsne, pca")


def plot_embeddings(
    emb: np.ndarray,
    langs: Sequence[str],
    path: str | os.PathLike,
    classes: Sequence[str] | None = None,
    method: str = "tsne",
    title: str = "",
    seed: int = 0,
) -> Path:
    """Scatter of a 2-D projection coloured by language (and, with ``classes``, a second panel by class)."""
    if len(langs) != len(emb) or (classes is not None and len(classes) != len(emb)):
        raise ValueError(f"emb has {len(emb)} rows; langs/classes must have one entry per row")
    points = project_2d(emb, method, seed)
    panels = [("language", list(langs))] + ([("class", list(classes))] if classes is not None else [])
    fig, axes = plt.subplots(1, len(panels), figsize=(7.5 * len(panels), 5), squeeze=False, layout="constrained")
    for ax, (name, values) in zip(axes[0], panels):
        for value in sorted(set(values)):
            keep = np.array([v == value for v in values])
            ax.scatter(points[keep, 0], points[keep, 1], s=8, alpha=0.7, label=str(value))
        ax.set_title(f"{title} by {name} ({method})".strip())
        ax.legend(fontsize=7, markerscale=2, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    return _save(fig, path)


def plot_training_curves(trainer_state: str | os.PathLike | dict, path: str | os.PathLike) -> Path:
    """Training losses (``loss`` and parts such as ``loss_mt_per_token``/``loss_align``), the collapse signals logged
    next to them (``mean_cosine``, ``centered_cosine``, ``d_p``, ``d_n``) and eval metrics, one panel each.

    ``trainer_state`` is a Trainer ``trainer_state.json`` path (or its loaded dict) with ``log_history``.
    """
    state = trainer_state if isinstance(trainer_state, dict) else json.loads(Path(trainer_state).read_text())
    train, collapse, evals = {}, {}, {}
    for entry in state.get("log_history", []):
        step = entry.get("step")
        for key, value in entry.items():
            if not isinstance(value, (int, float)) or step is None or key == "step":
                continue
            if key.startswith("loss"):
                train.setdefault(key, []).append((step, value))
            elif key in COLLAPSE_SIGNALS:
                collapse.setdefault(key, []).append((step, value))
            elif key.startswith("eval_") and not key.endswith(_SPEED_KEYS):
                evals.setdefault(key, []).append((step, value))
    if not train and not evals:
        raise ValueError("trainer state has no loss or eval_* entries in log_history")
    panels = [
        p
        for p in (
            ("training loss", train),
            ("collapse signals: cosines of sentence vectors, distances of pairs (d_p) and negatives (d_n)", collapse),
            ("evaluation", evals),
        )
        if p[1]
    ]
    fig, axes = plt.subplots(len(panels), 1, figsize=(9, 3.2 * len(panels)), squeeze=False, layout="constrained")
    for ax, (title, series) in zip(axes[:, 0], panels):
        for key, points in sorted(series.items()):
            steps, values = zip(*points)
            ax.plot(steps, values, marker="." if len(points) < 50 else None, label=key)
        values = [v for points in series.values() for _, v in points]
        if min(values) > 0 and max(values) / min(values) > 50:  # loss parts of very different sizes
            ax.set_yscale("log")
        ax.set(title=title, xlabel="step")
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    return _save(fig, path)


def plot_bars(
    labels: Sequence[str],
    panels: Mapping[str, Sequence[float | None]],
    path: str | os.PathLike,
    lines: Mapping[str, float] | None = None,
    line_label: str = "",
) -> Path:
    """One horizontal bar per label in each panel (title -> one value per label, None: no bar), values written at
    the bars, on a fixed 0-100 % scale; ``lines`` (panel title -> value) draws a dashed red line labelled
    ``line_label`` (e.g. the majority class)."""
    lines = lines or {}
    fig, axes = plt.subplots(
        1, len(panels), figsize=(4.5 * len(panels), 0.9 + 0.45 * len(labels)), squeeze=False, sharey=True
    )
    positions = np.arange(len(labels))[::-1]
    for ax, (title, values) in zip(axes[0], panels.items()):
        if len(values) != len(labels):
            raise ValueError(f"panel {title!r} has {len(values)} values for {len(labels)} labels")
        shown = [np.nan if v is None else float(v) for v in values]
        ax.barh(positions, np.nan_to_num(shown), color=[f"C{i}" for i in range(len(labels))])
        for y, value in zip(positions, shown):
            ax.text(101, y, "-" if np.isnan(value) else f"{value:.1f}", va="center", fontsize=8)
        if title in lines:
            ax.axvline(
                lines[title], color="red", linestyle="--", linewidth=1.5, label=f"{line_label} {lines[title]:.1f}"
            )
            ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(0.0, -0.12), borderaxespad=0)
        ax.set_xlim(0, 100)
        ax.set_title(textwrap.fill(title, 48), fontsize=9)
    axes[0, 0].set_yticks(positions, labels=list(labels), fontsize=8)
    return _save(fig, path)


def plot_result_rows(results: dict, path: str | os.PathLike) -> Path | None:
    """Bars of every row of the results table (model and references): mean xsim error % per retrieval set (ratio
    margin, else the first), ``cross`` accuracy % per classification set with the majority class as a line."""
    rows = result_rows(results)
    panels: dict[str, list[float | None]] = {}
    lines: dict[str, float] = {}
    for name, by_margin in ((results.get("retrieval") or {}).get("matrices") or {}).items():
        margin = "ratio" if "ratio" in by_margin else next(iter(by_margin))
        title = f"{name} xsim error % ({margin}), lower is better"
        panels[title] = [
            mean_xsim((((entry.get("retrieval") or {}).get("matrices") or {}).get(name) or {}).get(margin) or {})
            for _, entry in rows
        ]
    for suite in classification_suites(results):
        title = f"{suite} cross accuracy %, higher is better"
        panels[title] = [
            (mean_std(((entry.get(suite) or {}).get("summary") or {}).get("cross")) or (None,))[0] for _, entry in rows
        ]
        if results[suite].get("majority_class") is not None:
            lines[title] = results[suite]["majority_class"]
    if not panels:
        return None
    return plot_bars([label for label, _ in rows], panels, path, lines, "majority class")

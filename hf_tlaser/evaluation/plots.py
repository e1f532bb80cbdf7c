"""PNG plots (matplotlib, Agg backend): transfer heatmaps, 2-D embedding projections, training curves."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

_SPEED_KEYS = ("runtime", "samples_per_second", "steps_per_second")


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
) -> Path:
    """Annotated heatmap of ``matrix`` (e.g. a train x test accuracy or an xsim matrix; NaN cells blank)."""
    matrix = np.asarray(matrix, dtype=float)
    if matrix.shape != (len(row_labels), len(col_labels)):
        raise ValueError(f"matrix has shape {matrix.shape} but labels give {(len(row_labels), len(col_labels))}")
    fig, ax = plt.subplots(figsize=(1.0 + 0.9 * len(col_labels), 0.8 + 0.7 * len(row_labels)))
    image = ax.imshow(np.ma.masked_invalid(matrix), cmap=cmap)
    fig.colorbar(image, ax=ax)
    ax.set_xticks(range(len(col_labels)), labels=list(col_labels))
    ax.set_yticks(range(len(row_labels)), labels=list(row_labels))
    ax.set(xlabel=xlabel, ylabel=ylabel, title=title)
    finite = matrix[np.isfinite(matrix)]
    middle = (finite.min() + finite.max()) / 2 if finite.size else 0.0
    for (i, j), value in np.ndenumerate(matrix):
        if np.isfinite(value):
            color = "black" if value > middle else "white"
            ax.text(j, i, f"{value:.1f}", ha="center", va="center", color=color, fontsize=9)
    return _save(fig, path)


def plot_transfer_matrix(result, path: str | os.PathLike, title: str = "Zero-shot transfer accuracy (%)") -> Path:
    """Heatmap of a :class:`~hf_tlaser.evaluation.classifier.TransferResult` mean matrix."""
    return plot_heatmap(result.mean, result.train_langs, result.test_langs, path, title)


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
    fig, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), 5), squeeze=False)
    for ax, (name, values) in zip(axes[0], panels):
        for value in sorted(set(values)):
            keep = np.array([v == value for v in values])
            ax.scatter(points[keep, 0], points[keep, 1], s=8, alpha=0.7, label=str(value))
        ax.set_title(f"{title} by {name} ({method})".strip())
        ax.legend(fontsize=7, markerscale=2)
    return _save(fig, path)


def plot_training_curves(trainer_state: str | os.PathLike | dict, path: str | os.PathLike) -> Path:
    """Loss curves (``loss`` and parts such as ``loss_mt``/``loss_dp``/``loss_hinge``) and eval metrics.

    ``trainer_state`` is a Trainer ``trainer_state.json`` path (or its loaded dict) with ``log_history``.
    """
    state = trainer_state if isinstance(trainer_state, dict) else json.loads(Path(trainer_state).read_text())
    history = state.get("log_history", [])
    train, evals = {}, {}
    for entry in history:
        step = entry.get("step")
        for key, value in entry.items():
            if not isinstance(value, (int, float)) or step is None or key == "step":
                continue
            if key.startswith("loss"):
                train.setdefault(key, []).append((step, value))
            elif key.startswith("eval_") and not key.endswith(_SPEED_KEYS):
                evals.setdefault(key, []).append((step, value))
    if not train and not evals:
        raise ValueError("trainer state has no loss or eval_* entries in log_history")
    panels = [p for p in (("training loss", train), ("evaluation", evals)) if p[1]]
    fig, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), 4), squeeze=False)
    for ax, (title, series) in zip(axes[0], panels):
        for key, points in sorted(series.items()):
            steps, values = zip(*points)
            ax.plot(steps, values, marker="." if len(points) < 50 else None, label=key)
        ax.set(title=title, xlabel="step")
        ax.legend(fontsize=8)
    return _save(fig, path)

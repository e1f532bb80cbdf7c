"""The histogram of a mining run's scores (``hf-tlaser mine`` and ``mine-pipeline``): what a margin score means, the
threshold marked."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from hf_tlaser.bitext.mining import Mined


def histogram_title(margin: str, k: int, threshold: float | None, kept: int, total: int) -> str:
    """What a margin score means, for the histogram's title."""
    meaning = {
        "ratio": f"cos(x, y) / mean cosine of x's and y's {k} nearest neighbours;\n1 = no closer than the "
        "neighbours, higher = stands out more",
        "distance": f"cos(x, y) - mean cosine of x's and y's {k} nearest neighbours: 0 = no closer than the neighbours",
        "absolute": "cosine of the two sentences' embeddings",
    }[margin]
    cut = "no threshold" if threshold is None else f"{kept:,} of {total:,} pairs above {threshold:g} are written"
    return f"{margin} margin = {meaning}\n{cut}"


def plot_histogram(mined: Mined, path: Path, margin: str, k: int, threshold: float | None) -> None:
    """A histogram (PNG) of the mined pairs' scores, the threshold marked; written atomically."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 4.5))
    scores = np.asarray(mined.scores, dtype=np.float64)
    span = None
    if len(scores) and scores.max() - scores.min() < 1e-6:  # equal scores: numpy cannot cut 100 bins of float32 ulps
        span = (scores.min() - 1e-3, scores.max() + 1e-3)
    ax.hist(scores, bins=100, range=span, color="tab:blue")
    if threshold is not None:
        ax.axvline(threshold, color="tab:red", linestyle="--", label=f"threshold {threshold:g}")
        ax.legend()
    ax.set_xlabel(f"{margin} margin score of a mined pair")
    ax.set_ylabel("pairs")
    ax.set_yscale("log")
    ax.set_title(histogram_title(margin, k, threshold, mined.kept, len(mined.scores)), fontsize=9)
    fig.tight_layout()
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp.png")  # this process's: never a file of the user's
    try:
        fig.savefig(tmp, dpi=110)
        os.replace(tmp, path)
    finally:
        plt.close(fig)
        tmp.unlink(missing_ok=True)

"""Learning curves of warm-start runs: mean xsim error of one retrieval set against the updates, one line per run,
with reference lines (``python scripts/warm_start_curve.py --run "mean pooling=DIR0,DIR100,DIR200" --reference
"tfidf-char=50.1" --output docs/warm_start_curve.png``).

Each DIR is an evaluated model folder (``hf-tlaser evaluate`` wrote ``eval/results.json``); its update count is the
``updates`` the evaluation recorded. Also prints the points as a markdown table."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from hf_tlaser.evaluation.report import mean_xsim  # noqa: E402


def point(folder: Path, margin: str) -> tuple[int, float]:
    """(updates, mean xsim error %) of an evaluated folder (its first retrieval set)."""
    results = json.loads((folder / "eval" / "results.json").read_text(encoding="utf-8"))
    matrices = next(iter(results["retrieval"]["matrices"].values()))
    updates = int((results.get("evaluated") or {}).get("updates") or 0)
    return updates, mean_xsim(matrices[margin])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--run", action="append", required=True, metavar="NAME=DIR,DIR,...")
    p.add_argument("--reference", action="append", default=[], metavar="NAME=ERROR")
    p.add_argument("--margin", default="absolute")
    p.add_argument("--title", default="NTREX-128 xsim error (%)")
    p.add_argument("--output", required=True)
    args = p.parse_args(argv)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    print("| run | updates | xsim error % |\n|---|---|---|")
    for item in args.run:
        name, folders = item.split("=", 1)
        points = sorted(point(Path(folder), args.margin) for folder in folders.split(","))
        ax.plot(*zip(*points), marker="o", label=name)
        for updates, error in points:
            print(f"| {name} | {updates} | {error:.2f} |")
    for item in args.reference:
        name, value = item.split("=", 1)
        ax.axhline(float(value), linestyle="--", linewidth=1, color="gray")
        ax.annotate(name, (0, float(value)), textcoords="offset points", xytext=(4, 3), fontsize=8, color="gray")
    ax.set_yscale("log")
    ax.set_xlabel("optimizer updates")
    ax.set_ylabel(f"xsim error % ({args.margin}, log scale)")
    ax.set_title(args.title)
    ax.legend()
    fig.tight_layout()
    fig.savefig(args.output, dpi=120)
    return 0


if __name__ == "__main__":
    sys.exit(main())

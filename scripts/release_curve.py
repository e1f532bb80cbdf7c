"""The warm-start learning curve: every evaluated checkpoint of one run (``hf-tlaser evaluate CHECKPOINT`` wrote its
``eval/results.json``) as a table and a PNG, next to the reference rows of one evaluation that has them (the start, the
TF-IDF baseline, random init).

    python scripts/release_curve.py runs/release --references runs/release/checkpoint-2000/eval/results.json \\
        --output docs/release_curve.png

Every ``eval*/results.json`` of a checkpoint counts (a set evaluated later into ``--output-dir CHECKPOINT/eval-x``).
Columns: mean xsim error % (absolute margin) of every retrieval set the evaluations share, and SIB-200 cross accuracy
%. The table is printed as markdown.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from hf_tlaser.evaluation.report import mean_xsim  # noqa: E402


def set_name(name: str) -> str:
    """A short column name (a ``files:`` spec: the folder of its first file)."""
    if name.startswith("files:"):
        return Path(name.split("=", 1)[1].split(":", 1)[0]).name.split(".", 1)[0]
    return name


def scores(results: dict) -> dict[str, float]:
    """{set: mean xsim % (absolute margin), "sib200 cross": accuracy %} of one row of a ``results.json`` (the evaluated
    model's, or one of its ``references``, which have the same layout)."""
    out = {}
    for name, by_margin in ((results.get("retrieval") or {}).get("matrices") or {}).items():
        if by_margin.get("absolute"):
            out[set_name(name)] = mean_xsim(by_margin["absolute"])
    cross = ((results.get("sib200") or {}).get("summary") or {}).get("cross")
    if cross:
        out["sib200 cross"] = float(cross[0] if isinstance(cross, list) else cross)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("run", type=Path)
    parser.add_argument("--references", type=Path, help="a results.json with reference rows")
    parser.add_argument("--output", type=Path, required=True, help="PNG")
    args = parser.parse_args(argv)
    points = []
    for folder in sorted(args.run.glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[1])):
        merged: dict[str, float] = {}
        for path in sorted(folder.glob("eval*/results.json")):  # eval/, and sets evaluated later (eval-*/)
            merged.update(scores(json.loads(path.read_text(encoding="utf-8"))))
        if merged:
            points.append((int(folder.name.split("-")[1]), merged))
    references = {}
    if args.references:
        results = json.loads(args.references.read_text(encoding="utf-8"))
        rows = results.get("references") or {}
        references = {row: scores(value) for row, value in rows.items() if not row.startswith("cross-model")}
    columns = [c for c in points[0][1] if all(c in p for _, p in points)] if points else []
    print("| updates | " + " | ".join(columns) + " |\n|---|" + "---|" * len(columns))
    for row, values in references.items():
        print(f"| {row} | " + " | ".join(f"{values[c]:.2f}" if c in values else "-" for c in columns) + " |")
    for updates, values in points:
        print(f"| {updates} | " + " | ".join(f"{values[c]:.2f}" for c in columns) + " |")
    fig, axes = plt.subplots(1, len(columns), figsize=(3.2 * len(columns), 3.2), squeeze=False)
    for ax, column in zip(axes[0], columns):
        ax.plot([u for u, _ in points], [v[column] for _, v in points], marker="o", label="trained")
        for (row, values), style in zip(references.items(), ("--", ":", "-.", (0, (1, 3)))):
            if column in values:
                ax.axhline(values[column], linestyle=style, color="gray", linewidth=1, label=row)
        ax.set_title(column, fontsize=9)
        ax.set_xlabel("updates", fontsize=8)
        ax.set_xlim(left=0)
        if any(column in values for values in references.values()) and column != "sib200 cross":
            ax.set_yscale("log")  # the references sit orders of magnitude above
        else:
            ax.set_ylim(0, 1.2 * max(v[column] for _, v in points))  # from zero: small moves look small
    axes[0][0].legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(args.output, dpi=120)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""What a model card says about a model's evaluation: its ``results.json`` found (:func:`load_results`), the
Hub's model-index entries (:func:`eval_results`) and the card's evaluation section (:func:`evaluation_section`)."""

from __future__ import annotations

import os
from pathlib import Path

from huggingface_hub import EvalResult

from hf_tlaser.evaluation.report import (
    SUMMARY_KEYS,
    about_table,
    classification_suites,
    mean_std,
    mean_xsim,
    pair_table,
    summary_table,
)
from hf_tlaser.model_folders import read_json

RESULTS_FILES = ("eval/results.json", "results.json")
"""Where evaluation results are looked for in a model folder (``hf-tlaser evaluate`` writes the first)."""

CLASSIFICATION_NAMES = {
    "sib200": "SIB-200 topic classification",
    "umsab": "UMSAB tweet sentiment",
    "mldoc": "MLDoc document classification",
}


def retrieval_averages(results: dict) -> list[tuple[str, str, float]]:
    """(set, margin, mean xsim error %) per retrieval set and margin of the evaluated model in ``results.json``."""
    matrices = (results.get("retrieval") or {}).get("matrices") or {}
    averages = [(name, margin, mean_xsim(entry or {})) for name, by in matrices.items() for margin, entry in by.items()]
    return [(name, margin, avg) for name, margin, avg in averages if avg is not None]


def classification_summaries(results: dict) -> dict[str, dict[str, tuple[float, float | None]]]:
    """``{set: {"cross"|"same"|"all": (mean accuracy %, std)}}`` of the evaluated model in ``results.json``."""
    out = {}
    for name in classification_suites(results):
        parsed = {key: mean_std(results[name]["summary"].get(key)) for key in SUMMARY_KEYS}
        parsed = {key: value for key, value in parsed.items() if value is not None}
        if parsed:
            out[name] = parsed
    return out


def eval_results(results: dict) -> list[EvalResult]:
    """model-index entries: average xsim error per retrieval set and margin, accuracies per classification set."""
    entries = [
        EvalResult(
            task_type="sentence-similarity",
            task_name="Cross-lingual sentence retrieval (xsim)",
            dataset_type=name,
            dataset_name=name,
            metric_type="xsim_error",
            metric_name=f"average xsim error % ({margin} margin)",
            metric_value=round(avg, 2),
        )
        for name, margin, avg in retrieval_averages(results)
    ]
    for name, summary in classification_summaries(results).items():
        entries += [
            EvalResult(
                task_type="text-classification",
                task_name="Zero-shot cross-lingual transfer",
                dataset_type=name,
                dataset_name=CLASSIFICATION_NAMES.get(name, name),
                metric_type="accuracy",
                metric_name=f"{key} accuracy %",
                metric_value=round(mean, 2),
            )
            for key, (mean, _) in summary.items()
        ]
    return entries


def evaluation_section(results: dict | None) -> str:
    if not results:
        return (
            "Not evaluated yet: no `eval/results.json` was found next to the model (`hf-tlaser evaluate` writes one)."
        )
    parts = []
    if results.get("evaluated"):
        about = {key: value for key, value in results["evaluated"].items() if key != "path"}  # a local path
        parts += ["Evaluated with `hf-tlaser evaluate`:\n", about_table(about), ""]
    parts.append(
        "Cross-lingual retrieval: xsim error % (lower is better), averaged over language pairs; zero-shot "
        "cross-lingual classification: accuracy % of a classifier trained on one language (cross: tested on others). "
        "Reference rows were computed on the same sentences with the same protocol.\n"
    )
    parts.append(summary_table(results))
    sizes = (results.get("retrieval") or {}).get("sizes") or {}
    for name, by_margin in ((results.get("retrieval") or {}).get("matrices") or {}).items():
        margin = next(iter(by_margin))
        parts += ["", f"{name} ({sizes.get(name, '?')} sentences), xsim error % per pair, {margin} margin:\n"]
        parts.append(pair_table(results, name, margin))
    return "\n".join(parts)


def load_results(model_dir: str | os.PathLike, results: str | os.PathLike | dict | None = None) -> dict | None:
    """Evaluation results: ``results`` (a dict or a ``results.json`` path), else the most recently written of
    ``MODEL_DIR/eval/results.json`` (where ``hf-tlaser evaluate`` writes) and ``MODEL_DIR/results.json``."""
    if isinstance(results, dict):
        return results
    if results is not None:
        return read_json(results)
    found = [path for path in (Path(model_dir) / name for name in RESULTS_FILES) if path.is_file()]
    return read_json(max(found, key=lambda path: path.stat().st_mtime)) if found else None

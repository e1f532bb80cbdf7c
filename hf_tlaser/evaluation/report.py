"""Markdown report helpers, and the tables of a ``results.json`` dict shared by the report and the model card."""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence], float_format: str = "{:.2f}") -> str:
    """A GitHub-flavoured markdown table; floats are formatted with ``float_format``."""

    def cell(value) -> str:
        return float_format.format(value) if isinstance(value, float) else str(value)

    lines = ["| " + " | ".join(map(str, headers)) + " |", "|" + "---|" * len(headers)]
    for row in rows:
        if len(row) != len(headers):
            raise ValueError(f"row {list(row)} has {len(row)} cells, expected {len(headers)}")
        lines.append("| " + " | ".join(cell(v) for v in row) + " |")
    return "\n".join(lines)


def write_report(path: str | os.PathLike, title: str, sections: Sequence[tuple[str, object]]) -> Path:
    """Write a markdown report: ``# title`` then ``## heading`` + body for each ``(heading, body)``.

    A body is a string, an object with ``to_markdown()``, or a :class:`~pathlib.Path` to an image (linked
    relative to the report).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    parts = [f"# {title}", ""]
    for heading, body in sections:
        if isinstance(body, Path):
            target = os.path.relpath(body.resolve(), path.parent.resolve())
            body = f"![{heading}]({Path(target).as_posix()})"
        elif hasattr(body, "to_markdown"):
            body = body.to_markdown()
        parts += [f"## {heading}", "", str(body).rstrip(), ""]
    path.write_text("\n".join(parts), encoding="utf-8")
    return path


# --- tables from a results.json dict (the evaluation report and the model card) --------------------------------

SUMMARY_KEYS = ("cross", "same", "all")
CROSS_PREFIX = "cross-model: "
"""Key prefix of a cross-model row in ``results["references"]`` (``cross-model: NAME`` for reference NAME)."""
MANY_LANGUAGES = 10
"""Above this many languages besides English, ``hf-tlaser evaluate`` prints :func:`english_summary` (mean, worst five,
languages worse than each reference) instead of one row per language."""
WORST = 5
"""How many of the weakest languages :func:`english_summary` names."""
ABOUT_FIELDS = {
    "path": "model folder",
    "model": "model",
    "model_type": "model type",
    "languages": "languages",
    "sentence_vector": "sentence vector",
    "parameters": "parameters",
    "trainable_parameters": "trainable parameters",
    "preset": "preset",
    "weights": "weights",
    "updates": "optimizer updates",
    "tokens_seen": "tokens seen",
    "token_budget": "tokens seen (at most: updates x tokens per update)",
    "training_precision": "training precision",
    "precision": "evaluation precision",
    "device": "evaluation device",
    "evaluation_languages": "evaluation languages",
    "classifier": "classification protocol",
}
MAJORITY = "majority class (reference)"


def _about_value(value: object) -> str:
    if isinstance(value, dict) and "precision" in value:
        return f"{value['precision']} ({value['reason']})" if value.get("reason") else str(value["precision"])
    return f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else str(value)


def about_table(about: dict) -> str:
    """Two-column table of what was evaluated (``results["evaluated"]``); missing fields are left out."""
    rows = [[title, _about_value(about[key])] for key, title in ABOUT_FIELDS.items() if about.get(key) is not None]
    return markdown_table(["", ""], rows) if rows else "(not recorded)"


def xsim_values(entry: dict) -> list[float]:
    """The xsim errors (%) of one ``{"langs", "xsim"}`` matrix, one per direction (null diagonal skipped)."""
    return [v for row in entry.get("xsim") or [] for v in row if isinstance(v, (int, float)) and not math.isnan(v)]


def mean_xsim(entry: dict) -> float | None:
    """Mean xsim error (%) over the language pairs of one ``{"langs", "xsim"}`` matrix (null diagonal skipped)."""
    values = xsim_values(entry)
    return sum(values) / len(values) if values else None


def retrieval_header(name: str, margin: str, entry: dict) -> str:
    """Column title of a retrieval set's mean: the set, the margin and how many directions the mean covers (the
    evaluated model's ``entry``), so that means over different language sets are not compared by mistake."""
    return f"{name} xsim % ({margin}, {len(xsim_values(entry))} directions)"


def mean_std(value: object) -> tuple[float, float | None] | None:
    """A classification summary entry as ``(mean, std)``: ``[mean, std]`` as the suite writes it, or a number."""
    if isinstance(value, (int, float)):
        return float(value), None
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, (int, float)) for v in value):
        return float(value[0]), float(value[1]) if len(value) > 1 else None
    return None


def format_mean_std(value: tuple[float, float | None] | None) -> str:
    """``"61.50 ± 1.50"`` (``"-"`` when missing)."""
    if value is None:
        return "-"
    return f"{value[0]:.2f}" + (f" ± {value[1]:.2f}" if value[1] is not None else "")


def classification_suites(results: dict) -> list[str]:
    """Names of the classification entries of ``results`` (those with a ``summary``)."""
    return [name for name, entry in results.items() if isinstance(entry, dict) and "summary" in entry]


def result_rows(results: dict) -> list[tuple[str, dict]]:
    """``(row label, suite results)``: the evaluated model (``evaluated.label``), then every reference."""
    label = (results.get("evaluated") or {}).get("label") or "model"
    rows = [(label, results)]
    references = (results.get("references") or {}).items()
    return rows + [(entry.get("label") or f"{name} (reference)", entry) for name, entry in references]


def summary_table(results: dict) -> str:
    """One table, one row per embedder (model, references, majority class): mean xsim error % per retrieval set and
    margin, cross/same/all accuracy % per classification set; then what each reference row is."""
    retrieval = ((results.get("retrieval") or {}).get("matrices")) or {}
    columns = [(name, margin) for name, by_margin in retrieval.items() for margin in by_margin]
    suites = classification_suites(results)
    headers = ["", *(retrieval_header(name, margin, retrieval[name][margin]) for name, margin in columns)]
    headers += [f"{suite} {key} acc %" for suite in suites for key in SUMMARY_KEYS]
    rows = []
    for label, entry in result_rows(results):
        matrices = (entry.get("retrieval") or {}).get("matrices") or {}
        cells: list[object] = [mean_xsim((matrices.get(n) or {}).get(m) or {}) for n, m in columns]
        cells = ["-" if v is None else v for v in cells]
        summaries = [(entry.get(suite) or {}).get("summary") or {} for suite in suites]
        cells += [format_mean_std(mean_std(summary.get(key))) for summary in summaries for key in SUMMARY_KEYS]
        rows.append([label, *cells])
    majority = [results[suite].get("majority_class") for suite in suites]
    if any(v is not None for v in majority):
        rows.append([MAJORITY, *("-" for _ in columns), *(v for v in majority for _ in SUMMARY_KEYS)])
    notes = [f"- **{name}**: {entry.get('about', '')}" for name, entry in (results.get("references") or {}).items()]
    if any(v is not None for v in majority):
        notes.append(f"- **{MAJORITY.split(' (')[0]}**: always answers the most frequent label of the training split")
    if not columns and not suites:
        return "No retrieval or classification results."
    return "\n".join([markdown_table(headers, rows), *([""] + notes if notes else [])])


def pair_table(results: dict, name: str, margin: str) -> str:
    """xsim error % of retrieval set ``name`` per ordered language pair (query -> searched), one column per row of
    :func:`summary_table`."""
    rows = result_rows(results)
    matrices = [((entry.get("retrieval") or {}).get("matrices") or {}).get(name, {}).get(margin) for _, entry in rows]
    langs = (matrices[0] or {}).get("langs") or []
    table = []
    for i, query in enumerate(langs):
        for j, target in enumerate(langs):
            if i != j:
                cells = [m["xsim"][i][j] if m else None for m in matrices]
                if all(v is None for v in cells):  # a direction no row searched (to and from English only)
                    continue
                table.append([f"{query} → {target}", *("-" if v is None else float(v) for v in cells)])
    return markdown_table(["pair", *(label for label, _ in rows)], table)


def retrieval_directions(results: dict, name: str) -> str:
    """``all`` or ``english`` (searched to and from English only) for retrieval set ``name`` of ``results``; results
    written before the field existed searched every pair."""
    return ((results.get("retrieval") or {}).get("directions") or {}).get(name, "all")


def english_cells(langs: Sequence[str], matrix, pivot: str = "en") -> tuple[list[str], np.ndarray]:
    """``(languages other than pivot, cells)`` with ``cells[i] = (xx → pivot, pivot → xx)`` xsim errors of an xsim
    matrix (numpy, or a results.json list of lists with null cells: NaN)."""
    values = np.array([[np.nan if v is None else v for v in row] for row in matrix], dtype=float)
    p = list(langs).index(pivot)
    others = [i for i in range(len(langs)) if i != p]
    return [langs[i] for i in others], np.array([[values[i, p], values[p, i]] for i in others]).reshape(-1, 2)


def _english_scores(matrix: dict | None) -> dict[str, tuple[float, float]]:
    """``{lang: (xx → en, en → xx)}`` of a ``{"langs", "xsim"}`` entry, languages with both directions only."""
    if not matrix or "en" not in (matrix.get("langs") or []):
        return {}
    langs, cells = english_cells(matrix["langs"], matrix["xsim"])
    return {lang: (float(a), float(b)) for lang, (a, b) in zip(langs, cells) if np.isfinite(a) and np.isfinite(b)}


def english_summary(results: dict, name: str, margin: str = "absolute", worst: int = WORST) -> str | None:
    """xsim error % of retrieval set ``name`` to and from English over many languages, one row per row of
    :func:`summary_table`: the mean xx → en, en → xx and of both, the ``worst`` weakest languages (mean of both
    directions) and, for every reference row, the languages where the evaluated model's error (mean of both
    directions) is higher than that row's, and higher by more than 1 point. None when the set has no English."""
    entries = [("model", (results.get("evaluated") or {}).get("label") or "model", results)]
    entries += [(key, ref.get("label") or key, ref) for key, ref in (results.get("references") or {}).items()]
    scores = [
        (key, label, _english_scores(((entry.get("retrieval") or {}).get("matrices") or {}).get(name, {}).get(margin)))
        for key, label, entry in entries
    ]
    model = scores[0][2]
    if not model:
        return None
    both = {lang: (a + b) / 2 for lang, (a, b) in model.items()}
    table = []
    for key, label, by_lang in scores:
        if not by_lang:
            continue
        means = {lang: (a + b) / 2 for lang, (a, b) in by_lang.items()}
        weakest = sorted(means, key=lambda lang: (-means[lang], lang))[:worst]
        cells: list[object] = [
            label,
            len(by_lang),
            sum(a for a, _ in by_lang.values()) / len(by_lang),
            sum(b for _, b in by_lang.values()) / len(by_lang),
            sum(means.values()) / len(means),
            ", ".join(f"{lang} {means[lang]:.1f}" for lang in weakest),
        ]
        if key == "model" or key.startswith(CROSS_PREFIX):
            cells += ["-", "-"]
        else:
            shared = [lang for lang in both if lang in means]
            worse = [lang for lang in shared if both[lang] > means[lang]]
            cells += [f"{len(worse)} of {len(shared)}", sum(both[lang] > means[lang] + 1.0 for lang in shared)]
        table.append(cells)
    label = scores[0][1]
    headers = [
        f"{name} ({margin}), to and from English",
        "languages",
        "xx → en mean",
        "en → xx mean",
        "mean",
        f"worst {worst} (mean of both directions)",
        f"languages where {label} is worse",
        "worse by > 1 point",
    ]
    return markdown_table(headers, table)


def english_table(results: dict, name: str, margin: str = "absolute") -> str | None:
    """xsim error % of retrieval set ``name`` between English and each other language, one row per language and one
    ``xx → en / en → xx`` column per row of :func:`summary_table`; None when the set has no English or no other
    language."""
    rows = result_rows(results)
    matrices = [((entry.get("retrieval") or {}).get("matrices") or {}).get(name, {}).get(margin) for _, entry in rows]
    langs = (matrices[0] or {}).get("langs") or []
    if "en" not in langs or len(langs) < 2:
        return None
    en = langs.index("en")

    def cell(matrix: dict | None, i: int) -> str:
        if not matrix:
            return "-"
        return " / ".join(
            "-" if v is None else f"{float(v):.2f}" for v in (matrix["xsim"][i][en], matrix["xsim"][en][i])
        )

    table = [[f"{lang} ↔ en", *(cell(m, i) for m in matrices)] for i, lang in enumerate(langs) if i != en]
    return markdown_table([f"{name} ({margin}): xx → en / en → xx", *(label for label, _ in rows)], table)

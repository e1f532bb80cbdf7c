"""LASER-recipe cleaning of group datasets: empty sides, over-long sentences, length ratio."""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import datasets
import numpy as np
from transformers import PreTrainedTokenizerBase

from hf_tlaser.data.languages import language_columns
from hf_tlaser.data.lengths import LENGTH_PREFIX, token_counts

logger = logging.getLogger(__name__)

REASONS = ("empty", "too_long", "length_ratio", "one_language")
"""Why a sentence was removed / a group dropped (``one_language``: the group never had two sentences)."""


@dataclass
class CleaningConfig:
    """Filters of the LASER recipe. Lengths are whitespace tokens, or tokenizer tokens (no special tokens)."""

    max_tokens: int = 250
    max_length_ratio: float = 1.5
    batch_size: int = 10_000


@dataclass
class CleaningReport:
    """Counts of a cleaning pass. For bitexts ``dropped`` is the number of pairs dropped per reason."""

    total: int
    kept: int
    dropped: dict[str, int] = field(default_factory=dict)
    """groups dropped (fewer than 2 sentences left), by the reason that removed the sentence that broke them"""
    removed_sentences: dict[str, int] = field(default_factory=dict)
    """sentences removed (from dropped and kept groups), by reason"""


def clean_group(lengths: dict[str, int], config: CleaningConfig) -> tuple[set[str], list[str]]:
    """Languages to remove from one group, and the reason of each removal in order."""
    removed: dict[str, str] = {}
    for lang, n in lengths.items():
        if n == 0:
            removed[lang] = "empty"
        elif n > config.max_tokens:
            removed[lang] = "too_long"
    left = {lang: n for lang, n in lengths.items() if lang not in removed}
    # Length ratio: drop the sentence farthest (in log length) from the group's median until every pair passes.
    while len(left) >= 2 and max(left.values()) > config.max_length_ratio * min(left.values()):
        median = float(np.median(list(left.values())))
        worst = max(left, key=lambda lang: (abs(math.log(left[lang] / median)), left[lang]))
        removed[worst] = "length_ratio"
        del left[worst]
    return set(removed), list(removed.values())


def clean_groups(
    dataset: datasets.Dataset,
    config: CleaningConfig | None = None,
    languages: Sequence[str] | None = None,
    tokenizer: PreTrainedTokenizerBase | None = None,
) -> tuple[datasets.Dataset, CleaningReport]:
    """Remove empty / over-long / length-ratio-violating sentences; drop groups left with fewer than 2.

    For a bitext this is the LASER pair filter (the pair is dropped); in a multi-way group only the offending
    sentence goes (the one farthest from the group's median length for the ratio), so that every pair left in a
    group passes all filters. ``languages``: the columns cleaned (default: every language column). Counts are logged
    and returned.
    """
    config = config or CleaningConfig()
    languages = language_columns(dataset.column_names, languages)
    if not len(dataset):  # ``map`` calls ``mark`` on no batch: its columns would be missing
        nothing = CleaningReport(0, 0, dict.fromkeys(REASONS, 0), dict.fromkeys(REASONS[:3], 0))
        return dataset, nothing

    def mark(batch: dict[str, list]) -> dict[str, list]:
        n = len(batch["corpus"])
        lengths: list[dict[str, int]] = [{} for _ in range(n)]
        for lang in languages:
            present = [i for i, text in enumerate(batch[lang]) if text is not None]
            for i, count in zip(present, token_counts([batch[lang][i] for i in present], tokenizer)):
                lengths[i][lang] = count
        out: dict[str, list] = {lang: list(batch[lang]) for lang in languages}
        out.update({f"_removed_{reason}": [0] * n for reason in REASONS[:3]})
        out["_dropped"] = [0] * n  # 0: kept, else 1 + index in REASONS
        out.update({LENGTH_PREFIX + lang: [] for lang in languages})
        for i, group in enumerate(lengths):
            removed, reasons = clean_group(group, config)
            for lang in removed:
                out[lang][i] = None
            for lang in languages:  # encoder-format lengths for the batch samplers (0: absent)
                out[LENGTH_PREFIX + lang].append(0 if lang in removed or lang not in group else group[lang] + 2)
            for reason in reasons:
                out[f"_removed_{reason}"][i] += 1
            if len(group) - len(removed) < 2:
                out["_dropped"][i] = 1 + REASONS.index(reasons[-1] if len(group) >= 2 else "one_language")
        return out

    marked = dataset.map(mark, batched=True, batch_size=config.batch_size, desc="cleaning")
    counts = marked.select_columns([c for c in marked.column_names if c.startswith("_")]).with_format("numpy")[:]
    dropped = np.bincount(np.asarray(counts["_dropped"]), minlength=len(REASONS) + 1)
    report = CleaningReport(
        total=len(dataset),
        kept=int(dropped[0]),
        dropped={reason: int(n) for reason, n in zip(REASONS, dropped[1:])},
        removed_sentences={reason: int(np.asarray(counts[f"_removed_{reason}"]).sum()) for reason in REASONS[:3]},
    )
    logger.info(
        "cleaning (max_tokens=%d, max_length_ratio=%g): kept %d of %d groups; dropped %s; sentences removed %s",
        config.max_tokens,
        config.max_length_ratio,
        report.kept,
        report.total,
        report.dropped,
        report.removed_sentences,
    )
    cleaned = marked.filter(lambda dropped: [d == 0 for d in dropped], input_columns="_dropped", batched=True)
    # internal columns go; the subword lengths stay for sentence_lengths (whitespace counts would mislead it)
    internal = [
        c for c in marked.column_names if c.startswith("_") and (tokenizer is None or not c.startswith(LENGTH_PREFIX))
    ]
    return cleaned.remove_columns(internal), report

"""A resolved :class:`~hf_tlaser.data.sources.Source` as ``datasets``: its parts read into group datasets
(:func:`read_source`) or streamed (:func:`stream_source`), with what was left out or cut logged."""

from __future__ import annotations

import itertools
import logging
from collections.abc import Iterator, Sequence

import datasets

from hf_tlaser.data.readers import group_features
from hf_tlaser.data.sources import CsvPart, HFPart, Part, Source, TsvPart

logger = logging.getLogger(__name__)


def read_source(source: Source, languages: Sequence[str], max_lines: int | None = None) -> list[datasets.Dataset]:
    """The parts of ``source`` with two or more of ``languages`` as group datasets (columns: ``languages``); logs the
    parts left out and the lines ``max_lines`` cuts."""
    out, skipped = [], {}
    lines = cut = capped = 0
    if source.left_out:
        logger.info(
            "%s: left out %d file set(s) with one language: %s",
            source.name,
            len(source.left_out),
            ", ".join(source.left_out),
        )
    for part in source.parts:
        wanted = [lang for lang in part.languages if lang in languages]
        if len(wanted) < 2:
            skipped[part.name] = part.languages
            continue
        out.append(part.dataset(languages, max_lines))
        if max_lines is not None and not isinstance(part, (TsvPart, CsvPart)):
            total = part.total_lines()
            lines, cut, capped = lines + total, cut + max(total - max_lines, 0), capped + (total > max_lines)
    if skipped:
        logger.info(
            "%s: skipped %d file set(s) without two of the languages %s: %s",
            source.name,
            len(skipped),
            list(languages),
            ", ".join(f"{name} ({'/'.join(langs)})" for name, langs in skipped.items()),
        )
    if cut:
        logger.info(
            "%s: --max-lines %d cut %d of %d lines (%d of %d file sets)",
            source.name,
            max_lines,
            cut,
            lines,
            capped,
            len(out),
        )
    return out


def _parts_rows(parts: list[Part], languages: tuple[str, ...], max_lines: int | None) -> Iterator[dict]:
    for part in parts:
        yield from part.rows(languages, max_lines)


def stream_source(source: Source, max_lines: int | None = None) -> list[tuple[datasets.IterableDataset, tuple]]:
    """``source`` as streams: one ``IterableDataset`` per language set of its file parts (each file set a shard, so
    that ranks can split them) and one per Hugging Face dataset, each with its languages."""
    out = []
    file_parts = [part for part in source.parts if not isinstance(part, HFPart)]
    for langs, group in itertools.groupby(sorted(file_parts, key=lambda p: p.languages), key=lambda p: p.languages):
        ds = datasets.IterableDataset.from_generator(
            _parts_rows,
            features=group_features(langs),
            gen_kwargs={"parts": list(group), "languages": langs, "max_lines": max_lines},
        )
        out.append((ds, langs))
    out += [(part.iterable(max_lines), part.languages) for part in source.parts if isinstance(part, HFPart)]
    return out

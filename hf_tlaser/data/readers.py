"""Readers that turn parallel text (aligned files, TSV, CSV, Hugging Face datasets) into group datasets.

Every reader returns a memory-mapped ``datasets.Dataset`` in the canonical *group* schema: one string column per
language (``None`` where the corpus has no such language, ``""`` for an empty line) plus ``corpus``. Files are
streamed line by line through ``Dataset.from_generator``; lines are split on ``"\\n"`` only (U+0085 stays inside a
line) and a trailing ``"\\r"`` is removed.
"""

from __future__ import annotations

import csv
import gzip
import itertools
import logging
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO

import datasets
from datasets.exceptions import DatasetGenerationError

from hf_tlaser.data.languages import LANGUAGES, check_languages, looks_like_language, normalize_language
from hf_tlaser.errors import MissingDataError, UsageError

logger = logging.getLogger(__name__)

PathLike = str | os.PathLike


class DataFormatError(UsageError):
    """A corpus file that cannot be read as aligned text (misaligned, undecodable, malformed or empty)."""


def group_features(languages: Sequence[str] = LANGUAGES) -> datasets.Features:
    """Features of the canonical group schema."""
    columns = {lang: datasets.Value("string") for lang in languages}
    return datasets.Features({**columns, "corpus": datasets.Value("string")})


def open_binary(path: Path) -> IO[bytes]:
    """A plain or gzipped (``.gz``) file, read as bytes."""
    return gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")


def iter_lines(path: PathLike, update: Callable[[bytes], object] | None = None) -> Iterator[str]:
    """Lines of a plain or gzipped UTF-8 file without ``"\\n"``/``"\\r"``; split on ``"\\n"`` only. ``update`` (e.g.
    a ``hashlib`` object's), when given, is called with every line's bytes (decompressed), so that one pass also
    hashes the file.

    Raises DataFormatError naming the file and the 1-based line number on bytes that are not UTF-8.
    """
    path = Path(path)
    with open_binary(path) as handle:
        for lineno, raw in enumerate(handle, start=1):
            if update is not None:
                update(raw)
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as err:
                raise DataFormatError(f"{path}:{lineno}: not valid UTF-8 ({err.reason} at byte {err.start})") from None
            if lineno == 1:
                line = line.removeprefix("\ufeff")
            yield line.rstrip("\r\n")


def count_lines(path: PathLike) -> int:
    """Number of lines of a plain or gzipped file (a last line without ``"\\n"`` counts)."""
    with open_binary(Path(path)) as handle:
        return sum(1 for _ in handle)


def _zip_aligned(streams: Mapping[str, Iterator[str]], names: Mapping[str, str], unit: str) -> Iterator[dict[str, str]]:
    """Zip equally long streams; raise DataFormatError naming every source and its count if they differ."""
    end = object()
    count = 0
    while True:
        items = {key: next(stream, end) for key, stream in streams.items()}
        finished = [key for key, item in items.items() if item is end]
        if len(finished) == len(items):
            return
        if finished:
            counts = {key: count + (0 if key in finished else 1 + sum(1 for _ in streams[key])) for key in streams}
            detail = ", ".join(f"{names[key]} has {counts[key]} {unit}" for key in streams)
            raise DataFormatError(f"misaligned parallel files: {detail}")
        count += 1
        yield items  # type: ignore[misc]


def _group_rows(
    streams: Mapping[str, Iterator[str]],
    names: Mapping[str, str],
    unit: str,
    corpus: str,
    languages: Sequence[str],
    max_items: int | None,
) -> Iterator[dict[str, str | None]]:
    """Canonical rows from aligned streams, counting (and logging) empty lines per language.

    Raises DataFormatError naming a source that is empty or holds only blank lines (nothing to learn from).
    """
    empty = dict.fromkeys(streams, 0)
    count = 0
    for items in itertools.islice(_zip_aligned(streams, names, unit), max_items):
        row: dict[str, str | None] = dict.fromkeys(languages)
        for lang, text in items.items():
            row[lang] = text.strip()
            empty[lang] += not row[lang]
        row["corpus"] = corpus
        count += 1
        yield row
    for lang, n in empty.items():
        if n == count:
            state = f"is empty (0 {unit})" if count == 0 else f"has only blank lines ({count} {unit})"
            raise DataFormatError(f"{names[lang]} {state}: fill it or remove it from the corpus folder")
    for lang, n in empty.items():
        if n:
            logger.info("%s: %d empty %s in %s (dropped by cleaning)", corpus, n, unit, names[lang])


def aligned_rows(
    files: Mapping[str, str], corpus: str, languages: Sequence[str], max_lines: int | None = None
) -> Iterator[dict[str, str | None]]:
    """Group rows of files aligned by line (``{lang: path}``); see ``read_aligned``."""
    streams = {lang: iter_lines(path) for lang, path in files.items()}
    yield from _group_rows(streams, files, "lines", corpus, languages, max_lines)


def _aligned_generator(
    files: dict[str, str], corpus: str, languages: tuple[str, ...], max_lines: int | None, stamp: str
) -> Iterator[dict[str, str | None]]:
    del stamp  # only part of the cache fingerprint
    yield from aligned_rows(files, corpus, languages, max_lines)


def _csv_fields(path: str, columns: tuple[int, ...]) -> Iterator[str]:
    for rowno, fields in enumerate(csv.reader(iter_lines(path)), start=1):
        if len(fields) <= max(columns):
            raise DataFormatError(f"{path}: CSV row {rowno} has {len(fields)} fields, expected > {max(columns)}")
        yield from (fields[c] for c in columns)


def csv_rows(
    files: Mapping[str, str],
    columns: Sequence[int],
    corpus: str,
    languages: Sequence[str],
    max_rows: int | None = None,
) -> Iterator[dict[str, str | None]]:
    """Group rows of CSV files aligned by row; every listed column of a row becomes one group (``read_csv_aligned``)."""
    streams = {lang: _csv_fields(path, tuple(columns)) for lang, path in files.items()}
    max_items = None if max_rows is None else max_rows * len(columns)
    yield from _group_rows(streams, files, "CSV fields", corpus, languages, max_items)


def _csv_generator(
    files: dict[str, str],
    columns: tuple[int, ...],
    corpus: str,
    languages: tuple[str, ...],
    max_rows: int | None,
    stamp: str,
) -> Iterator[dict[str, str | None]]:
    del stamp
    yield from csv_rows(files, columns, corpus, languages, max_rows)


def tsv_rows(
    path: str,
    columns: Mapping[str, int],
    corpus: str,
    languages: Sequence[str],
    *,
    n_fields: int | None = None,
    require_prefix: tuple[int, str] | None = None,
    exclude: tuple[int, tuple[str, ...]] | None = None,
    max_lines: int | None = None,
    skip_lines: int = 0,
) -> Iterator[dict[str, str | None]]:
    """Group rows of a TSV file (``read_tsv``); ``skip_lines`` leading lines (a header) are not data."""
    held_out = frozenset(exclude[1]) if exclude is not None else frozenset()
    lines = itertools.islice(iter_lines(path), skip_lines, None if max_lines is None else skip_lines + max_lines)
    for lineno, line in enumerate(lines, start=1 + skip_lines):
        fields = line.split("\t")
        needed = n_fields if n_fields is not None else max(columns.values()) + 1
        if len(fields) < needed or (n_fields is not None and len(fields) != n_fields):
            raise DataFormatError(f"{path}:{lineno}: {len(fields)} tab-separated fields, expected {needed}")
        if require_prefix is not None and not fields[require_prefix[0]].startswith(require_prefix[1]):
            continue
        if exclude is not None and fields[exclude[0]] in held_out:
            continue
        row: dict[str, str | None] = dict.fromkeys(languages)
        row.update({lang: fields[col].strip() for lang, col in columns.items() if lang in row})
        row["corpus"] = corpus
        yield row


def _tsv_generator(path: str, corpus: str, languages: tuple[str, ...], stamp: str, **options) -> Iterator[dict]:
    del stamp
    yield from tsv_rows(path, corpus=corpus, languages=languages, **options)


def _stamp(paths: Sequence[PathLike]) -> str:
    """Cache-busting fingerprint: a changed file must not reuse a cached Arrow table."""
    parts = []
    for path in paths:
        if not Path(path).is_file():
            raise MissingDataError(f"corpus file {path} does not exist")
        stat = Path(path).stat()
        parts.append(f"{Path(path).resolve()}:{stat.st_size}:{stat.st_mtime_ns}")
    return "|".join(parts)


def _from_generator(generator, gen_kwargs: dict, languages: Sequence[str]) -> datasets.Dataset:
    """``Dataset.from_generator`` that re-raises our DataFormatError instead of datasets' wrapper."""
    try:
        return datasets.Dataset.from_generator(generator, features=group_features(languages), gen_kwargs=gen_kwargs)
    except DatasetGenerationError as err:
        if isinstance(err.__cause__, DataFormatError):
            raise err.__cause__ from None
        raise


def _check_files(files: Mapping[str, PathLike], languages: Sequence[str]) -> dict[str, str]:
    check_languages(files, languages)
    if not files:
        raise ValueError("no files given")
    return {lang: str(path) for lang, path in files.items()}


def read_aligned(
    files: Mapping[str, PathLike], corpus: str, languages: Sequence[str] = LANGUAGES, max_lines: int | None = None
) -> datasets.Dataset:
    """Read files aligned by line (one per language: Moses bitext or multi-way set; plain or .gz).

    Raises DataFormatError if the files have different line counts or contain non-UTF-8 bytes.
    """
    files = _check_files(files, languages)
    kwargs = dict(
        files=files, corpus=corpus, languages=tuple(languages), max_lines=max_lines, stamp=_stamp(list(files.values()))
    )
    return _from_generator(_aligned_generator, kwargs, languages)


def moses_files(prefix: PathLike, langs: Sequence[str]) -> dict[str, Path]:
    """``{lang: prefix.lang}`` (or ``prefix.lang.gz`` where only that exists) for Moses-style file names."""
    files = {}
    for lang in langs:
        path = Path(f"{prefix}.{lang}")
        gz = Path(f"{path}.gz")
        files[lang] = gz if gz.exists() and not path.exists() else path
    return files


def read_moses(
    prefix: PathLike,
    langs: Sequence[str],
    corpus: str,
    languages: Sequence[str] = LANGUAGES,
    max_lines: int | None = None,
) -> datasets.Dataset:
    """Read ``prefix.{lang}`` (e.g. ``europarl.it-en`` + ``("it", "en")``) as aligned files."""
    return read_aligned(moses_files(prefix, langs), corpus, languages, max_lines)


def read_csv_aligned(
    files: Mapping[str, PathLike],
    columns: Sequence[int],
    corpus: str,
    languages: Sequence[str] = LANGUAGES,
    max_rows: int | None = None,
) -> datasets.Dataset:
    """Read CSV files aligned by row (one per language); every listed column of a row becomes one group."""
    files = _check_files(files, languages)
    kwargs = dict(
        files=files,
        columns=tuple(columns),
        corpus=corpus,
        languages=tuple(languages),
        max_rows=max_rows,
        stamp=_stamp(list(files.values())),
    )
    return _from_generator(_csv_generator, kwargs, languages)


def read_tsv(
    path: PathLike,
    columns: Mapping[str, int],
    corpus: str,
    languages: Sequence[str] = LANGUAGES,
    *,
    n_fields: int | None = None,
    require_prefix: tuple[int, str] | None = None,
    exclude: tuple[int, tuple[str, ...]] | None = None,
    max_lines: int | None = None,
    skip_lines: int = 0,
) -> datasets.Dataset:
    """Read a TSV file whose ``columns`` ({lang: 0-based column}) hold translations of each other.

    ``n_fields`` checks the number of fields of every line; ``require_prefix=(column, prefix)`` keeps only lines
    whose ``column`` starts with ``prefix`` (the others are skipped; see ``count_lines`` to report them);
    ``exclude=(column, values)`` skips the lines whose ``column`` is one of ``values`` (a held-out split, e.g. the
    documents of a dev set); ``skip_lines`` leading lines (a header) are not data.
    """
    check_languages(columns, languages)
    kwargs = dict(
        path=str(path),
        columns=dict(columns),
        n_fields=n_fields,
        require_prefix=require_prefix,
        exclude=None if exclude is None else (exclude[0], tuple(sorted(exclude[1]))),
        corpus=corpus,
        languages=tuple(languages),
        max_lines=max_lines,
        skip_lines=skip_lines,
        stamp=_stamp([path]),
    )
    options = {key: value for key, value in kwargs.items() if key != "stamp"}
    if next(tsv_rows(**options), None) is None:  # every row skipped or held out: datasets cannot build an empty table
        return datasets.Dataset.from_dict({name: [] for name in group_features(languages)}, group_features(languages))
    return _from_generator(_tsv_generator, kwargs, languages)


def column_names(ds: datasets.Dataset | datasets.IterableDataset) -> tuple[list[str], datasets.Features | None]:
    """The column names and features of a dataset; a streamed one without declared features is told by its first
    row (a one-row ``Dataset`` infers them)."""
    if ds.column_names is not None:
        return ds.column_names, ds.features
    first = datasets.Dataset.from_list(list(ds.take(1)))
    return first.column_names, first.features


def hf_columns(
    column_names: Sequence[str], features: datasets.Features | None, columns: Mapping[str, str] | None = None
) -> dict[str, str]:
    """``{lang: column}`` of a Hugging Face dataset: ``columns`` as given (a column name, or ``translation.de`` for
    a field of a dict column), else the fields of a WMT-style ``translation`` column, else the columns, that are named
    like a language (``looks_like_language``). DataFormatError when fewer than two languages are found."""
    if columns:
        out = {normalize_language(lang): str(col) for lang, col in columns.items()}
        missing = [col for col in out.values() if col.split(".")[0] not in column_names]
        if missing:
            raise DataFormatError(f"column(s) {missing} not in the dataset's columns {list(column_names)}")
    elif "translation" in column_names and features is not None and "translation" in features:
        fields = features["translation"]
        names = fields.languages if isinstance(fields, datasets.Translation) else list(fields)
        out = {code: f"translation.{name}" for name in names if (code := looks_like_language(name))}
    else:
        out = {code: col for col in column_names if (code := looks_like_language(col))}
    if len(out) < 2:
        raise DataFormatError(
            f"found the languages {sorted(out)} in the columns {list(column_names)}: need two or more; map them with "
            "LANG=COLUMN (e.g. de=translation.de or de=source)"
        )
    return out


def hf_converter(
    columns: Mapping[str, str], corpus: str, languages: Sequence[str]
) -> Callable[[dict[str, list]], dict[str, list]]:
    """A batched ``map`` function from a Hugging Face dataset's columns (``hf_columns``) to the group schema."""

    def convert(batch: dict[str, list]) -> dict[str, list]:
        n = len(next(iter(batch.values())))
        out: dict[str, list] = {lang: [None] * n for lang in languages}
        for lang, path in columns.items():
            if lang not in out:
                continue
            head, _, key = path.partition(".")
            values = batch[head] if not key else [None if item is None else item.get(key) for item in batch[head]]
            out[lang] = [None if text is None else str(text).strip() for text in values]
        out["corpus"] = [corpus] * n
        return out

    return convert


def from_hf_dataset(
    source: str | datasets.Dataset | datasets.IterableDataset,
    corpus: str | None = None,
    *,
    columns: Mapping[str, str] | None = None,
    split: str = "train",
    languages: Sequence[str] | None = None,
    **load_kwargs,
) -> datasets.Dataset | datasets.IterableDataset:
    """Convert a Hugging Face dataset to the group schema (an ``IterableDataset`` stays one).

    ``source`` is a (iterable) dataset, a Hub id (e.g. ``"wmt14"`` with ``name="de-en"``) or a local builder
    (``"json"``/``"csv"`` with ``data_files=...``), loaded with ``datasets.load_dataset(source, split=split,
    **load_kwargs)``. Texts come from ``columns`` ({lang: column or ``translation.<lang>``}), by default from a
    WMT-style ``translation`` column or the columns named like a language (``hf_columns``). ``languages``: the
    group columns (default: the dataset's languages).
    """
    if isinstance(source, str):
        ds = datasets.load_dataset(source, split=split, **load_kwargs)
    else:
        ds = source
    corpus = corpus or (source if isinstance(source, str) else ds.info.dataset_name or "hf-dataset")
    names, features = column_names(ds)
    found = hf_columns(names, features, columns)
    languages = sorted(found) if languages is None else list(languages)
    return ds.map(
        hf_converter(found, corpus, languages),
        batched=True,
        remove_columns=names,
        features=group_features(languages),
    )

"""Corpus specs: one syntax for every kind of parallel text, and the parts (file sets, datasets) they resolve to.

A spec is a registered corpus name (``wmt-newstest-multiway``, see ``hf_tlaser.data.corpora.REGISTRY``) or
``KIND:WHERE[:OPTION]...`` where every OPTION is ``KEY=VALUE`` and a KEY that is a language code maps that language
(see ``SPEC_HELP``). Several specs are joined with commas (``--corpora a,b``) or listed (YAML). The same specs name
training corpora (``hf-tlaser train --corpora``) and retrieval sets (``hf-tlaser evaluate --retrieval-sets``).

Every spec resolves to *parts*: a file set or dataset whose languages are known before its text is read. A part
reads into the group schema (``hf_tlaser.data.readers``) either as a memory-mapped ``datasets.Dataset`` or, for
``--streaming``, as rows of a ``datasets.IterableDataset`` whose shards are the parts.
"""

from __future__ import annotations

import itertools
import logging
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import datasets

from hf_tlaser.data.languages import looks_like_language, normalize_language
from hf_tlaser.data.readers import (
    DataFormatError,
    aligned_rows,
    column_names,
    count_lines,
    csv_rows,
    from_hf_dataset,
    hf_columns,
    iter_lines,
    read_aligned,
    read_csv_aligned,
    read_tsv,
    tsv_rows,
)
from hf_tlaser.errors import MissingDataError, UsageError

logger = logging.getLogger(__name__)

KINDS = ("moses", "files", "tsv", "hf")
SPEC_HELP = (
    "NAME (a registered corpus) | moses:FOLDER (every <name>.<src>-<tgt>.<lang> / <prefix>.<lang> file set in it, "
    "plain or .gz) | moses:PREFIX (PREFIX.<lang> files) | files:de=PATH:en=PATH (files aligned by line) | "
    "tsv:PATH (header line of language codes) or tsv:PATH:de=0:en=1 (0-based columns, no header) | "
    "hf:ID_OR_FOLDER[:config=NAME][:split=train][:revision=REV][:de=COLUMN:en=COLUMN] (a Hugging Face dataset: Hub "
    "id, save_to_disk folder or folder of parquet/jsonl/csv files; columns default to a 'translation' column or "
    "the columns named like languages; COLUMN may be translation.de)"
)
"""Every kind in one paragraph, for ``--help`` (docs/data.md has the long form)."""
HF_OPTIONS = ("config", "split", "revision")


class SpecError(UsageError):
    """A corpus spec that does not parse."""


def split_specs(value: str | Sequence[str]) -> list[str]:
    """``"a,b"`` or ``["a", "b,c"]`` (a YAML list) -> ``["a", "b", "c"]`` (empty items dropped)."""
    items = [value] if isinstance(value, str) else list(value)
    return [spec.strip() for item in items for spec in str(item).split(",") if spec.strip()]


def spec_options(spec: str, items: Sequence[str], allowed: Sequence[str] = ()) -> tuple[dict[str, str], dict[str, str]]:
    """``["config=x", "de=col"]`` -> (named options, ``{lang: value}``); SpecError on anything else."""
    named: dict[str, str] = {}
    langs: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key or not value:
            raise SpecError(f"corpus spec {spec!r}: option {item!r} is not KEY=VALUE")
        if key in allowed:
            named[key] = value
            continue
        try:
            lang = normalize_language(key)
        except ValueError:
            known = ", ".join(allowed) + (" or " if allowed else "") + "a language code"
            raise SpecError(f"corpus spec {spec!r}: unknown option {key!r} (expected {known})") from None
        if lang in langs:
            raise SpecError(f"corpus spec {spec!r}: language {lang!r} given twice")
        langs[lang] = value
    return named, langs


# ---------------------------------------------------------------------------------------------------- parts


@dataclass
class AlignedPart:
    """Files aligned by line, one per language (a Moses bitext or a multi-way set); plain or .gz."""

    name: str
    files: dict[str, str]

    @property
    def languages(self) -> tuple[str, ...]:
        return tuple(sorted(self.files))

    def check(self) -> None:
        for path in self.files.values():
            if not Path(path).is_file():
                raise MissingDataError(f"corpus file {path} does not exist")

    def total_lines(self) -> int:
        return count_lines(next(iter(self.files.values())))  # aligned: one count is enough

    def _wanted(self, languages: Sequence[str]) -> dict[str, str]:
        return {lang: path for lang, path in self.files.items() if lang in languages}

    def dataset(self, languages: Sequence[str], max_lines: int | None) -> datasets.Dataset:
        return read_aligned(self._wanted(languages), self.name, languages, max_lines)

    def rows(self, languages: Sequence[str], max_lines: int | None) -> Iterator[dict]:
        return aligned_rows(self._wanted(languages), self.name, languages, max_lines)


@dataclass
class CsvPart(AlignedPart):
    """CSV files aligned by row, one per language; every listed column of a row is one group."""

    columns: tuple[int, ...] = (0,)

    def total_lines(self) -> int:
        return super().total_lines() * len(self.columns)

    def dataset(self, languages: Sequence[str], max_lines: int | None) -> datasets.Dataset:
        return read_csv_aligned(self._wanted(languages), self.columns, self.name, languages, max_lines)

    def rows(self, languages: Sequence[str], max_lines: int | None) -> Iterator[dict]:
        return csv_rows(self._wanted(languages), self.columns, self.name, languages, max_lines)


@dataclass
class TsvPart:
    """One TSV file whose ``columns`` ({lang: 0-based column}) translate each other; ``skip_lines`` header lines;
    ``require_prefix=(column, prefix)`` keeps only the lines whose column starts with prefix, ``exclude=(column,
    values)`` drops the lines whose column is one of values (a held-out dev split); both are counted in the log."""

    name: str
    path: str
    columns: dict[str, int]
    n_fields: int | None = None
    require_prefix: tuple[int, str] | None = None
    skip_lines: int = 0
    exclude: tuple[int, tuple[str, ...]] | None = None

    @property
    def languages(self) -> tuple[str, ...]:
        return tuple(sorted(self.columns))

    def check(self) -> None:
        if not Path(self.path).is_file():
            raise MissingDataError(f"corpus file {self.path} does not exist")

    def total_lines(self) -> int:
        return count_lines(self.path) - self.skip_lines

    def _options(self, languages: Sequence[str]) -> dict:
        columns = {lang: col for lang, col in self.columns.items() if lang in languages}
        return dict(columns=columns, n_fields=self.n_fields, require_prefix=self.require_prefix, exclude=self.exclude)

    def _skip_counts(self, max_lines: int | None) -> tuple[int, int, int]:
        """``(rows read, rows without the required prefix, rows held out by exclude)`` of the first ``max_lines``."""
        held_out = frozenset(self.exclude[1]) if self.exclude is not None else frozenset()
        end = None if max_lines is None else self.skip_lines + max_lines
        total = prefix = excluded = 0
        for line in itertools.islice(iter_lines(self.path), self.skip_lines, end):
            fields = line.split("\t")
            total += 1
            if self.require_prefix is not None:
                column, start = self.require_prefix
                if column >= len(fields) or not fields[column].startswith(start):
                    prefix += 1
                    continue
            if self.exclude is not None and self.exclude[0] < len(fields) and fields[self.exclude[0]] in held_out:
                excluded += 1
        return total, prefix, excluded

    def dataset(self, languages: Sequence[str], max_lines: int | None) -> datasets.Dataset:
        ds = read_tsv(
            self.path, corpus=self.name, languages=languages, max_lines=max_lines, skip_lines=self.skip_lines,
            **self._options(languages),
        )  # fmt: skip
        if self.require_prefix is not None or self.exclude is not None:
            total, prefix, excluded = self._skip_counts(max_lines)
            if self.require_prefix is not None:
                logger.info(
                    "%s: skipped %d of %d rows whose column %d does not start with %r",
                    self.name,
                    prefix,
                    total,
                    *self.require_prefix,
                )
            if self.exclude is not None:
                logger.info(
                    "%s: held out %d of %d rows whose column %d is one of %d held-out values (a dev split)",
                    self.name,
                    excluded,
                    total,
                    self.exclude[0],
                    len(self.exclude[1]),
                )
        return ds

    def rows(self, languages: Sequence[str], max_lines: int | None) -> Iterator[dict]:
        options = self._options(languages)
        return tsv_rows(
            self.path, corpus=self.name, languages=languages, max_lines=max_lines, skip_lines=self.skip_lines, **options
        )


@dataclass
class HFPart:
    """A Hugging Face dataset: a Hub id, a ``save_to_disk`` folder, or a folder of data files (parquet, jsonl,
    csv...) that ``datasets.load_dataset`` reads without a script. ``columns``: ``{lang: column}`` (default: see
    ``hf_columns``)."""

    name: str
    location: str
    config: str | None = None
    split: str = "train"
    revision: str | None = None
    columns: dict[str, str] = field(default_factory=dict)
    _found: dict[str, str] | None = field(default=None, repr=False)

    @property
    def saved_to_disk(self) -> bool:
        folder = Path(self.location)
        return (folder / "state.json").is_file() or (folder / "dataset_dict.json").is_file()

    def check(self) -> None:
        path = Path(self.location).expanduser()
        looks_local = self.location.startswith((".", "/", "~")) or self.location.count("/") > 1
        if looks_local and not path.exists():
            raise MissingDataError(f"hf:{self.location}: no such folder (give a dataset folder or a Hub dataset id)")

    def load(self, streaming: bool = False) -> datasets.Dataset | datasets.IterableDataset:
        """The dataset's ``split`` (a Hub download goes through ``datasets.load_dataset`` and its cache)."""
        try:
            if self.saved_to_disk:
                ds = datasets.load_from_disk(self.location)
                if isinstance(ds, datasets.DatasetDict):
                    ds = ds[self.split]
                return ds.to_iterable_dataset(num_shards=max(1, len(ds.cache_files))) if streaming else ds
            return datasets.load_dataset(
                self.location, self.config, split=self.split, revision=self.revision, streaming=streaming
            )
        except (OSError, KeyError, ValueError) as err:
            first = (str(err).strip().splitlines() or [type(err).__name__])[0]
            raise MissingDataError(f"hf:{self.location}: cannot load split {self.split!r} ({first})") from None

    def _columns(self, ds: datasets.Dataset | datasets.IterableDataset) -> dict[str, str]:
        if self._found is None:
            try:
                self._found = hf_columns(*column_names(ds), self.columns)
            except DataFormatError as err:
                raise DataFormatError(f"hf:{self.location}: {err}") from None
        return self._found

    @property
    def languages(self) -> tuple[str, ...]:
        if self._found is None:
            self._columns(self.load(streaming=not self.saved_to_disk))  # a peek, no full download
        return tuple(sorted(self._found))

    def total_lines(self) -> int:
        return len(self.load())

    def dataset(self, languages: Sequence[str], max_lines: int | None) -> datasets.Dataset:
        ds = self.load()
        if max_lines is not None and max_lines < len(ds):
            ds = ds.select(range(max_lines))
        return from_hf_dataset(ds, self.name, columns=self._columns(ds), languages=languages)

    def iterable(self, max_lines: int | None) -> datasets.IterableDataset:
        """The split as a stream in the group schema of the dataset's own languages."""
        ds = self.load(streaming=True)
        if max_lines is not None:
            ds = ds.take(max_lines)
        return from_hf_dataset(ds, self.name, columns=self._columns(ds), languages=self.languages)


Part = AlignedPart | CsvPart | TsvPart | HFPart


def moses_parts(name: str, where: str | os.PathLike) -> tuple[list[AlignedPart], list[str]]:
    """The file sets of a Moses-style folder (``<prefix>.<lang>[.gz]``, sets of two or more languages) or of one
    prefix (``where.<lang>``); also the prefixes left out for having one language."""
    path = Path(where).expanduser()
    files = (
        sorted(p for p in path.iterdir() if p.is_file())
        if path.is_dir()
        else sorted(path.parent.glob(path.name + ".*"))
    )
    sets: dict[str, dict[str, str]] = {}
    for file in files:
        stem = file.name[: -len(".gz")] if file.name.endswith(".gz") else file.name
        prefix, dot, ext = stem.rpartition(".")
        if not dot or (not path.is_dir() and prefix != path.name):
            continue
        lang = looks_like_language(ext)
        if lang is None:  # e.g. "session", "txt", "md"
            continue
        plain = sets.setdefault(prefix, {})
        if lang not in plain or not file.name.endswith(".gz"):  # plain text wins over .gz
            plain[lang] = str(file)
    parts = [AlignedPart(f"{name}/{prefix}", files) for prefix, files in sets.items() if len(files) >= 2]
    return parts, [prefix for prefix, files in sets.items() if len(files) < 2]


def _tsv_part(spec: str, name: str, where: str, columns: Mapping[str, str]) -> TsvPart:
    """``tsv:PATH`` (header of language codes), ``tsv:PATH:de=0:en=1`` (indices) or ``tsv:PATH:de=src:en=tgt``
    (header names)."""
    path = Path(where).expanduser()
    if not path.is_file():
        raise MissingDataError(f"corpus spec {spec!r}: file {path} does not exist")
    if columns and all(value.isdigit() for value in columns.values()):
        return TsvPart(name, str(path), {lang: int(value) for lang, value in columns.items()})
    header = next(iter_lines(path), "").split("\t")
    if columns:
        missing = [value for value in columns.values() if value not in header]
        if missing:
            raise SpecError(f"corpus spec {spec!r}: column(s) {missing} not in the header of {path} ({header})")
        found = {lang: header.index(value) for lang, value in columns.items()}
    else:
        found = {code: i for i, col in enumerate(header) if (code := looks_like_language(col))}
    if len(found) < 2:
        raise SpecError(
            f"corpus spec {spec!r}: the first line of {path} names {len(found)} language column(s) ({header}); "
            "give a header of language codes or map the columns with :de=0:en=1"
        )
    return TsvPart(name, str(path), found, skip_lines=1)


@dataclass
class Source:
    """One corpus of ``--corpora``: its spec, the label of its rows (``corpus`` column) and its parts."""

    spec: str
    name: str
    parts: list[Part]
    evaluation: bool = False
    left_out: list[str] = field(default_factory=list)
    """file-set prefixes of a Moses folder with a single language (logged when read)"""

    @property
    def languages(self) -> list[str]:
        return sorted({lang for part in self.parts for lang in part.languages})

    def check(self) -> None:
        """MissingDataError naming the first file or folder that does not exist (nothing is read)."""
        for part in self.parts:
            part.check()


def parse_spec(spec: str) -> Source:
    """A ``KIND:WHERE[:KEY=VALUE]...`` spec (not a registered name) -> its Source; SpecError when it does not parse,
    MissingDataError when a file or folder it names does not exist."""
    kind, sep, rest = spec.partition(":")
    if not sep or kind not in KINDS:
        raise SpecError(
            f"corpus spec {spec!r}: not a registered corpus and not KIND:WHERE with KIND one of {', '.join(KINDS)}"
        )
    where, *items = rest.split(":")
    if kind == "files":
        named, langs = spec_options(spec, [where, *items] if where else items)
        if len(langs) < 2:
            raise SpecError(f"corpus spec {spec!r}: files: needs two or more LANG=PATH options (e.g. de=a.de:en=a.en)")
        name = "files:" + "+".join(Path(path).name for path in langs.values())
        return Source(spec, name, [AlignedPart(name, {lang: str(Path(p).expanduser()) for lang, p in langs.items()})])
    if not where:
        raise SpecError(f"corpus spec {spec!r}: nothing after {kind}: (expected a path or a dataset id)")
    named, langs = spec_options(spec, items, HF_OPTIONS if kind == "hf" else ())
    if kind == "moses":
        name = f"moses:{Path(where).name}"
        path = Path(where).expanduser()
        if not path.is_dir() and not any(path.parent.glob(path.name + ".*")):
            raise MissingDataError(f"corpus spec {spec!r}: no folder {path} and no {path}.<lang> files")
        parts, left_out = moses_parts(name, path)
        if not parts:
            raise DataFormatError(
                f"corpus spec {spec!r}: no file set with two languages in {path} (expected <prefix>.<lang> files, "
                "e.g. train.de-en.de and train.de-en.en)"
            )
        return Source(spec, name, list(parts), left_out=left_out)
    if kind == "tsv":
        name = f"tsv:{Path(where).name}"
        return Source(spec, name, [_tsv_part(spec, name, where, langs)])
    if len(langs) == 1:
        raise SpecError(f"corpus spec {spec!r}: map two or more languages (de=COLUMN:en=COLUMN), or none")
    part = HFPart(f"hf:{where}", where, named.get("config"), named.get("split", "train"), named.get("revision"), langs)
    part.check()
    return Source(spec, part.name, [part])

"""The user's own datasets, named by a corpus spec (``files:``, ``moses:``, ``tsv:``, ``hf:``, as ``hf-tlaser train
--corpora``), read as retrieval sets (:func:`read_retrieval_spec`) or labelled classification splits
(:func:`read_classification_spec`)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

import datasets

from hf_tlaser.data.corpora import resolve_corpora
from hf_tlaser.data.languages import looks_like_language, normalize_language
from hf_tlaser.data.sources import SpecError, spec_options
from hf_tlaser.errors import MissingDataError, UsageError

from .readers import ClassificationData, LabeledSplit

logger = logging.getLogger(__name__)


def is_spec(name: str) -> bool:
    """Whether a set name is a user spec (``KIND:WHERE...``) rather than a registered set."""
    return ":" in name


def read_retrieval_spec(spec: str, langs: Sequence[str] | None = None) -> dict[str, dict[str, list[str]]]:
    """Aligned text named by a corpus spec (``files:``, ``moses:``, ``tsv:``, ``hf:``, as ``hf-tlaser train
    --corpora``) as retrieval sets: ``{set name: {lang: lines}}``, one set per file set, over its languages (those of
    ``langs`` when given). Rows with an empty side are left out (logged)."""
    (source,) = resolve_corpora([spec])
    out = {}
    for part in source.parts:
        wanted = [lang for lang in part.languages if langs is None or lang in langs]
        if len(wanted) < 2:
            continue
        ds = part.dataset(wanted, None)
        columns = {lang: ds[lang] for lang in wanted}
        keep = [i for i in range(len(ds)) if all(columns[lang][i] for lang in wanted)]
        name = spec if len(source.parts) == 1 else f"{spec}/{part.name.rsplit('/', 1)[-1]}"
        if len(keep) < len(ds):
            logger.info("%s: left out %d of %d rows with an empty side", name, len(ds) - len(keep), len(ds))
        out[name] = {lang: [columns[lang][i] for i in keep] for lang in wanted}
    if not out:
        raise UsageError(f"retrieval set {spec}: no file set with two of the languages {list(langs or [])}")
    return out


_SPLIT_NAMES = {"train": ("train",), "dev": ("dev", "validation", "valid", "val"), "test": ("test",)}


def _labeled_splits(data: datasets.DatasetDict, text: str, label: str, where: str) -> dict[str, LabeledSplit]:
    out = {}
    for split, names in _SPLIT_NAMES.items():
        found = next((name for name in names if name in data), None)
        if found is None:
            raise UsageError(f"{where}: no {split} split (has {', '.join(data)}); the protocol needs train, dev, test")
        part = data[found]
        missing = [col for col in (text, label) if col not in part.column_names]
        if missing:
            raise UsageError(f"{where}: no column(s) {missing} in its {found} split ({part.column_names})")
        out[split] = LabeledSplit([str(t) for t in part[text]], [str(x) for x in part[label]])
    return out


def read_classification_spec(spec: str, langs: Sequence[str] | None = None) -> ClassificationData:
    """A user classification dataset: ``hf:WHERE[:config=NAME][:text=COL][:label=COL][:language=COL]`` with train,
    dev (or validation) and test splits and text/label columns (default ``text``/``label``). WHERE is a folder with
    one dataset folder per language code (``de/``, ``en/`` ... each with train/dev/test files), or one dataset (a
    folder of data files, a ``save_to_disk`` folder or a Hub id) whose ``language`` column (default ``language``)
    tells the language of each row. ``langs`` (optional) keeps those languages."""
    kind, _, rest = spec.partition(":")
    where, *items = rest.split(":")
    if kind != "hf" or not where:
        raise SpecError(f"classification set {spec!r}: expected hf:FOLDER_OR_ID[:text=COL][:label=COL][:language=COL]")
    named, by_lang = spec_options(spec, items, ("config", "text", "label", "language"))
    if by_lang:
        raise SpecError(f"classification set {spec!r}: options are config, text, label and language")
    text, label = named.get("text", "text"), named.get("label", "label")
    folder = Path(where).expanduser()
    per_language = []
    if folder.is_dir():
        per_language = sorted(p for p in folder.iterdir() if p.is_dir() and looks_like_language(p.name))
    data: ClassificationData = {}
    try:
        for sub in per_language:
            loaded = datasets.load_dataset(str(sub))
            data[normalize_language(sub.name)] = _labeled_splits(loaded, text, label, f"{spec} ({sub.name})")
        if not per_language:
            saved = (folder / "dataset_dict.json").is_file()
            loaded = datasets.load_from_disk(where) if saved else datasets.load_dataset(where, named.get("config"))
            column = named.get("language", "language")
            columns = next(iter(loaded.values())).column_names
            if column not in columns:
                raise UsageError(
                    f"classification set {spec}: no language column {column!r} ({columns}) and no per-language folders"
                )
            for lang in sorted({str(v) for split in loaded.values() for v in split[column]}):
                subset = datasets.DatasetDict(
                    {
                        name: split.filter(lambda v, lang=lang: str(v) == lang, input_columns=column)
                        for name, split in loaded.items()
                    }
                )
                data[normalize_language(lang)] = _labeled_splits(subset, text, label, f"{spec} ({lang})")
    except UsageError:
        raise
    except (OSError, ValueError) as err:
        first_line = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise MissingDataError(f"classification set {spec}: cannot load it ({first_line})") from None
    if langs is not None:
        data = {lang: splits for lang, splits in data.items() if lang in langs}
    if not data:
        raise UsageError(f"classification set {spec}: none of the languages {list(langs or [])}")
    return data

"""Readers for the evaluation corpora in the shared data folder (ISO 639-1 language codes in the API).

Classification readers return ``{lang: {"train"|"dev"|"test": LabeledSplit}}``; multi-way retrieval readers
return ``{lang: [sentences]}`` aligned line by line. Lines come from :func:`hf_tlaser.data.readers.iter_lines`
(split on ``"\\n"`` only, trailing ``"\\r"`` of CRLF files removed).
"""

from __future__ import annotations

import csv
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from hf_tlaser.data.paths import get_data_dir
from hf_tlaser.data.readers import iter_lines
from hf_tlaser.errors import MissingDataError, UsageError

LANGS = ("en", "de", "es", "fr", "it")
SPLITS = ("train", "dev", "test")
MLDOC_LABELS = {"C": "CCAT", "E": "ECAT", "G": "GCAT", "M": "MCAT"}
UMSAB_LABELS = ("negative", "neutral", "positive")
_LANG_NAMES = {"en": "english", "de": "german", "es": "spanish", "fr": "french", "it": "italian"}
_FLORES = {"en": "eng_Latn", "de": "deu_Latn", "es": "spa_Latn", "fr": "fra_Latn", "it": "ita_Latn"}


@dataclass
class LabeledSplit:
    """Texts with their string labels."""

    texts: list[str]
    labels: list[str]

    def __len__(self) -> int:
        return len(self.texts)


ClassificationData = dict[str, dict[str, LabeledSplit]]


def _lines(path: str | os.PathLike) -> list[str]:
    return list(iter_lines(path))


def corpus_folder(data_dir: str | os.PathLike | None, name: str) -> Path:
    """``<data_dir>/<name>``; raises ``MissingDataError`` naming the folder when it does not exist."""
    folder = get_data_dir(data_dir) / name
    if not folder.is_dir():
        raise MissingDataError(f"corpus folder {folder} does not exist; pass the --data-dir that holds {name}/")
    return folder


def _check_langs(langs: Sequence[str] | None, available: Sequence[str], dataset: str) -> list[str]:
    langs = list(available if langs is None else langs)
    unknown = [lang for lang in langs if lang not in available]
    if unknown:
        raise ValueError(f"unknown language(s) {unknown} for {dataset}; available: {', '.join(available)}")
    return langs


def _aligned(data: dict[str, list[str]], dataset: str) -> dict[str, list[str]]:
    sizes = {lang: len(lines) for lang, lines in data.items()}
    if len(set(sizes.values())) > 1:
        raise ValueError(f"{dataset} files are not aligned: {sizes}")
    return data


# --- classification ---------------------------------------------------------------------------------------

# LASER's tasks/mldoc/mldoc.sh removes text "not useful for classification" with sed before embedding:
# ' Co .' -> ' Co.', ' Inc . ' -> ' Inc. ', and the Reuters copyright line '(c) Reuters Limited 199x.'.
_LASER_MLDOC_CLEANUP = (
    (re.compile(r" Co \."), " Co."),
    (re.compile(r" Inc \. "), " Inc. "),
    (re.compile(r"\([cC]\) Reuters Limited 199[0-9]\."), ""),
)


def laser_mldoc_cleanup(text: str) -> str:
    """An MLDoc document as LASER's ``mldoc.sh`` feeds it to the encoder (its three ``sed`` substitutions)."""
    for pattern, replacement in _LASER_MLDOC_CLEANUP:
        text = pattern.sub(replacement, text)
    return text


def read_mldoc_file(path: str | os.PathLike) -> LabeledSplit:
    """One MLDoc file, lines ``label<TAB>text``; labels C/E/G/M or CCAT/ECAT/GCAT/MCAT (mapped to CCAT...)."""
    texts, labels = [], []
    for n, line in enumerate(iter_lines(path), 1):
        label, sep, text = line.partition("\t")
        label = MLDOC_LABELS.get(label, label)
        if not sep or label not in MLDOC_LABELS.values():
            raise UsageError(f"{path}:{n}: expected 'label<TAB>text' with label in C/E/G/M or CCAT/ECAT/GCAT/MCAT")
        texts.append(text)
        labels.append(label)
    return LabeledSplit(texts, labels)


def read_mldoc(
    folder: str | os.PathLike, langs: Sequence[str] | None = LANGS, train_size: int = 1000
) -> ClassificationData:
    """MLDoc as produced by facebookresearch/MLDoc: ``{english,...}.train.{train_size}``, ``.dev``, ``.test``.

    The texts need RCV1/RCV2 access (Reuters, NIST agreement); they are not in the shared data folder.
    """
    folder = Path(folder)
    langs = _check_langs(langs, list(_LANG_NAMES), "mldoc")
    files = {"train": "{}.train." + str(train_size), "dev": "{}.dev", "test": "{}.test"}
    return {
        lang: {split: read_mldoc_file(folder / name.format(_LANG_NAMES[lang])) for split, name in files.items()}
        for lang in langs
    }


def read_sib200(data_dir: str | os.PathLike | None = None, langs: Sequence[str] | None = LANGS) -> ClassificationData:
    """SIB-200 topic classification (7 labels), ``sib200/{eng,...}_Latn/{train,dev,test}.tsv`` (701/99/204)."""
    root = corpus_folder(data_dir, "sib200")
    langs = _check_langs(langs, list(_FLORES), "sib200")
    data: ClassificationData = {}
    for lang in langs:
        data[lang] = {}
        for split in SPLITS:
            with open(root / _FLORES[lang] / f"{split}.tsv", encoding="utf-8", newline="") as f:
                rows = list(csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
            data[lang][split] = LabeledSplit([r["text"] for r in rows], [r["category"] for r in rows])
    return data


_UNICODE_ESCAPE = re.compile(r"\\u([0-9a-fA-F]{4})")


def read_umsab(
    data_dir: str | os.PathLike | None = None, langs: Sequence[str] | None = LANGS, unescape: bool = True
) -> ClassificationData:
    """UMSAB / XLM-T tweet sentiment (negative/neutral/positive), 1,839/324/870 per language, not parallel.

    ``unescape`` turns the literal ``\\uXXXX`` sequences of some English tweets into characters.
    """
    root = corpus_folder(data_dir, "umsab-xlmt-sentiment")
    langs = _check_langs(langs, list(_LANG_NAMES), "umsab")
    data: ClassificationData = {}
    for lang in langs:
        data[lang] = {}
        for split, name in zip(SPLITS, ("train", "val", "test")):
            folder = root / _LANG_NAMES[lang]
            texts = _lines(folder / f"{name}_text.txt")
            if unescape:
                texts = [_UNICODE_ESCAPE.sub(lambda m: chr(int(m.group(1), 16)), t) for t in texts]
            labels = [UMSAB_LABELS[int(v)] for v in _lines(folder / f"{name}_labels.txt")]
            if len(texts) != len(labels):
                raise ValueError(f"{folder}/{name}: {len(texts)} texts but {len(labels)} labels")
            data[lang][split] = LabeledSplit(texts, labels)
    return data


# --- multi-way retrieval ----------------------------------------------------------------------------------


def read_ntrex128(
    data_dir: str | os.PathLike | None = None, langs: Sequence[str] | None = LANGS
) -> dict[str, list[str]]:
    """NTREX-128 (1,997 news sentences, CRLF files)."""
    root = corpus_folder(data_dir, "ntrex128")
    langs = _check_langs(langs, LANGS, "ntrex128")
    names = {lang: f"newstest2019-ref.{_FLORES[lang][:3]}.txt" for lang in LANGS}
    names["en"] = "newstest2019-src.eng.txt"
    return _aligned({lang: _lines(root / names[lang]) for lang in langs}, "ntrex128")


def read_flores_devtest(
    data_dir: str | os.PathLike | None = None, langs: Sequence[str] | None = LANGS
) -> dict[str, list[str]]:
    """FLORES-200 devtest (1,012 sentences). Overlaps SIB-200."""
    root = corpus_folder(data_dir, "flores-devtest")
    langs = _check_langs(langs, LANGS, "flores-devtest")
    return _aligned({lang: _lines(root / f"{_FLORES[lang]}.devtest") for lang in langs}, "flores-devtest")


def read_tico19(
    data_dir: str | os.PathLike | None = None, langs: Sequence[str] | None = ("en", "es", "fr")
) -> dict[str, list[str]]:
    """TICO-19 test (2,100 COVID-domain sentences; en, es (Latin-American), fr only)."""
    root = corpus_folder(data_dir, "tico19-test")
    langs = _check_langs(langs, ("en", "es", "fr"), "tico19-test")
    return _aligned({lang: _lines(root / f"tico19-test.{lang}") for lang in langs}, "tico19-test")


def read_ud_pud(data_dir: str | os.PathLike | None = None, langs: Sequence[str] | None = LANGS) -> dict[str, list[str]]:
    """UD PUD treebank sentences (1,000, news + Wikipedia)."""
    root = corpus_folder(data_dir, "ud-pud")
    langs = _check_langs(langs, LANGS, "ud-pud")
    return _aligned({lang: _lines(root / f"pud.{lang}.txt") for lang in langs}, "ud-pud")


RETRIEVAL_SETS: dict[str, tuple[Callable[..., dict[str, list[str]]], tuple[str, ...]]] = {
    "ntrex128": (read_ntrex128, LANGS),
    "flores-devtest": (read_flores_devtest, LANGS),
    "tico19-test": (read_tico19, ("en", "es", "fr")),
    "ud-pud": (read_ud_pud, LANGS),
}
"""Multi-way sets: name -> (reader, available languages)."""

CLASSIFICATION_SETS: dict[str, Callable[..., ClassificationData]] = {"sib200": read_sib200, "umsab": read_umsab}
"""Classification sets in the shared data folder (MLDoc needs its own folder: :func:`read_mldoc`)."""

"""Readers for the evaluation corpora in the shared data folder (ISO 639-1 language codes in the API; FLORES-200
codes such as ``swh_Latn`` too for flores-devtest).

Classification readers return ``{lang: {"train"|"dev"|"test": LabeledSplit}}``; multi-way retrieval readers
return ``{lang: [sentences]}`` aligned line by line, the en-X pair set ``xed-dev`` a :class:`PivotPairs`. Lines
come from :func:`hf_tlaser.data.readers.iter_lines` (split on ``"\\n"`` only, trailing ``"\\r"`` of CRLF files
removed).
"""

from __future__ import annotations

import csv
import hashlib
import logging
import os
import re
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from hf_tlaser.data.corpora import (
    FLORES_CODES,
    NTREX_FILES,
    NTREX_LANGUAGES,
    flores_file,
    is_flores_language,
)
from hf_tlaser.data.languages import ISO639_3
from hf_tlaser.data.paths import get_data_dir
from hf_tlaser.data.readers import iter_lines
from hf_tlaser.data.xed import XED_DEV_FILMS, XED_DEV_LANGUAGES, XED_DEV_TARGET, XED_SUBTITLES_MORE_LANGUAGES, xed_pairs
from hf_tlaser.errors import MissingDataError, UsageError

logger = logging.getLogger(__name__)

LANGS = ("en", "de", "es", "fr", "it")
"""The paper's five: the evaluation languages of a model whose training languages are not recorded."""
SPLITS = ("train", "dev", "test")
MLDOC_LABELS = {"C": "CCAT", "E": "ECAT", "G": "GCAT", "M": "MCAT"}
UMSAB_LABELS = ("negative", "neutral", "positive")
_LANG_NAMES = {"en": "english", "de": "german", "es": "spanish", "fr": "french", "it": "italian"}
_FLORES = {lang: f"{ISO639_3[lang]}_Latn" for lang in LANGS}


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
    """NTREX-128 (1,997 news sentences, CRLF files), 10 languages: ``NTREX_LANGUAGES``."""
    root = corpus_folder(data_dir, "ntrex128")
    langs = _check_langs(langs, NTREX_LANGUAGES, "ntrex128")
    return _aligned({lang: _lines(root / NTREX_FILES[lang]) for lang in langs}, "ntrex128")


def read_flores_devtest(
    data_dir: str | os.PathLike | None = None, langs: Sequence[str] | None = LANGS
) -> dict[str, list[str]]:
    """FLORES-200 devtest (1,012 sentences, 204 language varieties). Overlaps SIB-200.

    ``langs``: ISO 639-1 codes with a FLORES-200 variety (``FLORES_CODES``: the ten as before, ``sw``, ``ar``...) or
    FLORES-200 codes (``swh_Latn``), as keys of the result (None: the paper's five). MissingDataError naming a code
    without a file."""
    root = corpus_folder(data_dir, "flores-devtest")
    langs = list(LANGS if langs is None else langs)
    unknown = [lang for lang in langs if not is_flores_language(lang)]
    if unknown:
        raise ValueError(
            f"unknown language(s) {unknown} for flores-devtest; available: ISO 639-1 codes with a FLORES-200 variety "
            f"({', '.join(FLORES_CODES)}) or FLORES-200 codes (e.g. swh_Latn)"
        )
    read: dict[Path, list[str]] = {}  # a file named by two codes (sw, swh_Latn) is read once
    for lang in langs:
        path = flores_file(root, lang)
        if path not in read:
            read[path] = _lines(path)
    return _aligned({lang: read[flores_file(root, lang)] for lang in langs}, "flores-devtest")


FLORES_SAMPLE = slice(0, 1000, 5)
"""The fixed sample of ``flores-sample``: every fifth FLORES-200 devtest sentence, 200 per language."""


def read_flores_sample(
    data_dir: str | os.PathLike | None = None, langs: Sequence[str] | None = LANGS
) -> dict[str, list[str]]:
    """FLORES-200 devtest's fixed sample (:data:`FLORES_SAMPLE`: 200 sentences, the same in every language): a model
    measured over e5's ~90 FLORES languages in a fifth of the full set's time."""
    return {lang: lines[FLORES_SAMPLE] for lang, lines in read_flores_devtest(data_dir, langs).items()}


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


# --- en-X pair sets ---------------------------------------------------------------------------------------------


@dataclass
class PivotPairs:
    """A retrieval set of pairs with one pivot language, not aligned across languages: ``pairs[lang] = (pivot side,
    lang side)``, row i of one translating row i of the other (texts when read, embeddings once embedded). Scored to
    and from the pivot only."""

    pivot: str
    pairs: dict[str, tuple]

    @property
    def languages(self) -> list[str]:
        """The pivot, then the paired languages."""
        return [self.pivot, *self.pairs]

    def sizes(self) -> dict[str, int]:
        """Pairs per language."""
        return {lang: len(side) if isinstance(side, list) else side.shape[0] for lang, (side, _) in self.pairs.items()}


def _dedup_key(text: str) -> str:
    return " ".join(unicodedata.normalize("NFKC", text).casefold().split())


def _pair_rank(lang: str, english: str, other: str) -> bytes:
    return hashlib.blake2b(f"{lang}\t{english}\t{other}".encode(), digest_size=8).digest()


def xed_dev_pairs(
    lang: str, data_dir: str | os.PathLike | None = None, size: int = XED_DEV_TARGET
) -> tuple[list[str], list[str]]:
    """``(english, lang)`` sentences of the conversational dev split of ``lang`` (one of ``XED_DEV_LANGUAGES``, or
    another language of ``xed-subtitles-more``: its rows of the same films).

    The rows of the dev films (``XED_DEV_FILMS``) in file order; a pair with an empty side, with both sides equal, or
    whose English or ``lang`` side repeats a kept pair's (NFKC, case-folded, spaces collapsed) is dropped, so every
    target of the retrieval is unique; of the rest, the ``size`` pairs of lowest BLAKE2b(lang, english, lang text)
    are kept, in file order (every pair where fewer are left)."""
    films = set(XED_DEV_FILMS)
    seen_en: set[str] = set()
    seen_x: set[str] = set()
    kept = []
    for english, other, doc in xed_pairs(lang, data_dir):
        if doc not in films or not english or not other:
            continue
        key_en, key_x = _dedup_key(english), _dedup_key(other)
        if key_en == key_x or key_en in seen_en or key_x in seen_x:
            continue
        seen_en.add(key_en)
        seen_x.add(key_x)
        kept.append((english, other))
    if len(kept) > size:
        chosen = set(sorted(range(len(kept)), key=lambda i: _pair_rank(lang, *kept[i]))[:size])
        kept = [pair for i, pair in enumerate(kept) if i in chosen]
    return [english for english, _ in kept], [other for _, other in kept]


XED_DEV_MIN_PAIRS = 100
"""Fewest dev pairs a language beyond ``XED_DEV_LANGUAGES`` needs to be scored on xed-dev (fewer: left out, logged)."""


def read_xed_dev(
    data_dir: str | os.PathLike | None = None, langs: Sequence[str] | None = ("en", *XED_DEV_LANGUAGES)
) -> PivotPairs:
    """The conversational dev set: en-X OpenSubtitles pairs of the dev films (never in the ``xed``/``xed-more``/
    ``xed-more-all`` training corpora), at most 500 per language (``xed_dev_pairs``), for the languages of ``langs``
    (English must be one of them). Beyond ``XED_DEV_LANGUAGES`` (for which the films were chosen), a language of
    ``xed-subtitles-more`` is scored on the rows its file has of those films, when they give at least
    ``XED_DEV_MIN_PAIRS`` pairs; one with fewer is left out, with a log line."""
    langs = list(("en", *XED_DEV_LANGUAGES) if langs is None else langs)
    if "en" not in langs:
        raise ValueError("xed-dev pairs every language with English: include en")
    unknown = [lang for lang in langs if lang not in ("en", *XED_SUBTITLES_MORE_LANGUAGES, *XED_DEV_LANGUAGES)]
    if unknown:
        raise ValueError(f"unknown language(s) {unknown} for xed-dev; available: en and those of xed-subtitles-more")
    pairs = {}
    for lang in langs:
        if lang != "en":
            english, other = xed_dev_pairs(lang, data_dir)
            if lang in XED_DEV_LANGUAGES or len(english) >= XED_DEV_MIN_PAIRS:
                pairs[lang] = (english, other)
            else:
                logger.info(
                    "xed-dev: %s left out (%d pairs of the dev films, fewer than %d)",
                    lang,
                    len(english),
                    XED_DEV_MIN_PAIRS,
                )
    return PivotPairs("en", pairs)


RETRIEVAL_SETS: dict[str, tuple[Callable[..., dict[str, list[str]] | PivotPairs], tuple[str, ...]]] = {
    "ntrex128": (read_ntrex128, NTREX_LANGUAGES),
    "flores-devtest": (read_flores_devtest, NTREX_LANGUAGES),
    "flores-sample": (read_flores_sample, NTREX_LANGUAGES),
    "tico19-test": (read_tico19, ("en", "es", "fr")),
    "ud-pud": (read_ud_pud, LANGS),
    "xed-dev": (read_xed_dev, ("en", *XED_DEV_LANGUAGES)),
}
"""Registered sets: name -> (reader, languages). Multi-way sets return ``{lang: lines}`` aligned across languages;
``xed-dev`` returns en-X pairs (:class:`PivotPairs`). The sets of ``OPEN_SETS`` take other languages too."""
OPEN_SETS: dict[str, tuple[Callable[[str], bool], str]] = {
    "flores-devtest": (is_flores_language, "every FLORES-200 language"),
    "flores-sample": (is_flores_language, "every FLORES-200 language"),
    "xed-dev": (XED_SUBTITLES_MORE_LANGUAGES.__contains__, "the languages of xed-subtitles-more"),
}
"""Sets that take languages beyond their listed ones: name -> (whether a code can name one of its files, which)."""
SAMPLE_SETS = ("flores-sample",)
"""Registered sets that are a sample of another (``flores-sample`` of ``flores-devtest``): evaluated when named, never
by default beside the whole set."""
PIVOT_SETS: dict[str, str] = {"xed-dev": "en"}
"""Sets of pairs with one pivot language (:class:`PivotPairs`): name -> the pivot, without which they are not read."""
LANGUAGE_LISTS: dict[str, tuple[str, ...]] = {
    "e5": tuple(
        "af am ar as az be bg bn br bs ca cs cy da de el en eo es et eu fa fi fr fy ga gd gl gu ha he hi hr hu hy "
        "id is it ja jv ka kk km kn ko ku ky la lo lt lv mg mk ml mn mr ms my ne nl no om or pa pl ps pt ro ru sa "
        "sd si sk sl so sq sr su sv sw ta te th tl tr ug uk ur uz vi xh yi zh".split()
    ),
    "ten": ("en", "de", "es", "fr", "it", "cs", "ru", "zh", "tr", "fi"),
}
"""Named language lists of ``hf-tlaser evaluate --languages``: ``e5`` = the 93 languages of multilingual-e5-small's
model card (the ``language:`` list of intfloat/multilingual-e5-small's README, XLM-R's languages; the copy in the data
dir does not repeat it), of which br, fy and la have no FLORES-200 file; ``ten`` = the ten of NTREX-128."""


def set_languages(name: str, langs: Sequence[str]) -> list[str]:
    """The languages of ``langs`` that registered set ``name`` has (in the order of ``langs``); none when it has
    fewer than two, or (a pivot set) lacks the pivot."""
    listed = RETRIEVAL_SETS[name][1]
    accepts = OPEN_SETS[name][0] if name in OPEN_SETS else None
    here = [lang for lang in langs if lang in listed or (accepts is not None and accepts(lang))]
    pivot = PIVOT_SETS.get(name)
    if len(here) < 2 or (pivot is not None and pivot not in here):
        return []
    return here


CLASSIFICATION_SETS: dict[str, Callable[..., ClassificationData]] = {"sib200": read_sib200, "umsab": read_umsab}
"""Classification sets in the shared data folder (MLDoc needs its own folder: :func:`read_mldoc`)."""
CLASSIFICATION_LANGS: dict[str, tuple[str, ...]] = {"sib200": LANGS, "umsab": LANGS, "mldoc": LANGS}
"""Languages of each registered classification set."""

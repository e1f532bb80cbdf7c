"""XED's subtitle pairs (``xed/`` and ``xed-subtitles-more/`` in the data dir): their languages, their files as
corpus parts (:func:`xed_parts`, :func:`xed_more_parts`), their rows with the film they come from, and the
conversational dev split carved from them by film (:func:`select_xed_dev_films`)."""

from __future__ import annotations

import hashlib
import itertools
import logging
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

from hf_tlaser.data.languages import is_language
from hf_tlaser.data.paths import get_data_dir
from hf_tlaser.data.readers import DataFormatError, iter_lines
from hf_tlaser.data.sources import Part, TsvPart

logger = logging.getLogger(__name__)


XED_LANGUAGES: tuple[str, ...] = ("de", "es", "fr", "it")
"""Languages of ``xed/subtitle-pairs`` (en-X rows)."""
XED_MORE_LANGUAGES: tuple[str, ...] = ("cs", "fi", "ru", "tr", "zh")
"""Languages of the ``xed-more`` training corpus: those of ``xed-subtitles-more`` where the other corpora here are
news only (the ten-language curriculum's cs, fi, ru, tr, zh); ``xed-more-all`` reads every language of the folder."""
XED_SUBTITLES_MORE_LANGUAGES: tuple[str, ...] = tuple(
    "ar bg bs cs da el et fi he hr hu id is mk ms nl no pl pt ro ru sk sl sr sv th tr vi zh zh_Hant".split()
)
"""The languages of the ``xed-subtitles-more`` files (``en-X.tsv``; ``xed_more_languages`` reads them from the folder,
``tests/test_xed_dev.py`` checks the two agree)."""
XED_DEV_LANGUAGES: tuple[str, ...] = (*XED_LANGUAGES, "fi", "tr", "cs", "zh", "ru")
"""The languages of the ``xed-dev`` retrieval set (each paired with English)."""
XED_DEV_TARGET = 500
"""Pairs per language the dev films are chosen to give (``select_xed_dev_films``) and the dev set keeps at most."""
XED_DEV_MAX_SHARE = 0.4
"""No film joins the dev split if it would hold out more than this share of a dev language's pairs."""
XED_DEV_FILMS: tuple[str, ...] = (
    "en/1990/100502/4704610.xml.gz",
    "en/1990/100507/4049754.xml.gz",
    "en/1990/100469/6936851.xml.gz",
    "en/1990/100224/4171489.xml.gz",
    "en/1965/59037/5735869.xml.gz",
    "en/1990/100405/4706696.xml.gz",
    "en/1990/100440/5203875.xml.gz",
)
"""The English subtitle documents (one per film) of the conversational dev split, in the order the rule took them:
``select_xed_dev_films(xed_film_rows())`` on the data of 2026-11-27 (``tests/test_xed_dev.py`` checks that the rule
still gives them). Frozen, so that a film added to the data later never moves a film between train and dev: rows of
these films are never read by the ``xed``, ``xed-more`` and ``xed-more-all`` training corpora, and ``xed-dev`` reads
only them."""


def film_hash(en_doc: str) -> bytes:
    """Stable 8-byte BLAKE2b digest of an English subtitle document path (the order the dev split walks films in;
    never Python's salted ``hash``)."""
    return hashlib.blake2b(en_doc.encode("utf-8"), digest_size=8).digest()


def xed_pair_files(folder_xed: Path, folder_more: Path, languages: Sequence[str]) -> dict[str, TsvPart]:
    """The en-X pair file of each of ``languages`` (``xed/subtitle-pairs/pairs-X.txt`` for de/es/fr/it, else
    ``xed-subtitles-more/en-X.tsv``) as a TsvPart over the English, X and English-document columns, every film kept
    (the dev split is not applied: ``xed_pairs`` and the film counts read through it)."""
    parts = {}
    for lang in languages:
        if lang in XED_LANGUAGES:
            path = folder_xed / "subtitle-pairs" / f"pairs-{lang}.txt"
            parts[lang] = TsvPart(
                f"xed/pairs-{lang}", str(path), {"en": 4, lang: 5}, n_fields=6, require_prefix=(0, "en/")
            )
        else:
            path = folder_more / f"en-{lang}.tsv"
            parts[lang] = TsvPart(
                f"xed-subtitles-more/en-{lang}", str(path), {"en": 0, lang: 1}, n_fields=4, skip_lines=1
            )
    return parts


def doc_column(part: TsvPart) -> int:
    return 0 if part.require_prefix is not None else 2


def xed_pairs(lang: str, data_dir: str | os.PathLike | None = None) -> Iterator[tuple[str, str, str]]:
    """``(english, lang, english document)`` of every en-X row of the OpenSubtitles pairs of ``lang`` (one of
    ``XED_LANGUAGES`` or a language of ``xed-subtitles-more``), in file order, every film included."""
    root = get_data_dir(data_dir)
    part = xed_pair_files(root / "xed", root / "xed-subtitles-more", [lang])[lang]
    part.check()
    doc = doc_column(part)
    for lineno, line in enumerate(itertools.islice(iter_lines(part.path), part.skip_lines, None), 1 + part.skip_lines):
        fields = line.split("\t")
        if len(fields) != part.n_fields:
            raise DataFormatError(f"{part.path}:{lineno}: {len(fields)} tab-separated fields, expected {part.n_fields}")
        if part.require_prefix is None or fields[0].startswith("en/"):
            yield fields[part.columns["en"]].strip(), fields[part.columns[lang]].strip(), fields[doc]


def xed_film_rows(
    data_dir: str | os.PathLike | None = None, languages: Sequence[str] = XED_DEV_LANGUAGES
) -> dict[str, dict[str, int]]:
    """``{english document: {language: en-X rows}}`` over the pair files of ``languages`` (what the dev split rule
    weighs)."""
    rows: dict[str, dict[str, int]] = {}
    for lang in languages:
        for _, _, doc in xed_pairs(lang, data_dir):
            counts = rows.setdefault(doc, {})
            counts[lang] = counts.get(lang, 0) + 1
    return rows


def select_xed_dev_films(
    film_rows: Mapping[str, Mapping[str, int]],
    languages: Sequence[str] = XED_DEV_LANGUAGES,
    target: int = XED_DEV_TARGET,
    max_share: float = XED_DEV_MAX_SHARE,
) -> tuple[str, ...]:
    """The dev films: walking the films in ``film_hash`` order, a film is taken when one of ``languages`` it has rows
    in still has fewer than ``target`` dev rows, unless taking it would hold out more than ``max_share`` of some
    language's rows. Deterministic (BLAKE2b of the path) and global: a film is dev in every language or in none."""
    totals: dict[str, int] = {}
    for counts in film_rows.values():
        for lang, n in counts.items():
            totals[lang] = totals.get(lang, 0) + n
    dev: dict[str, int] = dict.fromkeys(languages, 0)
    chosen = []
    for film in sorted(film_rows, key=film_hash):
        counts = {lang: n for lang, n in film_rows[film].items() if lang in dev and n}
        if not any(dev[lang] < target for lang in counts):
            continue
        if any(dev[lang] + n > max_share * totals[lang] for lang, n in counts.items()):
            continue
        chosen.append(film)
        for lang, n in counts.items():
            dev[lang] += n
    return tuple(chosen)


def xed_parts(folder: Path) -> list[Part]:
    """en-X subtitle pairs; rows whose first column is not an ``en/`` file are Danish-X and are skipped, and so are
    the rows of the dev films (``XED_DEV_FILMS``)."""
    return [
        TsvPart(
            f"xed/pairs-{lang}",
            str(folder / "subtitle-pairs" / f"pairs-{lang}.txt"),
            {"en": 4, lang: 5},
            n_fields=6,
            require_prefix=(0, "en/"),
            exclude=(0, XED_DEV_FILMS),
        )
        for lang in XED_LANGUAGES
    ]


def xed_more_languages(folder: Path) -> list[str]:
    """The languages of ``xed-subtitles-more`` (files ``en-X.tsv``) whose name is a language code here (``pt_BR`` is
    not: its region is not a script)."""
    langs = []
    for path in sorted(folder.glob("en-*.tsv")):
        name = path.stem.removeprefix("en-")
        if is_language(name):
            langs.append(name)
        else:
            logger.debug("xed-subtitles-more: %s left out (%r is not a language code)", path.name, name)
    return langs


def xed_more_parts(languages: Sequence[str] | None) -> Callable[[Path], list[Part]]:
    """en-X subtitle pairs of ``xed-subtitles-more`` (header ``en X en_doc X_doc``) of ``languages`` (None: every
    file named by a language code), the rows of the dev films (``XED_DEV_FILMS``) left out."""

    def parts(folder: Path) -> list[Part]:
        langs = xed_more_languages(folder) if languages is None else languages
        return [
            TsvPart(
                f"xed-more/en-{lang}",
                str(folder / f"en-{lang}.tsv"),
                {"en": 0, lang: 1},
                n_fields=4,
                skip_lines=1,
                exclude=(2, XED_DEV_FILMS),
            )
            for lang in langs
        ]

    return parts

"""Language codes as data: normalisation, language pairs, and the paper's curriculum pattern for any languages.

A language code is an ISO 639-1 (``de``) or ISO 639-3 (``deu``) code with an optional ISO 15924 script
(``zh_Hans``, ``zho_Hans``). ``normalize_language`` writes it one way: the code in lower case, the script in title
case, joined by ``_`` (``ZH-hans`` and ``zh_HANS`` -> ``zh_Hans``); the ``-`` stays free to join the two sides of a
pair (``zh_Hans-en``; ``zh-Hans-en`` is read the same way). Codes are identifiers: ``de`` and ``deu`` are not unified,
so use one form for a language in every corpus and flag.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

LANGUAGES: tuple[str, ...] = ("de", "en", "es", "fr", "it")
"""The paper's five languages (the model configs' default ``languages``)."""

DEFAULT_PIVOTS: tuple[str, ...] = ("en", "es")
"""The paper's pivot (target) languages: every source language is translated into each of them."""

ISO639_3: dict[str, str] = {
    "cs": "ces",
    "de": "deu",
    "en": "eng",
    "es": "spa",
    "fi": "fin",
    "fr": "fra",
    "it": "ita",
    "ru": "rus",
    "tr": "tur",
    "zh": "zho",
}
"""ISO 639-3 codes of the languages in the shared corpora (the file names of NTREX-128, FLORES and SIB-200)."""

ISO639_1: frozenset[str] = frozenset(
    (
        "aa ab ae af ak am an ar as av ay az ba be bg bh bi bm bn bo br bs ca ce ch co cr cs cu cv cy da de "
        "dv dz ee el en eo es et eu fa ff fi fj fo fr fy ga gd gl gn gu gv ha he hi ho hr ht hu hy hz ia id "
        "ie ig ii ik io is it iu ja jv ka kg ki kj kk kl km kn ko kr ks ku kv kw ky la lb lg li ln lo lt lu "
        "lv mg mh mi mk ml mn mr ms mt my na nb nd ne ng nl nn no nr nv ny oc oj om or os pa pi pl ps pt qu "
        "rm rn ro ru rw sa sc sd se sg si sk sl sm sn so sq sr ss st su sv sw ta te tg th ti tk tl tn to tr "
        "ts tt tw ty ug uk ur uz ve vi vo wa wo xh yi yo za zh zu"
    ).split()
)
"""The 184 two-letter ISO 639-1 codes (``looks_like_language``)."""

Pair = tuple[str, str]

_CODE = re.compile(r"^(?P<lang>[a-z]{2,3})(?:_(?P<script>[A-Z][a-z]{3}))?$")


def normalize_language(code: str) -> str:
    """``code`` written the one way (see the module docstring); ValueError naming it when it is not a code."""
    text = str(code).strip()
    lang, _, script = text.replace("-", "_").partition("_")
    normalized = lang.lower() + (f"_{script.title()}" if script else "")
    if not _CODE.match(normalized):
        raise ValueError(
            f"bad language code {code!r}: expected an ISO 639-1/3 code with an optional script, e.g. de, deu, "
            "zh_Hans or zho_Hans"
        )
    return normalized


def looks_like_language(name: str) -> str | None:
    """The code a file extension, column or field name stands for when nobody mapped it, else None: an ISO 639-1
    code (``de``) or any code with a script (``zho_Hans``, ``zh-Hans``). Other three-letter names (``src``,
    ``tgt``, ``doc``) are not taken for ISO 639-3 codes: map those explicitly (``deu=src``)."""
    try:
        code = normalize_language(name)
    except ValueError:
        return None
    return code if "_" in code or code in ISO639_1 else None


def is_language(code: str) -> bool:
    """Whether ``code`` is a language code already written the one way (e.g. a column name of a group dataset)."""
    return bool(_CODE.match(str(code)))


def language_columns(columns: Sequence[str], languages: Sequence[str] | None = None) -> list[str]:
    """The language columns of a group dataset with ``columns``: those of ``languages`` it has (default: all)."""
    return [lang for lang in (columns if languages is None else languages) if lang in columns and is_language(lang)]


def parse_languages(spec: str | Iterable[str], what: str = "language") -> list[str]:
    """``"en,es"`` (or a list) -> normalised codes in order; ValueError on a bad or repeated code or none."""
    items = [item for item in (spec.split(",") if isinstance(spec, str) else spec) if str(item).strip()]
    out: list[str] = []
    for item in items:
        lang = normalize_language(item)
        if lang in out:
            raise ValueError(f"{what} {lang!r} given twice")
        out.append(lang)
    if not out:
        raise ValueError(f"no {what} given")
    return out


def check_languages(langs: Iterable[str], known: Sequence[str] = LANGUAGES, what: str = "language") -> None:
    """Raise ValueError naming the first code of ``langs`` that is not in ``known``, listing the known ones."""
    for lang in langs:
        if lang not in known:
            raise ValueError(f"unknown {what} {lang!r}; known languages: {', '.join(known)}")


def _pair_sides(item: str) -> list[str]:
    """``"zh-Hans-en"`` -> ``["zh_Hans", "en"]``: a 4-letter part is the script of the code before it."""
    sides: list[str] = []
    for part in item.strip().split("-"):
        if len(part) == 4 and part.isalpha() and sides and "_" not in sides[-1]:
            sides[-1] += f"_{part}"
        else:
            sides.append(part)
    return sides


def parse_pairs(spec: str | Iterable[str | Pair], languages: Sequence[str] | None = None) -> list[Pair]:
    """Parse ``"de-en,en-es"`` (or a list of ``"de-en"`` / ``("de", "en")``) into normalised (src, tgt) pairs.

    ``languages`` (optional) are the codes the pairs may use (ValueError naming the first other one).
    """
    items = spec.split(",") if isinstance(spec, str) else list(spec)
    pairs: list[Pair] = []
    for item in items:
        parts = _pair_sides(item) if isinstance(item, str) else list(item)
        if len(parts) != 2:
            raise ValueError(f"bad language pair {item!r}: expected 'src-tgt' with two different languages")
        try:
            pair = (normalize_language(parts[0]), normalize_language(parts[1]))
        except ValueError as err:
            raise ValueError(f"bad language pair {item!r}: {err}") from None
        if pair[0] == pair[1]:
            raise ValueError(f"bad language pair {item!r}: expected 'src-tgt' with two different languages")
        if languages is not None:
            check_languages(pair, languages, what=f"language in pair {item!r}")
        if pair in pairs:
            raise ValueError(f"language pair {item!r} given twice")
        pairs.append(pair)
    if not pairs:
        raise ValueError("no language pairs given")
    return pairs


def curriculum_pairs(languages: Iterable[str], pivots: Sequence[str] = DEFAULT_PIVOTS) -> list[Pair]:
    """The paper's pattern for any languages: every other language toward every pivot, the pivots toward each other,
    sorted by (source, target). ``languages`` = the paper's five and the default pivots give its 8 pairs."""
    langs = sorted(set(languages) | set(pivots))
    return [(a, b) for a in langs for b in pivots if a != b]


DEFAULT_PAIRS: tuple[Pair, ...] = tuple(curriculum_pairs(LANGUAGES, DEFAULT_PIVOTS))
"""The paper's 8 translation directions: de-en, de-es, en-es, es-en, fr-en, fr-es, it-en, it-es."""

BILINGUAL_PAIRS: tuple[Pair, ...] = (("en", "es"), ("es", "en"))


def decoder_languages(pairs: Sequence[Pair], with_sources: bool = False) -> list[str]:
    """The languages a model's language table indexes: the targets of ``pairs`` (and their sources where the model
    also embeds the source language), sorted."""
    return sorted({b for _, b in pairs} | ({a for a, _ in pairs} if with_sources else set()))

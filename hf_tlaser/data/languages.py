"""Known languages and curriculum language pairs."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

LANGUAGES: tuple[str, ...] = ("de", "en", "es", "fr", "it")
"""Language codes of the canonical group schema (and the model config's default ``languages`` order)."""

Pair = tuple[str, str]

DEFAULT_PAIRS: tuple[Pair, ...] = (
    ("de", "en"),
    ("de", "es"),
    ("en", "es"),
    ("es", "en"),
    ("fr", "en"),
    ("fr", "es"),
    ("it", "en"),
    ("it", "es"),
)
"""The paper's 8 translation directions."""

BILINGUAL_PAIRS: tuple[Pair, ...] = (("en", "es"), ("es", "en"))


def check_languages(langs: Iterable[str], known: Sequence[str] = LANGUAGES, what: str = "language") -> None:
    """Raise ValueError naming the first unknown language code and listing the known ones."""
    for lang in langs:
        if lang not in known:
            raise ValueError(f"unknown {what} {lang!r}; known languages: {', '.join(known)}")


def parse_pairs(spec: str | Iterable[str | Pair], languages: Sequence[str] = LANGUAGES) -> list[Pair]:
    """Parse ``"de-en,en-es"`` (or a list of ``"de-en"`` / ``("de", "en")``) into validated (src, tgt) pairs."""
    items = spec.split(",") if isinstance(spec, str) else list(spec)
    pairs: list[Pair] = []
    for item in items:
        parts = item.strip().split("-") if isinstance(item, str) else list(item)
        if len(parts) != 2 or parts[0] == parts[1]:
            raise ValueError(f"bad language pair {item!r}: expected 'src-tgt' with two different languages")
        check_languages(parts, languages, what=f"language in pair {item!r}")
        pair = (parts[0], parts[1])
        if pair in pairs:
            raise ValueError(f"language pair {item!r} given twice")
        pairs.append(pair)
    if not pairs:
        raise ValueError("no language pairs given")
    return pairs

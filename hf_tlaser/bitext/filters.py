"""Filters of mined pairs (stopes', WikiMatrix's and CCMatrix's): masks over the pairs and their texts, no I/O.

Each filter is a pure function returning a boolean mask (``True``: keep) over pairs given as their scores and their
two texts, so that ``hf-tlaser mine`` and a staged pipeline's filter step call the same code:

* :func:`score_mask`: an upper score cap (stopes' 1.25 for the ratio margin: a pair scoring higher is mostly a copy
  of its source or boilerplate);
* :func:`length_mask` and :func:`ratio_mask`: limits on each side's length and on the longer side's length over the
  shorter's, in characters (Unicode code points of the line as read);
* :func:`lid_mask`: the language of each side as py3langid identifies it (:func:`load_identifier`, ISO 639-1 codes
  where one exists: ``zh`` for Chinese in either script; :func:`lid_language` maps a user's code to its label);
* :func:`dedup_mask`: one pair per normalised text (:func:`normalise`: case folded, punctuation, symbols and digits
  removed, whitespace collapsed) of each side and of each pair, the best-scored one kept.

:func:`apply_filters` runs the filters a :class:`Filters` turns on in that order (LID, the slow one, on what the
cheap ones keep; deduplication last, so the pair it keeps for a text is one the other filters keep), each counting
the pairs it removes of those the earlier ones kept. :func:`read_thresholds` reads the per-language-pair threshold
file of ``hf-tlaser mine --thresholds``.
"""

from __future__ import annotations

import json
import logging
import math
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import yaml

from hf_tlaser.data.corpora import flores_file
from hf_tlaser.data.languages import ISO639_1, ISO639_3, normalize_language, parse_pairs
from hf_tlaser.errors import UsageError

from .select import DEFAULT_THRESHOLDS, greedy_one_to_one
from .texts import text_keys

logger = logging.getLogger(__name__)

LID_EXTRA = "pip install 'hf_tlaser[mining]'"
"""How to install the language identifier (py3langid) of :func:`load_identifier`."""

FILTERS = ("max_score", "length", "length_ratio", "lid", "dedup")
"""The filters in the order :func:`apply_filters` runs them (the keys of its counts)."""
PER_PAIR = FILTERS[:-1]
"""The filters that judge each pair alone (all but ``dedup``, which compares pairs): a staged pipeline runs them on
shards of the pairs in parallel."""

DEFAULT_PAIR = "default"
"""The key of a threshold file's value for the language pairs it does not name."""

_DROPPED = "PSN"  # Unicode major categories normalise() removes: punctuation, symbols, numbers


def normalise(text: str) -> str:
    """``text`` case folded, without punctuation, symbols and digits (Unicode categories P*, S*, N*), whitespace
    collapsed to single spaces: the key two near-duplicates share (``"Hello, World 2!"`` -> ``"hello world"``)."""
    kept = "".join(char for char in text.casefold() if unicodedata.category(char)[0] not in _DROPPED)
    return " ".join(kept.split())


def score_mask(scores: np.ndarray, maximum: float) -> np.ndarray:
    """Pairs scoring at most ``maximum``."""
    return np.asarray(scores) <= maximum


def scaled_lengths(src_texts: Sequence[str], tgt_texts: Sequence[str], factors: tuple[float, float]) -> np.ndarray:
    """[pairs, 2]: each side's characters times its language's length factor (:func:`flores_length_factors`)."""
    counts = np.array([[len(s), len(t)] for s, t in zip(src_texts, tgt_texts)], dtype=np.float64).reshape(-1, 2)
    return counts * np.asarray(factors, dtype=np.float64)


def length_mask(
    src_texts: Sequence[str],
    tgt_texts: Sequence[str],
    min_chars: int = 0,
    max_chars: int | None = None,
    factors: tuple[float, float] = (1.0, 1.0),
) -> np.ndarray:
    """Pairs whose two texts both have ``min_chars`` to ``max_chars`` characters (``None``: no upper limit), each
    side's count times its length factor."""
    lengths = scaled_lengths(src_texts, tgt_texts, factors)
    keep = (lengths >= min_chars).all(axis=1)
    if max_chars is not None:
        keep &= (lengths <= max_chars).all(axis=1)
    return keep


def ratio_mask(
    src_texts: Sequence[str], tgt_texts: Sequence[str], max_ratio: float, factors: tuple[float, float] = (1.0, 1.0)
) -> np.ndarray:
    """Pairs whose longer text has at most ``max_ratio`` times the characters of the shorter (at least 1), each side's
    count times its length factor."""
    scaled = scaled_lengths(src_texts, tgt_texts, factors)
    return scaled.max(axis=1) <= max_ratio * np.maximum(scaled.min(axis=1), 1)


def flores_length_factors(folder: Path, languages: tuple[str, str]) -> tuple[float, float]:
    """stopes' length factors (its ``compute_length_factors.py``) of two languages: English's characters over the
    language's in FLORES-200 devtest (``folder``: the same 1,012 sentences in each), so that a scaled length counts
    English-equivalent characters (zh 3.0, ja 2.3, de 0.86). ``MissingDataError`` naming a language without a file."""
    english = len(flores_file(folder, "en").read_text(encoding="utf-8"))
    src, tgt = (english / len(flores_file(folder, lang).read_text(encoding="utf-8")) for lang in languages)
    return src, tgt


def lid_mask(
    src_texts: Sequence[str],
    tgt_texts: Sequence[str],
    src_lang: str,
    tgt_lang: str,
    identify: Callable[[str], str],
) -> np.ndarray:
    """Pairs whose source ``identify``-es as ``src_lang`` and whose target as ``tgt_lang`` (labels of the
    identifier, e.g. :func:`load_identifier`'s)."""
    return np.array(
        [identify(s) == src_lang and identify(t) == tgt_lang for s, t in zip(src_texts, tgt_texts)], dtype=bool
    )


def normalised_keys(src_texts: Sequence[str], tgt_texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """The keys (:func:`~hf_tlaser.bitext.texts.text_keys`) of the normalised texts (:func:`normalise`) of both
    sides: what :func:`dedup_mask` compares, and what a staged pipeline's filter slices keep for its dedup stage."""
    return text_keys(map(normalise, src_texts)), text_keys(map(normalise, tgt_texts))


def dedup_keys_mask(
    scores: np.ndarray, src_keys: np.ndarray, tgt_keys: np.ndarray, per_side: bool = True
) -> np.ndarray:
    """:func:`dedup_mask` of the pairs' normalised keys (:func:`normalised_keys`), by decreasing score (ties: the
    first): with ``per_side``, a pair is kept when neither its source key nor its target key belongs to a pair kept
    before (each sentence used once, :func:`~hf_tlaser.bitext.select.greedy_one_to_one`, over the keys' ranks;
    which implies one pair per (source, target) key); without, the first pair of each (source, target) key."""
    order = np.argsort(-np.asarray(scores), kind="stable")
    src = np.unique(src_keys[order], return_inverse=True)[1].astype(np.int64)
    tgt = np.unique(tgt_keys[order], return_inverse=True)[1].astype(np.int64)
    if per_side:
        taken = greedy_one_to_one(src, tgt)
    else:
        taken = np.unique(src * (int(tgt.max(initial=0)) + 1) + tgt, return_index=True)[1]
    keep = np.zeros(len(order), dtype=bool)
    keep[order[taken]] = True
    return keep


def dedup_mask(
    scores: np.ndarray, src_texts: Sequence[str], tgt_texts: Sequence[str], per_side: bool = True
) -> np.ndarray:
    """The best-scored pair of each normalised (source, target) pair (:func:`normalise`), and with ``per_side`` of
    each normalised source text and each normalised target text (which implies the former); ties: the first."""
    return dedup_keys_mask(scores, *normalised_keys(src_texts, tgt_texts), per_side=per_side)


def load_identifier() -> tuple[Callable[[str], str], list[str]]:
    """py3langid's identifier (imported here, lazily: an optional dependency) as ``text -> label``, and its labels;
    ``UsageError`` naming the extra when py3langid is not installed."""
    try:
        from py3langid.langid import MODEL_FILE, LanguageIdentifier
    except ImportError:
        raise UsageError(f"--lid needs py3langid, which is not installed: {LID_EXTRA}") from None
    identifier = LanguageIdentifier.from_model_file(MODEL_FILE)
    return (lambda text: identifier.classify(text)[0]), identifier.labels


def lid_language(code: str, labels: Sequence[str], argument: str) -> str:
    """The identifier's label for the language ``code``: its ISO 639 code without script (``zh_Hans`` -> ``zh``),
    the ISO 639-1 code of the ten shared corpora's ISO 639-3 codes (``deu`` -> ``de``); ``UsageError`` when the
    identifier has no such label."""
    lang = normalize_language(code).partition("_")[0]
    lang = {three: one for one, three in ISO639_3.items()}.get(lang, lang)
    if lang not in labels:
        raise UsageError(
            f"{argument} {code}: py3langid does not identify {lang!r}; it knows {len(labels)} languages by ISO 639-1 "
            "code (ISO 639-3 where none exists), e.g. de, en, zh (either script), yue"
        )
    return lang


def read_thresholds(path: Path) -> dict[tuple[str, str] | str, float]:
    """A threshold file: a JSON or YAML (``.yaml``/``.yml``) mapping of language pairs (``"de-en"``, parsed as
    :func:`~hf_tlaser.data.languages.parse_pairs` does) and optionally ``default`` to finite scores; ``UsageError``
    on an unreadable file, a key that is no language pair (or names a two-letter code that is not ISO 639-1), the
    same pair twice, or a value that is not a finite number."""
    argument = f"--thresholds {path}"
    try:
        text = path.read_text(encoding="utf-8")
        values = yaml.safe_load(text) if path.suffix in (".yaml", ".yml") else json.loads(text)
    except (OSError, UnicodeDecodeError, yaml.YAMLError, json.JSONDecodeError) as err:
        raise UsageError(f"{argument}: unreadable ({' '.join(str(err).split())})") from None
    if not isinstance(values, dict) or not values:
        raise UsageError(f'{argument}: expected a mapping of language pairs to thresholds, e.g. {{"de-en": 1.06}}')
    thresholds: dict[tuple[str, str] | str, float] = {}
    for key, value in values.items():
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise UsageError(f"{argument}: {key}: {value!r} is not a finite number")
        if key == DEFAULT_PAIR:
            thresholds[DEFAULT_PAIR] = float(value)
            continue
        try:
            (pair,) = parse_pairs([str(key)])
        except ValueError as err:
            raise UsageError(f"{argument}: {err}; keys are language pairs such as de-en, or {DEFAULT_PAIR}") from None
        unknown = [lang for lang in pair if len(lang) == 2 and lang not in ISO639_1]
        if unknown:
            raise UsageError(f"{argument}: {key}: unknown language {unknown[0]!r} (not an ISO 639-1 code)")
        if pair in thresholds:
            raise UsageError(f"{argument}: the language pair {key} is given twice")
        thresholds[pair] = float(value)
    return thresholds


def pair_threshold(thresholds: dict[tuple[str, str] | str, float], src: str, tgt: str, path: Path) -> float:
    """The threshold of the language pair ``src-tgt``: its own entry, else the reverse pair's (a pair mines the same
    both ways), else ``default``; ``UsageError`` listing the file's pairs when it has none of them."""
    pair = normalize_language(src), normalize_language(tgt)
    for key in (pair, pair[::-1], DEFAULT_PAIR):
        if key in thresholds:
            return thresholds[key]
    named = ", ".join("-".join(key) for key in thresholds if key != DEFAULT_PAIR)
    raise UsageError(
        f"--thresholds {path}: no threshold for {pair[0]}-{pair[1]} (the file has {named}); add it or a "
        f"{DEFAULT_PAIR!r} entry"
    )


def check_languages(languages: tuple[str | None, str | None], flag: str) -> tuple[str, str]:
    """``--src-lang``/``--tgt-lang`` as given, which ``flag`` needs; ``UsageError`` when one is missing or is no
    language code (:func:`~hf_tlaser.data.languages.normalize_language`)."""
    if None in languages:
        raise UsageError(f"{flag}: give the languages of both sides, --src-lang and --tgt-lang (e.g. de and en)")
    for side, code in zip(("--src-lang", "--tgt-lang"), languages):
        try:
            normalize_language(code)
        except ValueError as err:
            raise UsageError(f"{side} {code}: {err}") from None
    return languages


def run_threshold(
    threshold: float | None, thresholds: Path | None, margin: str, languages: tuple[str | None, str | None]
) -> tuple[float, str]:
    """The threshold of a run and where it comes from: ``--thresholds``' value for the language pair
    (:func:`read_thresholds`, :func:`pair_threshold`), else ``--threshold``, else the margin's default; ``UsageError``
    when both are given or the file is bad or lacks the pair."""
    if thresholds is None:
        if threshold is None:
            return DEFAULT_THRESHOLDS[margin], f"the {margin} margin's default"
        return threshold, "--threshold"
    if threshold is not None:
        raise UsageError("give --threshold or --thresholds, not both")
    src, tgt = check_languages(languages, "--thresholds")
    return pair_threshold(read_thresholds(thresholds), src, tgt, thresholds), f"--thresholds {thresholds} ({src}-{tgt})"


@dataclass(frozen=True)
class Filters:
    """Which filters :func:`apply_filters` runs (``None``/``False``: off) and their limits."""

    max_score: float | None = None
    min_chars: int = 0
    max_chars: int | None = None
    max_length_ratio: float | None = None
    languages: tuple[str, str] | None = None
    identify: Callable[[str], str] | None = None
    dedup: bool = False
    length_factors: tuple[float, float] = (1.0, 1.0)

    def settings(self) -> dict:
        """The filters as plain values (JSON), which :meth:`from_settings` turns back into them."""
        return {key: value for key, value in vars(self).items() if key != "identify"}

    @classmethod
    def from_settings(cls, settings: dict) -> Filters:
        """The filters of :meth:`settings`, the language identifier loaded when they identify languages."""
        languages = settings["languages"]
        identify = load_identifier()[0] if languages is not None else None
        tuples = {"languages": None if languages is None else tuple(languages)}
        tuples["length_factors"] = tuple(settings["length_factors"])
        return cls(**{**settings, **tuples}, identify=identify)

    def active(self, names: Sequence[str] = FILTERS) -> bool:
        """Whether any filter of ``names`` is on."""
        return any(self.masks()[name] is not None for name in names)

    def masks(self) -> dict[str, Callable[[np.ndarray, list[str], list[str]], np.ndarray] | None]:
        """Each filter of :data:`FILTERS` as ``(scores, src_texts, tgt_texts) -> mask``, ``None`` when off."""
        lengths = self.min_chars > 0 or self.max_chars is not None
        lid = self.languages is not None and self.identify is not None
        return {
            "max_score": None if self.max_score is None else lambda sc, s, t: score_mask(sc, self.max_score),
            "length": (
                (lambda sc, s, t: length_mask(s, t, self.min_chars, self.max_chars, self.length_factors))
                if lengths
                else None
            ),
            "length_ratio": (
                None
                if self.max_length_ratio is None
                else lambda sc, s, t: ratio_mask(s, t, self.max_length_ratio, self.length_factors)
            ),
            "lid": (lambda sc, s, t: lid_mask(s, t, *self.languages, self.identify)) if lid else None,
            "dedup": (lambda sc, s, t: dedup_mask(sc, s, t)) if self.dedup else None,
        }


def build_filters(
    max_score: float | None = None,
    *,
    min_chars: int = 0,
    max_chars: int | None = None,
    max_length_ratio: float | None = None,
    languages: tuple[str | None, str | None] = (None, None),
    lid: bool = False,
    dedup: bool = False,
    length_factors: tuple[float, float] = (1.0, 1.0),
) -> Filters:
    """:class:`Filters` from ``hf-tlaser mine``'s options (named in the errors), checked: ``UsageError`` on a limit
    out of its range, ``lid`` without both languages or with one py3langid does not identify, or py3langid missing
    (:func:`load_identifier`, loaded here)."""
    if min_chars < 0 or (max_chars is not None and max_chars < max(min_chars, 1)):
        raise UsageError(f"--min-chars {min_chars}, --max-chars {max_chars}: give 0 <= min <= max and max >= 1")
    if max_length_ratio is not None and not (math.isfinite(max_length_ratio) and max_length_ratio >= 1):
        raise UsageError(f"--max-length-ratio {max_length_ratio}: give a finite ratio of at least 1 (e.g. 2)")
    if max_score is not None and not math.isfinite(max_score):
        raise UsageError(f"--max-score {max_score}: give a finite score (e.g. 1.25 for the ratio margin)")
    identify = None
    if lid:
        src, tgt = check_languages(languages, "--lid")
        identify, labels = load_identifier()
        languages = lid_language(src, labels, "--src-lang"), lid_language(tgt, labels, "--tgt-lang")
    languages = languages if lid else None
    return Filters(max_score, min_chars, max_chars, max_length_ratio, languages, identify, dedup, length_factors)


def apply_filters(
    filters: Filters,
    scores: np.ndarray,
    src_texts: Sequence[str],
    tgt_texts: Sequence[str],
    names: Sequence[str] = FILTERS,
) -> tuple[np.ndarray, dict[str, int | None]]:
    """The pairs every filter turned on keeps (a mask), and how many each removed of those the filters before it
    kept (:data:`FILTERS` order; ``None``: off), each count logged. ``names``: only these filters (e.g.
    :data:`PER_PAIR` on a slice of the pairs)."""
    scores = np.asarray(scores)
    keep = np.ones(len(scores), dtype=bool)
    removed: dict[str, int | None] = {}
    for name, mask in filters.masks().items():
        if name not in names:
            continue
        if mask is None:
            removed[name] = None
            continue
        alive = np.flatnonzero(keep)
        kept = mask(scores[alive], [src_texts[p] for p in alive], [tgt_texts[p] for p in alive])
        keep[alive[~kept]] = False
        removed[name] = int(np.sum(~kept))
        logger.info("filter %s removed %d of %d pairs", name, removed[name], len(alive))
    return keep, removed

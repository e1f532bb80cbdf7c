"""Registry of the corpora in the data dir (see its INDEX.md) and the training mix loader."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import datasets
from transformers import PreTrainedTokenizerBase

from hf_tlaser.data.cleaning import CleaningConfig, clean_groups
from hf_tlaser.data.languages import LANGUAGES, check_languages
from hf_tlaser.data.paths import ENV_VAR, get_data_dir
from hf_tlaser.data.pivot import join_on_english
from hf_tlaser.data.readers import count_lines, moses_files, read_aligned, read_csv_aligned, read_tsv
from hf_tlaser.errors import MissingDataError, UsageError

logger = logging.getLogger(__name__)

# loader(corpus folder, requested languages, max lines per file or None) -> datasets (one per file set)
Loader = Callable[[Path, Sequence[str], int | None], list[datasets.Dataset]]


@dataclass(frozen=True)
class CorpusSpec:
    """One folder of the data dir. ``evaluation`` corpora are loadable by name but never in the default mix."""

    name: str
    description: str
    loader: Loader
    evaluation: bool = False


def _aligned_sets(
    folder: Path, name: str, sets: dict[str, dict[str, Path]], languages: Sequence[str], max_lines: int | None
) -> list[datasets.Dataset]:
    """Read every file set that has at least two of the requested languages; log the sets skipped and the lines
    that ``max_lines`` cuts."""
    out, skipped = [], {}
    lines = cut = capped = 0
    for set_name, files in sets.items():
        wanted = {lang: folder / path for lang, path in files.items() if lang in languages}
        if len(wanted) < 2:
            skipped[set_name] = len(files)
            continue
        out.append(read_aligned(wanted, f"{name}/{set_name}", languages, max_lines))
        if max_lines is not None:
            total = count_lines(next(iter(wanted.values())))  # the files are aligned: one count is enough
            lines, cut, capped = lines + total, cut + max(total - max_lines, 0), capped + (total > max_lines)
    if skipped:
        logger.info(
            "%s: skipped %d file set(s) (%d files) without two of the languages %s: %s",
            name,
            len(skipped),
            sum(skipped.values()),
            list(languages),
            ", ".join(skipped),
        )
    if cut:
        logger.info(
            "%s: --max-lines %d cut %d of %d lines (%d of %d file sets)", name, max_lines, cut, lines, capped, len(out)
        )
    return out


def _multiway_sets(set_names: Sequence[str], langs: Sequence[str]) -> Callable[[Path], dict[str, dict[str, Path]]]:
    def sets(folder: Path) -> dict[str, dict[str, Path]]:
        return {
            s: {lang: Path(f"{s}.{lang}") for lang in langs if (folder / f"{s}.{lang}").exists()} for s in set_names
        }

    return sets


def _files_loader(name: str, sets: Callable[[Path], dict[str, dict[str, Path]]]) -> Loader:
    return lambda folder, languages, max_lines: _aligned_sets(folder, name, sets(folder), languages, max_lines)


def _bilingual_sets(folder: Path) -> dict[str, dict[str, Path]]:
    sets = {}
    for en_file in sorted(folder.glob("*.*-en.en")):
        prefix = en_file.name[: -len(".en")]  # e.g. newstest2014.de-en
        other = prefix.rsplit(".", 1)[1].split("-")[0]
        sets[prefix] = {other: Path(f"{prefix}.{other}"), "en": Path(en_file.name)}
    return sets


def _load_stsb(folder: Path, languages: Sequence[str], max_lines: int | None) -> list[datasets.Dataset]:
    files = {lang: folder / f"stsb-{lang}-train.csv" for lang in LANGUAGES if lang in languages}
    if len(files) < 2:
        return []
    return [read_csv_aligned(files, (0, 1), "stsb-multi-mt/train", languages, max_lines)]


def _load_xed(folder: Path, languages: Sequence[str], max_lines: int | None) -> list[datasets.Dataset]:
    """en-X subtitle pairs; rows whose first column is not an ``en/`` file are Danish-X and are skipped."""
    out = []
    if "en" not in languages:
        return out
    for lang in ("de", "es", "fr", "it"):
        path = folder / "subtitle-pairs" / f"pairs-{lang}.txt"
        if lang not in languages:
            continue
        ds = read_tsv(
            path,
            {"en": 4, lang: 5},
            f"xed/pairs-{lang}",
            languages,
            n_fields=6,
            require_prefix=(0, "en/"),
            max_lines=max_lines,
        )
        total = count_lines(path) if max_lines is None else min(max_lines, count_lines(path))
        logger.info(
            "xed/pairs-%s: skipped %d of %d rows that are not English-X (first column not 'en/')",
            lang,
            total - len(ds),
            total,
        )
        out.append(ds)
    return out


_FIVE = ("de", "en", "es", "fr", "it")
_ISO3 = {"de": "deu", "en": "eng", "es": "spa", "fr": "fra", "it": "ita"}

REGISTRY: dict[str, CorpusSpec] = {
    spec.name: spec
    for spec in (
        CorpusSpec(
            "wmt-newstest-multiway",
            "WMT news test 2008-2011, 2013; multi-way de/en/es/fr (+it in 2009 sets)",
            _files_loader(
                "wmt-newstest-multiway",
                _multiway_sets(
                    (
                        "news-test2008",
                        "newssyscomb2009",
                        "newstest2009",
                        "newstest2010",
                        "newstest2011",
                        "newstest2013",
                    ),
                    _FIVE,
                ),
            ),
        ),
        CorpusSpec(
            "europarl-v2-it-en",
            "Europarl it-en 1996-2001 (693,793 pairs, tokenised)",
            _files_loader(
                "europarl-v2-it-en",
                lambda folder: {"europarl.it-en": moses_files(folder / "europarl.it-en", ("it", "en"))},
            ),
        ),
        CorpusSpec(
            "multi30k",
            "Multi30k task 1 train split, en/de/fr image captions (non-commercial)",
            _files_loader(
                "multi30k",
                lambda folder: {"train": {lang: Path(f"task1-raw/train.{lang}.gz") for lang in ("de", "en", "fr")}},
            ),
        ),
        CorpusSpec(
            "wmt-newstest-bilingual",
            "WMT news test de-en 2014-2018, fr-en 2014/2015",
            _files_loader("wmt-newstest-bilingual", _bilingual_sets),
        ),
        CorpusSpec(
            "stsb-multi-mt", "STS benchmark train split, en + DeepL MT de/es/fr/it (both sentences)", _load_stsb
        ),
        CorpusSpec("xed", "XED OpenSubtitles en-X pairs (de/es/fr/it); conflicts with XED as a benchmark", _load_xed),
        CorpusSpec(
            "tico19-test",
            "TICO-19 test, COVID domain, en/es/fr 3-way (evaluation: a default retrieval set of hf-tlaser evaluate)",
            _files_loader("tico19-test", _multiway_sets(("tico19-test",), ("en", "es", "fr"))),
            evaluation=True,
        ),
        CorpusSpec(
            "ntrex128",
            "NTREX-128, 1,997 news sentences, 5-way (evaluation)",
            _files_loader(
                "ntrex128",
                lambda folder: {
                    "newstest2019": {
                        lang: Path(f"newstest2019-{'src' if lang == 'en' else 'ref'}.{_ISO3[lang]}.txt")
                        for lang in _FIVE
                    }
                },
            ),
            evaluation=True,
        ),
        CorpusSpec(
            "ud-pud",
            "Parallel UD treebanks, 1,000 sentences, 5-way (evaluation)",
            _files_loader("ud-pud", lambda folder: {"pud": {lang: Path(f"pud.{lang}.txt") for lang in _FIVE}}),
            evaluation=True,
        ),
        CorpusSpec(
            "flores-devtest",
            "FLORES-200 devtest, 1,012 sentences, 5-way; overlaps SIB-200 (evaluation)",
            _files_loader(
                "flores-devtest",
                lambda folder: {"devtest": {lang: Path(f"{_ISO3[lang]}_Latn.devtest") for lang in _FIVE}},
            ),
            evaluation=True,
        ),
    )
}

EVALUATION_CORPORA: tuple[str, ...] = tuple(name for name, spec in REGISTRY.items() if spec.evaluation)
DEFAULT_TRAIN_CORPORA: tuple[str, ...] = (
    "wmt-newstest-multiway",
    "europarl-v2-it-en",
    "multi30k",
    "wmt-newstest-bilingual",
    "stsb-multi-mt",
)
"""Training mix. ``xed`` is registered but left out: its pairs are the source of the XED benchmark's
projections (PROVENANCE: use it as training bitext or as benchmark, not both); the ``evaluation`` corpora (TICO-19
included, a retrieval set of ``hf-tlaser evaluate``) never enter it."""


def check_corpora(names: str | Iterable[str]) -> list[str]:
    """The names as a list; UsageError naming the first unknown one and listing the registered corpora."""
    names = [names] if isinstance(names, str) else list(names)
    for name in names:
        if name not in REGISTRY:
            raise UsageError(f"unknown corpus {name!r}; known corpora: {', '.join(REGISTRY)}")
    return names


def _load_parts(
    name: str, data_dir: str | os.PathLike | None, languages: Sequence[str], max_lines: int | None
) -> list[datasets.Dataset]:
    folder = get_data_dir(data_dir) / name
    if not folder.is_dir():
        raise MissingDataError(
            f"corpus folder {folder} does not exist; pass --data-dir (or set ${ENV_VAR}) to the folder that holds "
            f"the corpora (see its INDEX.md)"
        )
    return REGISTRY[name].loader(folder, tuple(languages), max_lines)


def load_corpus(
    name: str,
    data_dir: str | os.PathLike | None = None,
    languages: Sequence[str] = LANGUAGES,
    max_lines: int | None = None,
) -> datasets.Dataset:
    """Raw (uncleaned) groups of one registered corpus; ``max_lines`` reads only the first lines of each file."""
    (name,) = check_corpora([name])
    check_languages(languages)
    parts = _load_parts(name, data_dir, languages, max_lines)
    if not parts:
        raise ValueError(f"corpus {name!r} has fewer than two of the languages {list(languages)}")
    return datasets.concatenate_datasets(parts) if len(parts) > 1 else parts[0]


def load_corpora(
    names: Iterable[str] = DEFAULT_TRAIN_CORPORA,
    data_dir: str | os.PathLike | None = None,
    languages: Sequence[str] = LANGUAGES,
    *,
    cleaning: CleaningConfig | None = None,
    tokenizer: PreTrainedTokenizerBase | None = None,
    join_english: bool = True,
    max_lines: int | None = None,
) -> datasets.Dataset:
    """Load, pivot-join (``join_on_english``) and clean (``clean_groups``) the named corpora into one dataset.

    Columns: one per language in ``languages`` (None where absent) and ``corpus``. Corpora with fewer than two
    of ``languages`` are skipped with a warning. ``tokenizer`` makes the length filter count subword tokens.
    ``max_lines`` reads only the first lines of every file (quick runs and tests).
    """
    check_languages(languages)
    names = check_corpora(names)
    parts = []
    for name in names:
        found = _load_parts(name, data_dir, languages, max_lines)
        if not found:
            logger.warning("skipping %s: fewer than two of the languages %s", name, list(languages))
        logger.info("%s: %d groups", name, sum(len(part) for part in found))
        parts.extend(found)
    if not parts:
        raise ValueError(f"none of the corpora {names} has two of the languages {list(languages)}")
    ds = datasets.concatenate_datasets(parts)
    if join_english and "en" in languages:
        ds = join_on_english(ds, languages)
    ds, _ = clean_groups(ds, cleaning, languages, tokenizer)
    return ds


def corpus_texts(
    names: Iterable[str],
    data_dir: str | os.PathLike | None = None,
    languages: Sequence[str] = LANGUAGES,
    max_sentences: int | None = None,
) -> Iterator[str]:
    """Non-empty raw sentences of the named corpora, at most ``max_sentences`` per language (tokenizer training)."""
    ds = datasets.concatenate_datasets([load_corpus(name, data_dir, languages) for name in check_corpora(names)])
    for lang in languages:
        count = 0
        for batch in ds.select_columns([lang]).iter(batch_size=10_000):
            for text in batch[lang]:
                if text and (max_sentences is None or count < max_sentences):
                    count += 1
                    yield text
            if max_sentences is not None and count >= max_sentences:
                break

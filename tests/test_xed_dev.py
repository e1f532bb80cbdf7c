"""The conversational dev split carved from the OpenSubtitles pairs: the film rule (BLAKE2b order, frozen films), the
training corpora ``xed``/``xed-more``/``xed-more-all`` never reading a dev film, the ``xed-dev`` retrieval set (unique
targets, sizes, deterministic), its scoring to and from English only, and ``hf-tlaser evaluate --retrieval-sets
xed-dev`` on a tiny random model."""

from __future__ import annotations

import hashlib
import json
import logging
import unicodedata

import numpy as np
import pytest

from hf_tlaser.data.corpora import REGISTRY, load_corpus, resolve_corpora
from hf_tlaser.data.xed import (
    XED_DEV_FILMS,
    XED_DEV_LANGUAGES,
    XED_DEV_TARGET,
    XED_MORE_LANGUAGES,
    XED_SUBTITLES_MORE_LANGUAGES,
    film_hash,
    select_xed_dev_films,
    xed_film_rows,
    xed_more_languages,
    xed_pairs,
)
from hf_tlaser.errors import UsageError
from hf_tlaser.evaluation.cli import main
from hf_tlaser.evaluation.readers import PivotPairs, read_xed_dev, set_languages, xed_dev_pairs
from hf_tlaser.evaluation.suite import read_retrieval, retrieval_sets_for, score_retrieval

DEV_SIZES = {"de": 500, "es": 500, "fr": 500, "it": 500, "fi": 500, "tr": 500, "cs": 500, "zh": 275, "ru": 280}
"""Pairs per language of xed-dev (fewer than 500 where the dev films hold fewer unique pairs: zh, ru)."""


def key(text: str) -> str:
    return " ".join(unicodedata.normalize("NFKC", text).casefold().split())


def test_the_rule_gives_the_frozen_films(data_dir):
    rows = xed_film_rows(data_dir)
    assert len(rows) == 29 and set(XED_DEV_FILMS) <= set(rows)
    assert select_xed_dev_films(rows) == XED_DEV_FILMS
    assert (
        film_hash("en/1965/59037/5735869.xml.gz")
        == hashlib.blake2b(b"en/1965/59037/5735869.xml.gz", digest_size=8).digest()
    )
    # the rule takes films in hash order, skips films that would hold out over 40 % of a language, stops at 500 rows
    toy = {"a": {"de": 300}, "b": {"de": 300}, "c": {"de": 300, "fi": 10}, "d": {"de": 100}}
    order = sorted(toy, key=film_hash)
    films = select_xed_dev_films(toy, ("de", "fi"), target=500, max_share=0.4)
    assert films == tuple(f for f in order if f in films) and sum(toy[f]["de"] for f in films) <= 0.4 * 1000
    dev = dict.fromkeys(XED_DEV_LANGUAGES, 0)
    total = dict.fromkeys(XED_DEV_LANGUAGES, 0)
    for film, counts in rows.items():
        for lang, n in counts.items():
            total[lang] += n
            dev[lang] += n if film in XED_DEV_FILMS else 0
    assert all(0 < dev[lang] <= 0.4 * total[lang] for lang in XED_DEV_LANGUAGES), (dev, total)
    assert (dev["de"], dev["fi"], dev["zh"], dev["ru"]) == (1061, 1612, 277, 285)


def test_training_corpora_never_read_a_dev_film(data_dir, caplog):
    with caplog.at_level(logging.INFO, logger="hf_tlaser.data"):
        ds = load_corpus("xed", data_dir, languages=("de", "en"))
    assert len(ds) == 3995 - 1061  # en-X rows less those of the dev films
    assert "skipped 4133 of 8128" in caplog.text and "held out 1061 of 8128" in caplog.text
    fi = load_corpus("xed-more", data_dir, languages=("fi", "en"))
    assert len(fi) == 5658 - 1612 and set(fi["corpus"]) == {"xed-more/en-fi"}
    (more,) = resolve_corpora(["xed-more"], data_dir)
    assert more.languages == sorted(["en", *XED_MORE_LANGUAGES])
    (everything,) = resolve_corpora(["xed-more-all"], data_dir)
    assert len(everything.languages) == 31 and "pt_BR" not in everything.languages and "zh_Hant" in everything.languages
    for part in [*REGISTRY["xed"].parts(data_dir / "xed"), *everything.parts]:
        assert part.exclude is not None and set(part.exclude[1]) == set(XED_DEV_FILMS), part.name
        docs = {row_doc for *_, row_doc in xed_pairs(part.name.rsplit("-", 1)[-1], data_dir)}
        kept = list(part.rows(part.languages, None))  # the streaming path applies the split too
        held_out = sum(1 for *_, doc in xed_pairs(part.name.rsplit("-", 1)[-1], data_dir) if doc in XED_DEV_FILMS)
        assert len(kept) + held_out == sum(1 for _ in xed_pairs(part.name.rsplit("-", 1)[-1], data_dir)), part.name
        assert docs  # every file has English rows
    dev_english = {key(en) for lang in ("de", "fi") for en, _, doc in xed_pairs(lang, data_dir) if doc in XED_DEV_FILMS}
    train_english = {key(en) for en in load_corpus("xed-more", data_dir, languages=("fi", "en"))["en"]}
    # a line such as "Thank you." recurs in other films; whole dev films do not
    assert len(dev_english & train_english) < 0.1 * len(dev_english)


def test_xed_dev_pairs_are_unique_deterministic_and_from_dev_films(data_dir):
    dev = read_xed_dev(data_dir)
    assert isinstance(dev, PivotPairs) and dev.pivot == "en" and list(dev.pairs) == list(XED_DEV_LANGUAGES)
    assert dev.sizes() == DEV_SIZES
    for lang, (english, other) in dev.pairs.items():
        assert len({key(t) for t in english}) == len(english) and len({key(t) for t in other}) == len(other), lang
        assert all(english) and all(other) and all(key(a) != key(b) for a, b in zip(english, other))
        raw = {(en, x) for en, x, doc in xed_pairs(lang, data_dir) if doc in XED_DEV_FILMS}
        assert set(zip(english, other)) <= raw, lang
    again = read_xed_dev(data_dir, ["en", "zh", "ru"])
    assert again.pairs == {lang: dev.pairs[lang] for lang in ("zh", "ru")}
    assert xed_dev_pairs("de", data_dir, size=50) == xed_dev_pairs("de", data_dir, size=50)
    with pytest.raises(ValueError, match="include en"):
        read_xed_dev(data_dir, ["de", "fr"])


def test_xed_dev_takes_the_other_languages_of_xed_subtitles_more(data_dir, caplog):
    """An added language (docs/results.md, "Adding a language") is scored on its rows of the dev films, which the
    training corpora never read; a language without a file or with too few such rows is left out, with a log line."""
    with caplog.at_level(logging.INFO, logger="hf_tlaser.evaluation"):
        dev = read_xed_dev(data_dir, ["en", "el", "is"])
        assert read_retrieval("xed-dev", data_dir, ["en", "is"]) == {}
    assert list(dev.pairs) == ["el"] and dev.sizes() == {"el": XED_DEV_TARGET}
    assert "is left out (0 pairs of the dev films, fewer than 100)" in caplog.text
    assert "xed-dev: none of en, is has pairs here" in caplog.text
    assert xed_more_languages(data_dir / "xed-subtitles-more") == list(XED_SUBTITLES_MORE_LANGUAGES)
    assert set_languages("xed-dev", ["en", "sw"]) == [] and retrieval_sets_for(["en", "sw"]) == ("flores-devtest",)
    with pytest.raises(ValueError, match="unknown language"):
        read_xed_dev(data_dir, ["en", "sw"])
    english, greek = dev.pairs["el"]
    assert set(zip(english, greek)) <= {(en, x) for en, x, doc in xed_pairs("el", data_dir) if doc in XED_DEV_FILMS}
    train = load_corpus("xed-more-all", data_dir, languages=("el", "en"))
    assert len(train) == 4065 - 1520  # the el rows of the dev films are held out of training
    assert len({key(en) for en in english} & {key(en) for en in train["en"]}) < 0.1 * len(english)
    assert set_languages("xed-dev", ["en", "el"]) == ["en", "el"] and "xed-dev" in retrieval_sets_for(["en", "el"])


def test_pair_sets_are_scored_to_and_from_english_only():
    rng = np.random.default_rng(0)
    en_de, en_fi = rng.normal(size=(6, 8)), rng.normal(size=(4, 8))
    pairs = PivotPairs("en", {"de": (en_de, en_de + 0.01), "fi": (en_fi, rng.normal(size=(4, 8)))})
    result = score_retrieval({"xed-dev": pairs}, margins=("absolute",))
    langs, matrix = result.matrices["xed-dev"]["absolute"]
    assert langs == ["en", "de", "fi"] and result.directions == {"xed-dev": "english"}
    assert result.pair_sizes == {"xed-dev": {"de": 6, "fi": 4}} and result.sizes == {"xed-dev": 10}
    assert matrix[1, 0] == 0 and matrix[0, 1] == 0  # de: its own English, a near copy
    assert np.isfinite(matrix[2, 0]) and np.isnan(matrix[1, 2]) and np.isnan(matrix[2, 1])
    assert set(result.mining["xed-dev"]) == {"en-de", "en-fi"}
    assert set_languages("xed-dev", ["de", "fr"]) == [] and set_languages("xed-dev", ["fr", "en"]) == ["fr", "en"]
    assert "xed-dev" in retrieval_sets_for(["de", "en"])
    with pytest.raises(
        UsageError,
        match="xed-dev has en, de, es, fr, it, fi, tr, cs, zh, ru and the languages of xed-s.*English and one other",
    ):
        retrieval_sets_for(["de", "fr"], ["xed-dev"])


def test_evaluate_cli_on_xed_dev(writable_tlaser_folder, capsys):
    argv = [
        str(writable_tlaser_folder),
        "--suite",
        "retrieval",
        "--retrieval-sets",
        "xed-dev",
        "--languages",
        "en,de,ru",
    ]
    assert main([*argv, "--no-references", "--projection", "none", "--precision", "fp32"]) == 0
    results = json.loads((writable_tlaser_folder / "eval" / "results.json").read_text())
    retrieval = results["retrieval"]
    assert (
        retrieval["pair_sizes"] == {"xed-dev": {"de": 500, "ru": 280}}
        and retrieval["directions"]["xed-dev"] == "english"
    )
    cells = retrieval["matrices"]["xed-dev"]["absolute"]["xsim"]
    assert retrieval["matrices"]["xed-dev"]["absolute"]["langs"] == ["en", "de", "ru"]
    assert cells[1][2] is None and all(cells[i][0] is not None and cells[0][i] is not None for i in (1, 2))
    printed = capsys.readouterr().out
    assert "xed-dev xsim % (absolute, 4 directions)" in printed and "| ru ↔ en |" in printed
    report = (writable_tlaser_folder / "eval" / "report.md").read_text()
    assert "xed-dev: xsim error % to and from English per language (ratio margin)" in report

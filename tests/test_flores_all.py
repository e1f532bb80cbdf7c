"""FLORES-200 beyond the ten: every language variant by ISO 639-1 or FLORES code (aliases followed), the ``e5`` list
and ``--languages`` lists, xsim to and from English only over many languages (English embedded once), and the
summary of many languages: mean, worst five, languages worse than each reference row."""

from __future__ import annotations

import functools
import json

import numpy as np
import pytest
from test_eval_reports import toy_embed

import hf_tlaser
from hf_tlaser.data.corpora import FLORES_CODES, FLORES_FILES, flores_file, flores_languages
from hf_tlaser.errors import MissingDataError, UsageError
from hf_tlaser.evaluation import cli
from hf_tlaser.evaluation.cli import expand_languages, main
from hf_tlaser.evaluation.readers import LANGUAGE_LISTS, read_flores_devtest, read_flores_sample, set_languages
from hf_tlaser.evaluation.report import english_summary
from hf_tlaser.evaluation.suite import embed_retrieval, lexical_reference, retrieval_sets_for, score_retrieval

TWELVE = ["en", "de", "cs", "zh", "sw", "yo", "ar", "hi", "ja", "swh_Latn", "kor_Hang", "is"]


def test_every_code_resolves_to_its_file(data_dir):
    folder = data_dir / "flores-devtest"
    assert len(flores_languages(folder)) == 209
    resolved = {code: flores_file(folder, code).name for code in ("de", "zh", "sw", "ar", "swh", "ara", "cmn_Hans")}
    assert resolved == {
        "de": "deu_Latn.devtest",
        "zh": "zho_Hans.devtest",
        "sw": "swh_Latn.devtest",
        "ar": "arb_Arab.devtest",
        "swh": "swh_Latn.devtest",
        "ara": "arb_Arab.devtest",  # an alias file naming arb_Arab.devtest, as git writes a symbolic link
        "cmn_Hans": "zho_Hans.devtest",
    }
    assert all((folder / f"{code}.devtest").is_file() for code in FLORES_CODES.values())
    assert FLORES_FILES["ru"] == "rus_Cyrl.devtest" and FLORES_FILES["fi"] == "fin_Latn.devtest"
    with pytest.raises(MissingDataError, match="several varieties"):
        flores_file(folder, "kas")
    with pytest.raises(MissingDataError, match="no file for 'br'"):
        flores_file(folder, "br")


def test_reader_takes_any_language(data_dir):
    texts = read_flores_devtest(data_dir, ["en", "sw", "swh_Latn", "yor_Latn", "ru", "msa"])
    assert {len(lines) for lines in texts.values()} == {1012} and texts["sw"] == texts["swh_Latn"]
    assert texts["msa"] == read_flores_devtest(data_dir, ["zsm_Latn"])["zsm_Latn"]
    assert texts["ru"][0] != texts["en"][0] and texts["yor_Latn"][0]
    assert read_flores_devtest(data_dir, None).keys() == {"en", "de", "es", "fr", "it"}
    with pytest.raises(ValueError, match="unknown language"):
        read_flores_devtest(data_dir, ["english"])


def test_e5_list_and_language_lists():
    e5 = LANGUAGE_LISTS["e5"]
    assert len(e5) == 93 and len(set(e5)) == 93 and {"en", "sw", "zh", "no"} <= set(e5)
    here = set_languages("flores-devtest", e5)
    assert [lang for lang in e5 if lang not in here] == ["br", "fy", "la"]  # no FLORES-200 file
    assert expand_languages("de,e5")[:2] == ["de", "af"] and len(expand_languages("de,e5")) == 93
    assert expand_languages("ten,swh_Latn") == [*LANGUAGE_LISTS["ten"], "swh_Latn"]
    with pytest.raises(ValueError, match="given twice"):
        expand_languages("de,de")
    # the other sets keep their languages; flores-devtest takes the twelve, NTREX-128 its three of them
    assert set_languages("ntrex128", TWELVE) == ["en", "de", "cs", "zh"]
    assert set_languages("flores-devtest", TWELVE) == TWELVE
    assert retrieval_sets_for(["en", "sw"]) == ("flores-devtest",)


def test_many_languages_are_scored_to_and_from_english(data_dir):
    calls = []

    def embed(texts):
        calls.append(len(texts))
        return toy_embed(texts)

    texts = {"flores-devtest": {lang: lines[:200] for lang, lines in read_flores_devtest(data_dir, TWELVE).items()}}
    embs = embed_retrieval(embed, texts)
    assert calls == [12 * 200]  # one call, each language (English too) once
    result = score_retrieval(embs, margins=("absolute", "ratio"))
    langs, matrix = result.matrices["flores-devtest"]["absolute"]
    assert langs == TWELVE and result.directions == {"flores-devtest": "english"}
    searched = np.isfinite(matrix)
    assert searched.sum() == 2 * 11 and searched[:, 0].sum() == 11 and searched[0].sum() == 11
    assert matrix[4, 0] == matrix[9, 0] and matrix[0, 4] == matrix[0, 9]  # sw and swh_Latn: the same file
    assert set(result.mining["flores-devtest"]) == {f"en-{lang}" for lang in TWELVE[1:]}
    full = score_retrieval(embs, margins=("absolute",), directions="all")
    assert (
        full.directions == {"flores-devtest": "all"}
        and np.isfinite(full.matrices["flores-devtest"]["absolute"][1]).sum() == 132
    )
    assert np.array_equal(full.matrices["flores-devtest"]["absolute"][1][searched], matrix[searched])
    few = {"flores-devtest": {lang: embs["flores-devtest"][lang] for lang in TWELVE[:3]}}
    assert score_retrieval(few).directions == {"flores-devtest": "all"}  # auto: every pair up to ten languages
    no_english = {"flores-devtest": {lang: embs["flores-devtest"][lang] for lang in TWELVE[1:]}}
    with pytest.raises(UsageError, match="without English"):
        score_retrieval(no_english)


def matrix_entry(langs, to_en, from_en):
    cells = [[None] * len(langs) for _ in langs]
    for i in range(1, len(langs)):
        cells[i][0], cells[0][i] = to_en[i - 1], from_en[i - 1]
    return {"langs": langs, "xsim": cells}


def test_english_summary_gives_mean_worst_five_and_languages_worse_than_each_reference():
    langs = ["en", *(f"l{i}" for i in range(12))]
    model = [float(i) for i in range(12)]
    reference = [float(i) + (2.0 if i < 3 else -0.5 if i < 8 else -3.0) for i in range(12)]  # model worse on l3..l11
    results = {
        "evaluated": {"label": "ours"},
        "retrieval": {"matrices": {"flores-devtest": {"absolute": matrix_entry(langs, model, model)}}},
        "references": {
            "e5": {
                "label": "e5 (reference)",
                "retrieval": {"matrices": {"flores-devtest": {"absolute": matrix_entry(langs, reference, reference)}}},
            },
            "cross-model: e5": {
                "label": "ours → e5 (cross-model)",
                "retrieval": {"matrices": {"flores-devtest": {"absolute": matrix_entry(langs, model, model)}}},
            },
        },
    }
    table = english_summary(results, "flores-devtest").splitlines()
    assert "languages where ours is worse" in table[0] and "worse by > 1 point" in table[0]
    assert table[2] == "| ours | 12 | 5.50 | 5.50 | 5.50 | l11 11.0, l10 10.0, l9 9.0, l8 8.0, l7 7.0 | - | - |"
    assert table[3].startswith("| e5 (reference) | 12 |") and table[3].endswith("| 9 of 12 | 4 |")
    assert table[4].endswith("| - | - |")


def test_evaluate_cli_over_many_flores_languages(writable_tlaser_folder, monkeypatch, capsys):
    calls = []

    def encode(model, tokenizer, texts, **kwargs):
        calls.append(len(texts))
        return toy_embed(texts)

    monkeypatch.setattr(hf_tlaser, "encode", encode)  # the wiring is under test, not the model
    monkeypatch.setattr(cli, "lexical_reference", functools.partial(lexical_reference, svd_dim=16))
    argv = [
        str(writable_tlaser_folder),
        "--suite",
        "retrieval",
        "--retrieval-sets",
        "flores-devtest",
        "--languages",
        ",".join(TWELVE),
    ]
    assert main([*argv, "--projection", "none", "--precision", "fp32"]) == 0
    results = json.loads((writable_tlaser_folder / "eval" / "results.json").read_text())
    assert results["retrieval"]["directions"] == {"flores-devtest": "english"}
    assert results["retrieval"]["matrices"]["flores-devtest"]["ratio"]["langs"] == TWELVE
    printed = capsys.readouterr().out
    assert "flores-devtest xsim % (absolute, 22 directions)" in printed
    assert "worst 5 (mean of both directions)" in printed and "| tfidf-char (lexical reference) | 11 |" in printed
    assert "| sw ↔ en |" not in printed  # many languages: the summary, not one row per language
    report = (writable_tlaser_folder / "eval" / "report.md").read_text()
    assert (
        "| sw ↔ en |" in report and "flores-devtest: xsim error % to and from English, summary (ratio margin)" in report
    )
    with pytest.raises(SystemExit):
        main([*argv[:-1], "e5,de,de"])


def test_the_flores_sample_is_every_fifth_devtest_sentence_in_every_language(data_dir):
    languages = ["en", "he", "kab_Latn"]
    full, sample = read_flores_devtest(data_dir, languages), read_flores_sample(data_dir, languages)
    assert [len(sample[lang]) for lang in languages] == [200, 200, 200]
    assert all(sample[lang] == [full[lang][i] for i in range(0, 1000, 5)] for lang in languages)
    assert set_languages("flores-sample", ["en", "he", "la"]) == ["en", "he"]  # la: no FLORES-200 file

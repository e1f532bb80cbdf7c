"""Evaluation on the user's own data: aligned files as retrieval sets (xsim, P@1, mining), a classification dataset
with text/label columns per language (a folder per language, or a language column), through ``hf-tlaser evaluate``;
NTREX-128 with its ten languages."""

from __future__ import annotations

import csv
import itertools
import json

import datasets
import numpy as np
import pytest
from test_eval_cli import fast_encode, model_dir  # noqa: F401 (fixtures)
from test_eval_reports import toy_embed

from hf_tlaser.data.corpora import NTREX_LANGUAGES
from hf_tlaser.errors import UsageError
from hf_tlaser.evaluation.classifier import ClassifierConfig
from hf_tlaser.evaluation.cli import main
from hf_tlaser.evaluation.readers import read_ntrex128
from hf_tlaser.evaluation.suite import file_name
from hf_tlaser.evaluation.suite_classification import evaluate_classification
from hf_tlaser.evaluation.suite_retrieval import evaluate_retrieval
from hf_tlaser.evaluation.user_sets import read_classification_spec

SIZES = {"train": 60, "dev": 20, "test": 40}


@pytest.fixture(scope="module")
def user_sets(tmp_path_factory, data_dir):
    """NTREX-128 lines as a user's aligned files (German, English, Czech, and English again as 'xx'), SIB-200 rows as
    a classification dataset in both layouts."""
    root = tmp_path_factory.mktemp("user-eval")
    ntrex = read_ntrex128(data_dir, ["de", "en", "cs"])
    for lang, lines in ntrex.items():
        (root / f"dev.{lang}").write_text("\n".join(lines[:150]) + "\n")
    rows = []
    for lang, folder in (("de", "deu_Latn"), ("en", "eng_Latn")):
        (root / "topics" / lang).mkdir(parents=True)
        for split, n in SIZES.items():
            with open(data_dir / "sib200" / folder / f"{split}.tsv", encoding="utf-8", newline="") as handle:
                part = list(itertools.islice(csv.DictReader(handle, delimiter="\t", quoting=csv.QUOTE_NONE), n))
            items = [{"text": r["text"], "label": r["category"]} for r in part]
            (root / "topics" / lang / f"{split}.jsonl").write_text("".join(json.dumps(i) + "\n" for i in items))
            rows += [{**item, "language": lang, "split": split} for item in items]
    splits = {s: datasets.Dataset.from_list([r for r in rows if r["split"] == s]) for s in SIZES}
    datasets.DatasetDict({"train": splits["train"], "validation": splits["dev"], "test": splits["test"]}).save_to_disk(
        str(root / "mixed")
    )
    return root


def test_aligned_files_give_xsim_p_at_1_and_mining(user_sets):
    same = f"files:en={user_sets / 'dev.en'}:xx={user_sets / 'dev.en'}"  # identical sides: a perfect score
    real = f"files:de={user_sets / 'dev.de'}:en={user_sets / 'dev.en'}:cs={user_sets / 'dev.cs'}"
    result = evaluate_retrieval(toy_embed, sets=[same, real, "ntrex128"], langs=["de", "en", "cs", "xx"])
    assert list(result.matrices) == [same, real, "ntrex128"] and result.sizes[real] == 150
    assert result.matrices[real]["ratio"][0] == ["cs", "de", "en"]  # the set's languages of --languages
    assert np.nanmax(result.matrices[same]["absolute"][1]) == 0.0
    assert [result.mining[same]["en-xx"][key] for key in ("f1", "precision", "recall")] == [100.0, 100.0, 100.0]
    as_dict = result.to_dict()
    absolute = np.array(as_dict["matrices"][real]["absolute"]["xsim"], dtype=float)
    p_at_1 = np.array(as_dict["p_at_1"][real]["p_at_1"], dtype=float)
    assert np.allclose(p_at_1, 100 - absolute, atol=0.01, equal_nan=True) and np.isnan(p_at_1[0, 0])
    assert set(result.mining[real]) == {"cs-de", "cs-en", "de-en"}
    assert all(0 <= m["recall"] <= 100 and 0 < m["f1"] < 100 for m in result.mining[real].values())
    assert result.matrices["ntrex128"]["ratio"][0] == ["de", "en", "cs"] and result.sizes["ntrex128"] == 1997


def test_ntrex_has_ten_languages(data_dir):
    lines = read_ntrex128(data_dir, NTREX_LANGUAGES)
    assert list(lines) == list(NTREX_LANGUAGES) and all(len(v) == 1997 for v in lines.values())
    assert any("\u4e00" <= ch <= "\u9fff" for ch in lines["zh"][0])  # Han
    assert any("\u0400" <= ch <= "\u04ff" for ch in lines["ru"][0])  # Cyrillic
    assert lines["cs"][5] != lines["en"][5]


@pytest.mark.parametrize("layout", ["topics", "mixed"])
def test_classification_dataset_of_the_user(user_sets, layout):
    spec = f"hf:{user_sets / layout}" + (":language=language" if layout == "mixed" else "")
    data = read_classification_spec(spec)
    assert sorted(data) == ["de", "en"]
    assert {split: len(part) for split, part in data["de"].items()} == SIZES
    assert data["en"]["test"].labels[0] in {"science/technology", "travel", "politics", "sports", "health",
                                            "entertainment", "geography"}  # fmt: skip
    config = ClassifierConfig(epochs=3)
    result = evaluate_classification(toy_embed, dataset=spec, langs=["de", "en"], seeds=[0], config=config)
    assert result.train_langs == ["de", "en"] and result.per_seed.shape == (1, 2, 2)


def test_classification_spec_errors(user_sets):
    with pytest.raises(UsageError, match="no language column 'lang'"):
        read_classification_spec(f"hf:{user_sets / 'mixed'}:language=lang")
    with pytest.raises(UsageError, match="options are config, text, label and language"):
        read_classification_spec(f"hf:{user_sets / 'topics'}:de=x")
    with pytest.raises(UsageError, match="no column\\(s\\) \\['sentence'\\]"):
        read_classification_spec(f"hf:{user_sets / 'topics'}:text=sentence")


def test_evaluate_cli_with_user_sets(model_dir, fast_encode, user_sets, tmp_path):  # noqa: F811
    files = f"files:de={user_sets / 'dev.de'}:en={user_sets / 'dev.en'}"
    topics = f"hf:{user_sets / 'topics'}"
    argv = [str(model_dir), "--suite", "retrieval", topics, "--retrieval-sets", files, "--languages", "de,en"]
    assert main([*argv, "--output-dir", str(tmp_path), "--epochs", "3", "--seeds", "0", "--projection", "none"]) == 0
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["retrieval"]["sizes"] == {files: 150} and results[topics]["train_langs"] == ["de", "en"]
    assert set(results["references"]["tfidf-char"]) >= {"retrieval", topics}
    report = (tmp_path / "report.md").read_text()
    assert f"{topics} cross acc %" in report
    # a file name made of the spec (cut and hashed when the spec is long: its temporary folder's name decides that)
    assert (tmp_path / f"transfer_{file_name(topics)}.png").is_file() and file_name(topics).startswith("hf_")


def test_unknown_languages_are_fine_but_sets_must_share_two(model_dir, fast_encode, tmp_path, capsys):  # noqa: F811
    rc = main([str(model_dir), "--suite", "retrieval", "--retrieval-sets", "tico19-test", "--languages", "de,pt"])
    assert rc == 2 and "retrieval set tico19-test has en, es, fr" in capsys.readouterr().err


def test_a_long_set_name_makes_a_short_distinct_file_name():
    from hf_tlaser.evaluation.suite import FILE_NAME_CHARS, file_name

    long = "files:" + ":".join(f"{lang}=/data/{'x' * 80}/test_2016_flickr.{lang}.gz" for lang in ("cs", "de", "en"))
    other = long.replace("test_2016", "test_2018")
    assert len(file_name(long)) <= FILE_NAME_CHARS and file_name(long) != file_name(other)
    assert file_name("ntrex128") == "ntrex128" and file_name("files:de=a.de:en=b.en") == "files_de_a.de_en_b.en"

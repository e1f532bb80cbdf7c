"""``hf-tlaser evaluate --reference``: a sentence-transformers model (built here, tiny) and an hf_tlaser folder become
rows of the one table next to random init, tfidf-char and the majority class, and of the comparison plot; a reference
of the model's width adds the cross-model row (model queries against reference targets); an unloadable reference is
one line, exit 2, before any data is read."""

from __future__ import annotations

import functools
import json

import numpy as np
import pytest
from sentence_transformers import SentenceTransformer
from test_eval_cli import model_dir  # noqa: F401 (fixture)
from test_eval_reports import assert_png
from test_eval_user_data import user_sets  # noqa: F401 (fixture)

import hf_tlaser
from hf_tlaser.evaluation import cli
from hf_tlaser.evaluation.cli import main
from hf_tlaser.evaluation.retrieval import xsim
from hf_tlaser.evaluation.suite import lexical_reference
from tests.tiny_models import make_st_model


@pytest.fixture(scope="module")
def references(tmp_path_factory, tokenizer):
    """Two tiny sentence-transformers models: one of the model's width (32), one narrower (16)."""
    root = tmp_path_factory.mktemp("references")
    return make_st_model(root / "wide", tokenizer, hidden_size=32), make_st_model(root / "narrow", tokenizer, seed=1)


@pytest.fixture(scope="module")
def small_sets(user_sets, tmp_path_factory):  # noqa: F811
    """The first lines of the user sets: 40 aligned de/en sentences, 24/8/16 topic rows per language."""
    root = tmp_path_factory.mktemp("small")
    for lang in ("de", "en"):
        (root / f"dev.{lang}").write_text("".join((user_sets / f"dev.{lang}").read_text().splitlines(True)[:40]))
        (root / "topics" / lang).mkdir(parents=True)
        for split, n in (("train", 24), ("dev", 8), ("test", 16)):
            rows = (user_sets / "topics" / lang / f"{split}.jsonl").read_text().splitlines(True)[:n]
            (root / "topics" / lang / f"{split}.jsonl").write_text("".join(rows))
    return root


@pytest.fixture(scope="module")
def evaluated(model_dir, references, small_sets, tmp_path_factory):  # noqa: F811
    out = tmp_path_factory.mktemp("eval")
    files = f"files:de={small_sets / 'dev.de'}:en={small_sets / 'dev.en'}"
    topics = f"hf:{small_sets / 'topics'}"
    wide, narrow = references
    argv = [str(model_dir), "--suite", "retrieval", topics, "--retrieval-sets", files, "--languages", "de,en"]
    argv += ["--reference", str(wide), "--reference", str(narrow), "--reference", str(model_dir)]
    argv += ["--output-dir", str(out / "eval"), "--cache-dir", str(out / "cache"), "--precision", "fp32"]
    with pytest.MonkeyPatch.context() as patch:  # a 16-dimensional tfidf-char reference: fast
        patch.setattr(cli, "lexical_reference", functools.partial(lexical_reference, svd_dim=16))
        assert main([*argv, "--epochs", "3", "--seeds", "0", "--projection", "none"]) == 0
    return out, files, topics, json.loads((out / "eval" / "results.json").read_text())


def test_references_are_rows_of_the_one_table(evaluated):
    out, files, topics, results = evaluated
    rows = results["references"]
    names = [
        "random init",
        "tfidf-char",
        "st",
        "st (2)",
        "cT-LASER model",
        "cross-model: st",
        "cross-model: cT-LASER model",
    ]
    assert list(rows) == names  # the narrow reference has no cross-model row: another width
    assert rows["st"]["label"] == "st (reference)" and "prompt query 'query: '" in rows["st"]["about"]
    for name in ("st", "st (2)", "cT-LASER model"):
        assert rows[name]["retrieval"]["sizes"] == {files: 40} and rows[name][topics]["train_langs"] == ["de", "en"]
    table = (out / "eval" / "report.md").read_text().split("## Results")[1].split("\n## ")[0]
    for label in ("cT-LASER", "random init (reference)", "tfidf-char (lexical reference)", "st (reference)"):
        assert f"| {label} |" in table
    assert "| majority class (reference) |" in table and "| cT-LASER queries → st targets (cross-model) |" in table
    assert "st (reference)" in (out / "eval" / "report.md").read_text().split("per language pair (ratio margin)")[1]
    assert_png(out / "eval" / "rows.png")
    assert "![Every row of the results table](rows.png)" in (out / "eval" / "report.md").read_text()
    assert list((out / "eval").glob("xsim_*_ratio_cross-model_st.png"))
    assert len(list((out / "cache").glob("*/*/shards/*.keys.npy"))) >= 3  # every reference went through the cache


def test_cross_model_row_searches_reference_targets_with_model_queries(evaluated, model_dir, references, small_sets):  # noqa: F811
    _, files, _, results = evaluated
    cross = results["references"]["cross-model: st"]["retrieval"]["matrices"][files]["ratio"]
    assert cross["langs"] == ["de", "en"] and cross["xsim"][0][0] is None
    de = (small_sets / "dev.de").read_text().splitlines()
    en = (small_sets / "dev.en").read_text().splitlines()
    model, tokenizer = hf_tlaser.load_model(model_dir, backend="torch")
    queries = hf_tlaser.encode(model, tokenizer, de, truncation=True, autocast_dtype=None, device="cpu")
    targets = SentenceTransformer(str(references[0]), device="cpu").encode(en, prompt="query: ")
    targets = targets.astype(np.float16).astype(np.float32)  # as the cache stores them
    assert cross["xsim"][0][1] == pytest.approx(xsim(queries, targets, margin="ratio"))


def test_unloadable_reference_is_one_line_before_data(model_dir, tmp_path, capsys):  # noqa: F811
    argv = [str(model_dir), "--reference", str(tmp_path / "missing"), "--data-dir", str(tmp_path / "nowhere")]
    assert main([*argv, "--output-dir", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("hf-tlaser evaluate: error: --reference ") and "no such folder" in err[-1]
    assert not any("Traceback" in line for line in err)

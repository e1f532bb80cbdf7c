"""``hf-tlaser evaluate`` on a saved tiny model and real data slices: one call gives the model, random-init and
tfidf-char rows in one table, states what was evaluated and the precision; usage mistakes end in one line, exit 2;
documents are embedded whole."""

from __future__ import annotations

import functools
import json
import subprocess
import sys

import numpy as np
import pytest
import torch
from test_eval_reports import toy_embed

import hf_tlaser
from hf_tlaser import LaserConfig, LaserForTranslation, TLaserConfig, TLaserForTranslation, save_tokenizer
from hf_tlaser.encoders import HfTlaserEncoder
from hf_tlaser.encoding import laser_mldoc_cleanup
from hf_tlaser.evaluation import cli
from hf_tlaser.evaluation.cli import main, summarize
from hf_tlaser.evaluation.suite import lexical_reference

TRAIN_RECORD = {
    "args": {"corpora": "multi30k", "bf16": False},
    "recipe": {"update_tokens": 4000},
    "preset": "ctlaser-tiny",
    "precision": {"precision": "bf16", "reason": "auto: CPU reports AVX512 with native bf16"},
}
STATE = {
    "global_step": 40,
    "log_history": [
        {"step": s, "loss": 9 / s, "loss_mt_per_token": 8 / s, "mean_cosine": 0.9 - s / 100, "d_p": 0.5, "d_n": 0.7}
        for s in (10, 20, 30, 40)
    ],
}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, tokenizer, tiny_tlaser_kwargs):
    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("tiny") / "model"
    TLaserForTranslation(TLaserConfig(**tiny_tlaser_kwargs)).save_pretrained(folder)
    save_tokenizer(tokenizer, folder)
    (folder / "hf_tlaser_train.json").write_text(json.dumps(TRAIN_RECORD))
    (folder / "trainer_state.json").write_text(json.dumps(STATE))
    return folder


@pytest.fixture()
def fast_encode(monkeypatch) -> list[dict]:
    """``hf_tlaser.encode`` replaced by hashed character trigrams (the wiring is under test, not the model); the
    tfidf-char reference uses 16 SVD dimensions. Returns the keyword arguments of every encode call."""
    calls: list[dict] = []

    def encode(model, tokenizer, texts, **kwargs):
        calls.append(kwargs)
        return toy_embed(texts)

    monkeypatch.setattr(hf_tlaser, "encode", encode)
    monkeypatch.setattr(cli, "lexical_reference", functools.partial(lexical_reference, svd_dim=16))
    return calls


def test_one_call_gives_model_and_reference_rows(model_dir, fast_encode, capsys):
    argv = [str(model_dir), "--suite", "retrieval", "sib200", "--retrieval-sets", "ud-pud", "--seeds", "0"]
    assert main([*argv, "--epochs", "3", "--projection", "pca", "--precision", "fp32"]) == 0
    out = model_dir / "eval"
    results = json.loads((out / "results.json").read_text())
    assert set(results["references"]) == {"random init", "tfidf-char"}
    for name, reference in results["references"].items():
        assert reference["retrieval"]["sizes"] == {"ud-pud": 1000}, name
        assert len(reference["sib200"]["mean"]) == 5
    lexical = results["references"]["tfidf-char"]
    assert "not a model" in lexical["about"] and lexical["label"] == "tfidf-char (lexical reference)"
    assert 0 < results["sib200"]["majority_class"] < 30  # 7 classes, the largest has 25%
    evaluated = results["evaluated"]
    assert evaluated["path"] == str(model_dir.resolve()) and evaluated["model"] == "cT-LASER"
    assert (evaluated["preset"], evaluated["updates"], evaluated["token_budget"]) == ("ctlaser-tiny", 40, 160000)
    assert evaluated["training_precision"] == TRAIN_RECORD["precision"]
    assert evaluated["precision"]["precision"] == "fp32" and evaluated["precision"]["requested"] == "fp32"
    assert all(call["autocast_dtype"] is None and call["truncation"] for call in fast_encode)

    report = (out / "report.md").read_text()
    table = report.split("## Results")[1].split("##")[0]
    for row in ("| cT-LASER |", "| random init (reference) |", "| tfidf-char (lexical reference) |"):
        assert row in table
    assert "| majority class (reference) | - | - |" in table and "sib200 cross acc %" in table
    assert "| optimizer updates | 40 |" in report and "| training precision | bf16 (auto:" in report
    assert "| evaluation precision | fp32 (fp32 requested;" in report
    assert "| en → de |" in report.split("ud-pud: xsim error % per language pair (ratio margin)")[1]
    assert "![Training curves](training_curves.png)" in report
    printed = capsys.readouterr().out
    assert printed.strip() == summarize(results)
    assert "| tfidf-char (lexical reference) |" in printed and "| majority class (reference) |" in printed


def test_random_init_only_with_bf16(model_dir, fast_encode):
    argv = [str(model_dir), "--suite", "retrieval", "--retrieval-sets", "tico19-test", "--random-init"]
    assert main([*argv, "--no-references", "--precision", "bf16"]) == 0
    results = json.loads((model_dir / "eval_random_init" / "results.json").read_text())
    assert "references" not in results and results["retrieval"]["sizes"] == {"tico19-test": 2100}
    assert (
        results["evaluated"]["weights"] == "random init" and results["evaluated"]["label"] == "cT-LASER (random init)"
    )
    assert results["evaluated"]["precision"]["precision"] == "bf16"
    assert fast_encode and all(call["autocast_dtype"] is torch.bfloat16 for call in fast_encode)


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        ("missing", "does not exist"),
        ("empty", "is not a model folder (no config.json)"),
        ("bert", "holds a 'bert' model, not an hf_tlaser model"),
        ("no-data", "does not exist"),
    ],
)
def test_usage_errors_end_in_one_line(case, expected, model_dir, tmp_path, capsys):
    folder, extra = tmp_path / "model", []
    if case == "empty":
        folder.mkdir()
    elif case == "bert":
        folder.mkdir()
        (folder / "config.json").write_text(json.dumps({"model_type": "bert"}))
    elif case == "no-data":
        folder, extra = model_dir, ["--data-dir", str(tmp_path / "nowhere"), "--no-references"]
    assert main([str(folder), "--suite", "sib200", "--output-dir", str(tmp_path / "out"), *extra]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("hf-tlaser evaluate: error: ") and expected in err[-1]
    assert not any("Traceback" in line for line in err)
    assert str(tmp_path / ("nowhere" if case == "no-data" else "model")) in err[-1]


def test_unknown_suite_lists_the_known_ones(model_dir, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main([str(model_dir), "--suite", "glue"])
    assert exit_info.value.code == 2
    assert "invalid choice: 'glue' (choose from 'retrieval', 'sib200', 'umsab', 'mldoc')" in capsys.readouterr().err


def test_help_shows_defaults_and_full_sentences(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "(a distilled student's shared space). positional arguments" in text  # the description ends its sentence
    assert "--reference SPEC another model as a row of the same tables and plots, repeatable" in text
    assert "(default: auto)" in text and "one of: auto, fp32, bf16, fp16" in text
    assert "(default: retrieval sib200)" in text and "one or more of: ntrex128, flores-devtest" in text
    assert "``" not in text and "(default: None)" not in text


def test_faiss_import_probing_is_not_logged():
    code = (
        "import logging; logging.basicConfig(level=logging.DEBUG)\n"
        "from hf_tlaser.bitext.knn import faiss_available\nassert faiss_available()"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "faiss.loader" not in result.stderr and "swigfaiss" not in result.stderr


def _words(lines: list[str], n: int) -> list[str]:
    words = [w for line in lines for w in line.split()]
    return (words * (n // len(words) + 1))[:n]


def test_tlaser_documents_are_cut_to_750_words_and_embedded_whole(tokenizer, tiny_tlaser_kwargs, newstest_lines):
    torch.manual_seed(0)
    model = TLaserForTranslation(TLaserConfig(**{**tiny_tlaser_kwargs, "max_position_embeddings": 8192})).eval()
    embed = HfTlaserEncoder(model, tokenizer, torch.device("cpu"))
    words = _words(newstest_lines["en"], 900)
    document = " ".join(words)
    got = embed.embed_documents([document])
    first_750 = hf_tlaser.encode(model, tokenizer, [" ".join(words[:750])], autocast_dtype=None)
    np.testing.assert_allclose(got, first_750, atol=1e-5)
    assert not np.allclose(got, embed([document]), atol=1e-3)  # all 900 words give another vector


def test_laser_documents_get_mldoc_cleanup(tokenizer):
    torch.manual_seed(0)
    config = LaserConfig(vocab_size=len(tokenizer), embed_dim=16, lstm_hidden_size=12, decoder_hidden_size=24)
    model = LaserForTranslation(config).eval()
    embed = HfTlaserEncoder(model, tokenizer, torch.device("cpu"))
    raw = "Acme Co . said profits rose . (c) Reuters Limited 1996."
    cleaned = laser_mldoc_cleanup(raw)
    assert cleaned == "Acme Co. said profits rose . "
    got = embed.embed_documents([raw])
    np.testing.assert_allclose(got, hf_tlaser.encode(model, tokenizer, [cleaned], autocast_dtype=None), atol=1e-5)
    assert not np.allclose(got, embed([raw]), atol=1e-4)

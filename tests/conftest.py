"""Shared fixtures: the data dir, a small joint BPE trained on real lines, tiny model configs."""

from __future__ import annotations

import functools
import itertools
import json
import os
import shutil
from pathlib import Path

import pytest
import torch

from hf_tlaser.data.paths import get_data_dir
from hf_tlaser.data.readers import iter_lines
from hf_tlaser.evaluation import cli as eval_cli
from hf_tlaser.evaluation import suite
from hf_tlaser.evaluation.readers import read_ntrex128
from hf_tlaser.tokenization import save_tokenizer, train_tokenizer
from tests.tiny_models import PROMPTS, make_st_model, save_tiny_tlaser, save_tiny_xlmr, save_warm_ctlaser, st_modules

if os.environ.get("PYTEST_XDIST_WORKER"):
    # two workers on two cores: one thread each, the processes they start included (a third thread on two cores
    # makes every OpenMP barrier wait)
    os.environ["OMP_NUM_THREADS"] = "1"
    torch.set_num_threads(1)
else:
    torch.set_num_threads(2)


@pytest.fixture
def one_thread():
    """torch on one thread during the test: tiny LSTMs run much faster on one thread, especially on a shared CPU."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


@pytest.fixture(scope="session")
def data_dir():
    return get_data_dir()


@pytest.fixture(scope="session")
def newstest_lines(data_dir) -> dict[str, list[str]]:
    """First 300 lines of the 5-way newstest2009 set."""
    folder = data_dir / "wmt-newstest-multiway"
    return {
        lang: list(itertools.islice(iter_lines(folder / f"newstest2009.{lang}"), 300))
        for lang in ("de", "en", "es", "fr", "it")
    }


@pytest.fixture(scope="session")
def tokenizer(newstest_lines):
    texts = [line for lines in newstest_lines.values() for line in lines]
    return train_tokenizer(texts=texts, vocab_size=400, show_progress=False)


@pytest.fixture(scope="session")
def tokenizer_dir(tmp_path_factory, tokenizer):
    """``tokenizer`` saved in a folder (``--tokenizer``); a test module may define its own."""
    folder = tmp_path_factory.mktemp("tok")
    save_tokenizer(tokenizer, folder)
    return folder


@pytest.fixture(scope="session")
def tiny_tlaser_kwargs(tokenizer) -> dict:
    return dict(
        vocab_size=len(tokenizer),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        decoder_attention_heads=4,
        decoder_ffn_dim=64,
        dropout=0.0,
        max_position_embeddings=128,
    )


@pytest.fixture(scope="session")
def backbone_dir(tmp_path_factory, newstest_lines):
    """A random 2-layer XLM-R (width 32) and its BPE of de/en/es news lines (``save_tiny_xlmr``); read-only."""
    lines = [line for lang in ("de", "en", "es") for line in newstest_lines[lang]]
    return save_tiny_xlmr(tmp_path_factory.mktemp("xlmr"), lines)


@pytest.fixture(scope="session")
def st_folder(tmp_path_factory, tokenizer):
    """A tiny sentence-transformers folder with e5's prompts (``make_st_model``); read-only."""
    return make_st_model(tmp_path_factory.mktemp("st"), tokenizer)


@pytest.fixture(scope="session")
def tlaser_folder(tmp_path_factory, tokenizer, tiny_tlaser_kwargs):
    """A tiny random T-LASER folder for de and en with ``tokenizer``; read-only."""
    return save_tiny_tlaser(tmp_path_factory.mktemp("tlaser") / "model", tokenizer, tiny_tlaser_kwargs)


@pytest.fixture
def writable_tlaser_folder(tmp_path, tlaser_folder):
    """A copy of ``tlaser_folder`` that a test may write into (an evaluation's ``eval/``)."""
    return Path(shutil.copytree(tlaser_folder, tmp_path / "model"))


@pytest.fixture(scope="session")
def warm_dir(tmp_path_factory, backbone_dir):
    """A cT-LASER warm-started from ``backbone_dir`` as a sentence-transformers model with e5's prompts, before any
    update (``save_warm_ctlaser``); read-only."""
    return save_warm_ctlaser(tmp_path_factory.mktemp("warm"), backbone_dir)


@pytest.fixture(scope="session")
def st_dir(tmp_path_factory, backbone_dir):
    """``backbone_dir`` as a sentence-transformers model: mean pooling, e5's prompts; read-only."""
    from sentence_transformers import SentenceTransformer

    modules = st_modules()
    folder = tmp_path_factory.mktemp("st_backbone")
    layers = [modules.Transformer(str(backbone_dir)), modules.Pooling(32, pooling_mode="mean")]
    SentenceTransformer(modules=layers, prompts=PROMPTS).save(str(folder))
    return folder


@pytest.fixture
def evaluate_retrieval(monkeypatch, tmp_path):
    """``evaluate_retrieval(folder, model, model_type)``: ``hf-tlaser evaluate --suite retrieval`` of ``folder`` on the
    first 200 lines of NTREX-128 (fp32, no projection, the lexical reference at 16 dimensions) beside the random-init
    and tf-idf references; checks that the results and the report name the ``model`` (a ``model_type``) and returns
    ``results.json``."""

    def ntrex(data_dir, langs):
        return {lang: lines[:200] for lang, lines in read_ntrex128(data_dir, langs).items()}

    monkeypatch.setitem(suite.RETRIEVAL_SETS, "ntrex128", (ntrex, suite.RETRIEVAL_SETS["ntrex128"][1]))
    monkeypatch.setattr(eval_cli, "lexical_reference", functools.partial(suite.lexical_reference, svd_dim=16))

    def evaluate(folder: Path, model: str, model_type: str) -> dict:
        out = tmp_path / "eval"
        argv = [str(folder), "--suite", "retrieval", "--retrieval-sets", "ntrex128", "--output-dir", str(out)]
        assert eval_cli.main([*argv, "--projection", "none", "--precision", "fp32"]) == 0
        results = json.loads((out / "results.json").read_text())
        assert results["evaluated"]["model"] == model and results["evaluated"]["model_type"] == model_type
        assert results["retrieval"]["sizes"] == {"ntrex128": 200}
        assert set(results["references"]) == {"random init", "tfidf-char"}
        assert f"| {model} |" in (out / "report.md").read_text()
        return results

    return evaluate

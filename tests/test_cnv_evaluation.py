"""cNV through the evaluation, encode and publishing path: ``hf_tlaser.encode(..., lang=)`` picks the language's
encoder, the suite hands per-language embedders the language of every text, ``hf-tlaser evaluate`` on a saved cNV
folder evaluates its two languages with the random-init and tfidf-char rows, and ``hf-tlaser push`` publishes it
without sentence-transformers files, loadable by repo id in a process without hf_tlaser."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
import yaml
from hub_server import HubServer
from test_cnv_model import marian
from test_eval_reports import toy_embed

import hf_tlaser
from hf_tlaser import CNVModel, TLaserConfig, TLaserModel, train_tokenizer
from hf_tlaser.errors import UsageError
from hf_tlaser.evaluation import cli, suite
from hf_tlaser.evaluation.readers import LabeledSplit, read_ntrex128, read_sib200
from hf_tlaser.evaluation.suite import (
    embed_classification,
    evaluate_retrieval,
    evaluation_languages,
    lexical_reference,
    read_classification,
    retrieval_sets_for,
)
from hf_tlaser.hub import cli as push_cli
from hf_tlaser.hub import render_model_card

LANGS = ["en", "de"]
CARD_TEXTS = ["Wo ist der Bahnhof?", "Die Börse fiel stark.", ""]


@pytest.fixture(scope="module")
def cnv_model(newstest_lines) -> CNVModel:
    """Two tiny random Marian models (en->de, de->en), each with its own joint BPE on real en/de lines."""
    texts = newstest_lines["en"] + newstest_lines["de"]
    en_de = train_tokenizer(texts=texts, vocab_size=300, style="marian", show_progress=False)
    de_en = train_tokenizer(texts=texts[::-1], vocab_size=360, style="marian", show_progress=False)
    torch.manual_seed(0)
    model = CNVModel.from_nmt_pair(
        marian(en_de, 1),
        marian(de_en, 2),
        LANGS,
        tokenizers={"en": en_de, "de": de_en},
        shared_hidden_size=16,
        num_summary_heads=2,
        num_negatives=3,
    )
    return model.eval()


@pytest.fixture(scope="module")
def cnv_dir(cnv_model, tmp_path_factory):
    folder = tmp_path_factory.mktemp("cnv") / "model"
    cnv_model.save_pretrained(folder)
    return folder


def test_encode_goes_through_the_encoder_of_the_language(cnv_model, newstest_lines):
    en, de = newstest_lines["en"][:12], newstest_lines["de"][:12]
    dim = cnv_model.config.embedding_size
    assert dim == 32  # "con": 2 heads x 16
    got_en = hf_tlaser.encode(cnv_model, None, en, lang="en", precision="fp32")
    got_de = hf_tlaser.encode(cnv_model, None, de, lang="de", precision="fp32")
    assert got_en.shape == got_de.shape == (12, dim) and got_en.dtype == np.float32
    np.testing.assert_allclose(got_en, cnv_model.encode(en, lang="en"), atol=1e-5)
    np.testing.assert_allclose(got_de, cnv_model.encode(de, cnv_model.get_tokenizer("de"), lang="de"), atol=1e-5)
    through_de = hf_tlaser.encode(cnv_model, None, en, lang="de", precision="fp32")
    assert not np.allclose(through_de, got_en, atol=1e-3)  # the other encoder and tokenizer: other vectors
    one = hf_tlaser.encode(cnv_model, None, de[0], lang="de", precision="fp32", normalize=True)
    assert one.shape == (dim,) and abs(np.linalg.norm(one) - 1) < 1e-5
    document = " ".join(de[:3])
    averaged = hf_tlaser.encode(cnv_model, None, [document], lang="de", documents=True, document_mode="sentences")
    expected = hf_tlaser.encode(cnv_model, None, hf_tlaser.encoding.split_sentences(document), lang="de").mean(0)
    np.testing.assert_allclose(averaged[0], expected, atol=1e-5)


def test_encode_language_mistakes(cnv_model, tokenizer, tiny_tlaser_kwargs):
    with pytest.raises(ValueError, match="no lang was given.*pass lang= one of en, de"):
        hf_tlaser.encode(cnv_model, None, ["Hallo"])
    with pytest.raises(ValueError, match="unknown lang 'fr'.*one of en, de"):
        hf_tlaser.encode(cnv_model, None, ["Bonjour"], lang="fr")
    tlaser = TLaserModel(TLaserConfig(**tiny_tlaser_kwargs))
    with pytest.raises(ValueError, match="one encoder for every language; leave lang out"):
        hf_tlaser.encode(tlaser, tokenizer, ["Hallo"], lang="de")


class LanguageTagged:
    """A per-language embedder: hashed character trigrams plus a one-hot of the language it was told."""

    per_language = True

    def __init__(self) -> None:
        self.calls: list[tuple[list[str], list[str]]] = []

    def __call__(self, texts: list[str], langs: list[str]) -> np.ndarray:
        self.calls.append((texts, langs))
        tags = np.array([[lang == code for code in LANGS] for lang in langs], dtype=np.float32)
        return np.concatenate([toy_embed(texts), tags], axis=1)


def test_suite_tells_per_language_embedders_each_text_language(data_dir):
    embed = LanguageTagged()
    result = evaluate_retrieval(embed, data_dir, sets=["ntrex128"], langs=LANGS, margins=["absolute"])
    (texts, langs), sentences = embed.calls[0], read_ntrex128(data_dir, LANGS)
    assert texts == sentences["en"] + sentences["de"] and langs == ["en"] * 1997 + ["de"] * 1997
    assert result.matrices["ntrex128"]["absolute"][0] == LANGS

    data = read_classification("sib200", data_dir, LANGS)
    embedded, _ = embed_classification(embed, data)
    texts, langs = embed.calls[1]
    start = 0
    for lang in LANGS:
        for split, part in data[lang].items():
            assert texts[start : start + len(part)] == part.texts and set(langs[start : start + len(part)]) == {lang}
            tags = embedded[lang][split][0][:, -2:]
            assert (tags == [lang == code for code in LANGS]).all(), (lang, split)
            start += len(part)
    assert start == len(texts)


@pytest.fixture()
def small_sets(monkeypatch):
    """The first 300 NTREX sentences, 100 texts of each SIB-200 split, a 16-dim tfidf-char reference: a few seconds
    of tiny-cNV encoding (its GRU is the slow part on CPU)."""

    def ntrex(data_dir, langs):
        return {lang: lines[:300] for lang, lines in read_ntrex128(data_dir, langs).items()}

    def sib200(data_dir, langs):
        data = read_sib200(data_dir, langs)
        return {
            lang: {k: LabeledSplit(s.texts[:100], s.labels[:100]) for k, s in d.items()} for lang, d in data.items()
        }

    monkeypatch.setitem(suite.RETRIEVAL_SETS, "ntrex128", (ntrex, suite.RETRIEVAL_SETS["ntrex128"][1]))
    monkeypatch.setitem(suite.CLASSIFICATION_SETS, "sib200", sib200)
    monkeypatch.setattr(cli, "lexical_reference", functools.partial(lexical_reference, svd_dim=16))


def test_evaluate_a_cnv_folder(cnv_dir, cnv_model, data_dir, small_sets, monkeypatch, tmp_path):
    calls: list[tuple[str, list[str]]] = []
    encode = hf_tlaser.encode

    def spy(model, tokenizer, texts, **kwargs):
        calls.append((kwargs.get("lang"), texts))
        return encode(model, tokenizer, texts, **kwargs)

    monkeypatch.setattr(hf_tlaser, "encode", spy)
    out = tmp_path / "eval"
    results = cli.evaluate_model(
        cnv_dir, ["retrieval", "sib200"], out, seeds=(0,), epochs=2, projection=None, retrieval_sets=("ntrex128",)
    )
    german = set(read_ntrex128(data_dir, ["de"])["de"][:300])
    ntrex_calls = [(lang, texts) for lang, texts in calls if len(texts) == 300]
    assert sorted(lang for lang, _ in ntrex_calls) == ["de", "de", "en", "en"]  # the model and its random init
    assert all((lang == "de") == (set(texts) == german) for lang, texts in ntrex_calls)

    assert results["retrieval"]["matrices"]["ntrex128"]["ratio"]["langs"] == LANGS
    assert results["retrieval"]["sizes"] == {"ntrex128": 300}
    assert set(results["references"]) == {"random init", "tfidf-char"}
    assert "NMT encoders' too" in results["references"]["random init"]["about"]
    for entry in (results, *results["references"].values()):
        assert np.asarray(entry["sib200"]["mean"]).shape == (2, 2)
        assert entry["retrieval"]["matrices"]["ntrex128"]["absolute"]["langs"] == LANGS
    evaluated = results["evaluated"]
    assert (evaluated["model"], evaluated["model_type"], evaluated["languages"]) == ("cNV(y)_con", "cnv", "en, de")
    assert evaluated["evaluation_languages"] == "en, de (the model's; not cs, es, fi, fr, it, ru, tr, zh)"
    assert evaluated["sentence_vector"] == "con (32 dimensions)"
    trainable = sum(p.numel() for p in cnv_model.parameters() if p.requires_grad)
    assert evaluated["trainable_parameters"] == trainable < evaluated["parameters"]

    table = (out / "report.md").read_text().split("## Results")[1].split("##")[0]
    for row in ("| cNV(y)_con |", "| random init (reference) |", "| tfidf-char (lexical reference) |"):
        assert row in table
    report = (out / "report.md").read_text()
    assert "| evaluation languages | en, de (the model's; not cs, es, fi, fr, it, ru, tr, zh) |" in report


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        (["--retrieval-sets", "tico19-test"], "retrieval set tico19-test has en, es, fr;"),
        (["--no-tokenizer"], "has no tokenizer_de/ (the tokenizer of its de encoder)"),
    ],
)
def test_cnv_usage_errors_end_in_one_line(extra, expected, cnv_dir, tmp_path, capsys):
    folder = cnv_dir
    if extra == ["--no-tokenizer"]:
        folder, extra = tmp_path / "model", []
        folder.mkdir()
        for name in ("config.json", "model.safetensors"):
            (folder / name).symlink_to(cnv_dir / name)
        (folder / "tokenizer_en").symlink_to(cnv_dir / "tokenizer_en")
    assert cli.main([str(folder), "--suite", "retrieval", "--output-dir", str(tmp_path / "out"), *extra]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("hf-tlaser evaluate: error: ") and expected in err[0]
    with pytest.raises(UsageError, match=r"languages \(en, pt\) include 1 of the evaluation languages"):
        evaluation_languages(["en", "pt"])  # zh is one since NTREX-128 has it
    assert evaluation_languages(["de", "en", "pt"]) == ["de", "en"]
    assert retrieval_sets_for(LANGS) == ("ntrex128", "flores-devtest", "ud-pud", "xed-dev")  # not TICO-19: no German


def test_card_and_push_of_a_cnv_folder(cnv_dir, cnv_model, tmp_path, monkeypatch, capsys):
    card = render_model_card(cnv_dir, "tester/tiny-cnv")
    meta = yaml.safe_load(card.split("---\n")[1])
    assert meta["language"] == LANGS and "sentence-transformers" not in meta["tags"]
    assert 'model.encode(["Wo ist der Bahnhof?"], lang="de", normalize=True)' in card
    assert "There is no sentence-transformers layout" in card and "SentenceTransformer(" not in card
    assert "2 context vectors concatenated, 32 dimensions" in card and "$" not in card

    monkeypatch.setenv("HF_TOKEN", "dummy-token")
    with HubServer() as hub:
        assert push_cli.main([str(cnv_dir), "tester/tiny-cnv", "--endpoint", hub.url, "--normalize"]) == 2
        assert hub.requests == []
        assert "a cNV folder has none" in capsys.readouterr().err
        assert push_cli.main([str(cnv_dir), "tester/tiny-cnv", "--endpoint", hub.url]) == 0
        repo = hub.repos["tester/tiny-cnv"]
        files = repo.commits[repo.branches["main"]]
        assert {"README.md", "model.safetensors", "tokenizer_en/tokenizer.json", "tokenizer_de/tokenizer.json"} <= set(
            files
        )
        assert "modules.json" not in files and b'lang="de"' in files["README.md"]
        hf_home = tmp_path / "hf_home"
        hf_home.mkdir()
        loaded = load_by_repo_id("tester/tiny-cnv", hub.url, hf_home)
    for lang in LANGS:
        expected = hf_tlaser.encode(cnv_model, None, CARD_TEXTS, lang=lang, autocast_dtype=None)
        np.testing.assert_allclose(np.array(loaded[lang]), expected, atol=1e-5, err_msg=lang)


LOAD_CNV = """
import json, sys
sys.modules["hf_tlaser"] = None  # the published repository must work without the package
from transformers import AutoModel

model = AutoModel.from_pretrained(sys.argv[1], trust_remote_code=True).eval()
texts = json.loads(sys.argv[2])
print("RESULT " + json.dumps({lang: model.encode(texts, lang=lang).tolist() for lang in model.languages}))
"""


def load_by_repo_id(repo_id: str, endpoint: str, hf_home) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGING"))}
    env.update(HF_ENDPOINT=endpoint, HF_HOME=str(hf_home), HF_TOKEN="dummy-token", HF_HUB_DISABLE_TELEMETRY="1")
    env.pop("PYTHONPATH", None)
    command = [sys.executable, "-c", LOAD_CNV, repo_id, json.dumps(CARD_TEXTS)]
    result = subprocess.run(command, env=env, cwd=hf_home, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-4000:]
    return json.loads(result.stdout.split("RESULT ", 1)[1])

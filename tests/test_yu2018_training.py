"""``hf-tlaser train --model yu2018`` end to end on real data (both directions and the similarity loss logged, the
loss falls, the folder loads as the sentence encoder), ``hf-tlaser evaluate`` on the result, the collator's
``src_lang`` option and the exit-2 usage errors."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest
import torch
from ddp_launch import launch_ddp

from hf_tlaser.data import TranslationCollator
from hf_tlaser.evaluation import cli as eval_cli
from hf_tlaser.evaluation import suite
from hf_tlaser.evaluation.readers import read_ntrex128
from hf_tlaser.evaluation.suite import lexical_reference
from hf_tlaser.hub.model_card import render_model_card
from hf_tlaser.tokenization import save_tokenizer
from hf_tlaser.training.cli import main
from hf_tlaser.training.presets import get_preset

TINY = ["embed_dim=32", "encoder_hidden_size=16", "hidden_size=32", "decoder_hidden_size=64"]
PARTS = {"loss_mt_per_token", "loss_sim", "mean_cosine", "centered_cosine", "tokens_per_second"}


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory, tokenizer) -> Path:
    folder = tmp_path_factory.mktemp("tok")
    save_tokenizer(tokenizer, folder)
    return folder


def yu_args(out: Path, tokenizer_dir: Path, *extra: str) -> list[str]:
    args = [
        "--model", "yu2018", "--preset", "tiny", "--corpora", "wmt-newstest-multiway", "--max-lines", "2000",
        "--tokenizer", str(tokenizer_dir), "--output-dir", str(out), "--max-tokens", "600", "--update-tokens", "600",
        "--warmup-updates", "5", "--learning-rate", "3e-3", "--logging-steps", "1", "--save-steps", "1000",
        "--precision", "fp32", "--seed", "3",
    ]  # fmt: skip
    return args + [f"--set={item}" for item in TINY] + list(extra)


@pytest.fixture(scope="module")
def yu_run(tmp_path_factory, tokenizer_dir) -> Path:
    out = tmp_path_factory.mktemp("yu2018") / "run"
    assert main(yu_args(out, tokenizer_dir, "--max-steps", "30")) == 0
    return out


def logged(out: Path) -> dict[int, dict]:
    history = json.loads((out / "trainer_state.json").read_text())["log_history"]
    return {entry["step"]: entry for entry in history if "loss" in entry}


def test_preset_follows_the_paper():
    paper = get_preset("yu2018", "paper")
    cfg = paper.make_config(paper.recipe.vocab_size)
    assert (cfg.vocab_size, cfg.encoder_hidden_size, cfg.hidden_size, cfg.decoder_hidden_size) == (
        85000,
        512,
        1024,
        1024,
    )
    for size in ("paper", "small", "tiny"):
        recipe = get_preset("yu2018", size).recipe
        assert recipe.max_grad_norm == 5.0 and recipe.batching == "pair", size
    tiny = get_preset("yu2018", "tiny")
    assert tiny.make_config(8000).hidden_size == 192  # LASER tiny's sentence-vector width (2 x 96)


def test_train_cli_loss_falls_on_real_data(yu_run):
    history = logged(yu_run)
    assert PARTS <= set(history[2]), set(history[2])
    # loss_mt: both directions' cross entropy per s->t target token (about 2 ln V at the start)
    first = sum(history[s]["loss_mt_per_token"] for s in (1, 2, 3)) / 3
    last = sum(history[s]["loss_mt_per_token"] for s in (28, 29, 30)) / 3
    assert first > 10 and last < first - 1.0, (first, last)
    record = json.loads((yu_run / "hf_tlaser_train.json").read_text())
    assert record["preset"] == "yu2018-tiny" and record["recipe"]["max_grad_norm"] == 5.0
    config = json.loads((yu_run / "config.json").read_text())
    assert config["model_type"] == "yu2018" and config["auto_map"]["AutoModel"] == "modeling_yu2018.Yu2018Model"
    assert (yu_run / "model.safetensors").exists() and (yu_run / "modules.json").exists()


def test_evaluate_on_the_trained_folder(yu_run, monkeypatch, tmp_path):
    def ntrex(data_dir, langs):
        return {lang: lines[:200] for lang, lines in read_ntrex128(data_dir, langs).items()}

    monkeypatch.setitem(suite.RETRIEVAL_SETS, "ntrex128", (ntrex, suite.RETRIEVAL_SETS["ntrex128"][1]))
    monkeypatch.setattr(eval_cli, "lexical_reference", functools.partial(lexical_reference, svd_dim=16))
    out = tmp_path / "eval"
    argv = [str(yu_run), "--suite", "retrieval", "--retrieval-sets", "ntrex128", "--output-dir", str(out)]
    assert eval_cli.main([*argv, "--projection", "none", "--precision", "fp32"]) == 0
    results = json.loads((out / "results.json").read_text())
    assert results["evaluated"]["model"] == "Yu 2018" and results["evaluated"]["model_type"] == "yu2018"
    assert results["retrieval"]["sizes"] == {"ntrex128": 200}
    assert set(results["references"]) == {"random init", "tfidf-char"}
    assert "| Yu 2018 |" in (out / "report.md").read_text()
    card = render_model_card(yu_run, results=results)
    assert "- yu2018" in card and "t-laser" not in card.split("---")[1] and "Yu, Katherin" in card
    assert "32-dim mean over the top encoder states" in card and "similarity loss" in card


def test_collator_adds_the_source_language_only_when_asked(tokenizer):
    items = [{"src_lang": "fr", "tgt_lang": "es", "src": "un jour", "tgt": "un día"}]
    plain = TranslationCollator(tokenizer, with_target_encoding=True)(items)
    assert "src_lang" not in plain  # T-LASER / LASER batches stay as they are
    batch = TranslationCollator(tokenizer, with_target_encoding=True, with_source_language=True)(items)
    assert batch["src_lang"].tolist() == [3] and batch["tgt_lang"].tolist() == [2]  # fr, es
    assert {key: value.tolist() for key, value in batch.items() if key != "src_lang"} == {
        key: value.tolist() for key, value in plain.items()
    }
    assert batch["src_lang"].dtype == torch.long


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        (
            ["--batching", "multiway"],
            "--batching multiway is an option of --model tlaser, ctlaser, laser1, laser6, claser6, "
            "not of --model yu2018",
        ),
        (["--set=pooling=cls"], "pooling='cls'"),
    ],
)
def test_usage_errors_end_in_one_line(extra, expected, tmp_path, tokenizer_dir, capsys):
    assert main(yu_args(tmp_path / "run", tokenizer_dir, "--max-steps", "2", *extra)) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert err[-1].startswith("hf-tlaser train: error: ") and expected in err[-1], err[-1]
    assert not any("Traceback" in line for line in err)


def test_trains_under_two_process_ddp(tmp_path, tokenizer_dir):
    """``accelerate launch`` with 2 CPU processes: each rank trains Yu 2018 on its own micro-batches and the weights
    stay identical across ranks."""
    out = tmp_path / "ddp"
    ranks = launch_ddp(out, yu_args(out, tokenizer_dir, "--max-steps", "2", "--update-tokens", "2000"))
    assert ranks[0]["world_size"] == 2 and ranks[0]["checksum"] == ranks[1]["checksum"]
    assert ranks[0]["seen"] != ranks[1]["seen"]  # each rank its own micro-batches

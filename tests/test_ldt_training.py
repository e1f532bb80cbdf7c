"""``hf-tlaser train --model ldt`` end to end on real data (loss parts logged, loss falls, the folder loads as the
sentence encoder), ``hf-tlaser evaluate`` and the model card on the result, and the exit-2 usage errors."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest
from ddp_launch import launch_ddp

from hf_tlaser.evaluation import cli as eval_cli
from hf_tlaser.evaluation import suite
from hf_tlaser.evaluation.readers import read_ntrex128
from hf_tlaser.evaluation.suite import lexical_reference
from hf_tlaser.hub.model_card import render_model_card
from hf_tlaser.tokenization import save_tokenizer
from hf_tlaser.training.cli import main

TINY = ["hidden_size=32", "num_attention_heads=4", "intermediate_size=64"]
PARTS = {"loss_smlm", "loss_xtr", "loss_align", "loss_sim", "mean_cosine", "centered_cosine", "tokens_per_second"}


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory, tokenizer) -> Path:
    folder = tmp_path_factory.mktemp("tok")
    save_tokenizer(tokenizer, folder)
    return folder


def ldt_args(out: Path, tokenizer_dir: Path, *extra: str) -> list[str]:
    args = [
        "--model", "ldt", "--preset", "tiny", "--corpora", "wmt-newstest-multiway", "--max-lines", "2000",
        "--tokenizer", str(tokenizer_dir), "--output-dir", str(out), "--max-tokens", "1000", "--update-tokens", "1000",
        "--warmup-updates", "5", "--learning-rate", "3e-3", "--logging-steps", "1", "--save-steps", "1000",
        "--precision", "fp32", "--seed", "3",
    ]  # fmt: skip
    return args + [f"--set={item}" for item in TINY] + list(extra)


@pytest.fixture(scope="module")
def ldt_run(tmp_path_factory, tokenizer_dir) -> Path:
    out = tmp_path_factory.mktemp("ldt") / "run"
    assert main(ldt_args(out, tokenizer_dir, "--max-steps", "30")) == 0
    return out


def logged(out: Path) -> dict[int, dict]:
    history = json.loads((out / "trainer_state.json").read_text())["log_history"]
    return {entry["step"]: entry for entry in history if "loss" in entry}


def test_train_cli_loss_falls_on_real_data(ldt_run):
    history = logged(ldt_run)
    assert PARTS <= set(history[2]), set(history[2])
    first = sum(history[s]["loss"] for s in (1, 2, 3)) / 3
    last = sum(history[s]["loss"] for s in (28, 29, 30)) / 3
    assert last < 0.85 * first, (first, last)
    xtr_first = sum(history[s]["loss_xtr"] for s in (1, 2, 3)) / 3
    xtr_last = sum(history[s]["loss_xtr"] for s in (28, 29, 30)) / 3
    assert xtr_last < xtr_first - 0.5, (xtr_first, xtr_last)  # the generative task learns, not only the contrast
    record = json.loads((ldt_run / "hf_tlaser_train.json").read_text())
    assert record["preset"] == "ldt-tiny" and record["recipe"]["learning_rate"] == 3e-3
    config = json.loads((ldt_run / "config.json").read_text())
    assert config["model_type"] == "ldt" and config["auto_map"]["AutoModel"] == "modeling_ldt.LDTModel"
    assert (ldt_run / "model.safetensors").exists() and (ldt_run / "modules.json").exists()


def test_evaluate_and_model_card_on_the_trained_folder(ldt_run, data_dir, monkeypatch, tmp_path):
    def ntrex(data_dir, langs):
        return {lang: lines[:200] for lang, lines in read_ntrex128(data_dir, langs).items()}

    monkeypatch.setitem(suite.RETRIEVAL_SETS, "ntrex128", (ntrex, suite.RETRIEVAL_SETS["ntrex128"][1]))
    monkeypatch.setattr(eval_cli, "lexical_reference", functools.partial(lexical_reference, svd_dim=16))
    out = tmp_path / "eval"
    argv = [str(ldt_run), "--suite", "retrieval", "--retrieval-sets", "ntrex128", "--output-dir", str(out)]
    assert eval_cli.main([*argv, "--projection", "none", "--precision", "fp32"]) == 0
    results = json.loads((out / "results.json").read_text())
    assert results["evaluated"]["model"] == "LDT" and results["evaluated"]["model_type"] == "ldt"
    assert results["retrieval"]["sizes"] == {"ntrex128": 200}
    assert set(results["references"]) == {"random init", "tfidf-char"}
    assert "| LDT |" in (out / "report.md").read_text()
    card = render_model_card(ldt_run, results=results)
    assert "- ldt" in card and "t-laser" not in card.split("---")[1]
    assert "mean of the final hidden states" in card and "Lightweight Cross-Lingual" in card


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        (["--set=generative_task=mass"], "generative_task='mass'"),
        (["--set=contrastive=1"], "unknown --set key 'contrastive'"),
        (
            ["--batching", "multiway"],
            "--batching multiway is an option of --model tlaser, ctlaser, laser1, laser6, claser6, not of --model ldt",
        ),
    ],
)
def test_usage_errors_end_in_one_line(extra, expected, tmp_path, tokenizer_dir, capsys):
    assert main(ldt_args(tmp_path / "run", tokenizer_dir, "--max-steps", "2", *extra)) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert err[-1].startswith("hf-tlaser train: error: ") and expected in err[-1], err[-1]
    assert not any("Traceback" in line for line in err)


def test_trains_under_two_process_ddp(tmp_path, tokenizer_dir):
    """``accelerate launch`` with 2 CPU processes: each rank trains LDT on its own micro-batches and the weights
    stay identical across ranks."""
    out = tmp_path / "ddp"
    ranks = launch_ddp(out, ldt_args(out, tokenizer_dir, "--max-steps", "2", "--update-tokens", "2000"))
    assert ranks[0]["world_size"] == 2 and ranks[0]["checksum"] == ranks[1]["checksum"]
    assert ranks[0]["seen"] != ranks[1]["seen"]  # each rank its own micro-batches

"""``hf-tlaser train --model ldt`` end to end on real data (loss parts logged, loss falls, the folder loads as the
sentence encoder), ``hf-tlaser evaluate`` and the model card on the result, and the exit-2 usage errors."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest
from ddp_launch import launch_ddp

from hf_tlaser.hub.model_card import render_model_card
from hf_tlaser.training.cli import main
from tests.test_train_cli_errors import one_error_line, usage_errors
from tests.tiny_models import check_ddp_ranks, check_saved_encoder, logged_steps, tiny_run_args

TINY = ["hidden_size=32", "num_attention_heads=4", "intermediate_size=64"]
PARTS = {"loss_smlm", "loss_xtr", "loss_align", "loss_sim", "mean_cosine", "centered_cosine", "tokens_per_second"}
ldt_args = functools.partial(tiny_run_args, "ldt", TINY)


@pytest.fixture(scope="module")
def ldt_run(tmp_path_factory, tokenizer_dir) -> Path:
    out = tmp_path_factory.mktemp("ldt") / "run"
    assert main(ldt_args(out, tokenizer_dir, "--max-steps", "30")) == 0
    return out


def test_train_cli_loss_falls_on_real_data(ldt_run):
    history = logged_steps(ldt_run)
    assert PARTS <= set(history[2]), set(history[2])
    first = sum(history[s]["loss"] for s in (1, 2, 3)) / 3
    last = sum(history[s]["loss"] for s in (28, 29, 30)) / 3
    assert last < 0.85 * first, (first, last)
    xtr_first = sum(history[s]["loss_xtr"] for s in (1, 2, 3)) / 3
    xtr_last = sum(history[s]["loss_xtr"] for s in (28, 29, 30)) / 3
    assert xtr_last < xtr_first - 0.5, (xtr_first, xtr_last)  # the generative task learns, not only the contrast
    record = json.loads((ldt_run / "hf_tlaser_train.json").read_text())
    assert record["preset"] == "ldt-tiny" and record["recipe"]["learning_rate"] == 3e-3
    check_saved_encoder(ldt_run, "ldt", "modeling_ldt.LDTModel")


def test_evaluate_and_model_card_on_the_trained_folder(ldt_run, evaluate_retrieval):
    results = evaluate_retrieval(ldt_run, "LDT", "ldt")
    card = render_model_card(ldt_run, results=results)
    assert "- ldt" in card and "t-laser" not in card.split("---")[1]
    assert "mean of the final hidden states" in card and "Lightweight Cross-Lingual" in card


@usage_errors(
    {
        "--set=generative_task=mass": "generative_task='mass'",
        "--set=contrastive=1": "unknown --set key 'contrastive'",
        "--batching multiway": "--batching multiway is an option of --model tlaser, ctlaser, laser1, laser6, claser6, "
        "not of --model ldt",
    }
)
def test_usage_errors_end_in_one_line(extra, expected, tmp_path, tokenizer_dir, capsys):
    line = one_error_line(capsys, main(ldt_args(tmp_path / "run", tokenizer_dir, "--max-steps", "2", *extra)))
    assert expected in line, line


def test_trains_under_two_process_ddp(tmp_path, tokenizer_dir):
    """``accelerate launch`` with 2 CPU processes: each rank trains LDT on its own micro-batches and the weights
    stay identical across ranks."""
    out = tmp_path / "ddp"
    check_ddp_ranks(launch_ddp(out, ldt_args(out, tokenizer_dir, "--max-steps", "2", "--update-tokens", "2000")))

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
from hf_tlaser.hub.model_card import render_model_card
from hf_tlaser.training.cli import main
from hf_tlaser.training.presets import get_preset
from tests.test_train_cli_errors import one_error_line, usage_errors
from tests.tiny_models import check_ddp_ranks, check_saved_encoder, logged_steps, tiny_run_args

TINY = ["embed_dim=32", "encoder_hidden_size=16", "hidden_size=32", "decoder_hidden_size=64"]
PARTS = {"loss_mt_per_token", "loss_sim", "mean_cosine", "centered_cosine", "tokens_per_second"}
yu_args = functools.partial(tiny_run_args, "yu2018", TINY, max_tokens=600)


@pytest.fixture(scope="module")
def yu_run(tmp_path_factory, tokenizer_dir) -> Path:
    out = tmp_path_factory.mktemp("yu2018") / "run"
    assert main(yu_args(out, tokenizer_dir, "--max-steps", "30")) == 0
    return out


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
    history = logged_steps(yu_run)
    assert PARTS <= set(history[2]), set(history[2])
    # loss_mt: both directions' cross entropy per s->t target token (about 2 ln V at the start)
    first = sum(history[s]["loss_mt_per_token"] for s in (1, 2, 3)) / 3
    last = sum(history[s]["loss_mt_per_token"] for s in (28, 29, 30)) / 3
    assert first > 10 and last < first - 1.0, (first, last)
    record = json.loads((yu_run / "hf_tlaser_train.json").read_text())
    assert record["preset"] == "yu2018-tiny" and record["recipe"]["max_grad_norm"] == 5.0
    check_saved_encoder(yu_run, "yu2018", "modeling_yu2018.Yu2018Model")


def test_evaluate_on_the_trained_folder(yu_run, evaluate_retrieval):
    results = evaluate_retrieval(yu_run, "Yu 2018", "yu2018")
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


@usage_errors(
    {
        "--batching multiway": "--batching multiway is an option of --model tlaser, ctlaser, laser1, laser6, claser6, "
        "not of --model yu2018",
        "--set=pooling=cls": "pooling='cls'",
    }
)
def test_usage_errors_end_in_one_line(extra, expected, tmp_path, tokenizer_dir, capsys):
    line = one_error_line(capsys, main(yu_args(tmp_path / "run", tokenizer_dir, "--max-steps", "2", *extra)))
    assert expected in line, line


def test_trains_under_two_process_ddp(tmp_path, tokenizer_dir):
    """``accelerate launch`` with 2 CPU processes: each rank trains Yu 2018 on its own micro-batches and the weights
    stay identical across ranks."""
    out = tmp_path / "ddp"
    check_ddp_ranks(launch_ddp(out, yu_args(out, tokenizer_dir, "--max-steps", "2", "--update-tokens", "2000")))

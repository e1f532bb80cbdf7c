"""Training: token-normalised loss under accumulation, resume after a kill, loss falls on real data, 2-process
DDP keeps ranks identical, the inverse-sqrt schedule."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import ddp_launch
import pytest
import torch
from safetensors import safe_open

from hf_tlaser import TLaserConfig, TLaserForTranslation, save_tokenizer
from hf_tlaser.data import TranslationCollator
from hf_tlaser.training.cli import parse_args, train
from hf_tlaser.training.trainer import LogParts, inverse_sqrt_schedule

TINY = [
    "hidden_size=32",
    "num_hidden_layers=2",
    "num_attention_heads=4",
    "intermediate_size=64",
    "decoder_attention_heads=4",
    "decoder_ffn_dim=64",
]


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory, tokenizer) -> Path:
    folder = tmp_path_factory.mktemp("tok")
    save_tokenizer(tokenizer, folder)
    return folder


def tiny_args(out: Path, tokenizer_dir: Path, *extra: str, model: str = "ctlaser") -> list[str]:
    args = [
        "--model", model, "--preset", "tiny", "--corpora", "wmt-newstest-multiway", "--max-lines", "400",
        "--tokenizer", str(tokenizer_dir), "--output-dir", str(out), "--max-tokens", "600",
        "--update-tokens", "1200", "--warmup-updates", "5", "--learning-rate", "3e-3", "--logging-steps", "1",
        "--seed", "3",
    ]  # fmt: skip
    return args + [f"--set={item}" for item in TINY] + list(extra)


def losses(out: str | Path, key: str = "loss") -> dict[int, float]:
    history = json.loads((Path(out) / "trainer_state.json").read_text())["log_history"]
    return {entry["step"]: entry[key] for entry in history if key in entry}


def test_inverse_sqrt_schedule_matches_fairseq():
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=5e-4)
    schedule = inverse_sqrt_schedule(optimizer, warmup_updates=4000, warmup_init_lr=1e-7)
    factors = [schedule.lr_lambdas[0](step) * 5e-4 for step in (0, 2000, 4000, 16000)]
    assert factors == pytest.approx([1e-7, 1e-7 + (5e-4 - 1e-7) / 2, 5e-4, 2.5e-4])


def test_inverse_sqrt_without_warmup_starts_at_the_peak():
    """``warmup_updates=0``: no warm-up; the peak lr at update 1, then ``lr / sqrt(update)`` (fairseq's formula with
    the warm-up length taken as 1; fairseq itself would train at lr 0)."""
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=5e-4)
    schedule = inverse_sqrt_schedule(optimizer, warmup_updates=0, warmup_init_lr=1e-7)
    factors = [schedule.lr_lambdas[0](step) for step in (0, 1, 4, 100)]
    assert factors == pytest.approx([1.0, 1.0, 0.5, 0.1])


def model_output(num_tokens: int, pairs: int, **parts: float) -> SimpleNamespace:
    """A micro-batch's model output: ``pairs`` sentence vectors, ``num_tokens`` target tokens and the ``parts``."""
    tensors = {name: torch.tensor(value) for name, value in parts.items()}
    return SimpleNamespace(num_tokens=torch.tensor(num_tokens), sentence_embedding=torch.zeros(pairs, 8), **tensors)


def test_log_parts_average_over_the_micro_batches_that_have_them():
    parts = LogParts()
    parts.add(model_output(10, 3, loss_mt=20.0, mean_cosine=0.9, centered_cosine=0.2, skipped_pair_losses=1))
    parts.add(model_output(30, 2, loss_mt=40.0, mean_cosine=0.7))
    logs = parts.flush(seconds=2.0)
    assert logs == pytest.approx(
        {
            "loss_mt_per_token": 1.5,
            "mean_cosine": 0.8,
            "centered_cosine": 0.2,
            "skipped_pair_losses": 1,
            "tokens_per_second": 20.0,
            "pairs": 5,
        }
    )
    assert not parts and parts.flush(seconds=1.0) == {}


def test_token_normalised_loss_is_split_invariant(tokenizer):
    """sum/N over the whole update: two half batches with num_items_in_batch = N give the full batch's gradient."""
    torch.manual_seed(0)
    model = TLaserForTranslation(TLaserConfig(vocab_size=len(tokenizer), **parse_set(TINY), dropout=0.0))
    collate = TranslationCollator(tokenizer)
    items = [
        {"src_lang": "de", "tgt_lang": "en", "src": s, "tgt": t}
        for s, t in [("die börse fällt", "stocks fall"), ("ein tag", "a day"), ("wir danken", "we thank you")]
    ]
    full = collate(items)
    total = int((full["labels"] != -100).sum())
    model(**full).loss.backward()
    expected = [p.grad.clone() for p in model.parameters() if p.grad is not None]
    model.zero_grad()
    for part in (items[:1], items[1:]):
        model(**collate(part), num_items_in_batch=total).loss.backward()
    got = [p.grad for p in model.parameters() if p.grad is not None]
    for a, b in zip(expected, got):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)


def parse_set(items: list[str]) -> dict:
    return {k: int(v) for k, v in (item.split("=") for item in items)}


def test_loss_falls_on_real_data(tmp_path, tokenizer_dir):
    out = Path(
        train(
            parse_args(tiny_args(tmp_path / "run", tokenizer_dir, "--max-steps", "30", "--save-steps", "1000"))
        ).args.output_dir
    )
    history = losses(out, "loss_mt_per_token")  # translation cross entropy per target token
    first, last = sum(history[s] for s in (1, 2, 3)) / 3, sum(history[s] for s in (28, 29, 30)) / 3
    assert last < first - 0.4, (first, last)
    state = json.loads((out / "trainer_state.json").read_text())["log_history"]
    logged = next(e for e in state if e.get("step") == 2 and "loss" in e)
    assert {"loss_mt_per_token", "d_p", "hinge", "v_norm", "mean_cosine", "tokens_per_second"} <= set(logged)
    assert (out / "model.safetensors").exists() and (out / "tokenizer.json").exists()


def test_killed_run_resumes_with_the_same_losses(tmp_path, tokenizer_dir):
    full = train(parse_args(tiny_args(tmp_path / "full", tokenizer_dir, "--max-steps", "6", "--save-steps", "3")))
    expected = losses(full.args.output_dir)
    killed = tmp_path / "killed"
    cmd = [sys.executable, "-m", "hf_tlaser.training.cli", *tiny_args(killed, tokenizer_dir, "--max-steps", "500")]
    proc = subprocess.Popen(
        [*cmd, "--save-steps", "3", "--save-total-limit", "1000"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    checkpoint = killed / "checkpoint-3"
    deadline = time.monotonic() + 240
    while not (checkpoint / "trainer_state.json").exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(0.5)  # let the checkpoint's last files land
    proc.kill()  # SIGKILL: no clean shutdown
    _, stderr = proc.communicate()
    assert (checkpoint / "trainer_state.json").exists(), stderr.decode()[-3000:]
    assert not (killed / "model.safetensors").exists()  # the run never finished
    resumed_args = tiny_args(
        killed, tokenizer_dir, "--max-steps", "6", "--save-steps", "3", "--resume", str(checkpoint)
    )
    resumed = train(parse_args(resumed_args))
    got = losses(resumed.args.output_dir)
    for step in (4, 5, 6):
        assert got[step] == pytest.approx(expected[step], rel=1e-5), (step, got, expected)


def test_two_process_ddp_keeps_ranks_identical(tmp_path, tokenizer_dir):
    sums = launch_ddp(tmp_path / "ddp", tokenizer_dir, "--max-steps", "3", "--save-steps", "1000")
    assert sums[0]["world_size"] == sums[1]["world_size"] == 2
    assert sums[0]["checksum"] == sums[1]["checksum"]
    assert sums[0]["batches"] != sums[1]["batches"]  # each rank trained on its own micro-batches


def launch_ddp(out: Path, tokenizer_dir: Path, *extra: str) -> list[dict]:
    """Train the tiny cT-LASER under 2-process gloo DDP with ddp_worker.py; returns each rank's record."""
    return ddp_launch.launch_ddp(out, tiny_args(out, tokenizer_dir, *extra))


def test_ddp_resume_past_an_epoch_boundary_continues_the_data_order(tmp_path, tokenizer_dir):
    """A 2-process run resumed mid-epoch 1 trains on the same micro-batches, step by step, as the uninterrupted run
    on every rank (before the fix, the resumed sampler replayed epoch 0)."""
    small = ("--max-lines", "60", "--pairs", "de-en,en-es", "--save-steps", "5", "--save-total-limit", "10")
    full = launch_ddp(tmp_path / "full", tokenizer_dir, "--max-steps", "7", *small)
    per_epoch = full[0]["micro_batches_per_epoch"] // full[0]["accumulation"]
    assert 0 < per_epoch < 5 and 5 % per_epoch, per_epoch  # the checkpoint lies inside epoch >= 1
    checkpoint = tmp_path / "full" / "checkpoint-5"
    resumed = launch_ddp(tmp_path / "resumed", tokenizer_dir, "--max-steps", "7", *small, "--resume", str(checkpoint))
    for rank in (0, 1):
        expected = [tuple(item) for item in full[rank]["seen"] if item[0] >= 5]
        assert [tuple(item) for item in resumed[rank]["seen"]] == expected, rank
    assert resumed[0]["checksum"] == resumed[1]["checksum"] == full[0]["checksum"]


def test_streaming_resume_continues_the_stream(tmp_path, tokenizer_dir):
    """``--streaming``: a run resumed from a checkpoint reads on from its saved stream state and reproduces the
    uninterrupted run's next losses."""
    streaming = ["--streaming", "--shuffle-buffer", "100", "--max-lines", "150", "--max-steps", "6"]
    full = train(parse_args(tiny_args(tmp_path / "full", tokenizer_dir, *streaming, "--save-steps", "3")))
    checkpoint = tmp_path / "full" / "checkpoint-3"
    state = json.loads((checkpoint / "stream_state_rank0.json").read_text())
    assert state["batches"] == 3 * full.args.gradient_accumulation_steps
    shutil.copytree(checkpoint, tmp_path / "resumed" / "checkpoint-3")
    resumed = train(parse_args(tiny_args(tmp_path / "resumed", tokenizer_dir, *streaming, "--resume", "auto")))
    expected, got = losses(full.args.output_dir), losses(resumed.args.output_dir)
    for step in (4, 5, 6):
        assert got[step] == pytest.approx(expected[step], rel=1e-5), (step, got, expected)


def test_resume_restores_the_negative_memory(tmp_path, tokenizer_dir):
    """``--set negative_memory_size``: the checkpoint carries the memory, and a resumed run reproduces the
    uninterrupted run's next losses; without the memory file it does not (the memory matters to the loss)."""
    memory = ["--set=negative_memory_size=64", "--max-steps", "6", "--save-total-limit", "10"]
    full = train(parse_args(tiny_args(tmp_path / "full", tokenizer_dir, *memory, "--save-steps", "3")))
    checkpoint = tmp_path / "full" / "checkpoint-3"
    assert (checkpoint / "negative_memory_rank0.safetensors").is_file()
    expected = losses(full.args.output_dir)
    for name, keep in (("resumed", True), ("refilled", False)):
        shutil.copytree(checkpoint, tmp_path / name / "checkpoint-3")
        if not keep:
            (tmp_path / name / "checkpoint-3" / "negative_memory_rank0.safetensors").unlink()
        resumed = train(parse_args(tiny_args(tmp_path / name, tokenizer_dir, *memory, "--resume", "auto")))
        got = losses(resumed.args.output_dir)
        same = [got[step] == pytest.approx(expected[step], rel=1e-5) for step in (4, 5, 6)]
        assert all(same) if keep else not any(same), (name, got, expected)
    saved = safe_open(tmp_path / "full" / "model.safetensors", "pt").keys()
    assert saved and not any("negative_memory" in key for key in saved)  # the published model carries no memory


def test_two_process_ddp_streaming(tmp_path, tokenizer_dir):
    """``--streaming`` under 2-process DDP: every rank reads its own share of the groups, the weights stay identical,
    each rank's stream state lands in the checkpoint."""
    out = tmp_path / "ddp"
    streaming = ("--streaming", "--shuffle-buffer", "100")
    sums = launch_ddp(out, tokenizer_dir, *streaming, "--max-steps", "2", "--save-steps", "2")
    assert sums[0]["world_size"] == sums[1]["world_size"] == 2 and sums[0]["batches"] is None
    assert sums[0]["checksum"] == sums[1]["checksum"]
    assert not {fp for _, fp in sums[0]["seen"]} & {fp for _, fp in sums[1]["seen"]}
    states = [json.loads((out / "checkpoint-2" / f"stream_state_rank{r}.json").read_text()) for r in (0, 1)]
    assert [(s["rank"], s["world_size"]) for s in states] == [(0, 2), (1, 2)]

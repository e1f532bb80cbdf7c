"""The GPU session's CPU-side parts: the benchmarks' ``--device`` / ``--presets`` paths at smoke size on the CPU, the
GPU line of the report header (from a made-up GPU's facts), and ``scripts/gpu_session.py summary``. Nothing here
needs a GPU; ``scripts/gpu_session.sh --size tiny`` (minutes) is the end-to-end check and is not run here."""

from __future__ import annotations

import json
import math

import pytest
import torch

from benchmarks import training_speed
from benchmarks.__main__ import check_benchmark_devices, main, render_markdown
from benchmarks.common import check_device, train_dtype_names
from hf_tlaser.hardware import configure_threads
from tests.scripts import load_script


def _gpu_session():
    return load_script("gpu_session")


def test_device_checks():
    assert check_device("cpu") == "cpu"
    with pytest.raises(ValueError, match="unknown device"):
        check_device("tpu")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="no CUDA device"):
            check_device("cuda")
    assert set(check_benchmark_devices([1, 2, 3], "cuda")) == {1, 2, 3}
    with pytest.raises(ValueError, match=r"benchmark\(s\) 4, 7 time CPU-side work.*--only 1 runs on it"):
        check_benchmark_devices([1, 4, 7], "cuda")
    assert train_dtype_names("cpu")[0] == "fp32"


def test_cuda_flag_refused_without_a_gpu(capsys, monkeypatch):
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is visible")
    monkeypatch.setattr(torch, "set_num_threads", lambda n: None)
    with pytest.raises(SystemExit):
        main(["--size", "smoke", "--only", "1", "--device", "cuda"])
    assert "no CUDA device" in capsys.readouterr().err


def test_preset_section_on_cpu():
    threads = torch.get_num_threads()
    configure_threads(1)
    try:
        data, md = training_speed.run_preset("smoke", "paper", "cpu")
    finally:
        configure_threads(threads)
    assert set(data["parameters"]) == set(training_speed.MODELS) and data["device"] == "cpu"
    assert all(v > 0 and math.isfinite(v) for v in data["tokens_per_second"]["fp32"].values())
    assert "Preset `paper`" in md and "shrunk for a smoke check" in md


def test_gpu_header_names_device_driver_and_peak():
    info = {
        "cpu": "x",
        "cpu_capability": "AVX2",
        "bf16": "emulated",
        "cpu_bf16_native": False,
        "precision auto": "fp32 (auto: ...)",
        "device": "cuda (NVIDIA H100 80GB HBM3)",
        "nvidia_driver": "580.159.04",
        "torch_cuda": "13.0",
        "gpu_capability": "9.0",
        "gpu_bf16": "native",
        "gpu matmul 8192^3 bf16 TFLOP/s": 790.5,
    }
    header = render_markdown([], info, "python -m benchmarks --device cuda", "full").split("## Machine")[0]
    assert "GPU: cuda (NVIDIA H100 80GB HBM3), NVIDIA driver 580.159.04, CUDA 13.0" in header
    assert "790.5 TFLOP/s (8192^3 bf16" in header
    cpu_only = {k: v for k, v in info.items() if not k.startswith(("device", "nvidia", "torch_cuda", "gpu"))}
    assert "GPU:" not in render_markdown([], cpu_only, "python -m benchmarks", "full")


def test_session_summary(tmp_path):
    gpu_session = _gpu_session()
    bench = {
        "machine": {"device": "cuda (GPU)", "gpu matmul 8192^3 bf16 TFLOP/s": 700.0},
        "benchmarks": [
            {
                "number": 1,
                "targets": [{"name": "tlaser/laser6 tokens/s (bf16)", "value": 2.5, "passed": True}],
                "data": {"paper_preset": {"tokens_per_second": {"bf16": {"tlaser": 1e5, "laser6": 4e4}}}},
            },
            {
                "number": 2,
                "targets": [{"name": "ctlaser cost, pair mode", "value": 0.3, "passed": False}],
                "data": {"small_preset": {"tokens_per_second": {"pair/tlaser": 9e4}, "cost": {"pair": 0.3}}},
            },
        ],
    }
    (tmp_path / "BENCHMARKS.json").write_text(json.dumps(bench))
    (tmp_path / "distributed.json").write_text(json.dumps({"fsdp": {"exit": 0, "fsdp_active": True}}))
    text = gpu_session.summary(tmp_path)
    assert (tmp_path / "SUMMARY.md").read_text() == text
    assert "1. paper_preset tok/s: bf16/tlaser 100,000, bf16/laser6 40,000" in text
    assert "2. ctlaser cost, pair mode: 0.3 (MISSED)" in text and "pair/tlaser 90,000; cost pair 30.0 %" in text
    assert "fsdp_active" in text and "## Training and evaluation\n\n- not run" in text
    assert "## Release recipe" not in text
    (tmp_path / "release.json").write_text(json.dumps({"train_seconds": 335, "exit": 0}))
    assert "## Release recipe\n\n- train_seconds: 335\n- exit: 0" in gpu_session.summary(tmp_path)


def test_archive_split_into_parts_that_each_travel_and_restore_it(tmp_path, monkeypatch):
    gpu_session = _gpu_session()
    mib = gpu_session.MIB
    monkeypatch.setattr(gpu_session, "CARRY_LIMIT_MIB", 4)  # 4 MiB may travel: 1 to spare, 1 for the tree
    monkeypatch.setattr(gpu_session, "tree_size", lambda: mib)
    wheels = tmp_path / "carry" / "wheels"
    wheels.mkdir(parents=True)
    (wheels / "a.whl").write_bytes(b"w" * (mib // 2))
    archive = tmp_path / "data.tar.xz"
    archive.write_bytes(bytes(range(256)) * (5 * mib // 256 + 7))
    (tmp_path / "carry" / "part9").mkdir()  # a stale part of an earlier split
    assert gpu_session.split(archive, tmp_path / "carry", wheels) == 0
    parts = sorted((tmp_path / "carry").glob("part*/*"))
    assert [p.parent.name for p in parts] == ["part1", "part2", "part3"]
    assert [p.stat().st_size for p in parts[:2]] == [mib + mib // 2, 2 * mib]  # part1 leaves room for the wheels
    assert b"".join(p.read_bytes() for p in parts) == archive.read_bytes()


def test_wheels_asked_for_leave_out_torch_and_the_package_itself():
    gpu_session = _gpu_session()
    names = {
        gpu_session.canonical(r.split("[")[0].split(">")[0].split("=")[0].strip()) for r in gpu_session.requirements()
    }
    assert {"transformers", "faiss-cpu", "pytest"} <= names
    assert not names & {"torch", "hf-tlaser"}  # the dev extra's hf_tlaser[openvino]: pip cannot fetch the package


def test_the_stages_records_are_subcommands(tmp_path):
    """The records ``gpu_session.sh`` wrote with five inline Python heredocs are ``gpu_session.py`` subcommands (issue
    49): a JSON note, the dist stage's facts of a run, the train stage's checkpoint spacing, the finish stage's
    ``train.json``, all from made-up run folders."""
    gpu_session = _gpu_session()
    notes = tmp_path / "distributed.json"
    assert gpu_session.main(["note", str(notes), "deepspeed", '"skipped"']) == 0
    assert gpu_session.note(notes, "procs", "2") == {"deepspeed": "skipped", "procs": 2}  # JSON where it is JSON
    run = tmp_path / "run"
    (run / "checkpoint-20").mkdir(parents=True)
    (run / "checkpoint-10").mkdir()
    (run / "pytorch_model_fsdp_0").mkdir()
    (run / "model.safetensors").write_bytes(b"")
    history = [
        {"loss": 4.0, "tokens_per_second": 100.0, "pairs": 30},
        {"loss": 3.0, "tokens_per_second": 300.0, "pairs": 34},
        {"loss": 2.5, "tokens_per_second": 200.0, "pairs": 36},
        {"train_runtime": 12.5},
    ]
    (run / "trainer_state.json").write_text(json.dumps({"global_step": 30, "log_history": history}))
    log = tmp_path / "dist.log"
    log.write_text("using FullyShardedDataParallel\nValueError: late\nRuntimeError: last one\n")
    facts = gpu_session.dist_facts(notes, "fsdp", run, 0, 41, log)
    assert facts["updates"] == 30 and facts["loss_first_last"] == [4.0, 2.5] and facts["tokens_per_second_last"] == 200
    assert facts["checkpoints"] == ["checkpoint-10", "checkpoint-20"] and facts["fsdp_active"]
    assert not facts["deepspeed_active"] and facts["saved_model"] == ["model.safetensors"]
    assert facts["log_mentions"]["FullyShardedDataParallel"] and not facts["log_mentions"]["DeepSpeed"]
    assert facts["last_error"] == "RuntimeError: last one"
    assert json.loads(notes.read_text())["fsdp"] == facts and json.loads(notes.read_text())["procs"] == 2
    bench = tmp_path / "BENCHMARKS.json"
    assert gpu_session.save_steps(bench, 60) == 250  # no bench stage
    tps = {"small_preset": {"tokens_per_second": {"pair/ctlaser": 32000 / 0.7}}}  # 60 updates a minute
    bench.write_text(json.dumps({"benchmarks": [{"number": 2, "data": tps}]}))
    assert gpu_session.save_steps(bench, 60) == 300 and gpu_session.save_steps(bench, 1) == 25
    results = tmp_path / "eval" / "results.json"
    results.parent.mkdir()
    results.write_text("{}")
    data = gpu_session.train_facts(tmp_path / "train.json", run, results)
    assert (data["updates"], data["pairs_seen"], data["loss_first_last"]) == (30, 100, [4.0, 2.5])
    assert (data["train_runtime_s"], data["tokens_per_second_median"], data["checkpoints"]) == (12.5, 200.0, 2)
    assert data["evaluate_results"] == "eval/results.json"
    (run / "trainer_state.json").rename(run / "checkpoint-20" / "trainer_state.json")  # killed: its last checkpoint
    assert gpu_session.train_facts(tmp_path / "again.json", run, results)["updates"] == 30
    env = gpu_session.environment(tmp_path / "environment.json", "pip", f"{torch.__version__}", "0.0", "tiny", "d")
    assert env["torch_matches_pin"] is False and env["hf_tlaser"] is not None and env["size"] == "tiny"

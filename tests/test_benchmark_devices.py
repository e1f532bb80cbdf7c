"""The GPU session's CPU-side parts: the benchmarks' ``--device`` / ``--presets`` paths at smoke size on the CPU, the
GPU line of the report header (from a made-up GPU's facts), and ``scripts/gpu_session.py`` (the package
``scripts/gpu``): its records, and the session's stages (``run``: flags, deadline, command lines, time limits,
publishing). Nothing here needs a GPU; ``scripts/gpu_session.sh --size tiny`` (minutes) is the end-to-end check and is
not run here."""

from __future__ import annotations

import importlib
import json
import math
import os
import subprocess
import tarfile
import time
from pathlib import Path
from types import ModuleType

import pytest
import torch

from benchmarks import training_speed
from benchmarks.__main__ import check_benchmark_devices, main, render_markdown
from benchmarks.common import check_device, train_dtype_names
from hf_tlaser.hardware import configure_threads
from tests.scripts import load_script


def _gpu() -> ModuleType:
    """The package ``scripts/gpu``, its modules loaded: ``scripts/gpu_session.py`` (its command line), loaded, puts it
    on sys.path and imports them."""
    load_script("gpu_session")
    return importlib.import_module("gpu")


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
    gpu = _gpu()
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
    text = gpu.records.summary(tmp_path)
    assert (tmp_path / "SUMMARY.md").read_text() == text
    assert "1. paper_preset tok/s: bf16/tlaser 100,000, bf16/laser6 40,000" in text
    assert "2. ctlaser cost, pair mode: 0.3 (MISSED)" in text and "pair/tlaser 90,000; cost pair 30.0 %" in text
    assert "fsdp_active" in text and "## Training and evaluation\n\n- not run" in text
    assert "## Release recipe" not in text
    (tmp_path / "release.json").write_text(json.dumps({"train_seconds": 335, "exit": 0}))
    assert "## Release recipe\n\n- train_seconds: 335\n- exit: 0" in gpu.records.summary(tmp_path)


def test_archive_split_into_parts_that_each_travel_and_restore_it(tmp_path, monkeypatch):
    gpu = _gpu()
    mib = gpu.carry.MIB
    monkeypatch.setattr(gpu.carry, "CARRY_LIMIT_MIB", 4)  # 4 MiB may travel: 1 to spare, 1 for the tree
    monkeypatch.setattr(gpu.carry, "tree_size", lambda: mib)
    wheels = tmp_path / "carry" / "wheels"
    wheels.mkdir(parents=True)
    (wheels / "a.whl").write_bytes(b"w" * (mib // 2))
    archive = tmp_path / "data.tar.xz"
    archive.write_bytes(bytes(range(256)) * (5 * mib // 256 + 7))
    (tmp_path / "carry" / "part9").mkdir()  # a stale part of an earlier split
    assert gpu.carry.split(archive, tmp_path / "carry", wheels) == 0
    parts = sorted((tmp_path / "carry").glob("part*/*"))
    assert [p.parent.name for p in parts] == ["part1", "part2", "part3"]
    assert [p.stat().st_size for p in parts[:2]] == [mib + mib // 2, 2 * mib]  # part1 leaves room for the wheels
    assert b"".join(p.read_bytes() for p in parts) == archive.read_bytes()


def test_wheels_asked_for_leave_out_torch_and_the_package_itself():
    gpu = _gpu()
    names = {
        gpu.wheels.canonical(r.split("[")[0].split(">")[0].split("=")[0].strip()) for r in gpu.wheels.requirements()
    }
    assert {"transformers", "faiss-cpu", "pytest"} <= names
    assert not names & {"torch", "hf-tlaser"}  # the dev extra's hf_tlaser[openvino]: pip cannot fetch the package


def test_the_stages_records_are_subcommands(tmp_path):
    """The records ``gpu_session.sh`` wrote with five inline Python heredocs are ``gpu_session.py`` subcommands (issue
    49): a JSON note, the dist stage's facts of a run, the train stage's checkpoint spacing, the finish stage's
    ``train.json``, all from made-up run folders."""
    gpu = _gpu()
    notes = tmp_path / "distributed.json"
    assert gpu.cli.main(["note", str(notes), "deepspeed", '"skipped"']) == 0
    assert gpu.records.note(notes, "procs", "2") == {"deepspeed": "skipped", "procs": 2}  # JSON where it is JSON
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
    facts = gpu.records.dist_facts(notes, "fsdp", run, 0, 41, log)
    assert facts["updates"] == 30 and facts["loss_first_last"] == [4.0, 2.5] and facts["tokens_per_second_last"] == 200
    assert facts["checkpoints"] == ["checkpoint-10", "checkpoint-20"] and facts["fsdp_active"]
    assert not facts["deepspeed_active"] and facts["saved_model"] == ["model.safetensors"]
    assert facts["log_mentions"]["FullyShardedDataParallel"] and not facts["log_mentions"]["DeepSpeed"]
    assert facts["last_error"] == "RuntimeError: last one"
    assert json.loads(notes.read_text())["fsdp"] == facts and json.loads(notes.read_text())["procs"] == 2
    bench = tmp_path / "BENCHMARKS.json"
    assert gpu.records.save_steps(bench, 60) == 250  # no bench stage
    tps = {"small_preset": {"tokens_per_second": {"pair/ctlaser": 32000 / 0.7}}}  # 60 updates a minute
    bench.write_text(json.dumps({"benchmarks": [{"number": 2, "data": tps}]}))
    assert gpu.records.save_steps(bench, 60) == 300 and gpu.records.save_steps(bench, 1) == 25
    results = tmp_path / "eval" / "results.json"
    results.parent.mkdir()
    results.write_text("{}")
    data = gpu.records.train_facts(tmp_path / "train.json", run, results)
    assert (data["updates"], data["pairs_seen"], data["loss_first_last"]) == (30, 100, [4.0, 2.5])
    assert (data["train_runtime_s"], data["tokens_per_second_median"], data["checkpoints"]) == (12.5, 200.0, 2)
    assert data["evaluate_results"] == "eval/results.json"
    (run / "trainer_state.json").rename(run / "checkpoint-20" / "trainer_state.json")  # killed: its last checkpoint
    assert gpu.records.train_facts(tmp_path / "again.json", run, results)["updates"] == 30
    env = gpu.records.environment(tmp_path / "environment.json", "pip", f"{torch.__version__}", "0.0", "tiny", "d")
    assert env["torch_matches_pin"] is False and env["hf_tlaser"] is not None and env["size"] == "tiny"


# ------------------------------------------------------------------------ the session's stages (gpu_session.py run)


def _session(tmp_path, *flags, now=None):
    """A ``Session`` for ``flags`` (scripts/gpu_session.sh's command line), its work and $OUT under ``tmp_path``."""
    gpu = _gpu()
    args = gpu.cli.session_parser().parse_args(list(flags))
    environ = {"HF_TLASER_GPU_WORK": str(tmp_path / "work"), "OUT": str(tmp_path / "out")}
    session = gpu.session.Session(args, environ, now=now or (lambda: 1000.0))
    for folder in (session.results, session.logs, session.out):
        folder.mkdir(parents=True, exist_ok=True)
    return gpu, session


def test_session_flags_profiles_and_deadline(tmp_path):
    """The shell script's flags as they were: sizes, the default deadline per size, the work and out folders, the
    stages `all` stands for; the deadline in whole seconds, each command capped 20 s before it."""
    gpu, full = _session(tmp_path)
    assert full.stages == ["setup", "bench", "dist", "train", "finish"] and full.profile.device == "cuda"
    assert (full.deadline_minutes, full.train_minutes, full.save_steps, full.python) == (9.5, "10", None, "python3")
    assert full.out == tmp_path / "out" and full.run_dir == tmp_path / "work" / "train" / "ctlaser-small"
    _, tiny = _session(tmp_path, "--size", "tiny", "--stages", "negatives", "--deadline-minutes", "8.8")
    assert tiny.stages == ["negatives"] and tiny.profile.device == "cpu" and tiny.save_steps == "3"
    assert tiny.clock.deadline - tiny.clock.start == 528 and tiny.python == "python"
    _, flags = _session(tmp_path, "--train-minutes", "4", "--wait-minutes", "6", "--save-steps", "40", "--out", "o")
    assert (flags.train_minutes, flags.wait_minutes, flags.save_steps, flags.out.name) == ("4", 6.0, "40", "o")
    for bad in (["--size", "huge"], ["--train-minutes", "x"], ["--unknown"]):
        with pytest.raises(SystemExit):
            gpu.cli.session_parser().parse_args(bad)
    assert gpu.profiles.work_dir("tiny", {"TMPDIR": "/t"}) == Path("/t/hf_tlaser_gpu_tiny")
    assert gpu.profiles.work_dir("full", {}) == Path("/tmp/hf_tlaser_gpu")
    assert gpu.profiles.work_dir("full", {"HF_TLASER_GPU_WORK": ""}) == Path("/tmp/hf_tlaser_gpu")
    t = [100.7]
    clock = gpu.profiles.Clock(9.5, now=lambda: t[0])
    assert (clock.start, clock.deadline) == (100, 670)
    t[0] = 130.2
    assert clock.left() == 540 and clock.cap(480) == 480 and clock.cap(600) == 520  # 20 s kept to publish
    t[0] = 700.0
    assert clock.left() == -30 and clock.cap(600) == -50 and clock.elapsed() == 600
    assert gpu.profiles.negatives_stop(700, 360) == "5.7" and gpu.profiles.negatives_stop(300, 360) == "0.5"


def test_session_runs_named_stages_in_order_while_time_is_left(tmp_path, monkeypatch, capsys):
    t = [1000.0]
    gpu, session = _session(tmp_path, "--stage", "bench,setup,nope,train,finish", now=lambda: t[0])
    ran = []

    def stage(name, seconds=0):
        def run():
            ran.append(name)
            t[0] += seconds

        return run

    monkeypatch.setattr(session, "stage_setup", stage("setup"))
    monkeypatch.setattr(session, "stage_bench", stage("bench", 9.5 * 60 - 40))  # leaves 40 s: train still starts
    monkeypatch.setattr(session, "stage_train", stage("train", 15))  # leaves 25 s: no finish
    monkeypatch.setattr(session, "stage_finish", stage("finish"))
    monkeypatch.setattr(session, "publish", lambda: ran.append("publish"))
    session.run_stages()
    assert ran == ["setup", "bench", "publish", "train", "publish"]
    out = capsys.readouterr().out
    assert "unknown stage nope" in out and "no time left in this call for stage finish" in out

    def broken():
        raise RuntimeError("a bug")

    t[0] = 1000.0
    monkeypatch.setattr(session, "stage_bench", broken)
    ran.clear()
    session.run_stages()  # a stage that raises costs neither the others nor the publishing
    assert ran[:3] == ["setup", "publish", "train"] and "RuntimeError" in (session.logs / "gpu_session.log").read_text()


def test_negatives_and_levers_command_lines(tmp_path, monkeypatch):
    """Issue 53's six runs and the levers: each one's updates and training flags, and the commands they run."""
    gpu, session = _session(tmp_path)
    runs = gpu.profiles.negative_runs(session.profile, "5.7")
    cut = ["--max-minutes", "5.7"]
    assert runs == [
        ("plain", 200, cut),
        ("big", 200, cut + ["--max-tokens", "32000", "--update-tokens", "32000"]),
        ("acc", 200, cut + ["--max-tokens", "4000", "--update-tokens", "32000"]),
        ("mid", 200, cut + ["--max-tokens", "8000", "--update-tokens", "8000"]),
        ("plain-long", 2000, cut),
        ("big-long", 62, cut + ["--max-tokens", "32000", "--update-tokens", "32000"]),
    ]
    tiny = gpu.profiles.negative_runs(gpu.profiles.PROFILES["tiny"], "0.5")
    assert [(n, u) for n, u, _ in tiny][-1] == ("big-long", 2) and tiny[2][2][-3:] == ["500", "--update-tokens", "2000"]
    start = tmp_path / "e5"
    assert gpu.profiles.lever_runs(session.profile, start) == [
        ("batch2x", 250, ["--update-tokens", "2000"]),
        ("distill100", 500, ["--teacher", str(start), "--distill-weight", "100"]),
        ("distill1000", 500, ["--teacher", str(start), "--distill-weight", "1000"]),
    ]
    monkeypatch.setenv("HF_TLASER_DATA", "/d")
    train = session.lever_train_command("big", 200, runs[1][2], "a,b")
    assert train[:5] == ["nice", "-n", "10", "python3", "-m"] and train[-6:] == runs[1][2]
    flags = dict(zip(train[7::2], train[8::2]))
    assert flags["--corpora"] == "a,b" and flags["--init-from"] == "/d/multilingual-e5-small"
    assert flags["--max-steps"] == "200" and flags["--output-dir"] == str(session.work / "levers" / "big")
    evaluate = session.lever_eval_command("big", session.work / "levers" / "big", ["ntrex128", "ud-pud"])
    m30k = "/d/multi30k/task1-raw/test_2016_flickr"
    assert f"files:cs={m30k}.cs.gz:de={m30k}.de.gz:en={m30k}.en.gz:fr={m30k}.fr.gz" in evaluate
    assert evaluate[evaluate.index("--retrieval-sets") + 1 : evaluate.index("--retrieval-sets") + 3] == [
        "ntrex128",
        "ud-pud",
    ]
    assert evaluate[-5:] == ["--no-references", "--seeds", "0", "--output-dir", str(session.work / "levers/big-eval")]
    corpora, sets = gpu.profiles.release_facts()
    assert "europarl-v2-it-en" in corpora and "ntrex128" in sets


def test_bench_dist_train_and_release_command_lines(tmp_path, monkeypatch):
    gpu, session = _session(tmp_path)
    assert session.bench_command()[3:] == [
        *("--size", "full", "--only", "1", "2", "3", "--device", "cuda", "--presets", "small", "paper"),
        *("--output", str(session.results / "BENCHMARKS.md")),
    ]
    out = tmp_path / "fsdp"
    fsdp = gpu.profiles.accelerate_command("py", session.profile, ["--config_file", "c.yaml"], "bf16", out)
    assert fsdp[:5] == ["py", "-m", "accelerate.commands.launch", "--config_file", "c.yaml"]
    assert fsdp[fsdp.index("--mixed_precision") + 1] == "bf16" and fsdp[fsdp.index("--num_processes") + 1] == "1"
    assert fsdp[-4:] == ["--precision", "bf16", "--output-dir", str(out)] and "--max-lines" in fsdp
    tiny = gpu.profiles.accelerate_command("py", gpu.profiles.PROFILES["tiny"], [], "fp32", out)
    assert tiny[tiny.index("--mixed_precision") + 1] == "no" and tiny[tiny.index("--num_processes") + 1] == "2"
    assert gpu.profiles.launcher_env(1, 29501) == {
        **{"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29501"},
        **{"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "LOCAL_WORLD_SIZE": "1"},
    }
    assert "RANK" not in gpu.profiles.launcher_env(2, 29501)
    monkeypatch.setattr(session, "precision", lambda: "bf16")
    train = session.train_command("250")
    # --save-steps before the run folder (after it, REMAINDER would pass it to hf-tlaser train)
    assert train[2:7] == ["train", "--save-steps", "250", str(session.run_dir), "--"]
    assert train[-4:] == ["--max-minutes", "10", "--precision", "bf16"]
    monkeypatch.setenv("HF_TLASER_DATA", "/d")
    _, small = _session(tmp_path, "--size", "tiny")
    release = small.release_command()
    assert release[release.index("--") :] == ["--", "--save-total-limit", "100", "--save-steps", "2"]
    assert release[2:6] == ["--output", str(small.work / "release"), "--data-dir", "/d"]


def test_publish_at_most_eight_flat_files(tmp_path, capsys, monkeypatch):
    gpu, session = _session(tmp_path)
    assert len(gpu.call.PUBLISHED + gpu.call.ARCHIVES) <= gpu.call.OUT_FILES_MAX
    work = session.work
    (session.results / "environment.json").write_text('{"size": "full"}')
    (session.results / "BENCHMARKS.md").write_text("# bench")
    (session.results / "train.json").write_text("{}")
    (session.results / "release.json").write_text('{"exit": 0}')
    (session.logs / "bench.log").write_text("log")
    session.run_dir.mkdir(parents=True)
    (session.run_dir / "curve.json").write_text("{}")
    (work / "eval").mkdir()
    (work / "eval" / "results.json").write_text("{}")
    (work / "release" / "eval").mkdir(parents=True)
    (work / "release" / "eval" / "results.json").write_text("{}")
    (work / "release" / "model.safetensors").write_bytes(b"weights stay on the machine")
    for lever in ("plain", "big"):
        (work / "levers" / lever).mkdir(parents=True)
        (work / "levers" / lever / "results.json").write_text("{}")
    (work / "levers" / "big" / "train_log.jsonl").write_text("{}")
    published = session.publish()
    names = sorted(p.name for p in session.out.iterdir())
    assert names == sorted(p.name for p in published)
    assert names == ["BENCHMARKS.md", "SUMMARY.md", "environment.json", "logs.tar.gz", "results.tar.gz"]
    with tarfile.open(session.out / "results.tar.gz") as tar:
        members = set(tar.getnames())
    assert members == {
        "results/train.json",
        "train/ctlaser-small/curve.json",
        "eval",
        "eval/results.json",
        "results/release.json",
        "release/eval/results.json",
        "levers/big/results.json",
        "levers/plain/results.json",
        "levers/big/train_log.jsonl",
    }
    with tarfile.open(session.out / "logs.tar.gz") as tar:
        assert {"logs/bench.log", "logs/publish.log"} <= set(tar.getnames())
    assert "## Release recipe" in (session.out / "SUMMARY.md").read_text()
    assert "published 5 files" in capsys.readouterr().out
    monkeypatch.setattr(gpu.call, "OUT_FILE_LIMIT", 100)
    for extra in range(4):
        (session.out / f"stale{extra}").write_text("x")
    session.publish()
    out = capsys.readouterr().out
    assert "BENCHMARKS.md is over" not in out and "SUMMARY.md is over 0 MiB" in out
    assert "9 files in" in out and "more than the 8 that come back" in out


def test_commands_run_with_time_limits(tmp_path, monkeypatch, capsys):
    """A command's exit status and output, a command over its limit stopped (its process group), and none started
    when the call has no time left for it."""
    gpu = _gpu()
    log = tmp_path / "a.log"
    assert gpu.processes.run_limited(["sh", "-c", "echo one; exit 3"], log, 10) == 3
    assert gpu.processes.run_limited(["sh", "-c", "echo two"], log, 10, env={"X": "1"}) == 0
    assert log.read_text() == "one\ntwo\n"
    assert gpu.processes.run_limited(["sh", "-c", 'echo "$X"'], log, 10, env={"X": "x"}, append=False) == 0
    assert log.read_text() == "x\n"
    monkeypatch.setattr(gpu.processes, "KILL_AFTER", 1)
    begin = time.monotonic()
    assert gpu.processes.run_limited(["sh", "-c", "sleep 30 & sleep 30"], log, 0.3) == 124
    assert gpu.processes.run_limited(["sh", "-c", "trap '' TERM; sleep 30"], log, 0.3) == 137
    assert time.monotonic() - begin < 10
    assert gpu.processes.exit_status(-15) == 143
    t = [1000.0]
    _, session = _session(tmp_path, "--deadline-minutes", "1", now=lambda: t[0])
    assert session.limit(600, log, ["sh", "-c", "printf 'a\\rb\\n\\nc\\n'"]) == 0  # limit: 60 - 20 s
    out = capsys.readouterr().out
    assert "(limit 40s, log" in out and out.endswith("a\nb\nc\n")
    t[0] += 36  # 24 s left: 4 to run
    assert session.limit(600, log, ["sh", "-c", "echo ran"]) == 124
    assert "no time left for: sh -c echo ran" in log.read_text() and "ran" not in log.read_text().splitlines()


def test_session_helpers(tmp_path):
    """The tiny corpora, the run's progress line, checkpoints in number order, log tails, processes' liveness."""
    gpu = _gpu()
    data = tmp_path / "data"
    for folder in ("ntrex128", "sib200/eng_Latn", "multi30k"):
        (data / folder).mkdir(parents=True)
    lines = "".join(f"{i}\n" for i in range(400)).encode()
    for name in ("ntrex128/newstest.eng.txt", "ntrex128/DOCUMENT_IDS.tsv", "multi30k/a.txt"):
        (data / name).write_bytes(lines)
    for name in ("train.tsv", "dev.tsv", "test.tsv"):
        (data / "sib200" / "eng_Latn" / name).write_bytes(lines)
    (data / "ntrex128").chmod(0o555)
    (data / "ntrex128" / "newstest.eng.txt").chmod(0o444)
    tiny = tmp_path / "tiny"
    gpu.data.make_tiny_data(data, tiny)
    gpu.data.make_tiny_data(data, tiny)  # made again over the first
    count = {p.relative_to(tiny).as_posix(): len(p.read_bytes().splitlines()) for p in tiny.rglob("*.t*")}
    assert count["ntrex128/newstest.eng.txt"] == count["ntrex128/DOCUMENT_IDS.tsv"] == 300
    sib = [count[f"sib200/eng_Latn/{n}.tsv"] for n in ("train", "dev", "test")]
    assert sib == [141, 31, 71] and (tiny / "multi30k").is_symlink() and (tiny / ".made").is_file()
    assert len((data / "ntrex128" / "newstest.eng.txt").read_bytes().splitlines()) == 400  # the source stays whole
    (data / "ntrex128").chmod(0o755)
    run = tmp_path / "run"
    for step in (9, 12, 3):
        (run / f"checkpoint-{step}").mkdir(parents=True)
    assert [p.name for p in gpu.records.checkpoints(run)] == ["checkpoint-3", "checkpoint-9", "checkpoint-12"]
    train_log = tmp_path / "train.log"
    assert gpu.processes.progress(train_log, run) == "no update logged yet | checkpoints: 3"
    train_log.write_text("{'loss': 5.0, 'pairs': 1}\r{'loss': '4.2', 'grad_norm': 1.0, 'pairs': 35, 'epoch': 0.01}\n")
    assert gpu.processes.progress(train_log, run) == "loss: 4.2 pairs: 35 epoch: 0.01 | checkpoints: 3"
    text = "a\r\nrelease: one\n\nError x\nrelease: two\nlast " + "y" * 300
    assert gpu.processes.last_lines(text, 3, 240)[-1] == "last " + "y" * 235
    assert gpu.processes.last_lines(text, 3, 99, r"^release:|Error") == ["release: one", "Error x", "release: two"]
    done = subprocess.Popen(["true"])
    time.sleep(0.2)
    assert not gpu.processes.alive(done.pid) and gpu.processes.alive(os.getpid())
    assert not gpu.processes.alive(0)
    constraints = tmp_path / "constraints.txt"
    constraints.write_text("numpy==2.0\ntorch==2.13.0 ; sys_platform == 'linux'  # the GPU machine's own\n")
    assert gpu.profiles.torch_pin(constraints) == "2.13.0"


def test_the_shell_script_is_a_thin_wrapper(tmp_path):
    """``scripts/gpu_session.sh`` keeps its command line and its documented recipes; what it runs is
    ``gpu_session.py run``."""
    gpu = _gpu()
    script = (gpu.carry.ROOT / "scripts" / "gpu_session.sh").read_text()
    code = [line for line in script.splitlines() if line.strip() and not line.startswith("#")]
    assert code[-1] == 'exec "${PYTHON:-python3}" scripts/gpu_session.py run "$@"' and len(code) <= 4
    for recipe in ("--prepare-release", "HF_TLASER_DATA=/tmp bash", "--stage release --deadline-minutes 9.2"):
        assert recipe in script
    done = subprocess.run(
        ["bash", str(gpu.carry.ROOT / "scripts/gpu_session.sh"), "--help"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0 and done.stdout.startswith("One GPU lease, run-ready")
    assert "--fetch-wheels [DIR]" in done.stdout
    assert gpu.cli.prepare_steps(True)[0] == ["fetch-wheels", ".gpu_carry/wheels", "--no-deepspeed"]
    assert [step[0] for step in gpu.cli.prepare_steps(False)] == ["fetch-wheels", "pack-data", "carry-size"]

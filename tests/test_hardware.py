"""``hf_tlaser.hardware``: the precision decision for every kind of device, the bf16 probe and its cache, CPU counts,
and a real AVX2-only CPU (oneDNN and ATen limited to AVX2 in a subprocess)."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap

import pytest
import torch

from hf_tlaser import hardware
from hf_tlaser.hardware import PRECISIONS, PrecisionChoice, choose_precision

AVX2_ENV = {"ONEDNN_MAX_CPU_ISA": "AVX2", "ATEN_CPU_CAPABILITY": "avx2"}
NATIVE = dict(cpu_capability="AVX512", cpu_bf16_native=True)
EMULATING = dict(cpu_capability="AVX2", cpu_bf16_native=False)


# ------------------------------------------------------------------------------------------------ choose_precision


@pytest.mark.parametrize(
    ("device", "facts", "expected", "in_reason"),
    [
        ("cuda", dict(cuda_bf16=True), "bf16", "with native bf16"),
        ("cuda:1", dict(cuda_bf16=False), "fp16", "without native bf16"),
        ("mps", {}, "fp32", "MPS"),
        ("cpu", dict(**NATIVE, probe_speedup=4.4), "bf16", "CPU reports AVX512 with native bf16 (probe: bf16 matmul"),
        ("cpu", dict(**NATIVE, probe_speedup=0.8), "fp32", "probe found bf16 slower (probe: bf16 matmul 0.8x"),
        ("cpu", dict(**NATIVE, probe_speedup=None), "fp32", "the probe did not run"),
        ("cpu", dict(cpu_capability="AMX", cpu_bf16_native=True, probe_speedup=9.0), "bf16", "AMX"),
        ("cpu", dict(**EMULATING, probe_speedup=1 / 70), "fp32", "without native bf16"),
        ("cpu", dict(cpu_capability="AVX512", cpu_bf16_native=False, probe_speedup=2.0), "fp32", "emulated"),
        ("cpu", dict(cpu_capability="DEFAULT", cpu_bf16_native=True, probe_speedup=2.0), "fp32", "DEFAULT"),
    ],
)
def test_auto(device, facts, expected, in_reason):
    choice = choose_precision("auto", device, **facts)
    assert choice.precision == expected and choice.requested == "auto"
    assert choice.device == device.split(":")[0]
    assert choice.reason.startswith("auto: ") and in_reason in choice.reason, choice.reason
    assert not choice.emulated


def test_auto_reason_example():
    choice = choose_precision("auto", "cpu", **NATIVE, probe_speedup=4.4)
    assert choice.reason == "auto: CPU reports AVX512 with native bf16 (probe: bf16 matmul 4.4x fp32)"
    assert choice.slowdown == pytest.approx(1 / 4.4)


HARDWARE = {
    "cuda-bf16": ("cuda", dict(cuda_bf16=True), False),
    "cuda-old": ("cuda", dict(cuda_bf16=False), True),
    "mps": ("mps", {}, False),
    "cpu-native": ("cpu", dict(**NATIVE, probe_speedup=3.0), False),
    "cpu-native-bad-probe": ("cpu", dict(**NATIVE, probe_speedup=0.5), False),
    "cpu-emulating": ("cpu", dict(**EMULATING, probe_speedup=1 / 70), True),
}


@pytest.mark.parametrize("hardware_name", HARDWARE)
@pytest.mark.parametrize("requested", ["fp32", "bf16", "fp16"])
def test_explicit_choice_is_kept(requested, hardware_name):
    device, facts, bf16_emulated = HARDWARE[hardware_name]
    choice = choose_precision(requested, device, **facts)
    assert (choice.precision, choice.requested, choice.device) == (requested, requested, device)
    assert choice.reason.startswith(f"{requested} requested")
    assert choice.emulated == (requested == "bf16" and bf16_emulated)


def test_emulated_bf16_on_cpu_records_slowdown():
    choice = choose_precision("bf16", "cpu", **EMULATING, probe_speedup=1 / 70)
    assert choice.emulated and choice.slowdown == pytest.approx(70.0)
    assert "probe: bf16 matmul 0.014x fp32" in choice.reason


def test_unknown_values():
    with pytest.raises(ValueError, match=r"precision='int8'; expected one of \('auto', 'fp32', 'bf16', 'fp16'\)"):
        choose_precision("int8", "cpu")
    with pytest.raises(ValueError, match="precision="):
        hardware.resolve_precision("FP32", "cpu")
    with pytest.raises(ValueError, match="device 'xla'"):
        choose_precision("auto", "xla")


def test_precision_choice_properties():
    expected = {
        "fp32": (None, False, False),
        "bf16": (torch.bfloat16, True, False),
        "fp16": (torch.float16, False, True),
    }
    for precision, (dtype, bf16, fp16) in expected.items():
        choice = PrecisionChoice(precision, "auto", "cpu", "why")
        assert (choice.autocast_dtype, choice.bf16, choice.fp16) == (dtype, bf16, fp16)
    assert PRECISIONS == ("auto", "fp32", "bf16", "fp16")
    choice = choose_precision("bf16", "cpu", **EMULATING, probe_speedup=0.02)
    assert choice.to_dict() == {
        "precision": "bf16",
        "requested": "bf16",
        "device": "cpu",
        "reason": choice.reason,
        "emulated": True,
        "slowdown": pytest.approx(50.0),
    }
    json.dumps(choice.to_dict())
    with pytest.raises(AttributeError):
        choice.precision = "fp32"


# ------------------------------------------------------------------------------------------------ resolve_precision


@pytest.fixture()
def emulating_cpu(monkeypatch):
    """This process looks like an AVX2-only CPU whose bf16 matmul is 70x slower than fp32."""
    monkeypatch.setattr(hardware, "default_device", lambda: torch.device("cpu"))
    monkeypatch.setattr(hardware, "cpu_capability", lambda: "AVX2")
    monkeypatch.setattr(hardware, "cpu_bf16_native", lambda: False)
    monkeypatch.setattr(hardware, "probe_bf16_speedup", lambda: 1 / 70)


def test_emulation_warning(emulating_cpu, caplog):
    with caplog.at_level(logging.WARNING, logger="hf_tlaser.hardware"):
        choice = hardware.resolve_precision("bf16")
    assert choice.bf16 and choice.emulated and choice.slowdown == pytest.approx(70.0)
    assert caplog.messages == [
        "bf16 on this CPU is emulated (AVX2 only): about 70x slower than fp32; use --precision fp32 or auto"
    ]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="hf_tlaser.hardware"):
        assert hardware.resolve_precision("auto").precision == "fp32"
        assert hardware.resolve_precision("fp32", "cpu").precision == "fp32"
    assert caplog.messages == []
    with caplog.at_level(logging.WARNING, logger="hf_tlaser.hardware"):
        assert hardware.resolve_precision("fp16", torch.device("cpu")).fp16
    assert len(caplog.messages) == 1 and "fp16 on CPU" in caplog.messages[0]


def test_resolve_native_cpu_uses_probe(monkeypatch):
    monkeypatch.setattr(hardware, "cpu_capability", lambda: "AVX512")
    monkeypatch.setattr(hardware, "cpu_bf16_native", lambda: True)
    for speedup, expected in ((3.0, "bf16"), (0.7, "fp32")):
        monkeypatch.setattr(hardware, "probe_bf16_speedup", lambda s=speedup: s)
        assert hardware.resolve_precision("auto", "cpu").precision == expected


@pytest.fixture()
def fresh_probe(monkeypatch, tmp_path):
    """The probe with an empty per-process cache, a fake matmul (bf16 2x fp32) and its disk cache under tmp_path."""
    calls = []

    def fake_gflops():
        calls.append(1)
        return {torch.float32: 50.0, torch.bfloat16: 100.0}

    monkeypatch.setattr(hardware, "matmul_gflops", fake_gflops)
    monkeypatch.setenv("HF_TLASER_CACHE", str(tmp_path / "cache"))
    hardware.probe_bf16_speedup.cache_clear()
    yield calls
    hardware.probe_bf16_speedup.cache_clear()


def test_probe_cached_in_process_and_on_disk(fresh_probe, tmp_path):
    threads = torch.get_num_threads()
    assert hardware.probe_bf16_speedup() == 2.0 and torch.get_num_threads() == threads  # probed on one thread
    assert hardware.probe_bf16_speedup() == 2.0 and len(fresh_probe) == 1  # functools.cache
    stored = json.loads((tmp_path / "cache" / "precision_probe.json").read_text())
    (key,) = stored
    assert stored[key] == 2.0 and hardware.cpu_model() in key and torch.__version__ in key
    hardware.probe_bf16_speedup.cache_clear()
    assert hardware.probe_bf16_speedup() == 2.0 and len(fresh_probe) == 1  # read back from disk


def test_probe_survives_unwritable_cache(fresh_probe, tmp_path, monkeypatch):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    monkeypatch.setenv("HF_TLASER_CACHE", str(blocker / "cache"))  # mkdir below a file fails
    assert hardware.probe_bf16_speedup() == 2.0
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / "precision_probe.json").write_text("{not json")
    monkeypatch.setenv("HF_TLASER_CACHE", str(tmp_path / "cache"))
    hardware.probe_bf16_speedup.cache_clear()
    assert hardware.probe_bf16_speedup() == 2.0  # a corrupt cache is rewritten


def test_matmul_gflops():
    gflops = hardware.matmul_gflops(size=64, reps=1, min_seconds=0)
    assert set(gflops) == {torch.float32, torch.bfloat16} and all(v > 0 for v in gflops.values())


# ------------------------------------------------------------------------------------------------ devices, CPUs


def test_default_device(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    assert hardware.default_device() == torch.device("cpu")
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    assert hardware.default_device() == torch.device("mps")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert hardware.default_device() == torch.device("cuda")


def _affinity() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def test_available_cpus_cgroup_and_omp(tmp_path, monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    empty = tmp_path / "none"
    empty.mkdir()
    assert hardware.available_cpus(empty) == _affinity()
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)), raising=False)

    v2 = tmp_path / "v2"
    v2.mkdir()
    (v2 / "cpu.max").write_text("150000 100000\n")  # 1.5 CPUs -> 2
    assert hardware.available_cpus(v2) == 2
    (v2 / "cpu.max").write_text("max 100000\n")
    assert hardware.available_cpus(v2) == 8
    (v2 / "cpu.max").write_text("50000 100000\n")  # half a CPU -> at least 1
    assert hardware.available_cpus(v2) == 1

    v1 = tmp_path / "v1" / "cpu"
    v1.mkdir(parents=True)
    (v1 / "cpu.cfs_quota_us").write_text("300000\n")
    (v1 / "cpu.cfs_period_us").write_text("100000\n")
    assert hardware.available_cpus(v1.parent) == 3
    (v1 / "cpu.cfs_quota_us").write_text("-1\n")
    assert hardware.available_cpus(v1.parent) == 8

    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert hardware.available_cpus(empty) == 1
    monkeypatch.setenv("OMP_NUM_THREADS", "64")  # never more than the CPUs there are
    assert hardware.available_cpus(v2) == 1


def test_configure_threads(monkeypatch):
    previous = torch.get_num_threads()
    try:
        assert hardware.configure_threads(1) == 1 and torch.get_num_threads() == 1
        monkeypatch.setattr(hardware, "available_cpus", lambda: 2)
        assert hardware.configure_threads() == 2 and torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(previous)


def test_environment_report():
    report = hardware.environment_report()
    for key in ("torch", "transformers", "python", "device", "cpu_model", "cpu_capability", "cpu_bf16_native"):
        assert key in report, key
    assert report["torch"] == torch.__version__ and report["precision"] in PRECISIONS[1:]
    assert report["precision_reason"].startswith("auto: ") and report["torch_threads"] >= 1
    json.dumps(report)


# ------------------------------------------------------------------------------------------------ AVX2-only CPU


AVX2_SCRIPT = textwrap.dedent(
    """
    import logging
    import torch
    from hf_tlaser import hardware
    from hf_tlaser.models.laser import LaserConfig, LaserForTranslation

    torch.set_num_threads(1)
    assert torch.backends.cpu.get_cpu_capability() == "AVX2"
    assert not torch.ops.mkldnn._is_mkldnn_bf16_supported()
    # the failure this guards against: a plain nn.LSTM under bf16 autocast has no oneDNN kernel here
    try:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            torch.nn.LSTM(4, 4)(torch.randn(3, 2, 4))
        raise SystemExit("expected the oneDNN LSTM error")
    except RuntimeError as error:
        assert "primitive descriptor" in str(error), error

    assert hardware.resolve_precision("auto", "cpu").precision == "fp32"
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    choice = hardware.resolve_precision("bf16", "cpu")
    assert choice.emulated and choice.slowdown > 2, choice

    torch.manual_seed(0)
    config = LaserConfig(vocab_size=50, embed_dim=8, lstm_hidden_size=8, decoder_hidden_size=16, lang_embed_dim=4,
                         num_layers=2, max_position_embeddings=16)
    model = LaserForTranslation(config)
    ids = torch.tensor([[3, 10, 11, 12, 2], [3, 13, 14, 2, 0]])
    labels = torch.tensor([[20, 21, 2], [22, 2, -100]])
    with torch.autocast("cpu", dtype=choice.autocast_dtype):
        out = model(input_ids=ids, attention_mask=ids.ne(0).long(), tgt_input_ids=ids,
                    tgt_attention_mask=ids.ne(0).long(), labels=labels, tgt_lang="en")
    out.loss.backward()
    assert torch.isfinite(out.loss) and model.decoder.lstm.weight_hh_l0.grad.abs().sum() > 0
    print("OK", choice.slowdown)
    """
)


def test_laser_bf16_autocast_on_avx2_only_cpu(tmp_path):
    env = {**os.environ, **AVX2_ENV, "HF_TLASER_CACHE": str(tmp_path)}
    result = subprocess.run(
        [sys.executable, "-c", AVX2_SCRIPT], env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    assert result.stdout.startswith("OK")
    assert "bf16 on this CPU is emulated (AVX2 only): about " in result.stderr

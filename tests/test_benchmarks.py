"""Smoke test of the benchmark suite: every benchmark at the ``smoke`` size, the report and its JSON, and the bf16
rows on a CPU that only emulates bf16 (reported as "emulated", never timed nor compared with a target).

Checks structure only (finite numbers, positive ratios, files written); no timing is asserted. Passes natively and
under ``ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2`` (an AVX2-only CPU).
"""

from __future__ import annotations

import json
import math

import pytest
import torch

from benchmarks import BENCHMARKS, common, flops
from benchmarks.__main__ import main, render_markdown, run_benchmarks
from benchmarks.common import EMULATED, BenchResult, machine_info
from hf_tlaser.hardware import PrecisionChoice, configure_threads, cpu_capability

EMULATING = common.cpu_bf16().emulated


def _numbers(value):
    if isinstance(value, bool):
        return
    if isinstance(value, (int, float)):
        yield float(value)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _numbers(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _numbers(item)


@pytest.fixture(scope="module")
def results() -> list[BenchResult]:
    threads = torch.get_num_threads()
    configure_threads(1)  # tiny ops: one thread avoids oversubscription on a busy machine
    try:
        yield run_benchmarks("smoke")
    finally:
        configure_threads(threads)


def test_every_benchmark_runs(results):
    assert [r.number for r in results] == sorted(BENCHMARKS)
    for r in results:
        assert r.markdown.strip() and r.title
        numbers = list(_numbers(r.data))
        assert numbers and all(math.isfinite(x) for x in numbers), r.number
        for target in r.targets:
            assert math.isfinite(target.value)
        if any(not t.passed for t in r.targets):
            assert r.profile and "Self CPU" in r.profile
        json.dumps(r.to_json())


def test_ratios_positive(results):
    by_number = {r.number: r.data for r in results}
    speeds = by_number[1]["tokens_per_second"]
    assert all(v > 0 for per_dtype in speeds.values() for v in per_dtype.values())
    assert all(r > 0 for r in by_number[1]["ratio_tlaser_over_laser6"].values())
    assert set(by_number[1]["parameters"]) == {"tlaser", "laser6", "laser1"}
    assert all(c < 1 for c in by_number[2]["cost"].values())
    assert by_number[3]["speedup_vs_sentence_transformers"] > 0
    for number in (1, 4):
        assert "fp32" not in by_number[number]["emulated_dtypes"]


@pytest.mark.skipif(EMULATING, reason=f"CPU capability {cpu_capability()}: bf16 is emulated, not timed")
def test_bf16_measured_where_native(results):
    by_number = {r.number: r.data for r in results}
    assert 0 < by_number[3]["min_cosine_vs_fp32"]["bf16 autocast"] <= 1 + 1e-6
    assert set(by_number[1]["tokens_per_second"]) == {"fp32", "bf16"} and not by_number[1]["emulated_dtypes"]
    assert set(by_number[4]["peak_flops"]) == {"fp32", "bf16"}


@pytest.fixture(scope="module")
def emulated_results(results) -> list[BenchResult]:
    """The smoke results as an emulating CPU gets them: this CPU's own where it emulates bf16; elsewhere a second
    run with the bf16 choice of an AVX2-only CPU (so the path runs on every CPU class)."""
    if EMULATING:
        yield results
        return
    emulated = PrecisionChoice("bf16", "bf16", "cpu", "test: AVX2 only, bf16 emulated", emulated=True, slowdown=70.0)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(common, "cpu_bf16", lambda: emulated)
        threads = torch.get_num_threads()
        configure_threads(1)
        try:
            yield run_benchmarks("smoke", only=[1, 3, 4, 5])
        finally:
            configure_threads(threads)


def test_bf16_reported_emulated_where_not_native(emulated_results):
    by_number = {r.number: r.data for r in emulated_results}
    assert by_number[3]["bf16_emulated"] and "bf16 autocast" not in by_number[3]["min_cosine_vs_fp32"]
    assert by_number[1]["emulated_dtypes"] == by_number[4]["emulated_dtypes"] == ["bf16"]
    assert all("bf16" not in t.name for r in emulated_results for t in r.targets)
    assert all(e > 0 for per_dtype in by_number[4]["efficiency"].values() for e in per_dtype.values())
    docs = by_number[5]["documents"]
    assert all(d["ms"] > 0 and d["peak_mib"] >= 0 for d in docs.values())


def test_report_written(results, tmp_path, monkeypatch):
    info = machine_info(256)
    assert info["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert isinstance(info["cpu_bf16_native"], bool) and info["bf16"] in ("native", EMULATED)
    assert info["matmul 256x256 fp32 GFLOP/s"] > 0 and info["matmul 256x256 bf16 GFLOP/s"] > 0
    assert info["precision auto"].split()[0] in ("fp32", "bf16") and "(auto: " in info["precision auto"]
    text = render_markdown(results, info, "python -m benchmarks --size smoke", "smoke")
    for r in results:
        assert f"## {r.number}. {r.title}" in text
    assert "## Machine" in text and torch.__version__ in text
    assert f"capability {info['cpu_capability']}, bf16 {info['bf16']}" in text.split("## Machine")[0]
    assert f"| cpu_bf16_native | {info['cpu_bf16_native']} |" in text

    # the CLI path end to end on the cheapest benchmark
    monkeypatch.setattr(torch, "set_num_threads", lambda n: None)
    out = tmp_path / "BENCH.md"
    assert main(["--size", "smoke", "--only", "4", "--output", str(out), "--threads", "1"]) == 0
    assert "## 4." in out.read_text()
    payload = json.loads(out.with_suffix(".json").read_text())
    assert payload["size"] == "smoke" and payload["benchmarks"][0]["number"] == 4
    # the trained model's backends section (scripts/bench_backends.py) survives a rewrite of the report
    section = (
        "## 8. Inference backends: a table\n\n<!-- backends:start -->\n| a | b |\n<!-- backends:end -->\n\n"
        "### Other models\n\n<!-- compare:start -->\n| c | d |\n<!-- compare:end -->"
    )
    out.write_text(out.read_text() + "\n" + section + "\n")
    assert main(["--size", "smoke", "--only", "4", "--output", str(out), "--threads", "1"]) == 0
    assert out.read_text().count(section) == 1 and "## 4." in out.read_text()


def test_bf16_rows_on_an_emulating_cpu(monkeypatch):
    emulated = PrecisionChoice("bf16", "bf16", "cpu", "bf16 requested; CPU reports AVX2", emulated=True, slowdown=70.0)
    monkeypatch.setattr(common, "cpu_bf16", lambda: emulated)
    threads = torch.get_num_threads()
    configure_threads(1)
    try:
        result = flops.run("smoke")
    finally:
        configure_threads(threads)
    assert result.data["emulated_dtypes"] == ["bf16"] and set(result.data["peak_flops"]) == {"fp32"}
    assert [t.name for t in result.targets] == ["tiny fp32 forward / matmul peak"]
    bf16_rows = [line for line in result.markdown.splitlines() if "| bf16 |" in line]
    assert bf16_rows and all(line.rstrip(" |").endswith(EMULATED) for line in bf16_rows)
    assert "bf16 is emulated on this CPU" in result.markdown and "70x slower" in result.markdown


def test_data_loading_benchmark(results):
    data = {r.number: r.data for r in results}[7]
    assert data["corpus"] == "europarl-v2-it-en" and data["lines"] == 2000
    assert 0 < data["pairs_batched"] <= data["lines"] and 0 < data["streaming_pairs"] <= data["lines"]
    assert all(v > 0 for v in data["sentences_per_second"].values())
    assert all(v > 0 for v in data["ratio_loader_over_training"].values())
    small, large = data["rss"]
    assert (small["lines"], large["lines"]) == (1000, 4000) and large["pairs"] > 2 * small["pairs"]
    assert large["peak_mib"] >= large["base_mib"] > 0 and data["rss_growth_ratio"] > 0

"""Smoke test of the benchmark suite: every benchmark at the ``smoke`` size, the report and its JSON.

Checks structure only (finite numbers, positive ratios, files written); no timing is asserted.
"""

from __future__ import annotations

import json
import math

import pytest
import torch

from benchmarks import BENCHMARKS
from benchmarks.__main__ import main, render_markdown, run_benchmarks
from benchmarks.common import BenchResult, machine_info


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
    torch.set_num_threads(1)  # tiny ops: one thread avoids oversubscription on a busy machine
    try:
        yield run_benchmarks("smoke")
    finally:
        torch.set_num_threads(threads)


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
    assert 0 < by_number[3]["min_cosine_vs_fp32"]["bf16 autocast"] <= 1 + 1e-6
    assert all(e > 0 for per_dtype in by_number[4]["efficiency"].values() for e in per_dtype.values())
    docs = by_number[5]["documents"]
    assert all(d["ms"] > 0 and d["peak_mib"] >= 0 for d in docs.values())


def test_report_written(results, tmp_path, monkeypatch):
    text = render_markdown(results, machine_info(), "python -m benchmarks --size smoke", "smoke")
    for r in results:
        assert f"## {r.number}. {r.title}" in text
    assert "## Machine" in text and torch.__version__ in text

    # the CLI path end to end on the cheapest benchmark
    monkeypatch.setattr(torch, "set_num_threads", lambda n: None)
    out = tmp_path / "BENCH.md"
    assert main(["--size", "smoke", "--only", "4", "--output", str(out), "--threads", "1"]) == 0
    assert "## 4." in out.read_text()
    payload = json.loads(out.with_suffix(".json").read_text())
    assert payload["size"] == "smoke" and payload["benchmarks"][0]["number"] == 4

"""Benchmark 5: time and peak memory of embedding one document of 128 ... 2048 tokens, and a real 750-word one.

Documents are real text: NTREX-128 English lines concatenated, cut to S tokens (``STR_TAG ... </s>``); the
750-word document is the first consecutive lines up to 750 words (``cut_words``, as ``encode`` does for
documents). Time: one ``pooled_only`` forward (the ``encode`` path) at batch 1, interleaved over the lengths.
Memory: peak-RSS growth of that forward in a fresh subprocess per length (``benchmarks.memory_worker``;
``tracemalloc`` does not see torch's allocations). Both are fitted to a + b*S + c*S^2; the fitted S^2 share of the
time is compared with the attention share of the FLOP count.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from scipy.optimize import nnls

from benchmarks.common import (
    BenchResult,
    check_size,
    encoder_flops,
    log,
    md_table,
    median_times,
    ntrex_texts,
    tokenizer_for,
)
from hf_tlaser.encoding import cut_words
from hf_tlaser.models.tlaser import TLaserModel
from hf_tlaser.training.presets import get_preset

NUMBER, TITLE = 5, "Document length: time and peak memory per document"
REPO_ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Scale:
    lengths: tuple[int, ...]
    repeats: int
    preset: str = "tiny"
    words: int = 750
    overrides: dict = field(default_factory=dict)


SCALES = {
    "smoke": Scale(
        (32, 64, 128), 1, words=60, overrides=dict(hidden_size=64, num_hidden_layers=2, intermediate_size=256)
    ),
    "quick": Scale((128, 256, 512, 1024), 3),
    "full": Scale((128, 256, 512, 1024, 2048), 5),
}


def documents(tokenizer, lengths: tuple[int, ...], words: int) -> dict[str, list[int]]:
    """Token ids (``STR_TAG ... </s>``) of one real document per length, plus the ``words``-word document."""
    lines = ntrex_texts(1997)["en"]
    stream = tokenizer(" ".join(lines), add_special_tokens=False)["input_ids"]
    if len(stream) < max(lengths):
        raise ValueError(f"NTREX gives only {len(stream)} tokens, fewer than {max(lengths)}")
    cls, eos = tokenizer.cls_token_id, tokenizer.eos_token_id
    docs = {str(s): [cls, *stream[: s - 2], eos] for s in lengths}
    text, count = [], 0
    for line in lines:
        text.append(line)
        count += len(line.split())
        if count >= words:
            break
    (doc,), _ = cut_words([" ".join(text)], words)
    docs[f"{words} words"] = tokenizer(doc)["input_ids"]
    return docs


def peak_memory(spec: dict, docs: dict[str, list[int]]) -> dict[str, dict[str, float]]:
    """Run ``benchmarks.memory_worker`` (one fresh process per document) and return its results by document."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as handle:
        json.dump({**spec, "documents": docs}, handle)
    try:
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])),
        }
        out = subprocess.run(
            [sys.executable, "-m", "benchmarks.memory_worker", handle.name],
            cwd=REPO_ROOT,
            env=env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    finally:
        os.unlink(handle.name)
    return json.loads(out.strip().splitlines()[-1])


def quadratic_fit(x: np.ndarray, y: np.ndarray) -> dict[str, float]:
    """Least-squares a + b*x + c*x^2 with a, b, c >= 0 (a cost cannot fall with length; an unconstrained fit of a
    few noisy timings can go negative, and its S^2 share would be meaningless)."""
    (a, b, c), _ = nnls(np.stack([np.ones_like(x), x, x * x], axis=1), y)
    return {"a": float(a), "b": float(b), "c": float(c)}


def run(size: str = "full") -> BenchResult:
    """Run benchmark 5 at ``size``."""
    scale = SCALES[check_size(size)]
    tokenizer = tokenizer_for(size)
    config = get_preset("tlaser", scale.preset).make_config(len(tokenizer), **scale.overrides)
    torch.manual_seed(0)
    model = TLaserModel(config).eval()
    docs = documents(tokenizer, scale.lengths, scale.words)
    log(f"[5] documents of {', '.join(f'{k} ({len(v)} tokens)' for k, v in docs.items())}")

    def forward(ids: list[int]):
        tensor = torch.tensor([ids])

        def call() -> None:
            with torch.inference_mode():
                model(input_ids=tensor, pooled_only=True)

        return call

    seconds = median_times({name: forward(ids) for name, ids in docs.items()}, scale.repeats, progress="document")
    spec = {
        "preset": scale.preset,
        "overrides": scale.overrides,
        "vocab_size": len(tokenizer),
        "threads": torch.get_num_threads(),
    }
    log("peak memory: one fresh process per document")
    memory = peak_memory(spec, docs)
    d, f, layers = config.hidden_size, config.intermediate_size, config.num_hidden_layers
    lengths = np.array(scale.lengths, dtype=float)
    ms = np.array([seconds[str(s)] * 1e3 for s in scale.lengths])
    mib = np.array([memory[str(s)]["delta_mib"] for s in scale.lengths])
    time_fit, mem_fit = quadratic_fit(lengths, ms), quadratic_fit(lengths, mib)
    rows, per_doc = [], {}
    for name, ids in docs.items():
        s = len(ids)
        linear, attention = encoder_flops(1, s, d, f, layers, pooled_only=True)
        fitted = time_fit["a"] + time_fit["b"] * s + time_fit["c"] * s * s
        per_doc[name] = {
            "tokens": s,
            "ms": seconds[name] * 1e3,
            "peak_mib": memory[name]["delta_mib"],
            "gflop": (linear + attention) / 1e9,
            "attention_flop_share": attention / (linear + attention),
            "fitted_s2_time_share": time_fit["c"] * s * s / fitted if fitted > 0 else 0.0,
        }
        row = per_doc[name]
        rows.append(
            [
                name,
                s,
                row["ms"],
                row["peak_mib"],
                row["gflop"],
                f"{100 * row['attention_flop_share']:.1f} %",
                f"{100 * row['fitted_s2_time_share']:.1f} %",
            ]
        )
    data = {
        "preset": scale.preset,
        "overrides": scale.overrides,
        "repeats": scale.repeats,
        "documents": per_doc,
        "time_fit_ms": time_fit,
        "memory_fit_mib": mem_fit,
        "memory_method": "ru_maxrss growth of one forward in a fresh subprocess after an 8-token warm-up",
    }
    md = "\n".join(
        [
            f"`{scale.preset}` encoder (d={d}, {layers} layers, ffn {f}), random weights, one document per forward "
            f"(batch 1, `pooled_only`, fp32, inference mode), median of {scale.repeats} interleaved repeats. Peak "
            "memory: growth of the process's peak RSS (`resource.getrusage(...).ru_maxrss`) during that one forward, "
            "in a fresh subprocess per document after an 8-token warm-up (tracemalloc misses torch's allocator; a "
            "fresh process keeps earlier larger forwards from hiding the peak). Small values sit near the allocator's "
            "granularity and are noisy.",
            "",
            md_table(
                ["document", "tokens", "ms", "peak MiB", "GFLOP", "attention FLOP share", "fitted S^2 time share"],
                rows,
            ),
            "",
            f"Time fit: {time_fit['a']:.3g} + {time_fit['b']:.3g}*S + {time_fit['c']:.3g}*S^2 ms; memory fit: "
            f"{mem_fit['a']:.3g} + {mem_fit['b']:.3g}*S + {mem_fit['c']:.3g}*S^2 MiB. The FLOP count predicts the S^2 "
            "(attention) share in the column before last; the fitted share of the time is the last column.",
        ]
    )
    return BenchResult(NUMBER, TITLE, data, md)

"""Benchmark 7: data loading. Tokenization + batching throughput on the largest shared corpus against what a
training step consumes, and peak RSS while streaming at two corpus sizes.

Corpus: ``europarl-v2-it-en`` (693,793 it-en pairs, gzipped), the largest of the data dir, first ``lines`` lines;
tokenizer: the benchmarks' joint BPE (``tokenizer_for``). In memory, timed part by part as ``hf-tlaser train`` runs
them: the subword counts of every sentence (the tokenization pass of cleaning), the pair curriculum's plan
(``PairBatchSampler``) and the collation of every micro-batch of one epoch (``TranslationCollator`` with the
targets in encoder format, as cT-LASER trains); the Arrow read is cached and not counted. Streaming: the same lines
end to end (gz read, cleaning, tokenization, packing, collation) through ``StreamingPairBatches``. Training: the
tiny cT-LASER's step (forward, backward, AdamW) on those micro-batches. The ratio is the loader's pairs/s over the
training step's: above 1 data loading keeps up (with one core of two for the loader, target >= 5).

Peak RSS: ``python -m benchmarks.data_loading --rss LINES`` in a fresh process per size streams (and collates) one
cycle of the first LINES lines and reports the highest resident set size during the stream over the one before it
(sampled every 10 ms, after the imports and the tokenizer); the stream holds one shuffle buffer per pair, so the
growth must not follow the corpus size (target: the larger size grows by at most 1.25x the smaller's, with 1 MiB as
the floor of the smaller).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from transformers import AutoTokenizer

from benchmarks.common import (
    TRAIN_SCALES,
    BenchResult,
    Target,
    TrainStep,
    build_model,
    check_size,
    log,
    md_table,
    profile_table,
    tokenizer_for,
)
from hf_tlaser.data import (
    CleaningConfig,
    PairBatchSampler,
    ParallelExamples,
    TranslationCollator,
    load_corpus,
    resolve_corpora,
)
from hf_tlaser.data.lengths import token_counts
from hf_tlaser.data.source_datasets import stream_source
from hf_tlaser.data.streaming import StreamingPairBatches
from hf_tlaser.tokenization import save_tokenizer

NUMBER, TITLE = 7, "Data loading: tokenization + batching throughput vs training, streaming peak RSS"
CORPUS, PAIR = "europarl-v2-it-en", ("it", "en")
REPO_ROOT = Path(__file__).resolve().parents[1]
TARGET_RATIO, TARGET_RSS_GROWTH = 5.0, 1.25


@dataclass(frozen=True)
class Scale:
    lines: int | None  # None: the whole corpus
    rss_lines: tuple[int, int]
    train_batches: int
    max_tokens: int = 4000
    buffer_size: int = 10_000
    overrides: tuple = ()


SCALES = {
    "smoke": Scale(
        2000,
        (1000, 4000),
        2,
        max_tokens=1000,
        buffer_size=500,
        overrides=tuple(TRAIN_SCALES["smoke"].overrides.items()),
    ),
    "quick": Scale(50_000, (20_000, 100_000), 3),
    "full": Scale(None, (50_000, 693_793), 6),
}


def rss_mib() -> float:
    """Resident set size of this process now."""
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


class PeakRss:
    """The highest resident set size of this process while the block runs (sampled every ``interval`` seconds by a
    thread; ``ru_maxrss`` cannot tell a peak of the block from one of the set-up before it)."""

    def __init__(self, interval: float = 0.01) -> None:
        self.interval, self.peak, self._stop = interval, 0.0, threading.Event()

    def _sample(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, rss_mib())
            self._stop.wait(self.interval)

    def __enter__(self) -> PeakRss:
        self.before = self.peak = rss_mib()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, rss_mib())


def streamed_batches(lines: int | None, tokenizer, max_tokens: int, buffer_size: int, collate) -> tuple[int, int]:
    """Stream one cycle of the first ``lines`` it-en lines, collating every micro-batch; (pairs, micro-batches)."""
    (source,) = resolve_corpora([CORPUS])
    stream = StreamingPairBatches(
        stream_source(source, lines),
        [PAIR],
        tokenizer,
        max_tokens,
        cleaning=CleaningConfig(max_tokens=248),
        buffer_size=buffer_size,
    )
    pairs = batches = 0
    while stream.streams[0].cycle == 0:
        batch = stream.next_batch()
        collate(batch)
        pairs, batches = pairs + len(batch), batches + 1
    return pairs, batches


def rss_worker(lines: int, size: str, tokenizer_dir: str) -> dict[str, float]:
    """``--rss``: resident-set growth while streaming one cycle of ``lines`` lines (run in a fresh process)."""
    scale = SCALES[size]
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    collate = TranslationCollator(tokenizer, [PAIR[1]], with_target_encoding=True, pairs=[PAIR])
    start = time.perf_counter()
    with PeakRss() as rss:
        pairs, batches = streamed_batches(lines, tokenizer, scale.max_tokens, scale.buffer_size, collate)
    return {
        "lines": lines,
        "pairs": pairs,
        "micro_batches": batches,
        "seconds": time.perf_counter() - start,
        "base_mib": rss.before,
        "peak_mib": rss.peak,
        "growth_mib": rss.peak - rss.before,
    }


def measure_rss(lines: int, size: str, tokenizer_dir: str) -> dict[str, float]:
    """``rss_worker`` in a fresh process."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))}
    cmd = [sys.executable, "-m", "benchmarks.data_loading", "--rss", str(lines), "--size", size]
    cmd += ["--tokenizer", tokenizer_dir]
    out = subprocess.run(cmd, cwd=REPO_ROOT, env=env, capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def run(size: str = "full") -> BenchResult:
    """Run benchmark 7 at ``size``."""
    scale = SCALES[check_size(size)]
    tokenizer = tokenizer_for(size)
    raw = load_corpus(CORPUS, languages=list(PAIR), max_lines=scale.lines)
    texts = {lang: [t for t in raw[lang] if t] for lang in PAIR}
    sentences = sum(map(len, texts.values()))
    log(f"[7] {CORPUS}: {len(raw):,} lines, {sentences:,} sentences")

    start = time.perf_counter()
    counts = {lang: token_counts(texts[lang], tokenizer) for lang in PAIR}
    tokenize_s = time.perf_counter() - start
    lengths = {lang: np.zeros(len(raw), dtype=np.int64) for lang in PAIR}
    for lang in PAIR:
        present = [i for i, text in enumerate(raw[lang]) if text]
        lengths[lang][present] = np.asarray(counts[lang]) + 2  # encoder format, as cleaning stores them
    start = time.perf_counter()
    sampler = PairBatchSampler(lengths, scale.max_tokens, [PAIR], seed=0)
    plan = sampler.plan()
    plan_s = time.perf_counter() - start
    examples = ParallelExamples(raw.select_columns(list(PAIR)))
    collate = TranslationCollator(tokenizer, [PAIR[1]], with_target_encoding=True, pairs=[PAIR])
    start = time.perf_counter()
    collated = [collate(examples.__getitems__([(row, *PAIR) for row in rows])) for _, rows in plan]
    collate_s = time.perf_counter() - start
    pairs = sum(len(rows) for _, rows in plan)
    memory_pairs_s = pairs / (tokenize_s + plan_s + collate_s)

    start = time.perf_counter()
    streamed, stream_batches = streamed_batches(scale.lines, tokenizer, scale.max_tokens, scale.buffer_size, collate)
    stream_s = time.perf_counter() - start
    stream_pairs_s = streamed / stream_s

    model = build_model("ctlaser", "tiny", len(tokenizer), **dict(scale.overrides))
    batches = collated[: scale.train_batches]
    step = TrainStep(model, batches)
    step.step(batches[0])  # warm-up (allocator, oneDNN)
    start = time.perf_counter()
    step()
    train_s = time.perf_counter() - start
    train_pairs_s = sum(b["labels"].shape[0] for b in batches) / train_s
    log(f"[7] loader {memory_pairs_s:,.0f} pairs/s (streaming {stream_pairs_s:,.0f}), training {train_pairs_s:,.0f}")

    log("[7] peak RSS while streaming: one fresh process per size")
    with tempfile.TemporaryDirectory() as folder:
        save_tokenizer(tokenizer, folder)
        rss = [measure_rss(lines, size, folder) for lines in scale.rss_lines]
    growth = rss[1]["growth_mib"] / max(rss[0]["growth_mib"], 1.0)
    data = {
        "corpus": CORPUS,
        "lines": len(raw),
        "sentences": sentences,
        "pairs_batched": pairs,
        "micro_batches": len(plan),
        "max_tokens": scale.max_tokens,
        "seconds": {"tokenize": tokenize_s, "plan": plan_s, "collate": collate_s, "stream": stream_s},
        "sentences_per_second": {
            "tokenize": sentences / tokenize_s,
            "in_memory_pipeline": 2 * memory_pairs_s,
            "streaming_pipeline": 2 * stream_pairs_s,
            "training_step": 2 * train_pairs_s,
        },
        "ratio_loader_over_training": {
            "in_memory": memory_pairs_s / train_pairs_s,
            "streaming": stream_pairs_s / train_pairs_s,
        },
        "streaming_pairs": streamed,
        "streaming_micro_batches": stream_batches,
        "rss": rss,
        "rss_growth_ratio": growth,
    }
    rows = [
        ["tokenize (subword counts, both sides)", f"{tokenize_s:.2f}", f"{sentences / tokenize_s:,.0f}"],
        ["plan (pair curriculum, one epoch)", f"{plan_s:.2f}", "-"],
        ["collate every micro-batch (+ target encodings)", f"{collate_s:.2f}", f"{2 * pairs / collate_s:,.0f}"],
        [
            "in-memory pipeline (the three above)",
            f"{tokenize_s + plan_s + collate_s:.2f}",
            f"{2 * memory_pairs_s:,.0f}",
        ],
        [
            "streaming pipeline (gz read, clean, tokenize, pack, collate)",
            f"{stream_s:.2f}",
            f"{2 * stream_pairs_s:,.0f}",
        ],
        [f"training step, tiny cT-LASER ({len(batches)} micro-batches)", f"{train_s:.2f}", f"{2 * train_pairs_s:,.0f}"],
    ]
    rss_rows = [
        [f"{r['lines']:,}", f"{r['pairs']:,}", r["micro_batches"], r["base_mib"], r["growth_mib"], r["seconds"]]
        for r in rss
    ]
    markdown = "\n".join(
        [
            f"`{CORPUS}`, {len(raw):,} lines ({sentences:,} sentences), micro-batches of <= {scale.max_tokens} padded "
            f"tokens, {len(plan):,} per epoch.",
            "",
            md_table(["stage", "seconds", "sentences/s"], rows),
            "",
            f"Loader / training step (pairs per second): in memory **{memory_pairs_s / train_pairs_s:.1f}x**, "
            f"streaming **{stream_pairs_s / train_pairs_s:.1f}x**.",
            "",
            f"Peak RSS while streaming (one cycle, shuffle buffer {scale.buffer_size:,} groups, fresh process each):",
            "",
            md_table(["lines", "pairs", "micro-batches", "RSS after set-up MiB", "growth MiB", "seconds"], rss_rows),
            "",
            f"Growth ratio (larger / smaller corpus): **{growth:.2f}** for "
            f"{scale.rss_lines[1] / scale.rss_lines[0]:.0f}x the lines.",
        ]
    )
    targets = [
        Target("in-memory loader / training pairs/s", memory_pairs_s / train_pairs_s, TARGET_RATIO),
        Target("streaming loader / training pairs/s", stream_pairs_s / train_pairs_s, TARGET_RATIO),
        Target("streaming RSS growth, larger / smaller corpus", growth, TARGET_RSS_GROWTH, higher_is_better=False),
    ]
    profile = None
    if not all(target.passed for target in targets):  # where the loader spends its time, as the other benchmarks do
        profile = "streaming one cycle of 500 lines:\n" + profile_table(
            lambda: streamed_batches(500, tokenizer, scale.max_tokens, scale.buffer_size, collate)
        )
    return BenchResult(NUMBER, TITLE, data, markdown, targets, profile)


def main(argv: list[str] | None = None) -> int:
    """``python -m benchmarks.data_loading [--size quick]`` prints the section; ``--rss LINES`` is the worker."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.data_loading", description=main.__doc__)
    parser.add_argument("--size", choices=list(SCALES), default="quick")
    parser.add_argument("--rss", type=int, default=None, help="worker mode: stream LINES lines, print the peak RSS")
    parser.add_argument("--tokenizer", default=None, help="worker mode: the tokenizer folder")
    args = parser.parse_args(argv)
    if args.rss is not None:
        print(json.dumps(rss_worker(args.rss, args.size, args.tokenizer)))
        return 0
    print(run(args.size).markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())

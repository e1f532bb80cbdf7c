"""hf_tlaser benchmark suite: ``python -m benchmarks [--quick] [--only N ...] [--output BENCHMARKS.md]``.

One module per benchmark, each with ``run(size) -> BenchResult`` (``size``: ``smoke``, ``quick`` or ``full``):

1. ``training_speed``: training tokens/s, T-LASER vs LASER_6 vs LASER_1 at matched parameter counts.
2. ``distance_cost``: cT-LASER's distance-constraint cost (pair and multi-way batching).
3. ``embedding_throughput``: ``hf_tlaser.encode`` vs sentence-transformers, plus the fast-path ablation.
4. ``flops``: encoder forward FLOP/s vs the measured matmul peak.
5. ``document_length``: time and peak memory of one document of 128 ... 2048 tokens.
6. ``generation_speed``: ``generate`` (GenerationMixin + decoder cache) vs re-decoding the prefix every step.
7. ``data_loading``: tokenization + batching throughput vs a training step, and peak RSS while streaming.
"""

BENCHMARKS: dict[int, str] = {
    1: "benchmarks.training_speed",
    2: "benchmarks.distance_cost",
    3: "benchmarks.embedding_throughput",
    4: "benchmarks.flops",
    5: "benchmarks.document_length",
    6: "benchmarks.generation_speed",
    7: "benchmarks.data_loading",
}
"""Benchmark number -> module (imported lazily: the memory worker subprocess must start fast)."""

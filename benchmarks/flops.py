"""Benchmark 4: achieved FLOP/s of the T-LASER encoder forward vs the matmul peak measured in the same run.

FLOPs are counted analytically: per layer 2*B*S*(4d^2 + 2df) for the projections and the FFN plus 2*2*B*S^2*d for
attention scores and values (layer norms, embeddings and softmax left out, so the figure slightly understates the
work). Inputs are B x S random token ids without padding; every layer computes every position (no pooled-only
shortcut), so the count is exact. The peak is an n x n matmul in the same dtype, interleaved with the forwards.
bf16 is measured only where the CPU runs it natively; elsewhere its rows read "emulated" and carry no target.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from benchmarks.common import (
    DTYPES,
    EMULATED,
    BenchResult,
    Target,
    autocast,
    check_size,
    emulation_note,
    encoder_flops,
    log,
    md_table,
    median_times,
    profile_table,
    timed_dtypes,
)
from hf_tlaser.models.tlaser import TLaserModel
from hf_tlaser.training.presets import get_preset

NUMBER, TITLE = 4, "Efficiency: encoder forward FLOP/s vs measured matmul peak"
TARGET_EFFICIENCY = 0.5


@dataclass(frozen=True)
class Scale:
    presets: tuple[str, ...]
    batch: int
    seq: int
    repeats: int
    matmul_n: int = 2048
    overrides: dict = field(default_factory=dict)
    dtypes: tuple[str, ...] = ("fp32", "bf16")


SCALES = {
    "smoke": Scale(
        ("tiny",), 4, 32, 1, matmul_n=256, overrides=dict(hidden_size=64, num_hidden_layers=2, intermediate_size=256)
    ),
    "quick": Scale(("tiny",), 64, 128, 3),
    "full": Scale(("tiny", "small"), 64, 128, 5),
}
VOCAB = 8000


def run(size: str = "full") -> BenchResult:
    """Run benchmark 4 at ``size``."""
    scale = SCALES[check_size(size)]
    dtypes = timed_dtypes(scale.dtypes)
    ids = torch.randint(4, VOCAB, (scale.batch, scale.seq), generator=torch.Generator().manual_seed(0))
    n = scale.matmul_n
    mats = {
        d: (torch.randn(n, n).to(DTYPES[d] or torch.float32), torch.randn(n, n).to(DTYPES[d] or torch.float32))
        for d in dtypes
    }
    models, flops = {}, {}
    for preset in scale.presets:
        config = get_preset("tlaser", preset).make_config(VOCAB, **scale.overrides)
        torch.manual_seed(0)
        models[preset] = TLaserModel(config).eval()
        linear, attention = encoder_flops(
            scale.batch, scale.seq, config.hidden_size, config.intermediate_size, config.num_hidden_layers
        )
        flops[preset] = {"linear": linear, "attention": attention, "total": linear + attention}

    def forward(model: TLaserModel, dtype: str):
        def call() -> None:
            with torch.inference_mode(), autocast(DTYPES[dtype]):
                model(input_ids=ids)

        return call

    def matmul(dtype: str):
        a, b = mats[dtype]
        return lambda: a @ b

    variants = {f"matmul {d}": matmul(d) for d in dtypes}
    variants.update({f"{p} {d}": forward(m, d) for p, m in models.items() for d in dtypes})
    log(f"[4] encoder forward {scale.batch} x {scale.seq} tokens, presets {scale.presets}, matmul {n}x{n}")
    seconds = median_times(variants, scale.repeats, progress="flops")
    peak = {d: 2.0 * n**3 / seconds[f"matmul {d}"] for d in dtypes}
    achieved = {p: {d: flops[p]["total"] / seconds[f"{p} {d}"] for d in dtypes} for p in models}
    efficiency = {p: {d: achieved[p][d] / peak[d] for d in dtypes} for p in models}
    rows = []
    for p, model in models.items():
        cfg = model.config
        for d in scale.dtypes:
            if d in dtypes:
                measured = [
                    seconds[f"{p} {d}"] * 1e3,
                    achieved[p][d] / 1e9,
                    peak[d] / 1e9,
                    f"**{100 * efficiency[p][d]:.0f} %**",
                ]
            else:
                measured = ["-", "-", "-", EMULATED]
            rows.append(
                [
                    f"{p} (d={cfg.hidden_size}, {cfg.num_hidden_layers} layers, ffn {cfg.intermediate_size})",
                    d,
                    flops[p]["total"] / 1e9,
                    f"{100 * flops[p]['attention'] / flops[p]['total']:.1f} %",
                    *measured,
                ]
            )
    data = {
        "batch": scale.batch,
        "seq": scale.seq,
        "matmul_n": n,
        "repeats": scale.repeats,
        "flops": flops,
        "peak_flops": peak,
        "achieved_flops": achieved,
        "efficiency": efficiency,
        "emulated_dtypes": [d for d in scale.dtypes if d not in dtypes],
        "configs": {
            p: {k: getattr(m.config, k) for k in ("hidden_size", "num_hidden_layers", "intermediate_size")}
            for p, m in models.items()
        },
    }
    md = "\n".join(
        [
            f"Encoder forward (inference mode, every position of every layer) on {scale.batch} x {scale.seq} random "
            f"tokens; peak = {n}x{n} matmul in the same dtype, interleaved with the forwards; median of "
            f"{scale.repeats} repeats. {emulation_note()}".rstrip(),
            "",
            md_table(
                ["encoder", "dtype", "GFLOP / forward", "attention share", "ms", "GFLOP/s", "peak GFLOP/s", "of peak"],
                rows,
            ),
        ]
    )
    targets = [
        Target(f"{p} {d} forward / matmul peak", efficiency[p][d], TARGET_EFFICIENCY) for p in models for d in dtypes
    ]
    missed = [t for t in targets if not t.passed]
    profile = None
    if missed:
        p, d = missed[0].name.split()[:2]
        profile = f"{p} encoder forward, {d}:\n" + profile_table(forward(models[p], d))
    return BenchResult(NUMBER, TITLE, data, md, targets, profile)

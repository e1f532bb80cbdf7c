"""Benchmark 1: training target tokens/s of T-LASER vs LASER_6 vs LASER_1 at matched parameter counts.

Every model trains on the same pre-collated pair-mode micro-batches of the real training mix (fairseq's words/s:
target tokens of the translation loss per second of forward + backward + AdamW step), in fp32 and under bf16
autocast (bf16 only where the CPU runs it natively; elsewhere its column reads "emulated"). The LASER sizes are
chosen by scaling the BiLSTM width (decoder width = 4x, as in every preset) until the parameter count is the
closest to T-LASER's.
"""

from __future__ import annotations

import torch

from benchmarks.common import (
    DTYPES,
    EMULATED,
    TRAIN_SCALES,
    BenchResult,
    Target,
    TrainScale,
    TrainStep,
    build_model,
    check_size,
    count_parameters,
    emulation_note,
    interleaved,
    log,
    md_table,
    median,
    profile_table,
    real_batches,
    target_tokens,
    timed_dtypes,
    tokenizer_for,
    without_targets,
)
from hf_tlaser.training.presets import get_preset

NUMBER, TITLE = 1, "Training tokens/s: T-LASER vs LASER_6 vs LASER_1 (matched parameters)"
MODELS = ("tlaser", "laser6", "laser1")
PAPER_WPS = {"tlaser": 23.5e3, "laser6": 12.4e3, "laser1": 14.3e3}  # Li & Mak 2020, Table 1 (GPU, fp16)


DTYPE_NAMES = ("fp32", "bf16")


def laser_param_count(model: str, preset: str, vocab_size: int, lstm_hidden_size: int) -> int:
    """Parameters of a LASER preset with the BiLSTM ``lstm_hidden_size`` wide (decoder 4x), built on ``meta``."""
    with torch.device("meta"):
        net = build_model(
            model, preset, vocab_size, lstm_hidden_size=lstm_hidden_size, decoder_hidden_size=4 * lstm_hidden_size
        )
    return count_parameters(net)


def matched_laser_width(model: str, preset: str, vocab_size: int, target: int, step: int = 8) -> int:
    """BiLSTM width (a multiple of ``step``) whose LASER model has the parameter count closest to ``target``."""
    lo, hi = 1, 1024  # in units of ``step``; the count grows with the width
    while lo < hi:
        mid = (lo + hi) // 2
        if laser_param_count(model, preset, vocab_size, mid * step) < target:
            lo = mid + 1
        else:
            hi = mid
    candidates = [w for w in (lo - 1, lo) if w >= 1]
    return step * min(candidates, key=lambda w: abs(laser_param_count(model, preset, vocab_size, w * step) - target))


def build_matched(scale: TrainScale, vocab_size: int) -> dict[str, torch.nn.Module]:
    """T-LASER at the preset (plus overrides) and LASER_6 / LASER_1 widened or narrowed to its parameter count."""
    tlaser = build_model("tlaser", scale.preset, vocab_size, **scale.overrides)
    target = count_parameters(tlaser)
    models = {"tlaser": tlaser}
    for name in ("laser6", "laser1"):
        width = matched_laser_width(name, scale.preset, vocab_size, target)
        models[name] = build_model(
            name, scale.preset, vocab_size, lstm_hidden_size=width, decoder_hidden_size=4 * width
        )
    return models


def describe(model: torch.nn.Module) -> str:
    cfg = model.config
    if cfg.model_type == "tlaser":
        return (
            f"d={cfg.hidden_size}, {cfg.num_hidden_layers} enc layers, ffn {cfg.intermediate_size}, "
            f"1 dec layer (ffn {cfg.decoder_ffn_dim})"
        )
    return (
        f"emb {cfg.embed_dim}, BiLSTM {cfg.num_layers}x{cfg.lstm_hidden_size}x2, LSTM decoder {cfg.decoder_hidden_size}"
    )


def measure(
    models: dict[str, torch.nn.Module],
    batches: list,
    dtypes: tuple[str, ...],
    repeats: int,
    device: str = "cpu",
) -> tuple[dict[str, dict[str, float]], dict[str, TrainStep]]:
    """Median target tokens/s of every (model, dtype), all variants interleaved per dtype."""
    tokens = target_tokens(batches)
    speeds: dict[str, dict[str, float]] = {}
    steps: dict[str, TrainStep] = {}
    for dtype_name in dtypes:
        runners = {name: TrainStep(model, batches, DTYPES[dtype_name], device) for name, model in models.items()}
        steps.update({f"{name}/{dtype_name}": r for name, r in runners.items()})
        times = interleaved(runners, repeats, progress=f"training {dtype_name}")
        speeds[dtype_name] = {name: tokens / median(t) for name, t in times.items()}
    return speeds, steps


def run(size: str = "full", paper: bool = False) -> BenchResult:
    """Run benchmark 1 at ``size``; ``paper`` adds the paper-size presets on CUDA (skipped without a GPU)."""
    scale = TRAIN_SCALES[check_size(size)]
    torch.manual_seed(0)
    vocab = len(tokenizer_for(size))
    log(f"[1] building real pair-mode batches (max_tokens={scale.max_tokens}, {scale.num_batches} batches)")
    batches = without_targets(real_batches(size, "pair", scale.max_tokens, scale.num_batches))
    models = build_matched(scale, vocab)
    params = {name: count_parameters(m) for name, m in models.items()}
    dtypes = timed_dtypes(DTYPE_NAMES)
    speeds, steps = measure(models, batches, dtypes, scale.repeats)

    rows = []
    for name, model in models.items():
        tok_s = [speeds[d][name] if d in speeds else EMULATED for d in DTYPE_NAMES]
        rows.append([name, describe(model), params[name], *tok_s, PAPER_WPS[name]])
    ratios = {d: speeds[d]["tlaser"] / speeds[d]["laser6"] for d in dtypes}
    data = {
        "preset": scale.preset,
        "overrides": scale.overrides,
        "vocab_size": vocab,
        "max_tokens": scale.max_tokens,
        "num_batches": len(batches),
        "target_tokens_per_repeat": target_tokens(batches),
        "repeats": scale.repeats,
        "parameters": params,
        "param_spread": max(params.values()) / min(params.values()) - 1,
        "configs": {name: describe(m) for name, m in models.items()},
        "tokens_per_second": speeds,
        "emulated_dtypes": [d for d in DTYPE_NAMES if d not in dtypes],
        "ratio_tlaser_over_laser6": ratios,
        "ratio_tlaser_over_laser1": {d: speeds[d]["tlaser"] / speeds[d]["laser1"] for d in dtypes},
        "paper_ratio_tlaser_over_laser6": PAPER_WPS["tlaser"] / PAPER_WPS["laser6"],
    }
    md = [
        f"`{scale.preset}` preset widths{' with ' + str(scale.overrides) if scale.overrides else ''}, vocabulary "
        f"{vocab:,} (joint BPE trained on the real data), {len(batches)} real pair-mode micro-batches of "
        f"<= {scale.max_tokens} padded tokens ({data['target_tokens_per_repeat']:,} target tokens), "
        f"median of {scale.repeats} interleaved repeats. Parameters within "
        f"{100 * data['param_spread']:.1f} %. {emulation_note()}".rstrip(),
        "",
        md_table(
            ["model", "config", "params", *(f"tok/s {d}" for d in DTYPE_NAMES), "paper WPS (GPU)"],
            rows,
        ),
        "",
        "Ratio T-LASER / LASER_6: "
        + ", ".join(f"{d} **{r:.2f}x**" for d, r in ratios.items())
        + f" (paper: {data['paper_ratio_tlaser_over_laser6']:.2f}x on GPU).",
    ]
    if paper:
        paper_data, paper_md = run_paper(size)
        data["paper_preset"] = paper_data
        md += ["", paper_md]
    targets = [Target(f"tlaser/laser6 tokens/s ({d})", r, 1.0) for d, r in ratios.items()]
    profile = None
    if not all(t.passed for t in targets):
        step = steps[f"tlaser/{dtypes[0]}"]
        profile = profile_table(lambda: step.step(step.batches[0]))
    return BenchResult(NUMBER, TITLE, data, "\n".join(md), targets, profile)


def run_paper(size: str) -> tuple[dict, str]:
    """The ``paper`` presets (Table 1 sizes) on CUDA under fp16 and bf16 autocast; a note without a GPU."""
    if not torch.cuda.is_available():
        note = "`--paper`: skipped, no CUDA device (the paper-size presets are too big to time on this CPU)."
        log(note)
        return {"skipped": "no CUDA device"}, note
    recipe = get_preset("tlaser", "paper").recipe
    vocab = len(tokenizer_for(size))
    batches = without_targets(real_batches(size, "pair", recipe.max_tokens, 8))
    models = {name: build_model(name, "paper", vocab) for name in MODELS}
    params = {name: count_parameters(m) for name, m in models.items()}
    speeds, _ = measure(models, batches, ("fp16", "bf16"), 5, device="cuda")
    rows = [[name, params[name], speeds["fp16"][name], speeds["bf16"][name], PAPER_WPS[name]] for name in MODELS]
    md = "\n".join(
        [
            f"`--paper`: Table 1 presets on {torch.cuda.get_device_name(0)}, vocabulary {vocab:,}, 8 micro-batches "
            f"of <= {recipe.max_tokens} tokens, autocast without loss scaling (speed only).",
            "",
            md_table(["model", "params", "tok/s fp16", "tok/s bf16", "paper WPS"], rows),
        ]
    )
    return {"parameters": params, "tokens_per_second": speeds}, md

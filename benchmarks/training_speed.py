"""Benchmark 1: training target tokens/s of T-LASER vs LASER_6 vs LASER_1 at matched parameter counts.

Every model trains on the same pre-collated pair-mode micro-batches of the real training mix (fairseq's words/s:
target tokens of the translation loss per second of forward + backward + AdamW step), in fp32 and under bf16
autocast (bf16 only where the CPU runs it natively; elsewhere its column reads "emulated"). The LASER sizes are
chosen by scaling the BiLSTM width (decoder width = 4x, as in every preset) until the parameter count is the
closest to T-LASER's.

``device="cuda"`` runs every model on the GPU (bf16 where ``torch.cuda.is_bf16_supported()``, else fp16).
``presets`` (e.g. ``("small", "paper")``) also times each family at that preset's own sizes and vocabulary, unmatched,
as the paper's Table 1 does (fp16 and bf16 autocast on CUDA, fp32 on a CPU).
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
    is_cuda,
    log,
    md_table,
    real_batches,
    release_memory,
    target_tokens,
    tokenizer_for,
    train_dtype_names,
    train_speeds,
    without_targets,
)
from hf_tlaser.training.presets import get_preset

NUMBER, TITLE = 1, "Training tokens/s: T-LASER vs LASER_6 vs LASER_1 (matched parameters)"
MODELS = ("tlaser", "laser6", "laser1")
PAPER_WPS = {"tlaser": 23.5e3, "laser6": 12.4e3, "laser1": 14.3e3}  # Li & Mak 2020, Table 1 (GPU, fp16)


DTYPE_NAMES = ("fp32", "bf16")
SHRUNK_LASER = dict(embed_dim=32, lstm_hidden_size=32, decoder_hidden_size=128)
"""``run_preset`` below ``full``: LASER widths of a seconds-long CPU check (the depths stay the preset's)."""


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
    speeds: dict[str, dict[str, float]] = {}
    steps: dict[str, TrainStep] = {}
    for dtype_name in dtypes:
        runners = {name: TrainStep(model, batches, DTYPES[dtype_name], device) for name, model in models.items()}
        steps.update({f"{name}/{dtype_name}": r for name, r in runners.items()})
        speeds[dtype_name] = train_speeds(runners, repeats, progress=f"training {dtype_name}")
    return speeds, steps


def run(
    size: str = "full", paper: bool = False, device: str = "cpu", presets: tuple[str, ...] | list[str] | None = None
) -> BenchResult:
    """Run benchmark 1 at ``size`` on ``device``; ``presets`` adds those presets at their own sizes on ``device``;
    ``paper`` (without ``presets``) adds the paper-size presets on CUDA (skipped without a GPU)."""
    scale = TRAIN_SCALES[check_size(size)]
    torch.manual_seed(0)
    vocab = len(tokenizer_for(size))
    log(f"[1] building real pair-mode batches (max_tokens={scale.max_tokens}, {scale.num_batches} batches)")
    batches = without_targets(real_batches(size, "pair", scale.max_tokens, scale.num_batches))
    models = build_matched(scale, vocab)
    params = {name: count_parameters(m) for name, m in models.items()}
    dtypes = train_dtype_names(device)
    columns = tuple(dict.fromkeys((*DTYPE_NAMES, *dtypes)))
    speeds, steps = measure(models, batches, dtypes, scale.repeats, device=device)

    rows = []
    for name, model in models.items():
        tok_s = [
            speeds[d][name] if d in speeds else EMULATED if d == "bf16" and not is_cuda(device) else "-"
            for d in columns
        ]
        rows.append([name, describe(model), params[name], *tok_s, PAPER_WPS[name]])
    ratios = {d: speeds[d]["tlaser"] / speeds[d]["laser6"] for d in dtypes}
    data = {
        "device": device,
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
        "emulated_dtypes": [] if is_cuda(device) else [d for d in DTYPE_NAMES if d not in dtypes],
        "ratio_tlaser_over_laser6": ratios,
        "ratio_tlaser_over_laser1": {d: speeds[d]["tlaser"] / speeds[d]["laser1"] for d in dtypes},
        "paper_ratio_tlaser_over_laser6": PAPER_WPS["tlaser"] / PAPER_WPS["laser6"],
    }
    md = [
        f"`{scale.preset}` preset widths{' with ' + str(scale.overrides) if scale.overrides else ''}, vocabulary "
        f"{vocab:,} (joint BPE trained on the real data), {len(batches)} real pair-mode micro-batches of "
        f"<= {scale.max_tokens} padded tokens ({data['target_tokens_per_repeat']:,} target tokens), "
        f"median of {scale.repeats} interleaved repeats, on {device_name(device)}. Parameters within "
        f"{100 * data['param_spread']:.1f} %. {'' if is_cuda(device) else emulation_note()}".rstrip(),
        "",
        md_table(
            ["model", "config", "params", *(f"tok/s {d}" for d in columns), "paper WPS (GPU)"],
            rows,
        ),
        "",
        "Ratio T-LASER / LASER_6: "
        + ", ".join(f"{d} **{r:.2f}x**" for d, r in ratios.items())
        + f" (paper: {data['paper_ratio_tlaser_over_laser6']:.2f}x on GPU).",
    ]
    if presets:
        for preset in presets:
            preset_data, preset_md = run_preset(size, preset, device)
            data[f"{preset}_preset"] = preset_data
            md += ["", preset_md]
    elif paper:
        paper_data, paper_md = run_paper(size)
        data["paper_preset"] = paper_data
        md += ["", paper_md]
    targets = [Target(f"tlaser/laser6 tokens/s ({d})", r, 1.0) for d, r in ratios.items()]
    profile = None
    if not all(t.passed for t in targets):
        profile = steps[f"tlaser/{dtypes[0]}"].profile()
    return BenchResult(NUMBER, TITLE, data, "\n".join(md), targets, profile)


def device_name(device: str) -> str:
    return f"{device} ({torch.cuda.get_device_name(device)})" if is_cuda(device) else "the CPU"


def run_paper(size: str) -> tuple[dict, str]:
    """The ``paper`` presets (Table 1 sizes) on CUDA under fp16 and bf16 autocast; a note without a GPU."""
    if not torch.cuda.is_available():
        note = "`--paper`: skipped, no CUDA device (the paper-size presets are too big to time on this CPU)."
        log(note)
        return {"skipped": "no CUDA device"}, note
    return run_preset(size, "paper", "cuda")


def run_preset(size: str, preset: str, device: str = "cuda") -> tuple[dict, str]:
    """T-LASER, LASER_6 and LASER_1 at ``preset``'s own sizes (unmatched, as in the paper's Table 1) on ``device``.

    ``full``: the preset's vocabulary (its output softmax is part of the cost) and 8 micro-batches of the recipe's
    ``max_tokens``; smaller sizes: a check of the path in seconds: the benchmark tokenizer's vocabulary, the size's
    batches, and the size's T-LASER overrides / ``SHRUNK_LASER`` widths where the size has overrides (``smoke``).
    CUDA: fp16 and bf16 autocast without loss scaling (speed only; bf16 only where supported); CPU: fp32.
    """
    scale = TRAIN_SCALES[check_size(size)]
    recipe = get_preset("tlaser", preset).recipe
    full = size == "full"
    vocab = recipe.vocab_size if full else len(tokenizer_for(size))
    max_tokens, num_batches = (recipe.max_tokens, 8) if full else (scale.max_tokens, scale.num_batches)
    repeats = 5 if full else scale.repeats
    log(f"[1] preset {preset} on {device}: vocabulary {vocab:,}, {num_batches} batches of <= {max_tokens} tokens")
    batches = without_targets(real_batches(size, "pair", max_tokens, num_batches))
    shrink = {"tlaser": scale.overrides, "laser6": SHRUNK_LASER, "laser1": SHRUNK_LASER} if scale.overrides else {}
    models = {name: build_model(name, preset, vocab, **shrink.get(name, {})) for name in MODELS}
    params = {name: count_parameters(m) for name, m in models.items()}
    if is_cuda(device):
        dtypes = ("fp16", "bf16") if "bf16" in train_dtype_names(device) else ("fp16",)
    else:
        dtypes = ("fp32",)
    speeds, steps = measure(models, batches, dtypes, repeats, device=device)
    rows = [
        [name, describe(models[name]), params[name], *(speeds[d][name] for d in dtypes), PAPER_WPS[name]]
        for name in MODELS
    ]
    ratios = {d: speeds[d]["tlaser"] / speeds[d]["laser6"] for d in dtypes}
    del models, steps
    release_memory(device)
    md = "\n".join(
        [
            f"Preset `{preset}` (each family at its own sizes, as in the paper's Table 1"
            f"{'; shrunk for a smoke check: ' + str(shrink) if shrink else ''}) on {device_name(device)}, "
            f"vocabulary {vocab:,}, {len(batches)} micro-batches of <= {max_tokens} tokens "
            f"({target_tokens(batches):,} target tokens), median of {repeats} interleaved repeats"
            + (", autocast without loss scaling (speed only)." if is_cuda(device) else "."),
            "",
            md_table(["model", "config", "params", *(f"tok/s {d}" for d in dtypes), "paper WPS (GPU, fp16)"], rows),
            "",
            f"Ratio T-LASER / LASER_6 at `{preset}`: "
            + ", ".join(f"{d} **{r:.2f}x**" for d, r in ratios.items())
            + f" (paper: {PAPER_WPS['tlaser'] / PAPER_WPS['laser6']:.2f}x).",
        ]
    )
    data = {
        "device": device,
        "overrides": shrink,
        "vocab_size": vocab,
        "max_tokens": max_tokens,
        "num_batches": len(batches),
        "repeats": repeats,
        "parameters": params,
        "tokens_per_second": speeds,
        "ratio_tlaser_over_laser6": ratios,
    }
    return data, md

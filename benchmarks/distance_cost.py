"""Benchmark 2: cost of cT-LASER's distance constraint in training tokens/s.

* pair mode (the paper's fairseq set-up): cT-LASER batches carry ``tgt_input_ids`` (targets encoded in the same
  encoder call as the sources), T-LASER gets the same batches without them;
* multi-way mode: ``MultiwayBatchSampler`` + the multi-way collator, where every encoded sentence is both a
  translation source and a distance partner; T-LASER trains on the very same batches with ``distance_beta=0``.

Cost = 1 - tokens/s(cT-LASER) / tokens/s(T-LASER); the paper's Table 1 has 15.2K vs 23.5K words/s (-35 %).

fp32 on the CPU; ``device="cuda"``: on the GPU under bf16 autocast (fp16 where the GPU has no bf16), and
``presets=("small",)`` also times those presets' sizes (a section each; the targets stay on the size's widths).
"""

from __future__ import annotations

from dataclasses import replace

from benchmarks.common import (
    DTYPES,
    TRAIN_SCALES,
    BenchResult,
    Target,
    TrainScale,
    TrainStep,
    build_model,
    check_size,
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

NUMBER, TITLE = 2, "Distance-constraint cost: cT-LASER vs T-LASER tokens/s"
TARGET_COST = 0.10
PAPER_COST = 1 - 15.2 / 23.5


DTYPE = "fp32"


def encoded_tokens(batches: list) -> int:
    """Non-pad tokens that go through the encoder (sources, plus targets where ``tgt_input_ids`` is present)."""
    total = 0
    for b in batches:
        total += int(b["attention_mask"].sum())
        if "tgt_attention_mask" in b:
            total += int(b["tgt_attention_mask"].sum())
    return total


def measure_cost(size: str, scale: TrainScale, vocab: int, device: str, dtype_name: str) -> tuple[dict, str, dict]:
    """(data, markdown, runners) of cT-LASER vs T-LASER at ``scale``'s preset and batches on ``device``."""
    log(f"[2] {scale.preset} on {device}: real pair-mode and multi-way batches (max_tokens={scale.max_tokens})")
    pair = real_batches(size, "pair", scale.max_tokens, scale.num_batches)
    multi = real_batches(size, "multiway", scale.max_tokens, scale.num_batches)
    variants = {  # name -> (model, batches)
        "pair/tlaser": ("tlaser", without_targets(pair)),
        "pair/ctlaser": ("ctlaser", pair),
        "multiway/tlaser": ("tlaser", multi),
        "multiway/ctlaser": ("ctlaser", multi),
    }
    dtype = DTYPES[dtype_name]
    runners = {
        name: TrainStep(build_model(model, scale.preset, vocab, seed=0, **scale.overrides), batches, dtype, device)
        for name, (model, batches) in variants.items()
    }
    speeds = train_speeds(runners, scale.repeats, progress=f"distance cost ({scale.preset})")
    costs = {mode: 1 - speeds[f"{mode}/ctlaser"] / speeds[f"{mode}/tlaser"] for mode in ("pair", "multiway")}
    rows = [[name, len(b), target_tokens(b), encoded_tokens(b), speeds[name]] for name, (_, b) in variants.items()]
    data = {
        "device": device,
        "preset": scale.preset,
        "overrides": scale.overrides,
        "vocab_size": vocab,
        "dtype": dtype_name,
        "max_tokens": scale.max_tokens,
        "repeats": scale.repeats,
        "tokens_per_second": speeds,
        "target_tokens": {name: target_tokens(b) for name, (_, b) in variants.items()},
        "encoded_tokens": {name: encoded_tokens(b) for name, (_, b) in variants.items()},
        "cost": costs,
        "paper_cost": PAPER_COST,
    }
    md = "\n".join(
        [
            f"`{scale.preset}` preset widths{' with ' + str(scale.overrides) if scale.overrides else ''}, vocabulary "
            f"{vocab:,}, {dtype_name}{' autocast on ' + device if is_cuda(device) else ''}, micro-batches of <= "
            f"{scale.max_tokens} padded tokens, median of {scale.repeats} interleaved repeats. In pair mode cT-LASER "
            "encodes the targets too (one encoder call); in multi-way mode both models encode the same sentences and "
            "T-LASER has `distance_beta=0`.",
            "",
            md_table(["variant", "batches", "target tokens", "encoded tokens", "target tok/s"], rows),
            "",
            f"Cost of the distance constraint: pair mode **{100 * costs['pair']:.1f} %**, multi-way "
            f"**{100 * costs['multiway']:.1f} %** (target <= {100 * TARGET_COST:.0f} %; paper, pair mode on GPU: "
            f"{100 * PAPER_COST:.0f} %).",
        ]
    )
    return data, md, runners


def run(size: str = "full", device: str = "cpu", presets: tuple[str, ...] | list[str] | None = None) -> BenchResult:
    """Run benchmark 2 at ``size`` on ``device`` (the same random initial weights for both models): fp32 on the
    CPU, bf16 autocast on CUDA (fp16 without bf16). ``presets`` (e.g. ``("small",)``): also at those presets' widths
    and vocabularies (``full``; smaller sizes keep the benchmark tokenizer's vocabulary), one section each."""
    scale = TRAIN_SCALES[check_size(size)]
    vocab = len(tokenizer_for(size))
    dtype_name = train_dtype_names(device)[-1] if is_cuda(device) else DTYPE
    data, md, runners = measure_cost(size, scale, vocab, device, dtype_name)
    costs = data["cost"]
    sections = [md]
    for preset in presets or ():
        recipe = get_preset("ctlaser", preset).recipe
        preset_vocab = recipe.vocab_size if size == "full" else vocab
        # full: the preset's own widths and batches; smaller sizes keep their overrides (a check in seconds)
        preset_scale = replace(scale, preset=preset)
        if size == "full":
            preset_scale = replace(preset_scale, max_tokens=recipe.max_tokens, overrides={})
        preset_data, preset_md, preset_runners = measure_cost(size, preset_scale, preset_vocab, device, dtype_name)
        data[f"{preset}_preset"] = preset_data
        sections += ["", f"Preset `{preset}`: " + preset_md]
        del preset_runners
        release_memory(device)
    targets = [
        Target(f"ctlaser cost, {mode} mode", cost, TARGET_COST, higher_is_better=False) for mode, cost in costs.items()
    ]
    profile = None
    missed = [t for t in targets if not t.passed]
    if missed:
        mode = "pair" if "pair" in missed[0].name else "multiway"
        profile = f"cT-LASER, {mode} mode, one micro-batch:\n" + runners[f"{mode}/ctlaser"].profile()
    return BenchResult(NUMBER, TITLE, data, "\n".join(sections), targets, profile)

"""Benchmark 6: decoding speed from sentence vectors, ``generate`` (transformers' GenerationMixin with the decoder
cache) vs the hand-written loop it replaced, which re-decoded the whole prefix at every step.

Sentences: the first NTREX-128 German lines (100 for ``quick`` and ``full``), encoded once (not timed) and decoded
into English in one batch. Models: the ``tiny`` presets of T-LASER and LASER_1 with random weights (speeds do not
depend on them), or a saved translation model (``--model-dir``). Every variant decodes exactly ``max_new_tokens``
tokens per sentence (``</s>`` suppressed: ``min_new_tokens`` = ``max_new_tokens`` for ``generate``, a masked
``</s>`` logit in the reference loops), greedy and beam 4, fp32. Baselines: the reference loops below (argmax /
top-k over ``decode_logits`` of the whole prefix, no cache), and ``generate(use_cache=False)`` (the same
GenerationMixin loop, re-decoding the prefix), to separate what the cache buys from the loop's own cost.

``python -m benchmarks.generation_speed [--size quick] [--model-dir DIR]`` prints the table.
"""

from __future__ import annotations

import argparse
import functools
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from benchmarks.common import (
    BenchResult,
    Target,
    build_model,
    check_size,
    log,
    md_table,
    median_times,
    ntrex_texts,
    profile_table,
    tokenizer_for,
)

NUMBER, TITLE = 6, "Generation speed: GenerationMixin with the decoder cache vs re-decoding the prefix"
TARGET_SPEEDUP = 1.5
MODELS = {"T-LASER": "tlaser", "LASER_1": "laser1"}
REFERENCE, CACHED = "reference loop, no cache", "generate + cache"


@dataclass(frozen=True)
class Scale:
    sentences: int
    max_new_tokens: int
    repeats: int
    beams: tuple[int, ...] = (1, 4)
    overrides: dict[str, dict] = field(default_factory=dict)  # preset -> config overrides


SCALES = {
    "smoke": Scale(4, 6, 1, overrides={"tlaser": dict(hidden_size=64, num_hidden_layers=2, intermediate_size=256)}),
    "quick": Scale(100, 64, 1),
    "full": Scale(100, 64, 3),
}


@torch.no_grad()
def reference_decode(model, vectors: torch.Tensor, langs: torch.LongTensor, steps: int, beams: int) -> torch.Tensor:
    """The no-cache baseline: ``steps`` tokens per sentence, each step re-decoding the whole prefix with
    ``decode_logits``; greedy for ``beams=1``, else beam search (fixed length, so no finished hypotheses to keep)."""
    cfg = model.config
    batch = len(vectors)
    vectors, langs = vectors.repeat_interleave(beams, 0), langs.repeat_interleave(beams, 0)
    seqs = torch.full((batch * beams, 1), cfg.decoder_start_token_id, dtype=torch.long, device=vectors.device)
    scores = torch.zeros(batch, beams, device=vectors.device)
    scores[:, 1:] = float("-inf")  # all beams start identical: expand the first one only
    offsets = torch.arange(batch, device=vectors.device)[:, None] * beams
    for _ in range(steps):
        logp = model.decode_logits(seqs, vectors, langs)[:, -1].float().log_softmax(-1)
        logp[:, cfg.eos_token_id] = float("-inf")
        scores, best = (scores.reshape(-1, 1) + logp).view(batch, -1).topk(beams, dim=1)
        rows = (best // logp.shape[-1] + offsets).view(-1)
        seqs = torch.cat([seqs[rows], (best % logp.shape[-1]).view(-1, 1)], dim=1)
    return seqs[::beams, 1:]


def load_models(size: str, scale: Scale, model_dir: str | None) -> tuple[dict, object]:
    """``{name: model}`` in eval mode and the tokenizer: the tiny presets (random weights) or ``model_dir``."""
    if model_dir:
        from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

        import hf_tlaser  # noqa: F401  (registers the model types with the Auto classes)

        model = AutoModelForSeq2SeqLM.from_pretrained(model_dir).eval()
        return {model.config.model_type: model}, AutoTokenizer.from_pretrained(model_dir)
    tokenizer = tokenizer_for(size)
    models = {
        name: build_model(preset, "tiny", len(tokenizer), **scale.overrides.get(preset, {})).eval()
        for name, preset in MODELS.items()
    }
    return models, tokenizer


def time_variants(
    model, vectors: torch.Tensor, langs: torch.LongTensor, steps: int, beams: int, repeats: int, label: str
) -> tuple[dict[str, float], dict[str, float], Callable[[], torch.Tensor]]:
    """Median seconds of each variant, the share of its output tokens equal to the reference loop's, and the cached
    ``generate`` call (to profile)."""
    options = dict(vectors=vectors, tgt_lang=langs, num_beams=beams, max_new_tokens=steps, min_new_tokens=steps)
    variants: dict[str, Callable[[], torch.Tensor]] = {
        REFERENCE: functools.partial(reference_decode, model, vectors, langs, steps, beams),
        "generate, use_cache=False": functools.partial(model.generate, **options, use_cache=False),
        CACHED: functools.partial(model.generate, **options, use_cache=True),
    }
    outputs = {name: fn() for name, fn in variants.items()}
    if any(out.shape != (len(vectors), steps) for out in outputs.values()):
        raise RuntimeError(f"{label}: a variant did not decode {steps} tokens per sentence")
    agreement = {name: float(out.eq(outputs[REFERENCE]).float().mean()) for name, out in outputs.items()}
    return median_times(variants, repeats, warmup=0, progress=label), agreement, variants[CACHED]


def run(size: str = "full", model_dir: str | None = None) -> BenchResult:
    """Run benchmark 6 at ``size``; ``model_dir``: a saved hf_tlaser translation model + tokenizer."""
    scale = SCALES[check_size(size)]
    models, tokenizer = load_models(size, scale, model_dir)
    texts = ntrex_texts(scale.sentences)["de"]
    enc = tokenizer(texts, padding=True, truncation=True, max_length=128, return_tensors="pt")
    steps = scale.max_new_tokens
    log(f"[6] {len(texts)} NTREX de sentences -> en, {steps} tokens each, models {list(models)}")
    rows, speed, agreement, targets, profile = [], {}, {}, [], None
    for name, model in models.items():
        with torch.no_grad():
            vectors = model.encode_sentences(enc["input_ids"], enc["attention_mask"])
        langs = model.lang_ids("en", len(texts), vectors.device)
        for beams in scale.beams:
            key = f"{name} {'greedy' if beams == 1 else f'beam {beams}'}"
            seconds, agreement[key], cached = time_variants(model, vectors, langs, steps, beams, scale.repeats, key)
            speed[key] = {variant: len(texts) * steps / s for variant, s in seconds.items()}
            targets.append(
                Target(f"{key}: {CACHED} / {REFERENCE}", seconds[REFERENCE] / seconds[CACHED], TARGET_SPEEDUP)
            )
            for variant, s in seconds.items():
                row = [key, variant, speed[key][variant], s, f"{seconds[REFERENCE] / s:.2f}x", agreement[key][variant]]
                rows.append(row)
                log(" | ".join(map(str, row)))
            if not targets[-1].passed and profile is None:
                profile = f"{key}, {CACHED}:\n" + profile_table(cached)
    data = {
        "sentences": len(texts),
        "max_new_tokens": steps,
        "repeats": scale.repeats,
        "parameters": {name: sum(p.numel() for p in model.parameters()) for name, model in models.items()},
        "weights": model_dir or "random",
        "tokens_per_second": speed,
        "speedup_cache_vs_reference": {t.name.split(":")[0]: t.value for t in targets},
        "token_agreement_with_reference": agreement,
    }
    md = "\n".join(
        [
            f"{len(texts)} NTREX-128 German sentences decoded into English in one batch, exactly {steps} tokens each "
            f"(`</s>` suppressed), fp32, median of {scale.repeats} interleaved repeat(s). Weights: "
            f"{model_dir or 'random (tiny presets)'}. tokens/s counts output tokens (sentences x tokens, not beams); "
            "speed-up = reference loop time / the variant's time; agreement = share of output tokens equal to the "
            "reference loop's (1 = same translations).",
            "",
            md_table(["model, decoding", "variant", "tokens/s", "seconds", "speed-up", "agreement"], rows),
        ]
    )
    return BenchResult(NUMBER, TITLE, data, md, targets, profile)


def main(argv: list[str] | None = None) -> int:
    """Run benchmark 6 alone and print its table."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.generation_speed", description=main.__doc__)
    parser.add_argument("--size", choices=sorted(SCALES), default="quick")
    parser.add_argument("--model-dir", default=None, help="a saved hf_tlaser translation model + tokenizer folder")
    args = parser.parse_args(argv)
    result = run(args.size, model_dir=args.model_dir)
    print(result.markdown)
    for target in result.targets:
        print(target.describe())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

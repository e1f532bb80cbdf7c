"""Benchmark 3: sentence embedding throughput of ``hf_tlaser.encode`` vs sentence-transformers, and what each fast
path of ``encode`` buys.

Texts: the first lines of NTREX-128 in 5 languages (1,000 x 5 = 5,000 for ``full``). Baseline: a same-size
``BertModel`` (layers, width, heads, FFN, ReLU, vocabulary; random weights) in a ``SentenceTransformer`` built from
``Transformer`` + CLS ``Pooling`` modules, with the batch size that gives the same number of forward calls as
``encode``'s token budget (ST sorts by length too). Ablation: switch off ONE fast path at a time (length bucketing,
pooled-only last layer, SDPA) and try bf16 autocast, whose embeddings must keep cosine >= 0.999 with fp32 (where
the CPU runs bf16 natively; elsewhere the row reads "emulated"). The baseline runs ``precision="fp32"``.

``device="cuda"``: both encoders on the GPU; ``full`` and ``quick`` then use the ``small`` preset's encoder shape and
every NTREX-128 line (the ``tiny`` shape leaves a GPU idle), and the bf16 row runs where
``torch.cuda.is_bf16_supported()``.
"""

from __future__ import annotations

import functools
import tempfile
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field

import numpy as np
import torch

import hf_tlaser
from benchmarks.common import (
    EMULATED,
    BenchResult,
    Target,
    check_size,
    emulation_note,
    interleaved,
    is_cuda,
    log,
    md_table,
    median,
    ntrex_texts,
    profile_table,
    tokenizer_for,
    train_dtype_names,
    without_sdpa,
)
from hf_tlaser.models.tlaser import TLaserModel
from hf_tlaser.tokenization import save_tokenizer
from hf_tlaser.training.presets import get_preset

NUMBER, TITLE = 3, "Embedding throughput: hf_tlaser.encode vs sentence-transformers, and the fast-path ablation"
TARGET_SPEEDUP, TARGET_COSINE = 1.2, 0.999


@dataclass(frozen=True)
class Scale:
    lines: int  # per language
    preset: str
    repeats: int
    max_tokens: int = 16000
    overrides: dict = field(default_factory=dict)


SCALES = {
    "smoke": Scale(
        20, "tiny", 1, max_tokens=2000, overrides=dict(hidden_size=64, num_hidden_layers=2, intermediate_size=256)
    ),
    "quick": Scale(200, "tiny", 3),
    "full": Scale(1000, "tiny", 3),
}
CUDA_SCALES = {"smoke": SCALES["smoke"], "quick": Scale(1997, "small", 3), "full": Scale(1997, "small", 5)}
"""``device="cuda"``: a GPU-sized encoder (NTREX-128 has 1,997 lines per language)."""


def build_encoder(scale: Scale, vocab_size: int) -> TLaserModel:
    """A ``TLaserModel`` with the preset's encoder shape and random weights (evaluation mode)."""
    torch.manual_seed(0)
    config = get_preset("tlaser", scale.preset).make_config(vocab_size, **scale.overrides)
    return TLaserModel(config).eval()


def build_sentence_transformer(encoder: TLaserModel, tokenizer, folder: str, device: str = "cpu"):
    """A ``SentenceTransformer`` (Transformer + CLS Pooling) on ``device`` around a same-size random ``BertModel``
    saved in ``folder`` with the same tokenizer."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.base.modules.transformer import Transformer
    from sentence_transformers.sentence_transformer.modules.pooling import Pooling
    from transformers import BertConfig, BertModel

    cfg = encoder.config
    bert_config = BertConfig(
        vocab_size=len(tokenizer),
        hidden_size=cfg.hidden_size,
        num_hidden_layers=cfg.num_hidden_layers,
        num_attention_heads=cfg.num_attention_heads,
        intermediate_size=cfg.intermediate_size,
        hidden_act=cfg.activation_function,
        max_position_embeddings=512,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(0)
    BertModel(bert_config).save_pretrained(folder)
    save_tokenizer(tokenizer, folder)
    transformer = Transformer(folder, max_seq_length=512)
    pooling = Pooling(transformer.get_embedding_dimension(), pooling_mode="cls")
    return SentenceTransformer(modules=[transformer, pooling], device=device)


def _full_forward(forward: Callable, *args, pooled_only: bool = False, **kwargs):
    return forward(*args, pooled_only=False, **kwargs)


@contextmanager
def full_last_layer(model: torch.nn.Module) -> Iterator[None]:
    """Make ``model`` ignore ``pooled_only=True`` (the last layer then computes every position) inside the block."""
    model.forward = functools.partial(_full_forward, model.forward)
    try:
        yield
    finally:
        del model.forward


def count_forward_calls(model: torch.nn.Module, fn: Callable[[], object]) -> int:
    """Number of ``model`` forward calls made by ``fn``."""
    calls = [0]
    handle = model.register_forward_hook(lambda *_: calls.__setitem__(0, calls[0] + 1))
    try:
        fn()
    finally:
        handle.remove()
    return calls[0]


def min_cosine(a: np.ndarray, b: np.ndarray, center: np.ndarray | None = None) -> float:
    """Smallest row-wise cosine between ``a`` and ``b`` (both minus ``center`` when given)."""
    if center is not None:
        a, b = a - center, b - center
    a = a / np.linalg.norm(a, axis=1, keepdims=True)
    b = b / np.linalg.norm(b, axis=1, keepdims=True)
    return float((a * b).sum(1).min())


def run(size: str = "full", model_path: str | None = None, device: str = "cpu") -> BenchResult:
    """Run benchmark 3 at ``size`` on ``device``; ``model_path``: a saved hf_tlaser T-LASER model + tokenizer instead
    of random weights (makes the bf16 cosine check meaningful)."""
    scale = (CUDA_SCALES if is_cuda(device) else SCALES)[check_size(size)]
    texts = [t for lang_texts in ntrex_texts(scale.lines).values() for t in lang_texts]
    if model_path:
        from transformers import AutoModel, AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(model_path)
        model = AutoModel.from_pretrained(model_path).eval()
    else:
        tokenizer = tokenizer_for(size)
        model = build_encoder(scale, len(tokenizer))
    model.to(device)
    n_tokens = sum(len(ids) for ids in tokenizer(texts)["input_ids"])
    log(f"[3] {len(texts)} NTREX sentences ({n_tokens:,} tokens), max_tokens={scale.max_tokens}")

    def encode(**options) -> np.ndarray:
        return model.encode(texts, tokenizer, max_tokens=scale.max_tokens, show_progress=False, **options)

    def baseline(subset: list[str] = texts) -> np.ndarray:
        return hf_tlaser.encode(
            model,
            tokenizer,
            subset,
            max_tokens=scale.max_tokens,
            show_progress=False,
            precision="fp32",
            device=device,
        )

    calls = count_forward_calls(model, baseline)
    st_batch = max(1, round(len(texts) / calls))
    with tempfile.TemporaryDirectory() as folder:
        st_model = build_sentence_transformer(model, tokenizer, folder, device)
    variants: dict[str, Callable[[], np.ndarray]] = {
        "hf_tlaser.encode": baseline,
        "sentence-transformers": lambda: st_model.encode(
            texts, batch_size=st_batch, convert_to_numpy=True, show_progress_bar=False
        ),
        "no length bucketing": lambda: encode(sort_by_length=False),
        "full last layer": lambda: _within(full_last_layer(model), encode),
        "no SDPA": lambda: _within(without_sdpa(), encode),
    }
    bf16 = "bf16 autocast"
    if train_dtype_names(device)[-1] == "bf16":
        variants[bf16] = lambda: encode(autocast_dtype=torch.bfloat16)
    reference = variants["hf_tlaser.encode"]()
    outputs = {name: fn() for name, fn in variants.items() if name != "sentence-transformers"}
    cosines = {name: min_cosine(reference, out) for name, out in outputs.items()}
    centred = min_cosine(reference, outputs[bf16], center=reference.mean(0)) if bf16 in outputs else None
    spread = float(1 - min_cosine(reference, np.broadcast_to(reference.mean(0), reference.shape)))
    times = interleaved(variants, scale.repeats, warmup=0, progress="embedding")
    speed = {name: len(texts) / median(t) for name, t in times.items()}
    base = speed["hf_tlaser.encode"]
    speedup = base / speed["sentence-transformers"]
    rows = []
    for name in variants:
        ratio = base / speed[name]
        note = f"{ratio:.2f}x slower" if ratio >= 1 else f"{1 / ratio:.2f}x faster"
        note = "baseline" if name == "hf_tlaser.encode" else note
        cosine = f"{cosines[name]:.6f}" if name in cosines else "-"
        rows.append([name, speed[name], speed[name] * n_tokens / len(texts), f"{ratio:.2f}", note, cosine])
    if bf16 not in variants:
        rows.append([bf16, EMULATED, EMULATED, "-", "not timed", "-"])
    cfg = model.config
    data = {
        "device": device,
        "sentences": len(texts),
        "tokens": n_tokens,
        "encoder": {
            "preset": scale.preset,
            "hidden_size": cfg.hidden_size,
            "layers": cfg.num_hidden_layers,
            "heads": cfg.num_attention_heads,
            "ffn": cfg.intermediate_size,
            "vocab_size": cfg.vocab_size,
        },
        "max_tokens": scale.max_tokens,
        "hf_tlaser_forward_calls": calls,
        "st_batch_size": st_batch,
        "repeats": scale.repeats,
        "sentences_per_second": speed,
        "speedup_vs_sentence_transformers": speedup,
        "slowdown_without": {name: base / s for name, s in speed.items() if name != "hf_tlaser.encode"},
        "min_cosine_vs_fp32": cosines,
        "bf16_min_cosine_centred": centred,
        "bf16_emulated": bf16 not in variants,
        "fp32_max_cosine_distance_to_mean": spread,
        "weights": model_path or "random",
    }
    md = "\n".join(
        [
            f"{len(texts):,} NTREX-128 sentences ({scale.lines:,} lines x 5 languages, {n_tokens:,} tokens). Encoder: "
            f"`{scale.preset}` preset shape (d={cfg.hidden_size}, {cfg.num_hidden_layers} layers, "
            f"{cfg.num_attention_heads} heads, FFN {cfg.intermediate_size}, vocabulary {cfg.vocab_size:,}), random "
            f"weights. `hf_tlaser.encode` with max_tokens={scale.max_tokens:,} made {calls} forward calls, so "
            f"sentence-transformers runs with batch_size={st_batch} (same number of calls; it sorts by length too). "
            f"Ablation rows call `model.encode` with ONE fast path off; median of {scale.repeats} interleaved "
            f"repeats; on {device if is_cuda(device) else 'the CPU'}.",
            "",
            md_table(
                ["variant", "sentences/s", "tokens/s", "time / hf_tlaser", "", "min cosine vs fp32 hf_tlaser"], rows
            ),
            "",
            f"hf_tlaser.encode vs sentence-transformers: **{speedup:.2f}x** (target >= {TARGET_SPEEDUP}). "
            + (
                f"bf16 autocast: min cosine **{cosines[bf16]:.6f}** vs fp32 (target >= {TARGET_COSINE}); after "
                f"subtracting the mean fp32 embedding: {centred:.6f}. "
                if bf16 in cosines
                else emulation_note() + " "
            )
            + f"Weights: {model_path or 'random'}"
            + (
                f" (random vectors sit close together: max cosine distance to their mean {spread:.2g}, so the centred "
                "cosine is the stricter check; pass `--model PATH` for a trained model)."
                if not model_path
                else "."
            ),
        ]
    )
    targets = [Target("hf_tlaser.encode / sentence-transformers", speedup, TARGET_SPEEDUP)]
    if bf16 in cosines:
        targets.append(Target("bf16 min cosine vs fp32", cosines[bf16], TARGET_COSINE))
    profile = None
    if not targets[0].passed:
        subset = texts[: max(1, len(texts) // 10)]
        profile = "hf_tlaser.encode, 10 % of the sentences:\n" + profile_table(lambda: baseline(subset))
    return BenchResult(NUMBER, TITLE, data, md, targets, profile)


def _within(context: AbstractContextManager, fn: Callable[[], np.ndarray]) -> np.ndarray:
    with context:
        return fn()

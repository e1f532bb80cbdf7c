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

The command itself (``python -m benchmarks.embedding_throughput --model runs/demo [--against OTHER_CHECKOUT]``):
``hf-tlaser embed``'s lines/s on 7,030 NTREX-128 and FLORES-200 lines (``EMBED_TEXTS``), each run a fresh process
with ``--threads`` OpenMP threads and the command's defaults (``--precision auto``: bf16 where the CPU runs it
natively), model loading not counted (the command's own ``seconds``); with ``--against``, the same runs of another
checkout's code, interleaved. It prints the lines/s of each at its min and median time and the share of the CPU's
bf16 matmul peak (``matmul_gflops`` on the same threads, the best of the rounds) that the encoder's FLOPs take at
the median: every layer over every token of each line, as the model reads it (``Encoder.tokenize``), and, beside
it, over the padded batches that ``hf-tlaser embed`` packs.
"""

from __future__ import annotations

import argparse
import functools
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

import hf_tlaser
from benchmarks.common import (
    EMULATED,
    BenchResult,
    Target,
    check_size,
    emulation_note,
    encoder_layer_flops,
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
from hf_tlaser.data.batching import pack_chunk
from hf_tlaser.data.paths import get_data_dir
from hf_tlaser.data.readers import iter_lines
from hf_tlaser.encoders import Encoder, load
from hf_tlaser.hardware import matmul_gflops
from hf_tlaser.inference.embed import Job
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
        model, tokenizer = hf_tlaser.load_model(model_path, backend="torch")
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


# ---------------------------------------------------------------------------------------------------- the command

EMBED_TEXTS = (
    "ntrex128/newstest2019-src.eng.txt",
    "ntrex128/newstest2019-ref.deu.txt",
    "flores-devtest/fra_Latn.devtest",
    "flores-devtest/rus_Cyrl.devtest",
    "flores-devtest/zho_Hans.devtest",
)
"""The command's input, under the data folder: two NTREX-128 files (1,997 lines each) and three FLORES-200 devtest
files (1,012 each), 7,030 lines in five languages and three scripts."""
MATMUL_SIZE = 2048
"""Side of the matmul whose bf16 GFLOP/s is the peak."""
REPO = Path(__file__).resolve().parent.parent
"""This checkout: where its runs start (a run of another checkout starts in that one)."""


def embed_input(folder: Path, data_dir: str | None = None) -> tuple[Path, list[str]]:
    """``EMBED_TEXTS`` written as one file in ``folder``; its path and lines."""
    data = get_data_dir(data_dir)
    lines = [line for name in EMBED_TEXTS for line in iter_lines(data / name)]
    path = folder / "ntrex-flores.txt"
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path, lines


def encoder_shape(encoder: Encoder) -> tuple[int, int, int]:
    """(width, FFN width, layers) of the encoder's transformer: an hf_tlaser model's own layers or backbone, or a
    sentence-transformers model's first module."""
    config = encoder.model.config if hasattr(encoder.model, "config") else encoder.model[0].model.config
    shape = getattr(config, "backbone", None) or config.to_dict()
    return shape["hidden_size"], shape["intermediate_size"], shape["num_hidden_layers"]


def command_flops(encoder: Encoder, lines: list[str]) -> tuple[float, float]:
    """The encoder's FLOPs over ``lines`` (every layer over every position, ``encoder_layer_flops``): over each
    line's own tokens, and over the padded batches ``hf-tlaser embed`` packs with its default budget."""
    d, f, layers = encoder_shape(encoder)
    rows, _ = encoder.tokenize(lines)
    lengths = np.array([len(row) for row in rows], dtype=np.int64)
    ones = np.ones(len(rows), dtype=np.int64)
    batches = pack_chunk(np.arange(len(rows)), lengths, lengths, ones, ones, Job.max_tokens, Job.batch_size)
    own = sum(sum(encoder_layer_flops(1, int(n), d, f)) for n in lengths) * layers
    padded = sum(sum(encoder_layer_flops(len(b), int(lengths[b].max()), d, f)) for b in batches) * layers
    return own, padded


def command_seconds(model: str, source: Path, folder: Path, threads: int, tree: str | None) -> float:
    """One ``hf-tlaser embed`` run in a fresh process on ``threads`` OpenMP threads (``tree``: another checkout's
    code): the seconds it reports for its lines (model loading left out)."""
    code = Path(tree or REPO).resolve()
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), PYTHONPATH=str(code))
    output = folder / "out.npy"
    args = ["embed", "--model", model, "--input", str(source), "--output", str(output)]
    done = subprocess.run(
        [sys.executable, "-m", "hf_tlaser.cli", *args], cwd=code, env=env, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise SystemExit(f"hf-tlaser embed ({tree or 'this checkout'}) failed:\n{done.stderr[-3000:]}")
    for path in (output, output.with_name(output.name + ".json")):
        path.unlink()
    summary = dict(line.split(": ", 1) for line in done.stdout.splitlines() if ": " in line)
    return float(summary["seconds"])


def command_throughput(
    model: str, repeats: int = 3, threads: int = 2, against: str | None = None, data_dir: str | None = None
) -> dict:
    """``hf-tlaser embed`` on ``EMBED_TEXTS`` with ``model``, ``repeats`` rounds of this checkout and ``against``
    (another checkout, or None) run in turn; the lines/s of each and the share of the bf16 matmul peak."""
    runs = {"this checkout": None, **({f"against {against}": against} if against else {})}
    model = str(Path(model).resolve()) if Path(model).exists() else model  # the runs start in their checkout
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        source, lines = embed_input(folder, data_dir)
        own, padded = command_flops(load(model, device="cpu"), lines)
        torch.set_num_threads(threads)
        seconds: dict[str, list[float]] = {name: [] for name in runs}
        peak = 0.0
        for rnd in range(repeats):
            peak = max(peak, matmul_gflops((torch.bfloat16,), size=MATMUL_SIZE)[torch.bfloat16])
            for name, tree in runs.items():
                seconds[name].append(command_seconds(model, source, folder, threads, tree))
                log(f"embed {name}, round {rnd + 1}/{repeats}: {len(lines) / seconds[name][-1]:.1f} lines/s")
    out = {"model": model, "lines": len(lines), "threads": threads, "bf16_peak_gflops": round(peak, 1), "runs": {}}
    for name, times in seconds.items():
        middle = median(times)
        out["runs"][name] = {
            "lines_per_second_best": round(len(lines) / min(times), 1),
            "lines_per_second_median": round(len(lines) / middle, 1),
            "peak_share_median": round(own / middle / 1e9 / peak, 3),
            "peak_share_padded_median": round(padded / middle / 1e9 / peak, 3),
        }
    return out


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m benchmarks.embedding_throughput``: time ``hf-tlaser embed`` (module docstring) and print it."""
    parser = argparse.ArgumentParser(description="hf-tlaser embed's lines/s and its share of the bf16 matmul peak")
    default = "runs/demo" if Path("runs/demo/config.json").is_file() else "../shared/data/multilingual-e5-small"
    parser.add_argument("--model", default=default, help="model SPEC (default: %(default)s)")
    parser.add_argument("--repeats", type=int, default=3, help="rounds (default: %(default)s)")
    parser.add_argument("--threads", type=int, default=2, help="OpenMP threads of each run (default: %(default)s)")
    parser.add_argument("--against", metavar="CHECKOUT", help="another checkout's folder, timed in the same rounds")
    parser.add_argument("--data-dir", help="data folder (default: $HF_TLASER_DATA, else ../shared/data)")
    args = parser.parse_args(argv)
    result = command_throughput(args.model, args.repeats, args.threads, args.against, args.data_dir)
    print(f"{result['lines']} lines, {args.threads} threads, bf16 matmul peak {result['bf16_peak_gflops']} GFLOP/s")
    for name, run in result["runs"].items():
        print(
            f"{name}: {run['lines_per_second_best']} lines/s at the min time, {run['lines_per_second_median']} at the "
            f"median; {run['peak_share_median']:.1%} of the bf16 peak on the lines' FLOPs "
            f"({run['peak_share_padded_median']:.1%} counting padding)"
        )


if __name__ == "__main__":
    main()

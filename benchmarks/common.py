"""Shared benchmark machinery: sizes, real data and tokenizer, interleaved timing, FLOP counts, machine info,
profiler tables and the result record every benchmark returns."""

from __future__ import annotations

import functools
import gc
import os
import platform
import statistics
import time
from collections.abc import Callable, Iterable, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from transformers import PreTrainedTokenizerFast

from hf_tlaser.data import (
    DEFAULT_TRAIN_CORPORA,
    MultiwayBatchSampler,
    PairBatchSampler,
    ParallelExamples,
    TranslationCollator,
    count_target_tokens,
    load_corpora,
    load_corpus,
    sentence_lengths,
)
from hf_tlaser.hardware import (
    PrecisionChoice,
    available_cpus,
    cpu_bf16_native,
    cpu_capability,
    cpu_model,
    matmul_gflops,
    resolve_precision,
)
from hf_tlaser.training.presets import get_preset

SIZES = ("smoke", "quick", "full")
"""``smoke``: seconds, for the tests; ``quick``: about a minute per benchmark; ``full``: the reported numbers."""
DEVICES = ("cpu", "cuda")
"""``--device``: where benchmarks 1-3 run (the others time CPU-side work and run on the CPU)."""

Batch = dict[str, torch.Tensor]


def check_size(size: str) -> str:
    if size not in SIZES:
        raise ValueError(f"unknown size {size!r}; expected one of {SIZES}")
    return size


def check_device(device: str) -> str:
    """``device`` if this machine has it ("cuda" or "cuda:N" needs a visible CUDA device); ValueError otherwise."""
    kind = device.split(":", 1)[0]
    if kind not in DEVICES:
        raise ValueError(f"unknown device {device!r}; expected one of {DEVICES}")
    if kind == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {device!r}: no CUDA device visible to torch {torch.__version__}")
    return device


def is_cuda(device: str) -> bool:
    return device.startswith("cuda")


def release_memory(device: str) -> None:
    """Collects the garbage of a finished section and, on CUDA, hands its cached GPU memory back."""
    gc.collect()
    if is_cuda(device):
        torch.cuda.empty_cache()


def synchronize(device: str) -> None:
    """Wait for the GPU's queued work (no-op on CPU): a timer read after this covers the kernels launched before."""
    if is_cuda(device):
        torch.cuda.synchronize(device)


def train_dtype_names(device: str) -> tuple[str, ...]:
    """The training dtypes timed on ``device``: fp32 and bf16, bf16 where the hardware runs it natively (CPU: not
    where emulated; CUDA: ``torch.cuda.is_bf16_supported``, else fp16 instead)."""
    if is_cuda(device):
        return ("fp32", "bf16") if torch.cuda.is_bf16_supported(including_emulation=False) else ("fp32", "fp16")
    return timed_dtypes(("fp32", "bf16"))


@dataclass
class Target:
    """A pass/fail goal of a benchmark: ``value`` compared with ``threshold`` (``>=`` or ``<=``)."""

    name: str
    value: float
    threshold: float
    higher_is_better: bool = True

    @property
    def passed(self) -> bool:
        return self.value >= self.threshold if self.higher_is_better else self.value <= self.threshold

    def describe(self) -> str:
        sign = ">=" if self.higher_is_better else "<="
        return f"{self.name}: {self.value:.3g} (target {sign} {self.threshold:g}) {'met' if self.passed else 'MISSED'}"


@dataclass
class BenchResult:
    """What a benchmark returns: JSON-able ``data``, a markdown section body, targets and an optional profile."""

    number: int
    title: str
    data: dict[str, Any]
    markdown: str
    targets: list[Target] = field(default_factory=list)
    profile: str | None = None
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "number": self.number,
            "title": self.title,
            "data": self.data,
            "targets": [{**t.__dict__, "passed": t.passed} for t in self.targets],
            "profile": self.profile,
            "seconds": round(self.seconds, 2),
        }


# ---------------------------------------------------------------------------------------------------- timing


def median(values: Iterable[float]) -> float:
    return float(statistics.median(list(values)))


def interleaved(
    fns: dict[str, Callable[[], Any]], repeats: int, warmup: int = 1, progress: str | None = None
) -> dict[str, list[float]]:
    """Wall-clock seconds of each callable over ``repeats`` rounds run A B C A B C ... (after ``warmup`` rounds),
    so that drifts of the machine's speed hit every variant alike."""
    times: dict[str, list[float]] = {name: [] for name in fns}
    for rnd in range(warmup + repeats):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn()
            elapsed = time.perf_counter() - start
            if rnd >= warmup:
                times[name].append(elapsed)
        if progress:
            log(f"{progress}: round {rnd + 1}/{warmup + repeats}")
    return times


def median_times(
    fns: dict[str, Callable[[], Any]], repeats: int, warmup: int = 1, progress: str | None = None
) -> dict[str, float]:
    """The median of each callable's wall-clock seconds over ``repeats`` ``interleaved`` rounds."""
    return {name: median(times) for name, times in interleaved(fns, repeats, warmup, progress).items()}


def log(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", flush=True)


@contextmanager
def autocast(dtype: torch.dtype | None, device: str = "cpu"):
    """``torch.autocast`` for a lower precision, nothing for ``None`` / float32."""
    enabled = dtype is not None and dtype != torch.float32
    with torch.autocast(device, dtype=dtype if enabled else None, enabled=enabled):
        yield


DTYPES: dict[str, torch.dtype | None] = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}
EMULATED = "emulated"
"""Printed instead of a number for a bf16 variant on a CPU that only emulates bf16 (not timed, no target)."""


@functools.cache
def cpu_bf16() -> PrecisionChoice:
    """An explicit bf16 on this CPU as ``resolve_precision`` sees it (logs the one warning line where emulated)."""
    return resolve_precision("bf16", "cpu")


def timed_dtypes(names: Sequence[str]) -> tuple[str, ...]:
    """The dtypes of ``names`` worth timing on this CPU: bf16 is left out where it is only emulated (~70x slower)."""
    return tuple(name for name in names if not (name == "bf16" and cpu_bf16().emulated))


def emulation_note() -> str:
    """One sentence for a report section whose bf16 variants were not timed; "" on a CPU with native bf16."""
    choice = cpu_bf16()
    if not choice.emulated:
        return ""
    cost = f"; a bf16 matmul is {choice.slowdown:.0f}x slower than fp32" if choice.slowdown else ""
    return f"bf16 is emulated on this CPU (no native bf16{cost}): bf16 rows are not timed."


# ---------------------------------------------------------------------------------------------------- FLOPs


def encoder_layer_flops(batch: int, seq: int, d: int, f: int, first_only: bool = False) -> tuple[float, float]:
    """(projection + FFN, attention) multiply-add FLOPs of one encoder layer: 2BS(4d^2 + 2df) and 2*2*B*S^2*d.

    ``first_only`` (T-LASER's pooled-only last layer): keys/values for all S positions, the rest for one query."""
    if first_only:
        return 2.0 * batch * (seq * 2 * d * d + 2 * d * d + 2 * d * f), 4.0 * batch * seq * d
    return 2.0 * batch * seq * (4 * d * d + 2 * d * f), 4.0 * batch * seq * seq * d


def encoder_flops(batch: int, seq: int, d: int, f: int, layers: int, pooled_only: bool = False) -> tuple[float, float]:
    """(linear, attention) FLOPs of a ``layers``-deep encoder forward (layer norms, embeddings left out)."""
    linear = attention = 0.0
    for i in range(layers):
        lin, att = encoder_layer_flops(batch, seq, d, f, first_only=pooled_only and i == layers - 1)
        linear, attention = linear + lin, attention + att
    return linear, attention


# ---------------------------------------------------------------------------------------------------- data


@dataclass(frozen=True)
class DataScale:
    """How much real data a size reads: lines per corpus file, tokenizer vocabulary and training lines."""

    max_lines: int
    vocab_size: int
    tokenizer_lines: int


DATA_SCALES = {
    "smoke": DataScale(max_lines=200, vocab_size=400, tokenizer_lines=300),
    "quick": DataScale(max_lines=3000, vocab_size=4000, tokenizer_lines=3000),
    "full": DataScale(max_lines=20000, vocab_size=8000, tokenizer_lines=20000),
}


@functools.cache
def ntrex_texts(lines: int) -> dict[str, list[str]]:
    """The first ``lines`` NTREX-128 sentences of each of the 5 languages."""
    ds = load_corpus("ntrex128", max_lines=lines)
    return {lang: list(ds[lang]) for lang in ("de", "en", "es", "fr", "it")}


@functools.cache
def tokenizer_for(size: str) -> PreTrainedTokenizerFast:
    """A joint BPE (the package's ``train_tokenizer``) on the first lines of the 5-way newstest and europarl data."""
    from hf_tlaser.tokenization import train_tokenizer

    scale = DATA_SCALES[check_size(size)]
    ds = load_corpus("wmt-newstest-multiway", max_lines=scale.tokenizer_lines)
    texts = [t for lang in ("de", "en", "es", "fr", "it") for t in ds[lang] if t]
    return train_tokenizer(texts=texts, vocab_size=scale.vocab_size, show_progress=False)


@functools.cache
def training_data(size: str):
    """Cleaned training mix (the default corpora, first ``max_lines`` of every file) and its token lengths."""
    tokenizer = tokenizer_for(size)
    ds = load_corpora(DEFAULT_TRAIN_CORPORA, tokenizer=tokenizer, max_lines=DATA_SCALES[size].max_lines)
    return ds, sentence_lengths(ds, tokenizer)


def real_batches(size: str, mode: str, max_tokens: int, num_batches: int, seed: int = 0) -> list[Batch]:
    """``num_batches`` pre-collated micro-batches of the real training mix, drawn exactly as training draws them.

    ``mode="pair"``: ``PairBatchSampler`` + collator with target encodings (``tgt_input_ids``; drop them with
    ``without_targets`` for plain models). ``mode="multiway"``: ``MultiwayBatchSampler`` + multi-way collator.
    """
    ds, lengths = training_data(size)
    tokenizer = tokenizer_for(size)
    if mode == "pair":
        sampler = PairBatchSampler(lengths, max_tokens, seed=seed, num_batches=num_batches)
    elif mode == "multiway":
        sampler = MultiwayBatchSampler(lengths, max_tokens, seed=seed, num_batches=num_batches)
    else:
        raise ValueError(f"mode={mode!r}; expected 'pair' or 'multiway'")
    examples = ParallelExamples(ds)
    collator = TranslationCollator(tokenizer, with_target_encoding=mode == "pair")
    return [collator(examples.__getitems__(items)) for items in sampler]


def without_targets(batches: Sequence[Batch]) -> list[Batch]:
    """The same batches without the target encodings (a plain T-LASER/LASER batch encodes the sources only)."""
    return [{k: v for k, v in b.items() if k not in ("tgt_input_ids", "tgt_attention_mask")} for b in batches]


def target_tokens(batches: Sequence[Batch]) -> int:
    return sum(count_target_tokens(b) for b in batches)


# ---------------------------------------------------------------------------------------------------- models


def count_parameters(model: torch.nn.Module) -> int:
    """Distinct trainable parameters (tied weights once)."""
    return sum(p.numel() for p in {id(p): p for p in model.parameters() if p.requires_grad}.values())


@dataclass(frozen=True)
class TrainScale:
    """Size of a training-throughput benchmark: model preset (+ overrides) and the real micro-batches timed."""

    preset: str
    max_tokens: int
    num_batches: int
    repeats: int
    overrides: dict = field(default_factory=dict)


TRAIN_SCALES = {
    "smoke": TrainScale(
        "tiny",
        max_tokens=500,
        num_batches=2,
        repeats=1,
        overrides=dict(hidden_size=64, num_hidden_layers=2, intermediate_size=256, decoder_ffn_dim=256),
    ),
    "quick": TrainScale("tiny", max_tokens=1500, num_batches=3, repeats=3),
    "full": TrainScale("tiny", max_tokens=3000, num_batches=6, repeats=5),
}


def build_model(model: str, preset_size: str, vocab_size: int, seed: int = 0, **overrides) -> torch.nn.Module:
    """A translation model from ``get_preset(model, preset_size)`` with random weights, trained with the paper's
    losses only (the tiny preset's alignment loss is switched off: benchmarks compare the architectures)."""
    torch.manual_seed(seed)
    preset = get_preset(model, preset_size)
    return preset.model_class(preset.make_config(vocab_size, **{"align_loss_weight": 0.0, **overrides}))


class TrainStep:
    """One full training step per micro-batch: forward (optionally under autocast) + backward + AdamW step.

    Calling it runs every batch once (and waits for the GPU, if any)."""

    def __init__(
        self,
        model: torch.nn.Module,
        batches: Sequence[Batch],
        dtype: torch.dtype | None = None,
        device: str = "cpu",
    ):
        self.model, self.dtype, self.device = model.to(device).train(), dtype, device
        self.batches = [{k: v.to(device) for k, v in b.items()} for b in batches]
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.98), weight_decay=1e-4)

    def step(self, batch: Batch) -> None:
        with autocast(self.dtype, self.device.split(":", 1)[0]):
            loss = self.model(**batch).loss
        loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)

    def __call__(self) -> None:
        for batch in self.batches:
            self.step(batch)
        synchronize(self.device)

    def profile(self) -> str:
        """``profile_table`` of one training step on the first micro-batch."""
        return profile_table(lambda: self.step(self.batches[0]))


def train_speeds(steps: dict[str, TrainStep], repeats: int, progress: str) -> dict[str, float]:
    """Target tokens per second of each training step (all its micro-batches), by the median of ``repeats``
    interleaved rounds."""
    seconds = median_times(steps, repeats, progress=progress)
    return {name: target_tokens(step.batches) / seconds[name] for name, step in steps.items()}


# ---------------------------------------------------------------------------------------------------- reports


MATMUL_N = {"smoke": 256, "quick": 1024, "full": 1024}
CUDA_MATMUL_N = {"smoke": 1024, "quick": 4096, "full": 8192}


def cuda_matmul_tflops(
    dtypes: Sequence[torch.dtype] = (torch.bfloat16,), size: int = 8192, reps: int = 10, device: str = "cuda"
) -> dict[torch.dtype, float]:
    """TFLOP/s of a ``size`` x ``size`` x ``size`` matmul on the GPU per dtype: ``reps`` back-to-back products
    after 3 warm-ups, timed with CUDA events (the kernels' own time, then ``torch.cuda.synchronize``)."""
    out = {}
    for dtype in dtypes:
        a = torch.randn(size, size, device=device, dtype=dtype)
        b = torch.randn(size, size, device=device, dtype=dtype)
        for _ in range(3):
            torch.mm(a, b)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize(device)
        start.record()
        for _ in range(reps):
            torch.mm(a, b)
        end.record()
        torch.cuda.synchronize(device)
        seconds = start.elapsed_time(end) / 1e3 / reps
        out[dtype] = 2 * size**3 / seconds / 1e12
        del a, b
    torch.cuda.empty_cache()
    return out


def nvidia_driver() -> str | None:
    """The NVIDIA driver version from ``nvidia-smi`` (None without it)."""
    import subprocess

    try:
        done = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip().splitlines()[0] if done.returncode == 0 and done.stdout.strip() else None


def cuda_info(device: str = "cuda", matmul_n: int = 8192) -> dict[str, Any]:
    """The GPU: name, memory, multiprocessors, driver, CUDA runtime of torch, bf16 support and the measured
    bf16 (and tf32-off fp32) matmul peaks."""
    props = torch.cuda.get_device_properties(device)
    bf16 = torch.cuda.is_bf16_supported(including_emulation=False)
    dtypes = (torch.bfloat16, torch.float16, torch.float32) if bf16 else (torch.float16, torch.float32)
    peak = cuda_matmul_tflops(dtypes, size=matmul_n, device=device)
    info = {
        "device": f"{device} ({torch.cuda.get_device_name(device)})",
        "gpu_memory_gib": round(props.total_memory / 2**30, 1),
        "gpu_multiprocessors": props.multi_processor_count,
        "gpu_capability": f"{props.major}.{props.minor}",
        "nvidia_driver": nvidia_driver(),
        "torch_cuda": torch.version.cuda,
        "gpu_bf16": "native" if bf16 else "no",
    }
    names = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32 (tf32 off)"}
    info.update({f"gpu matmul {matmul_n}^3 {names[d]} TFLOP/s": round(v, 1) for d, v in peak.items()})
    info["precision auto (gpu)"] = str(resolve_precision("auto", device).precision)
    return info


def machine_info(matmul_n: int = 1024, device: str = "cpu", cuda_matmul_n: int = 8192) -> dict[str, Any]:
    """CPU model, ISA and bf16 support, matmul peak per dtype, the ``auto`` precision, threads, library versions and
    the load average at the start; on a CUDA ``device`` also the GPU, its driver and its measured matmul peaks
    (``cuda_info``)."""
    import sentence_transformers
    import transformers

    auto = resolve_precision("auto", "cpu")
    peak = matmul_gflops((torch.float32, torch.bfloat16), size=matmul_n)
    info = {
        "cpu": cpu_model(),
        "cpu_capability": cpu_capability(),
        "cpu_bf16_native": cpu_bf16_native(),
        "bf16": EMULATED if cpu_bf16().emulated else "native",
        f"matmul {matmul_n}x{matmul_n} fp32 GFLOP/s": round(peak[torch.float32], 1),
        f"matmul {matmul_n}x{matmul_n} bf16 GFLOP/s": round(peak[torch.bfloat16], 1),
        "precision auto": f"{auto.precision} ({auto.reason})",
        "cpu_count": os.cpu_count(),
        "available_cpus": available_cpus(),
        "torch_threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "sentence_transformers": sentence_transformers.__version__,
        "platform": platform.platform(),
        "load_average_1min": round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None,
        "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
    }
    if is_cuda(device):
        info.update(cuda_info(device, cuda_matmul_n))
    return info


def profile_table(fn: Callable[[], Any], rows: int = 10) -> str:
    """torch.profiler top-``rows`` operators by self CPU time of one call of ``fn``."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    return prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=rows)


def md_table(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """A markdown table; floats get 3 significant digits (thousands separators above 1000)."""

    def cell(value: Any) -> str:
        if isinstance(value, bool):
            return str(value)
        if isinstance(value, float):
            return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.3g}"
        if isinstance(value, int):
            return f"{value:,}"
        return str(value)

    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------------- attention


def manual_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    **_: Any,
) -> torch.Tensor:
    """Hand-written softmax attention with ``scaled_dot_product_attention``'s arguments (bool or additive mask)."""
    scores = (query @ key.transpose(-2, -1)) * (scale if scale is not None else query.shape[-1] ** -0.5)
    if is_causal:
        causal = torch.ones(query.shape[-2], key.shape[-2], dtype=torch.bool, device=query.device).tril()
        scores = scores.masked_fill(~causal, float("-inf"))
    if attn_mask is not None:
        scores = scores.masked_fill(~attn_mask, float("-inf")) if attn_mask.dtype == torch.bool else scores + attn_mask
    weights = F.dropout(scores.softmax(-1), dropout_p) if dropout_p else scores.softmax(-1)
    return weights @ value


@contextmanager
def without_sdpa():
    """Replace ``torch.nn.functional.scaled_dot_product_attention`` by ``manual_attention`` inside the block."""
    original = F.scaled_dot_product_attention
    F.scaled_dot_product_attention = manual_attention
    try:
        yield
    finally:
        F.scaled_dot_product_attention = original

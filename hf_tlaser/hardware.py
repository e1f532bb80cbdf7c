"""Fast and correct on the machine a run lands on: device, precision and thread choices from the hardware.

CPUs differ: some run bf16 natively (AVX512-BF16 / AMX), others only emulate it (AVX2: bf16 matmul ~70x slower than
fp32, and oneDNN has no bf16 LSTM). ``resolve_precision("auto")`` reads the hardware, runs a short cached matmul probe
and picks what is fast there; ``choose_precision`` is the pure decision behind it.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import os
import platform
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from hf_tlaser.version import __version__

logger = logging.getLogger(__name__)

PRECISIONS = ("auto", "fp32", "bf16", "fp16")
DEVICES = ("cpu", "cuda", "mps")
_AUTOCAST_DTYPES = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}
_NATIVE_BF16_ISAS = ("AVX512", "AMX")
PROBE_SIZE = 512
PROBE_REPS = 5


@dataclass(frozen=True)
class PrecisionChoice:
    """A resolved precision for one device, with the reason it was chosen.

    ``slowdown`` is the measured bf16 / fp32 matmul time ratio where a probe ran (70.0: bf16 is 70x slower;
    0.25: bf16 is 4x faster).
    """

    precision: str
    requested: str
    device: str
    reason: str
    emulated: bool = False
    slowdown: float | None = None

    @property
    def autocast_dtype(self) -> torch.dtype | None:
        """dtype for ``torch.autocast`` (None: run in fp32, no autocast)."""
        return _AUTOCAST_DTYPES[self.precision]

    @property
    def bf16(self) -> bool:
        return self.precision == "bf16"

    @property
    def fp16(self) -> bool:
        return self.precision == "fp16"

    def to_dict(self) -> dict:
        return asdict(self)


def _check_requested(requested: str) -> str:
    if requested not in PRECISIONS:
        raise ValueError(f"precision={requested!r}; expected one of {PRECISIONS}")
    return requested


def _device_type(device: str | torch.device) -> str:
    kind = torch.device(device).type
    if kind not in DEVICES:
        raise ValueError(f"device {str(device)!r}; hf_tlaser chooses precision for {DEVICES}")
    return kind


def choose_precision(
    requested: str,
    device: str,
    *,
    cuda_bf16: bool = False,
    cpu_capability: str = "",
    cpu_bf16_native: bool = False,
    probe_speedup: float | None = None,
) -> PrecisionChoice:
    """Decide the precision from hardware facts (pure; ``resolve_precision`` gathers the facts).

    Args:
        requested: one of ``PRECISIONS``.
        device: "cpu", "cuda" or "mps" (an index such as "cuda:1" is accepted).
        cuda_bf16: the CUDA device computes bf16 natively (Ampere or newer).
        cpu_capability: ``torch.backends.cpu.get_cpu_capability()``, e.g. "AVX512" or "AVX2".
        cpu_bf16_native: ``torch.ops.mkldnn._is_mkldnn_bf16_supported()``.
        probe_speedup: measured fp32 / bf16 matmul time (2.0: bf16 twice as fast; None: not measured).

    ``auto``: CUDA -> bf16 if supported, else fp16; MPS -> fp32; CPU -> bf16 only when the CPU reports native bf16
    and the probe found bf16 at least as fast as fp32, else fp32. Explicit choices are kept; ``emulated`` marks an
    explicit bf16 on hardware without native bf16.
    """
    _check_requested(requested)
    kind = _device_type(device)
    slowdown = 1.0 / probe_speedup if probe_speedup and kind == "cpu" else None
    if kind == "cuda":
        native, hardware = cuda_bf16, "CUDA device " + ("with" if cuda_bf16 else "without") + " native bf16"
    elif kind == "mps":
        native, hardware = True, "MPS device"
    else:
        isa = cpu_capability or "unknown ISA"
        native = cpu_bf16_native and cpu_capability.upper().startswith(_NATIVE_BF16_ISAS)
        hardware = f"CPU reports {isa} " + ("with" if native else "without") + " native bf16"
    probe = f"probe: bf16 matmul {probe_speedup:.2g}x fp32" if probe_speedup else "no probe"

    if requested != "auto":
        emulated = requested == "bf16" and not native
        reason = f"{requested} requested; {hardware}"
        if requested == "bf16" and kind == "cpu":
            reason += f" ({probe})"
        return PrecisionChoice(requested, requested, kind, reason, emulated, slowdown)
    if kind == "cuda":
        precision = "bf16" if cuda_bf16 else "fp16"
        return PrecisionChoice(precision, requested, kind, f"auto: {hardware}", slowdown=slowdown)
    if kind == "mps":
        reason = "auto: fp32 on MPS (PyTorch's MPS autocast does not cover every op used here, e.g. LSTMs)"
        return PrecisionChoice("fp32", requested, kind, reason)
    if not native:
        reason = f"auto: {hardware} (bf16 would be emulated, far slower than fp32)"
        return PrecisionChoice("fp32", requested, kind, reason, slowdown=slowdown)
    if probe_speedup is None or probe_speedup < 1.0:
        why = "the probe did not run" if probe_speedup is None else f"the probe found bf16 slower ({probe})"
        return PrecisionChoice("fp32", requested, kind, f"auto: {hardware} but {why}, so fp32", slowdown=slowdown)
    return PrecisionChoice("bf16", requested, kind, f"auto: {hardware} ({probe})", slowdown=slowdown)


def _precision_warning(choice: PrecisionChoice) -> str | None:
    """The one warning line an explicit choice deserves on this hardware, or None."""
    if choice.requested == "auto":
        return None
    if choice.emulated and choice.device == "cpu":
        isa = cpu_capability()
        cost = f"about {choice.slowdown:.0f}x slower than fp32" if choice.slowdown else "much slower than fp32"
        return f"bf16 on this CPU is emulated ({isa} only): {cost}; use --precision fp32 or auto"
    if choice.emulated:
        return f"bf16 on this {choice.device} device is emulated: slower than fp16; use --precision fp16 or auto"
    if choice.fp16 and choice.device == "cpu":
        return "fp16 on CPU runs, but is rarely faster than fp32 and loses range; use --precision auto"
    return None


def default_device() -> torch.device:
    """cuda if available, else mps if available, else cpu (accelerate's order)."""
    if torch.cuda.is_available():
        return torch.device("cuda")
    if torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def cpu_capability() -> str:
    """ATen's vectorisation level on this CPU, e.g. "AVX512" or "AVX2" ("" where torch cannot tell)."""
    try:
        return torch.backends.cpu.get_cpu_capability()
    except (AttributeError, RuntimeError):  # pragma: no cover - very old torch
        return ""


def cpu_bf16_native() -> bool:
    """oneDNN's bf16 flag: True on x86 CPUs with AVX512 (core) or better, where its bf16 kernels are fast; False
    where bf16 is only emulated (AVX2) and oneDNN has no bf16 LSTM."""
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):  # pragma: no cover - torch built without oneDNN
        return False


@functools.cache
def cpu_model() -> str:
    """The CPU's marketing name (``model name`` in /proc/cpuinfo), or what ``platform`` knows."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def matmul_gflops(
    dtypes: tuple[torch.dtype, ...] = (torch.float32, torch.bfloat16),
    size: int = PROBE_SIZE,
    reps: int = PROBE_REPS,
    min_seconds: float = 0.1,
) -> dict[torch.dtype, float]:
    """GFLOP/s of a ``size`` x ``size`` CPU matmul per dtype: the best of interleaved rounds after one warm-up.

    At least ``reps`` rounds, more (up to ``10 * reps``) while they took under ``min_seconds``: on a shared, noisy
    machine the best of many short runs is the one that had the cores (contention only adds time).
    """
    operands = {dtype: (torch.randn(size, size).to(dtype), torch.randn(size, size).to(dtype)) for dtype in dtypes}
    for a, b in operands.values():
        torch.mm(a, b)
    best = dict.fromkeys(dtypes, math.inf)
    rounds, started = 0, time.perf_counter()
    while rounds < reps or (rounds < 10 * reps and time.perf_counter() - started < min_seconds):
        for dtype, (a, b) in operands.items():
            start = time.perf_counter()
            torch.mm(a, b)
            best[dtype] = min(best[dtype], time.perf_counter() - start)
        rounds += 1
    return {dtype: 2 * size**3 / max(seconds, 1e-9) / 1e9 for dtype, seconds in best.items()}


def _cache_file() -> Path | None:
    """``$HF_TLASER_CACHE/precision_probe.json`` (default ``~/.cache/hf_tlaser``); None without a home directory."""
    root = os.environ.get("HF_TLASER_CACHE")
    try:
        return (Path(root) if root else Path.home() / ".cache" / "hf_tlaser") / "precision_probe.json"
    except RuntimeError:
        return None


def _read_probe_cache(path: Path | None) -> dict:
    try:
        cached = json.loads(path.read_text(encoding="utf-8")) if path else {}
    except (OSError, ValueError):
        return {}
    return cached if isinstance(cached, dict) else {}


def _write_probe_cache(path: Path | None, cached: dict) -> None:
    """Write atomically (processes probing at once never leave half a file); an unwritable place is skipped."""
    if path is None:
        return
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps(cached, indent=1, sort_keys=True), encoding="utf-8")
        os.replace(tmp, path)
    except OSError as error:
        logger.debug("cannot write the precision probe cache %s: %s", path, error)


@functools.cache
def probe_bf16_speedup() -> float | None:
    """fp32 / bf16 matmul time on this CPU (>1: bf16 faster), cached per process and on disk.

    The disk cache (``$HF_TLASER_CACHE`` or ``~/.cache/hf_tlaser``) is keyed by CPU model, torch version, ATen
    capability and oneDNN's bf16 flag; an unreadable or unwritable cache only costs the probe (one thread, ~0.1 s
    native, ~1.5 s emulated). None when the probe itself fails.
    """
    key = f"{cpu_model()} | torch {torch.__version__} | {cpu_capability()} | bf16_native={cpu_bf16_native()}"
    path = _cache_file()
    cached = _read_probe_cache(path)
    if isinstance(cached.get(key), (int, float)):
        return float(cached[key])
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # bf16 vs fp32 is a per-core property; one thread is not skewed by busy neighbours
    try:
        gflops = matmul_gflops()
    except RuntimeError as error:  # pragma: no cover - a torch build without CPU bf16 kernels
        logger.info("bf16 probe failed: %s", error)
        return None
    finally:
        torch.set_num_threads(threads)
    speedup = gflops[torch.bfloat16] / gflops[torch.float32]
    _write_probe_cache(path, {**cached, key: round(speedup, 4)})
    return speedup


def resolve_precision(requested: str = "auto", device: str | torch.device | None = None) -> PrecisionChoice:
    """Choose the precision for ``device`` (default: ``default_device()``) on this machine.

    Reads the hardware, runs the cached bf16 probe when it matters (CPU, ``auto`` on a native-bf16 CPU or an explicit
    bf16) and logs one warning line for an explicit choice that will be slow here (emulated bf16, fp16 on CPU).
    """
    _check_requested(requested)
    kind = _device_type(default_device() if device is None else device)
    facts: dict = {}
    if kind == "cuda":
        facts["cuda_bf16"] = torch.cuda.is_bf16_supported(including_emulation=False)
    elif kind == "cpu":
        facts["cpu_capability"] = cpu_capability()
        facts["cpu_bf16_native"] = cpu_bf16_native()
        if requested == "bf16" or (requested == "auto" and facts["cpu_bf16_native"]):
            facts["probe_speedup"] = probe_bf16_speedup()
    choice = choose_precision(requested, kind, **facts)
    warning = _precision_warning(choice)
    if warning:
        logger.warning(warning)
    return choice


def _cgroup_cpus(cgroup_root: Path) -> float | None:
    """CPU quota of this process's cgroup (v2 ``cpu.max``, v1 ``cfs_quota_us / cfs_period_us``); None if unlimited."""
    candidates = [(cgroup_root / "cpu.max", None)]
    try:
        for line in Path("/proc/self/cgroup").read_text(encoding="utf-8").splitlines():
            if line.startswith("0::/") and line.strip() != "0::/":
                candidates.insert(0, (cgroup_root / line[4:].strip() / "cpu.max", None))
    except OSError:
        pass
    for v1 in ("cpu", "cpu,cpuacct"):
        candidates.append((cgroup_root / v1 / "cpu.cfs_quota_us", cgroup_root / v1 / "cpu.cfs_period_us"))
    for quota_file, period_file in candidates:
        try:
            if period_file is None:
                quota, period = quota_file.read_text(encoding="utf-8").split()[:2]
            else:
                quota = quota_file.read_text(encoding="utf-8").strip()
                period = period_file.read_text(encoding="utf-8").strip()
        except (OSError, ValueError):
            continue
        if quota in ("max", "-1"):
            return None
        try:
            return int(quota) / int(period)
        except (ValueError, ZeroDivisionError):
            continue
    return None


def available_cpus(cgroup_root: str | Path = "/sys/fs/cgroup") -> int:
    """CPUs this process may use: the affinity mask, capped by the cgroup CPU quota and by ``OMP_NUM_THREADS``."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        cpus = os.cpu_count() or 1
    quota = _cgroup_cpus(Path(cgroup_root))
    if quota is not None:
        cpus = min(cpus, max(1, math.ceil(quota)))
    omp = os.environ.get("OMP_NUM_THREADS", "").strip()
    if omp.isdigit() and int(omp) > 0:
        cpus = min(cpus, int(omp))
    return max(1, cpus)


def configure_threads(num_threads: int | None = None) -> int:
    """Set torch's intra-op threads to ``num_threads`` (default: ``available_cpus()``); return the number set."""
    threads = num_threads or available_cpus()
    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)
    return threads


def environment_report() -> dict:
    """What a bug report needs: versions, device, CPU, bf16 support, threads and the ``auto`` precision."""
    import transformers

    device = default_device()
    choice = resolve_precision("auto", device)
    report = {
        "hf_tlaser": __version__,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "device": str(device),
        "cpu_model": cpu_model(),
        "cpu_capability": cpu_capability(),
        "cpu_bf16_native": cpu_bf16_native(),
        "available_cpus": available_cpus(),
        "torch_threads": torch.get_num_threads(),
        "precision": choice.precision,
        "precision_reason": choice.reason,
    }
    if device.type == "cuda":
        report["cuda_device"] = torch.cuda.get_device_name(device)
    return report

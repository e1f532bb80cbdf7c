"""Inference backends of a saved model folder: torch, or the ONNX / OpenVINO files that ``hf-tlaser export`` wrote
into it, run by ONNX Runtime or OpenVINO behind the same ``encode`` as the torch encoder.

Backends (``BACKENDS``):

* ``torch``: the model's own forward (``precision`` picks fp32 or bf16 autocast, ``hf_tlaser.hardware``);
* ``onnx``: ``onnx/model.onnx`` (fp32) in ONNX Runtime;
* ``onnx-int8``: the dynamically quantised ONNX file for this CPU's instruction set
  (``onnx/model_qint8_avx512_vnni.onnx``, ``model_quint8_avx2.onnx``, ...; ``onnx_int8_file``);
* ``openvino``: ``openvino/openvino_model.xml``; ``precision`` "fp32" computes in fp32, "bf16" and "auto" leave the
  CPU plugin its default (bf16 where the CPU runs it natively);
* ``openvino-int8``: ``openvino/openvino_model_qint8_quantized.xml`` (int8 weights);
* ``openvino-int8-static``: ``openvino/openvino_model_qint8_static.xml`` (int8 weights and activations, their ranges
  calibrated on a few hundred sentences).

The exported graph gives the encoder's per-token final states; the folder's pooling (``cls`` / ``mean``) and the
modules a backbone carried after it (``Dense``, ``Normalize``) are applied here, as sentence-transformers applies its
``1_Pooling`` / ``2_Dense`` modules.

``backends.json`` in a folder records, per CPU class (``cpu_class``), each backend's measured speed and quality
against torch fp32 (``scripts/bench_backends.py --record``); ``choose_backend`` (``backend="auto"``) takes the
fastest backend accepted there (NTREX within ``MAX_NTREX_LOSS`` points, SIB-200 within ``MAX_SIB200_LOSS``) whose
files and packages are present, and torch otherwise: a backend whose quality was not measured is never picked.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import logging
import os
import platform
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from hf_tlaser.backend.measured import accepted, read_measured
from hf_tlaser.errors import UsageError
from hf_tlaser.hardware import cpu_bf16_native, cpu_capability
from hf_tlaser.models.common.encode import encode_texts
from hf_tlaser.models.common.pooling import head_output_dim, pool_hidden, pooling_mode, sentence_head
from hf_tlaser.models.common.st_folder import read_model_config, saved_head_weights
from hf_tlaser.models.registry import FAMILIES

logger = logging.getLogger(__name__)

BACKENDS = ("torch", "onnx", "onnx-int8", "openvino", "openvino-int8", "openvino-int8-static")
EXPORTED = tuple(model_type for model_type, family in FAMILIES.items() if family.exports)
"""model_types whose encoder exports (``Family.exports``): T-LASER / cT-LASER (own layers or a pretrained backbone)
and LDT. LASER's and Yu 2018's recurrent encoders (packed sequences) do not."""
EXTRAS = {
    "onnx": ("onnx", "onnxruntime"),
    "openvino": ("onnx", "onnxruntime", "openvino"),
    "openvino-int8": ("nncf",),
}
"""The modules each export needs, all in ``pip install hf_tlaser[onnx]`` / ``hf_tlaser[openvino]``."""
RUNTIMES = {"onnx": "onnxruntime", "openvino": "openvino"}
"""The module that runs each backend's files."""
ONNX_FILE = "onnx/model.onnx"
OPENVINO_FILE = "openvino/openvino_model.xml"
OPENVINO_INT8_FILE = "openvino/openvino_model_qint8_quantized.xml"
OPENVINO_STATIC_FILE = "openvino/openvino_model_qint8_static.xml"
ONNX_CPU_TARGETS = {
    # sentence-transformers / optimum's names; avx2 keeps activations and weights unsigned (no u8*s8 saturation)
    "avx512_vnni": ("qint8", "avx512_vnni"),
    "avx512": ("qint8", "avx512f"),
    "avx2": ("quint8", "avx2"),
    "arm64": ("qint8", None),
}
"""ONNX int8 target -> (weight type in the file name, /proc/cpuinfo flag the target needs; None: an ARM CPU)."""
EXPORT_RECORD = "hf_tlaser_export.json"
"""Beside each backend's files (``onnx/``, ``openvino/``): ``{file: digest of the weights it was exported from}``."""


def require(modules: Sequence[str], extra: str) -> None:
    """UsageError naming the extra to install where one of ``modules`` cannot be imported."""
    for name in modules:
        try:
            importlib.import_module(name)
        except ImportError as error:
            raise UsageError(
                f"the {extra} backend needs the {name!r} package ({error}); install it with: "
                f"pip install 'hf_tlaser[{extra}]'"
            ) from None


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> set[str]:
    """This CPU's feature flags (Linux ``/proc/cpuinfo``; empty where it cannot be read)."""
    try:
        text = cpuinfo.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return set()
    for line in text.splitlines():
        if line.startswith(("flags", "Features")):
            return set(line.split(":", 1)[1].split())
    return set()


def is_arm() -> bool:
    return platform.machine().lower() in {"arm64", "aarch64"}


def widest_target() -> str | None:
    """The widest ONNX int8 target this CPU has ("arm64" on ARM); None for an x86 CPU without AVX2."""
    if is_arm():
        return "arm64"
    flags = cpu_flags()
    return next((t for t in ("avx512_vnni", "avx512", "avx2") if ONNX_CPU_TARGETS[t][1] in flags), None)


def this_cpu_target() -> str:
    """The ONNX int8 target of this CPU: the widest int8 instruction set it has."""
    target = widest_target()
    if target is None:
        raise UsageError("this CPU has no AVX2: int8 ONNX files need AVX2 or newer; pass --cpu for another machine")
    return target


LIMITED_CLASS = "avx2-limited"
"""``cpu_class`` of an AVX512 CPU whose vector units are limited to AVX2 (README, "Testing the other CPU class")."""


def cpu_class() -> str:
    """This CPU for speed records: its int8 target, ``+bf16`` where it runs bf16 natively (``avx512_vnni+bf16``).

    An AVX512 CPU on which ATen or oneDNN reports less (``ATEN_CPU_CAPABILITY=avx2``, ``ONEDNN_MAX_CPU_ISA=AVX2``) is
    ``LIMITED_CLASS``: what is measured so stands neither for this CPU nor for a real AVX2-only one (ONNX Runtime
    ignores the limits and keeps its AVX512 kernels), so ``backend="auto"`` never reads it on either."""
    target = widest_target()
    if target in ("avx512", "avx512_vnni") and (cpu_capability() == "AVX2" or not cpu_bf16_native()):
        return LIMITED_CLASS
    return (target or "x86") + ("+bf16" if cpu_flags() & {"avx512_bf16", "amx_bf16"} else "")


def onnx_int8_file(target: str) -> str:
    """The quantised file's path in the folder, named as sentence-transformers names it."""
    weights, _ = ONNX_CPU_TARGETS[target]
    return f"onnx/model_{weights}_{target}.onnx"


def runs_here(target: str, flags: set[str] | None = None) -> bool:
    """Whether this CPU has the instructions of an ONNX int8 ``target``."""
    flag = ONNX_CPU_TARGETS[target][1]
    if flag is None:
        return is_arm()
    return flag in (cpu_flags() if flags is None else flags)


def check_quantized_file_cpu(path: str | Path, flags: set[str] | None = None) -> None:
    """UsageError where an int8 ONNX file (named ``model_<weights>_<target>.onnx``) is used on a CPU without the
    instructions its target names; nothing for another file."""
    name = Path(path).stem
    for target, (weights, _) in ONNX_CPU_TARGETS.items():
        if name == f"model_{weights}_{target}" and not runs_here(target, flags):
            raise UsageError(
                f"{path} was quantised for {target}, which this CPU lacks; use onnx/model.onnx or export one for "
                f"this CPU (hf-tlaser export FOLDER --backend onnx --quantize int8 --cpu {this_cpu_target()})"
            )


def export_command(folder: Path, backend: str) -> str:
    """The ``hf-tlaser export`` command that writes ``backend``'s file into ``folder``."""
    kind, _, quantize = backend.partition("-")
    command = f"hf-tlaser export {folder} --backend {kind}" + (f" --quantize {quantize}" if quantize else "")
    return command + (" --calibration TEXT_FILE" if quantize == "int8-static" else "")


def hash_file(path: Path) -> str:
    """Hex SHA-256 of every byte of a file, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    block = bytearray(1 << 20)
    view = memoryview(block)
    with path.open("rb", buffering=0) as handle:
        while read := handle.readinto(block):
            digest.update(view[:read])
    return digest.hexdigest()


_DIGESTS: dict[tuple[str, int, int], str] = {}
"""In-process memo of ``weights_digest``'s file hashes, keyed by (path, size, mtime_ns)."""


def weights_digest(folder: str | os.PathLike) -> str:
    """SHA-256 of what an exported graph is computed from: the folder's ``config.json`` and ``*.safetensors`` weights
    (by name and content; the tokenizer and the pooling's modules are read from the folder when the file runs)."""
    folder = Path(folder)
    digest = hashlib.sha256()
    for path in sorted([folder / "config.json", *folder.glob("*.safetensors")]):
        if not path.is_file():
            continue
        stat = path.stat()
        key = (str(path.resolve()), stat.st_size, stat.st_mtime_ns)
        if key not in _DIGESTS:
            _DIGESTS[key] = hash_file(path)
        digest.update(f"{path.name}\0{_DIGESTS[key]}\n".encode())
    return digest.hexdigest()


def record_export(folder: Path, name: str) -> None:
    """Note in ``EXPORT_RECORD`` beside ``folder / name`` the weights it was exported from (``weights_digest``),
    written atomically."""
    path = (folder / name).parent / EXPORT_RECORD
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        record = {}
    record = record if isinstance(record, dict) else {}
    record[Path(name).name] = weights_digest(folder)
    partial = path.with_name(path.name + ".partial")  # renamed over it: a failed write leaves the record whole
    try:
        partial.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)


def check_export_current(folder: Path, path: Path, backend: str) -> None:
    """UsageError, naming the export command, unless ``EXPORT_RECORD`` says ``path`` was exported from the weights
    the folder holds now: stale files would give another model's vectors under this folder's name."""
    try:
        recorded = json.loads((path.parent / EXPORT_RECORD).read_text(encoding="utf-8")).get(path.name)
    except (OSError, ValueError, AttributeError):
        recorded = None
    if recorded == weights_digest(folder):
        return
    problem = (
        "has no record of the weights it was exported from (written before hf_tlaser kept one, or copied in)"
        if recorded is None
        else f"was exported from other weights than {folder} holds now"
    )
    raise UsageError(f"{path} {problem}; re-export it: {export_command(folder, backend)} --overwrite")


def backend_file(folder: Path, backend: str) -> Path:
    """The file ``backend`` runs in ``folder``; UsageError naming the export command where it is missing. For
    ``onnx-int8``: this CPU's target file, else another int8 file this CPU runs."""
    if backend == "onnx-int8":
        targets = [this_cpu_target(), *ONNX_CPU_TARGETS]
        for target in dict.fromkeys(targets):
            if runs_here(target) and (folder / onnx_int8_file(target)).is_file():
                return folder / onnx_int8_file(target)
        name = onnx_int8_file(this_cpu_target())
    else:
        name = {
            "onnx": ONNX_FILE,
            "openvino": OPENVINO_FILE,
            "openvino-int8": OPENVINO_INT8_FILE,
            "openvino-int8-static": OPENVINO_STATIC_FILE,
        }[backend]
        if (folder / name).is_file():
            return folder / name
    command = export_command(folder, backend)
    raise UsageError(f"backend {backend!r}: {folder / name} does not exist; write it with: {command}")


def exported_type(folder: Path, problem: str, remedy: str) -> str:
    """The folder's ``model_type`` (read as JSON); UsageError with ``problem`` and ``remedy`` for one that does not
    export."""
    model_type = read_model_config(folder).get("model_type")
    if model_type not in EXPORTED:
        raise UsageError(f"{folder}: model_type {model_type!r} {problem} (exported: {', '.join(EXPORTED)}); {remedy}")
    return model_type


class ExportedEncoder(torch.nn.Module):
    """A folder's exported encoder (``backend`` one of ``BACKENDS`` but torch) with the torch encoder's ``encode``;
    ``hf_tlaser.encode`` takes it as it takes a model. ``threads``: intra-op threads (default: torch's).

    It holds no parameters: ``config`` is the folder's ``config.json``, ``head`` the carried modules after pooling
    (their weights from the folder's safetensors), ``device`` the CPU.
    """

    def __init__(
        self,
        folder: str | os.PathLike,
        backend: str,
        precision: str = "auto",
        file_name: str | None = None,
        threads: int | None = None,
    ) -> None:
        super().__init__()
        folder = Path(folder)
        if backend not in BACKENDS[1:]:
            raise UsageError(f"backend {backend!r}: choose from {', '.join(BACKENDS)}")
        model_type = exported_type(folder, "has no exported backend", "use backend='torch'")
        self.config = FAMILIES[model_type].config_class.from_pretrained(folder)
        kind = backend.partition("-")[0]
        require((RUNTIMES[kind],), kind)
        self.path = folder / file_name if file_name else backend_file(folder, backend)
        check_quantized_file_cpu(self.path)
        check_export_current(folder, self.path, backend)
        self.backend, self.precision = backend, precision
        self.mode = pooling_mode(self.config.to_dict())
        self.head = sentence_head(self.config)
        if self.head is not None:
            weights = saved_head_weights(folder)
            self.head.load_state_dict({f"{i}.{name}": w.float() for i, ws in weights.items() for name, w in ws.items()})
        self.dim = head_output_dim(getattr(self.config, "sentence_modules", None), self.config.hidden_size)
        threads = threads or torch.get_num_threads()
        self.run = onnx_runner(self.path, threads) if kind == "onnx" else openvino_runner(self.path, precision, threads)

    @property
    def device(self) -> torch.device:
        return torch.device("cpu")

    def describe(self) -> str:
        """``onnx-int8 (onnx/model_qint8_avx512_vnni.onnx)``."""
        return f"{self.backend} ({self.path.parent.name}/{self.path.name})"

    def sentence_vectors(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """The sentence vectors of a right-padded batch: the exported final states, pooled, through the head."""
        states = torch.from_numpy(self.run(input_ids.numpy(), attention_mask.numpy())).float()
        pooled = pool_hidden(states, attention_mask, self.mode)
        return pooled if self.head is None else self.head(pooled)

    def encode(self, texts: str | list[str], tokenizer, **options):
        """``SentenceEncoderMixin.encode`` on the exported files (``autocast_dtype`` is ignored: the backend's
        precision was fixed when it was loaded)."""
        options.pop("autocast_dtype", None)
        return encode_texts(
            self,
            self.sentence_vectors,
            tokenizer,
            texts,
            limit=self.config.max_position_embeddings,
            dim=self.dim,
            **options,
        )


def onnx_runner(path: Path, threads: int = 1):
    """``(input_ids, attention_mask) -> final states`` of an ONNX file in ONNX Runtime on ``threads`` threads."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])

    def run(input_ids: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
        return session.run(["last_hidden_state"], {"input_ids": input_ids, "attention_mask": attention_mask})[0]

    return run


def openvino_runner(path: Path, precision: str = "fp32", threads: int = 1):
    """``(input_ids, attention_mask) -> final states`` of an OpenVINO model on the CPU plugin: ``precision``
    "fp32" computes in f32; "auto" / "bf16" leave the plugin its default (bf16 where the CPU runs it natively), but
    on a ``LIMITED_CLASS`` CPU: the plugin still sees AVX512-BF16 there and picks bf16 kernels that the oneDNN limit
    then refuses, so it computes in f32, as its default is on a real AVX2-only CPU."""
    import openvino as ov

    config = {"INFERENCE_NUM_THREADS": threads}
    if precision == "fp32" or cpu_class() == LIMITED_CLASS:
        config["INFERENCE_PRECISION_HINT"] = "f32"
    compiled = ov.Core().compile_model(str(path), "CPU", config)
    output = compiled.output(0)

    def run(input_ids: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
        states = compiled({"input_ids": input_ids, "attention_mask": attention_mask})[output]
        if states.shape[:2] != input_ids.shape:
            # seen with ONEDNN_MAX_CPU_ISA limiting an AVX512 CPU: the int8-weight kernels return an empty array
            limit = os.environ.get("ONEDNN_MAX_CPU_ISA")
            hint = f"; ONEDNN_MAX_CPU_ISA={limit} is set, run without it" if limit else ""
            raise RuntimeError(
                f"{path}: OpenVINO returned final states of shape {tuple(states.shape)} for input ids of shape "
                f"{tuple(input_ids.shape)}{hint}"
            )
        return states

    return run


def available(folder: Path, backend: str) -> bool:
    """Whether ``backend`` can run here: torch always; else its file is in the folder, exported from the weights the
    folder holds now (``check_export_current``; a warning says why not), and its package imports."""
    if backend == "torch":
        return True
    try:
        check_export_current(folder, backend_file(folder, backend), backend)
        require((RUNTIMES[backend.partition("-")[0]],), backend)
    except UsageError as error:
        logger.warning("backend %s is not taken: %s", backend, error)
        return False
    return True


def choose_backend(folder: str | os.PathLike) -> str:
    """``backend="auto"``: the fastest backend measured on this CPU class that kept the quality (``accepted``) and can
    run here, if it beats torch; "torch" otherwise."""
    folder = Path(folder)
    records = read_measured(folder).get(cpu_class(), {})
    best, speed = "torch", float(records.get("torch", {}).get("speedup", 1.0))
    for backend, record in records.items():
        if backend in BACKENDS and accepted(record) and record.get("speedup", 0) > speed and available(folder, backend):
            best, speed = backend, float(record["speedup"])
    return best


def load_backend(
    folder: str | os.PathLike, backend: str = "auto", precision: str = "auto", threads: int | None = None
) -> ExportedEncoder | None:
    """The exported encoder ``backend`` of ``folder`` ("auto": ``choose_backend`` where ``precision`` is "auto",
    else torch); None for torch: load the model itself (``AutoModel.from_pretrained``)."""
    if backend not in ("auto", *BACKENDS):
        raise UsageError(f"backend {backend!r}: choose from auto, {', '.join(BACKENDS)}")
    if backend == "auto":
        backend = choose_backend(folder) if precision == "auto" else "torch"
    return None if backend == "torch" else ExportedEncoder(folder, backend, precision, threads=threads)

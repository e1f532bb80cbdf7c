"""``hf-tlaser export``: ONNX and OpenVINO files of a saved model folder, where sentence-transformers' ``backend=``
loader looks for them.

* ``--backend onnx`` writes ``onnx/model.onnx`` (fp32): the encoder's per-token final states
  (``input_ids``, ``attention_mask`` -> ``last_hidden_state``), which sentence-transformers pools with the folder's
  own ``1_Pooling`` (and carried ``Dense`` / ``Normalize``) modules, as in the torch backend. The tokenizer, and so
  the prompt it adds, is the folder's, unchanged.
* ``--quantize int8`` adds a dynamically quantised copy named as sentence-transformers' own export helpers name
  theirs (``onnx/model_qint8_avx512_vnni.onnx``, ``model_quint8_avx2.onnx``, ...): int8 weights, activations
  quantised at run time, for the instruction set of ``--cpu`` (default: this CPU's).
* ``--backend openvino`` writes ``openvino/openvino_model.xml`` / ``.bin`` (fp32), converted from the ONNX graph;
  ``--quantize int8`` adds ``openvino/openvino_model_qint8_quantized.xml`` (NNCF's int8 weight compression);
  ``--quantize int8-static --calibration FILE`` adds ``openvino/openvino_model_qint8_static.xml``: NNCF's post-training
  quantisation of weights and activations (transformer preset), the activations' ranges measured on the first
  ``CALIBRATION_LINES`` lines of FILE (a few hundred sentences of the training text).

The tools are PyTorch's ONNX exporter, ONNX Runtime's quantiser, OpenVINO's converter and NNCF; nothing here
builds a graph by hand. Every file written is checked against the torch model on held-out sentences before the
command ends (``max_abs_diff`` for fp32, ``min_cosine`` for int8), and the folder's other files are not touched,
so it loads as before with ``AutoModel`` and ``SentenceTransformer(..., trust_remote_code=True)``.

Before the model loads, the export checks that it runs no code of the folder unasked (``--trust-remote-code``), that
an int8 file would not be made from an fp32 file of older weights, that the folder (and ``onnx/`` / ``openvino/``)
can be written and that the filesystems of the folder and of the temporary files have room for the files
(:func:`export_bytes`, from the weights' shapes); a write error is one line naming the file. Each file written is
recorded with the digest of the weights it came from (``hf_tlaser_export.json``), and a file whose weights changed
since is refused where it would run.

sentence-transformers loads the files with ``backend="onnx"`` / ``"openvino"`` (and ``trust_remote_code=True``)
through optimum (``optimum-onnx``, ``optimum-intel``); an int8 file is picked with
``model_kwargs={"file_name": "onnx/model_qint8_avx512_vnni.onnx"}``. OpenVINO's CPU plugin computes in bf16 by
default on a CPU with native bf16: ``model_kwargs={"ov_config": {"INFERENCE_PRECISION_HINT": "f32"}}`` keeps fp32.
The files load with optimum-onnx 0.1.0 (transformers 4.57) and optimum-intel 2.2.0 (transformers 5.5); neither
imports with a newer transformers. docs/export.md has the measurements.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import shutil
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from hf_tlaser.backend.convert import (
    LastHiddenState,
    compress_openvino,
    export_onnx,
    export_openvino,
    quantize_onnx,
    quantize_openvino_static,
    sample_batch,
)
from hf_tlaser.backend.runtime import (
    EXPORT_RECORD,
    EXTRAS,
    ONNX_CPU_TARGETS,
    ONNX_FILE,
    OPENVINO_FILE,
    OPENVINO_INT8_FILE,
    OPENVINO_STATIC_FILE,
    check_export_current,
    exported_type,
    onnx_int8_file,
    onnx_runner,
    openvino_runner,
    record_export,
    require,
    this_cpu_target,
)
from hf_tlaser.commands import print_summary, run_command
from hf_tlaser.errors import UsageError
from hf_tlaser.guards import check_space, check_writable, refuse_outputs_over_inputs, write_failed
from hf_tlaser.models.common.pooling import pool_hidden, pooling_mode
from hf_tlaser.models.common.st_folder import has_sentence_transformers_files, read_model_config

logger = logging.getLogger(__name__)

BACKENDS = ("onnx", "openvino")
QUANTIZE = ("int8", "int8-static")
CALIBRATION_LINES = 300
FP32_TOLERANCE = 1e-4
"""Largest absolute difference of an fp32 file's final states to torch's before the export fails (measured ~1e-6)."""
INT8_MIN_COSINE = 0.9
"""Smallest cosine of an int8 file's pooled vectors to torch's before the export fails: a broken file, not a quality
bound (measure quality with ``hf-tlaser evaluate``)."""
CHECK_TEXTS = (
    "The export is checked on these sentences.",
    "Dies ist ein kurzer Satz.",
    "Une phrase un peu plus longue, avec une virgule et des mots en plus pour allonger la séquence.",
    "短い文",
    "x",
)


@dataclass
class ExportedFile:
    """One written file, relative to the folder, and its agreement with the torch model on ``CHECK_TEXTS``."""

    path: str
    max_abs_diff: float
    min_cosine: float


def check_folder(folder: Path) -> None:
    """UsageError for a folder the exporter cannot take: no model config, an architecture it does not export, or no
    sentence-transformers layout (read as JSON: no model code runs)."""
    if not (folder / "config.json").is_file():
        raise UsageError(f"{folder} has no config.json; pass a folder that hf-tlaser train or save_pretrained wrote")
    exported_type(folder, "cannot be exported", "use it with the torch backend")
    if not has_sentence_transformers_files(folder):
        raise UsageError(
            f"{folder} has no sentence-transformers layout (modules.json), which the exported files need; "
            "add it with hf_tlaser.hub.add_sentence_transformers_files"
        )


def load_for_export(folder: Path, trust_remote_code: bool = False):
    """The folder's encoder (fp32, eval mode) and tokenizer, built by the installed hf_tlaser and transformers
    classes; Python files that the folder's ``auto_map`` names run only with ``trust_remote_code`` (as ``embed``
    and transformers ask). UsageError where the folder needs its own code and that was not allowed."""
    from transformers import AutoModel, AutoTokenizer

    try:
        model = AutoModel.from_pretrained(folder, trust_remote_code=trust_remote_code, dtype=torch.float32).eval()
        tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=trust_remote_code)
    except ValueError as error:
        if trust_remote_code or "trust_remote_code" not in str(error):
            raise
        raise UsageError(
            f"{folder}: loading it would run Python code from the folder ({' '.join(str(error).split())[:160]}); "
            "read that code, then pass --trust-remote-code to run it"
        ) from None
    return model, tokenizer


def read_calibration(path: str | Path | None) -> list[str]:
    """The first ``CALIBRATION_LINES`` non-empty lines of ``--calibration``; UsageError without a usable file."""
    if path is None:
        raise UsageError("--quantize int8-static needs --calibration FILE: some hundred sentences of the training text")
    try:
        with open(path, encoding="utf-8") as handle:
            lines = [line.strip() for line in handle if line.strip()][:CALIBRATION_LINES]
    except (OSError, UnicodeDecodeError) as error:
        raise UsageError(f"--calibration {path}: cannot read it ({error}); give a UTF-8 text file") from None
    if not lines:
        raise UsageError(f"--calibration {path}: no text; give a few hundred sentences, one a line")
    return lines


def agreement(reference: np.ndarray, states: np.ndarray, mask: np.ndarray, mode: str) -> tuple[float, float]:
    """(max |difference| of the final states at the tokens, min cosine of the vectors pooled as the folder pools them)
    to the reference."""
    keep = mask.astype(bool)
    diff = float(np.abs(reference[keep] - states[keep]).max())
    weights = torch.from_numpy(mask)
    a, b = (pool_hidden(torch.from_numpy(x).float(), weights, mode) for x in (reference, states))
    return diff, float(torch.nn.functional.cosine_similarity(a, b).min())


def weight_count(folder: Path) -> int:
    """Numbers held by the folder's ``*.safetensors`` files, read from their JSON headers (no tensor is loaded)."""
    count = 0
    for path in folder.glob("*.safetensors"):
        with path.open("rb") as handle:
            header = json.loads(handle.read(int.from_bytes(handle.read(8), "little")))
        count += sum(math.prod(entry["shape"]) for key, entry in header.items() if key != "__metadata__")
    return count


def export_bytes(folder: Path, backend: str, quantize: str | None) -> tuple[int, int]:
    """About how many bytes the export writes into ``folder`` and into its temporary folder: 4 bytes a weight for an
    fp32 file (its ONNX graph as well for OpenVINO, in the temporary folder), 1 for an int8 file."""
    weights = weight_count(folder)
    fp32, int8 = 4 * weights, weights if quantize else 0
    staged = fp32 * (2 if backend == "openvino" else 1) + int8
    return fp32 + int8, staged


def check_room(folder: Path, outputs: Sequence[str], backend: str, quantize: str | None) -> None:
    """``UsageError`` unless the folders the export writes can be written and have room for its files
    (:func:`export_bytes`); the folder's and the temporary folder's filesystem are counted once when they are one."""
    for name in outputs:
        target = folder / name
        check_writable(target if target.parent.is_dir() else target.parent, "export to")
    into, staged = export_bytes(folder, backend, quantize)
    tmp = Path(tempfile.gettempdir())
    if os.stat(tmp).st_dev == os.stat(folder).st_dev:
        check_space(folder, into + staged, f"export to {folder}", "the exported files (and their staged copies)")
    else:
        check_space(folder, into, f"export to {folder}", "the exported files")
        check_space(tmp, staged, f"export to {folder}", f"staging them in {tmp}")


def planned_files(backend: str, quantize: str | None, cpu: str) -> list[str]:
    """The files the export writes (the fp32 file only where not quantising: an int8 export reuses it)."""
    if backend == "onnx":
        return [onnx_int8_file(cpu)] if quantize else [ONNX_FILE]
    return [{None: OPENVINO_FILE, "int8": OPENVINO_INT8_FILE, "int8-static": OPENVINO_STATIC_FILE}[quantize]]


def written_paths(folder: Path, outputs: Sequence[str]) -> dict[str, list[Path]]:
    """Every file an export of ``outputs`` (:func:`planned_files`) writes into ``folder``: each file (and an OpenVINO
    file's ``.bin``), its ``.partial`` copy and the record of its weights."""
    paths = []
    for name in outputs:
        files = [folder / name, *([(folder / name).with_suffix(".bin")] if name.endswith(".xml") else [])]
        paths += [*files, *(path.with_name(path.name + ".partial") for path in files)]
        paths.append((folder / name).parent / EXPORT_RECORD)
    return {"export": paths}


def read_paths(folder: Path, calibration: str | Path | None) -> dict[str, list[Path]]:
    """The files an export reads: the folder's config and weights, and the ``--calibration`` text."""
    return {
        "folder": [folder / "config.json", *folder.glob("*.safetensors")],
        "--calibration": [] if calibration is None else [Path(calibration)],
    }


def export_model(
    folder: str | Path,
    backend: str = "onnx",
    quantize: str | None = None,
    cpu: str | None = None,
    overwrite: bool = False,
    calibration: str | Path | None = None,
    trust_remote_code: bool = False,
) -> list[ExportedFile]:
    """Write ``backend``'s files into the saved model ``folder`` (see the module docstring) and check each against
    the torch model; return what was written. UsageError for an unsupported folder, a missing package, an existing
    output without ``overwrite``, static quantisation without a ``calibration`` text file (or for ONNX), or a folder
    whose ``auto_map`` names code of its own without ``trust_remote_code``."""
    folder = Path(folder)
    if backend not in BACKENDS:
        raise UsageError(f"--backend {backend!r}: choose from {', '.join(BACKENDS)}")
    if quantize not in (None, *QUANTIZE):
        raise UsageError(f"--quantize {quantize!r}: choose from {', '.join(QUANTIZE)}")
    if cpu is not None and cpu not in ONNX_CPU_TARGETS:
        raise UsageError(f"--cpu {cpu!r}: choose from {', '.join(ONNX_CPU_TARGETS)}")
    if not folder.is_dir():
        raise UsageError(f"{folder} is not a folder")
    check_folder(folder)
    texts = None
    if quantize == "int8-static":
        if backend != "openvino":
            raise UsageError("--quantize int8-static: OpenVINO only (--backend openvino); ONNX takes --quantize int8")
        texts = read_calibration(calibration)
    cpu = cpu or (this_cpu_target() if backend == "onnx" and quantize else "avx2")
    outputs = planned_files(backend, quantize, cpu)
    refuse_outputs_over_inputs(written_paths(folder, outputs), read_paths(folder, calibration))
    existing = [name for name in outputs if (folder / name).exists()]
    if existing and not overwrite:
        raise UsageError(f"{folder / existing[0]} exists; pass --overwrite to replace it")
    fp32_file = folder / (ONNX_FILE if backend == "onnx" else OPENVINO_FILE)
    if quantize and not overwrite and fp32_file.is_file():
        check_export_current(folder, fp32_file, backend)  # the int8 file is made from it: never from stale weights
    require(EXTRAS[backend], backend)
    if backend == "openvino" and quantize:
        require(EXTRAS["openvino-int8"], "openvino")
    check_room(folder, outputs, backend, quantize)
    model, tokenizer = load_for_export(folder, trust_remote_code)
    mode = pooling_mode(read_model_config(folder))
    if mode not in ("cls", "mean"):
        raise UsageError(f"{folder}: the exporter checks cls or mean pooling only")
    try:
        return write_files(folder, model, tokenizer, backend, quantize, cpu, overwrite, texts, mode)
    except OSError as err:  # a full disk, a quota, a folder made read-only meanwhile
        raise write_failed(err, folder, f"export to {folder}") from None


def write_files(
    folder: Path,
    model,
    tokenizer,
    backend: str,
    quantize: str | None,
    cpu: str,
    overwrite: bool,
    texts: Sequence[str] | None,
    mode: str,
) -> list[ExportedFile]:
    """Stage the export's files, check each against the torch model on ``CHECK_TEXTS``, then copy them into the
    folder with their record of the weights; what was written."""
    check = sample_batch(tokenizer, CHECK_TEXTS)
    with torch.no_grad():
        reference = LastHiddenState(model)(**check).float().numpy()
    mask = check["attention_mask"].numpy()
    written: list[ExportedFile] = []
    with tempfile.TemporaryDirectory(prefix="hf-tlaser-export-") as tmp:
        staged = stage_files(folder, Path(tmp), model, tokenizer, backend, quantize, cpu, overwrite, texts)
        for source, name, quantised in staged:
            run = onnx_runner(source) if source.suffix == ".onnx" else openvino_runner(source, "fp32")
            states = run(check["input_ids"].numpy(), check["attention_mask"].numpy())
            diff, cosine = agreement(reference, states, mask, mode)
            if quantised and cosine < INT8_MIN_COSINE:
                raise RuntimeError(f"{name}: min cosine {cosine:.4f} to torch on the check sentences")
            if not quantised and diff > FP32_TOLERANCE:
                raise RuntimeError(f"{name}: max |difference| {diff:.2e} to torch on the check sentences")
            written.append(ExportedFile(name, diff, cosine))
        for source, name, _ in staged:
            destination = folder / name
            destination.parent.mkdir(parents=True, exist_ok=True)
            if source.suffix == ".xml":
                copy_whole(source.with_suffix(".bin"), destination.with_suffix(".bin"))
            copy_whole(source, destination)
            record_export(folder, name)  # the weights it came from: a later change of them makes it stale
    return written


def copy_whole(source: Path, destination: Path) -> None:
    """Copy ``source`` to ``destination`` through ``DESTINATION.partial`` and a rename: a failed copy (a full disk)
    leaves the file that was there, never a cut one."""
    partial = destination.with_name(destination.name + ".partial")
    try:
        shutil.copyfile(source, partial)
        os.replace(partial, destination)
    finally:
        partial.unlink(missing_ok=True)


def stage_files(
    folder: Path,
    tmp: Path,
    model,
    tokenizer,
    backend: str,
    quantize: str | None,
    cpu: str,
    overwrite: bool,
    texts: Sequence[str] | None = None,
) -> list[tuple[Path, str, bool]]:
    """Write the export's files under ``tmp``: (file, its path in the folder, quantised). An int8 export reuses the
    folder's fp32 file of the backend where there is one (and ``overwrite`` is off), else writes it too; ``texts``
    calibrate a static one."""
    fp32_name = ONNX_FILE if backend == "onnx" else OPENVINO_FILE
    for name in (ONNX_FILE, OPENVINO_FILE):
        (tmp / name).parent.mkdir(parents=True, exist_ok=True)
    reuse = quantize is not None and not overwrite and (folder / fp32_name).is_file()
    onnx_fp32 = folder / ONNX_FILE if reuse and backend == "onnx" else tmp / ONNX_FILE
    if onnx_fp32.parent == tmp / "onnx":
        logger.info("exporting %s to ONNX", folder)
        export_onnx(model, tokenizer, onnx_fp32)
    fp32 = onnx_fp32
    if backend == "openvino":
        fp32 = folder / OPENVINO_FILE if reuse else tmp / OPENVINO_FILE
        if not reuse:
            export_openvino(onnx_fp32, fp32)
    fp32_files = [] if reuse else [(fp32, fp32_name, False)]
    if quantize and backend == "onnx":
        name = onnx_int8_file(cpu)
        logger.info("quantising to int8 for %s", cpu)
        quantize_onnx(fp32, tmp / name, cpu)
    elif quantize == "int8-static":
        name = OPENVINO_STATIC_FILE
        logger.info("quantising the OpenVINO model to int8, calibrated on %d sentences", len(texts))
        quantize_openvino_static(fp32, tmp / name, tokenizer, texts)
    elif quantize:
        name = OPENVINO_INT8_FILE
        logger.info("compressing the OpenVINO weights to int8")
        compress_openvino(fp32, tmp / name)
    else:
        return fp32_files
    return [(tmp / name, name, True), *fp32_files]  # the file asked for first, as the summary lists them


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hf-tlaser export",
        description="write ONNX or OpenVINO files into a saved model folder, where sentence-transformers' "
        "backend='onnx' / 'openvino' loads them",
    )
    parser.add_argument("folder", help="a saved hf_tlaser model folder (hf-tlaser train's output)")
    parser.add_argument("--backend", choices=BACKENDS, default="onnx")
    parser.add_argument(
        "--quantize",
        choices=QUANTIZE,
        default=None,
        help="add an int8 file: int8 (ONNX: dynamic; OpenVINO: int8 weights) or int8-static (OpenVINO: weights and "
        "activations, calibrated on --calibration)",
    )
    parser.add_argument(
        "--calibration",
        metavar="TEXT_FILE",
        help=f"--quantize int8-static: sentences of the training text, one a line (the first {CALIBRATION_LINES})",
    )
    parser.add_argument(
        "--cpu",
        choices=sorted(ONNX_CPU_TARGETS),
        default=None,
        help="instruction set the ONNX int8 file is for (default: this CPU's)",
    )
    parser.add_argument("--overwrite", action="store_true", help="replace files the export would write")
    parser.add_argument(
        "--trust-remote-code",
        action="store_true",
        help="run Python files that the folder's auto_map names (default: the installed classes only)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run ``hf-tlaser export``: 0 with a summary, 2 with one line on stderr for a usage mistake."""
    args = build_parser().parse_args(argv)

    def work() -> int:
        written = export_model(
            args.folder,
            args.backend,
            args.quantize,
            args.cpu,
            args.overwrite,
            args.calibration,
            args.trust_remote_code,
        )
        summary = {"folder": args.folder}
        for item in written:
            summary[item.path] = f"max_abs_diff {item.max_abs_diff:.2e}, min_cosine {item.min_cosine:.6f}"
        return print_summary(summary)

    return run_command("hf-tlaser export", work)


if __name__ == "__main__":
    sys.exit(main())

"""Inference backends of one trained model folder, measured in one run as ratios to torch fp32: sentences/s at batch
sizes 1, 32 and 128 and peak RSS (each backend in a fresh process, on the same NTREX-128 sentences), mean and minimum
cosine of the vectors to torch fp32's, and the quality that users see: NTREX-128 xsim error over the 90 directions of
the ten languages and SIB-200 cross accuracy (``hf-tlaser evaluate --backend``, seed 0) where the vectors differ
from torch fp32 (cosine below 0.99995).

    python scripts/bench_backends.py runs/demo --data-dir ../shared/data --threads 2 --record --output BENCHMARKS.md

Exports what the folder lacks first (``hf-tlaser export``: ONNX fp32 and int8 for this CPU, OpenVINO fp32, int8
weights and static int8 calibrated on 300 sentences of the main job's training text). ``--record`` writes the
folder's ``backends.json`` for this CPU class (``hf_tlaser.backend``), which ``backend="auto"`` reads: a backend is
taken only where NTREX rose by at most 0.2 points and SIB-200 cross fell by at most 1 point. ``--output`` replaces
the section between the markers in that markdown file (``python -m benchmarks`` keeps it). ``--smoke`` runs a few
sentences without the quality columns (a check of the script).

``--compare SPEC ...`` adds other models, each in torch (fp32, and bf16 autocast where the CPU runs it natively), on
the same sentences, as ratios to FOLDER's torch fp32 and with their own quality columns: a smaller member (an
hf_tlaser folder, e.g. ``train --init-layers 6``) and the model users would otherwise pick (a sentence-transformers
folder, e.g. multilingual-e5-small). The cosine column compares vectors with FOLDER's, which means something for a
student distilled toward it only.

    python scripts/bench_backends.py runs/demo --rows torch --compare runs/student ../shared/data/multilingual-e5-small
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

BATCHES = (1, 32, 128)
BATCH_ONE_TEXTS = 500
"""Batch size 1 runs on the first 500 sentences (one forward call each)."""
SAME_AS_FP32 = 0.99995
"""A backend whose vectors keep at least this cosine to torch fp32's gets no quality evaluation of its own."""
TITLE = "## 8. Inference backends: torch, ONNX Runtime, OpenVINO (a trained model)"
COMPARE_TITLE = "### Other models in torch: a smaller member and the start"
"""``--compare`` writes its table under this heading, inside section 8 (``python -m benchmarks`` keeps both)."""
ROWS = [  # (name, backend, precision)
    ("torch fp32", "torch", "fp32"),
    ("torch bf16 autocast", "torch", "bf16"),
    ("ONNX Runtime fp32", "onnx", "fp32"),
    ("ONNX Runtime int8 (dynamic)", "onnx-int8", "fp32"),
    ("OpenVINO fp32", "openvino", "fp32"),
    ("OpenVINO, plugin default (bf16 where native)", "openvino", "auto"),
    ("OpenVINO int8 weights", "openvino-int8", "auto"),
    ("OpenVINO int8 static (calibrated)", "openvino-int8-static", "auto"),
]
CALIBRATION = 60
"""Calibration sentences per language of the main job's multi-way training corpus (5 languages: 300 sentences)."""


def worker(folder: str, backend: str, precision: str, texts_file: str, out: str, threads: int) -> None:
    """One backend in this process: sentences/s per batch size, peak RSS, the vectors (batch 32)."""
    import torch

    torch.set_num_threads(threads)
    import hf_tlaser

    texts = json.loads(Path(texts_file).read_text(encoding="utf-8"))
    if is_hf_tlaser(folder):
        model, tokenizer = hf_tlaser.load_model(folder, backend, precision)
        if backend == "torch":
            model = model.float()

        def encode(batch: list[str], batch_size: int) -> np.ndarray:
            return hf_tlaser.encode(
                model, tokenizer, batch, batch_size=batch_size, precision=precision, truncation=True, device="cpu"
            )
    else:  # a sentence-transformers model in its own encode, with its evaluation prompt
        from hf_tlaser.model_folders import EVAL_PROMPTS
        from hf_tlaser.teachers.targets import load_teacher

        teacher = load_teacher(folder, prefer=EVAL_PROMPTS, device="cpu", precision=precision, argument="--compare")

        def encode(batch: list[str], batch_size: int) -> np.ndarray:
            return teacher.encode(batch, batch_size=batch_size)

    encode(texts[:64], 32)  # warm-up: first-call allocations, oneDNN / OpenVINO kernels
    speeds, vectors = {}, None
    for batch_size in BATCHES:
        batch = texts[:BATCH_ONE_TEXTS] if batch_size == 1 else texts
        start = time.perf_counter()
        result = encode(batch, batch_size)
        speeds[batch_size] = len(batch) / (time.perf_counter() - start)
        vectors = result if batch_size == 32 else vectors
    np.save(out + ".npy", vectors)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    Path(out).write_text(json.dumps({"speeds": speeds, "rss_mb": rss}), encoding="utf-8")


def wanted(args: argparse.Namespace, name: str, backend: str) -> bool:
    """Whether FOLDER's row ``name`` runs: every row, or the ``--rows`` backends and torch fp32."""
    return not args.rows or name == "torch fp32" or backend in args.rows


def is_hf_tlaser(folder: str | Path) -> bool:
    """Whether ``folder`` holds an hf_tlaser model (else a sentence-transformers one)."""
    from hf_tlaser.model_folders import MODEL_TYPES, read_json

    return (read_json(Path(folder, "config.json")) or {}).get("model_type") in MODEL_TYPES


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def quality(
    folder: Path, backend: str, precision: str, data_dir: str, out: Path, others: list[str] = ()
) -> dict[str, tuple[float, float]]:
    """(NTREX-128 mean xsim error %, SIB-200 cross accuracy %) of ``folder`` on ``backend`` (key ""), and of each of
    the ``others`` (sentence-transformers models, evaluated beside it as reference rows; key: the spec)."""
    from hf_tlaser.evaluation.cli import evaluate_model
    from hf_tlaser.hub.card_results import classification_summaries, retrieval_averages

    results = evaluate_model(
        folder,
        ["retrieval", "sib200"],
        out,
        data_dir=data_dir,
        seeds=(0,),
        projection=None,
        retrieval_sets=("ntrex128",),
        references=False,
        precision=precision,
        backend=backend,
        reference_specs=others,
    )
    references = results.get("references", {})  # none without ``others``
    rows = [results, *(row for name, row in references.items() if not name.startswith("cross-model"))]
    return {
        spec: (
            next(avg for name, margin, avg in retrieval_averages(row) if margin == "absolute"),
            classification_summaries(row)["sib200"]["cross"][0],
        )
        for spec, row in zip(["", *others], rows, strict=True)
    }


def ensure_exports(folder: Path, data_dir: str, tmp: Path, wanted: list[str]) -> None:
    """Export the ``wanted`` backends the folder lacks (ONNX int8 for this CPU; static int8 calibrated on training
    text)."""
    from hf_tlaser.backend.export import export_model
    from hf_tlaser.backend.runtime import backend_file
    from hf_tlaser.data import load_corpus
    from hf_tlaser.errors import UsageError

    corpus = load_corpus("wmt-newstest-multiway", data_dir=data_dir, max_lines=CALIBRATION)
    calibration = tmp / "calibration.txt"
    languages = [name for name in corpus.column_names if name != "corpus"]
    lines = [line for lang in languages for line in corpus[lang] if line]
    calibration.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    for backend in ("onnx", "onnx-int8", "openvino", "openvino-int8", "openvino-int8-static"):
        if backend not in wanted:
            continue
        try:
            backend_file(folder, backend)
        except UsageError:
            kind, _, quantize = backend.partition("-")
            print(f"exporting {backend}", file=sys.stderr)
            export_model(folder, kind, quantize or None, calibration=calibration)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--data-dir", default=os.environ.get("HF_TLASER_DATA", "../shared/data"))
    parser.add_argument("--lines", type=int, default=200, help="NTREX-128 lines per language (10 languages)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--record", action="store_true", help="write the folder's backends.json for this CPU class")
    parser.add_argument("--output", type=Path, help="markdown file whose backends section is replaced")
    parser.add_argument("--smoke", action="store_true", help="a few sentences, no quality columns")
    parser.add_argument("--rows", nargs="+", metavar="BACKEND", help="only these backends (torch fp32 always runs)")
    parser.add_argument("--compare", nargs="+", default=[], metavar="SPEC", help="other models, in torch (see above)")
    parser.add_argument("--worker", nargs=5, metavar=("BACKEND", "PRECISION", "TEXTS", "OUT", "THREADS"))
    args = parser.parse_args(argv)
    if args.worker:
        backend, precision, texts, out, threads = args.worker
        worker(str(args.folder), backend, precision, texts, out, int(threads))
        return 0

    from hf_tlaser.backend.runtime import cpu_class, cpu_flags
    from hf_tlaser.data import load_corpus

    os.environ["HF_TLASER_DATA"] = args.data_dir
    lines = 4 if args.smoke else args.lines
    corpus = load_corpus("ntrex128", max_lines=lines, data_dir=args.data_dir)
    languages = ("en", "de", "es", "fr", "it", "cs", "fi", "ru", "tr", "zh")
    texts = [text for lang in languages for text in corpus[lang]]
    native_bf16 = bool(cpu_flags() & {"avx512_bf16", "amx_bf16"})
    measured: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="bench-backends-") as tmp:
        rows = [(name, backend, precision) for name, backend, precision in ROWS if wanted(args, name, backend)]
        ensure_exports(args.folder, args.data_dir, Path(tmp), [backend for _, backend, _ in rows])
        Path(tmp, "texts.json").write_text(json.dumps(texts), encoding="utf-8")
        plan = [(name, str(args.folder), backend, precision, "torch fp32") for name, backend, precision in rows]
        for other in args.compare:
            own = f"{Path(other).name}: torch fp32"
            plan += [(own, other, "torch", "fp32", own), (own.replace("fp32", "bf16"), other, "torch", "bf16", own)]
        others = [other for other in args.compare if not is_hf_tlaser(other)]  # evaluated beside FOLDER
        for name, folder, backend, precision, base_name in plan:  # every speed first, with nothing else running
            if precision == "bf16" and not native_bf16:
                continue  # emulated bf16 runs ~70x slower than fp32: not a choice on this CPU
            out = str(Path(tmp, re.sub(r"[^\w.-]", "_", name)))
            command = [sys.executable, __file__, folder, "--worker", backend, precision]
            subprocess.run([*command, str(Path(tmp, "texts.json")), out, str(args.threads)], check=True)
            row = json.loads(Path(out).read_text(encoding="utf-8"))
            row["vectors"] = np.load(out + ".npy")
            reference = measured.get(base_name, row)["vectors"]
            row["same"] = name != base_name and cosines(row["vectors"], reference).min() >= SAME_AS_FP32
            measured[name] = {"backend": backend, "precision": precision, "folder": folder, "base": base_name, **row}
            print(f"{name}: {row['speeds']}", file=sys.stderr, flush=True)
        print("speeds done; quality next", file=sys.stderr, flush=True)
        for name, row in measured.items():
            if args.smoke or row["same"]:
                continue
            if row["folder"] in others:  # a sentence-transformers model: evaluated in fp32 beside FOLDER only
                if row["precision"] == "fp32":
                    row["ntrex"], row["sib200"] = measured["torch fp32"]["others"][row["folder"]]
                continue
            beside = others if name == "torch fp32" else []  # FOLDER's first row: the first evaluated
            folder, backend, precision = Path(row["folder"]), row["backend"], row["precision"]
            scores = quality(folder, backend, precision, args.data_dir, Path(tmp, "eval"), beside)
            row["ntrex"], row["sib200"] = scores.pop("")
            row["others"] = scores
            print(f"{name}: NTREX {row['ntrex']:.2f}, SIB-200 cross {row['sib200']:.2f}", file=sys.stderr, flush=True)
    base = measured["torch fp32"]
    header = (
        "| backend | sentences/s batch 1 | batch 32 | batch 128 | x torch fp32 (batch 32) | peak RSS MB | "
        "cosine to torch fp32 mean / min | NTREX xsim % (90 directions) | SIB-200 cross % |"
    )
    table = [header, "|" + "---|" * 9]
    records = {}
    for name, row in measured.items():
        cos = cosines(row["vectors"], base["vectors"])
        speed = {int(k): v for k, v in row["speeds"].items()}
        ratio = speed[32] / {int(k): v for k, v in base["speeds"].items()}[32]
        quality_cells = [f"as {row['base']} (cosine >= {SAME_AS_FP32})"] * 2 if row["same"] else ["-", "-"]
        if "ntrex" in row:
            ntrex_delta, sib_delta = row["ntrex"] - base["ntrex"], row["sib200"] - base["sib200"]
            quality_cells = [f"{row['ntrex']:.2f} ({ntrex_delta:+.2f})", f"{row['sib200']:.2f} ({sib_delta:+.2f})"]
            key = row["backend"]
            own = row["folder"] == str(args.folder)
            if own and (row["backend"] != "torch" or row["precision"] == ("bf16" if native_bf16 else "fp32")):
                records[key] = {
                    "speedup": round(ratio, 3),
                    "ntrex_delta": round(ntrex_delta, 3),
                    "sib200_delta": round(sib_delta, 3),
                    "min_cosine": round(float(cos.min()), 5),
                    "precision": row["precision"],
                    "threads": args.threads,
                    "measured": datetime.now(timezone.utc).strftime("%Y-%m-%d"),
                }
        table.append(
            f"| {name} | {speed[1]:.1f} | {speed[32]:.1f} | {speed[128]:.1f} | {ratio:.2f} | {row['rss_mb']:.0f} | "
            f"{cos.mean():.5f} / {cos.min():.5f} | {' | '.join(quality_cells)} |"
        )
    invocation = " ".join(argv if argv is not None else sys.argv[1:])
    note = (
        f"`python scripts/bench_backends.py {invocation}` on {len(texts)} NTREX-128 "
        f"sentences ({lines} per language, 10 languages), {args.threads} thread(s), CPU class `{cpu_class()}`, "
        f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC; batch size 1 on the first {BATCH_ONE_TEXTS}. Quality: "
        "`hf-tlaser evaluate --backend`, SIB-200 seed 0, in brackets the change from torch fp32; not evaluated again "
        f"where the vectors keep a cosine of at least {SAME_AS_FP32} to torch fp32's."
    )
    if args.compare:
        note += (
            f" Other models: ratios, cosines and changes against {args.folder.name}'s torch fp32; a "
            "sentence-transformers model's quality is measured in fp32 only (its own encode, its query prompt)."
        )
    section = "\n".join([note, "", *table])
    print(section)
    if args.record and records:
        path = args.folder / "backends.json"
        recorded = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
        recorded[cpu_class()] = records
        path.write_text(json.dumps(recorded, indent=2) + "\n", encoding="utf-8")
    if args.output:
        text = args.output.read_text(encoding="utf-8") if args.output.is_file() else ""
        marker = "compare" if args.compare else "backends"
        start, end = f"<!-- {marker}:start -->", f"<!-- {marker}:end -->"
        block = f"{start}\n{section}\n{end}"
        if start in text:
            text = re.sub(re.escape(start) + ".*?" + re.escape(end), lambda _: block, text, flags=re.S)
        else:
            text = f"{text.rstrip()}\n\n{COMPARE_TITLE if args.compare else TITLE}\n\n{block}\n"
        args.output.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())

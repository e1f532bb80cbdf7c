"""Learning curves read from the checkpoints of one run per recipe, against the lexical baseline and random init.

    # one run: hf-tlaser train with every checkpoint kept, and the process's CPU time sampled beside it
    python scripts/learning_curve.py train runs/curves/new --save-steps 100 -- --model ctlaser --preset tiny \
        --max-steps 1500 --seed 1
    # NTREX-128 xx<->en error and SIB-200 cross accuracy of every checkpoint (and of the run's random init)
    python scripts/learning_curve.py evaluate runs/curves/new
    # table + PNG of several runs, with the TF-IDF line
    python scripts/learning_curve.py report runs/curves/new runs/curves/old --output docs/learning_curves.md

CPU-minutes are the training process's CPU time (user + system seconds / 60, all its threads): an idle 2-core
machine gives a 2-thread run about 2 CPU-minutes per wall-clock minute. Unlike wall-clock time it barely moves when
the machine is shared, so runs made side by side on a busy machine stay comparable.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
NTREX_LANGS = ("de", "es", "fr", "it")


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def train(out: Path, save_steps: int, train_args: list[str]) -> int:
    """Run ``hf-tlaser train`` keeping every checkpoint; write ``cpu_trace.json`` [(wall s, cpu s)] beside it."""
    cmd = ["hf-tlaser", "train", *train_args, "--output-dir", str(out), "--save-steps", str(save_steps)]
    cmd += ["--save-total-limit", "100000", "--logging-steps", str(max(1, save_steps // 4))]
    print(" ".join(cmd), flush=True)
    start = time.monotonic()
    proc = subprocess.Popen(cmd)
    trace: list[tuple[float, float]] = []

    def sample() -> None:
        while proc.poll() is None:
            try:
                trace.append((time.monotonic() - start, _cpu_seconds(proc.pid)))
            except (FileNotFoundError, ProcessLookupError):
                break
            time.sleep(1.0)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    code = proc.wait()
    sampler.join()
    out.mkdir(parents=True, exist_ok=True)
    (out / "cpu_trace.json").write_text(
        json.dumps({"start_unix": time.time() - (time.monotonic() - start), "trace": trace})
    )
    return code


def _checkpoints(run: Path) -> list[tuple[int, Path]]:
    found = [(int(m.group(1)), p) for p in run.glob("checkpoint-*") if (m := re.fullmatch(r"checkpoint-(\d+)", p.name))]
    return sorted(found)


def _cpu_minutes_at(run: Path, folder: Path) -> float | None:
    """CPU-minutes the training process had used when ``folder`` was written (from its mtime and the trace)."""
    path = run / "cpu_trace.json"
    if not path.is_file():
        return None
    data = json.loads(path.read_text())
    trace = np.asarray(data["trace"], dtype=float)
    if not len(trace):
        return None
    wall = folder.stat().st_mtime - data["start_unix"]
    return float(np.interp(wall, trace[:, 0], trace[:, 1])) / 60


def _pairs_seen(state_path: Path) -> int:
    history = json.loads(state_path.read_text())["log_history"]
    return int(sum(entry.get("pairs", 0) for entry in history))


def _embedder(model_dir: Path, tokenizer_dir: Path, random_init: bool):
    import torch
    from transformers import AutoModel, AutoTokenizer

    import hf_tlaser

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    model = AutoModel.from_pretrained(model_dir)
    if random_init:
        torch.manual_seed(0)
        model = type(model)(model.config)
    model.eval()
    return lambda texts: hf_tlaser.encode(model, tokenizer, texts, normalize=True, truncation=True)


def measure(embed, data_dir: str | None, sib_seeds: tuple[int, ...] = (0,)) -> dict:
    """NTREX-128 xx<->en xsim error (both directions, mean over de/es/fr/it) and SIB-200 cross accuracy."""
    from hf_tlaser.evaluation.readers import read_ntrex128
    from hf_tlaser.evaluation.retrieval import xsim
    from hf_tlaser.evaluation.suite import evaluate_classification

    texts = read_ntrex128(data_dir, ["en", *NTREX_LANGS])
    vectors = {lang: np.asarray(embed(lines)) for lang, lines in texts.items()}
    result = {}
    for margin in ("absolute", "ratio"):
        errors = [xsim(vectors[x], vectors["en"], margin) for x in NTREX_LANGS]
        errors += [xsim(vectors["en"], vectors[x], margin) for x in NTREX_LANGS]
        result[f"ntrex_{margin}"] = float(np.mean(errors))
    transfer = evaluate_classification(embed, data_dir, "sib200", seeds=sib_seeds)
    summary = transfer.summary()
    result.update({f"sib_{k}": float(summary[k][0]) for k in ("cross", "same", "all")})
    return result


def evaluate(run: Path, data_dir: str | None, every: int = 1) -> Path:
    """Measure the random init and every checkpoint of ``run`` whose step is a multiple of ``every``; write
    ``run/curve.json``."""
    out = run / "curve.json"
    curve = json.loads(out.read_text()) if out.is_file() else {}
    points = curve.get("points", {})
    checkpoints = _checkpoints(run)
    if not checkpoints:
        raise SystemExit(f"{run}: no checkpoint-* folders")
    if "0" not in points:
        points["0"] = {
            "step": 0,
            "pairs": 0,
            "cpu_minutes": 0.0,
            **measure(_embedder(run / checkpoints[0][1].name, run, True), data_dir),
        }
    for step, folder in checkpoints:
        if str(step) in points and points[str(step)]["cpu_minutes"] is None:  # evaluated before the run ended
            points[str(step)]["cpu_minutes"] = _cpu_minutes_at(run, folder)
        if str(step) in points or step % every:
            continue
        point = {
            "step": step,
            "pairs": _pairs_seen(folder / "trainer_state.json"),
            "cpu_minutes": _cpu_minutes_at(run, folder),
            **measure(_embedder(folder, run, False), data_dir),
        }
        print(run.name, point, flush=True)
        points[str(step)] = point
        out.write_text(json.dumps({"run": str(run), "points": points}, indent=2))
    out.write_text(json.dumps({"run": str(run), "points": points}, indent=2))
    return out


def lexical_reference(data_dir: str | None) -> dict:
    """The TF-IDF row: same sentences, same protocol."""
    from hf_tlaser.evaluation.lexical import TfidfCharEmbedder
    from hf_tlaser.evaluation.readers import read_ntrex128
    from hf_tlaser.evaluation.retrieval import xsim
    from hf_tlaser.evaluation.suite import evaluate_classification, read_classification

    texts = read_ntrex128(data_dir, ["en", *NTREX_LANGS])
    tfidf = TfidfCharEmbedder([t for lines in texts.values() for t in lines], svd_dim=None)
    vectors = {lang: tfidf(lines) for lang, lines in texts.items()}
    result = {}
    for margin in ("absolute", "ratio"):
        errors = [xsim(vectors[x], vectors["en"], margin) for x in NTREX_LANGS]
        errors += [xsim(vectors["en"], vectors[x], margin) for x in NTREX_LANGS]
        result[f"ntrex_{margin}"] = float(np.mean(errors))
    data = read_classification("sib200", data_dir)
    fit = [t for splits in data.values() for s in splits.values() for t in s.texts]
    summary = evaluate_classification(TfidfCharEmbedder(fit, svd_dim=512), data_dir, "sib200", seeds=(0,)).summary()
    result.update({f"sib_{k}": float(summary[k][0]) for k in ("cross", "same", "all")})
    return result


METRICS = (("ntrex_absolute", "NTREX-128 xx<->en error %"), ("sib_cross", "SIB-200 cross accuracy %"))


def _load_curves(runs: list[Path]) -> dict[str, list[dict]]:
    curves = {}
    for run in runs:
        points = json.loads((run / "curve.json").read_text())["points"].values()
        curves[run.name] = sorted(points, key=lambda point: point["step"])
    return curves


def _at_pairs(points: list[dict], pairs: float, key: str) -> float | None:
    """``key`` linearly interpolated at ``pairs`` pairs seen (None beyond the run's last checkpoint)."""
    xs = [p["pairs"] for p in points]
    if pairs > xs[-1]:
        return None
    return float(np.interp(pairs, xs, [p[key] for p in points]))


def plot(curves: dict[str, list[dict]], lexical: dict, path: Path) -> Path:
    """NTREX error and SIB-200 cross accuracy against pairs seen and CPU-minutes, fixed 0-100 scales, with the
    TF-IDF and random-init lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(12, 8), constrained_layout=True)
    for row, (key, label) in enumerate(METRICS):
        for col, x_key in enumerate(("pairs", "cpu_minutes")):
            ax = axes[row, col]
            for name, points in curves.items():
                pts = [p for p in points if p.get(x_key) is not None]
                ax.plot([p[x_key] for p in pts], [p[key] for p in pts], marker="o", ms=3, label=name)
            ax.axhline(lexical[key], color="black", ls="--", label="tfidf-char (no training)")
            first = next(iter(curves.values()))[0]
            ax.axhline(first[key], color="grey", ls=":", label="random init")
            if key == "sib_cross":
                ax.axhline(25.0, color="red", ls=":", lw=0.8, label="majority class")
            ax.set_ylim(0, 100)
            ax.set_xlabel("translation pairs seen" if x_key == "pairs" else "CPU-minutes (process CPU time)")
            ax.set_ylabel(label)
            ax.grid(alpha=0.3)
    handles, labels = axes[0, 0].get_legend_handles_labels()
    handles2, labels2 = axes[1, 0].get_legend_handles_labels()
    extra = [(h, lab) for h, lab in zip(handles2, labels2) if lab not in labels]
    fig.legend(handles + [h for h, _ in extra], labels + [lab for _, lab in extra], loc="outside lower center", ncol=6)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def report(runs: list[Path], lexical_path: Path, output: Path) -> str:
    """Markdown: per-run checkpoint tables and an equal-pairs-seen comparison, plus the PNG beside ``output``."""
    curves = _load_curves(runs)
    lexical = json.loads(lexical_path.read_text())
    png = plot(curves, lexical, output.with_suffix(".png"))
    lines = [f"![learning curves]({png.name})", ""]
    common = min(points[-1]["pairs"] for points in curves.values())
    marks = sorted({int(common * f) for f in (0.25, 0.5, 1.0)})
    header = "| run | " + " | ".join(f"NTREX err % @ {m:,} pairs" for m in marks)
    header += " | " + " | ".join(f"SIB cross % @ {m:,} pairs" for m in marks) + " |"
    lines += ["## At equal pairs seen", "", header, "|---" * (1 + 2 * len(marks)) + "|"]
    for name, points in curves.items():
        cells = [_at_pairs(points, m, key) for key, _ in METRICS for m in marks]
        lines.append(f"| {name} | " + " | ".join("-" if c is None else f"{c:.1f}" for c in cells) + " |")
    lines.append(
        f"| tfidf-char (reference) | {' | '.join([f'{lexical[METRICS[0][0]]:.1f}'] * len(marks))} | "
        f"{' | '.join([f'{lexical[METRICS[1][0]]:.1f}'] * len(marks))} |"
    )
    for name, points in curves.items():
        lines += [
            "",
            f"## {name}",
            "",
            "| updates | pairs seen | CPU-minutes | NTREX err % (absolute) | NTREX err % (ratio)"
            " | SIB cross % | SIB same % |",
            "|---|---|---|---|---|---|---|",
        ]
        for p in points:
            cpu = "-" if p.get("cpu_minutes") is None else f"{p['cpu_minutes']:.1f}"
            lines.append(
                f"| {p['step']} | {p['pairs']:,} | {cpu} | {p['ntrex_absolute']:.1f} | {p['ntrex_ratio']:.1f} | "
                f"{p['sib_cross']:.1f} | {p['sib_same']:.1f} |"
            )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    t = sub.add_parser("train")
    t.add_argument("output_dir", type=Path)
    t.add_argument("--save-steps", type=int, default=100)
    t.add_argument("train_args", nargs=argparse.REMAINDER)
    e = sub.add_parser("evaluate")
    e.add_argument("runs", nargs="+", type=Path)
    e.add_argument("--data-dir", default=None)
    e.add_argument("--every", type=int, default=1, help="only checkpoints whose step is a multiple of this")
    rep = sub.add_parser("report")
    rep.add_argument("runs", nargs="+", type=Path)
    rep.add_argument("--lexical", type=Path, default=Path("runs/curves/lexical.json"))
    rep.add_argument("--output", type=Path, default=Path("runs/curves/learning_curves.md"))
    r = sub.add_parser("lexical")
    r.add_argument("--data-dir", default=None)
    r.add_argument("--output", type=Path, default=Path("runs/curves/lexical.json"))
    args = p.parse_args(argv)
    if args.command == "train":
        return train(args.output_dir, args.save_steps, [a for a in args.train_args if a != "--"])
    if args.command == "evaluate":
        for run in args.runs:
            evaluate(run, args.data_dir, args.every)
        return 0
    if args.command == "report":
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(report(args.runs, args.lexical, args.output))
        print(args.output.read_text())
        return 0
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(lexical_reference(args.data_dir), indent=2))
    print(args.output.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())

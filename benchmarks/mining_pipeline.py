"""The staged mining pipeline at scale: wall time and peak RSS per stage, recall of the planted pairs, and equality
with the one-process ``hf-tlaser mine``, for 1, 2 and more local workers.

The corpus is ``benchmarks/mining_scale.py``'s (synthetic 384-d float16 vectors, N a side, half of them noisy copies
of shared meanings: the planted pairs), written as ``hf-tlaser embed`` outputs with their texts (``s<i>`` /
``t<j>``). ``hf-tlaser mine`` runs once in a process of its own (its peak RSS its own); the pipeline runs each stage
as its own command (``--stage``), timed from outside, its jobs' peak RSS read from the work folder's ``stats/``.

    python -m benchmarks.mining_pipeline --size 200000 --shards 4 --workers 1 2 --threads 1 --index-memory 0.002
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.mining_scale import DIM, make_corpus
from hf_tlaser.inference.store import write_sidecar
from hf_tlaser.inference.work import STAGES

PEAK = "import sys; from hf_tlaser.inference.stages import peak_rss_mib; from {module} import main; rc = main(sys.argv[1:]); print('PEAK_MIB', peak_rss_mib()); sys.exit(rc)"  # noqa: E501
"""A command's entry point run in a fresh interpreter that prints its own peak RSS (``VmHWM``: not the benchmark's,
which ``ru_maxrss`` would carry over from the fork)."""


def write_inputs(folder: Path, size: int) -> list[str]:
    """The texts and embeddings sidecars of ``make_corpus``'s vectors; ``mine``'s input arguments."""
    for side, prefix in (("src", "s"), ("tgt", "t")):
        (folder / f"{side}.txt").write_text("".join(f"{prefix}{i}\n" for i in range(size)))
        meta = dict(model="synthetic", fingerprint="synthetic", dim=DIM, count=size, dtype="float16")
        meta.update(normalized=True, input=f"{side}.txt", input_lines=size, lines=size, start=0, stop=size)
        meta.update(shard=None, truncated=0, empty=0, prompt=None, precision=None, documents=None)
        write_sidecar(folder / f"{side}.npy", meta)
    return [
        "--src", str(folder / "src.txt"), "--tgt", str(folder / "tgt.txt"),
        "--src-embeddings", str(folder / "src.npy"), "--tgt-embeddings", str(folder / "tgt.npy"),
    ]  # fmt: skip


def timed(module: str, args: list[str]) -> tuple[float, float | None]:
    """Run ``module``'s ``main(args)`` in a fresh interpreter: (seconds, its peak RSS in MiB)."""
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", PEAK.format(module=module), *args], capture_output=True, text=True, check=False
    )
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{module} {' '.join(args)} failed:\n{done.stderr[-3000:]}")
    peak = [line.split()[1] for line in done.stdout.splitlines() if line.startswith("PEAK_MIB")]
    return seconds, (float(peak[0]) if peak else None)


def recall(tsv: Path, gold: np.ndarray) -> tuple[int, float]:
    """(pairs in the TSV, share of the planted pairs among them)."""
    found = set()
    for line in tsv.read_text().splitlines():
        _, src, tgt = line.split("\t")
        found.add((int(src[1:]), int(tgt[1:])))
    planted = {(i, int(j)) for i, j in enumerate(gold)}
    return len(found), len(found & planted) / len(planted)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=200_000, help="sentences a side")
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--threads", type=int, default=1, help="faiss threads of each process")
    parser.add_argument("--index-memory", type=float, default=0.002, help="GB per database shard (both commands)")
    parser.add_argument("--index", default="auto", help="faiss index-factory string (both commands)")
    parser.add_argument("--nprobe", type=int, default=32, help="inverted lists visited per query (both commands)")
    parser.add_argument(
        "--no-one-process",
        action="store_true",
        help="skip the one-process hf-tlaser mine (at 10M a side and above): no equality column",
    )
    parser.add_argument("--output", type=Path, help="JSON of the results")
    args = parser.parse_args()
    results = {"size": args.size, "shards": args.shards, "threads": args.threads, "index_memory_gb": args.index_memory}
    results.update(index=args.index, nprobe=args.nprobe)
    results["runs"] = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        started = time.perf_counter()
        gold = make_corpus(folder, args.size)
        results["corpus_seconds"] = round(time.perf_counter() - started, 1)
        inputs = [*write_inputs(folder, args.size), "--threads", str(args.threads)]
        inputs += ["--index-memory", str(args.index_memory), "--index", args.index, "--nprobe", str(args.nprobe)]
        print(f"corpus: {results['corpus_seconds']} s", flush=True)
        if not args.no_one_process:
            seconds, peak = timed("hf_tlaser.inference.mine", [*inputs, "--output", str(folder / "one.tsv")])
            pairs, found = recall(folder / "one.tsv", gold)
            results["one_process"] = dict(seconds=round(seconds, 1), peak_rss_mib=peak, pairs=pairs, recall=found)
            print(f"one process: {seconds:.0f} s, peak {peak:.0f} MiB, {pairs} pairs, recall {found:.4f}", flush=True)
        for workers in args.workers:
            work, output = folder / f"work-{workers}", folder / f"staged-{workers}.tsv"
            run = {"workers": workers, "stages": {}}
            staged = [*inputs, "--work", str(work), "--shards", str(args.shards), "--workers", str(workers)]
            for stage in STAGES:
                seconds, command_peak = timed(
                    "hf_tlaser.inference.pipeline", [*staged, "--stage", stage, "--output", str(output)]
                )
                stats = [json.loads(path.read_text()) for path in (work / "stats").glob(f"{stage}*.json")]
                run["stages"][stage] = dict(
                    seconds=round(seconds, 1),
                    task_seconds=round(sum(s["seconds"] for s in stats), 1),
                    peak_rss_mib=max((s["peak_rss_mib"] for s in stats), default=None),  # filter: no tasks
                    tasks=len(stats),
                    command_peak_rss_mib=command_peak,  # the command: texts, unique lines, and (filter) the outputs
                )
                print(f"workers {workers}, {stage}: {run['stages'][stage]}", flush=True)
            run["pairs"], run["recall"] = recall(output, gold)
            if not args.no_one_process:
                run["equal_to_one_process"] = output.read_bytes() == (folder / "one.tsv").read_bytes()
            run["seconds"] = round(sum(stage["seconds"] for stage in run["stages"].values()), 1)
            results["runs"].append(run)
            print(f"workers {workers}: {run['seconds']} s, equal: {run.get('equal_to_one_process')}", flush=True)
    text = json.dumps(results, indent=2)
    if args.output:
        args.output.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()

"""Mining at scale: time, peak memory and recall of ``hf-tlaser mine``'s search, exact against compressed.

Synthetic 384-d float16 embeddings (as ``hf-tlaser embed`` writes them), N a side: half the rows of each side are
noisy copies of shared "meanings" drawn from a mixture of 64 topics (the gold pairs, shuffled on the target side),
the rest unmatched rows of the same mixture. Each (size, index) runs in its own process (``--worker``) so that its
peak RSS (``ru_maxrss``: heap plus the pages of the memory-mapped vectors it touched) is its own, under a time cap.
Recall: the share of the exact index's mined pairs (margin ratio > 1.04) that the compressed index also mines, and
of the gold pairs each mines.

    python benchmarks/mining_scale.py --sizes 10000 100000 1000000 --threads 1 --cap 600
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

DIM = 384
THRESHOLD = 1.04


def make_side(path: Path, meanings: np.ndarray, extra: int, topics: np.ndarray, rng: np.random.Generator) -> None:
    """Noisy copies of ``meanings`` then ``extra`` unmatched rows, unit-normalised, into a float16 ``.npy``."""
    rows = len(meanings) + extra
    out = np.lib.format.open_memmap(path, mode="w+", dtype=np.float16, shape=(rows, DIM))
    for start in range(0, rows, 100_000):
        stop = min(start + 100_000, rows)
        base = np.empty((stop - start, DIM), dtype=np.float32)
        shared = max(0, min(stop, len(meanings)) - start)
        base[:shared] = meanings[start : start + shared]
        fresh = stop - start - shared
        base[shared:] = topics[rng.integers(len(topics), size=fresh)] + rng.normal(size=(fresh, DIM))
        base += 0.3 * rng.normal(size=base.shape).astype(np.float32)
        out[start:stop] = base / np.linalg.norm(base, axis=1, keepdims=True)
    out.flush()


def make_corpus(folder: Path, size: int, seed: int = 0) -> np.ndarray:
    """``src.npy`` and ``tgt.npy`` of ``size`` rows each; returns gold (source i <-> target gold[i], i < size/2)."""
    rng = np.random.default_rng(seed)
    topics = rng.normal(size=(64, DIM)).astype(np.float32)
    pairs = size // 2
    meanings = (topics[rng.integers(64, size=pairs)] + rng.normal(size=(pairs, DIM))).astype(np.float32)
    make_side(folder / "src.npy", meanings, size - pairs, topics, rng)
    order = rng.permutation(size)  # target row r holds the r-th of the shuffled rows
    make_side(folder / "tgt_sorted.npy", meanings, size - pairs, topics, rng)
    sorted_rows = np.load(folder / "tgt_sorted.npy", mmap_mode="r")
    tgt = np.lib.format.open_memmap(folder / "tgt.npy", mode="w+", dtype=np.float16, shape=(size, DIM))
    for start in range(0, size, 100_000):
        tgt[start : start + 100_000] = sorted_rows[order[start : start + 100_000]]
    tgt.flush()
    (folder / "tgt_sorted.npy").unlink()
    return np.argsort(order)[:pairs]


def worker(folder: Path, index: str, threads: int, out: Path) -> None:
    """Mine src against tgt with ``index``; write the mined pairs and print time and peak RSS as JSON."""
    import faiss

    from hf_tlaser.bitext.index import Rows, SearchPlan
    from hf_tlaser.bitext.mining import mine_vectors

    faiss.omp_set_num_threads(threads)
    src = np.load(folder / "src.npy", mmap_mode="r")
    tgt = np.load(folder / "tgt.npy", mmap_mode="r")
    started = time.perf_counter()
    mined = mine_vectors(
        Rows(src, np.arange(len(src))),
        Rows(tgt, np.arange(len(tgt))),
        threshold=THRESHOLD,
        plan=SearchPlan(index=index),
    )
    seconds = time.perf_counter() - started
    np.save(out, np.stack([mined.src[: mined.kept], mined.tgt[: mined.kept]], axis=1))
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"seconds": seconds, "peak_rss_mb": peak, "pairs": int(mined.kept)}))


def compressed_spec(size: int) -> str:
    """The index ``--index auto`` picks above the exact threshold, for ``size`` rows."""
    from hf_tlaser.bitext import index

    saved, index.EXACT_MAX_ROWS = index.EXACT_MAX_ROWS, 0
    try:
        return index.default_index(size, DIM)
    finally:
        index.EXACT_MAX_ROWS = saved


def pair_set(path: Path) -> set[tuple[int, int]]:
    return set(map(tuple, np.load(path).tolist()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--cap", type=float, default=600, help="seconds per measurement before it is stopped")
    parser.add_argument("--skip-exact-above", type=int, default=100_000, help="no exact run above this size")
    parser.add_argument("--worker", nargs=3, metavar=("FOLDER", "INDEX", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(Path(args.worker[0]), args.worker[1], args.threads, Path(args.worker[2]))
        return
    rows = []
    for size in args.sizes:
        with tempfile.TemporaryDirectory(prefix="mining-scale-") as tmp:
            folder = Path(tmp)
            gold = set(enumerate(make_corpus(folder, size).tolist()))
            results = {}
            for kind, spec in (("exact", "Flat"), ("compressed", compressed_spec(size))):
                if kind == "exact" and size > args.skip_exact_above:
                    rows.append((size, kind, spec, "not run", "", "", ""))
                    continue
                command = [sys.executable, __file__, "--threads", str(args.threads), "--worker", tmp, spec]
                command.append(str(folder / f"{kind}.npy"))
                try:
                    done = subprocess.run(command, capture_output=True, text=True, timeout=args.cap, check=True)
                except subprocess.TimeoutExpired:
                    rows.append((size, kind, spec, f"> {args.cap:.0f} (stopped)", "", "", ""))
                    continue
                report = json.loads(done.stdout.strip().splitlines()[-1])
                pairs = pair_set(folder / f"{kind}.npy")
                results[kind] = pairs
                vs_exact = (
                    f"{100 * len(pairs & results['exact']) / len(results['exact']):.1f}"
                    if (kind == "compressed" and "exact" in results)
                    else ""
                )
                rows.append(
                    (
                        size,
                        kind,
                        spec,
                        f"{report['seconds']:.1f}",
                        f"{report['peak_rss_mb']:.0f}",
                        vs_exact,
                        f"{100 * len(pairs & gold) / len(gold):.1f}",
                    )
                )
                print(rows[-1], file=sys.stderr, flush=True)
    print(f"threads: {args.threads}; 384-d float16 vectors; margin ratio, k=4, retrieval max, threshold {THRESHOLD}\n")
    print("| N a side | index | faiss spec | time (s) | peak RSS (MB) | recall vs exact (%) | gold pairs mined (%) |")
    print("|---|---|---|---|---|---|---|")
    for row in rows:
        print("| " + " | ".join(f"{row[0]:,}" if i == 0 else str(cell) for i, cell in enumerate(row)) + " |")


if __name__ == "__main__":
    main()

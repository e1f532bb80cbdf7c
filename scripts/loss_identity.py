"""Bit-identity of training across a refactor: every family's first logged losses, before and after.

Runs each family for a fixed number of updates in fp32, seed 1, one thread, logging every update, and stores each
update's ``loss`` and ``grad_norm`` (full floats from the run's ``train_log.jsonl``). Run it in two checkouts and
compare:

    cd OLD && python scripts/loss_identity.py --output /tmp/old.json
    cd NEW && python scripts/loss_identity.py --output /tmp/new.json
    python scripts/loss_identity.py --compare /tmp/old.json /tmp/new.json

The code measured is the checkout the script is run from (``python -m hf_tlaser.cli`` with that folder first on
``PYTHONPATH``). The runs are short on purpose (``--max-lines``, small batches): identity is the question, not quality.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SMALL = ["--preset", "tiny", "--max-lines", "3000", "--max-tokens", "1000", "--update-tokens", "1000"]
RUNS: dict[str, list[str]] = {
    "tlaser": ["--model", "tlaser", *SMALL],
    "ctlaser": ["--model", "ctlaser", *SMALL],
    "laser1": ["--model", "laser1", *SMALL],
    "laser6": ["--model", "laser6", *SMALL],
    "claser6": ["--model", "claser6", *SMALL],
    "yu2018": ["--model", "yu2018", *SMALL],
    "ldt": ["--model", "ldt", *SMALL],
    "cnv": ["--model", "cnv", *SMALL, "--nmt-steps", "20", "--pairs", "de-en"],
    "ctlaser-warm": [
        "--model", "ctlaser", "--init-from", "{data}/multilingual-e5-small", "--max-lines", "3000",
        "--max-tokens", "500", "--update-tokens", "500", "--corpora", "wmt-newstest-multiway,multi30k",
    ],
}  # fmt: skip


def logged(folder: Path) -> list[dict[str, float]]:
    """Each update's full-precision ``loss`` and ``grad_norm`` from every ``train_log.jsonl`` under ``folder``."""
    records = []
    for log in sorted(folder.rglob("train_log.jsonl")):
        for line in log.read_text().splitlines():
            entry = json.loads(line)
            if "loss" in entry and "step" in entry:
                records.append(
                    {"file": str(log.relative_to(folder)), **{k: entry.get(k) for k in ("step", "loss", "grad_norm")}}
                )
    return records


def run_family(name: str, steps: int, data: str, work: Path) -> dict:
    """Train one family for ``steps`` updates in a fresh process and return its logged losses."""
    out = work / name
    args = [a.format(data=data) for a in RUNS[name]]
    cmd = [sys.executable, "-m", "hf_tlaser.cli", "train", *args, "--output-dir", str(out), "--max-steps", str(steps),
           "--logging-steps", "1", "--precision", "fp32", "--seed", "1", "--data-dir", data, "--use-cpu"]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    start = time.time()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    if proc.returncode:
        return {"error": proc.stderr[-2000:], "seconds": time.time() - start}
    return {"records": logged(out), "seconds": round(time.time() - start, 1)}


def compare(old_path: Path, new_path: Path) -> int:
    """Print one row per run: updates compared, identical or the first differing update; 1 if any differs."""
    old, new = json.loads(old_path.read_text()), json.loads(new_path.read_text())
    print("| run | updates logged | bit-identical | first difference |\n|---|---|---|---|")
    status = 0
    for name in old:
        a, b = old[name].get("records"), new.get(name, {}).get("records")
        if a is None or b is None:
            print(f"| {name} | - | no | a run failed |")
            status = 1
            continue
        diff = next((x for x, y in zip(a, b) if x != y), None)
        same = diff is None and len(a) == len(b)
        status |= not same
        where = "" if same else (f"step {diff['step']}" if diff else f"{len(a)} vs {len(b)} records")
        print(f"| {name} | {len(a)} | {'yes' if same else 'no'} | {where} |")
    return status


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output", type=Path, help="JSON file of every run's logged losses")
    parser.add_argument("--runs", nargs="+", choices=list(RUNS), default=list(RUNS))
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--data-dir", default=os.environ.get("HF_TLASER_DATA", str(ROOT.parent / "shared" / "data")))
    parser.add_argument("--compare", nargs=2, type=Path, metavar=("OLD", "NEW"))
    args = parser.parse_args()
    if args.compare:
        return compare(*args.compare)
    if args.output is None:
        parser.error("--output (or --compare OLD NEW) is required")
    if args.output.exists():
        parser.error(f"--output {args.output} exists; choose another path")
    results = {}
    with tempfile.TemporaryDirectory(prefix="loss-identity-") as work:
        for name in args.runs:
            results[name] = run_family(name, args.steps, str(Path(args.data_dir).resolve()), Path(work))
            state = "FAILED" if "error" in results[name] else f"{len(results[name]['records'])} records"
            print(f"{name}: {state}, {results[name]['seconds']} s", flush=True)
    args.output.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

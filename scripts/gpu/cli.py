"""One GPU lease, run-ready (``scripts/gpu_session.sh``): what travels, the session's stages, what comes back.

Here, before the lease (network):

    python scripts/gpu_session.py fetch-wheels .gpu_carry/wheels   # the pinned stack for the GPU machine's Python
    python scripts/gpu_session.py pack-data .gpu_carry/data        # the corpora the session reads, one .tar.xz
    python scripts/gpu_session.py carry-size .gpu_carry            # what travels vs the 64 MiB limit

On the GPU machine (no network), ``scripts/gpu_session.sh`` execs ``gpu_session.py run`` with its own command line
(``run --help``; ``Session``: setup, bench, dist, train, finish, release, levers, negatives). The session itself needs
only the standard library, so it runs before the setup stage's pip install; each command a stage launches runs
under ``$PYTHON`` (python3), bounded by a time limit and the call's deadline. Its records, also as commands:

    python scripts/gpu_session.py summary OUT                      # OUT/SUMMARY.md from the stages' results
    python scripts/gpu_session.py environment --output F ...       # setup: environment.json (run under $PYTHON)
    python scripts/gpu_session.py dist-facts F NAME RUN RC SECONDS LOG  # dist: one launcher run in distributed.json
    python scripts/gpu_session.py save-steps BENCHMARKS.json MINUTES   # train: updates between checkpoints
    python scripts/gpu_session.py train-facts F RUN RESULTS        # finish: train.json
    python scripts/gpu_session.py note F KEY VALUE                 # one more key in a JSON file

Which wheels travel (the GPU machine's image has most of the stack): ``gpu/wheels.py``. This module is the command
line of ``scripts/gpu_session.py``; the package's parts: ``gpu/__init__.py``.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path

from .carry import CARRY, CARRY_LIMIT_MIB, MIB, ROOT, carry_report, exclude_carry, folder_size, log, split, tree_size
from .data import DATA_FOLDERS, RELEASE_FOLDERS, pack_data
from .processes import curve_evaluator
from .records import dist_facts, environment, note, save_steps, summary, train_facts
from .session import Session
from .wheels import TARGET_PYTHON, WHEEL_CACHE, fetch_wheels


def prepare_steps(release: bool) -> list[list[str]]:
    """``--prepare``: the wheels, the corpora and what travels; ``--prepare-release``: the wheels without DeepSpeed,
    the release corpora and the archive in parts for three calls. Each step a ``gpu_session.py`` command line."""
    if not release:
        return [["fetch-wheels", f"{CARRY}/wheels"], ["pack-data", f"{CARRY}/data"], ["carry-size", CARRY]]
    return [
        ["fetch-wheels", f"{CARRY}/wheels", "--no-deepspeed"],
        ["pack-data", f"{CARRY}/release-data", "--release", "--budget-mib", "220"],
        ["split", f"{CARRY}/release-data/data.tar.xz", CARRY, "--beside", f"{CARRY}/wheels"],
    ]


def prepare(release: bool) -> int:
    """Here, before the lease: ``prepare_steps``, stopping at the first that fails."""
    exclude_carry()
    for step in prepare_steps(release):
        rc = main(step)
        if rc:
            return rc
    return 0


def usage() -> str:
    """The command line, as scripts/gpu_session.sh's header says it (its lines 2-9)."""
    lines = (ROOT / "scripts" / "gpu_session.sh").read_text().splitlines()[1:9]
    return "\n".join(re.sub(r"^# ?", "", line) for line in lines)


def minutes(value: str) -> str:
    """A number of minutes, kept as written (it goes into commands and train.json as it is)."""
    float(value)
    return value


def count(value: str) -> str:
    """A number of updates, kept as written."""
    int(value)
    return value


def session_parser() -> argparse.ArgumentParser:
    """scripts/gpu_session.sh's flags."""
    parser = argparse.ArgumentParser(prog="scripts/gpu_session.sh", add_help=False, usage="%(prog)s ... (see --help)")
    parser.add_argument("--size", choices=("tiny", "full"), default="full")
    parser.add_argument("--out", default=None, help="default $OUT when set, else runs/gpu_session")
    parser.add_argument("--stage", "--stages", dest="stage", default="all")
    parser.add_argument("--train-minutes", type=minutes, default=None)
    parser.add_argument("--wait-minutes", type=float, default=None)
    parser.add_argument("--save-steps", type=count, default=None)
    parser.add_argument("--deadline-minutes", type=float, default=None)
    parser.add_argument("--fetch-wheels", nargs="?", const=f"{CARRY}/wheels", default=None, metavar="DIR")
    parser.add_argument("--pack-data", nargs="?", const=f"{CARRY}/data", default=None, metavar="DIR")
    parser.add_argument("--prepare", action="store_true")
    parser.add_argument("--prepare-release", action="store_true")
    parser.add_argument("-h", "--help", action="store_true")
    return parser


def session(argv: list[str]) -> int:
    """scripts/gpu_session.sh's command line: the preparations here, or a device call's stages."""
    args = session_parser().parse_args(argv)
    os.chdir(ROOT)
    if args.help:
        print(usage())
        return 0
    if args.fetch_wheels is not None:
        return main(["fetch-wheels", args.fetch_wheels])
    if args.pack_data is not None:
        return main(["pack-data", args.pack_data])
    if args.prepare or args.prepare_release:
        return prepare(release=args.prepare_release)
    return Session(args).run()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["run"]:  # scripts/gpu_session.sh's own command line, parsed by session_parser
        return session(argv[1:])
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("run", help="a device call's stages: scripts/gpu_session.sh's flags (run --help)")
    w = sub.add_parser("curve-evaluator", help="the train stage's checkpoint evaluator beside the detached run")
    w.add_argument("pid", type=int)
    w.add_argument("python")
    w.add_argument("run", type=Path)
    w.add_argument("log", type=Path)
    f = sub.add_parser("fetch-wheels", help="download the GPU machine's wheels of the pinned stack")
    f.add_argument("out", type=Path, nargs="?", default=ROOT / ".gpu_carry" / "wheels")
    f.add_argument("--constraints", type=Path, default=ROOT / "constraints.txt")
    f.add_argument("--all", action="store_true", help="carry every wheel (default: see the module's docstring)")
    f.add_argument("--python-version", default=TARGET_PYTHON)
    f.add_argument("--cache", type=Path, default=WHEEL_CACHE)
    f.add_argument("--no-deepspeed", action="store_true", help="leave DeepSpeed (built here from its sdist) out")
    d = sub.add_parser("pack-data", help="the session's corpora as one .tar.xz")
    d.add_argument("out", type=Path, nargs="?", default=ROOT / ".gpu_carry" / "data")
    d.add_argument("--data-dir", default=None)
    d.add_argument(
        "--budget-mib",
        type=float,
        default=None,
        help="size limit of the archive (default: what the 64 MiB leave after the tree, the rest of .gpu_carry and "
        "1 MiB to spare)",
    )
    d.add_argument(
        "--release",
        action="store_true",
        help="also what the release stage reads (RELEASE_FOLDERS, the start included); give --budget-mib, then split "
        "the archive into parts that travel in successive calls (scripts/gpu_session.sh --help)",
    )
    p = sub.add_parser("split", help="an archive in pieces, one per call (part1 beside the wheels)")
    p.add_argument("archive", type=Path)
    p.add_argument("carry", type=Path, nargs="?", default=ROOT / ".gpu_carry")
    p.add_argument("--beside", type=Path, default=ROOT / ".gpu_carry" / "wheels")
    c = sub.add_parser("carry-size", help="what travels vs the 64 MiB limit")
    c.add_argument("carry", type=Path, nargs="?", default=ROOT / ".gpu_carry")
    s = sub.add_parser("summary", help="OUT/SUMMARY.md from the stages' results")
    s.add_argument("out", type=Path)
    n = sub.add_parser("note", help="one more key in a JSON object file (VALUE as JSON where it is, else text)")
    n.add_argument("path", type=Path)
    n.add_argument("key")
    n.add_argument("value")
    e = sub.add_parser("environment", help="the setup stage's environment.json")
    for name in ("install", "torch_version", "pin", "size", "data"):
        e.add_argument(name)
    e.add_argument("--output", type=Path, required=True)
    r = sub.add_parser("dist-facts", help="one launcher run's record in distributed.json")
    r.add_argument("path", type=Path)
    r.add_argument("name")
    r.add_argument("out", type=Path)
    r.add_argument("rc", type=int)
    r.add_argument("seconds", type=int)
    r.add_argument("log", type=Path)
    v = sub.add_parser("save-steps", help="updates between the train stage's checkpoints (about 12 in all)")
    v.add_argument("bench", type=Path)
    v.add_argument("train_minutes", type=float)
    t = sub.add_parser("train-facts", help="the finish stage's train.json")
    t.add_argument("path", type=Path)
    t.add_argument("run", type=Path)
    t.add_argument("results", type=Path)
    args = parser.parse_args(argv)
    if args.command == "curve-evaluator":
        return curve_evaluator(args.pid, args.python, args.run, args.log)
    if args.command == "note":
        note(args.path, args.key, args.value)
        return 0
    if args.command == "environment":
        environment(args.output, args.install, args.torch_version, args.pin, args.size, args.data)
        return 0
    if args.command == "dist-facts":
        print(f"{args.name}: {dist_facts(args.path, args.name, args.out, args.rc, args.seconds, args.log)}")
        return 0
    if args.command == "save-steps":
        print(save_steps(args.bench, args.train_minutes))
        return 0
    if args.command == "train-facts":
        train_facts(args.path, args.run, args.results)
        return 0
    if args.command == "fetch-wheels":
        deepspeed = not args.no_deepspeed
        return fetch_wheels(args.out, args.constraints, args.all, args.python_version, args.cache, deepspeed)
    if args.command == "pack-data":
        sys.path.insert(0, str(ROOT))
        from hf_tlaser.data.paths import get_data_dir

        budget = args.budget_mib
        if budget is None:
            others = sum(folder_size(p) for p in args.out.parent.glob("*") if p.resolve() != args.out.resolve())
            budget = (CARRY_LIMIT_MIB * MIB - tree_size() - others) / MIB - 1.0
            log(f"archive budget: {budget:.1f} MiB (64 MiB - tree - the rest of {args.out.parent} - 1 MiB)")
        folders = DATA_FOLDERS + RELEASE_FOLDERS if args.release else DATA_FOLDERS
        return pack_data(args.out, get_data_dir(args.data_dir), budget, folders)
    if args.command == "split":
        return split(args.archive, args.carry, args.beside)
    if args.command == "carry-size":
        return carry_report(args.carry)
    print(summary(args.out))
    return 0

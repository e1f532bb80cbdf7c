"""Mutation testing of the core modules (issue 34) with mutmut 3: the losses, training/warm.py, training/distill.py,
teachers/cache.py and teachers/loading.py. Not part of CI (scripts/test.sh, .ci/run): it runs for tens of minutes.

The code of ``--tree`` is copied into ``--workdir`` (hf_tlaser/, tests/, pyproject.toml with a ``[tool.mutmut]``
table added), so that edits to the tree during the run change nothing and mutmut's ``mutants/`` folder stays out of the
repository. Each mutant runs only the tests that call the mutated function (mutmut's own test mapping), among the
test files of ``TEST_FILES`` minus ``DESELECT``, with ``pytest -x``, one at a time.

A fixed random sample of ``--sample`` mutants per module is drawn (``--sample 0``: all): the mutants with the smallest
sha256 of (seed, file, function, the changed lines), so a mutant that is unchanged between two versions of the code
keeps its rank, and a before and an after run with the same ``--seed`` and ``--sample`` draw the same mutants wherever
the code did not change. The report lists, per module, the mutants tried, killed, survived, timed out, and the
survivors (file, line, the change in one line).

    python scripts/mutation.py --tree . --report mutation.md                    # the sample, 30 per module, seed 34
    python scripts/mutation.py --tree /work/wt-x --workdir /tmp/mut-x --sample 0  # every mutant
    python scripts/mutation.py --workdir /tmp/mut-x --report-only --report mutation.md  # report an earlier run again
    python scripts/mutation.py --list                                               # the sample only, nothing runs
    python scripts/mutation.py --workdir /tmp/mut-x --resume --quick --sample 5      # the listed sample, no stats pass
"""

from __future__ import annotations

import argparse
import difflib
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections import Counter
from fnmatch import fnmatch
from pathlib import Path

MUTMUT_VERSION = "3.8.1"
ROOT = Path(__file__).resolve().parents[1]
MARKER = ".hf_tlaser_mutation"

# module -> {file: glob patterns of mutmut's function names}; methods are named "xǁClassǁmethod"
MODULES: dict[str, dict[str, list[str]]] = {
    "losses": {
        # hf_tlaser.losses: the cT-LASER distance constraint (eq. 7-10), alignment loss, in-batch negatives, and the
        # loss of a translation batch that combines them (mean_pairwise_cosine and centered_pair_cosine are
        # decorated with torch.no_grad, which mutmut 3 does not mutate)
        "hf_tlaser/models/common/losses.py": [
            "x_unique_pairs",
            "x_sample_negatives",
            "x_distance_constraint_loss",
            "x_align_loss",
            "x_translation_loss",
            "x_distance_constrained_loss",
        ],
        # the sampled softmax of the decoder's training scores
        "hf_tlaser/models/tlaser/modeling_tlaser.py": ["xǁTLaserForTranslationǁtraining_logits"],
        # LDT, eq. 1-7
        "hf_tlaser/models/ldt/modeling_ldt.py": [
            "x_xtr_labels",
            "x_ugt_labels",
            "x_kl_to_labels",
            "x_xmlm_loss",
            "x_smlm_loss",
            "x_mlm_loss",
            "x_alignment_loss",
            "x_similarity_loss",
            "x_ldt_loss",
        ],
        # the distillation term
        "hf_tlaser/training/trainer.py": ["x_distill_loss"],
    },
    "warm": {"hf_tlaser/training/warm.py": ["*"]},
    "distill": {"hf_tlaser/training/distill.py": ["*"]},
    "cache": {"hf_tlaser/teachers/cache.py": ["*"]},
    "loading": {"hf_tlaser/teachers/loading.py": ["*"]},
}
TEST_FILES = [
    "tests/test_losses.py",
    "tests/test_ldt_losses.py",
    "tests/test_multiway_negatives.py",
    "tests/test_tlaser_model.py",
    "tests/test_ldt_model.py",
    "tests/test_warm_start.py",
    "tests/test_distill.py",
    "tests/test_teacher.py",
    # added with the issue-34 fixes (a tree without one of them runs without it)
    "tests/test_teacher_cache.py",
    "tests/test_teacher_fingerprint.py",
    "tests/test_warm_modules.py",
    "tests/test_warm_training.py",
    "tests/test_mutants_core.py",
]
# subprocesses import the tree's code, not the mutant (DDP, push, fresh process); the 100000-text vectors file took
# 230 s alone; test_multiway_forward_uses_groups patches a module global that mutmut's trampoline bypasses;
# test_projection_head_survives_save_and_load loads the saved folder with trust_remote_code, which imports a copy of
# the mutated module whose trampoline looks for mutmut's config in the wrong folder (the stats pass stops there)
DESELECT = (
    "not ddp and not push and not fresh and not 100000 and not test_multiway_forward_uses_groups "
    "and not projection_head_survives"
)
# --quick: the test files each mutant runs, per mutated file (a tree without one of them runs without it), the
# cheapest and likeliest to kill first; a test of another file that would kill the mutant is not run (the score is then
# a lower bound), which is the price of skipping mutmut's stats pass
QUICK_TESTS = {
    "hf_tlaser/models/common/losses.py": [
        "tests/test_mutants_core.py",
        "tests/test_losses.py",
        "tests/test_multiway_negatives.py",
        "tests/test_tlaser_model.py",
        "tests/test_warm_start.py",
    ],
    "hf_tlaser/models/tlaser/modeling_tlaser.py": [
        "tests/test_mutants_core.py",
        "tests/test_tlaser_model.py",
        "tests/test_warm_start.py",
    ],
    "hf_tlaser/models/ldt/modeling_ldt.py": [
        "tests/test_mutants_core.py",
        "tests/test_ldt_losses.py",
        "tests/test_ldt_model.py",
    ],
    "hf_tlaser/training/trainer.py": ["tests/test_mutants_core.py", "tests/test_distill.py"],
    "hf_tlaser/training/warm.py": [
        "tests/test_mutants_core.py",
        "tests/test_warm_start.py",
        "tests/test_warm_modules.py",
        "tests/test_warm_training.py",
    ],
    "hf_tlaser/training/distill.py": ["tests/test_mutants_core.py", "tests/test_distill.py"],
    "hf_tlaser/teachers/cache.py": [
        "tests/test_mutants_core.py",
        "tests/test_teacher_cache.py",
        "tests/test_teacher.py",
    ],
    "hf_tlaser/teachers/loading.py": [
        "tests/test_mutants_core.py",
        "tests/test_teacher_fingerprint.py",
        "tests/test_teacher.py",
    ],
}
STATUS = {1: "killed", 3: "killed", 0: "survived", 5: "no tests", 33: "no tests", 36: "timeout", 24: "timeout"}
STATUS.update({-24: "timeout", 152: "timeout", 255: "timeout", None: "not checked"})


def test_files(tree: Path) -> list[str]:
    """The files of ``TEST_FILES`` that ``tree`` has."""
    return [path for path in TEST_FILES if (tree / path).is_file()]


def mutmut_config(tree: Path) -> str:
    """The ``[tool.mutmut]`` table appended to the work dir's copy of pyproject.toml."""
    files = sorted({path for spec in MODULES.values() for path in spec})
    return "\n".join(
        [
            "",
            "[tool.mutmut]",
            'source_paths = ["hf_tlaser"]',
            f"only_mutate = {json.dumps(files)}",
            f"pytest_add_cli_args_test_selection = {json.dumps(test_files(tree))}",
            f"pytest_add_cli_args = {json.dumps(['-p', 'no:cacheprovider', '-k', DESELECT])}",
            # torch is not fork-safe once it has run: each mutant forks from a server that has only collected
            'process_isolation = "forkserver"',
            "use_git_change_detection = false",
            "debug = true",  # the pytest commands and output in mutmut.log
            "",
        ]
    )


def prepare(tree: Path, workdir: Path) -> None:
    """Copy the tree's code and tests into a fresh ``workdir`` (only one this script made is replaced)."""
    if workdir.exists():
        if not (workdir / MARKER).exists():
            sys.exit(f"error: --workdir {workdir} exists and was not made by this script; pick another folder")
        shutil.rmtree(workdir)
    workdir.mkdir(parents=True)
    (workdir / MARKER).write_text(str(tree) + "\n")
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in ("hf_tlaser", "tests"):
        shutil.copytree(tree / name, workdir / name, ignore=ignore)
    (workdir / "pyproject.toml").write_text((tree / "pyproject.toml").read_text() + mutmut_config(tree))


def function_of(name: str) -> str:
    """``x_f__mutmut_3`` -> ``x_f``."""
    return name.rsplit("__mutmut_", 1)[0]


def changed_lines(orig: str, mutant: str) -> tuple[int, list[str], list[str]]:
    """(offset of the first changed line from the ``def`` line, removed lines, added lines)."""
    a, b = orig.splitlines(), mutant.splitlines()
    start = next(i for i, line in enumerate(a) if line.lstrip().startswith(("def ", "async def ")))
    removed, added, first = [], [], None
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag != "equal":
            first = i1 if first is None else first
            removed += [line.strip() for line in a[i1:i2]]
            added += [line.strip() for line in b[j1:j2]]
    return (first or start) - start, removed, added


def def_lines(source: str) -> dict[str, int]:
    """mutmut function name (``x_f``, ``xǁCǁm``) -> line of its ``def`` in the original file."""
    import ast

    lines = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            lines[f"x_{node.name}"] = node.lineno
        elif isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                    lines[f"xǁ{node.name}ǁ{item.name}"] = item.lineno
    return lines


def list_mutants(workdir: Path) -> list[dict]:
    """Every mutant of the selected functions: module, key (mutmut's name), file, line, function, removed, added."""
    os.chdir(workdir)  # mutmut reads its config from the current folder
    import libcst as cst
    from mutmut.mutation.diff_apply import find_top_level_function_or_method
    from mutmut.mutation.file_mutation import mutate_file_contents
    from mutmut.utils.format_utils import get_mutant_name

    rows = []
    for module, spec in MODULES.items():
        for path, patterns in spec.items():
            source = Path(path).read_text()
            mutated = mutate_file_contents(path, source)
            tree = cst.parse_module(mutated.code)
            where = def_lines(source)
            for name in mutated.mutant_names:
                function = function_of(name)
                if not any(fnmatch(function, pattern) for pattern in patterns):
                    continue
                orig = find_top_level_function_or_method(tree, function + "__mutmut_orig")
                mutant = find_top_level_function_or_method(tree, name)
                offset, removed, added = changed_lines(
                    *(
                        tree.code_for_node(node.with_changes(leading_lines=[], name=cst.Name("f")))
                        for node in (orig, mutant)
                    )
                )
                rows.append(
                    dict(
                        module=module,
                        key=get_mutant_name(Path(path), name),
                        file=path,
                        line=where[function] + offset,
                        function=function.removeprefix("x_").replace("ǁ", ".").lstrip("."),
                        removed=removed,
                        added=added,
                    )
                )
    return rows


def draw(rows: list[dict], size: int, seed: int) -> list[dict]:
    """The ``size`` mutants per module with the smallest hash of (seed, file, function, change); all with 0."""
    seen: Counter = Counter()
    for row in rows:
        text = "\n".join([str(seed), row["file"], row["function"], *row["removed"], "->", *row["added"]])
        seen[text] += 1  # identical changes in one function: their order
        row["rank"] = hashlib.sha256(f"{text}\n{seen[text]}".encode()).hexdigest()
    sample = []
    for module in MODULES:
        mine = sorted((row for row in rows if row["module"] == module), key=lambda row: row["rank"])
        sample += mine[:size] if size else mine
    return sample


# mutmut's run without its clean-test pass: its stats pass has just run every selected test on the unmutated code and
# stops the run unless all pass, so the clean pass (the tests of the sampled functions, once more) only costs time
MUTMUT_WITHOUT_CLEAN_PASS = """
import sys
from mutmut.__main__ import cli
from mutmut.workers import isolation
for runner in (isolation.ForkServerRunner, isolation.ForkRunner):
    runner.run_clean_tests = lambda self, tests: 0
sys.argv[0] = "mutmut"
cli()
"""


def run_mutmut(workdir: Path, keys: list[str], log: Path) -> None:
    """``mutmut run --max-children 1 KEYS`` in ``workdir`` (no clean-test pass), its output into ``log``."""
    env = dict(os.environ, HF_TLASER_DATA=os.environ.get("HF_TLASER_DATA") or str(ROOT.parent / "shared" / "data"))
    env.pop("PYTHONPATH", None)  # the mutants must be the code imported
    command = [sys.executable, "-c", MUTMUT_WITHOUT_CLEAN_PASS, "run", "--max-children", "1", *keys]
    with log.open("w") as out:
        done = subprocess.run(command, cwd=workdir, env=env, stdout=out, stderr=subprocess.STDOUT)
    if done.returncode:
        print(f"warning: mutmut exited {done.returncode}; see {log}", file=sys.stderr)


# mutmut's mutant generation alone (``mutants/`` with the trampolines), for --quick
MUTMUT_GENERATE_ONLY = """
import sys
import mutmut.__main__ as mutmut_main
def stop(*args, **kwargs):
    raise SystemExit(0)
mutmut_main.get_mutant_runner = stop
sys.argv[0] = "mutmut"
mutmut_main.cli()
"""
# --quick: one pytest process for every mutant (mutmut's trampoline reads MUTANT_UNDER_TEST at each call); run in
# mutants/ with argv JOBS.json OUT.jsonl; first the "fail" mutant (every mutated function raises: the mutants are the
# code imported), last the tests that killed a mutant, without one (``clean_failures``: they must pass)
QUICK_RUNNER = """
import json, os, signal, sys, time
sys.path.insert(0, os.getcwd())
import hf_tlaser
import pytest
assert hf_tlaser.__file__.startswith(os.getcwd()), hf_tlaser.__file__
spec = json.load(open(sys.argv[1]))
out = open(sys.argv[2], "a")
class Watch:
    def __init__(self):
        self.first, self.timed_out = None, False
    def pytest_runtest_logreport(self, report):
        if report.failed and self.first is None:
            self.first, self.timed_out = report.nodeid, "MutantTimeout" in str(report.longrepr)
class MutantTimeout(Exception):
    pass
def alarm(signum, frame):
    raise MutantTimeout
signal.signal(signal.SIGALRM, alarm)
def run(key, args):
    os.environ["MUTANT_UNDER_TEST"] = key
    watch, start = Watch(), time.monotonic()
    signal.alarm(int(spec["timeout"]))
    try:
        rc = int(pytest.main(["-q", "-p", "no:cacheprovider", "--no-header", "--tb=line", *args], plugins=[watch]))
    finally:
        signal.alarm(0)
    status = "timeout" if watch.timed_out else {0: "survived", 1: "killed", 5: "no tests"}.get(rc, f"error {rc}")
    return dict(key=key, status=status, first_failed=watch.first, seconds=round(time.monotonic() - start, 1))
def write(row):
    out.write(json.dumps(row) + "\\n")
    out.flush()
    print("RESULT", json.dumps(row), flush=True)
killers = []
for key, files in spec["jobs"]:
    row = run(key, ["-x", "-k", spec["deselect"], *files])
    write(row)
    if row["status"] == "killed" and key != "fail" and row["first_failed"] not in killers:
        killers.append(row["first_failed"])
failures = []
for test in killers:
    if run("", [test])["status"] != "survived":
        failures.append(test)
write(dict(key="", clean_failures=failures, killers=killers))
"""


def generate_mutants(workdir: Path, log: Path) -> None:
    """mutmut's ``mutants/`` folder (the trampolined code) for every mutant of the configured files."""
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    with log.open("w") as out:
        subprocess.run(
            [sys.executable, "-c", MUTMUT_GENERATE_ONLY, "run"],
            cwd=workdir,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            check=True,
        )


def run_quick(workdir: Path, sample: list[dict], timeout: int, log: Path) -> None:
    """Each sampled mutant against its file's ``QUICK_TESTS`` (``-x``), in one pytest process; ``quick.jsonl``."""
    # round robin over the modules (each one's best-ranked mutant first): a run stopped early has a balanced sample
    order = {row["key"]: [r for r in sample if r["module"] == row["module"]].index(row) for row in sample}
    ranked = sorted(sample, key=lambda row: (order[row["key"]], list(MODULES).index(row["module"])))
    jobs = [[row["key"], [t for t in QUICK_TESTS[row["file"]] if (workdir / t).is_file()]] for row in ranked]
    jobs.insert(0, ["fail", jobs[0][1]])
    (workdir / "quick_jobs.json").write_text(json.dumps(dict(deselect=DESELECT, timeout=timeout, jobs=jobs)))
    (workdir / "quick.jsonl").unlink(missing_ok=True)
    env = dict(os.environ, HF_TLASER_DATA=os.environ.get("HF_TLASER_DATA") or str(ROOT.parent / "shared" / "data"))
    env.pop("PYTHONPATH", None)
    command = [sys.executable, "-c", QUICK_RUNNER, str(workdir / "quick_jobs.json"), str(workdir / "quick.jsonl")]
    with log.open("w") as out:
        done = subprocess.run(command, cwd=workdir / "mutants", env=env, stdout=out, stderr=subprocess.STDOUT)
    if done.returncode:
        print(f"warning: the quick runner exited {done.returncode}; see {log}", file=sys.stderr)


def results(workdir: Path, sample: list[dict]) -> None:
    """Add each mutant's status from ``quick.jsonl`` (--quick) or mutmut's ``mutants/*.meta`` files. A mutant that
    --quick saw killed by a test that also fails without a mutant is ``suspicious``."""
    quick = workdir / "quick.jsonl"
    if quick.exists():
        rows = [json.loads(line) for line in quick.read_text().splitlines() if line.strip()]
        by_key = {row["key"]: row for row in rows if row["key"]}
        failing = {test for row in rows if not row["key"] for test in row["clean_failures"]}
        if by_key.get("fail", {}).get("status") != "killed":
            print("warning: the 'fail' mutant was not killed: the mutants may not be the code run", file=sys.stderr)
        for row in sample:
            found = by_key.get(row["key"], {})
            row["status"] = found.get("status", "not checked")
            row["first_failed"], row["seconds"] = found.get("first_failed"), found.get("seconds")
            if row["status"] == "killed" and row["first_failed"] in failing:
                row["status"] = "suspicious"
        return
    codes = {}
    for path in {row["file"] for row in sample}:
        meta = workdir / "mutants" / f"{path}.meta"
        if meta.exists():
            codes.update(json.loads(meta.read_text())["exit_code_by_key"])
    for row in sample:
        row["status"] = STATUS.get(codes.get(row["key"]), "suspicious")


def one_line(row: dict) -> str:
    return f"`{' / '.join(row['removed']) or '(nothing)'}` -> `{' / '.join(row['added']) or '(removed)'}`"


def report(sample: list[dict], header: str) -> str:
    """Markdown: a score table per module and the survivors grouped by module."""
    lines = [header, "", "| module | sample | run | killed | survived | timeout | no tests | other | score |"]
    lines.append("|---" * 9 + "|")
    for module in MODULES:
        counts = Counter(row["status"] for row in sample if row["module"] == module)
        run = sum(counts.values()) - counts["not checked"]
        other = run - sum(counts[k] for k in ("killed", "survived", "timeout", "no tests"))
        score = f"{100 * (counts['killed'] + counts['timeout']) / run:.1f}%" if run else "-"
        lines.append(
            f"| {module} | {sum(counts.values())} | {run} | {counts['killed']} | {counts['survived']} "
            f"| {counts['timeout']} | {counts['no tests']} | {other} | {score} |"
        )
    lines += [
        "",
        "Score: (killed + timeout) / run. 'no tests': no selected test calls the function (counted as surviving).",
        "",
    ]
    for module in MODULES:
        alive = [row for row in sample if row["module"] == module and row["status"] in ("survived", "no tests")]
        lines.append(f"### {module}: {len(alive)} surviving")
        lines.append("")
        for row in sorted(alive, key=lambda row: (row["file"], row["line"])):
            tag = " (no tests)" if row["status"] == "no tests" else ""
            lines.append(f"- {row['file']}:{row['line']} `{row['key'].rsplit('.', 1)[1]}`{tag}: {one_line(row)}")
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tree", type=Path, default=ROOT, help="the checkout to test (default: this one)")
    parser.add_argument("--workdir", type=Path, default=None, help="scratch folder (default: /tmp/mutation-TREENAME)")
    parser.add_argument("--sample", type=int, default=30, help="mutants per module; 0: all (default 30)")
    parser.add_argument("--seed", type=int, default=34)
    parser.add_argument("--modules", default=",".join(MODULES), help="comma-separated subset of " + ",".join(MODULES))
    parser.add_argument("--list", action="store_true", help="print the sample and stop")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="no mutmut stats pass: each mutant runs its file's QUICK_TESTS in one pytest process (a lower bound)",
    )
    parser.add_argument("--resume", action="store_true", help="run the sample that --list wrote in --workdir")
    parser.add_argument("--timeout", type=int, default=900, help="--quick: seconds per mutant (default 900)")
    parser.add_argument("--report-only", action="store_true", help="report the results already in --workdir")
    parser.add_argument("--report", type=Path, default=None, help="write the markdown report here (default: stdout)")
    parser.add_argument("--force", action="store_true", help="overwrite --report if it exists")
    args = parser.parse_args(argv)

    try:
        from importlib.metadata import version

        found = version("mutmut")
    except Exception:  # PackageNotFoundError
        found = None
    if found != MUTMUT_VERSION:
        print(f"error: needs mutmut=={MUTMUT_VERSION} (found {found}); pip install mutmut=={MUTMUT_VERSION}")
        return 2
    unknown = set(args.modules.split(",")) - set(MODULES)
    if unknown:
        print(f"error: --modules: unknown {sorted(unknown)}; choose among {','.join(MODULES)}")
        return 2
    if args.report and args.report.exists() and not args.force:
        print(f"error: --report {args.report} exists; pass --force to overwrite it")
        return 2
    tree = args.tree.resolve()
    workdir = (args.workdir or Path(f"/tmp/mutation-{tree.name}")).resolve()
    report_path = args.report.resolve() if args.report else None
    sample_file = workdir / "sample.json"

    if args.report_only or args.resume:
        if not sample_file.exists():
            print(f"error: --workdir {workdir} has no sample.json; run with --list first")
            return 2
        saved = json.loads(sample_file.read_text())
        sample, header = saved["sample"], saved["header"]
        tree = Path(saved.get("tree", tree))
        if args.sample:  # the first --sample of each module's listed ones (the same draw as --sample at --list)
            ranked = sorted(sample, key=lambda row: row["rank"])
            sample = [row for module in MODULES for row in [r for r in ranked if r["module"] == module][: args.sample]]
            header = re.sub(r"sample \S+ per module", f"sample {args.sample} per module", header)
    else:
        if not (tree / "hf_tlaser").is_dir():
            print(f"error: --tree {tree} has no hf_tlaser/ folder")
            return 2
        prepare(tree, workdir)
        wanted = set(args.modules.split(","))
        sample = [row for row in draw(list_mutants(workdir), args.sample, args.seed) if row["module"] in wanted]
        git = ["git", "-C", str(tree)]
        commit = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
        dirty = subprocess.run([*git, "status", "--porcelain"], capture_output=True, text=True)
        state = commit.stdout.strip() + (" + uncommitted edits" if dirty.stdout.strip() else "")
        header = (
            f"mutmut {MUTMUT_VERSION} on {tree} ({state}); sample {args.sample or 'all'} per module, "
            f"seed {args.seed}; tests: {' '.join(test_files(tree))}; -k '{DESELECT}'"
        )
        sample_file.write_text(json.dumps(dict(header=header, tree=str(tree), sample=sample), indent=1))
        if args.list:
            for row in sample:
                print(f"{row['module']:8} {row['file']}:{row['line']} {row['key']}: {one_line(row)}")
            return 0
    if not args.report_only:
        start = time.monotonic()
        if args.quick:
            generate_mutants(workdir, workdir / "mutmut.log")
            run_quick(workdir, sample, args.timeout, workdir / "quick.log")
            header += "; --quick (no mutmut stats pass; tests per mutated file: QUICK_TESTS)"
        else:
            run_mutmut(workdir, [row["key"] for row in sample], workdir / "mutmut.log")
        header += f"; {(time.monotonic() - start) / 60:.1f} min wall"
        sample_file.write_text(json.dumps(dict(header=header, tree=str(tree), sample=sample), indent=1))
    results(workdir, sample)
    (workdir / "results.json").write_text(json.dumps(sample, indent=1))
    text = report(sample, header)
    if report_path:
        report_path.write_text(text + "\n")
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

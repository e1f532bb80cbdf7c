"""Mutation testing with mutmut 3 of the core modules (issue 34: the losses, training/warm.py, training/distill.py,
teachers/cache.py and encoders/) and of the inference code (issue 50: inference/, its store, backend/runtime.py and
backend/measured.py).
Not part of CI (scripts/test.sh, .ci/run): it runs for tens of minutes.

The code of ``--tree`` is copied into ``--workdir`` (hf_tlaser/, tests/, pyproject.toml with a ``[tool.mutmut]``
table added), so that edits to the tree during the run change nothing and mutmut's ``mutants/`` folder stays out of the
repository. Each mutant runs only the tests that call the mutated function (mutmut's own test mapping), among the
test files of ``TEST_FILES`` minus ``DESELECT``, with ``pytest -x``, one at a time. ``--modules`` picks some modules:
only their files are mutated and only their test files run (mutmut's stats pass included).

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
    python scripts/mutation.py --tree . --modules inference,store,backends --report inference.md  # issue 50's run
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
        # hf_tlaser.models.common.losses: the cT-LASER distance constraint (eq. 7-10), alignment loss, in-batch
        # negatives, and the loss of a translation batch that combines them (mean_pairwise_cosine and
        # centered_pair_cosine are decorated with torch.no_grad, which mutmut 3 does not mutate)
        "hf_tlaser/models/common/losses.py": [
            "x_unique_pairs",
            "x_sample_negatives",
            "x_distance_constraint_loss",
            "x_align_loss",
            "x_translation_loss",
            "x_distance_constrained_loss",
            "x_distill_loss",  # the distillation term
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
    },
    "warm": {"hf_tlaser/training/warm.py": ["*"], "hf_tlaser/training/student.py": ["*"]},
    "distill": {"hf_tlaser/training/distill.py": ["*"]},
    "cache": {"hf_tlaser/teachers/cache.py": ["*"]},
    "encoders": {
        "hf_tlaser/encoders/base.py": ["*"],
        "hf_tlaser/encoders/folder.py": ["*"],
        "hf_tlaser/encoders/identity.py": ["*"],
        "hf_tlaser/encoders/loading.py": ["*"],
        "hf_tlaser/encoders/vectors.py": ["*"],
    },
    # issue 50: hf-tlaser embed, mine and export, without their argparse builders and the library calls that only
    # convert (export_onnx, export_openvino, compress_openvino, quantize_openvino_static)
    "inference": {
        # the shard, the batching and truncation counts, the checks before the model loads, the lock and the chunk
        # loop (main: run_command and the process group's end only)
        "hf_tlaser/inference/embed.py": [
            "x_parse_shard",
            "x_vectors_fingerprint",
            "x_encode_batched",
            "x_embed_lines",
            "x_load_model",
            "x_check_args",
            "x_run",
            "x_embed_locked",
        ],
        # the texts read, the TSV written, the output checks, the lock and --model's temporaries (main)
        "hf_tlaser/inference/mine.py": [
            "x_write_outputs",
            "x_check_outputs",
            "x_check_input",
            "x_load_side",
            "x_check_args",
            "x_search_plan",
            "x_check_indexes",
            "x_run",
            "x_embed_both",
            "x_embeddings_folder",
            "x_main",
        ],
        # the folder checks, remote code only when asked, the agreement check, the room check, the files planned,
        # staged, checked and copied whole
        "hf_tlaser/backend/export.py": [
            "x_check_folder",
            "x_load_for_export",
            "x_read_calibration",
            "x_agreement",
            "x_weight_count",
            "x_export_bytes",
            "x_check_room",
            "x_planned_files",
            "x_export_model",
            "x_write_files",
            "x_copy_whole",
            "x_stage_files",
        ],
        # the sample batch and the ONNX quantiser's choice of weight type
        "hf_tlaser/backend/convert.py": ["x_sample_batch", "x_quantize_onnx"],
        # lines cut in bounded reads, the \r-only refusal, the input scanned and hashed once, the chunk plan
        "hf_tlaser/inference/lines.py": ["*"],
        # writability, free space, write errors, the output lock
        "hf_tlaser/guards.py": ["*"],
    },
    "bitext": {
        # issue 49's bitext layer: the kNN search at scale (exact, sharded, re-scored), the index checks, the mining,
        # the retrieval modes, the texts read once and the one TSV writer
        "hf_tlaser/bitext/index.py": [
            "xǁRowsǁtake",
            "xǁRowsǁblocks",
            "xǁSearchPlanǁspec",
            "x_default_index",
            "x_require_faiss",
            "x_faiss_reason",
            "x_make_index",
            "x_check_index",
            "x_use_gpu",
            "x_train",
            "x_shard_rows",
            "x_merge_top_k",
            "x_exact_cosines",
            "x_search",
            "x__search",
        ],
        "hf_tlaser/bitext/mining.py": ["x_mine", "x_mine_vectors", "xǁMinedǁabove", "x_write_bitexts"],
        "hf_tlaser/bitext/select.py": [
            "x_direction_pairs",
            "x_mutual",
            "x_best_first",
            "x_select_pairs",
            "x_first_uses",
            "x_greedy_one_to_one",
            "x_merged_one_to_one",
            "x_unique_rows",
            "x_first_rows",
        ],
        "hf_tlaser/bitext/texts.py": [
            "x_read_texts",
            "x_digest_texts",
            "x_text_keys",
            "x_line_keys",
            "x_lines_at",
            "x_tsv_field",
            "x_write_tsv",
        ],
    },
    # the embeddings file: sidecar, shards joined, resumable writer, allocation
    "store": {"hf_tlaser/inference/store.py": ["*"]},
    # the exported backends, their files' freshness, the CPU class, backends.json and backend="auto"
    "backends": {"hf_tlaser/backend/runtime.py": ["*"], "hf_tlaser/backend/measured.py": ["*"]},
}
CORE_TESTS = [
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
    # added with issue 50's run of the core modules: the negative memory's loss terms, --init-layers and
    # --freeze-layers, and loading.vector_width
    "tests/test_negative_memory.py",
    "tests/test_student.py",
    "tests/test_mutants_inference.py",
]
INFERENCE_TESTS = [
    "tests/test_reliability.py",
    "tests/test_embed.py",
    "tests/test_mine.py",
    "tests/test_export.py",
    "tests/test_backends.py",
    "tests/test_teacher_fingerprint.py",  # backends.hash_file, through the teachers' file digest
    "tests/test_mutants_inference.py",
    # the exported encoder's carried Dense (the other tests of that file start fresh processes or train)
    "tests/test_warm_modules.py::test_the_exported_encoder_applies_the_carried_modules",
]
# module -> the test files of mutmut's run (its stats pass maps each test to the functions it calls); a run of some
# --modules takes the union of theirs, in this order
TEST_FILES: dict[str, list[str]] = {
    **dict.fromkeys(("losses", "warm", "distill", "cache"), CORE_TESTS),
    # the encoders: the teachers' tests, and the evaluation's use of them (the model under test, cNV per language)
    "encoders": [
        *CORE_TESTS,
        "tests/test_encoders.py",
        "tests/test_eval_cli.py",
        "tests/test_cnv_evaluation.py",
        "tests/test_backends.py",
    ],
    **dict.fromkeys(("inference", "store", "backends"), INFERENCE_TESTS),
    "bitext": [
        "tests/test_mine.py",
        "tests/test_mine_pipeline.py",  # the staged runs' merge of sorted runs, a filter slice's lines
        "tests/test_bitext_texts.py",  # a text file's digest in chunks, its lines' keys, the unique lines from them
        "tests/test_reliability.py",
        "tests/test_mutants_inference.py",
        "tests/test_embed.py",
        "tests/test_eval_retrieval.py",
    ],
}
# subprocesses import the tree's code, not the mutant (DDP, push, fresh process, embed's --shard job array and its 2
# processes under accelerate launch, bench_backends' workers: its tests also load scripts/, which the work dir lacks);
# the 100000-text vectors file took 230 s alone; test_multiway_forward_uses_groups patches a module global that
# mutmut's trampoline bypasses; test_projection_head_survives_save_and_load loads the saved folder with
# trust_remote_code, which imports a copy of the mutated module whose trampoline looks for mutmut's config in the wrong
# folder (the stats pass stops there)
DESELECT = (
    "not ddp and not push and not fresh and not 100000 and not test_multiway_forward_uses_groups "
    "and not projection_head_survives and not array_of_shard_processes and not two_processes_equal_one "
    "and not bench_quality_reads and not bench_backends_compares"
)
# and in mutmut's own run, where a module mutates a file under REMOTE_CODE (the losses), the other test whose fresh
# process loads a saved folder with trust_remote_code: save_pretrained writes the model's code into the folder, there
# a copy of the mutated module, whose trampoline in the stats pass records the hit through mutmut's config, read from
# that process's folder. A mutant run (--quick too) only compares names there; in the test process itself mutmut's
# config is read already, so the in-process trust_remote_code loads (export's checks against sentence-transformers) stay
REMOTE_CODE = "hf_tlaser/models/"
STATS_DESELECT = "not before_training_the_warm_model"


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
    "hf_tlaser/training/student.py": [
        "tests/test_mutants_core.py",
        "tests/test_student.py",
        "tests/test_warm_start.py",
    ],
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
    **dict.fromkeys(
        [f"hf_tlaser/encoders/{name}.py" for name in ("base", "folder", "identity", "loading", "vectors")],
        [
            "tests/test_mutants_core.py",
            "tests/test_teacher_fingerprint.py",
            "tests/test_teacher.py",
            "tests/test_eval_cli.py",
            "tests/test_cnv_evaluation.py",
        ],
    ),
    "hf_tlaser/inference/embed.py": [
        "tests/test_mutants_inference.py",
        "tests/test_embed.py",
        "tests/test_reliability.py",
    ],
    "hf_tlaser/inference/mine.py": [
        "tests/test_mutants_inference.py",
        "tests/test_mine.py",
        "tests/test_reliability.py",
    ],
    "hf_tlaser/bitext/index.py": [
        "tests/test_mutants_inference.py",
        "tests/test_mine.py",
        "tests/test_reliability.py",
        "tests/test_eval_retrieval.py",
    ],
    "hf_tlaser/bitext/mining.py": [
        "tests/test_mutants_inference.py",
        "tests/test_mine.py",
        "tests/test_reliability.py",
        "tests/test_eval_retrieval.py",
    ],
    "hf_tlaser/bitext/select.py": [
        "tests/test_mutants_inference.py",
        "tests/test_mine.py",
        "tests/test_mine_pipeline.py",
        "tests/test_reliability.py",
        "tests/test_eval_retrieval.py",
    ],
    "hf_tlaser/bitext/texts.py": [
        "tests/test_mutants_inference.py",
        "tests/test_mine.py",
        "tests/test_mine_pipeline.py",
        "tests/test_reliability.py",
        "tests/test_eval_retrieval.py",
    ],
    **dict.fromkeys(
        ["hf_tlaser/backend/export.py", "hf_tlaser/backend/convert.py"],
        ["tests/test_export.py", "tests/test_reliability.py", "tests/test_backends.py"],
    ),
    "hf_tlaser/inference/lines.py": ["tests/test_reliability.py", "tests/test_embed.py", "tests/test_mine.py"],
    "hf_tlaser/guards.py": [
        "tests/test_mutants_inference.py",
        "tests/test_reliability.py",
        "tests/test_embed.py",
        "tests/test_mine.py",
    ],
    "hf_tlaser/inference/store.py": [
        "tests/test_mutants_inference.py",
        "tests/test_embed.py",
        "tests/test_reliability.py",
        "tests/test_mine.py",
    ],
    "hf_tlaser/backend/runtime.py": [
        "tests/test_mutants_inference.py",
        "tests/test_backends.py",
        "tests/test_export.py",
        "tests/test_reliability.py",
        "tests/test_teacher_fingerprint.py",
    ],
    "hf_tlaser/backend/measured.py": [
        "tests/test_mutants_inference.py",
        "tests/test_backends.py",
        "tests/test_export.py",
        "tests/test_reliability.py",
        "tests/test_teacher_fingerprint.py",
    ],
}
STATUS = {1: "killed", 3: "killed", 0: "survived", 5: "no tests", 33: "no tests", 36: "timeout", 24: "timeout"}
STATUS.update({-24: "timeout", 152: "timeout", 255: "timeout", None: "not checked"})


def mutated_files(modules: list[str]) -> list[str]:
    """The files the ``modules`` mutate."""
    return sorted({path for module in modules for path in MODULES[module]})


def test_files(tree: Path, modules: list[str]) -> list[str]:
    """The files (or ``FILE::TEST`` ids) of the ``modules``' ``TEST_FILES`` that ``tree`` has, each once."""
    files = dict.fromkeys(path for module in modules for path in TEST_FILES[module])
    return [path for path in files if (tree / path.partition("::")[0]).is_file()]


def deselect(modules: list[str]) -> str:
    """The ``-k`` expression of the tests mutmut's own run leaves out: ``DESELECT``, and ``STATS_DESELECT`` where the
    ``modules`` mutate a file under ``REMOTE_CODE`` (--quick leaves out ``DESELECT`` only)."""
    remote = any(path.startswith(REMOTE_CODE) for path in mutated_files(modules))
    return f"{DESELECT} and {STATS_DESELECT}" if remote else DESELECT


def mutmut_config(tree: Path, modules: list[str]) -> str:
    """The ``[tool.mutmut]`` table appended to the work dir's copy of pyproject.toml: the ``modules``' files mutated,
    their test files run."""
    return "\n".join(
        [
            "",
            "[tool.mutmut]",
            'source_paths = ["hf_tlaser"]',
            f"only_mutate = {json.dumps(mutated_files(modules))}",
            f"pytest_add_cli_args_test_selection = {json.dumps(test_files(tree, modules))}",
            f"pytest_add_cli_args = {json.dumps(['-p', 'no:cacheprovider', '-k', deselect(modules)])}",
            # torch is not fork-safe once it has run: each mutant forks from a server that has only collected
            'process_isolation = "forkserver"',
            "use_git_change_detection = false",
            "debug = true",  # the pytest commands and output in mutmut.log
            "",
        ]
    )


def prepare(tree: Path, workdir: Path, modules: list[str]) -> None:
    """Copy the tree's code and tests into a fresh ``workdir`` (only one this script made is replaced), configured to
    mutate the ``modules``."""
    if workdir.exists():
        if not (workdir / MARKER).exists():
            sys.exit(f"error: --workdir {workdir} exists and was not made by this script; pick another folder")
        shutil.rmtree(workdir)
    workdir.mkdir(parents=True)
    (workdir / MARKER).write_text(str(tree) + "\n")
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in ("hf_tlaser", "tests"):
        shutil.copytree(tree / name, workdir / name, ignore=ignore)
    (workdir / "pyproject.toml").write_text((tree / "pyproject.toml").read_text() + mutmut_config(tree, modules))


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


def list_mutants(workdir: Path, modules: list[str]) -> list[dict]:
    """Every mutant of the ``modules``' selected functions: module, key (mutmut's name), file, line, function,
    removed, added."""
    os.chdir(workdir)  # mutmut reads its config from the current folder
    import libcst as cst
    from mutmut.mutation.diff_apply import find_top_level_function_or_method
    from mutmut.mutation.file_mutation import mutate_file_contents
    from mutmut.utils.format_utils import get_mutant_name

    rows = []
    for module in modules:
        for path, patterns in MODULES[module].items():
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


def report(sample: list[dict], header: str, modules: list[str]) -> str:
    """Markdown: a score table per module of ``modules`` and the survivors grouped by module."""
    lines = [header, "", "| module | sample | run | killed | survived | timeout | no tests | other | score |"]
    lines.append("|---" * 9 + "|")
    for module in modules:
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
    for module in modules:
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
    parser.add_argument(
        "--modules",
        default=None,
        help="comma-separated subset of " + ",".join(MODULES) + " (default: all); only their files are mutated and "
        "only their tests run",
    )
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
    asked = [name.strip() for name in (args.modules or ",".join(MODULES)).split(",") if name.strip()]
    unknown = set(asked) - set(MODULES)
    if unknown or not asked:
        print(f"error: --modules: unknown {sorted(unknown)}; choose among {','.join(MODULES)}")
        return 2
    modules = [module for module in MODULES if module in asked]
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
        listed = saved.get("modules") or [module for module in MODULES if any(r["module"] == module for r in sample)]
        if args.modules and modules != listed:  # the work dir mutates the listed modules' files only
            print(f"error: --workdir {workdir} was listed with --modules {','.join(listed)}; list it again")
            return 2
        modules = listed
        if args.sample:  # the first --sample of each module's listed ones (the same draw as --sample at --list)
            ranked = sorted(sample, key=lambda row: row["rank"])
            sample = [row for module in modules for row in [r for r in ranked if r["module"] == module][: args.sample]]
            header = re.sub(r"sample \S+ per module", f"sample {args.sample} per module", header)
    else:
        if not (tree / "hf_tlaser").is_dir():
            print(f"error: --tree {tree} has no hf_tlaser/ folder")
            return 2
        prepare(tree, workdir, modules)
        sample = draw(list_mutants(workdir, modules), args.sample, args.seed)
        git = ["git", "-C", str(tree)]
        commit = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
        dirty = subprocess.run([*git, "status", "--porcelain"], capture_output=True, text=True)
        state = commit.stdout.strip() + (" + uncommitted edits" if dirty.stdout.strip() else "")
        header = (
            f"mutmut {MUTMUT_VERSION} on {tree} ({state}); modules {','.join(modules)}; sample {args.sample or 'all'} "
            f"per module, seed {args.seed}; tests: {' '.join(test_files(tree, modules))}; -k '{deselect(modules)}'"
        )
        save = dict(header=header, tree=str(tree), modules=modules, sample=sample)
        sample_file.write_text(json.dumps(save, indent=1))
        if args.list:
            for row in sample:
                print(f"{row['module']:9} {row['file']}:{row['line']} {row['key']}: {one_line(row)}")
            return 0
    if not args.report_only:
        start = time.monotonic()
        if args.quick:
            generate_mutants(workdir, workdir / "mutmut.log")
            run_quick(workdir, sample, args.timeout, workdir / "quick.log")
            header += f"; --quick (no mutmut stats pass; tests per mutated file: QUICK_TESTS; -k '{DESELECT}')"
        else:
            run_mutmut(workdir, [row["key"] for row in sample], workdir / "mutmut.log")
        header += f"; {(time.monotonic() - start) / 60:.1f} min wall"
        save = dict(header=header, tree=str(tree), modules=modules, sample=sample)
        sample_file.write_text(json.dumps(save, indent=1))
    results(workdir, sample)
    (workdir / "results.json").write_text(json.dumps(sample, indent=1))
    text = report(sample, header, modules)
    if report_path:
        report_path.write_text(text + "\n")
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

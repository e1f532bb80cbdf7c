"""``hf-tlaser mine-pipeline``: the stages, run as real processes through submitit's local executor or in this
process, give the pairs of the one-process ``hf-tlaser mine``; a stage resumes its unfinished tasks only; a failed
job is one line naming its log; every bad input is one line. (A local job is a fresh interpreter that imports
hf_tlaser: seconds each, so most tests run the tasks inline.)"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from test_mine import parallel_corpus, write_embeddings

from hf_tlaser.bitext.index import database_shards
from hf_tlaser.bitext.texts import lines_at, read_texts
from hf_tlaser.inference import mine, pipeline
from hf_tlaser.inference.store import StackedRows
from hf_tlaser.inference.work import Work, file_identity, shard_bounds, write_atomic
from tests.test_train_cli_errors import usage_errors

pytest.importorskip("faiss")
pytest.importorskip("submitit")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """Texts and embeddings of two sides: 120 translations among 80 unmatched lines a side, and a repeated line."""
    folder = tmp_path_factory.mktemp("pipeline")
    src, tgt, _ = parallel_corpus(pairs=120, extra=80, dim=16, seed=3)
    src_lines = [f"source {i}" for i in range(len(src))]
    src_lines[5] = src_lines[4]  # identical lines are mined once
    (folder / "src.txt").write_text("\n".join(src_lines) + "\n")
    (folder / "tgt.txt").write_text("\n".join(f"target {i}" for i in range(len(tgt))) + "\n")
    write_embeddings(folder / "src.npy", src)
    write_embeddings(folder / "tgt.npy", tgt)
    return folder


def inputs(folder, *extra: str) -> list[str]:
    """``mine``'s arguments: small query blocks and a small memory budget, so that the 200 rows a side are searched
    in 5 blocks against 8 database shards (27 rows of 16-d each fit 2,000 bytes)."""
    return [
        "--src", str(folder / "src.txt"), "--tgt", str(folder / "tgt.txt"),
        "--src-embeddings", str(folder / "src.npy"), "--tgt-embeddings", str(folder / "tgt.npy"),
        "--batch-size", "40", "--index-memory", "0.000002", *extra,
    ]  # fmt: skip


def staged(corpus, tmp_path, *extra: str, launcher: str = "inline") -> list[str]:
    work = ["--work", str(tmp_path / "work"), "--shards", "3", "--workers", "2", "--launcher", launcher]
    return [*inputs(corpus, *extra), *work]


def test_local_jobs_share_the_cores_unless_threads_are_given(monkeypatch):
    monkeypatch.setattr(pipeline, "available_cpus", lambda: 8)
    args = pipeline.build_parser().parse_args(["--src", "s", "--tgt", "t", "--work", "w", "--output", "o"])
    expected = {("local", 2, 0): 4, ("local", 3, 0): 2, ("local", 16, 0): 1, ("inline", 4, 0): 8, ("slurm", 4, 0): 1}
    expected[("local", 2, 3)] = 3
    for (launcher, workers, threads), count in expected.items():
        args.launcher, args.workers, args.threads = launcher, workers, threads
        assert pipeline.job_threads(args) == count


def test_shards_cover_every_row_once_at_block_boundaries():
    assert shard_bounds(10, 3) == [(0, 3), (3, 7), (7, 10)]
    assert shard_bounds(2, 4) == [(0, 1), (1, 2)]
    assert shard_bounds(200, 3, 40) == [(0, 80), (80, 120), (120, 200)]  # 5 blocks of 40 queries
    assert shard_bounds(30, 4, 40) == [(0, 30)]
    assert database_shards(200, 27) == [(i, min(i + 27, 200)) for i in range(0, 200, 27)]


@pytest.mark.parametrize(
    ("options", "launcher"),
    [
        (["--max-chars", "9"], "inline"),  # a filter too: "source 100" has 10 characters
        (["--index", "IVF8,Flat", "--nprobe", "8", "--train-size", "150"], "local"),
        (["--retrieval", "intersect"], "inline"),
        (["--max-chars", "9", "--max-score", "1.3"], "local"),
        (["--retrieval", "fwd", "--margin", "distance"], "inline"),
        (["--retrieval", "bwd", "--margin", "absolute"], "inline"),
    ],
)
def test_the_staged_pipeline_gives_the_pairs_of_one_process_mine(corpus, tmp_path, capsys, options, launcher):
    assert mine.main([*inputs(corpus, *options), "--output", str(tmp_path / "one.tsv")]) == 0
    args = [*staged(corpus, tmp_path, *options, launcher=launcher), "--output", str(tmp_path / "staged.tsv")]
    assert pipeline.main(args) == 0
    one, staged_pairs = (tmp_path / "one.tsv").read_bytes(), (tmp_path / "staged.tsv").read_bytes()
    assert staged_pairs == one and one.count(b"\n") > 20
    assert (tmp_path / "staged.lines.tsv").read_bytes() == (tmp_path / "one.lines.tsv").read_bytes()
    summaries = [json.loads((tmp_path / f"{name}.summary.json").read_text()) for name in ("one", "staged")]
    assert summaries[0]["counts"] == summaries[1]["counts"] and summaries[1]["command"] == "hf-tlaser mine-pipeline"
    assert (tmp_path / "staged.png").is_file()
    out = capsys.readouterr().out
    assert "stage search: 6 tasks run, 0 done before" in out  # 3 query shards in each direction
    assert sorted(p.name for p in (tmp_path / "work" / "knn").iterdir()) == [
        f"{d}.{i:04d}.npz" for d in ("bwd", "fwd") for i in range(3)
    ]


def test_a_stage_runs_again_only_its_unfinished_tasks(corpus, tmp_path, capsys):
    args = [*staged(corpus, tmp_path), "--output", str(tmp_path / "pairs.tsv")]
    assert pipeline.main(args) == 0
    first = (tmp_path / "pairs.tsv").read_bytes()
    work = tmp_path / "work"
    stats = [json.loads(path.read_text()) for path in (work / "stats").iterdir()]
    assert (
        sorted(record["stage"] for record in stats)
        == ["lines"] * 6
        + ["margin"] * 6
        + ["mine"]
        + ["populate"] * 16
        + ["search"] * 6
        + ["train"] * 2
        + ["unique"] * 2
        + ["write"] * 3
    )
    assert all(record["seconds"] >= 0 and record["peak_rss_mib"] > 0 for record in stats)
    kept = {path: path.stat().st_mtime_ns for path in (work / "index").iterdir()}
    (work / "knn" / "fwd.0001.npz").unlink()  # what a task killed before its rename leaves: no output
    (work / "mined.npz").unlink()
    (work / "lines" / "tgt.0002.npy").unlink()
    next((work / "write").glob("*/0001.json")).unlink()  # its TSV is written again
    capsys.readouterr()
    assert pipeline.main([*args, "--overwrite"]) == 0
    out = capsys.readouterr().out
    assert "stage train: 0 tasks run, 2 done before" in out and "stage populate: 0 tasks run, 16 done before" in out
    assert "stage search: 1 tasks run, 5 done before" in out and "stage mine: 1 tasks run, 0 done before" in out
    assert "stage lines: 1 tasks run, 5 done before" in out and "stage write: 1 tasks run, 2 done before" in out
    assert "stage unique: 0 tasks run, 2 done before" in out
    assert {path: path.stat().st_mtime_ns for path in (work / "index").iterdir()} == kept
    assert (tmp_path / "pairs.tsv").read_bytes() == first


def test_stages_run_apart_and_a_stage_before_its_inputs_is_refused(corpus, tmp_path, capsys):
    out = str(tmp_path / "pairs.tsv")
    assert pipeline.main([*staged(corpus, tmp_path), "--stage", "search", "--output", out]) == 2
    line = capsys.readouterr().err.strip()
    assert line.startswith("hf-tlaser mine-pipeline: error: --stage search: needs ") and "populate" not in line
    assert "rows.src.npy" in line and "--stage all" in line and not (tmp_path / "work").exists()
    assert pipeline.main([*staged(corpus, tmp_path), "--stage", "lines,unique", "--output", out]) == 0
    assert pipeline.main([*staged(corpus, tmp_path), "--stage", "search", "--output", out]) == 2
    line = capsys.readouterr().err.strip()
    assert "--stage search: needs " in line and "index/src.0000.faiss" in line and "populate" not in line
    assert pipeline.main([*staged(corpus, tmp_path), "--stage", "train,populate", "--output", out]) == 0
    assert not (tmp_path / "pairs.tsv").exists() and not (tmp_path / "work" / "knn").exists()
    args = [*staged(corpus, tmp_path), "--stage", "search,margin,mine,filter,dedup,write", "--output", out]
    assert pipeline.main(args) == 0
    assert (tmp_path / "pairs.tsv").is_file()


def test_a_work_folder_of_another_pipeline_is_refused(corpus, tmp_path, capsys):
    args = [*staged(corpus, tmp_path), "--stage", "lines"]
    assert pipeline.main([*args, "--output", str(tmp_path / "a.tsv")]) == 0
    saved = json.loads((tmp_path / "work" / "pipeline.json").read_text())
    other = corpus / "other.npy"
    write_embeddings(other, np.load(corpus / "tgt.npy").astype(np.float32), fingerprint="model-b")
    capsys.readouterr()
    args[args.index("--tgt-embeddings") + 1] = str(other)
    assert pipeline.main([*args, "--output", str(tmp_path / "a.tsv")]) == 2
    err = capsys.readouterr().err
    assert "come from different models or prompts" in err  # the two sides' fingerprints differ
    assert json.loads((tmp_path / "work" / "pipeline.json").read_text()) == saved
    args = [*staged(corpus, tmp_path), "--stage", "lines", "--shards", "2", "--output", str(tmp_path / "a.tsv")]
    assert pipeline.main(args) == 2
    assert "holds the stages of another pipeline (it differs in shards)" in capsys.readouterr().err


@usage_errors(
    {
        "--launcher slurm": "--launcher slurm: no sbatch on this machine's PATH",
        "--stage fetch": "--stage fetch: expected some of lines, unique, train, populate, search, margin, mine",
        "--shards 0": "--shards 0: must be at least 1",
        "--model x": "--model: the pipeline mines hf-tlaser embed outputs",
    }
)
def test_bad_arguments_are_one_line_before_any_work(corpus, tmp_path, capsys, monkeypatch, extra, expected):
    monkeypatch.setattr(pipeline.shutil, "which", lambda name: None)
    assert pipeline.main([*staged(corpus, tmp_path), *extra, "--output", str(tmp_path / "p.tsv")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and expected in err[0]
    assert not (tmp_path / "work").exists() and not (tmp_path / "p.tsv").exists()


def test_a_failed_job_names_its_log_and_the_rerun_finishes(corpus, tmp_path, capsys):
    args = [*staged(corpus, tmp_path), "--output", str(tmp_path / "p.tsv")]
    assert pipeline.main([*args, "--stage", "lines,unique,train,populate"]) == 0
    shard = tmp_path / "work" / "index" / "tgt.0001.faiss"
    good = shard.read_bytes()
    shard.write_bytes(good[:100])  # a damaged shard: the search tasks that read it (fwd) fail
    record = tmp_path / "work" / "stats" / "populate.tgt.1.json"
    saved_record = record.read_text()
    forged = json.loads(saved_record)  # its record made to match (else the command refuses the shard before any job)
    forged["outputs"] = {"index/tgt.0001.faiss": file_identity(shard)}
    record.write_text(json.dumps(forged))
    capsys.readouterr()
    local = [*staged(corpus, tmp_path, launcher="local"), "--output", str(tmp_path / "p.tsv")]
    handler = signal.getsignal(signal.SIGTERM)
    assert pipeline.main([*local, "--stage", "search"]) == 1
    assert signal.getsignal(signal.SIGTERM) == handler  # SIGTERM cancels the jobs only while they run
    err = capsys.readouterr().err.strip()
    assert err.startswith("hf-tlaser mine-pipeline: error: stage search: 2 of 2 jobs failed; job ") and "log: " in err
    assert "2 of 3 search tasks failed" in err and not (tmp_path / "p.tsv").exists()  # 2 jobs: fwd 0, 2, bwd 1 first
    assert len(list((tmp_path / "work" / "knn").glob("bwd.*.npz"))) == 3  # the other job was waited for
    shard.write_bytes(good)
    record.write_text(saved_record)
    assert pipeline.main(args) == 0
    assert "stage search: 3 tasks run, 3 done before" in capsys.readouterr().out  # the job went on with bwd


@pytest.mark.parametrize("kill", ["sigterm", "ctrl-c"])
def test_a_killed_command_cancels_its_jobs_and_the_rerun_finishes(corpus, tmp_path, capsys, kill):
    """SIGTERM to the command (a real process, started with SIGINT ignored, as a script's background command), or
    Ctrl-C to its process group as a terminal sends it (the jobs' controllers get it too), while its local jobs run:
    the jobs are cancelled, one line and no traceback, exit code 130; the same command then finishes with the pairs of
    ``hf-tlaser mine``."""
    assert mine.main([*inputs(corpus), "--output", str(tmp_path / "one.tsv")]) == 0
    args = [*staged(corpus, tmp_path), "--output", str(tmp_path / "p.tsv")]
    assert pipeline.main([*args, "--stage", "lines,unique,train,populate"]) == 0
    local = [*staged(corpus, tmp_path, launcher="local"), "--output", str(tmp_path / "p.tsv"), "--stage", "search"]
    ignored = signal.SIG_IGN if kill == "sigterm" else signal.SIG_DFL  # whatever this test process has (xdist: ignored)
    command = subprocess.Popen(
        [sys.executable, "-m", "hf_tlaser.inference.pipeline", *local],
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=kill == "ctrl-c",  # its own process group, as a terminal's foreground command
        preexec_fn=lambda: signal.signal(signal.SIGINT, ignored),  # noqa: PLW1509 - nothing else runs in the test
    )
    for line in command.stderr:  # the jobs are submitted (each a fresh interpreter, seconds from its first task)
        if "stage search: 6 tasks as 2 jobs" in line:
            break
    if kill == "sigterm":
        command.send_signal(signal.SIGTERM)
    else:
        time.sleep(1)  # the controllers are running
        os.killpg(command.pid, signal.SIGINT)
    rest = command.stderr.read()
    assert command.wait(timeout=60) == 130
    assert "stage search: interrupted; " in rest and "Traceback" not in rest
    assert rest.strip().splitlines()[-1] == (
        "hf-tlaser mine-pipeline: interrupted (its running jobs cancelled); the finished tasks are kept in "
        f"{tmp_path / 'work'}: the same command resumes"
    )
    controllers = {int(path.name.split("_")[0]) for path in (tmp_path / "work" / "logs" / "search").glob("*.pkl")}
    assert len(controllers) == 2
    for pid in controllers:  # each job's process ends (a zombie left to init counts as ended)
        status = Path(f"/proc/{pid}/status")
        for _ in range(600):
            if not status.exists() or "\nState:\tZ" in status.read_text():
                break
            time.sleep(0.1)
        else:
            pytest.fail(f"job {pid} still runs after the command was killed")
    assert not list((tmp_path / "work").glob("knn/*.tmp*"))  # a cancelled task leaves no temporary file
    if kill == "sigterm":  # cancelled at once, before their tasks were all done
        assert "2 unfinished jobs cancelled" in rest and len(list((tmp_path / "work").glob("knn/*.npz"))) < 6
    assert pipeline.main(args) == 0
    assert (tmp_path / "p.tsv").read_bytes() == (tmp_path / "one.tsv").read_bytes()


JOB_SCRIPT = """
import json, os, signal, sys
from pathlib import Path
from hf_tlaser.inference import stages
from hf_tlaser.inference.work import write_atomic

def ignore(*_):
    print("ignored", flush=True)

signal.signal(signal.SIGTERM, ignore)  # what submitit's job environment does
folder = Path(sys.argv[1])
(folder / "pipeline.json").write_text("{}")

def killed(work, direction, shard):  # SIGTERM (a cancelled job's controller forwards it) midway through the task
    write_atomic(work.knn_path(direction, shard), lambda path: (path.write_text("half"), os.kill(os.getpid(), 15)))

stages.TASKS["search"] = killed
stages.Work.used = lambda work, stage: {}  # the stub task reads no input
try:
    stages.run_tasks(str(folder), "search", [("fwd", 0), ("fwd", 1)], 0)
except KeyboardInterrupt:
    print("stopped", signal.getsignal(signal.SIGTERM) is ignore, flush=True)
"""


def test_a_job_stops_on_sigterm_though_submitit_ignores_it(tmp_path):
    """A local job's task stops on the SIGTERM its controller forwards (submitit's own handler ignores SIGTERM), the
    task it was running leaving no file, and the job's handler is its own again afterwards."""
    done = subprocess.run([sys.executable, "-c", JOB_SCRIPT, str(tmp_path)], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["stopped", "True"]
    assert sorted(path.name for path in tmp_path.rglob("*") if path.is_file()) == ["pipeline.json"]


def test_two_jobs_writing_one_output_leave_a_whole_file(tmp_path, monkeypatch):
    """A job left running by a killed command and its rerun's job may run the same task at once: their temporary
    files differ, so the output is one whole file, not a mix."""
    path = tmp_path / "out.txt"

    def write(temporary):
        with temporary.open("a") as out:
            out.write("first half, ")
        monkeypatch.setattr(os, "getpid", lambda: -1)  # the other process
        write_atomic(path, lambda other: other.write_text("the other job's whole file"))
        monkeypatch.undo()
        with temporary.open("a") as out:
            out.write("second half")

    write_atomic(path, write)
    assert path.read_text() == "first half, second half" and [p.name for p in tmp_path.iterdir()] == ["out.txt"]
    with pytest.raises(ZeroDivisionError):
        write_atomic(tmp_path / "failed.txt", lambda temporary: (temporary.write_text("half"), 1 / 0))
    assert [p.name for p in tmp_path.iterdir()] == ["out.txt"]  # a failed write leaves no temporary file


def test_embeddings_in_shard_files_are_read_lazily_and_mine_the_same(corpus, tmp_path, capsys):
    """``hf-tlaser embed --shard i/n`` outputs of a side, given as they are: the jobs index their memory maps
    (``StackedRows``) instead of joining them, and the pairs are those of the one file."""
    vectors = np.load(corpus / "src.npy")
    paths = []
    for index, (start, stop) in enumerate([(0, 70), (70, 200)]):
        path = write_embeddings(tmp_path / f"src.{index}.npy", vectors[start:stop], lines=len(vectors))
        meta = json.loads(Path(f"{path}.json").read_text())
        meta.update(start=start, stop=stop, shard=[index, 2])
        Path(f"{path}.json").write_text(json.dumps(meta))
        paths.append(path)
    one = [*staged(corpus, tmp_path), "--output", str(tmp_path / "one.tsv")]
    assert pipeline.main(one) == 0
    (tmp_path / "shards").mkdir()
    shards = [*staged(corpus, tmp_path / "shards"), "--output", str(tmp_path / "shards.tsv")]
    shards[shards.index("--src-embeddings") + 1 : shards.index("--src-embeddings") + 2] = paths[::-1]
    assert pipeline.main(shards) == 0
    assert (tmp_path / "shards.tsv").read_bytes() == (tmp_path / "one.tsv").read_bytes()
    rows = Work.open(tmp_path / "shards" / "work").rows("src")
    assert isinstance(rows.array, StackedRows) and [len(part) for part in rows.array.parts] == [70, 130]


def test_other_filters_reuse_the_search_and_judge_in_slices(corpus, tmp_path, capsys):
    """The ``filter`` stage: slices of the pairs judged apart, its files kept per setting of the filters that judge
    a pair alone; changing them runs only it again (deduplication, in the command, runs none); the pairs and counts
    are those of one-process ``mine``."""
    settings = [["--max-chars", "9"], ["--max-chars", "8"], ["--max-chars", "9", "--dedup-n"], ["--dedup-n"]]
    for number, options in enumerate(settings):
        out = str(tmp_path / f"staged{number}.tsv")
        assert pipeline.main([*staged(corpus, tmp_path, *options), "--output", out]) == 0
        assert mine.main([*inputs(corpus, *options), "--output", str(tmp_path / f"one{number}.tsv")]) == 0
        assert (tmp_path / f"staged{number}.tsv").read_bytes() == (tmp_path / f"one{number}.tsv").read_bytes()
        summaries = [json.loads((tmp_path / f"{name}{number}.summary.json").read_text()) for name in ("one", "staged")]
        assert summaries[0]["counts"] == summaries[1]["counts"]
        assert (summaries[0]["counts"]["removed"]["length"] is None) == ("--max-chars" not in options)
    assert summaries[0]["counts"]["removed"]["dedup"] > 0
    out = capsys.readouterr().out
    assert out.count("stage search: 0 tasks run, 6 done before") == 3
    assert out.count("stage filter: 3 tasks run, 0 done before") == 3 and "stage filter: 0 tasks run, 3 done" in out
    assert out.count("stage dedup: 1 tasks run, 0 done before") == 2 and out.count("stage write: 3 tasks run") == 4
    assert len(list((tmp_path / "work" / "filter").iterdir())) == 3  # the dedup-only setting: no filter of a pair
    assert pipeline.main([*staged(corpus, tmp_path), "--output", str(tmp_path / "none.tsv")]) == 0
    assert "stage filter: 0 tasks run, 0 done before" in capsys.readouterr().out  # no filter on: no task


def test_a_filter_slice_reads_its_lines_in_one_pass_and_refuses_a_changed_file(tmp_path):
    path = tmp_path / "texts.txt"
    path.write_text("first\nsecond\tcolumn\nthird\u2028still third\n\nfifth\n", encoding="utf-8")
    texts = read_texts(path, "--src")
    found = lines_at(path, [4, 1, 4, 2], texts.sha256)
    assert found == {number: texts.lines[number] for number in (1, 2, 4)} and found[4] == "fifth"
    path.write_text("first\nchanged\n", encoding="utf-8")
    with pytest.raises(ValueError, match="changed since it was read"):
        lines_at(path, [0], texts.sha256)


def test_text_problems_found_by_the_stages_are_one_line(corpus, tmp_path, capsys):
    """The command reads no line of the texts (their digests only): a file of blank lines is refused after the
    ``unique`` stage, before any index (exit 2); a line that is not UTF-8 fails its ``lines`` task, and the command
    names it as ``hf-tlaser mine`` does (exit 2)."""
    lines = (corpus / "src.txt").read_text().splitlines()
    blank = tmp_path / "blank.txt"
    blank.write_text(" \n" * len(lines))
    args = [*staged(corpus, tmp_path), "--output", str(tmp_path / "p.tsv")]
    args[args.index("--src") + 1] = str(blank)
    assert pipeline.main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"--src {blank}: every line is blank" in err[0]
    assert not (tmp_path / "work" / "index").exists() and (tmp_path / "work" / "rows.src.npy").is_file()
    broken = tmp_path / "broken.txt"
    broken.write_bytes("\n".join(lines[:150]).encode() + b"\n\xff\n" + "\n".join(lines[151:]).encode() + b"\n")
    args = [*staged(corpus, tmp_path / "b"), "--output", str(tmp_path / "p.tsv")]
    args[args.index("--src") + 1] = str(broken)
    (tmp_path / "b").mkdir()
    assert pipeline.main(args) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"hf-tlaser mine-pipeline: error: --src {broken}:151: not valid UTF-8") and "iconv" in err
    assert not (tmp_path / "p.tsv").exists()


def test_a_vector_that_is_not_finite_fails_its_populate_task_named(corpus, tmp_path, capsys):
    """The command does not scan the vectors (a side can be billions of rows); each ``populate`` task checks the rows
    it adds, and the command names the line as ``hf-tlaser mine`` does (exit 2)."""
    vectors = np.load(corpus / "tgt.npy").astype(np.float32)
    vectors[57, 3] = np.nan
    write_embeddings(tmp_path / "nan.npy", vectors)
    args = [*staged(corpus, tmp_path), "--output", str(tmp_path / "p.tsv")]
    args[args.index("--tgt-embeddings") + 1] = str(tmp_path / "nan.npy")
    assert pipeline.main(args) == 2
    err = capsys.readouterr().err.strip()
    prefix = "hf-tlaser mine-pipeline: error: --tgt-embeddings: the vector of line 58 of "
    assert err.startswith(f"{prefix}{corpus / 'tgt.txt'} is not finite")
    assert not (tmp_path / "p.tsv").exists()

"""``hf-tlaser mine-pipeline``: ``hf-tlaser mine`` as stages on disk (:mod:`hf_tlaser.inference.stages`: key the
lines and find the unique ones, train the indexes, populate their shards, search each query shard, score its margins,
merge and mine, filter, remove near-duplicates and write slices of the output), each stage's tasks run
as jobs by submitit: local processes (``--launcher local``, at most ``--workers`` at a time) or a Slurm job array
(``--launcher slurm``, at most ``--workers`` array tasks at a time); ``--launcher inline`` runs them in this process.
The pairs, scores and outputs are those of ``hf-tlaser mine`` with the same arguments: the same search, margin,
selection, filters and writers, the database cut into the same shards (those that fit ``--index-memory``), each query
searched in the same block of ``--batch-size`` queries; ``--shards`` cuts the queries into the search stage's tasks.

The vectors come from ``hf-tlaser embed`` (for many jobs: ``--shard i/n``, one job per shard; give all the shard
files). The work folder (``--work``) keeps every stage's files: a task whose record says it is done is skipped
(:meth:`~hf_tlaser.inference.work.Work.verify`: its outputs' sizes and SHA-256, the embeddings' identities), a killed
stage runs again only its unfinished tasks, and ``--stage`` runs some stages only (e.g. ``lines,unique,train,populate``
on one allocation, ``search,margin,mine,filter,dedup,write`` on another). A work folder holds one pipeline: other
inputs or settings are refused.

Before any job: the arguments and outputs are checked as ``hf-tlaser mine`` checks them, the texts' line counts and
SHA-256 are read in chunks (the command holds no text: the ``lines`` and ``unique`` stages find the unique lines, the
``write`` stage's slices the texts of the pairs), the embeddings are checked against them, the index string is tried
(again on the unique lines' count before ``train``), and a stage given without the earlier stages' files is refused,
naming the first missing file, or the first that does not match its record and the stage that rewrites it. No output
is an input (:func:`~hf_tlaser.guards.refuse_outputs_over_inputs`), and a problem of the inputs that a task finds is
the line ``hf-tlaser mine`` gives (exit code 2). The command joins the ``write`` stage's slices into ``--output``
and its lines file, and writes the histogram and the summary, as ``hf-tlaser mine`` does.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import shutil
import signal
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from hf_tlaser.bitext.texts import TextDigest, digest_texts
from hf_tlaser.commands import run_command
from hf_tlaser.encoders.vectors import save_json
from hf_tlaser.errors import UsageError
from hf_tlaser.guards import OutputLock, check_writable, lock_path, refuse_outputs_over_inputs, write_failed
from hf_tlaser.hardware import available_cpus
from hf_tlaser.inference import mine
from hf_tlaser.inference.histogram import plot_histogram
from hf_tlaser.inference.stages import run_tasks
from hf_tlaser.inference.store import check_compatible
from hf_tlaser.inference.work import CONFIG, FORMAT, SIDES, STAGES, Work, read_mined, sigterm_interrupts

if TYPE_CHECKING:
    from submitit import Job

logger = logging.getLogger(__name__)

LAUNCHERS = ("local", "slurm", "inline")
"""submitit's local processes and Slurm job arrays; ``inline``: every task in this process, one after the other (no
scheduler: a small job, or a machine without submitit)."""


class JobFailed(RuntimeError):
    """A job of a stage failed: one line on stderr naming its log (its traceback is there), exit code 1; the stage's
    finished tasks stay, and running the command again runs the others."""


MINING_EXTRA = "pip install 'hf_tlaser[mining]'"
USAGE_ERROR = f"{UsageError.__module__}.{UsageError.__qualname__}: "
"""How a job's traceback ends when its task found a problem in the inputs (:func:`~hf_tlaser.inference.stages.run_tasks`
raises ``UsageError``)."""


def build_parser() -> argparse.ArgumentParser:
    """``hf-tlaser mine``'s arguments and the pipeline's."""
    parser = mine.build_parser()
    mine.add_filter_arguments(parser)  # the last step filters and writes as hf-tlaser mine does
    parser.prog = "hf-tlaser mine-pipeline"
    parser.set_defaults(command=parser.prog)
    parser.description = __doc__.split("\n\n")[0].replace("``", "")
    group = parser.add_argument_group("pipeline")
    group.add_argument("--work", type=Path, required=True, help="work folder of the stages' files (kept)")
    group.add_argument("--stage", default="all", help=f"stages to run, comma-separated: {', '.join(STAGES)} or all")
    group.add_argument(
        "--shards",
        type=int,
        default=4,
        help="query shards of each side, the search stage's tasks (at --batch-size boundaries; default: %(default)s); "
        "the database shards, the populate stage's tasks, are those that fit --index-memory, as in hf-tlaser mine",
    )
    group.add_argument(
        "--launcher", choices=LAUNCHERS, default="local", help="submitit executor, or inline (default: local)"
    )
    group.add_argument("--workers", type=int, default=1, help="jobs running at a time (default: %(default)s)")
    group.add_argument("--timeout-min", type=int, default=240, help="time limit of one job (default: %(default)s)")
    group.add_argument("--slurm-partition", help="--launcher slurm: the partition (default: the cluster's)")
    return parser


def stages_of(value: str) -> list[str]:
    """``--stage`` as the stages to run, in pipeline order; ``UsageError`` naming an unknown one."""
    asked = list(STAGES) if value == "all" else [name.strip() for name in value.split(",") if name.strip()]
    unknown = [name for name in asked if name not in STAGES]
    if unknown or not asked:
        raise UsageError(f"--stage {value}: expected some of {', '.join(STAGES)} (comma-separated) or all")
    return [name for name in STAGES if name in asked]


def check_args(args: argparse.Namespace) -> list[str]:
    """Cheap checks before any file is read; the stages to run."""
    if args.model is not None:
        raise UsageError(
            "--model: the pipeline mines hf-tlaser embed outputs; embed each side first (hf-tlaser embed --shard i/n "
            "runs one job per shard) and give --src-embeddings/--tgt-embeddings"
        )
    mine.check_args(args)
    for flag, value in (("--shards", args.shards), ("--workers", args.workers), ("--timeout-min", args.timeout_min)):
        if value < 1:
            raise UsageError(f"{flag} {value}: must be at least 1")
    if args.launcher == "slurm" and shutil.which("sbatch") is None:
        raise UsageError(
            "--launcher slurm: no sbatch on this machine's PATH; run on a Slurm login node, or give --launcher local"
        )
    if args.launcher != "inline":
        try:
            import submitit  # noqa: F401
        except ImportError:
            raise UsageError(
                f"--launcher {args.launcher}: submitit is not installed; {MINING_EXTRA} (or give --launcher inline)"
            ) from None
    return stages_of(args.stage)


def pipeline_config(args: argparse.Namespace, texts: tuple[TextDigest, TextDigest], threshold: float) -> dict:
    """``pipeline.json``: the inputs (texts' digests, embeddings files and fingerprint) and the settings."""
    meta, sidecars = {}, []
    for side, text, paths in zip(SIDES, texts, (args.src_embeddings, args.tgt_embeddings)):
        array, sidecar = mine.load_side(getattr(args, side), text, paths, side, check_finite=False)
        sidecars.append(sidecar)
        meta[side] = {
            "texts": str(Path(getattr(args, side)).resolve()),
            "sha256": text.sha256,
            "lines": text.lines,
            "embeddings": [str(Path(path).resolve()) for path in paths],
            "fingerprint": sidecar.get("fingerprint"),
            "dim": int(array.shape[1]),
        }
    check_compatible(*sidecars, "--src-embeddings/--tgt-embeddings")
    search = vars(mine.search_plan(args))
    scoring = dict(k=args.neighbours, margin=args.margin, retrieval=args.retrieval, threshold=threshold)
    settings = {"dim": meta["src"]["dim"], "search": search, **scoring, "shards": args.shards}
    return {"format": FORMAT, **meta, **settings}


def check_config(work: Work) -> None:
    """``UsageError`` when the work folder holds the ``pipeline.json`` of another pipeline (naming what differs) or
    an unreadable one."""
    path = work.folder / CONFIG
    if not path.is_file():
        return
    try:
        saved = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise UsageError(
            f"--work {work.folder}: its {CONFIG} is unreadable ({err}); remove the folder to start again, or give "
            "another --work"
        ) from None
    if not isinstance(saved, dict):
        saved = {}
    differ = sorted(key for key in set(saved) | set(work.config) if saved.get(key) != work.config.get(key))
    if differ:
        raise UsageError(
            f"--work {work.folder}: holds the stages of another pipeline (it differs in {', '.join(differ)}); "
            "give another --work, or remove it to start again"
        )


def prepare(work: Work) -> Work:
    """The work folder with its ``pipeline.json`` written (:func:`check_config` has checked one that is there)."""
    path = work.folder / CONFIG
    if not path.is_file():
        work.folder.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(work.config, indent=2) + "\n", encoding="utf-8")
    return work


def job_threads(args: argparse.Namespace) -> int:
    """The faiss threads of each job (and a Slurm task's CPUs): ``--threads``; by default, locally, this machine's
    CPUs shared among the ``--workers`` jobs that run at once (no core runs two jobs' threads), on Slurm 1."""
    if args.threads:
        return args.threads
    if args.launcher == "slurm":
        return 1
    return max(1, available_cpus() // (1 if args.launcher == "inline" else args.workers))


def executor(args: argparse.Namespace, stage: str):
    """The submitit executor of one stage's jobs (their logs in ``WORK/logs/STAGE``)."""
    import submitit

    launcher = submitit.AutoExecutor(folder=args.work / "logs" / stage, cluster=args.launcher)
    launcher.update_parameters(timeout_min=args.timeout_min, cpus_per_task=job_threads(args), name=f"mine-{stage}")
    if args.launcher == "slurm":
        launcher.update_parameters(slurm_array_parallelism=args.workers)
        if args.slurm_partition:
            launcher.update_parameters(slurm_partition=args.slurm_partition)
    return launcher


def error_line(text: str) -> str | None:
    """The last ``SomeError: message`` line of a job's failure (submitit's message embeds the job's traceback)."""
    lines = [line.strip() for line in text.splitlines()]
    return next((line for line in reversed(lines) if re.match(r"^[\w.]+(Error|Exception|Interrupt)\b.*:", line)), None)


@contextmanager
def controllers_stderr(path: Path, local: bool) -> Iterator[None]:
    """While submitit starts local jobs: file descriptor 2 on ``path``. Each local job's controller is a process that
    inherits this process's stderr, and Ctrl-C (which a terminal sends to the whole process group) makes it print a
    ``KeyboardInterrupt`` traceback there: into the stage's logs instead of after the command's one line (its tasks'
    output is in their own logs either way)."""
    if not local:
        yield
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    sys.stderr.flush()
    terminal = os.dup(2)
    with path.open("ab") as log:
        os.dup2(log.fileno(), 2)
    try:
        yield
    finally:
        os.dup2(terminal, 2)
        os.close(terminal)


def cancel(job: Job, launcher: str) -> None:
    """Stop an unfinished job. A local job's controller gets SIGTERM and forwards it to its task, whose ``run_tasks``
    stops on it (``job.cancel`` would send SIGINT, which a command started in the background of a script inherits as
    ignored); a Slurm job is cancelled with ``scancel``. A local job's id is its controller's process id, a child of
    this process that no one has reaped since ``job.done()`` found it running."""
    if launcher == "local":
        os.kill(int(job.job_id), signal.SIGTERM)
    else:
        job.cancel(check=False)


def check_inputs(work: Work, stage: str, earlier: Sequence[str]) -> None:
    """Before ``stage`` runs, the tasks of the ``earlier`` stages, which this command does not run, must be done
    (:meth:`~hf_tlaser.inference.work.Work.verify`). ``UsageError`` naming the first file ``stage`` needs that is not
    there (or, when all are, the first of the earlier stages' files), or the first file that does not match its
    task's record and which stage rewrites it."""
    missing = []
    for before in earlier:
        used = work.used(before)
        for task in work.tasks(before):
            problem = work.verify(before, task, used)
            if problem is None:
                continue
            absent = [path for path in work.outputs(before, task) if not path.exists()]
            if not absent:
                raise UsageError(
                    f"--stage {stage}: needs the files of the stage {before}, and {problem}; run --stage {before} "
                    "again (it runs that task again), or --stage all"
                )
            missing.extend(absent)
        if missing and before == "unique":  # the later stages' tasks follow from its files
            break
    if missing:
        needed = [path for path in work.inputs(stage) if not path.exists()] or missing
        raise UsageError(
            f"--stage {stage}: needs {needed[0]} ({len(needed)} files of the stages before are missing); run the "
            "earlier stages first (--stage all runs every stage)"
        )


def run_stage(args: argparse.Namespace, work: Work, stage: str) -> int:
    """Run the unfinished tasks of ``stage`` as jobs and wait for them; how many ran. Locally the tasks are dealt
    to ``--workers`` jobs (processes); on Slurm each task is one array task, ``--workers`` at a time."""
    used = work.used(stage)
    pending = [task for task in work.tasks(stage) if work.verify(stage, task, used) is not None]
    if not pending:
        logger.info("stage %s: its %d tasks are done", stage, len(work.tasks(stage)))
        return 0
    if args.launcher == "inline":
        try:
            run_tasks(str(work.folder), stage, pending, job_threads(args))
        except RuntimeError as err:  # each failed task's traceback is in the log above
            raise JobFailed(f"stage {stage}: {err} (its traceback is logged above)") from err
        return len(pending)
    groups = [pending[i :: args.workers] for i in range(min(args.workers, len(pending)))]
    if args.launcher == "slurm":
        groups = [[task] for task in pending]
    size = len(groups)
    with controllers_stderr(args.work / "logs" / stage / "controllers.err", args.launcher == "local"):
        jobs = executor(args, stage).map_array(
            run_tasks, [str(work.folder)] * size, [stage] * size, groups, [job_threads(args)] * size
        )
    failed = []
    with sigterm_interrupts():  # a kill (SIGTERM) as Ctrl-C: the jobs are cancelled
        where = f"Slurm job array {jobs[0].job_id.split('_')[0]}" if args.launcher == "slurm" else "local processes"
        try:  # a kill while the line is logged cancels the jobs too
            logger.info(
                "stage %s: %d tasks as %d jobs (%s, %d at a time)", stage, len(pending), len(jobs), where, args.workers
            )
            for job in jobs:  # every job waited for: the others' tasks finish when one fails
                try:
                    job.result()
                except Exception as err:  # noqa: BLE001 - a job's failure is reported with its log, whatever it was
                    failed.append((job, err))
        except KeyboardInterrupt:
            unfinished = [job for job in jobs if not job.done()]
            for job in unfinished:
                cancel(job, args.launcher)
            logger.warning("stage %s: interrupted; %d unfinished jobs cancelled", stage, len(unfinished))
            raise
    usage = [line for _, err in failed if (line := error_line(str(err)) or "").startswith(USAGE_ERROR)]
    if usage:  # an input problem (run_tasks raised it): the line hf-tlaser mine gives
        raise UsageError(usage[0].removeprefix(USAGE_ERROR))
    if failed:
        (job, err), count = failed[0], f"{len(failed)} of {len(jobs)} jobs failed"
        last = error_line(str(err)) or type(err).__name__
        message = f"stage {stage}: {count}; job {job.job_id} ({last[:300]}); its log: {job.paths.stderr}"
        raise JobFailed(message) from err
    return len(pending)


def check_unique(args: argparse.Namespace, work: Work) -> None:
    """After the ``unique`` stage: ``UsageError`` when a side has no line to mine, or when the index string does not
    fit the unique lines' count (before any index is trained)."""
    for side in SIDES:
        if work.unique(side) == 0:
            raise UsageError(
                f"--{side} {getattr(args, side)}: every line is blank; give a text file with one sentence per line"
            )
    mine.check_indexes(work.plan, (work.unique("src"), work.unique("tgt")), work.config["dim"])


def join(parts: list[Path], path: Path) -> None:
    """The files ``parts`` one after the other into ``path``, atomically (a chunk at a time)."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")  # this process's: never a file of the user's
    try:
        with temporary.open("wb") as out:
            for part in parts:
                with part.open("rb") as handle:
                    shutil.copyfileobj(handle, out)
        temporary.replace(path)
    finally:
        temporary.unlink(missing_ok=True)


def write_outputs(args: argparse.Namespace, work: Work, texts: tuple[TextDigest, TextDigest], filters: tuple) -> dict:
    """``--output`` and its lines file joined from the ``write`` stage's slices, the histogram and the summary, as
    ``hf-tlaser mine`` writes them; the summary."""
    mined, tasks = read_mined(work), work.tasks("write")
    counts = [json.loads(work.output("write", task).read_text(encoding="utf-8")) for task in tasks]
    unique = work.unique("src"), work.unique("tgt")
    summary = mine.run_summary(args, texts, unique, mined, work.removed(), filters[1])
    try:
        join([work.write_path(*task) for task in tasks], args.output)
        join([work.write_path(*task, ".lines.tsv") for task in tasks], mine.side_outputs(args.output)[0])
        plot_histogram(mined, args.histogram, args.margin, args.neighbours, filters[1][0])
        summary["texts_written_with_spaces"] = sum(count["texts_written_with_spaces"] for count in counts)
        save_json(mine.side_outputs(args.output)[1], summary)
    except OSError as err:
        raise write_failed(err, args.output, "--output") from None
    return summary


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``hf-tlaser mine-pipeline``: 0 on success, 2 with one line on stderr for a usage mistake, 1
    with one line naming its log when a job fails, 130 when interrupted (Ctrl-C or SIGTERM while jobs run: they are
    cancelled)."""
    args = build_parser().parse_args(argv)
    args.histogram = args.histogram or args.output.with_suffix(".png")

    def work() -> int:
        stages = check_args(args)
        outputs = {"--work": args.work, "--work (lock)": lock_path(args.work)}
        refuse_outputs_over_inputs(
            {**outputs, **(mine.output_paths(args) if "write" in stages else {})}, mine.input_paths(args)
        )
        if "write" in stages:
            others = tuple(zip(("--output (lines)", "--output (summary)"), mine.side_outputs(args.output)))
            mine.check_outputs(args.output, args.histogram, args.overwrite, others)
        filters = mine.filters_from_args(args)
        if args.work.exists() and not args.work.is_dir():
            raise UsageError(f"--work {args.work}: is a file; give a folder (it is created)")
        check_writable(lock_path(args.work), "--work")
        mine.require_faiss()
        with OutputLock(args.work, "--work"):
            texts = digest_texts(args.src, "--src"), digest_texts(args.tgt, "--tgt")
            config = pipeline_config(args, texts, filters[1][0])
            mine.check_indexes(mine.search_plan(args), (texts[0].lines, texts[1].lines), config["dim"])
            settings = filters[0].settings() if filters[0].active() else None
            folder = Work(args.work, config, filters=settings)
            check_config(folder)
            start = STAGES.index(stages[0])
            check_inputs(folder, stages[0], STAGES[:start])  # the later stages' come from the earlier ones
            prepare(folder).write_filters()
            try:
                checked = False
                for stage in stages:
                    check_inputs(folder, stage, STAGES[start : STAGES.index(stage)])  # those --stage leaves out
                    start = STAGES.index(stage) + 1
                    if not checked and STAGES.index(stage) > STAGES.index("unique"):
                        check_unique(args, folder)  # once, before the first stage that reads the unique lines
                        checked = True
                    ran = run_stage(args, folder, stage)
                    before = len(folder.tasks(stage)) - ran
                    print(f"hf-tlaser mine-pipeline: stage {stage}: {ran} tasks run, {before} done before")
            except JobFailed as err:
                print(f"hf-tlaser mine-pipeline: error: {err}", file=sys.stderr)
                return 1
            except KeyboardInterrupt:
                print(
                    f"hf-tlaser mine-pipeline: interrupted (its running jobs cancelled); the finished tasks are kept "
                    f"in {args.work}: the same command resumes",
                    file=sys.stderr,
                )
                return 130
            if "write" not in stages:
                return 0
            summary = write_outputs(args, folder, texts, filters)
        mine.report(args.command, args, summary)
        return 0

    return run_command("hf-tlaser mine-pipeline", work)


if __name__ == "__main__":
    sys.exit(main())

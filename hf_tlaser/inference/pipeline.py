"""``hf-tlaser mine-pipeline``: ``hf-tlaser mine`` as stages on disk (:mod:`hf_tlaser.inference.stages`: train the
indexes, populate their shards, search each query shard, score its margins, merge and mine), each stage's tasks run
as jobs by submitit: local processes (``--launcher local``, at most ``--workers`` at a time) or a Slurm job array
(``--launcher slurm``, at most ``--workers`` array tasks at a time); ``--launcher inline`` runs them in this process.
The pairs, scores and outputs are those of ``hf-tlaser mine`` with the same arguments: the same search, margin,
selection, filters and writers, the database cut into the same shards (those that fit ``--index-memory``), each query
searched in the same block of ``--batch-size`` queries; ``--shards`` cuts the queries into the search stage's tasks.

The vectors come from ``hf-tlaser embed`` (for many jobs: ``--shard i/n``, one job per shard; give all the shard
files). The work folder (``--work``) keeps every stage's files: a stage whose files exist is skipped, a killed stage
runs again only its unfinished tasks, and ``--stage`` runs some stages only (e.g. ``train,populate`` on one
allocation, ``search,margin,mine`` on another). A work folder holds one pipeline: other inputs or settings are refused.

Before any job: the arguments and outputs are checked as ``hf-tlaser mine`` checks them, the texts are read once
(their unique lines are saved in the work folder), the embeddings are checked against them, the index string is
tried, and a stage given without the earlier stages' files is refused, naming the first missing file.
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import shutil
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

from hf_tlaser.bitext.filters import PER_PAIR
from hf_tlaser.bitext.index import make_index, shard_rows
from hf_tlaser.bitext.select import unique_rows
from hf_tlaser.bitext.texts import read_texts
from hf_tlaser.commands import run_command
from hf_tlaser.errors import UsageError
from hf_tlaser.guards import OutputLock, check_writable, lock_path
from hf_tlaser.hardware import available_cpus
from hf_tlaser.inference import mine
from hf_tlaser.inference.stages import CONFIG, FORMAT, SIDES, STAGES, Work, read_mined, run_tasks
from hf_tlaser.inference.store import check_compatible

logger = logging.getLogger(__name__)

LAUNCHERS = ("local", "slurm", "inline")
"""submitit's local processes and Slurm job arrays; ``inline``: every task in this process, one after the other (no
scheduler: a small job, or a machine without submitit)."""


class JobFailed(RuntimeError):
    """A job of a stage failed: one line on stderr naming its log (its traceback is there), exit code 1; the stage's
    finished tasks stay, and running the command again runs the others."""


MINING_EXTRA = "pip install 'hf_tlaser[mining]'"


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


def pipeline_config(args: argparse.Namespace, texts: tuple, rows: tuple, threshold: float) -> dict:
    """``pipeline.json``: the inputs (texts' digests, embeddings files and fingerprint) and the settings."""
    meta = {}
    for side, text, unique, paths in zip(SIDES, texts, rows, (args.src_embeddings, args.tgt_embeddings)):
        array, meta[side] = mine.load_side(getattr(args, side), text, paths, side)
        meta[side] = {
            "texts": str(Path(getattr(args, side)).resolve()),
            "sha256": text.sha256,
            "lines": len(text.lines),
            "unique": len(unique),
            "embeddings": [str(Path(path).resolve()) for path in paths],
            "fingerprint": meta[side].get("fingerprint"),
            "dim": int(array.shape[1]),
        }
        spec = mine.search_plan(args).spec(len(unique), int(array.shape[1]))
        meta[side]["rows_per_shard"] = shard_rows(make_index(spec, int(array.shape[1])), args.index_memory * 1e9)
    check_compatible(meta["src"], meta["tgt"], "--src-embeddings/--tgt-embeddings")
    search = vars(mine.search_plan(args))
    scoring = dict(k=args.neighbours, margin=args.margin, retrieval=args.retrieval, threshold=threshold)
    settings = {"dim": meta["src"]["dim"], "search": search, **scoring, "shards": args.shards}
    return {"format": FORMAT, **meta, **settings}


def prepare(args: argparse.Namespace, config: dict, rows: tuple) -> Work:
    """The work folder: its ``pipeline.json`` (``config``) and unique rows written, or, when it holds them, checked
    to be this pipeline's (``UsageError`` naming what differs)."""
    folder, path = args.work, args.work / CONFIG
    if path.is_file():
        saved = json.loads(path.read_text(encoding="utf-8"))
        differ = sorted(key for key in set(saved) | set(config) if saved.get(key) != config.get(key))
        if differ:
            raise UsageError(
                f"--work {folder}: holds the stages of another pipeline (it differs in {', '.join(differ)}); give "
                "another --work, or remove it to start again"
            )
        return Work(folder, config)
    folder.mkdir(parents=True, exist_ok=True)
    for side, unique in zip(SIDES, rows):
        np.save(folder / f"rows.{side}.npy", unique)
    path.write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    return Work(folder, config)


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


def check_inputs(work: Work, stage: str) -> None:
    """``UsageError`` naming the first file of an earlier stage that ``stage`` needs and that is not there."""
    missing = [path for path in work.inputs(stage) if not path.exists()]
    if missing:
        raise UsageError(
            f"--stage {stage}: needs {missing[0]} ({len(missing)} files of the stage before are missing); run the "
            "earlier stages first (--stage all runs every stage)"
        )


def run_stage(args: argparse.Namespace, work: Work, stage: str) -> int:
    """Run the unfinished tasks of ``stage`` as jobs and wait for them; how many ran. Locally the tasks are dealt
    to ``--workers`` jobs (processes); on Slurm each task is one array task, ``--workers`` at a time."""
    pending = [task for task in work.tasks(stage) if not work.output(stage, task).exists()]
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
    jobs = executor(args, stage).map_array(
        run_tasks, [str(work.folder)] * len(groups), [stage] * len(groups), groups, [job_threads(args)] * len(groups)
    )
    where = f"Slurm job array {jobs[0].job_id.split('_')[0]}" if args.launcher == "slurm" else "local processes"
    logger.info("stage %s: %d tasks as %d jobs (%s, %d at a time)", stage, len(pending), len(jobs), where, args.workers)
    for job in jobs:
        try:
            job.result()
        except Exception as err:  # noqa: BLE001 - a job's failure is reported with its log, whatever it was
            last = error_line(str(err)) or type(err).__name__
            raise JobFailed(
                f"stage {stage}: job {job.job_id} failed ({last[:300]}); its log: {job.paths.stderr}"
            ) from err
    return len(pending)


def write_outputs(args: argparse.Namespace, work: Work, texts: tuple, filters: tuple) -> dict:
    """The ``mine`` stage's pairs, with the ``filter`` stage's judgement, deduplicated and written as ``hf-tlaser
    mine`` writes them (its ``write_outputs``); the summary."""
    sides = work.rows("src"), work.rows("tgt")
    return mine.write_outputs(args, texts, sides, read_mined(work), filters, judged=work.judged())


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``hf-tlaser mine-pipeline``: 0 on success, 2 with one line on stderr for a usage mistake, 1
    with one line naming its log when a job fails."""
    args = build_parser().parse_args(argv)
    args.histogram = args.histogram or args.output.with_suffix(".png")

    def work() -> int:
        stages = check_args(args)
        if "filter" in stages:
            others = tuple(zip(("--output (lines)", "--output (summary)"), mine.side_outputs(args.output)))
            mine.check_outputs(args.output, args.histogram, args.overwrite, others)
        filters = mine.filters_from_args(args)
        if args.work.exists() and not args.work.is_dir():
            raise UsageError(f"--work {args.work}: is a file; give a folder (it is created)")
        check_writable(lock_path(args.work), "--work")
        mine.require_faiss()
        with OutputLock(args.work, "--work"):
            texts = read_texts(args.src, "--src"), read_texts(args.tgt, "--tgt")
            rows = unique_rows(texts[0].lines), unique_rows(texts[1].lines)
            config = pipeline_config(args, texts, rows, filters[1][0])
            mine.check_indexes(mine.search_plan(args), (len(rows[0]), len(rows[1])), config["dim"])
            check_inputs(Work(args.work, config), stages[0])  # the later stages' come from the earlier ones
            folder = prepare(args, config, rows)
            if filters[0].active(PER_PAIR):
                folder = replace(folder, filters=replace(filters[0], dedup=False).settings())
                folder.write_filters()
            try:
                for stage in stages:
                    ran = run_stage(args, folder, stage)
                    before = len(folder.tasks(stage)) - ran
                    print(f"hf-tlaser mine-pipeline: stage {stage}: {ran} tasks run, {before} done before")
            except JobFailed as err:
                print(f"hf-tlaser mine-pipeline: error: {err}", file=sys.stderr)
                return 1
            if "filter" not in stages:
                return 0
            summary = write_outputs(args, folder, texts, filters)
        mine.report(args.command, args, summary)
        return 0

    return run_command("hf-tlaser mine-pipeline", work)


if __name__ == "__main__":
    sys.exit(main())

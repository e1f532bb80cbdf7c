"""Mining as stages on disk, in the manner of stopes' global mining: each stage is tasks that read files and write
files, so that a scheduler can run any of them as many jobs (``hf_tlaser.inference.pipeline`` launches them). A task
whose output exists does nothing; every output is written to a temporary name and renamed, so a killed task leaves
none, and running the stage again runs only its unfinished tasks.

The stages, over the unique lines of both sides (identical lines mined once, as ``hf-tlaser mine``):

* ``train``: for each side, the empty index of its database (``--index``; ``Flat`` up to 50,000 rows) trained on a
  random sample of its vectors;
* ``populate``: for each shard of each side, the trained index with the shard's vectors added;
* ``search``: for each query shard in each direction (``fwd``: source lines against the target side, ``bwd``: the
  reverse), the k nearest neighbours in every shard of the other side, merged, candidates of an approximate index
  re-scored exactly;
* ``mine``: the lists of all query shards together: LASER's margin, the retrieval mode, each sentence used once
  (:func:`hf_tlaser.bitext.mining.select_mined`, the code of the one-process ``hf-tlaser mine``).

The work folder::

    pipeline.json                    what is mined: the inputs (texts' SHA-256, embeddings files and fingerprint),
                                     the search and scoring settings, the shards
    rows.{side}.npy                  the unique lines mined (positions in the text's lines)
    index/{side}.trained.faiss       the trained empty index of a side's database
    index/{side}.{shard}.faiss       its rows of one shard added
    knn/{direction}.{shard}.npz      one query shard's k nearest neighbours (``sims``, ``ids``: positions in the
                                     other side's unique lines)
    mined.npz                        the pairs, best first (``scores``, ``src``, ``tgt``, ``kept``)
    stats/{stage}.{task}.json        each finished task's seconds, peak RSS and host
"""

from __future__ import annotations

import json
import logging
import os
import resource
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from hf_tlaser.bitext.index import (
    Rows,
    SearchPlan,
    candidates,
    database_shards,
    require_faiss,
    rescore,
    search_shards,
    trained_index,
    use_gpu,
)
from hf_tlaser.bitext.mining import Mined, select_mined
from hf_tlaser.inference.store import read_embeddings

logger = logging.getLogger(__name__)

SIDES = ("src", "tgt")
DIRECTIONS = {"fwd": ("src", "tgt"), "bwd": ("tgt", "src")}
"""Direction -> (the side whose lines are the queries, the side searched)."""
STAGES = ("train", "populate", "search", "mine")
CONFIG = "pipeline.json"


def write_atomic(path: Path, write: Callable[[Path], None]) -> None:
    """``write(temporary path)``, then the temporary file renamed to ``path`` (a killed task leaves no ``path``)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f"{path.name}.tmp{path.suffix}")
    write(temporary)
    os.replace(temporary, path)


def shard_bounds(rows: int, shards: int, block: int = 1) -> list[tuple[int, int]]:
    """``[start, stop)`` of at most ``shards`` consecutive shards of ``rows`` rows that start at multiples of
    ``block``, their numbers of blocks differing by at most one (empty shards left out)."""
    blocks = -(-rows // block)
    edges = np.linspace(0, blocks, min(shards, blocks) + 1).round().astype(int) * block
    return [(int(a), min(int(b), rows)) for a, b in zip(edges[:-1], edges[1:])]


@dataclass(frozen=True)
class Work:
    """A pipeline's work folder and its ``pipeline.json`` (``config``)."""

    folder: Path
    config: dict

    @classmethod
    def open(cls, folder: Path) -> Work:
        return cls(folder, json.loads((folder / CONFIG).read_text(encoding="utf-8")))

    @property
    def plan(self) -> SearchPlan:
        return SearchPlan(**self.config["search"])

    def rows(self, side: str) -> Rows:
        """The unique lines of ``side`` as memory-mapped vectors."""
        array, _ = read_embeddings(self.config[side]["embeddings"], f"--{side}-embeddings")
        return Rows(array, np.load(self.folder / f"rows.{side}.npy"))

    def bounds(self, side: str) -> list[tuple[int, int]]:
        """The query shards of ``side`` (``--shards``), each starting at a multiple of ``--batch-size``: every query
        is searched in the block it has in ``hf-tlaser mine`` (a fast-scan index quantises its lookup tables per
        block of queries, so a block's make-up can move a candidate)."""
        return shard_bounds(self.config[side]["unique"], self.config["shards"], self.plan.batch_size)

    def database(self, side: str) -> list[tuple[int, int]]:
        """The database shards of ``side``: those of ``hf-tlaser mine``'s search (``--index-memory``)."""
        return database_shards(self.config[side]["unique"], self.config[side]["rows_per_shard"])

    def spec(self, side: str) -> str:
        """The index of ``side``'s database."""
        return self.plan.spec(self.config[side]["unique"], self.config["dim"])

    def trained_path(self, side: str) -> Path:
        return self.folder / "index" / f"{side}.trained.faiss"

    def shard_path(self, side: str, shard: int) -> Path:
        return self.folder / "index" / f"{side}.{shard:04d}.faiss"

    def knn_path(self, direction: str, shard: int) -> Path:
        return self.folder / "knn" / f"{direction}.{shard:04d}.npz"

    @property
    def mined_path(self) -> Path:
        return self.folder / "mined.npz"

    def tasks(self, stage: str) -> list[tuple]:
        """The tasks of ``stage``: its arguments after the work folder."""
        if stage == "train":
            return [(side,) for side in SIDES]
        if stage == "populate":
            return [(side, shard) for side in SIDES for shard in range(len(self.database(side)))]
        if stage == "search":
            return [(d, shard) for d, (queries, _) in DIRECTIONS.items() for shard in range(len(self.bounds(queries)))]
        return [()]

    def output(self, stage: str, task: tuple) -> Path:
        """The file a task of ``stage`` writes (it exists: the task is done)."""
        if stage == "train":
            return self.trained_path(*task)
        if stage == "populate":
            return self.shard_path(*task)
        if stage == "search":
            return self.knn_path(*task)
        return self.mined_path

    def inputs(self, stage: str) -> list[Path]:
        """The files ``stage`` reads that earlier stages write."""
        earlier = STAGES[: STAGES.index(stage)][-1:]
        return [self.output(before, task) for before in earlier for task in self.tasks(before)]


def train(work: Work, side: str) -> None:
    """``train``: the trained empty index of ``side``'s database."""
    faiss = require_faiss()
    index = trained_index(work.rows(side), work.plan, work.spec(side))
    write_atomic(work.trained_path(side), lambda path: faiss.write_index(index, str(path)))


def populate(work: Work, side: str, shard: int) -> None:
    """``populate``: the trained index of ``side`` with the rows of one shard added."""
    faiss = require_faiss()
    database, (start, stop) = work.rows(side), work.database(side)[shard]
    index = faiss.read_index(str(work.trained_path(side)))
    for _, block in database.blocks(work.plan.batch_size, start, stop):
        index.add(block)
    write_atomic(work.shard_path(side, shard), lambda path: faiss.write_index(index, str(path)))


def shard_indexes(work: Work, side: str) -> Iterator[tuple[int, int, object]]:
    """``(start, stop, index)`` of every shard of ``side``, read one at a time (on the GPUs when the plan says so)."""
    faiss, plan = require_faiss(), work.plan
    gpu = use_gpu(plan.device)
    for shard, (start, stop) in enumerate(work.database(side)):
        index = faiss.read_index(str(work.shard_path(side, shard)))
        ivf = faiss.try_extract_index_ivf(index)
        if ivf is not None:
            ivf.nprobe = plan.nprobe
        if gpu:
            index = faiss.index_cpu_to_all_gpus(index)
        yield start, stop, index
        del index


def search(work: Work, direction: str, shard: int) -> None:
    """``search``: one query shard's k nearest neighbours in the other side's database (every shard of it)."""
    queries_side, database_side = DIRECTIONS[direction]
    plan, spec = work.plan, work.spec(database_side)
    start, stop = work.bounds(queries_side)[shard]
    every = work.rows(queries_side)
    queries, database = Rows(every.array, every.rows[start:stop]), work.rows(database_side)
    k, wanted = candidates(work.config["k"], len(database), spec, plan)
    sims, ids = search_shards(queries, shard_indexes(work, database_side), wanted, plan, spec)
    sims, ids = rescore(queries, database, sims, ids, k, plan, spec)
    write_atomic(work.knn_path(direction, shard), lambda path: np.savez(path, sims=sims, ids=ids))


def mine(work: Work) -> None:
    """``mine``: the pairs of the lists of every query shard in both directions (``select_mined``)."""
    lists = []
    for direction, (queries, _) in DIRECTIONS.items():
        parts = [np.load(work.knn_path(direction, shard)) for shard in range(len(work.bounds(queries)))]
        lists += [np.concatenate([part["sims"] for part in parts]), np.concatenate([part["ids"] for part in parts])]
    config = work.config
    mined = select_mined(
        tuple(lists), margin=config["margin"], retrieval=config["retrieval"], threshold=config["threshold"]
    )
    write_atomic(
        work.mined_path,
        lambda path: np.savez(path, scores=mined.scores, src=mined.src, tgt=mined.tgt, kept=mined.kept),
    )


def read_mined(work: Work) -> Mined:
    """The ``mine`` stage's pairs."""
    with np.load(work.mined_path) as saved:
        return Mined(saved["scores"], saved["src"], saved["tgt"], int(saved["kept"]))


TASKS: dict[str, Callable[..., None]] = {"train": train, "populate": populate, "search": search, "mine": mine}


def record_task(work: Work, stage: str, task: tuple, seconds: float) -> None:
    """``stats/STAGE.TASK.json``: a finished task's wall time, its process's peak RSS so far (a job runs its tasks one
    after the other) and the host (what the per-stage table and a cluster estimate read)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    name = ".".join([stage, *map(str, task)])
    record = {"stage": stage, "task": list(task), "seconds": round(seconds, 3), "peak_rss_mib": round(peak, 1)}
    record["host"] = socket.gethostname()
    write_atomic(work.folder / "stats" / f"{name}.json", lambda path: path.write_text(json.dumps(record) + "\n"))
    logger.info("%s %s done in %.1f s (peak RSS %.0f MiB)", stage, task, seconds, peak)


def run_tasks(folder: str, stage: str, tasks: list[tuple], threads: int) -> int:
    """Run ``tasks`` of ``stage`` one after the other in this process with ``threads`` faiss threads (what one job of
    the launcher does), skipping those whose output exists; returns how many ran. A failing task is logged and the
    others still run; then ``RuntimeError`` names the failed tasks and the first error."""
    if threads:
        require_faiss().omp_set_num_threads(threads)
    work, ran, failed = Work.open(Path(folder)), 0, []
    for task in tasks:
        if work.output(stage, task).exists():
            continue
        started = time.perf_counter()
        try:
            TASKS[stage](work, *task)
        except Exception as err:  # noqa: BLE001 - any failure of one task: the job goes on with the others
            logger.exception("%s %s failed", stage, task)
            failed.append((task, err))
            continue
        record_task(work, stage, task, time.perf_counter() - started)
        ran += 1
    if failed:
        task, err = failed[0]
        raise RuntimeError(f"{len(failed)} of {len(tasks)} {stage} tasks failed; the first, {task}: {err}")
    return ran

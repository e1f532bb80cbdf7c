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
  re-scored exactly, and each query's mean neighbour cosine;
* ``margin``: for each query shard in each direction, LASER's margin of its candidates (its own means and the other
  direction's, :func:`hf_tlaser.bitext.margin.scored_candidates`), each query's best, sorted by decreasing score;
* ``mine``: the sorted runs of every query shard merged, as the retrieval mode takes them, each sentence used once
  (:func:`hf_tlaser.bitext.select.merged_one_to_one`: what ``select_pairs`` does in the one-process ``hf-tlaser mine``,
  on the runs as memory maps, holding a byte per sentence and the pairs it keeps instead of every list);
* ``filter``: for each of ``--shards`` slices of the pairs above the threshold, the filters that judge a pair alone
  (:data:`hf_tlaser.bitext.filters.PER_PAIR`: score cap, lengths, language identification), each slice's texts read
  in one pass. Its files are kept per filter setting (``filter/{key}``), so that other filters reuse the search; the
  command then removes near-duplicates (which compares all pairs) and writes the outputs. No tasks when none of
  those filters is on.

The work folder::

    pipeline.json                    what is mined: the inputs (texts' SHA-256, embeddings files and fingerprint),
                                     the search and scoring settings, the shards
    rows.{side}.npy                  the unique lines mined (positions in the text's lines)
    index/{side}.trained.faiss       the trained empty index of a side's database
    index/{side}.{shard}.faiss       its rows of one shard added
    knn/{direction}.{shard}.npz      one query shard's k nearest neighbours (``sims``, ``ids``: positions in the
                                     other side's unique lines) and their mean cosines (``means``)
    margin/{direction}.{shard}.npy   its queries' best candidates as pairs (score, src, tgt), best first
    mined.npz                        the pairs, best first (``scores``, ``src``, ``tgt``, ``kept``)
    filter/{key}/settings.json       the filters of one setting (``key``: a digest of it)
    filter/{key}/{slice}.npz         which pairs of one slice they keep, and how many each removed
    stats/{stage}.{task}.json        each finished task's seconds, peak RSS and host
"""

from __future__ import annotations

import hashlib
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

from hf_tlaser.bitext.filters import PER_PAIR, Filters, apply_filters
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
from hf_tlaser.bitext.margin import neighbour_means, scored_candidates
from hf_tlaser.bitext.mining import Mined
from hf_tlaser.bitext.select import PAIR_DTYPE, RUNS, best_first, direction_pairs, merged_one_to_one, mutual
from hf_tlaser.bitext.texts import lines_at
from hf_tlaser.inference.store import read_embeddings

logger = logging.getLogger(__name__)

SIDES = ("src", "tgt")
DIRECTIONS = {"fwd": ("src", "tgt"), "bwd": ("tgt", "src")}
"""Direction -> (the side whose lines are the queries, the side searched)."""
STAGES = ("train", "populate", "search", "margin", "mine", "filter")
CONFIG = "pipeline.json"
FORMAT = 2
"""``pipeline.json``'s ``format``: 2 since the ``margin`` stage (a work folder of format 1 is refused as another
pipeline's)."""


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
    """A pipeline's work folder and its ``pipeline.json`` (``config``); ``filters``: the settings of the filters
    the ``filter`` stage runs (:meth:`hf_tlaser.bitext.filters.Filters.settings`), ``None`` when it has none to run."""

    folder: Path
    config: dict
    filters: dict | None = None

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

    def margin_path(self, direction: str, shard: int) -> Path:
        return self.folder / "margin" / f"{direction}.{shard:04d}.npy"

    def shards(self, direction: str) -> range:
        """The query shards of ``direction``."""
        return range(len(self.bounds(DIRECTIONS[direction][0])))

    @property
    def mined_path(self) -> Path:
        return self.folder / "mined.npz"

    @property
    def filter_key(self) -> str:
        """The digest that names the folder of this setting of the filters."""
        text = json.dumps(self.filters, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def filter_path(self, key: str, part: int) -> Path:
        return self.folder / "filter" / key / f"{part:04d}.npz"

    def lines(self, side: str) -> np.ndarray:
        """The line numbers of ``side``'s unique lines (its rows)."""
        return np.load(self.folder / f"rows.{side}.npy")

    def tasks(self, stage: str) -> list[tuple]:
        """The tasks of ``stage``: its arguments after the work folder."""
        if stage == "train":
            return [(side,) for side in SIDES]
        if stage == "populate":
            return [(side, shard) for side in SIDES for shard in range(len(self.database(side)))]
        if stage in ("search", "margin"):
            return [(direction, shard) for direction in DIRECTIONS for shard in self.shards(direction)]
        if stage == "filter":
            return [] if self.filters is None else [(self.filter_key, part) for part in range(self.config["shards"])]
        return [()]

    def output(self, stage: str, task: tuple) -> Path:
        """The file a task of ``stage`` writes (it exists: the task is done)."""
        if stage == "train":
            return self.trained_path(*task)
        if stage == "populate":
            return self.shard_path(*task)
        if stage == "search":
            return self.knn_path(*task)
        if stage == "margin":
            return self.margin_path(*task)
        if stage == "filter":
            return self.filter_path(*task)
        return self.mined_path

    def inputs(self, stage: str) -> list[Path]:
        """The files ``stage`` reads that earlier stages write."""
        earlier = STAGES[: STAGES.index(stage)][-1:]
        return [self.output(before, task) for before in earlier for task in self.tasks(before)]

    def write_filters(self) -> None:
        """``filter/{key}/settings.json``: what the ``filter`` stage's tasks read."""
        path = self.folder / "filter" / self.filter_key / "settings.json"
        write_atomic(path, lambda temporary: temporary.write_text(json.dumps(self.filters, indent=2) + "\n"))

    def judged(self) -> tuple[np.ndarray, dict[str, int | None]] | None:
        """The ``filter`` stage's result: which pairs above the threshold its filters keep, and how many each
        removed (summed over the slices); ``None`` when it had no filters to run."""
        if self.filters is None:
            return None
        keep, removed = [], {}
        for task in self.tasks("filter"):
            with np.load(self.filter_path(*task)) as part:
                keep.append(part["keep"])
                for name, count in json.loads(str(part["removed"])).items():
                    removed[name] = None if count is None else (removed.get(name) or 0) + count
        return np.concatenate(keep), removed


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
    """``search``: one query shard's k nearest neighbours in the other side's database (every shard of it), and
    their mean cosines."""
    queries_side, database_side = DIRECTIONS[direction]
    plan, spec = work.plan, work.spec(database_side)
    start, stop = work.bounds(queries_side)[shard]
    every = work.rows(queries_side)
    queries, database = Rows(every.array, every.rows[start:stop]), work.rows(database_side)
    k, wanted = candidates(work.config["k"], len(database), spec, plan)
    sims, ids = search_shards(queries, shard_indexes(work, database_side), wanted, plan, spec)
    sims, ids = rescore(queries, database, sims, ids, k, plan, spec)
    means = neighbour_means(sims, ids)
    write_atomic(work.knn_path(direction, shard), lambda path: np.savez(path, sims=sims, ids=ids, means=means))


def margin(work: Work, direction: str, shard: int) -> None:
    """``margin``: one query shard's candidates scored with LASER's margin against the other direction's means, each
    query's best as a pair, best first (a run of ``PAIR_DTYPE`` records)."""
    reverse = next(other for other in DIRECTIONS if other != direction)
    other = np.concatenate([np.load(work.knn_path(reverse, part))["means"] for part in work.shards(reverse)])
    with np.load(work.knn_path(direction, shard)) as lists:
        scored = scored_candidates(lists["sims"], lists["ids"], lists["means"], other, work.config["margin"])
    start, _ = work.bounds(DIRECTIONS[direction][0])[shard]
    run = pack(best_first(direction_pairs(*scored.best(), direction, offset=start)))
    write_atomic(work.margin_path(direction, shard), lambda path: np.save(path, run))


def mine(work: Work) -> None:
    """``mine``: the runs of every query shard of the directions the retrieval mode takes, merged by decreasing
    score, each sentence used once (``merged_one_to_one``); ``intersect`` keeps the forward pairs whose target's
    best source is their source."""
    config = work.config
    retrieval = config["retrieval"]
    runs = [np.load(work.margin_path(d, shard), mmap_mode="r") for d in RUNS[retrieval] for shard in work.shards(d)]
    if retrieval == "intersect":
        bwd_best = np.full(config["tgt"]["unique"], -1, dtype=np.int64)
        for shard in work.shards("bwd"):
            run = np.load(work.margin_path("bwd", shard))
            bwd_best[run["tgt"]] = run["src"]
        runs = [pack(best_first(mutual((run["score"], run["src"], run["tgt"]), bwd_best))) for run in runs]
    sizes = config["src"]["unique"], config["tgt"]["unique"]
    mined = Mined.above(merged_one_to_one(runs, sizes), config["threshold"])
    write_atomic(
        work.mined_path,
        lambda path: np.savez(path, scores=mined.scores, src=mined.src, tgt=mined.tgt, kept=mined.kept),
    )


def pack(pairs: tuple[np.ndarray, np.ndarray, np.ndarray]) -> np.ndarray:
    """``(scores, src, tgt)`` as one array of ``PAIR_DTYPE`` records."""
    run = np.empty(len(pairs[0]), dtype=PAIR_DTYPE)
    run["score"], run["src"], run["tgt"] = pairs
    return run


def filter_pairs(work: Work, key: str, part: int) -> None:
    """``filter``: the filters that judge each pair alone (``PER_PAIR``) on one slice of the pairs above the
    threshold, their texts read from the two files in one pass each."""
    settings = json.loads((work.folder / "filter" / key / "settings.json").read_text(encoding="utf-8"))
    mined = read_mined(work)
    start, stop = np.linspace(0, mined.kept, work.config["shards"] + 1).round().astype(int)[[part, part + 1]]
    texts = []
    for side, ids in (("src", mined.src[start:stop]), ("tgt", mined.tgt[start:stop])):
        numbers = work.lines(side)[ids].tolist()
        found = lines_at(Path(work.config[side]["texts"]), numbers, work.config[side]["sha256"])
        texts.append([found[number] for number in numbers])
    keep, removed = apply_filters(Filters.from_settings(settings), mined.scores[start:stop], *texts, names=PER_PAIR)
    write_atomic(work.filter_path(key, part), lambda path: np.savez(path, keep=keep, removed=json.dumps(removed)))


def read_mined(work: Work) -> Mined:
    """The ``mine`` stage's pairs."""
    with np.load(work.mined_path) as saved:
        return Mined(saved["scores"], saved["src"], saved["tgt"], int(saved["kept"]))


TASKS: dict[str, Callable[..., None]] = {
    "train": train,
    "populate": populate,
    "search": search,
    "margin": margin,
    "mine": mine,
    "filter": filter_pairs,
}


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

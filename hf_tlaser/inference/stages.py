"""Mining as stages on disk, in the manner of stopes' global mining: each stage is tasks that read files and write
files, so that a scheduler can run any of them as many jobs (``hf_tlaser.inference.pipeline`` launches them). A task
that is done does nothing: its record, written after its outputs, names them by size and SHA-256 and what the task
used (:meth:`~hf_tlaser.inference.work.Work.verify`), so that a cut or damaged output, or embeddings replaced in
place, make it run again. Every output is written to a temporary name and renamed, so a killed task leaves none, and
running the stage again runs only its unfinished tasks.

The stages, over the unique lines of both sides (identical lines mined once, as ``hf-tlaser mine``); no stage holds a
whole text file:

* ``lines``: for each of ``--shards`` slices of each text file, its lines' 128-bit keys (identical lines share one;
  :func:`hf_tlaser.bitext.texts.line_keys`);
* ``unique``: for each side, the line numbers of the first occurrence of every distinct non-blank line (what
  ``hf-tlaser mine`` mines), from the keys in buckets of bounded size (:func:`hf_tlaser.bitext.select.first_rows`);
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
  (:data:`hf_tlaser.bitext.filters.PER_PAIR`: score cap, lengths, language identification) and the keys of the
  pairs' normalised texts, each slice's texts read in one pass. Its files are kept per setting of those filters
  (``filter/{key}``), so that other filters reuse the search. No tasks when no filter is on;
* ``dedup`` (with ``--dedup-normalised``): one task removes near-duplicates from the slices' keys (which compares all
  pairs: a byte per distinct key and the keys of the pairs);
* ``write``: for each slice, the TSV and lines file of its pairs that the filters keep, its texts read in one pass;
  the command joins the slices into ``--output`` and writes the histogram and the summary.

The work folder::

    pipeline.json                    what is mined: the inputs (texts' SHA-256, embeddings files and fingerprint),
                                     the search and scoring settings, the shards
    lines/{side}.{slice}.npy         the keys of one slice of a text's lines
    rows.{side}.npy                  the unique lines mined (positions in the text's lines)
    index/{side}.trained.faiss       the trained empty index of a side's database
    index/{side}.{shard}.faiss       its rows of one shard added
    knn/{direction}.{shard}.npz      one query shard's k nearest neighbours (``sims``, ``ids``: positions in the
                                     other side's unique lines) and their mean cosines (``means``)
    margin/{direction}.{shard}.npy   its queries' best candidates as pairs (score, src, tgt), best first
    mined.npz                        the pairs, best first (``scores``, ``src``, ``tgt``, ``kept``)
    filter/{key}/settings.json       the filters of one setting (``key``: a digest of it)
    filter/{key}/{slice}.npz         which pairs of one slice they keep, how many each removed, the normalised keys
    filter/{key}/dedup.npz           which pairs are kept after near-duplicate removal, and how many it removed
    write/{key}/settings.json        every filter of one setting, ``null`` for none
    write/{key}/{slice}.tsv          the TSV of one slice's pairs (and ``.lines.tsv``, and ``.json``: its counts)
    stats/{stage}.{task}.json        each finished task's record: its outputs' sizes and SHA-256, what it used
                                     (``pipeline.json``'s digest, the embeddings' identities), its seconds, peak
                                     RSS and host
"""

from __future__ import annotations

import json
import logging
import resource
import socket
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

from hf_tlaser.bitext.filters import PER_PAIR, Filters, apply_filters, dedup_keys_mask, normalised_keys
from hf_tlaser.bitext.index import (
    Rows,
    candidates,
    require_faiss,
    rescore,
    search_shards,
    trained_index,
    use_gpu,
)
from hf_tlaser.bitext.margin import neighbour_means, scored_candidates
from hf_tlaser.bitext.mining import Mined
from hf_tlaser.bitext.select import (
    PAIR_DTYPE,
    RUNS,
    best_first,
    direction_pairs,
    first_rows,
    merged_one_to_one,
    mutual,
)
from hf_tlaser.bitext.texts import line_keys, lines_at, not_utf8, write_lines, write_tsv
from hf_tlaser.errors import UsageError
from hf_tlaser.inference.store import first_non_finite, not_finite
from hf_tlaser.inference.work import (
    DIRECTIONS,
    Work,
    per_pair,
    read_mined,
    saved,
    settings_key,
    sigterm_interrupts,
    slice_bounds,
    write_atomic,
)

logger = logging.getLogger(__name__)


def keys(work: Work, side: str, part: int) -> None:
    """``lines``: the keys of one slice of ``side``'s lines."""
    start, stop = work.line_bounds(side)[part]
    try:
        found = line_keys(Path(work.config[side]["texts"]), start, stop)
    except UsageError as err:  # a line that is not UTF-8: the line hf-tlaser mine gives
        raise not_utf8(f"--{side}", err) from None
    write_atomic(work.keys_path(side, part), lambda path: np.save(path, found))


def unique(work: Work, side: str) -> None:
    """``unique``: the line numbers of ``side``'s first occurrences of its distinct non-blank lines."""
    parts = [np.load(work.keys_path(side, part), mmap_mode="r") for part in range(len(work.line_bounds(side)))]
    write_atomic(work.rows_path(side), lambda path: first_rows(parts, path))


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
    for offset, block in database.blocks(work.plan.batch_size, start, stop):
        bad = first_non_finite(block)  # the command does not read the vectors: each row is checked here
        if bad is not None:
            raise UsageError(not_finite(side, int(database.rows[offset + bad]), work.config[side]["texts"]))
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
    other = np.concatenate([saved(work.knn_path(reverse, part), "means")[0] for part in work.shards(reverse)])
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
        bwd_best = np.full(work.unique("tgt"), -1, dtype=np.int64)
        for shard in work.shards("bwd"):
            run = np.load(work.margin_path("bwd", shard))
            bwd_best[run["tgt"]] = run["src"]
        runs = [pack(best_first(mutual((run["score"], run["src"], run["tgt"]), bwd_best))) for run in runs]
    sizes = work.unique("src"), work.unique("tgt")
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


def slice_texts(work: Work, mined: Mined, positions: np.ndarray) -> tuple[list[list[str]], list[np.ndarray]]:
    """The texts of the pairs at ``positions`` of ``mined`` (source, target), each file read in one pass holding those
    lines (its SHA-256 checked against ``pipeline.json``), and their line numbers."""
    texts, numbers = [], []
    for side, ids in (("src", mined.src[positions]), ("tgt", mined.tgt[positions])):
        lines = work.lines(side)[ids]
        found = lines_at(Path(work.config[side]["texts"]), lines.tolist(), work.config[side]["sha256"])
        texts.append([found[number] for number in lines.tolist()])
        numbers.append(lines)
    return texts, numbers


def filter_pairs(work: Work, key: str, part: int) -> None:
    """``filter``: the filters that judge each pair alone (``PER_PAIR``) on one slice of the pairs above the
    threshold, and the keys of its pairs' normalised texts (for ``dedup``)."""
    settings = json.loads((work.folder / "filter" / key / "settings.json").read_text(encoding="utf-8"))
    mined = read_mined(work)
    start, stop = slice_bounds(mined.kept, work.config["shards"], part)
    texts, _ = slice_texts(work, mined, np.arange(start, stop))
    keep, removed = apply_filters(Filters.from_settings(settings), mined.scores[start:stop], *texts, names=PER_PAIR)
    src_keys, tgt_keys = normalised_keys(*texts)
    write_atomic(
        work.filter_path(key, part),
        lambda path: np.savez(path, keep=keep, removed=json.dumps(removed), src_keys=src_keys, tgt_keys=tgt_keys),
    )


def dedup(work: Work, key: str) -> None:
    """``dedup``: near-duplicate removal (:func:`~hf_tlaser.bitext.filters.dedup_keys_mask`) over the pairs that
    the filter slices keep, from their keys."""
    names = "keep", "src_keys", "tgt_keys"
    parts = [saved(work.filter_path(key, part), *names) for part in range(work.config["shards"])]
    keep, src_keys, tgt_keys = (np.concatenate(arrays) for arrays in zip(*parts))
    alive = np.flatnonzero(keep)
    scores = read_mined(work).scores[: len(keep)]
    kept = dedup_keys_mask(scores[alive], src_keys[alive], tgt_keys[alive])
    keep[alive[~kept]] = False
    logger.info("filter dedup removed %d of %d pairs", int(np.sum(~kept)), len(alive))
    write_atomic(work.dedup_path(key), lambda path: np.savez(path, keep=keep, removed=int(np.sum(~kept))))


def write(work: Work, key: str, part: int) -> None:
    """``write``: the TSV and the lines file of one slice's pairs that every filter keeps, and its counts."""
    settings = json.loads((work.folder / "write" / key / "settings.json").read_text(encoding="utf-8"))
    mined = read_mined(work)
    start, stop = slice_bounds(mined.kept, work.config["shards"], part)
    keep = np.ones(stop - start, dtype=bool)
    if settings is not None and settings["dedup"]:
        (keep,) = saved(work.dedup_path(settings_key(per_pair(settings))), "keep")
        keep = keep[start:stop]
    elif settings is not None:
        (keep,) = saved(work.filter_path(settings_key(per_pair(settings)), part), "keep")
    positions = start + np.flatnonzero(keep)
    texts, lines = slice_texts(work, mined, positions)
    scores = mined.scores[positions]
    changed = write_tsv(zip(scores, *texts), work.write_path(key, part))
    write_lines(scores, *lines, work.write_path(key, part, ".lines.tsv"))
    counts = json.dumps({"written": len(positions), "texts_written_with_spaces": changed})
    write_atomic(work.write_path(key, part, ".json"), lambda path: path.write_text(counts + "\n"))


TASKS: dict[str, Callable[..., None]] = {
    "lines": keys,
    "unique": unique,
    "train": train,
    "populate": populate,
    "search": search,
    "margin": margin,
    "mine": mine,
    "filter": filter_pairs,
    "dedup": dedup,
    "write": write,
}


def peak_rss_mib() -> float:
    """This process's peak resident memory (MiB), its heap and the pages of memory-mapped files it touched: Linux's
    ``VmHWM``, which starts afresh in a new program; elsewhere ``ru_maxrss`` (which, on Linux, keeps the RSS of the
    process that forked it, e.g. a benchmark holding its corpus)."""
    status = Path("/proc/self/status")
    if status.is_file():
        for line in status.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / (1 << 20 if sys.platform == "darwin" else 1024)


def record_task(work: Work, stage: str, task: tuple, used: dict, seconds: float) -> None:
    """``stats/STAGE.TASK.json``: a finished task's record (:meth:`~hf_tlaser.inference.work.Work.record`: its outputs'
    sizes and SHA-256, what it ``used``), its wall time, its process's peak RSS so far (a job runs its tasks one after
    the other) and the host (what the per-stage table and a cluster estimate read)."""
    peak = peak_rss_mib()
    stats = {"seconds": round(seconds, 3), "peak_rss_mib": round(peak, 1), "host": socket.gethostname()}
    work.record(stage, task, used, **stats)
    logger.info("%s %s done in %.1f s (peak RSS %.0f MiB)", stage, task, seconds, peak)


def run_tasks(folder: str, stage: str, tasks: list[tuple], threads: int) -> int:
    """Run ``tasks`` of ``stage`` one after the other in this process with ``threads`` faiss threads (what one job of
    the launcher does), skipping those that are done (:meth:`~hf_tlaser.inference.work.Work.verify`); returns how
    many ran. A failing task is logged and the others still run; then ``UsageError`` with the first input problem's
    line (a line that is not UTF-8, a vector that is not finite: what ``hf-tlaser mine`` says), else
    ``RuntimeError`` naming the failed tasks and the first error. SIGTERM stops the job (``KeyboardInterrupt``), the
    task it was running leaving no output."""
    if threads:
        require_faiss().omp_set_num_threads(threads)
    work, ran, failed = Work.open(Path(folder)), 0, []
    used = work.used(stage)
    with sigterm_interrupts():  # a cancelled local job's controller forwards SIGTERM: the task stops, no output
        for task in tasks:
            if work.verify(stage, task, used) is None:
                continue
            started = time.perf_counter()
            try:
                TASKS[stage](work, *task)
            except UsageError as err:  # a problem of the inputs: its line, which the command gives, no traceback
                logger.error("%s %s failed: %s", stage, task, err)
                failed.append((task, err))
                continue
            except Exception as err:  # noqa: BLE001 - any failure of one task: the job goes on with the others
                logger.exception("%s %s failed", stage, task)
                failed.append((task, err))
                continue
            record_task(work, stage, task, used, time.perf_counter() - started)
            ran += 1
    usage = [err for _, err in failed if isinstance(err, UsageError)]
    if usage:
        raise UsageError(str(usage[0]))
    if failed:
        task, err = failed[0]
        raise RuntimeError(f"{len(failed)} of {len(tasks)} {stage} tasks failed; the first, {task}: {err}")
    return ran

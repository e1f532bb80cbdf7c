"""The work folder of a staged mining pipeline (:mod:`hf_tlaser.inference.stages`): what each stage's tasks are,
which files each writes, whether a task is done (its record says so: :meth:`Work.verify`) and which files a stage
needs from the earlier ones; the ``pipeline.json`` it was made for and the filters' settings.

A task's record (``stats/{stage}.{task}.json``, written after its outputs, atomically) holds each output's size and
SHA-256 and what the task used (:meth:`Work.used`: the digest of ``pipeline.json``, i.e. the texts' SHA-256 and
every setting, and from the ``train`` stage on the embeddings files' identities). A task is done when its record
is there, names the same use, and every output has the recorded size and SHA-256: a cut, damaged or foreign file,
or embeddings replaced in place, make the task run again."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from hf_tlaser.bitext.filters import FILTERS
from hf_tlaser.bitext.index import Rows, SearchPlan, database_shards, make_index, shard_rows
from hf_tlaser.bitext.mining import Mined
from hf_tlaser.inference.store import read_embeddings, read_sidecar

SIDES = ("src", "tgt")
DIRECTIONS = {"fwd": ("src", "tgt"), "bwd": ("tgt", "src")}
"""Direction -> (the side whose lines are the queries, the side searched)."""
STAGES = ("lines", "unique", "train", "populate", "search", "margin", "mine", "filter", "dedup", "write")
CONFIG = "pipeline.json"
FORMAT = 3
"""``pipeline.json``'s ``format``: 2 since the ``margin`` stage, 3 since the ``lines`` and ``unique`` stages (a work
folder of an older format is refused as another pipeline's)."""


def write_atomic(path: Path, write: Callable[[Path], None]) -> None:
    """``write(temporary path)``, then the temporary file renamed to ``path`` (a killed task leaves no ``path``). The
    temporary name is this process's, so that two jobs running the same task (a job left by a killed command and its
    rerun's) never write into one file: the last rename wins, with a whole file either way."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f"{path.name}.{os.getpid()}.tmp{path.suffix}")
    try:
        write(temporary)
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)


@contextmanager
def sigterm_interrupts() -> Iterator[None]:
    """Inside, SIGTERM raises ``KeyboardInterrupt`` in this process, as Ctrl-C does, whatever this process inherited
    (a SIGTERM ignored or blocked by its parent, or submitit's job handler, which ignores it); the earlier handler and
    mask afterwards. Outside the main thread, nothing changes (Python's signal handlers belong to the main thread)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, signal.default_int_handler)
    mask = signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM}) if hasattr(signal, "pthread_sigmask") else set()
    try:
        yield
    finally:
        if signal.SIGTERM in mask:
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
        signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)


def file_identity(path: Path) -> dict:
    """A file's size and SHA-256 (read in chunks)."""
    with path.open("rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        return {"size": size, "sha256": hashlib.file_digest(handle, "sha256").hexdigest()}


def vectors_identity(paths: list[str]) -> list[dict]:
    """What identifies embeddings files' contents without reading them: each file's size, modification time and
    stored dtype (its sidecar's), so that a file embedded again in place (the same model, another dtype or
    precision) is another input."""
    identities = []
    for path in paths:
        stat = os.stat(path)
        identities.append({"size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "dtype": read_sidecar(path)["dtype"]})
    return identities


def shard_bounds(rows: int, shards: int, block: int = 1) -> list[tuple[int, int]]:
    """``[start, stop)`` of at most ``shards`` consecutive shards of ``rows`` rows that start at multiples of
    ``block``, their numbers of blocks differing by at most one (empty shards left out)."""
    blocks = -(-rows // block)
    edges = np.linspace(0, blocks, min(shards, blocks) + 1).round().astype(int) * block
    return [(int(a), min(int(b), rows)) for a, b in zip(edges[:-1], edges[1:])]


@lru_cache
def rows_per_shard(spec: str, dim: int, memory: float) -> int:
    """Database rows per shard of a ``spec`` index that fit ``memory`` bytes (what ``hf-tlaser mine`` cuts)."""
    return shard_rows(make_index(spec, dim), memory)


def saved(path: Path, *names: str) -> tuple[np.ndarray, ...]:
    """Arrays ``names`` of the ``.npz`` file ``path``, the file closed."""
    with np.load(path) as arrays:
        return tuple(arrays[name] for name in names)


def settings_key(settings: dict | None) -> str:
    """The digest that names the folder of one setting of the filters."""
    return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:16]


def per_pair(settings: dict) -> dict:
    """The settings of the filters that judge a pair alone (those of the ``filter`` stage): near-duplicates off."""
    return {**settings, "dedup": False}


def slice_bounds(count: int, slices: int, part: int) -> tuple[int, int]:
    """``[start, stop)`` of slice ``part`` of ``slices`` equal slices of ``count`` pairs."""
    start, stop = np.linspace(0, count, slices + 1).round().astype(int)[[part, part + 1]]
    return int(start), int(stop)


@dataclass(frozen=True)
class Work:
    """A pipeline's work folder and its ``pipeline.json`` (``config``); ``filters``: the settings of the filters
    (:meth:`hf_tlaser.bitext.filters.Filters.settings`), ``None`` when none is on."""

    folder: Path
    config: dict
    filters: dict | None = None

    @classmethod
    def open(cls, folder: Path) -> Work:
        return cls(folder, json.loads((folder / CONFIG).read_text(encoding="utf-8")))

    @property
    def plan(self) -> SearchPlan:
        return SearchPlan(**self.config["search"])

    def rows_path(self, side: str) -> Path:
        return self.folder / f"rows.{side}.npy"

    def unique(self, side: str) -> int:
        """How many unique lines ``side`` has (the ``unique`` stage's count)."""
        return len(np.load(self.rows_path(side), mmap_mode="r"))

    def rows(self, side: str) -> Rows:
        """The unique lines of ``side`` as memory-mapped vectors."""
        array, _ = read_embeddings(self.config[side]["embeddings"], f"--{side}-embeddings")
        return Rows(array, self.lines(side))

    def line_bounds(self, side: str) -> list[tuple[int, int]]:
        """The slices of ``side``'s text file that the ``lines`` stage reads (``--shards``)."""
        return shard_bounds(self.config[side]["lines"], self.config["shards"])

    def bounds(self, side: str) -> list[tuple[int, int]]:
        """The query shards of ``side`` (``--shards``), each starting at a multiple of ``--batch-size``: every query
        is searched in the block it has in ``hf-tlaser mine`` (a fast-scan index quantises its lookup tables per
        block of queries, so a block's make-up can move a candidate)."""
        return shard_bounds(self.unique(side), self.config["shards"], self.plan.batch_size)

    def database(self, side: str) -> list[tuple[int, int]]:
        """The database shards of ``side``: those of ``hf-tlaser mine``'s search (``--index-memory``)."""
        per_shard = rows_per_shard(self.spec(side), self.config["dim"], self.plan.index_memory)
        return database_shards(self.unique(side), per_shard)

    def spec(self, side: str) -> str:
        """The index of ``side``'s database."""
        return self.plan.spec(self.unique(side), self.config["dim"])

    def keys_path(self, side: str, part: int) -> Path:
        return self.folder / "lines" / f"{side}.{part:04d}.npy"

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
        """The folder of the ``filter`` stage's files for this setting of the filters that judge a pair alone."""
        return settings_key(per_pair(self.filters or {}))

    @property
    def write_key(self) -> str:
        """The folder of the ``write`` stage's files for this setting of every filter."""
        return settings_key(self.filters)

    def filter_path(self, key: str, part: int) -> Path:
        return self.folder / "filter" / key / f"{part:04d}.npz"

    def dedup_path(self, key: str) -> Path:
        return self.folder / "filter" / key / "dedup.npz"

    def write_path(self, key: str, part: int, suffix: str = ".tsv") -> Path:
        """A ``write`` task's TSV (``.lines.tsv``: its lines file; ``.json``: its counts, written last)."""
        return self.folder / "write" / key / f"{part:04d}{suffix}"

    def lines(self, side: str) -> np.ndarray:
        """The line numbers of ``side``'s unique lines (its rows)."""
        return np.load(self.rows_path(side))

    def tasks(self, stage: str) -> list[tuple]:
        """The tasks of ``stage``: its arguments after the work folder."""
        if stage == "lines":
            return [(side, part) for side in SIDES for part in range(len(self.line_bounds(side)))]
        if stage in ("unique", "train"):
            return [(side,) for side in SIDES]
        if stage == "populate":
            return [(side, shard) for side in SIDES for shard in range(len(self.database(side)))]
        if stage in ("search", "margin"):
            return [(direction, shard) for direction in DIRECTIONS for shard in self.shards(direction)]
        if stage == "filter":
            return [] if self.filters is None else [(self.filter_key, part) for part in range(self.config["shards"])]
        if stage == "dedup":
            return [(self.filter_key,)] if self.filters is not None and self.filters["dedup"] else []
        if stage == "write":
            return [(self.write_key, part) for part in range(self.config["shards"])]
        return [()]

    def output(self, stage: str, task: tuple) -> Path:
        """The file a task of ``stage`` writes last (the ``write`` stage's counts)."""
        if stage == "mine":
            return self.mined_path
        if stage == "write":
            return self.write_path(*task, suffix=".json")
        paths = {
            "lines": self.keys_path,
            "unique": self.rows_path,
            "train": self.trained_path,
            "populate": self.shard_path,
            "search": self.knn_path,
            "margin": self.margin_path,
            "filter": self.filter_path,
            "dedup": self.dedup_path,
        }
        return paths[stage](*task)

    def outputs(self, stage: str, task: tuple) -> list[Path]:
        """Every file a task of ``stage`` writes."""
        if stage == "write":
            return [self.write_path(*task), self.write_path(*task, ".lines.tsv"), self.output(stage, task)]
        return [self.output(stage, task)]

    def record_path(self, stage: str, task: tuple) -> Path:
        """``stats/STAGE.TASK.json``: a finished task's record."""
        return self.folder / "stats" / f"{'.'.join([stage, *map(str, task)])}.json"

    def used(self, stage: str) -> dict:
        """What the tasks of ``stage`` depend on besides their input files in the work folder (which the same inputs
        and settings make the same): ``pipeline.json``'s digest and, from ``train`` on, the embeddings' identities
        (:func:`vectors_identity`)."""
        used: dict = {"pipeline": hashlib.sha256(json.dumps(self.config, sort_keys=True).encode()).hexdigest()}
        if STAGES.index(stage) >= STAGES.index("train"):
            used["embeddings"] = {side: vectors_identity(self.config[side]["embeddings"]) for side in SIDES}
        return used

    def record(self, stage: str, task: tuple, used: dict, **stats: object) -> None:
        """Write the record of a task whose outputs are written: their sizes and SHA-256, ``used``
        (:meth:`used`, taken before the task ran) and ``stats``."""
        outputs = {str(path.relative_to(self.folder)): file_identity(path) for path in self.outputs(stage, task)}
        record = {"stage": stage, "task": list(task), "used": used, "outputs": outputs, **stats}
        text = json.dumps(record) + "\n"
        write_atomic(self.record_path(stage, task), lambda path: path.write_text(text, encoding="utf-8"))

    def verify(self, stage: str, task: tuple, used: dict) -> str | None:
        """Why a task of ``stage`` is not done (``None``: it is): no record or an unreadable one, a record of other
        inputs or settings than ``used``, or an output missing or unlike its record (cut, damaged, written by
        another run)."""
        path = self.record_path(stage, task)
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return "it has no record"
        except (OSError, ValueError) as err:
            return f"its record {path} is unreadable ({err})"
        if not isinstance(record, dict) or not isinstance(record.get("outputs"), dict):
            return f"its record {path} is not a task's record"
        if record.get("used") != used:
            return f"its record {path} is of other inputs or settings"
        for output in self.outputs(stage, task):
            expected = record["outputs"].get(str(output.relative_to(self.folder)))
            if not output.is_file():
                return f"{output} is missing"
            if (
                not isinstance(expected, dict)
                or output.stat().st_size != expected.get("size")
                or file_identity(output) != expected
            ):
                return f"{output} does not match its record {path} (cut, damaged or written by another run)"
        return None

    def inputs(self, stage: str) -> list[Path]:
        """The files ``stage`` reads that earlier stages write: those of the last earlier stage with tasks (after
        ``unique``, its files first: the later stages' tasks follow from them)."""
        earlier = STAGES[: STAGES.index(stage)]
        if "unique" in earlier[:-1]:
            missing = [self.rows_path(side) for side in SIDES if not self.rows_path(side).exists()]
            if missing:
                return missing
        for before in reversed(earlier):
            if tasks := self.tasks(before):
                return [self.output(before, task) for task in tasks]
        return []

    def write_filters(self) -> None:
        """The settings the ``filter`` and ``write`` stages' tasks read: ``filter/{key}/settings.json`` (the filters
        that judge a pair alone) and ``write/{key}/settings.json`` (every filter, ``null`` for none)."""
        settings = {self.folder / "write" / self.write_key: self.filters}
        if self.filters is not None:
            settings[self.folder / "filter" / self.filter_key] = per_pair(self.filters)
        for folder, values in settings.items():
            text = json.dumps(values, indent=2) + "\n"
            write_atomic(folder / "settings.json", lambda temporary, text=text: temporary.write_text(text))

    def removed(self) -> dict[str, int | None]:
        """How many pairs each filter removed (:data:`~hf_tlaser.bitext.filters.FILTERS`; ``None``: off): the
        ``filter`` stage's counts summed over the slices, and the ``dedup`` stage's."""
        removed: dict[str, int | None] = dict.fromkeys(FILTERS)
        for task in self.tasks("filter"):
            (counts,) = saved(self.filter_path(*task), "removed")
            for name, count in json.loads(str(counts)).items():
                removed[name] = None if count is None else (removed[name] or 0) + count
        for task in self.tasks("dedup"):
            (count,) = saved(self.dedup_path(*task), "removed")
            removed["dedup"] = int(count)
        return removed


def read_mined(work: Work) -> Mined:
    """The ``mine`` stage's pairs."""
    scores, src, tgt, kept = saved(work.mined_path, "scores", "src", "tgt", "kept")
    return Mined(scores, src, tgt, int(kept))

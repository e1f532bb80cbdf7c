"""Teacher vectors computed once and reused: a cache keyed by (teacher fingerprint, prompt, text).

Layout under the cache root (``cache_root``: an argument, else ``$HF_TLASER_TEACHER_CACHE``, else
``~/.cache/hf_tlaser/teachers``)::

    <root>/<teacher name>-<fingerprint[:16]>/<prompt name or none>-<sha1(prompt)[:8]>/
        meta.json                    what the folder holds: teacher, prompt, dim, dtype
        write.lock                   held by a writer while it commits a shard
        shards/<id>.vec.npy          rows [n, dim] (float16 by default), memory-mapped when read
        shards/<id>.keys.npy         SHA-1 of the text of each row, [n] of dtype S20: the shard's index

Shards are append-only; ``<id>`` is ``<time_ns>-<pid>-<random>``, so several processes add shards side by side and
read each other's. A shard is written atomically per chunk: its rows, then its keys, each to a hidden temporary file
that is flushed and renamed; the keys file commits the shard. Writers commit under an exclusive lock of
``write.lock`` (``fcntl.flock``) and first drop the texts that another writer stored meanwhile, so a text is stored
once however many processes fill the folder at the same time; each starts at a random chunk, so that writers of the
same texts share the work (a chunk two of them computed at the same time is logged, and stored once).
``meta.json`` is checked before any row is read: a folder that records another teacher, prompt or width is refused.

A killed run leaves at most a temporary file or rows without keys, which readers ignore (its texts are computed
again); a committed shard that cannot be read (truncated by a full disk or a broken copy) is moved aside as
``*.corrupt`` with a warning, and its texts are computed again.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import re
import secrets
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from tqdm.auto import tqdm

from hf_tlaser.encoders.identity import cache_root
from hf_tlaser.encoders.vectors import KEY_DTYPE, save_json, save_npy, text_keys
from hf_tlaser.errors import UsageError

if TYPE_CHECKING:
    from hf_tlaser.encoders import Encoder as Teacher

logger = logging.getLogger(__name__)

NO_CACHE = "none"
"""``cache_dir`` value that turns the cache off where a command offers one."""
META_IDENTITY = ("fingerprint", "prompt", "dim")
"""``meta.json`` fields that must equal the teacher's: what determines its vectors."""
STALE_SECONDS = 24 * 3600
"""Age after which a temporary file or uncommitted rows are another run's leftovers and may be removed."""


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_")[:60] or "teacher"


@dataclass
class CacheStats:
    """Texts asked for that were in the cache (``hits``) or not (``misses``), and distinct texts this process
    computed (fewer than the distinct misses when another process stored some meanwhile)."""

    hits: int = 0
    misses: int = 0
    computed: int = 0

    def add(self, other: CacheStats) -> None:
        self.hits, self.misses, self.computed = (
            self.hits + other.hits,
            self.misses + other.misses,
            self.computed + other.computed,
        )


class TeacherCache:
    """The cache folder of one teacher and prompt under ``root`` (None: :func:`cache_root`); module docstring.

    ``get(texts)`` returns float32 [N, dim] in input order: rows in the cache are read, the others are computed by
    the teacher in batches of ``batch_size`` texts sorted by length (longest first), committed every
    ``chunk_size`` texts, with a progress bar (texts/s, ETA) when ``show_progress``. ``last`` holds the counts of
    the latest call, ``stats`` the counts since creation. Vectors are stored as ``dtype`` (float16 by default;
    ``ValueError`` for a value that does not fit: use float32).
    """

    def __init__(
        self,
        root: str | os.PathLike | None,
        teacher: Teacher,
        *,
        dtype: str = "float16",
        chunk_size: int = 2048,
        batch_size: int | None = None,
        show_progress: bool = True,
    ) -> None:
        self.teacher = teacher
        self.dtype = np.dtype(dtype)
        self.chunk_size = max(1, int(chunk_size))
        self.batch_size = batch_size or teacher.batch_size
        self.show_progress = show_progress
        prompt = teacher.prompt or ""
        prompt_part = f"{_slug(teacher.prompt_name or 'none')}-{hashlib.sha1(prompt.encode()).hexdigest()[:8]}"
        self.folder = cache_root(root) / f"{_slug(teacher.name)}-{teacher.fingerprint[:16]}" / prompt_part
        self.shards = self.folder / "shards"
        self.stats = CacheStats()
        self.last = CacheStats()
        self._loaded: dict[str, tuple[np.ndarray, np.ndarray]] = {}  # shard id -> (keys, memory-mapped rows)
        self._index_keys = np.zeros(0, dtype=KEY_DTYPE)  # sorted keys of every loaded shard
        self._index_where = np.zeros((0, 2), dtype=np.int64)  # (shard number, row) of each sorted key
        self._names: list[str] = []  # shard number -> id
        self._meta_checked = False

    # ---------------------------------------------------------------------------------------------- reading

    def _check_meta(self) -> None:
        """Write ``meta.json`` (atomically; every writer writes the same), or check the one there: ``UsageError``
        when it records another teacher fingerprint, prompt or width, so that no vector of another teacher is ever
        served; a missing or unreadable one (its folder's name matches this teacher and prompt) is written again.
        New shards are stored in the folder's dtype."""
        if self._meta_checked:
            return
        meta = {
            "teacher": self.teacher.to_dict(),
            "fingerprint": self.teacher.fingerprint,
            "prompt_name": self.teacher.prompt_name,
            "prompt": self.teacher.prompt,
            "dim": self.teacher.dim,
            "dtype": str(self.dtype),
        }
        path = self.folder / "meta.json"
        self.shards.mkdir(parents=True, exist_ok=True)
        try:
            there = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            there = None
        except (OSError, ValueError) as err:
            logger.warning("teacher cache: %s is unreadable (%s); written again", path, err)
            there = None
        if not isinstance(there, dict):
            if any(self.shards.glob("*.keys.npy")):
                logger.warning("teacher cache: %s was missing; written again for the shards there", path)
            save_json(path, meta)
        else:
            differ = [key for key in META_IDENTITY if there.get(key) != meta[key]]
            if differ:
                found = ", ".join(f"{key} {there.get(key)!r} (this teacher: {meta[key]!r})" for key in differ)
                raise UsageError(
                    f"teacher cache {self.folder}: its meta.json records another teacher: {found}; its vectors are "
                    "not this teacher's: remove that folder, or give another cache folder"
                )
            if there.get("dtype") != meta["dtype"]:
                logger.warning(
                    "teacher cache %s stores %s vectors (asked: %s); give another cache folder for %s",
                    self.folder,
                    there.get("dtype"),
                    meta["dtype"],
                    meta["dtype"],
                )
                self.dtype = np.dtype(there["dtype"])
        self._meta_checked = True

    def refresh(self) -> int:
        """Load the shards committed since the last look (by this or another process); return how many. Checks
        ``meta.json`` first (``UsageError`` for a folder of another teacher)."""
        self._check_meta()
        new = []
        for keys_path in sorted(self.shards.glob("*.keys.npy")):
            shard = keys_path.name[: -len(".keys.npy")]
            if shard in self._loaded:
                continue
            loaded = self._open_shard(shard)
            if loaded is not None:
                self._loaded[shard] = loaded
                new.append(shard)
        if new:
            self._index(new)
        return len(new)

    def _open_shard(self, shard: str) -> tuple[np.ndarray, np.ndarray] | None:
        keys_path, rows_path = self.shards / f"{shard}.keys.npy", self.shards / f"{shard}.vec.npy"
        try:
            keys = np.load(keys_path)
            rows = np.load(rows_path, mmap_mode="r")
            if keys.dtype != KEY_DTYPE or keys.ndim != 1 or rows.shape != (len(keys), self.teacher.dim):
                raise ValueError(f"{len(keys)} keys of {keys.dtype} for rows of shape {rows.shape}")
        except (OSError, ValueError, EOFError) as err:
            logger.warning(
                "teacher cache: shard %s is unreadable (%s); moved aside, its texts are recomputed", shard, err
            )
            for path in (keys_path, rows_path):
                if path.exists():
                    os.replace(path, path.with_name(path.name + ".corrupt"))
            return None
        return keys, rows

    def _index(self, new: list[str]) -> None:
        keys = [self._index_keys]
        where = [self._index_where]
        for shard in new:
            shard_keys = self._loaded[shard][0]
            keys.append(shard_keys)
            where.append(np.stack([np.full(len(shard_keys), len(self._names)), np.arange(len(shard_keys))], axis=1))
            self._names.append(shard)
        all_keys, all_where = np.concatenate(keys), np.concatenate(where)
        order = np.argsort(all_keys, kind="stable")
        self._index_keys, self._index_where = all_keys[order], all_where[order]

    def lookup(self, keys: np.ndarray) -> np.ndarray:
        """``(shard number, row)`` of every key, -1 where it is not in the cache."""
        found = np.full((len(keys), 2), -1, dtype=np.int64)
        if len(self._index_keys) == 0 or len(keys) == 0:
            return found
        position = np.minimum(np.searchsorted(self._index_keys, keys), len(self._index_keys) - 1)
        hit = self._index_keys[position] == keys
        found[hit] = self._index_where[position[hit]]
        return found

    def __len__(self) -> int:
        """Distinct texts in the cache (as loaded by the latest call)."""
        return len(np.unique(self._index_keys))

    def _gather(self, where: np.ndarray) -> np.ndarray:
        out = np.empty((len(where), self.teacher.dim), dtype=np.float32)
        for number in np.unique(where[:, 0]):
            rows = np.flatnonzero(where[:, 0] == number)
            order = np.argsort(where[rows, 1])  # memory-mapped rows read in file order
            out[rows[order]] = self._loaded[self._names[number]][1][where[rows[order], 1]]
        return out

    # ---------------------------------------------------------------------------------------------- writing

    def _commit(self, texts: list[str], vectors: np.ndarray) -> str:
        """One shard: rows first, then keys (the commit); each written to a temporary file and renamed. Its id."""
        stored = vectors.astype(self.dtype)
        if not np.isfinite(stored).all():
            raise ValueError(f"teacher vectors do not fit {self.dtype} (inf or NaN); use a float32 cache")
        shard = f"{time.time_ns():020d}-{os.getpid()}-{secrets.token_hex(3)}"
        save_npy(self.shards / f"{shard}.vec.npy", stored)
        save_npy(self.shards / f"{shard}.keys.npy", text_keys(texts))
        return shard

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """Hold the folder's exclusive write lock (``write.lock``)."""
        with open(self.folder / "write.lock", "a+b") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def _keys_since(self, seen: set[str]) -> set[bytes]:
        """Keys of the committed shards not in ``seen`` (which then holds them): what other writers stored since."""
        keys: set[bytes] = set()
        for keys_path in self.shards.glob("*.keys.npy"):
            shard = keys_path.name[: -len(".keys.npy")]
            if shard in seen:
                continue
            with contextlib.suppress(OSError, ValueError, EOFError):  # unreadable: refresh() moves it aside
                keys.update(np.load(keys_path).tolist())
                seen.add(shard)
        return keys

    def _remove_leftovers(self) -> None:
        """Temporary files and rows without keys older than ``STALE_SECONDS``: killed runs' leftovers."""
        now = time.time()
        for path in [*self.shards.glob(".*.tmp"), *self.shards.glob("*.vec.npy")]:
            committed = (
                path.name.endswith(".vec.npy") and path.with_name(path.name[: -len(".vec.npy")] + ".keys.npy").exists()
            )
            try:
                if not committed and now - path.stat().st_mtime > STALE_SECONDS:
                    path.unlink()
            except FileNotFoundError:
                pass

    def _compute(self, texts: list[str]) -> tuple[int, int]:
        """Encode ``texts`` (distinct, not in the cache) in chunks of ``chunk_size`` texts sorted longest first,
        starting at a random chunk; each chunk's texts that another writer stored meanwhile are dropped before it is
        encoded and again under the write lock before it is committed. Returns (texts encoded, texts encoded but
        not stored because another writer committed them first)."""
        self._remove_leftovers()
        texts = sorted(texts, key=len, reverse=True)
        chunks = [texts[start : start + self.chunk_size] for start in range(0, len(texts), self.chunk_size)]
        first = secrets.randbelow(len(chunks))  # writers of the same texts start apart, and share the chunks
        wanted = set(text_keys(texts).tolist())
        seen, stored, encoded, wasted = set(self._loaded), set(), 0, 0  # stored: wanted texts other writers stored
        bar = tqdm(
            total=len(texts),
            unit="text",
            unit_scale=True,
            desc=f"teacher {self.teacher.name}",
            disable=not self.show_progress,
            smoothing=0.1,
        )
        with bar:
            for chunk in chunks[first:] + chunks[:first]:
                stored |= self._keys_since(seen) & wanted
                keys = text_keys(chunk).tolist()
                todo = [i for i, key in enumerate(keys) if key not in stored]
                bar.update(len(chunk) - len(todo))
                parts = []
                for offset in range(0, len(todo), self.batch_size):
                    batch = [chunk[i] for i in todo[offset : offset + self.batch_size]]
                    parts.append(self.teacher.encode(batch, batch_size=self.batch_size))
                    bar.update(len(batch))
                if not todo:
                    continue
                vectors = np.concatenate(parts)
                encoded += len(todo)
                with self._locked():
                    stored |= self._keys_since(seen) & wanted
                    keep = [row for row, i in enumerate(todo) if keys[i] not in stored]
                    wasted += len(todo) - len(keep)
                    if keep:  # chunks are disjoint: no later chunk holds these texts
                        seen.add(self._commit([chunk[todo[row]] for row in keep], vectors[keep]))
        return encoded, wasted

    def fill(self, texts: Sequence[str]) -> CacheStats:
        """Compute and store the vectors of the ``texts`` that are not in the cache yet; return the counts."""
        texts = list(texts)
        keys = text_keys(texts)
        self.refresh()
        missing = self.lookup(keys)[:, 0] < 0
        distinct = list(dict.fromkeys(texts[i] for i in np.flatnonzero(missing)))
        last = CacheStats(hits=int(len(keys) - missing.sum()), misses=int(missing.sum()))
        if distinct:
            last.computed, wasted = self._compute(distinct)
            if wasted:
                logger.warning(
                    "teacher cache %s: %d texts were also computed by another process at the same time (stored once)",
                    self.folder,
                    wasted,
                )
            self.refresh()
        self.last = last
        self.stats.add(last)
        if len(keys):
            logger.info(
                "teacher cache %s: %d hits, %d misses (%d texts computed)",
                self.folder,
                last.hits,
                last.misses,
                last.computed,
            )
        return last

    def get(self, texts: Sequence[str]) -> np.ndarray:
        """float32 [len(texts), dim], row i the teacher's vector of ``texts[i]``: from the cache, the misses computed
        first (and stored)."""
        texts = list(texts)
        self.fill(texts)
        where = self.lookup(text_keys(texts))
        if (where[:, 0] < 0).any():
            raise RuntimeError(f"teacher cache {self.folder}: texts missing after they were computed")
        return self._gather(where)

    def embedder(self):
        """An evaluation embedder: ``embed(texts) -> get(texts)``."""

        def embed(texts: Sequence[str]) -> np.ndarray:
            return self.get(texts)

        return embed

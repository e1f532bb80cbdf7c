"""Teacher vectors computed once and reused: a cache keyed by (teacher fingerprint, prompt, text).

Layout under the cache root (``cache_root``: an argument, else ``$HF_TLASER_TEACHER_CACHE``, else
``~/.cache/hf_tlaser/teachers``)::

    <root>/<teacher name>-<fingerprint[:16]>/<prompt name or none>-<sha1(prompt)[:8]>/
        meta.json                    what the folder holds: teacher, prompt, dim, dtype
        shards/<id>.vec.npy          rows [n, dim] (float16 by default), memory-mapped when read
        shards/<id>.keys.npy         SHA-1 of the text of each row, [n] of dtype S20: the shard's index

Shards are append-only; ``<id>`` is ``<time_ns>-<pid>-<random>``, so several processes add shards side by side and
read each other's. A shard is written atomically per chunk: its rows, then its keys, each to a hidden temporary file
that is flushed and renamed; the keys file commits the shard. A killed run leaves at most a temporary file or rows
without keys, which readers ignore (its texts are computed again); a committed shard that cannot be read (truncated
by a full disk or a broken copy) is moved aside as ``*.corrupt`` with a warning, and its texts are computed again.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import secrets
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from .loading import Teacher
from .vectors import KEY_DTYPE, save_json, save_npy, text_keys

logger = logging.getLogger(__name__)

ENV_VAR = "HF_TLASER_TEACHER_CACHE"
NO_CACHE = "none"
"""``cache_dir`` value that turns the cache off where a command offers one."""
STALE_SECONDS = 24 * 3600
"""Age after which a temporary file or uncommitted rows are another run's leftovers and may be removed."""


def cache_root(cache_dir: str | os.PathLike | None = None) -> Path:
    """The cache root: ``cache_dir``, else ``$HF_TLASER_TEACHER_CACHE``, else ``$XDG_CACHE_HOME/hf_tlaser/teachers``
    (``~/.cache/hf_tlaser/teachers``)."""
    if cache_dir is None:
        cache_dir = os.environ.get(ENV_VAR)
    if cache_dir is None:
        return Path(os.environ.get("XDG_CACHE_HOME") or "~/.cache").expanduser() / "hf_tlaser" / "teachers"
    return Path(cache_dir).expanduser()


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_")[:60] or "teacher"


@dataclass
class CacheStats:
    """Texts asked for that were in the cache (``hits``) or not (``misses``), and distinct texts computed."""

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
        """Write ``meta.json`` once (atomically; every writer writes the same), or check the one there."""
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
        if not path.is_file():
            save_json(path, meta)
        self._meta_checked = True

    def refresh(self) -> int:
        """Load the shards committed since the last look (by this or another process); return how many."""
        if not self.shards.is_dir():
            return 0
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

    def _commit(self, texts: list[str], vectors: np.ndarray) -> None:
        """One shard: rows first, then keys (the commit); each written to a temporary file and renamed."""
        stored = vectors.astype(self.dtype)
        if not np.isfinite(stored).all():
            raise ValueError(f"teacher vectors do not fit {self.dtype} (inf or NaN); use a float32 cache")
        shard = f"{time.time_ns():020d}-{os.getpid()}-{secrets.token_hex(3)}"
        save_npy(self.shards / f"{shard}.vec.npy", stored)
        save_npy(self.shards / f"{shard}.keys.npy", text_keys(texts))

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

    def _compute(self, texts: list[str]) -> None:
        """Encode ``texts`` (distinct, not in the cache), longest first, committing a shard every ``chunk_size``."""
        self._check_meta()
        self._remove_leftovers()
        texts = sorted(texts, key=len, reverse=True)
        bar = tqdm(
            total=len(texts),
            unit="text",
            unit_scale=True,
            desc=f"teacher {self.teacher.name}",
            disable=not self.show_progress,
            smoothing=0.1,
        )
        with bar:
            for start in range(0, len(texts), self.chunk_size):
                chunk = texts[start : start + self.chunk_size]
                parts = []
                for offset in range(0, len(chunk), self.batch_size):
                    batch = chunk[offset : offset + self.batch_size]
                    parts.append(self.teacher.encode(batch, batch_size=self.batch_size))
                    bar.update(len(batch))
                self._commit(chunk, np.concatenate(parts))

    def fill(self, texts: Sequence[str]) -> CacheStats:
        """Compute and store the vectors of the ``texts`` that are not in the cache yet; return the counts."""
        texts = list(texts)
        keys = text_keys(texts)
        self.refresh()
        missing = self.lookup(keys)[:, 0] < 0
        distinct = list(dict.fromkeys(texts[i] for i in np.flatnonzero(missing)))
        last = CacheStats(hits=int(len(keys) - missing.sum()), misses=int(missing.sum()), computed=len(distinct))
        if distinct:
            self._compute(distinct)
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

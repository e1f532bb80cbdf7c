"""Text keys and the ``vectors:`` file: vectors precomputed for an ordered list of texts, written here
(:func:`write_vectors`) and read here (:class:`VectorsEncoder`).

A ``vectors:PATH`` teacher is three files written side by side by :func:`write_vectors` (``hf-tlaser teacher-vectors
--output PATH``):

* ``PATH`` (``vectors.npy``): the matrix, numpy ``.npy`` [N, d] float16 or float32, row i = the vector of text i;
* ``vectors.keys.npy``: the SHA-1 of each text's UTF-8 bytes, ``.npy`` [N] of dtype ``S20`` (lookup by text);
* ``vectors.json``: the sidecar, ``{"format": "hf_tlaser.teacher-vectors", "version": 1, "rows": N, "dim": d,
  "dtype", "texts_sha1", "teacher": {kind, name, identity, fingerprint, prompt_name, prompt, languages, dim}, ...}``
  where ``texts_sha1`` is the SHA-1 of the concatenated keys: the hash of the ordered texts, which detects a corpus
  that is not the one the vectors were computed for.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from hf_tlaser.errors import UsageError
from hf_tlaser.model_folders import first_line

from .base import Encoder

VECTORS_PREFIX = "vectors:"
"""A SPEC that starts with it names a ``vectors:`` file (:class:`VectorsEncoder`)."""
KEY_DTYPE = np.dtype("S20")
"""One text key: the 20-byte SHA-1 digest of the text's UTF-8 bytes (fixed width, so no byte is ever stripped)."""
FORMAT = "hf_tlaser.teacher-vectors"
VERSION = 1


def text_keys(texts: Sequence[str]) -> np.ndarray:
    """The SHA-1 of every text (``S20`` array [N]): the key of the text in the cache and in a ``vectors:`` file."""
    return np.array([hashlib.sha1(text.encode("utf-8")).digest() for text in texts], dtype=KEY_DTYPE).reshape(-1)


def texts_digest(texts_or_keys: Sequence[str] | np.ndarray) -> str:
    """Hex SHA-1 of an ordered list of texts (of their keys, in order): equal only for the same texts in the same
    order."""
    keys = texts_or_keys if isinstance(texts_or_keys, np.ndarray) else text_keys(texts_or_keys)
    return hashlib.sha1(np.ascontiguousarray(keys, dtype=KEY_DTYPE).tobytes()).hexdigest()


def sidecar_paths(path: str | os.PathLike) -> tuple[Path, Path, Path]:
    """``(matrix, keys, sidecar)`` paths of a ``vectors:`` file: ``x.npy``, ``x.keys.npy``, ``x.json``."""
    path = Path(path).expanduser()
    stem = path.name[: -len(".npy")] if path.name.endswith(".npy") else path.name
    return path, path.with_name(f"{stem}.keys.npy"), path.with_name(f"{stem}.json")


def save_npy(path: Path, array: np.ndarray) -> None:
    """Write ``array`` to ``path`` atomically: a hidden temporary file in the same folder, flushed to disk, then
    renamed over ``path`` (a reader sees the old file or the whole new one, never a part)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as handle:
            np.save(handle, array)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def save_json(path: Path, data: Mapping) -> None:
    """Write ``data`` as JSON atomically (as :func:`save_npy`)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def write_vectors(
    path: str | os.PathLike,
    texts: Sequence[str],
    vectors,
    teacher: Mapping | None = None,
    dtype: str = "float16",
    chunk_rows: int = 65536,
    **extra,
) -> Path:
    """Write a ``vectors:`` file for ``texts`` (row i = ``vectors[i]``) and return its path.

    ``vectors``: an array [N, d], or anything with that ``shape`` whose row slices are arrays (read ``chunk_rows``
    at a time, so the whole matrix need not be in memory). ``teacher`` (``Teacher.to_dict()``) records who computed
    them; ``extra`` keys (corpora, languages, limit) go to the sidecar. ``ValueError`` when the rows do not match the
    texts or a value overflows ``dtype``. Every file is written to a temporary file and renamed; the sidecar last.
    """
    matrix, keys_path, sidecar = sidecar_paths(path)
    shape = tuple(vectors.shape)
    if len(shape) != 2 or shape[0] != len(texts):
        raise ValueError(f"vectors of shape {shape} for {len(texts)} texts; expected ({len(texts)}, dim)")
    matrix.parent.mkdir(parents=True, exist_ok=True)
    tmp = matrix.with_name(f".{matrix.name}.{os.getpid()}.tmp")
    try:
        out = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.dtype(dtype), shape=shape)
        for start in range(0, shape[0], chunk_rows):
            rows = np.asarray(vectors[start : start + chunk_rows]).astype(dtype)
            if not np.isfinite(rows).all():
                raise ValueError(f"the vectors do not fit {dtype} (inf or NaN); write them as float32")
            out[start : start + len(rows)] = rows
        out.flush()
        del out
        os.replace(tmp, matrix)
    finally:
        tmp.unlink(missing_ok=True)
    keys = text_keys(texts)
    save_npy(keys_path, keys)
    meta = {
        "format": FORMAT,
        "version": VERSION,
        "rows": len(texts),
        "dim": int(shape[1]),
        "dtype": str(np.dtype(dtype)),
        "texts_sha1": texts_digest(keys),
        "teacher": dict(teacher or {}),
        **extra,
    }
    save_json(sidecar, meta)
    return matrix


class VectorsEncoder(Encoder):
    """Precomputed vectors (a ``vectors:PATH`` file): ``encode`` looks every text up by its SHA-1."""

    kind = "vectors"

    def __init__(self, path: Path, argument: str, meta: dict, **fields) -> None:
        super().__init__(**fields)
        self.path = path
        self.argument = argument
        self.meta = meta
        matrix, keys, _ = sidecar_paths(path)
        self.vectors = np.load(matrix, mmap_mode="r")
        self.keys = np.load(keys)
        self._order = np.argsort(self.keys, kind="stable")

    def describe(self) -> str:
        teacher = self.meta.get("teacher") or {}
        return (
            f"vectors {self.path} ({self.meta['rows']} rows, {self.dim} dimensions) of {teacher.get('kind', '?')} "
            f"model {teacher.get('identity', '?')} (prompt {teacher.get('prompt')!r})"
        )

    def check_texts(self, texts: Sequence[str]) -> None:
        """``UsageError`` unless ``texts`` are the texts the vectors were computed for, in the same order."""
        where = f"{self.argument} {VECTORS_PREFIX}{self.path}"
        hint = "recompute it with hf-tlaser teacher-vectors --output for this corpus"
        if len(texts) != self.meta["rows"]:
            raise UsageError(f"{where} holds {self.meta['rows']} rows but the corpus gives {len(texts)} texts; {hint}")
        digest = texts_digest(texts)
        if digest != self.meta["texts_sha1"]:
            raise UsageError(
                f"{where}: its texts differ from the corpus's (texts hash {self.meta['texts_sha1'][:12]} vs "
                f"{digest[:12]}): another corpus, order or --limit; {hint}"
            )

    def rows_of(self, texts: Sequence[str]) -> np.ndarray:
        """Row of every text in the file; ``UsageError`` naming the first text that is not there."""
        keys = text_keys(texts)
        position = np.searchsorted(self.keys, keys, sorter=self._order)
        position = np.minimum(position, len(self.keys) - 1)
        rows = self._order[position] if len(self.keys) else np.zeros(len(keys), dtype=np.int64)
        missing = np.flatnonzero(self.keys[rows] != keys) if len(self.keys) else np.arange(len(keys))
        if len(missing):
            first = texts[int(missing[0])]
            raise UsageError(
                f"{self.argument} {VECTORS_PREFIX}{self.path}: {len(missing)} of {len(texts)} texts are not in it "
                f"(first: {first[:60]!r}); recompute it with hf-tlaser teacher-vectors --output for this corpus"
            )
        return rows

    def _encode(self, texts: list[str], batch_size: int, show_progress: bool) -> np.ndarray:
        rows = self.rows_of(texts)
        order = np.argsort(rows)  # memory-mapped rows read in file order
        out = np.empty((len(rows), self.dim), dtype=np.float32)
        out[order] = self.vectors[rows[order]]
        return out


def load_vectors(spec: str, argument: str) -> VectorsEncoder:
    path = Path(spec[len(VECTORS_PREFIX) :]).expanduser()
    where = f"{argument} {spec}"
    hint = "write it with hf-tlaser teacher-vectors --output PATH.npy"
    matrix, keys, sidecar = sidecar_paths(path)
    if not path.name.endswith(".npy"):
        raise UsageError(f"{where}: expected a .npy file; {hint}")
    for file in (matrix, keys, sidecar):
        if not file.is_file():
            raise UsageError(f"{where}: {file} does not exist; {hint}")
    try:
        meta = json.loads(sidecar.read_text(encoding="utf-8"))
        shape = np.load(matrix, mmap_mode="r").shape
        key_array = np.load(keys, mmap_mode="r")
    except (OSError, ValueError, EOFError) as err:
        raise UsageError(f"{where}: unreadable ({first_line(err)}); {hint}") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT or meta.get("version") != VERSION:
        raise UsageError(f"{where}: {sidecar} is not a {FORMAT} v{VERSION} sidecar; {hint}")
    rows = meta.get("rows")
    if shape != (rows, meta.get("dim")) or key_array.shape != (rows,) or key_array.dtype != KEY_DTYPE:
        raise UsageError(
            f"{where}: the files do not agree (matrix {shape}, {key_array.shape[0]} keys, sidecar {rows} rows x "
            f"{meta.get('dim')}): truncated or mixed files; {hint}"
        )
    teacher = meta.get("teacher") or {}
    return VectorsEncoder(
        path,
        argument,
        meta,
        spec=spec,
        name=f"vectors {path.name}",
        identity=f"{path.resolve()} (from {teacher.get('identity', 'an unknown teacher')})",
        fingerprint=teacher.get("fingerprint") or f"vectors-{meta['texts_sha1']}",
        dim=meta["dim"],
        languages=teacher.get("languages"),
        prompt_name=teacher.get("prompt_name"),
        prompt=teacher.get("prompt"),
    )

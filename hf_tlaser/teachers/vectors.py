"""Text keys and the ``vectors:`` file: teacher vectors precomputed for an ordered list of texts.

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

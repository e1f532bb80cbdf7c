"""The embeddings file of ``hf-tlaser embed``, read by ``hf-tlaser mine`` and by anyone with numpy.

An output ``PATH`` (``*.npy``) is a plain numpy array [count, dim] of float16 or float32, row i the vector of input
line ``start + i``; ``np.load(PATH, mmap_mode="r")`` maps it without reading it. Beside it, ``PATH.json`` (the
sidecar) says what the rows are:

==================== ==================================================================================
key                  meaning
==================== ==================================================================================
format               ``hf_tlaser-embeddings/1``
model                the model SPEC as given (folder or Hub id)
fingerprint          hash of what determines the vectors: the model's files (weights, tokenizer) and the
                     prompt; two files are comparable when their fingerprints are equal
dim, count, dtype    width, rows and stored dtype of the array
normalized           rows scaled to unit length
input                the text file; ``input_lines`` its line count, ``input_size`` its bytes, ``input_sha256``
                     the SHA-256 of its bytes (``--resume`` and ``hf-tlaser mine`` refuse another file)
start, stop          0-based input line range of this file (``lines`` = stop - start = count)
shard                ``[i, n]`` for ``--shard i/n``, else null
truncated            lines the model did not see whole (over its token length, or a document cut to its words)
cut                  lines over ``MAX_LINE_CHARS`` characters, cut to them before tokenisation
empty                empty lines (embedded as the empty text)
prompt               the prompt prepended to every line (sentence-transformers models), else null
precision            forward precision (fp32, bf16, fp16)
documents            ``whole`` or ``sentences`` for document lines, else null
hf_tlaser_version    the package version that wrote it
==================== ==================================================================================

While a run works, its rows go to ``PATH.partial`` (a ``.npy`` whose blocks are allocated on disk before the first
row is written, ``os.posix_fallocate``: a full disk fails there, as one line, and never as a SIGBUS on a sparse memory
map), its settings to ``PATH.partial.settings.json`` and each process logs the chunks it finished to
``PATH.partial.done-RANK``; :class:`EmbeddingsWriter` resumes from them. At the end the sidecar ``PATH.json`` is
renamed into place, then ``PATH.partial`` to ``PATH``: a ``PATH`` without ``PATH.json`` is never a finished output,
and a run killed between the two renames leaves ``PATH.partial`` and its logs, which ``--resume`` finishes.
"""

from __future__ import annotations

import errno
import json
import logging
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from hf_tlaser.errors import UsageError
from hf_tlaser.guards import check_space, write_failed

logger = logging.getLogger(__name__)

FORMAT = "hf_tlaser-embeddings/1"
DTYPES = ("float16", "float32")
PARTIAL = ".partial"
"""Suffix of an unfinished run's files (``PATH.partial``, ``PATH.partial.settings.json``, ``PATH.partial.done-R``)."""
MAKE_HINT = "make it with hf-tlaser embed --output PATH.npy"
_SUMMED = ("count", "lines", "truncated", "empty", "cut")
_SAME = ("fingerprint", "dim", "dtype", "normalized", "input", "input_lines", "input_sha256", "prompt", "documents")


def sidecar_path(path: str | os.PathLike) -> Path:
    """``PATH.json``: the sidecar of the embeddings file ``PATH``."""
    return Path(f"{path}.json")


def partial_paths(path: str | os.PathLike) -> tuple[Path, Path]:
    """``(PATH.partial, PATH.partial.settings.json)``: the rows and the settings of an unfinished run."""
    partial = Path(f"{path}{PARTIAL}")
    return partial, Path(f"{partial}.settings.json")


def _write_json(path: Path, data: dict) -> None:
    """Write ``data`` to ``path`` atomically (a temporary file renamed over it)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def write_sidecar(path: str | os.PathLike, meta: dict) -> Path:
    """Write the sidecar ``PATH.json`` of ``path`` atomically (``format`` added when missing); its path."""
    target = sidecar_path(path)
    _write_json(target, {"format": FORMAT, **meta})
    return target


def read_sidecar(path: str | os.PathLike, argument: str | None = None) -> dict:
    """The sidecar of an embeddings file; ``UsageError`` (prefixed with ``argument``) when the file or its sidecar is
    missing, unreadable or of another format."""
    where = f"{argument} {path}" if argument else str(path)
    path, sidecar = Path(path), sidecar_path(path)
    if not path.is_file():
        partial = partial_paths(path)[0]
        if partial.is_file():
            raise UsageError(f"{where}: unfinished ({partial} exists); finish it with hf-tlaser embed ... --resume")
        raise UsageError(f"{where}: no such file; {MAKE_HINT}")
    if not sidecar.is_file():
        raise UsageError(f"{where}: no sidecar {sidecar.name} beside it: not an hf-tlaser embed output; {MAKE_HINT}")
    try:
        meta = json.loads(sidecar.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise UsageError(f"{where}: unreadable sidecar {sidecar.name} ({err}); {MAKE_HINT}") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise UsageError(f"{where}: {sidecar.name} is not a {FORMAT} sidecar; {MAKE_HINT}")
    return meta


def _open_one(path: Path, argument: str | None) -> tuple[np.ndarray, dict]:
    meta = read_sidecar(path, argument)
    where = f"{argument} {path}" if argument else str(path)
    try:
        array = np.load(path, mmap_mode="r")
    except (OSError, ValueError, EOFError) as err:
        raise UsageError(f"{where}: unreadable ({err}); {MAKE_HINT}") from None
    if array.shape != (meta.get("count"), meta.get("dim")) or array.dtype.name != meta.get("dtype"):
        raise UsageError(
            f"{where}: the array ({array.shape}, {array.dtype}) and its sidecar ({meta.get('count')} x "
            f"{meta.get('dim')}, {meta.get('dtype')}) disagree: a damaged or mixed file; {MAKE_HINT}"
        )
    return array, {**meta, "path": str(path)}


def describe(meta: dict) -> str:
    """One line naming an embeddings file (or the shard files of one, :func:`read_embeddings`) by its path, model,
    fingerprint and width."""
    fingerprint = str(meta.get("fingerprint"))[:12]
    where = meta.get("path") or " + ".join(meta.get("paths") or ["?"])
    return f"{where} ({meta.get('model')}, fingerprint {fingerprint}, {meta.get('dim')} dimensions)"


def check_compatible(a_meta: dict, b_meta: dict, what: str) -> None:
    """``UsageError`` (one line naming both files, prefixed with ``what``) unless two embeddings files come from the
    same model and prompt (equal fingerprints) and have the same width."""
    if a_meta.get("fingerprint") != b_meta.get("fingerprint") or a_meta.get("dim") != b_meta.get("dim"):
        raise UsageError(
            f"{what}: {describe(a_meta)} and {describe(b_meta)} come from different models or prompts; "
            "embed both with the same --model and --prompt"
        )


def first_non_finite(array: np.ndarray, block: int = 65536) -> int | None:
    """The first row of ``array`` [N, d] holding NaN or Inf, read ``block`` rows at a time (a memory map stays
    mapped); None when every value is finite."""
    for start in range(0, len(array), block):
        bad = ~np.isfinite(np.asarray(array[start : start + block])).all(axis=1)
        if bad.any():
            return start + int(np.argmax(bad))
    return None


def not_finite(side: str, row: int, texts_path: Path | str) -> str:
    """The one line for ``--{side}-embeddings``' vector of line ``row`` (0-based) of ``texts_path``, not finite."""
    return (
        f"--{side}-embeddings: the vector of line {row + 1} of {texts_path} is not finite (NaN or Inf); embed the "
        "file again with a sound model"
    )


class StackedRows:
    """Several [n_i, d] arrays of one dtype (memory maps) read as one [sum n_i, d] array without concatenating them:
    ``stacked[rows]`` (an integer, a slice or an array of row numbers) reads only those rows, from the files that
    hold them; ``np.asarray(stacked)`` reads them all."""

    def __init__(self, parts: Sequence[np.ndarray]) -> None:
        self.parts = list(parts)
        self.starts = np.cumsum([0] + [len(part) for part in self.parts])
        self.dtype = self.parts[0].dtype
        self.shape = (int(self.starts[-1]), int(self.parts[0].shape[1]))
        self.ndim = 2

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, key: int | slice | np.ndarray) -> np.ndarray:
        if isinstance(key, slice):
            return self[np.arange(*key.indices(len(self)))]
        rows = np.asarray(key)
        if rows.ndim == 0:
            return self[rows.reshape(1)][0]
        rows = np.where(rows < 0, rows + len(self), rows)
        if rows.size and (rows.min() < 0 or rows.max() >= len(self)):
            raise IndexError(f"row {int(rows.max() if rows.max() >= len(self) else rows.min())} of {len(self)} rows")
        out = np.empty((len(rows), self.shape[1]), dtype=self.dtype)
        part = np.searchsorted(self.starts, rows, side="right") - 1
        for p in np.unique(part).tolist():
            chosen = part == p
            out[chosen] = self.parts[p][rows[chosen] - self.starts[p]]
        return out

    def __array__(self, dtype: np.dtype | None = None, copy: bool | None = None) -> np.ndarray:
        joined = np.concatenate(self.parts)
        return joined if dtype is None else joined.astype(dtype)


def read_embeddings(
    paths: str | os.PathLike | Sequence[str | os.PathLike], argument: str | None = None
) -> tuple[np.ndarray | StackedRows, dict]:
    """The rows and sidecar of one embeddings file (a read-only memory map), or of several shard files of one input
    and model (``--shard i/n`` outputs, in any order): checked compatible and covering the input's lines without gap
    or overlap, read as one array in line order without joining them (:class:`StackedRows` of their memory maps:
    indexing reads only the rows asked for; ``np.asarray`` joins them in memory). The returned meta of several files
    sums ``count``, ``lines``, ``truncated`` and ``empty``, spans their ``start``/``stop``, has ``shard`` null and
    lists ``paths``. ``UsageError`` (prefixed with ``argument``) naming the file at fault."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    if not paths:
        raise UsageError(f"{argument or 'embeddings'}: no file given; {MAKE_HINT}")
    parts = sorted((_open_one(Path(p), argument) for p in paths), key=lambda part: part[1].get("start", 0))
    if len(parts) == 1:
        return parts[0]
    where = argument or "embeddings"
    first = parts[0][1]
    for _, meta in parts[1:]:
        check_compatible(first, meta, where)
        differ = [key for key in _SAME if meta.get(key) != first.get(key)]
        if differ:
            raise UsageError(
                f"{where}: {meta['path']} and {first['path']} differ in {', '.join(differ)}: not shards of one "
                "embedding run; give the shards of one input, model and settings"
            )
    expected = 0
    for _, meta in parts:
        if meta["start"] != expected:
            problem = f"lines {expected}-{meta['start'] - 1} are missing" if meta["start"] > expected else "overlaps"
            raise UsageError(f"{where}: {meta['path']} starts at line {meta['start']}: {problem}; give each shard once")
        expected = meta["stop"]
    if expected != first["input_lines"]:
        raise UsageError(
            f"{where}: the shards stop at line {expected} of {first['input_lines']}: lines {expected}-"
            f"{first['input_lines'] - 1} are missing; give every shard"
        )
    array = StackedRows([array for array, _ in parts])
    meta = {**first, **{key: sum(m.get(key, 0) for _, m in parts) for key in _SUMMED}}
    meta.update(start=0, stop=expected, shard=None, path=None, paths=[m["path"] for _, m in parts])
    return array, meta


def allocate(path: Path, rows: int, dim: int, dtype: str) -> None:
    """Write an ``.npy`` [rows, dim] of ``dtype`` at ``path`` whose data blocks are allocated on disk
    (``os.posix_fallocate``; ``OSError`` ENOSPC when they do not fit), to be filled through a memory map. Where the
    filesystem cannot allocate ahead, the file is extended sparse, as ``open_memmap`` does."""
    header = {"descr": np.lib.format.dtype_to_descr(np.dtype(dtype)), "fortran_order": False, "shape": (rows, dim)}
    with open(path, "wb") as handle:
        np.lib.format.write_array_header_1_0(handle, header)
        size = handle.tell() + rows * dim * np.dtype(dtype).itemsize
        try:
            os.posix_fallocate(handle.fileno(), 0, size)
        except OSError as err:
            if err.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
                raise
            logger.warning("%s: the filesystem cannot allocate ahead (%s); a full disk may stop the run", path, err)
            handle.truncate(size)


class EmbeddingsWriter:
    """Rows of one embedding run written chunk by chunk into ``PATH.partial``, resumable, renamed to ``PATH`` with
    its sidecar at the end.

    One process (rank 0) calls :meth:`prepare` first; then every process opens a writer (``rank``: its index),
    writes the chunks it computes with :meth:`write_chunk` (rows flushed to disk before the chunk is logged as
    done), and rank 0 calls :meth:`finish` once every chunk is done. :meth:`finished` lists the chunks any process
    finished, in this run or an earlier one of the same settings.
    """

    def __init__(self, path: str | os.PathLike, rank: int = 0) -> None:
        self.path = Path(path)
        self.partial, settings_file = partial_paths(path)
        self.settings = json.loads(settings_file.read_text(encoding="utf-8"))
        self.rows = np.lib.format.open_memmap(self.partial, mode="r+")
        self.rank = rank

    @staticmethod
    def check_output(path: str | os.PathLike, resume: bool) -> bool:
        """Cheap checks before any work: ``UsageError`` when ``PATH`` (or its sidecar) exists, or when an
        unfinished run's files exist and ``resume`` is off. True when ``resume`` finds ``PATH`` already finished.
        A sidecar beside ``PATH.partial`` (a run killed between its two final renames) is left to ``--resume``."""
        path = Path(path)
        partial, _ = partial_paths(path)
        if path.exists() or sidecar_path(path).exists():
            if resume and path.is_file() and sidecar_path(path).is_file() and not partial.exists():
                return True
            if not (resume and not path.exists() and partial.is_file()):
                raise UsageError(f"--output {path}: exists; choose another path or remove it (and {path.name}.json)")
        if partial.exists() and not resume:
            raise UsageError(
                f"--output {path}: an interrupted run left {partial.name}; give --resume to continue it, or remove "
                f"{partial.name}*"
            )
        return False

    @staticmethod
    def prepare(path: str | os.PathLike, rows: int, dim: int, dtype: str, settings: dict, resume: bool) -> int:
        """Create ``PATH.partial`` [rows, dim], its blocks allocated (or, with ``resume``, check that the one there
        has these ``settings``); the number of chunks already done. ``UsageError`` naming the first setting that
        differs, or when the disk has no room for the rows (checked, then allocated: one line, no SIGBUS later)."""
        partial, settings_file = partial_paths(path)
        if resume and partial.exists():
            try:
                old = json.loads(settings_file.read_text(encoding="utf-8"))
                shape = np.load(partial, mmap_mode="r").shape
            except (OSError, ValueError, EOFError) as err:
                raise UsageError(
                    f"--resume: {partial} is unreadable ({err}); remove {partial.name}* and start again"
                ) from None
            differ = [key for key in settings if old.get(key) != settings[key]]
            if differ:
                key = differ[0]
                raise UsageError(
                    f"--resume: {partial.name} was started with {key}={old.get(key)!r}, this run has "
                    f"{settings[key]!r}; give the same arguments, or remove {partial.name}* and start again"
                )
            if shape != (rows, dim):
                raise UsageError(f"--resume: {partial} holds {shape}, not {(rows, dim)}; remove it and start again")
            done = len(EmbeddingsWriter.done_chunks(path))
            logger.info("resuming %s: %d chunks already done", partial, done)
            return done
        if resume:
            logger.info("--resume: no unfinished run at %s; starting it", partial)
        for stale in partial.parent.glob(f"{partial.name}.done-*"):
            stale.unlink()
        EmbeddingsWriter.check_room(path, rows, dim, dtype)
        try:
            allocate(partial, rows, dim, dtype)
            _write_json(settings_file, settings)
        except OSError as err:
            partial.unlink(missing_ok=True)
            raise write_failed(err, partial, f"--output {path}") from None
        return 0

    @staticmethod
    def check_room(path: str | os.PathLike, rows: int, dim: int, dtype: str) -> None:
        """``UsageError`` when the filesystem of ``PATH`` lacks the room for a new run's ``PATH.partial`` of ``rows``
        x ``dim`` ``dtype`` values (an unfinished run's file, already allocated, needs none)."""
        partial = partial_paths(path)[0]
        if not partial.exists():
            check_space(partial.parent, rows * dim * np.dtype(dtype).itemsize, f"--output {path}", "the embeddings")

    @staticmethod
    def done_chunks(path: str | os.PathLike) -> dict[int, dict]:
        """``{chunk: its record}`` of every chunk logged as done by any process (complete log lines only)."""
        partial, _ = partial_paths(path)
        done: dict[int, dict] = {}
        for log in sorted(partial.parent.glob(f"{partial.name}.done-*")):
            text = log.read_text(encoding="utf-8")
            for line in text.split("\n")[:-1]:  # a last line without "\n" was cut by a kill
                record = json.loads(line)
                done[record["chunk"]] = record
        return done

    def finished(self) -> dict[int, dict]:
        """The chunks done so far (see :meth:`done_chunks`)."""
        return self.done_chunks(self.path)

    def write_chunk(self, chunk: int, offset: int, vectors: np.ndarray, **stats: int) -> None:
        """Store ``vectors`` at rows ``offset...``, flush them to disk, then log ``chunk`` as done with ``stats``."""
        self.rows[offset : offset + len(vectors)] = vectors
        self.rows.flush()
        record = {"chunk": chunk, "offset": offset, "rows": len(vectors), **stats}
        with open(f"{self.partial}.done-{self.rank}", "a", encoding="utf-8") as log:
            log.write(json.dumps(record) + "\n")
            log.flush()
            os.fsync(log.fileno())

    def finish(self, chunks: int, meta: dict) -> dict:
        """Rank 0, once every process finished: check that all ``chunks`` are done, write the sidecar (``meta`` plus
        the summed chunk stats), rename ``PATH.partial`` to ``PATH`` and remove the run's other files; the sidecar."""
        done = self.finished()
        missing = sorted(set(range(chunks)) - set(done))
        if missing:
            raise RuntimeError(f"{self.partial}: chunks {missing[:10]} were not written; run again with --resume")
        stats = {key: sum(record[key] for record in done.values()) for key in ("truncated", "empty", "cut")}
        self.rows.flush()
        del self.rows
        meta = {"format": FORMAT, **meta, **stats}
        _write_json(sidecar_path(self.path), meta)  # first: PATH without PATH.json is never taken as finished
        os.replace(self.partial, self.path)
        partial, settings_file = partial_paths(self.path)
        for leftover in [settings_file, *partial.parent.glob(f"{partial.name}.done-*")]:
            leftover.unlink()
        return meta

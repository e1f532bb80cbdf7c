"""The text files of a bitext, read once and checked, and the one TSV writer of mined pairs.

:func:`read_texts` reads a plain or gzipped UTF-8 file in one pass: its lines (split as
:func:`hf_tlaser.data.readers.iter_lines` splits them, so line numbers agree with ``wc -l`` and ``hf-tlaser embed``)
and the SHA-256 of its (decompressed) bytes, which ``hf-tlaser embed`` records as its input's. A tab or a
line-breaking character inside a text (``\\r``, U+2028, U+2029, U+0085, ...: :data:`TSV_BREAKS`) is written as a
space by :func:`write_tsv`, so every row has three columns; the texts changed so are counted and logged.
:func:`write_lines` writes, in the same format, where each pair's texts are in the files read.

For files too large to hold (a staged pipeline at billions of lines): :func:`digest_texts` gives a file's line count
and SHA-256 in one pass holding a chunk of bytes, :func:`line_keys` a slice of its lines as 128-bit keys
(:func:`text_keys`: identical texts share a key), and :func:`lines_at` the lines of given numbers.
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import os
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from hf_tlaser.data.readers import iter_lines, open_binary
from hf_tlaser.errors import UsageError

logger = logging.getLogger(__name__)

TSV_BREAKS = "\t\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029"
"""Characters that split a TSV's columns (tab) or its rows (every character ``str.splitlines`` breaks at)."""
_TSV_TABLE = str.maketrans(dict.fromkeys(TSV_BREAKS, " "))


KEY_DTYPE = np.dtype([("hi", "<u8"), ("lo", "<u8")])
"""A text's key: the 128 bits of its BLAKE2b digest (:func:`text_keys`); a blank line's is zero (:func:`line_keys`)."""
CHUNK = 1 << 20
"""Bytes read at a time by :func:`digest_texts`."""


@dataclass(frozen=True)
class TextDigest:
    """What identifies a text file: its line count (as :func:`read_texts` splits it) and the SHA-256 of its
    (decompressed) bytes."""

    lines: int
    sha256: str


@dataclass(frozen=True)
class Texts:
    """The lines of a text file and the SHA-256 of its (decompressed) bytes."""

    lines: list[str]
    sha256: str

    @property
    def digest(self) -> TextDigest:
        return TextDigest(len(self.lines), self.sha256)


def check_text_file(path: Path, argument: str) -> None:
    """``UsageError`` when ``path`` is missing or empty."""
    if not path.is_file():
        raise UsageError(f"{argument} {path}: no such file")
    if path.stat().st_size == 0:
        raise UsageError(f"{argument} {path}: the file is empty; give a text file with one sentence per line")


def unreadable(argument: str, path: Path, err: Exception) -> UsageError:
    """The one line for a truncated ``.gz``, or plain text named ``.gz``."""
    return UsageError(f"{argument} {path}: unreadable ({err}); give plain or gzipped UTF-8 text")


def not_utf8(argument: str, err: UsageError) -> UsageError:
    """The one line for a line that is not UTF-8 (``err``: :func:`~hf_tlaser.data.readers.iter_lines`' error, which
    names the file and the line)."""
    return UsageError(f"{argument} {err}; convert it to UTF-8 (e.g. iconv -t UTF-8)")


def read_texts(path: Path, argument: str) -> Texts:
    """The lines of a plain or gzipped UTF-8 file and its digest, in one pass; ``UsageError`` when missing, empty,
    not UTF-8 (naming the line), a damaged or mislabelled ``.gz``, or every line blank."""
    check_text_file(path, argument)
    digest = hashlib.sha256()
    try:
        lines = list(iter_lines(path, digest.update))
    except UsageError as err:
        raise not_utf8(argument, err) from None
    except (OSError, EOFError, zlib.error) as err:
        raise unreadable(argument, path, err) from None
    if not any(text.strip() for text in lines):
        raise UsageError(f"{argument} {path}: every line is blank; give a text file with one sentence per line")
    return Texts(lines, digest.hexdigest())


def digest_texts(path: Path, argument: str) -> TextDigest:
    """The line count and SHA-256 of a plain or gzipped file, read in chunks of :data:`CHUNK` bytes (what
    :func:`read_texts` gives, without holding the lines or decoding them); ``UsageError`` when missing, empty or a
    damaged ``.gz``."""
    check_text_file(path, argument)
    digest, newlines, last = hashlib.sha256(), 0, b"\n"
    try:
        with open_binary(path) as handle:
            while chunk := handle.read(CHUNK):
                digest.update(chunk)
                newlines += chunk.count(b"\n")
                last = chunk[-1:]
    except (OSError, EOFError, zlib.error) as err:
        raise unreadable(argument, path, err) from None
    return TextDigest(newlines + (last != b"\n"), digest.hexdigest())


def text_keys(texts: Iterable[str]) -> np.ndarray:
    """Each text's :data:`KEY_DTYPE` key: identical texts share it, different ones differ but with probability
    2^-128 a pair."""
    digests = b"".join(hashlib.blake2b(text.encode(), digest_size=16).digest() for text in texts)
    return np.frombuffer(digests, dtype=KEY_DTYPE).copy()


def line_keys(path: Path, start: int, stop: int) -> np.ndarray:
    """The keys (:func:`text_keys`) of lines ``[start, stop)`` of ``path`` (0-based, split as :func:`read_texts`
    splits them), zero for a blank line; read up to ``stop`` holding those lines. ``DataFormatError`` naming the line
    when one is not UTF-8 (:func:`not_utf8` words it as :func:`read_texts` does)."""
    lines = list(itertools.islice(iter_lines(path), start, stop))
    keys = text_keys(lines)
    keys[np.fromiter((not text.strip() for text in lines), dtype=bool, count=len(lines))] = (0, 0)
    return keys


def lines_at(path: Path, numbers: Sequence[int], sha256: str) -> dict[int, str]:
    """The lines of ``path`` at ``numbers`` (0-based), read in one pass holding only those (split as
    :func:`read_texts` splits them); ``UsageError`` when the file's SHA-256 is no longer ``sha256``."""
    wanted, found = sorted(set(numbers)), {}
    digest = hashlib.sha256()
    position = 0
    for number, line in enumerate(iter_lines(path, digest.update)):
        if position < len(wanted) and number == wanted[position]:
            found[number] = line
            position += 1
    if digest.hexdigest() != sha256:
        raise UsageError(f"{path} changed since it was read (its SHA-256 is not {sha256[:12]}); mine it again")
    return found


def tsv_field(text: str) -> tuple[str, bool]:
    """``text`` with each tab and line-breaking character (``TSV_BREAKS``) replaced by a space, and whether any was."""
    clean = text.translate(_TSV_TABLE)
    return clean, clean != text


def write_tsv(rows: Iterable[tuple[float, str, str]], path: Path) -> int:
    """Write ``score<TAB>source<TAB>target`` lines (score with 6 decimals) atomically: nothing is left behind when it
    fails. Texts holding a tab or a line break have them as spaces (:func:`tsv_field`); returns how many texts were
    so changed, and logs it."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")  # this process's: never a file of the user's
    changed = 0
    try:
        with tmp.open("w", encoding="utf-8", newline="\n") as out:
            for score, source, target in rows:
                (src, src_changed), (tgt, tgt_changed) = tsv_field(source), tsv_field(target)
                changed += src_changed + tgt_changed
                out.write(f"{score:.6f}\t{src}\t{tgt}\n")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    if changed:
        logger.warning("%d texts held tabs or line breaks, written as spaces in %s", changed, path)
    return changed


def write_lines(scores: Sequence[float], src_lines: Sequence[int], tgt_lines: Sequence[int], path: Path) -> None:
    """Write ``score<TAB>source line<TAB>target line`` (0-based line numbers in the two text files) atomically, as
    :func:`write_tsv` writes the pairs: line n describes line n of their TSV."""
    write_tsv(((score, str(i), str(j)) for score, i, j in zip(scores, src_lines, tgt_lines)), path)

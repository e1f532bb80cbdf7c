"""The input of ``hf-tlaser embed``: the lines of a text file in bounded memory, scanned once (count, UTF-8 check,
SHA-256) and read in the chunks of a run's plan (its shard of whole chunks).

A line is split on ``"\\n"`` only, its trailing ``"\\r"``/``"\\n"`` removed and a first line's BOM dropped, as
:func:`hf_tlaser.data.readers.iter_lines` does, so line numbers agree with ``wc -l`` and with ``hf-tlaser mine``. A
line over ``MAX_LINE_CHARS`` characters is cut to its first ``MAX_LINE_CHARS`` before it is tokenised and counted
(sidecar ``cut``); the rest is read in blocks of ``BLOCK`` bytes, checked as UTF-8 and dropped, so one huge line
never holds more than about ``4 * MAX_LINE_CHARS`` bytes in memory. A cut line that holds a ``"\\r"`` is refused: it
is a file with ``"\\r"``-only (old Mac) line endings, which would otherwise be one line.
"""

from __future__ import annotations

import codecs
import hashlib
import itertools
import logging
import math
import os
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from hf_tlaser.data.readers import open_binary
from hf_tlaser.errors import UsageError

logger = logging.getLogger(__name__)

MAX_LINE_CHARS = 100_000
"""Characters of a line that are tokenised; the rest is dropped and the line counted as cut. Far above any model's
token limit (512 tokens are a few thousand characters), so a sentence's vector is unchanged; a ``--documents
sentences`` line loses its sentences past it."""
BLOCK = 1 << 20
"""Bytes read at a time from the rest of a cut line."""


def _decode_error(path: Path, lineno: int, err: UnicodeDecodeError, offset: int = 0) -> UsageError:
    return UsageError(f"{path}:{lineno}: not valid UTF-8 ({err.reason} at byte {offset + err.start})")


def read_lines(
    path: str | os.PathLike, limit: int = MAX_LINE_CHARS, update: Callable[[bytes], object] | None = None
) -> Iterator[tuple[str, bool]]:
    """``(text, cut)`` for every line of a plain or gzipped UTF-8 file (see the module docstring); ``UsageError``
    naming the line where bytes are not UTF-8 or where a cut line holds a ``"\\r"``. ``update`` (e.g. a ``hashlib``
    object's), when given, is called with every byte read (decompressed), so that one pass also hashes the file."""
    path = Path(path)
    head_bytes = 4 * limit + 4  # at least ``limit`` characters, and the line end
    with open_binary(path) as handle:
        lineno = 0
        while raw := handle.readline(head_bytes):
            if update is not None:
                update(raw)
            lineno += 1
            decoder = codecs.getincrementaldecoder("utf-8")()
            long = not raw.endswith(b"\n") and len(raw) == head_bytes
            try:
                text = decoder.decode(raw, final=not long)
            except UnicodeDecodeError as err:
                raise _decode_error(path, lineno, err) from None
            rest, returns, offset = 0, 0, len(raw)
            while long:
                more = handle.readline(BLOCK)
                if update is not None:
                    update(more)
                try:
                    decoder.decode(more, final=not more)
                except UnicodeDecodeError as err:
                    raise _decode_error(path, lineno, err, offset) from None
                body = more.rstrip(b"\r\n") if more.endswith(b"\n") else more
                rest, returns, offset = rest + len(body), returns + body.count(b"\r"), offset + len(more)
                long = bool(more) and not more.endswith(b"\n")
            if lineno == 1:
                text = text.removeprefix("\ufeff")
            text = text.rstrip("\r\n")
            cut = rest > 0 or len(text) > limit
            if cut and (returns or "\r" in text):
                raise UsageError(
                    f"{path}:{lineno}: a line of over {limit:,} characters that holds carriage returns: a file with "
                    "\\r line endings? convert them to \\n (tr '\\r' '\\n' < FILE > NEW)"
                )
            yield (text[:limit], True) if cut else (text, False)


@dataclass(frozen=True)
class Plan:
    """Which input lines this run embeds: chunks ``first..last-1`` of ``chunk_size`` lines of the whole file (the
    same cut for every shard and process), i.e. lines ``start..stop-1``."""

    lines: int
    chunk_size: int
    first: int
    last: int

    @property
    def start(self) -> int:
        return min(self.first * self.chunk_size, self.lines)

    @property
    def stop(self) -> int:
        return min(self.last * self.chunk_size, self.lines)

    @property
    def chunks(self) -> int:
        return self.last - self.first

    def bounds(self, chunk: int) -> tuple[int, int]:
        """Input lines ``[begin, end)`` of the run's ``chunk``-th chunk (0-based within the run)."""
        begin = (self.first + chunk) * self.chunk_size
        return begin, min(begin + self.chunk_size, self.lines)


def plan_lines(lines: int, chunk_size: int, shard: tuple[int, int] | None) -> Plan:
    """The chunks of shard ``I/N`` (None: all): the I-th of N contiguous runs of whole chunks, as even as chunks
    allow (a shard gets none when N exceeds the number of chunks)."""
    total = math.ceil(lines / chunk_size)
    index, count = shard or (0, 1)
    return Plan(lines, chunk_size, index * total // count, (index + 1) * total // count)


@dataclass(frozen=True)
class Source:
    """A run's input: its file, line count and SHA-256, and its lines when a caller already holds them in memory
    (``hf-tlaser mine --model``), else ``None`` (read from the file in chunks)."""

    path: Path
    lines: int
    sha256: str
    texts: list[str] | None = None


def read_chunks(source: Source, plan: Plan) -> Iterator[tuple[int, list[str], int]]:
    """``(chunk, its lines, how many of them were cut)`` for every chunk of ``plan``, read in one pass (lines cut
    to ``MAX_LINE_CHARS`` characters, :func:`~hf_tlaser.inference.lines.read_lines`)."""
    if source.texts is None:
        lines = itertools.islice(read_lines(source.path), plan.start, plan.stop)
    else:
        held = itertools.islice(source.texts, plan.start, plan.stop)
        lines = ((text[:MAX_LINE_CHARS], len(text) > MAX_LINE_CHARS) for text in held)
    for chunk in range(plan.chunks):
        begin, end = plan.bounds(chunk)
        pairs = list(itertools.islice(lines, end - begin))
        yield chunk, [text for text, _ in pairs], sum(cut for _, cut in pairs)


def scan_input(source: Path, argument: str = "--input") -> Source:
    """The input's line count and SHA-256 in one pass, every line decoded (``UsageError`` naming the first line that
    is not UTF-8, or a file with ``\r`` line endings); logs how many lines are over ``MAX_LINE_CHARS`` characters."""
    lines = cut = 0
    digest = hashlib.sha256()
    try:
        for _, was_cut in read_lines(source, update=digest.update):
            lines += 1
            cut += was_cut
    except UsageError as err:
        hint = "" if "carriage returns" in str(err) else "; convert the file to UTF-8 (iconv -f ENCODING -t UTF-8)"
        raise UsageError(f"{argument} {err}{hint}") from None
    except (OSError, EOFError, zlib.error) as err:  # a damaged or mislabelled .gz
        raise UsageError(f"{argument} {source}: unreadable ({err}); give plain or gzipped UTF-8 text") from None
    if lines == 0:
        raise UsageError(f"{argument} {source}: no lines; nothing to embed")
    if cut:
        logger.warning("%s: %d lines are over %d characters and are cut to them", source, cut, MAX_LINE_CHARS)
    return Source(source, lines, digest.hexdigest())

"""Lines of a text file in bounded memory, for ``hf-tlaser embed``.

A line is split on ``"\\n"`` only, its trailing ``"\\r"``/``"\\n"`` removed and a first line's BOM dropped, as
:func:`hf_tlaser.data.readers.iter_lines` does, so line numbers agree with ``wc -l`` and with ``hf-tlaser mine``. A
line over ``MAX_LINE_CHARS`` characters is cut to its first ``MAX_LINE_CHARS`` before it is tokenised and counted
(sidecar ``cut``); the rest is read in blocks of ``BLOCK`` bytes, checked as UTF-8 and dropped, so one huge line
never holds more than about ``4 * MAX_LINE_CHARS`` bytes in memory. A cut line that holds a ``"\\r"`` is refused: it
is a file with ``"\\r"``-only (old Mac) line endings, which would otherwise be one line.
"""

from __future__ import annotations

import codecs
import os
from collections.abc import Callable, Iterator
from pathlib import Path

from hf_tlaser.data.readers import open_binary
from hf_tlaser.errors import UsageError

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

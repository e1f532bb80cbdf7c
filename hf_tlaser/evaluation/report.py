"""Markdown report helpers."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence], float_format: str = "{:.2f}") -> str:
    """A GitHub-flavoured markdown table; floats are formatted with ``float_format``."""

    def cell(value) -> str:
        return float_format.format(value) if isinstance(value, float) else str(value)

    lines = ["| " + " | ".join(map(str, headers)) + " |", "|" + "---|" * len(headers)]
    for row in rows:
        if len(row) != len(headers):
            raise ValueError(f"row {list(row)} has {len(row)} cells, expected {len(headers)}")
        lines.append("| " + " | ".join(cell(v) for v in row) + " |")
    return "\n".join(lines)


def write_report(path: str | os.PathLike, title: str, sections: Sequence[tuple[str, object]]) -> Path:
    """Write a markdown report: ``# title`` then ``## heading`` + body for each ``(heading, body)``.

    A body is a string, an object with ``to_markdown()``, or a :class:`~pathlib.Path` to an image (linked
    relative to the report).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    parts = [f"# {title}", ""]
    for heading, body in sections:
        if isinstance(body, Path):
            target = os.path.relpath(body.resolve(), path.parent.resolve())
            body = f"![{heading}]({Path(target).as_posix()})"
        elif hasattr(body, "to_markdown"):
            body = body.to_markdown()
        parts += [f"## {heading}", "", str(body).rstrip(), ""]
    path.write_text("\n".join(parts), encoding="utf-8")
    return path

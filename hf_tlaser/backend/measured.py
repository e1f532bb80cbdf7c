"""What a folder's ``backends.json`` says was measured of each backend on each CPU class (written by
``scripts/bench_backends.py``): read and checked (:func:`read_measured`), and whether a backend kept the quality
(:func:`accepted`), for ``backend="auto"`` (:func:`hf_tlaser.backend.runtime.choose_backend`)."""

from __future__ import annotations

import json
import logging
import math
import os
from pathlib import Path

logger = logging.getLogger(__name__)

MEASURED_FILE = "backends.json"
MAX_NTREX_LOSS = 0.2
"""Largest rise of the NTREX xsim error (points, 90 directions) at which ``choose_backend`` accepts a backend."""
MAX_SIB200_LOSS = 1.0
"""Largest fall of SIB-200 cross accuracy (points) at which ``choose_backend`` accepts a backend."""


MEASURED_FIELDS = ("speedup", "ntrex_delta", "sib200_delta")
"""The numbers a ``backends.json`` record may hold (each optional)."""


def measured_problem(data) -> str | None:
    """What is wrong with the contents of a ``backends.json`` (``{cpu_class: {backend: {field: number}}}``, fields
    of ``MEASURED_FIELDS``); None when nothing is."""
    if not isinstance(data, dict):
        return f"a JSON {type(data).__name__}, not an object"
    for cls, records in data.items():
        if not isinstance(records, dict):
            return f"{cls!r} holds a {type(records).__name__}, not an object of backends"
        for backend, record in records.items():
            if not isinstance(record, dict):
                return f"{cls!r} / {backend!r} holds a {type(record).__name__}, not an object"
            for field in MEASURED_FIELDS:
                value = record.get(field, 0.0)
                if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                    return f"{cls!r} / {backend!r} / {field!r} is {value!r}, not a number"
    return None


def read_measured(folder: str | os.PathLike) -> dict:
    """The folder's ``backends.json`` (``{cpu_class: {backend: record}}``); {} without one, and {} with a warning
    naming the file and its fault when it is not JSON or not of that shape (``backend="auto"`` then takes torch)."""
    path = Path(folder) / MEASURED_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as err:
        logger.warning("%s is unreadable (%s); ignored: backend auto takes torch", path, err)
        return {}
    problem = measured_problem(data)
    if problem:
        logger.warning("%s is malformed (%s); ignored: backend auto takes torch", path, problem)
        return {}
    return data


def accepted(record: dict) -> bool:
    """Whether a measured backend kept the quality: NTREX within ``MAX_NTREX_LOSS`` points and SIB-200 cross within
    ``MAX_SIB200_LOSS`` of torch fp32."""
    try:
        return record["ntrex_delta"] <= MAX_NTREX_LOSS and record["sib200_delta"] >= -MAX_SIB200_LOSS
    except (KeyError, TypeError):
        return False

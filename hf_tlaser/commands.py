"""What every ``hf-tlaser`` command's entry point does around its work: logging, the one-line usage error with exit
code 2, and the closing ``key: value`` summary."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable

from hf_tlaser.errors import UsageError


def run_command(command: str, work: Callable[[], int], *, log: bool = True) -> int:
    """INFO logging with timestamps (``log``), then ``work()``'s exit code; a ``UsageError`` becomes one line
    ``COMMAND: error: MESSAGE`` on stderr and exit code 2, with no traceback."""
    if log:
        logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
    try:
        return work()
    except UsageError as error:
        print(f"{command}: error: {' '.join(str(error).splitlines())}", file=sys.stderr)
        return 2


def print_summary(summary: dict | None) -> int:
    """Print a command's summary one ``key: value`` a line (nothing for ``None``, e.g. on a worker rank); return 0."""
    if summary:
        print("\n".join(f"{key}: {value}" for key, value in summary.items()))
    return 0

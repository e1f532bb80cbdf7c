"""User mistakes that the command lines report as one line on stderr with exit code 2 (no traceback)."""

from __future__ import annotations


class UsageError(ValueError):
    """A mistake in an argument, a file or the data that the user can fix; the message says what and how."""


class MissingDataError(UsageError, FileNotFoundError):
    """A data dir, corpus folder or corpus file that does not exist."""

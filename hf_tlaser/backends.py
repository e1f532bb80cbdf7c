"""Deprecated alias of :mod:`hf_tlaser.backend.runtime` (moved with ``hf-tlaser export`` into :mod:`hf_tlaser.backend`,
issue 49; the ``backends.json`` reading since in :mod:`hf_tlaser.backend.measured`); it goes in the next release.
Every name reads through with a ``DeprecationWarning``."""

from __future__ import annotations

import warnings

from hf_tlaser.backend import measured, runtime


def __getattr__(name: str):
    warnings.warn(
        f"hf_tlaser.backends.{name} is deprecated: import it from hf_tlaser.backend.runtime (or hf_tlaser.backend; "
        "backends.json's reading: hf_tlaser.backend.measured)",
        DeprecationWarning,
        stacklevel=2,
    )
    return getattr(runtime if hasattr(runtime, name) else measured, name)

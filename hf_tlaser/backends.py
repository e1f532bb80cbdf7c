"""Deprecated alias of :mod:`hf_tlaser.backend.runtime` (moved with ``hf-tlaser export`` into :mod:`hf_tlaser.backend`,
issue 49); it goes in the next release. Every name reads through with a ``DeprecationWarning``."""

from __future__ import annotations

import warnings

from hf_tlaser.backend import runtime


def __getattr__(name: str):
    warnings.warn(
        f"hf_tlaser.backends.{name} is deprecated: import it from hf_tlaser.backend.runtime (or hf_tlaser.backend)",
        DeprecationWarning,
        stacklevel=2,
    )
    return getattr(runtime, name)

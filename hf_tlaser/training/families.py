"""Deprecated: ``hf_tlaser.training.families.train`` is ``hf_tlaser.training.resolve.train`` (the run's plan, then
the training its ``Family`` names). Kept for one release, because docs/architecture.md showed scripts this name."""

from __future__ import annotations

import warnings

from hf_tlaser.training import resolve
from hf_tlaser.training.spec import RunSpec
from hf_tlaser.training.trainer import LaserTrainer


def train(spec: RunSpec) -> LaserTrainer:
    """Deprecated alias of ``hf_tlaser.training.resolve.train`` (a FutureWarning says so)."""
    warnings.warn(
        "hf_tlaser.training.families.train is deprecated and goes in the next release: use "
        "hf_tlaser.training.resolve.train (the same function)",
        FutureWarning,
        stacklevel=2,
    )
    return resolve.train(spec)

"""Which training each ``--model`` runs: a family with its own data path (cNV: an NMT pair, then the shared layers
over it) is listed in ``TRAINERS``; every other family trains on one joint BPE (``train_joint``)."""

from __future__ import annotations

from collections.abc import Callable

from hf_tlaser.training.cnv import train_cnv
from hf_tlaser.training.joint import train_joint
from hf_tlaser.training.spec import RunSpec
from hf_tlaser.training.trainer import LaserTrainer

TRAINERS: dict[str, Callable[[RunSpec], LaserTrainer]] = {"cnv": train_cnv}
"""``--model`` -> its training, for the families that do not train on one joint BPE."""


def train(spec: RunSpec) -> LaserTrainer:
    """Run one training job; returns the trainer (its ``args.output_dir`` holds the saved model).

    Raises UsageError (before reading any corpus where it can) on a mistake the user can fix; first on a flag the
    family does not take (``RunSpec.check_families``).
    """
    spec.check_families()
    return TRAINERS.get(spec.model, train_joint)(spec)

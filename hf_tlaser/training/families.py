"""Which training each ``--model`` runs: its family's data path (``Presets.data_path``) picks it in ``TRAINERS``:
one joint BPE (``train_joint``), or an NMT pair and then the shared layers over it (cNV, ``train_cnv``)."""

from __future__ import annotations

from collections.abc import Callable

from hf_tlaser.training.cnv import train_cnv
from hf_tlaser.training.joint import train_joint
from hf_tlaser.training.presets import MEMBERS
from hf_tlaser.training.spec import RunSpec
from hf_tlaser.training.trainer import LaserTrainer

TRAINERS: dict[str, Callable[[RunSpec], LaserTrainer]] = {"joint": train_joint, "nmt": train_cnv}
"""Data path (``Presets.data_path``, declared in the family's folder) -> its training."""


def train(spec: RunSpec) -> LaserTrainer:
    """Run one training job; returns the trainer (its ``args.output_dir`` holds the saved model).

    Raises UsageError (before reading any corpus where it can) on a mistake the user can fix; first on a flag the
    family does not take (``RunSpec.check_families``).
    """
    spec.check_families()
    return TRAINERS[MEMBERS[spec.model].family.presets.data_path](spec)

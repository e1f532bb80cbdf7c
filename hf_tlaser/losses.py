"""The cT-LASER distance-constraint loss (Li & Mak 2020, eq. 7-10), the in-batch alignment loss, their in-batch
negatives, the distillation term of ``--teacher``, and the collapse signals.

The implementation lives next to the model code (it must travel with ``trust_remote_code`` checkpoints); this is
its public home.
"""

from hf_tlaser.models.common.losses import (
    DistanceLossOutput,
    NegativeMemory,
    align_loss,
    centered_pair_cosine,
    distance_constraint_loss,
    distill_loss,
    mean_pairwise_cosine,
    sample_negatives,
    unique_pairs,
)

__all__ = [
    "DistanceLossOutput",
    "NegativeMemory",
    "distance_constraint_loss",
    "distill_loss",
    "sample_negatives",
    "unique_pairs",
    "align_loss",
    "mean_pairwise_cosine",
    "centered_pair_cosine",
]

"""Training: presets, the run spec, the curriculum Trainer and the ``hf-tlaser train`` command."""

from hf_tlaser.training.presets import MODELS, SIZES, Preset, Recipe, get_preset
from hf_tlaser.training.spec import RunSpec
from hf_tlaser.training.trainer import LaserTrainer, TimeBudgetCallback, inverse_sqrt_schedule

__all__ = [
    "MODELS",
    "SIZES",
    "Preset",
    "Recipe",
    "get_preset",
    "RunSpec",
    "LaserTrainer",
    "TimeBudgetCallback",
    "inverse_sqrt_schedule",
]

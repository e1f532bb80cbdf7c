"""LDT (Mao et al. 2021): the Lightweight Dual Transformer, a 2-layer encoder trained without a decoder."""

from transformers import AutoModelForPreTraining

from hf_tlaser.models.family import Family

from .configuration_ldt import LDTConfig
from .modeling_ldt import LDTForAlignment, LDTModel

FAMILY = Family(
    model_type="ldt",
    config_class=LDTConfig,
    model_class=LDTModel,
    head_class=LDTForAlignment,
    head_auto=AutoModelForPreTraining,
    pooling="mean",
    display_name=lambda config: "LDT",
    takes_backbone=True,
    teacher_head=True,
)

"""T-LASER / cT-LASER (Li & Mak 2020): a transformer encoder, CLS pooling, a translation decoder."""

from transformers import AutoModelForSeq2SeqLM

from hf_tlaser.models.family import Family, constrained

from .configuration_tlaser import TLaserConfig
from .modeling_tlaser import TLaserForTranslation, TLaserModel

FAMILY = Family(
    model_type="tlaser",
    config_class=TLaserConfig,
    model_class=TLaserModel,
    head_class=TLaserForTranslation,
    head_auto=AutoModelForSeq2SeqLM,
    pooling="cls",
    display_name=lambda config: "cT-LASER" if constrained(config) else "T-LASER",
    decoder_vocab=True,
    takes_backbone=True,
    language_table=True,
    multiway=True,
    teacher_head=True,
)

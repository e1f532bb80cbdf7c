"""LASER-n / cLASER-n (Artetxe & Schwenk 2019): a BiLSTM encoder of n layers, max pooling, an LSTM decoder."""

from transformers import AutoModelForSeq2SeqLM

from hf_tlaser.models.family import Family, constrained

from .configuration_laser import LaserConfig
from .modeling_laser import LaserForTranslation, LaserModel

FAMILY = Family(
    model_type="laser",
    config_class=LaserConfig,
    model_class=LaserModel,
    head_class=LaserForTranslation,
    head_auto=AutoModelForSeq2SeqLM,
    pooling="max",
    display_name=lambda config: f"{'cLASER' if constrained(config) else 'LASER'}-{config.get('num_layers', 1)}",
    language_table=True,
    multiway=True,
)

"""cNV (Li & Mak): shared layers over a frozen bilingual NMT pair, each language through its own encoder."""

from hf_tlaser.models.family import Family, constrained

from .configuration_cnv import CNVConfig
from .modeling_cnv import CNVModel


def display_name(config: dict) -> str:
    """cNV(y)_con / cNV(y)_sum (cNV_con / cNV_sum when the translation's vector is added, eq. 4 / 6; NV without the
    distance constraint)."""
    source = "" if config.get("combine_translation") else "(y)"
    return f"{'cNV' if constrained(config) else 'NV'}{source}_{config.get('sentence_vector', 'con')}"


FAMILY = Family(
    model_type="cnv",
    config_class=CNVConfig,
    model_class=CNVModel,
    display_name=display_name,
    vector_size=lambda config: CNVConfig.from_dict(config).embedding_size,
    per_language=True,
)

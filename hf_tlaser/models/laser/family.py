"""LASER-n / cLASER-n (Artetxe & Schwenk 2019): a BiLSTM encoder of n layers, max pooling, an LSTM decoder; its
presets (T-LASER's recipes) and its model card's section (T-LASER's summary, objective and citation: the T-LASER
paper's baseline)."""

from transformers import AutoModelForSeq2SeqLM

from hf_tlaser.models.family import CONSTRAINED, FAIRSEQ_RECIPES, PLAIN, CardSection, Family, Presets, constrained
from hf_tlaser.models.tlaser.family import CITATION, summary, translation_objective

from .configuration_laser import LaserConfig
from .modeling_laser import LaserForTranslation, LaserModel

SIZES = {
    "paper": {},
    "small": dict(embed_dim=256, lstm_hidden_size=256, decoder_hidden_size=1024, dropout=0.1),
    "tiny": dict(embed_dim=128, lstm_hidden_size=96, decoder_hidden_size=384, dropout=0.1, align_loss_weight=1.0),
}


def card_rows(config: dict, dim: int) -> list[list[str]]:
    """The card's architecture, sentence vector and training objective."""
    architecture = (
        f"BiLSTM encoder: {config.get('num_layers', 1)} layer(s), {config['lstm_hidden_size']} units per "
        f"direction, {config.get('embed_dim')}-dim token embeddings"
    )
    return [
        ["Architecture", architecture],
        ["Sentence vector", f"{dim}-dim max over the BiLSTM outputs of all tokens (max pooling)"],
        ["Training objective", translation_objective(config)],
    ]


FAMILY = Family(
    model_type="laser",
    config_class=LaserConfig,
    model_class=LaserModel,
    head_class=LaserForTranslation,
    head_auto=AutoModelForSeq2SeqLM,
    display_name=lambda config: f"{'cLASER' if constrained(config) else 'LASER'}-{config.get('num_layers', 1)}",
    language_table=True,
    multiway=True,
    presets=Presets(
        members={
            "laser1": {"num_layers": 1, **PLAIN},
            "laser6": {"num_layers": 6, **PLAIN},
            "claser6": {"num_layers": 6, **CONSTRAINED},
        },
        sizes=SIZES,
        recipes=FAIRSEQ_RECIPES,
    ),
    card=CardSection(("t-laser", "multilingual", "laser"), summary, card_rows, CITATION),
)

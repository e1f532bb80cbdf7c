"""``Family``: what a model family is, declared once in its folder (``family.py``) and collected in
:mod:`hf_tlaser.models.registry`. The model-side facts only: training's presets and trainers, and the model card's
sections, are attached to a family by ``hf_tlaser.training.presets`` and ``hf_tlaser.hub.model_card``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from transformers import PretrainedConfig, PreTrainedModel

from hf_tlaser.models.common.pooling import embedding_dim


@dataclass(frozen=True)
class Family:
    """One ``model_type``.

    Attributes:
        model_type: the config's ``model_type``.
        config_class, model_class: the config and the encoder (``AutoConfig``, ``AutoModel``).
        head_class, head_auto: the model that training builds, whose ``forward`` returns the loss, and the Auto class
            it is registered with (None: ``model_class`` itself, registered with ``AutoModel`` only).
        pooling: the default pooling of the sentence vector (None: the family pools in its own way).
        display_name: the paper's name of a model from its config dict (``T-LASER`` / ``cT-LASER``, ``LASER-6``...).
        vector_size: the sentence vector's width from a config dict.
        decoder_vocab: its translation decoder can be restricted to the pieces of the training targets
            (``config.decoder_vocab_size``).
        takes_backbone: its encoder can be a pretrained transformer (``config.backbone``).
        language_table: its decoder embeds the target language (``config.languages`` are the table's rows).
        translates_back: it also translates each target back to its source (the table holds the sources too).
        multiway: it trains on multi-way batches (aligned groups of more than two languages).
        teacher_head: it has a projection head to a teacher's width (``config.teacher_dim``).
        per_language: one encoder and tokenizer per language (``encode`` needs each text's ``lang``).
    """

    model_type: str
    config_class: type[PretrainedConfig]
    model_class: type[PreTrainedModel]
    display_name: Callable[[dict], str]
    head_class: type[PreTrainedModel] | None = None
    head_auto: type | None = None
    pooling: str | None = None
    vector_size: Callable[[dict], int] = embedding_dim
    decoder_vocab: bool = False
    takes_backbone: bool = False
    language_table: bool = False
    translates_back: bool = False
    multiway: bool = False
    teacher_head: bool = False
    per_language: bool = False

    @property
    def trained_class(self) -> type[PreTrainedModel]:
        """The class that training builds (``head_class``, else ``model_class``)."""
        return self.head_class or self.model_class


def constrained(config: dict) -> bool:
    """Whether a config trains with the distance constraint (``distance_beta`` > 0: the ``c`` of cT-LASER)."""
    return float(config.get("distance_beta") or 0) > 0

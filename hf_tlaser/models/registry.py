"""The family registry: every model family's classes and capabilities (``Family``), one entry each in ``FAMILIES``
(by ``model_type``, in the order of their members in ``--model``). A family's folder holds its configuration and
modeling files; the model side of a new family is that folder and its entry here. How a family is trained (its
presets) is ``hf_tlaser.training.presets``' and its model card's section ``hf_tlaser.hub.cards``'; both read this
table."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from transformers import AutoModelForPreTraining, AutoModelForSeq2SeqLM, PretrainedConfig, PreTrainedModel

from hf_tlaser.models.cnv import CNVConfig, CNVModel
from hf_tlaser.models.common.pooling import embedding_dim
from hf_tlaser.models.laser import LaserConfig, LaserForTranslation, LaserModel
from hf_tlaser.models.ldt import LDTConfig, LDTForAlignment, LDTModel
from hf_tlaser.models.tlaser import TLaserConfig, TLaserForTranslation, TLaserModel
from hf_tlaser.models.yu2018 import Yu2018Config, Yu2018ForTranslation, Yu2018Model


@dataclass(frozen=True)
class Family:
    """One ``model_type``.

    Attributes:
        model_type: the config's ``model_type``.
        config_class, model_class: the config and the encoder (``AutoConfig``, ``AutoModel``).
        head_class, head_auto: the model that training builds, whose ``forward`` returns the loss, and the Auto class
            it is registered with (None: ``model_class`` itself, registered with ``AutoModel`` only).
        exports: its encoder exports to ONNX and OpenVINO (``hf-tlaser export``; recurrent encoders do not).
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
    exports: bool = False
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


def laser_name(config: dict) -> str:
    """LASER-n / cLASER-n (n: the encoder's BiLSTM layers)."""
    return f"{'cLASER' if constrained(config) else 'LASER'}-{config.get('num_layers', 1)}"


def cnv_name(config: dict) -> str:
    """cNV(y)_con / cNV(y)_sum (cNV_con / cNV_sum when the translation's vector is added, eq. 4 / 6; NV without the
    distance constraint)."""
    source = "" if config.get("combine_translation") else "(y)"
    return f"{'cNV' if constrained(config) else 'NV'}{source}_{config.get('sentence_vector', 'con')}"


FAMILIES: dict[str, Family] = {
    family.model_type: family
    for family in (
        # T-LASER / cT-LASER (Li & Mak 2020): a transformer encoder, CLS pooling, a translation decoder
        Family("tlaser", TLaserConfig, TLaserModel, lambda config: "cT-LASER" if constrained(config) else "T-LASER",
               TLaserForTranslation, AutoModelForSeq2SeqLM, exports=True, decoder_vocab=True, takes_backbone=True,
               language_table=True, multiway=True, teacher_head=True),
        # LASER-n / cLASER-n (Artetxe & Schwenk 2019): a BiLSTM encoder, max pooling, an LSTM decoder; the T-LASER
        # paper's baseline
        Family("laser", LaserConfig, LaserModel, laser_name, LaserForTranslation, AutoModelForSeq2SeqLM,
               language_table=True, multiway=True),
        # cNV (Li & Mak): shared layers over a frozen bilingual NMT pair, each language through its own encoder
        Family("cnv", CNVConfig, CNVModel, cnv_name, per_language=True,
               vector_size=lambda config: CNVConfig.from_dict(config).embedding_size),
        # Yu 2018 (Yu, Li & Oguz): an LSTM seq2seq with a similarity loss, translating both ways
        Family("yu2018", Yu2018Config, Yu2018Model, lambda config: "Yu 2018", Yu2018ForTranslation,
               AutoModelForSeq2SeqLM, language_table=True, translates_back=True),
        # LDT (Mao et al. 2021): the Lightweight Dual Transformer, a 2-layer encoder trained without a decoder
        Family("ldt", LDTConfig, LDTModel, lambda config: "LDT", LDTForAlignment, AutoModelForPreTraining,
               exports=True, takes_backbone=True, teacher_head=True),
    )
}  # fmt: skip
"""``model_type`` -> its family, in the order of their members in ``--model``."""

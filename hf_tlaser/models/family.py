"""``Family``: what a model family is, declared once in its folder (``family.py``) and collected in
:mod:`hf_tlaser.models.registry`: its classes and capabilities, its presets (``Presets``) and its model card's section
(``CardSection``), as plain data and pure functions; ``hf_tlaser.training.presets`` and ``hf_tlaser.hub.model_card``
read them. Also the values several families share: the member variants of the distance constraint and the fairseq
recipes."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from transformers import PretrainedConfig, PreTrainedModel

from hf_tlaser.models.common.pooling import embedding_dim

JOINT_TRAINING = "hf_tlaser.training.joint"
"""The training of the families on one joint BPE over the curriculum languages (``Presets.training``)."""


@dataclass(frozen=True)
class Presets:
    """How a family is trained, as plain data (``hf_tlaser.training.presets`` builds its ``Preset`` per size).

    Attributes:
        members: ``--model`` name -> the config values that make it this member (cT-LASER's distance constraint,
            LASER's depth), in ``--model`` order.
        sizes: size (``paper``, ``small``, ``tiny``) -> config kwargs.
        recipes: size -> ``Recipe`` fields (those not given keep its defaults: the paper's fairseq recipe).
        nmt: cNV's NMT pair per size (None: none): ``config_kwargs`` (``MarianConfig``), ``recipe`` (as ``recipes``)
            and ``steps`` (the updates of each direction).
        training: the module that trains it, named, not imported (models sit below training): its ``check(plan)``
            completes the run's plan (``hf_tlaser.training.resolve``) and its ``train(plan)`` builds from the plan
            and fits. ``JOINT_TRAINING`` (one joint BPE) by default; cNV's trains an NMT pair first, then the shared
            layers over it (``hf_tlaser.training.cnv``).
    """

    members: dict[str, dict]
    sizes: dict[str, dict]
    recipes: dict[str, dict]
    nmt: dict[str, dict] | None = None
    training: str = JOINT_TRAINING


@dataclass(frozen=True)
class CardSection:
    """A family's part of its model card; ``hf_tlaser.hub.model_card`` adds what every family's card shares.

    Attributes:
        tags: its Hub tags (after ``feature-extraction`` and ``sentence-similarity``, and ``sentence-transformers``
            for a folder with that layout).
        summary: the card's first paragraph from the config dict, the model's name, the sentence vector's width and
            the languages' names.
        rows: its rows of the details table from the config dict and the sentence vector's width: the architecture,
            the sentence vector and the training objective (a family with one encoder per language: every row but
            the parameter count).
        citation: what to cite (markdown).
        head: what the checkpoint holds besides the encoder, in the parameter count of a family with one encoder.
    """

    tags: tuple[str, ...]
    summary: Callable[[dict, str, int, str], str]
    rows: Callable[[dict, int], list[list[str]]]
    citation: str
    head: str = "decoder"


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
        presets: its ``--model`` members, sizes, recipes and the module that trains it.
        card: its model card's section.
    """

    model_type: str
    config_class: type[PretrainedConfig]
    model_class: type[PreTrainedModel]
    display_name: Callable[[dict], str]
    presets: Presets
    card: CardSection
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


# distance-constraint settings of the c* members (the T-LASER / LASER configs default to beta=0.25, lambda=beta/2)
PLAIN = dict(distance_beta=0.0)
CONSTRAINED = dict(distance_beta=0.25)
FAIRSEQ_RECIPES: dict[str, dict] = {
    "paper": {},
    "small": dict(vocab_size=32000, max_tokens=4000, update_tokens=32000, learning_rate=7e-4, warmup_updates=2000),
    "tiny": dict(
        vocab_size=8000,
        max_tokens=4000,  # one micro-batch per update: ~180 pairs, the in-batch negatives of the alignment loss
        update_tokens=4000,
        learning_rate=2e-3,
        warmup_updates=100,
        max_sentence_tokens=40,
        max_grad_norm=1.0,
        max_lines=60000,
    ),
}
"""The recipes of T-LASER and LASER (``paper``: the paper's fairseq recipe, ``Recipe``'s defaults), which Yu 2018's
recipes and LDT's tiny one start from."""

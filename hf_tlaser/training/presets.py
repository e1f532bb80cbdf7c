"""The presets of every ``--model`` at every size (``paper``: Table 1 sizes and the fairseq recipe; ``small``;
``tiny``: a few CPU minutes), built from the family registry: each family declares its members, sizes, recipes and
training module as plain data in its folder (``hf_tlaser/models/<folder>/family.py``, ``Presets``), and here they become
``Preset``s (config class and kwargs, trained class, ``Recipe``; cNV's NMT pair, ``NMTPreset``). Also the warm-start
recipe (``--init-from``) and the members of each capability."""

from __future__ import annotations

from dataclasses import dataclass, field

from transformers import PretrainedConfig

from hf_tlaser.models.family import JOINT_TRAINING, Family
from hf_tlaser.models.registry import FAMILIES

SIZES = ("paper", "small", "tiny")


@dataclass
class Recipe:
    """Training recipe (paper footnote 6 / sec. 3 for ``paper``); each field's ``help`` (its metadata) is also its
    ``hf-tlaser train`` flag's help (``training.spec.recipe_flag``)."""

    vocab_size: int = field(default=50000, metadata={"help": "joint BPE size trained when no tokenizer is given"})
    max_tokens: int = field(default=4000, metadata={"help": "padded tokens per micro-batch (per side)"})
    update_tokens: int = field(
        default=128000,
        metadata={
            "help": "target tokens per update, reached with gradient accumulation over micro-batches and processes "
            "(paper: 128K = 4000 x 16 x 2 GPUs)"
        },
    )
    learning_rate: float = field(default=5e-4, metadata={"help": "peak learning rate"})
    warmup_updates: int = field(default=4000, metadata={"help": "updates of the linear warm-up to the peak"})
    warmup_init_lr: float = field(default=1e-7, metadata={"help": "learning rate at the warm-up's first update"})
    lr_schedule: str = field(
        default="inverse_sqrt",
        metadata={
            "help": "inverse_sqrt (fairseq: lr x sqrt(warmup_updates / update) after the warm-up) or step (LDT, Mao "
            "et al. 2021 sec. 4.1: the peak held, then / 10 after --lr-step-epochs epochs)"
        },
    )
    lr_step_epochs: float = field(default=3.0, metadata={"help": "epochs before the step schedule's / 10"})
    adam_betas: tuple[float, float] = field(default=(0.9, 0.98), metadata={"help": "Adam's betas"})
    weight_decay: float = field(default=1e-4, metadata={"help": "AdamW's weight decay"})
    max_grad_norm: float = field(default=0.0, metadata={"help": "gradient clipping norm (0: none)"})
    max_sentence_tokens: int = field(
        default=250, metadata={"help": "cleaning cap on sentence length (tokens incl. STR_TAG and </s>)"}
    )
    batching: str = field(
        default="pair",
        metadata={
            "help": "pair (one language pair per micro-batch, the paper's curriculum) or multiway (aligned groups, "
            "each encoded sentence a translation source and a distance partner)"
        },
    )
    batch_composition: str = field(
        default="length",
        metadata={
            "help": "length (rows sorted by length within chunks before packing: least padding), random (packed "
            "in shuffled order: in-batch negatives of any length) or cluster (rows whose pivot sentences are near "
            "in --cluster-model's space packed together: in-batch hard negatives)"
        },
    )
    max_lines: int | None = field(
        default=None,
        metadata={"help": "read only the first N lines of every corpus file"},
    )
    max_sentences: int | None = field(
        default=None,
        metadata={"help": "cap on the sentences of a micro-batch (all: the token budget alone; cNV: the paper's 80)"},
    )


@dataclass
class NMTPreset:
    """The bilingual NMT pair that cNV starts from (stage 1 of ``--model cnv``): ``MarianConfig`` kwargs, the
    recipe of each direction (its ``vocab_size``, ``max_sentence_tokens`` and ``max_lines`` are the cNV recipe's:
    both stages read the same cleaned corpora) and the updates of each direction."""

    config_kwargs: dict
    recipe: Recipe
    steps: int
    label_smoothing: float = 0.1


@dataclass
class Preset:
    """A model family at one size: the config class and kwargs, the model class and the recipe (and, for ``cnv``,
    the NMT pair's preset)."""

    name: str
    config_class: type[PretrainedConfig]
    model_class: type
    config_kwargs: dict = field(default_factory=dict)
    recipe: Recipe = field(default_factory=Recipe)
    nmt: NMTPreset | None = None

    def make_config(self, vocab_size: int, **overrides) -> PretrainedConfig:
        return self.config_class(**{**self.config_kwargs, "vocab_size": vocab_size, **overrides})


# --init-from (docs/training.md, "Warm start"): a 12-layer pretrained encoder costs ~20x a tiny one per pair on a CPU,
# so one micro-batch of ~1,000 target tokens (~25-35 pairs, the in-batch negatives) per update; sentences of up to 64
# backbone pieces (news sentences need more pieces than the joint BPE's 40); the decoder, new, at 1e-3 after a short
# warm-up, the encoder at WARM_ENCODER_LR. No frozen warm-up by default: measured on e5-small at 200 updates, 50
# frozen updates first left the NTREX error at 2.35 % against 2.16 % without (start: 7.02 %; docs/results.md)
WARM_RECIPE = dict(max_tokens=1000, update_tokens=1000, max_sentence_tokens=64, learning_rate=1e-3, warmup_updates=50)
WARM_ENCODER_LR = 2e-5
WARM_FREEZE_UPDATES = 0


@dataclass(frozen=True)
class Member:
    """A ``--model``: its family (``hf_tlaser.models.registry``; its ``presets`` hold the member's sizes, recipes and
    training module) and the config values that make it this member (``variant``: cT-LASER's distance constraint,
    LASER's depth)."""

    name: str
    family: Family
    variant: dict

    def preset(self, size: str) -> Preset:
        """This member at ``size`` (fresh copies: a caller may change them)."""
        family, presets = self.family, self.family.presets
        nmt = None
        if presets.nmt is not None:
            values = presets.nmt[size]
            nmt = NMTPreset(dict(values["config_kwargs"]), Recipe(**values["recipe"]), values["steps"])
        kwargs = {**presets.sizes[size], **self.variant}
        recipe = Recipe(**presets.recipes[size])
        return Preset(f"{self.name}-{size}", family.config_class, family.trained_class, kwargs, recipe, nmt)


MEMBERS: dict[str, Member] = {
    name: Member(name, family, variant)
    for family in FAMILIES.values()
    for name, variant in family.presets.members.items()
}
"""``--model`` -> its member: every family's members (``Presets.members``), in the registry's order."""
MODELS = tuple(MEMBERS)


def members(capability: str) -> tuple[str, ...]:
    """The ``--model`` names whose family has ``capability`` (a boolean field of ``Family``), in ``MODELS`` order."""
    return tuple(name for name, member in MEMBERS.items() if getattr(member.family, capability))


JOINT_BPE = tuple(name for name, member in MEMBERS.items() if member.family.presets.training == JOINT_TRAINING)
"""The families trained on one joint BPE (``hf_tlaser.training.joint``); cnv trains over its NMT pair's own
tokenizers."""
DECODER_VOCAB_MEMBERS = members("decoder_vocab")
"""The families whose translation decoder can be restricted to the pieces of the training targets
(``--decoder-vocab``)."""
BACKBONE_MEMBERS = members("takes_backbone")
"""The members whose encoder a pretrained transformer can replace (``--init-from``)."""
MULTIWAY_FAMILIES = members("multiway")
"""The families that train on multi-way batches (``--batching multiway``); the others on bilingual ones."""
TEACHER_HEAD_MEMBERS = members("teacher_head")
"""The members with a projection head to a teacher's width (``--set teacher_dim``)."""


def get_preset(model: str, size: str = "tiny") -> Preset:
    """The preset for ``model`` (one of MODELS) at ``size`` (one of SIZES)."""
    if model not in MODELS:
        raise ValueError(f"unknown model {model!r}; expected one of {MODELS}")
    if size not in SIZES:
        raise ValueError(f"unknown preset {size!r}; expected one of {SIZES}")
    return MEMBERS[model].preset(size)

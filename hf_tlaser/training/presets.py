"""The presets of every ``--model`` at every size (``paper``: Table 1 sizes and the fairseq recipe; ``small``;
``tiny``: a few CPU minutes): each family's members, sizes, recipes and NMT pair as plain data (``Presets``, by
``model_type`` in ``PRESETS``), with the comments that give the measured reasons for the values, which become
``Preset``s (the classes of the family registry, ``hf_tlaser.models.registry``; config kwargs, ``Recipe``; cNV's NMT
pair, ``NMTPreset``). Also the warm-start recipe (``--init-from``) and the members of each capability."""

from __future__ import annotations

from dataclasses import dataclass, field

from transformers import PretrainedConfig

from hf_tlaser.models.registry import FAMILIES, Family

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


@dataclass(frozen=True)
class Presets:
    """How a family is trained, as plain data (``Member.preset`` builds its ``Preset`` per size).

    Attributes:
        members: ``--model`` name -> the config values that make it this member (cT-LASER's distance constraint,
            LASER's depth), in ``--model`` order.
        sizes: size (``paper``, ``small``, ``tiny``) -> config kwargs.
        recipes: size -> ``Recipe`` fields (those not given keep its defaults: the paper's fairseq recipe).
        nmt: cNV's NMT pair per size (None: none): ``config_kwargs`` (``MarianConfig``), ``recipe`` (as ``recipes``)
            and ``steps`` (the updates of each direction). A family with an NMT pair trains over the pair's own
            tokenizers; the others on one joint BPE (``JOINT_BPE``).
    """

    members: dict[str, dict]
    sizes: dict[str, dict]
    recipes: dict[str, dict]
    nmt: dict[str, dict] | None = None


# ---------------------------------------------------------------------------- the families' presets, as plain data

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

# T-LASER / cT-LASER (Li & Mak 2020)
TLASER_SIZES = {
    "paper": {},
    "small": dict(
        hidden_size=512,
        num_hidden_layers=6,
        num_attention_heads=8,
        intermediate_size=2048,
        decoder_attention_heads=8,
        decoder_ffn_dim=2048,
        dropout=0.1,
        init_style="fairseq",  # at d=512 N(0, 0.02) is 2.2x below xavier scale
    ),
    # measured on 2 CPU cores (docs/learning_curves.md): as wide as a few minutes allow; fairseq's scale-aware init
    # (N(0, 0.02) left the position-0 vectors collapsed); the alignment loss is on because translation alone left
    # the sentence vectors collapsed (mean cosine ~0.97) at this budget; no dropout: these runs stay below one epoch
    # (0.69 after the main job's 800 updates), and dropout 0.1 cost 6.5 NTREX points and 3.6 SIB-200 cross points
    # at 100k pairs seen (and ~10 % of the update time)
    "tiny": dict(
        init_style="fairseq",
        hidden_size=192,
        num_hidden_layers=3,
        num_attention_heads=4,
        intermediate_size=768,
        decoder_attention_heads=4,
        decoder_ffn_dim=768,
        dropout=0.0,
        align_loss_weight=1.0,
    ),
}

# LASER-n / cLASER-n (Artetxe & Schwenk 2019), the T-LASER paper's baseline, on T-LASER's recipes
LASER_SIZES = {
    "paper": {},
    "small": dict(embed_dim=256, lstm_hidden_size=256, decoder_hidden_size=1024, dropout=0.1),
    "tiny": dict(embed_dim=128, lstm_hidden_size=96, decoder_hidden_size=384, dropout=0.1, align_loss_weight=1.0),
}

# cNV (Li & Mak, sec. 3): the shared layers (d_h 1024, r 4, N_s 20, beta 0.5, alpha 2 sqrt(d_h) = the config
# default) trained with Adam on batches of 80 sentence pairs (of at most 50 tokens) for 5 epochs over the frozen
# NMT pair; the NMT models: vocabulary 85,000, word embeddings 500, hidden size 1024, batches of 80, Adam. Their
# NMT models are attention RNNs; here they are Marian transformers, whose word embedding width is d_model (500,
# 10 heads of 50) and whose hidden layers are the 1024-wide feed-forward layers.
CNV_SIZES = {
    "paper": {},
    "small": dict(shared_hidden_size=512),
    "tiny": dict(shared_hidden_size=256, num_negatives=10),
}


def _marian(d_model: int, heads: int, ffn: int, layers: int) -> dict:
    """``MarianConfig`` kwargs of an NMT model: ``layers`` encoder and decoder layers of width ``d_model``."""
    return dict(
        d_model=d_model,
        encoder_attention_heads=heads,
        decoder_attention_heads=heads,
        encoder_ffn_dim=ffn,
        decoder_ffn_dim=ffn,
        encoder_layers=layers,
        decoder_layers=layers,
        dropout=0.1,
    )


_CNV_NMT_RECIPE = dict(weight_decay=0.0, max_grad_norm=1.0)
CNV_NMT = {
    "paper": dict(
        config_kwargs=_marian(500, 10, 1024, 6),
        recipe=dict(max_tokens=4000, update_tokens=4000, max_sentences=80, warmup_updates=4000, **_CNV_NMT_RECIPE),
        steps=100_000,
    ),
    "small": dict(
        config_kwargs=_marian(256, 4, 1024, 4),
        recipe=dict(max_tokens=4000, update_tokens=8000, learning_rate=1e-3, warmup_updates=1000, **_CNV_NMT_RECIPE),
        steps=10_000,
    ),
    # measured on 2 CPU cores (docs/training.md): ~0.9 s per update, cross entropy 9.3 -> 5.7 in 200 updates
    "tiny": dict(
        config_kwargs=_marian(256, 4, 1024, 3),
        recipe=dict(max_tokens=2000, update_tokens=2000, learning_rate=1e-3, warmup_updates=100, **_CNV_NMT_RECIPE),
        steps=200,
    ),
}
# stage 2: plain Adam (the paper's optimiser) on batches of at most 80 sentence pairs
_CNV_ADAM = dict(max_sentences=80, learning_rate=1e-3, adam_betas=(0.9, 0.999), weight_decay=0.0, max_grad_norm=1.0)
CNV_RECIPES = {
    "paper": dict(
        vocab_size=85000, max_tokens=4000, update_tokens=4000, warmup_updates=1000, max_sentence_tokens=50, **_CNV_ADAM
    ),
    "small": dict(
        vocab_size=32000, max_tokens=4000, update_tokens=4000, warmup_updates=500, max_sentence_tokens=50, **_CNV_ADAM
    ),
    "tiny": dict(
        vocab_size=8000,
        max_tokens=2000,
        update_tokens=2000,
        warmup_updates=50,
        max_sentence_tokens=40,
        max_lines=60000,
        **_CNV_ADAM,
    ),
}

# Yu 2018 (sec. 2): paper = its sizes (85k vocabulary, BiLSTM 512 + LSTM 1024, decoder 1024) and gradient clipping
# at 5; tiny is as wide as LASER's tiny (192-dim sentence vectors, 128-dim embeddings, decoder 384); alpha: see
# Yu2018Config.similarity_weight
YU2018_SIZES = {
    "paper": {},
    "small": dict(embed_dim=256, encoder_hidden_size=256, hidden_size=512, decoder_hidden_size=1024),
    "tiny": dict(
        embed_dim=128, encoder_hidden_size=96, hidden_size=192, decoder_hidden_size=384, self_attention_dim=64
    ),
}
YU2018_RECIPES = {  # gradient clipping at max norm 5 (sec. 2); the paper's 85k vocabulary
    "paper": {**FAIRSEQ_RECIPES["paper"], "vocab_size": 85000, "max_grad_norm": 5.0},
    "small": {**FAIRSEQ_RECIPES["small"], "max_grad_norm": 5.0},
    "tiny": {**FAIRSEQ_RECIPES["tiny"], "max_grad_norm": 5.0},
}

# LDT (Mao et al. 2021, sec. 4.1): batches of 128 pairs (max_sentences; max_tokens = 128 x the longest sentence
# never binds first), Adam at 1e-3 with betas (0.9, 0.999) and the authors' weight decay 1e-5, dropout 0.1 (config
# default). The authors warm up with pytorch_warmup's untuned linear warm-up (2 / (1 - beta2) = 2000 updates), hold
# the rate and divide it by 10 after 3 epochs: lr_schedule "step" (docs/training.md, "LDT: the learning-rate
# schedule"). tiny has cT-LASER tiny's data and token budget (8k BPE, <= 40 tokens, 4000 target tokens per update,
# one micro-batch, ~180 pairs: the in-batch negatives) on a d=256 encoder, the compute-lite member; small sits
# between.
LDT_SIZES = {
    "paper": {},
    "small": dict(hidden_size=384, num_attention_heads=6, intermediate_size=768),
    "tiny": dict(hidden_size=256, num_attention_heads=4, intermediate_size=512),
}
_LDT_ADAM = dict(learning_rate=1e-3, adam_betas=(0.9, 0.999), weight_decay=1e-5, lr_schedule="step", lr_step_epochs=3.0)
LDT_RECIPES = {
    "paper": dict(max_tokens=32000, update_tokens=32000, max_sentences=128, warmup_updates=2000, **_LDT_ADAM),
    "small": dict(
        vocab_size=32000,
        max_tokens=8000,
        update_tokens=8000,
        max_sentences=128,
        warmup_updates=1000,
        max_grad_norm=1.0,
        **_LDT_ADAM,
    ),
    "tiny": {**FAIRSEQ_RECIPES["tiny"], **_LDT_ADAM},
}

PRESETS: dict[str, Presets] = {
    "tlaser": Presets({"tlaser": PLAIN, "ctlaser": CONSTRAINED}, TLASER_SIZES, FAIRSEQ_RECIPES),
    "laser": Presets(
        {
            "laser1": {"num_layers": 1, **PLAIN},
            "laser6": {"num_layers": 6, **PLAIN},
            "claser6": {"num_layers": 6, **CONSTRAINED},
        },
        LASER_SIZES,
        FAIRSEQ_RECIPES,
    ),
    "cnv": Presets({"cnv": {}}, CNV_SIZES, CNV_RECIPES, nmt=CNV_NMT),
    "yu2018": Presets({"yu2018": {}}, YU2018_SIZES, YU2018_RECIPES),
    "ldt": Presets({"ldt": {}}, LDT_SIZES, LDT_RECIPES),
}
"""``model_type`` -> its family's presets."""


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
    """A ``--model``: its family (``hf_tlaser.models.registry``) and the config values that make it this member
    (``variant``: cT-LASER's distance constraint, LASER's depth)."""

    name: str
    family: Family
    variant: dict

    @property
    def presets(self) -> Presets:
        """Its family's sizes, recipes and NMT pair (``PRESETS``)."""
        return PRESETS[self.family.model_type]

    def preset(self, size: str) -> Preset:
        """This member at ``size`` (fresh copies: a caller may change them)."""
        family, presets = self.family, self.presets
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
    for name, variant in PRESETS[family.model_type].members.items()
}
"""``--model`` -> its member: every family's members (``Presets.members``), in the registry's order."""
MODELS = tuple(MEMBERS)


def members(capability: str) -> tuple[str, ...]:
    """The ``--model`` names whose family has ``capability`` (a boolean field of ``Family``), in ``MODELS`` order."""
    return tuple(name for name, member in MEMBERS.items() if getattr(member.family, capability))


JOINT_BPE = tuple(name for name, member in MEMBERS.items() if member.presets.nmt is None)
"""The families trained on one joint BPE (``hf_tlaser.training.joint``); cnv, whose presets have an NMT pair, trains
over the pair's own tokenizers (``hf_tlaser.training.cnv``)."""
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

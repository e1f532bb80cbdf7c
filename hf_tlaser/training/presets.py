"""Model and recipe presets: ``paper`` (Table 1 sizes, fairseq recipe), ``small`` and ``tiny`` (a few CPU minutes)
for each model family: ``tlaser``, ``ctlaser``, ``laser1``, ``laser6``, ``claser6``."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from transformers import PretrainedConfig

from hf_tlaser.models.laser import LaserConfig, LaserForTranslation
from hf_tlaser.models.tlaser import TLaserConfig, TLaserForTranslation

MODELS = ("tlaser", "ctlaser", "laser1", "laser6", "claser6")
SIZES = ("paper", "small", "tiny")


@dataclass
class Recipe:
    """Training recipe (paper footnote 6 / sec. 3 for ``paper``).

    Attributes:
        vocab_size: joint BPE size trained when no tokenizer is given.
        max_tokens: padded tokens per micro-batch (per side). update_tokens: target budget per update, reached with
            gradient accumulation over micro-batches and processes (paper: 128K = 4000 x 16 x 2 GPUs).
        learning_rate, warmup_updates, warmup_init_lr: inverse-sqrt schedule (fairseq ``inverse_sqrt``).
        adam_betas, weight_decay, max_grad_norm: optimiser.
        max_sentence_tokens: cleaning cap on sentence length (tokens incl. STR_TAG and </s>).
        batching: "pair" (one language pair per micro-batch, the paper's curriculum) or "multiway" (aligned groups,
            each encoded sentence is a translation source and a distance partner).
        max_lines: read only the first lines of every corpus file (None: all); a few-minute run sees less anyway.
    """

    vocab_size: int = 50000
    max_tokens: int = 4000
    update_tokens: int = 128000
    learning_rate: float = 5e-4
    warmup_updates: int = 4000
    warmup_init_lr: float = 1e-7
    adam_betas: tuple[float, float] = (0.9, 0.98)
    weight_decay: float = 1e-4
    max_grad_norm: float = 0.0
    max_sentence_tokens: int = 250
    batching: str = "pair"
    max_lines: int | None = None


@dataclass
class Preset:
    """A model family at one size: the config class and kwargs, the model class and the recipe."""

    name: str
    config_class: type[PretrainedConfig]
    model_class: type
    config_kwargs: dict = field(default_factory=dict)
    recipe: Recipe = field(default_factory=Recipe)

    def make_config(self, vocab_size: int, **overrides) -> PretrainedConfig:
        return self.config_class(**{**self.config_kwargs, "vocab_size": vocab_size, **overrides})


_TLASER_SIZES = {
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
    # the sentence vectors collapsed (mean cosine ~0.97) at this budget
    "tiny": dict(
        init_style="fairseq",
        hidden_size=192,
        num_hidden_layers=3,
        num_attention_heads=4,
        intermediate_size=768,
        decoder_attention_heads=4,
        decoder_ffn_dim=768,
        dropout=0.1,
        align_loss_weight=1.0,
    ),
}
_LASER_SIZES = {
    "paper": {},
    "small": dict(embed_dim=256, lstm_hidden_size=256, decoder_hidden_size=1024, dropout=0.1),
    "tiny": dict(embed_dim=128, lstm_hidden_size=96, decoder_hidden_size=384, dropout=0.1, align_loss_weight=1.0),
}
_RECIPES = {
    "paper": Recipe(),
    "small": Recipe(vocab_size=32000, max_tokens=4000, update_tokens=32000, learning_rate=7e-4, warmup_updates=2000),
    "tiny": Recipe(
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
# distance-constraint settings of the c* models (the T-LASER / LASER configs default to beta=0.25, lambda=beta/2)
_PLAIN = dict(distance_beta=0.0)
_CONSTRAINED = dict(distance_beta=0.25)


def get_preset(model: str, size: str = "tiny") -> Preset:
    """The preset for ``model`` (one of MODELS) at ``size`` (one of SIZES)."""
    if model not in MODELS:
        raise ValueError(f"unknown model {model!r}; expected one of {MODELS}")
    if size not in SIZES:
        raise ValueError(f"unknown preset {size!r}; expected one of {SIZES}")
    recipe = replace(_RECIPES[size])
    if model in ("tlaser", "ctlaser"):
        kwargs = {**_TLASER_SIZES[size], **(_CONSTRAINED if model == "ctlaser" else _PLAIN)}
        return Preset(f"{model}-{size}", TLaserConfig, TLaserForTranslation, kwargs, recipe)
    layers = 1 if model == "laser1" else 6
    kwargs = {**_LASER_SIZES[size], "num_layers": layers, **(_CONSTRAINED if model == "claser6" else _PLAIN)}
    return Preset(f"{model}-{size}", LaserConfig, LaserForTranslation, kwargs, recipe)

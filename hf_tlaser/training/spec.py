"""``RunSpec``: one training run as a typed object, what ``hf-tlaser train`` turns its flags into and what every
family's training reads (``hf_tlaser.training.families.train``); the recipe it asks for, and its ``--set`` values.

A script builds one directly: ``train(RunSpec(output_dir="runs/ct", model="ctlaser", max_steps=50))`` runs what
``hf-tlaser train --output-dir runs/ct --model ctlaser --max-steps 50`` runs (the parser takes its defaults from here).
"""

from __future__ import annotations

import inspect
from dataclasses import MISSING, asdict, dataclass, field, fields, replace
from pathlib import Path

import yaml
from transformers import PretrainedConfig

from hf_tlaser.data import COMPOSITIONS, DEFAULT_PIVOTS, DEFAULT_TRAIN_CORPORA
from hf_tlaser.errors import UsageError
from hf_tlaser.training.presets import WARM_ENCODER_LR, WARM_FREEZE_UPDATES, WARM_RECIPE, Preset, Recipe
from hf_tlaser.training.trainer import LR_SCHEDULES

RECIPE_FLAGS = (
    "vocab_size",
    "max_tokens",
    "update_tokens",
    "learning_rate",
    "warmup_updates",
    "warmup_init_lr",
    "lr_schedule",
    "lr_step_epochs",
    "weight_decay",
    "max_grad_norm",
    "max_sentence_tokens",
    "batching",
    "batch_composition",
    "max_lines",
    "max_sentences",
)
"""The ``RunSpec`` fields (and flags) that override the preset's ``Recipe`` when given."""
BATCHING = ("pair", "multiway")
CHOICES = {"batching": BATCHING, "lr_schedule": LR_SCHEDULES, "batch_composition": COMPOSITIONS}
"""The recipe flags that take one of a few words."""


@dataclass(kw_only=True)
class RunSpec:
    """What a training run asks for: one field per ``hf-tlaser train`` flag (dashes as underscores), in the parser's
    order; ``to_dict()`` is the ``args`` of the run's record. Nothing here is checked yet: ``recipe`` checks the
    numbers, the families check the rest (output dir, corpora, model config) before reading any data."""

    config: str | None = None
    """The ``--config`` file the values came from (recorded, not read again)."""
    model: str = "ctlaser"
    preset: str = "tiny"
    corpora: str | list[str] = ",".join(DEFAULT_TRAIN_CORPORA)
    pivots: str = ",".join(DEFAULT_PIVOTS)
    pairs: str | None = None
    streaming: bool = False
    shuffle_buffer: int = 10_000
    data_dir: str | None = None
    tokenizer: str | None = None
    output_dir: str
    overwrite: bool = False
    max_steps: int = 1000
    max_minutes: float | None = None
    seed: int = 1
    precision: str = "auto"
    use_cpu: bool = False
    logging_steps: int = 10
    save_steps: int = 200
    save_total_limit: int = 2
    resume: str | None = None
    set: list[str] = field(default_factory=list)
    """Model config overrides ``KEY=VALUE`` (``config_overrides``)."""
    nmt_steps: int | None = None
    nmt_pair: str | None = None
    teacher: str | None = None
    """``--teacher SPEC``: distil towards a teacher's sentence vectors (``hf_tlaser.training.distill``)."""
    distill_weight: float = 1.0
    teacher_cache: str | None = None
    """Teacher-vector cache root (None: ``$HF_TLASER_TEACHER_CACHE`` or ``~/.cache``; ``none``: no cache)."""
    init_from: str | None = None
    """``--init-from SPEC``: the encoder starts from a pretrained Hugging Face encoder (``hf_tlaser.training.warm``)."""
    pooling: str | None = None
    """``cls``, ``mean`` or ``backbone`` (the ``--init-from`` model's own); None: ``backbone`` with ``--init-from``,
    else the preset's."""
    decoder_vocab: str | None = None
    """``full`` or ``targets`` (the pieces of the training targets); None: ``targets`` with ``--init-from``."""
    freeze_encoder_steps: int | None = None
    """Updates without a gradient into the encoder (None: ``WARM_FREEZE_UPDATES`` with ``--init-from``, else 0)."""
    encoder_lr: float | None = None
    """Peak learning rate of the encoder's weights (None: ``WARM_ENCODER_LR`` with ``--init-from``, else the
    recipe's ``learning_rate``)."""
    # recipe overrides (RECIPE_FLAGS): None keeps the preset's value; numbers are cast to the recipe's type
    vocab_size: float | None = None
    max_tokens: float | None = None
    update_tokens: float | None = None
    learning_rate: float | None = None
    warmup_updates: float | None = None
    warmup_init_lr: float | None = None
    lr_schedule: str | None = None
    lr_step_epochs: float | None = None
    weight_decay: float | None = None
    max_grad_norm: float | None = None
    max_sentence_tokens: float | None = None
    batching: str | None = None
    batch_composition: str | None = None
    max_lines: int | None = None
    max_sentences: int | None = None

    @classmethod
    def defaults(cls) -> dict:
        """``{field: default}`` of the fields that have one (the parser's defaults)."""
        out = {}
        for item in fields(cls):
            if item.default_factory is not MISSING:
                out[item.name] = item.default_factory()
            elif item.default is not MISSING:
                out[item.name] = item.default
        return out

    @property
    def out(self) -> Path:
        """The output dir."""
        return Path(self.output_dir)

    def to_dict(self) -> dict:
        """The fields in order (the record's ``args``)."""
        return asdict(self)

    def recipe(self, preset: Preset) -> Recipe:
        """The preset's recipe (with ``--init-from``, ``WARM_RECIPE`` over it) with this run's overrides; UsageError
        (naming the flag) on a value out of range, here or in the run's step counts."""
        overrides = dict(WARM_RECIPE) if self.init_from else {}
        for name in RECIPE_FLAGS:
            value, default = getattr(self, name), getattr(preset.recipe, name)
            if value is not None:
                overrides[name] = value if default is None else type(default)(value)
        recipe = replace(preset.recipe, **overrides)
        positive = (
            "learning_rate",
            "max_tokens",
            "update_tokens",
            "vocab_size",
            "max_sentence_tokens",
            "max_lines",
            "max_sentences",
            "lr_step_epochs",
        )
        for name, choices in CHOICES.items():
            if getattr(recipe, name) not in choices:
                raise UsageError(f"--{name.replace('_', '-')} {getattr(recipe, name)}: expected one of {choices}")
        if recipe.lr_schedule == "step" and self.streaming:
            raise UsageError(
                "--lr-schedule step counts epochs, which --streaming has not: pass --lr-schedule inverse_sqrt"
            )
        for name in positive:
            value = getattr(recipe, name)
            if value is not None and value <= 0:
                raise UsageError(f"--{name.replace('_', '-')} {value}: must be > 0")
        for name in ("warmup_updates", "warmup_init_lr", "weight_decay", "max_grad_norm"):
            if getattr(recipe, name) < 0:
                raise UsageError(f"--{name.replace('_', '-')} {getattr(recipe, name)}: must be >= 0")
        for flag, value in (("--max-steps", self.max_steps), ("--logging-steps", self.logging_steps)):
            if value < 1:
                raise UsageError(f"{flag} {value}: must be at least 1")
        if self.save_steps < 1:
            raise UsageError(f"--save-steps {self.save_steps}: must be at least 1")
        if self.max_minutes is not None and self.max_minutes <= 0:
            raise UsageError(f"--max-minutes {self.max_minutes}: must be > 0")
        if self.freeze_encoder_steps is not None and self.freeze_encoder_steps < 0:
            raise UsageError(f"--freeze-encoder-steps {self.freeze_encoder_steps}: must be >= 0")
        if self.encoder_lr is not None and self.encoder_lr < 0:
            raise UsageError(f"--encoder-lr {self.encoder_lr}: must be >= 0")
        return recipe

    @property
    def encoder_schedule(self) -> tuple[int, float | None]:
        """(updates with a frozen encoder, the encoder's peak learning rate or None for the recipe's): the flags, else
        the warm-start defaults with ``--init-from``."""
        warm = self.init_from is not None
        freeze = self.freeze_encoder_steps if self.freeze_encoder_steps is not None else WARM_FREEZE_UPDATES * warm
        lr = self.encoder_lr if self.encoder_lr is not None else (WARM_ENCODER_LR if warm else None)
        return freeze, lr


def flag_error(flag: str, err: Exception) -> UsageError:
    """``err`` as a UsageError that names the flag whose value caused it."""
    return UsageError(f"{flag}: {err}")


def config_overrides(items: list[str], config_class: type[PretrainedConfig]) -> dict:
    """``["distance_beta=0.5", "distance_vnorm_grad=false"]`` -> typed dict (values parsed as YAML scalars).

    UsageError on a malformed item or a key that is not a parameter of ``config_class``.
    """
    known = [name for name in inspect.signature(config_class.__init__).parameters if name not in ("self", "kwargs")]
    out = {}
    for item in items:
        if "=" not in item:
            raise UsageError(f"--set {item!r}: expected KEY=VALUE")
        key, value = (part.strip() for part in item.split("=", 1))
        if key not in known:
            raise UsageError(f"unknown --set key {key!r}; known keys: {', '.join(known)}")
        out[key] = yaml.safe_load(value)
    return out

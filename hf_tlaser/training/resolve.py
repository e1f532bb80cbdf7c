"""``resolve(spec)``: every default of a run decided in one place, warm start's included (``--init-from``: the
``WARM_RECIPE`` over the preset's recipe, the backbone's pooling, the restricted decoder vocabulary, the encoder's
learning rate and frozen updates), with the range checks of the numbers. Reads no file. The families' training reads
the ``Resolved`` values, never ``spec.x or default``.

``Plugin``: a run-wide addition of the joint-BPE path (the warm start, ``training/warm.py``; the teacher,
``training/distill.py``), with the hooks that ``joint.py`` calls for every plugin, in one loop at each moment of the
run.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from torch.utils.data import Sampler
from transformers import PretrainedConfig, PreTrainedModel, PreTrainedTokenizerBase

from hf_tlaser.data import ParallelExamples
from hf_tlaser.errors import UsageError
from hf_tlaser.training.plan import DataPlan
from hf_tlaser.training.presets import (
    DECODER_VOCAB_MEMBERS,
    WARM_ENCODER_LR,
    WARM_FREEZE_UPDATES,
    WARM_RECIPE,
    Preset,
    Recipe,
    get_preset,
)
from hf_tlaser.training.spec import CHOICES, RECIPE_FLAGS, RunSpec, families_of

POSITIVE = (
    "learning_rate",
    "max_tokens",
    "update_tokens",
    "vocab_size",
    "max_sentence_tokens",
    "max_lines",
    "max_sentences",
    "lr_step_epochs",
)
"""Recipe values that must be > 0 (the others must be >= 0)."""


@dataclass(frozen=True)
class Resolved:
    """A run's spec with every default decided: its preset, its recipe (flags over the warm recipe over the
    preset's), whether the encoder starts from ``--init-from`` (``warm``), the pooling flag (None: the preset's),
    the decoder's vocabulary (``full`` or ``targets``), the updates with a frozen encoder and the encoder's peak
    learning rate (None: the recipe's)."""

    spec: RunSpec
    preset: Preset
    recipe: Recipe
    warm: bool
    pooling: str | None
    decoder_vocab: str
    freeze_encoder_steps: int
    encoder_lr: float | None


def resolve(spec: RunSpec) -> Resolved:
    """``spec`` with every default filled; UsageError (naming the flag) on a value out of range or a combination
    refused before any file is read."""
    preset = get_preset(spec.model, spec.preset)
    warm = spec.init_from is not None and spec.model in families_of("init_from")
    recipe = resolve_recipe(spec, preset.recipe, warm)
    for name in ("freeze_encoder_steps", "encoder_lr"):
        if getattr(spec, name) is not None and getattr(spec, name) < 0:
            raise UsageError(f"--{name.replace('_', '-')} {getattr(spec, name)}: must be >= 0")
    if spec.streaming and recipe.batching != "pair":
        raise UsageError(
            "--streaming trains with --batching pair: multi-way batching assigns every group by the rarest pair of "
            "the whole corpus"
        )
    decoder_vocab = spec.decoder_vocab or ("targets" if warm else "full")
    if spec.model not in DECODER_VOCAB_MEMBERS:
        decoder_vocab = "full"  # the flag itself is refused for such a member (RunSpec.check_families)
    if decoder_vocab == "targets" and spec.streaming:
        raise UsageError("--decoder-vocab targets reads every training target first: not with --streaming (use full)")
    if spec.pooling == "backbone" and not warm:
        raise UsageError("--pooling backbone: only with --init-from (the pretrained model's own pooling)")
    if spec.freeze_word_embeddings and not warm:
        raise UsageError("--freeze-word-embeddings: only with --init-from (it keeps the pretrained word embeddings)")
    if spec.freeze_layers is not None and not warm:
        raise UsageError("--freeze-layers: only with --init-from (it keeps the pretrained bottom layers as they are)")
    if spec.init_layers is not None and not warm:
        raise UsageError("--init-layers: only with --init-from (it picks the pretrained model's layers to keep)")
    return Resolved(
        spec=spec,
        preset=preset,
        recipe=recipe,
        warm=warm,
        pooling=spec.pooling or ("backbone" if warm else None),
        decoder_vocab=decoder_vocab,
        freeze_encoder_steps=WARM_FREEZE_UPDATES * warm
        if spec.freeze_encoder_steps is None
        else spec.freeze_encoder_steps,
        encoder_lr=spec.encoder_lr if spec.encoder_lr is not None else (WARM_ENCODER_LR if warm else None),
    )


def resolve_recipe(spec: RunSpec, preset_recipe: Recipe, warm: bool) -> Recipe:
    """The preset's recipe (``WARM_RECIPE`` over it for a warm start) with the run's recipe flags; UsageError (naming
    the flag) on a value out of range, here or in the run's step counts."""
    overrides = dict(WARM_RECIPE) if warm else {}
    for name in RECIPE_FLAGS:
        value, default = getattr(spec, name), getattr(preset_recipe, name)
        if value is not None:
            overrides[name] = value if default is None else type(default)(value)
    recipe = replace(preset_recipe, **overrides)
    for name, choices in CHOICES.items():
        if getattr(recipe, name) not in choices:
            raise UsageError(f"--{name.replace('_', '-')} {getattr(recipe, name)}: expected one of {choices}")
    if recipe.lr_schedule == "step" and spec.streaming:
        raise UsageError("--lr-schedule step counts epochs, which --streaming has not: pass --lr-schedule inverse_sqrt")
    for name in POSITIVE:
        value = getattr(recipe, name)
        if value is not None and value <= 0:
            raise UsageError(f"--{name.replace('_', '-')} {value}: must be > 0")
    for name in ("warmup_updates", "warmup_init_lr", "weight_decay", "max_grad_norm"):
        if getattr(recipe, name) < 0:
            raise UsageError(f"--{name.replace('_', '-')} {getattr(recipe, name)}: must be >= 0")
    for flag, value in (("--max-steps", spec.max_steps), ("--logging-steps", spec.logging_steps)):
        if value < 1:
            raise UsageError(f"{flag} {value}: must be at least 1")
    if spec.save_steps < 1:
        raise UsageError(f"--save-steps {spec.save_steps}: must be at least 1")
    if spec.max_minutes is not None and spec.max_minutes <= 0:
        raise UsageError(f"--max-minutes {spec.max_minutes}: must be > 0")
    return recipe


@dataclass(frozen=True)
class Built:
    """What a plugin's ``attach`` reads: the built model (from the checkpoint when ``resumed``) and the family's
    collator, the run's tokenizer, dataset and data plan, this rank's batch sampler (None when streaming) and the
    number of micro-batches the run reads from it (None: not known)."""

    model: PreTrainedModel
    collator: object
    tokenizer: PreTrainedTokenizerBase
    dataset: ParallelExamples
    plan: DataPlan
    resumed: bool
    sampler: Sampler | None = None
    micro_batches: int | None = None


class Plugin:
    """A run-wide addition of the joint-BPE path. ``joint.py`` calls each hook for every plugin of the run, in
    order; the defaults do nothing."""

    @classmethod
    def check(cls, resolved: Resolved) -> Plugin | None:
        """The plugin of the run (None: the run does not ask for it), checked before any data is read."""
        raise NotImplementedError

    def configure(self, resolved: Resolved, overrides: dict) -> dict:
        """The model config values with this plugin's (before the config is built)."""
        return overrides

    def tokenizer(self) -> tuple[PreTrainedTokenizerBase, str] | None:
        """The tokenizer a fresh run trains with instead of a joint BPE, and its name in messages (None: none)."""
        return None

    def check_config(self, config: PretrainedConfig, plan: DataPlan) -> None:
        """Checks of the run's config and data plan, before any data is read."""

    def attach(self, built: Built):
        """After the model and the family's collator are built: the collator the run trains with."""
        return built.collator

    def fit_options(self) -> dict:
        """This plugin's keyword arguments of ``Run.fit``."""
        return {}

    def model_name(self, name: str) -> str:
        """The model's name in the run's log."""
        return name

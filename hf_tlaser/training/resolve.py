"""One frozen ``RunPlan`` per run, which ``hf_tlaser.training.cli.resolve(spec)`` makes. First every default
decided in one place (``decide``, which reads no file), warm start's included (``--init-from``: the ``WARM_RECIPE``
over the preset's recipe, the backbone's pooling, the restricted decoder vocabulary, the encoder's learning rate and
frozen updates), with the range checks of the numbers; then the family's training (``cli.TRAININGS``: a module
with ``check(plan) -> RunPlan`` and ``train(plan) -> LaserTrainer``) checks the run and completes the plan
(checkpoint, data, config values, tokenizer, plug-ins) before any corpus text is read. The trainers read the plan,
never ``spec.x or default``; ``cli.train(spec)`` is the whole run.

``Plugin``: a run-wide addition of the joint-BPE path (the warm start, ``training/warm.py``; the teacher,
``training/distill.py``; hard negatives, ``training/hard_negatives.py``): what it adds to the plan, and the two
hooks ``joint.py`` calls.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

from torch.utils.data import Sampler
from transformers import PretrainedConfig, PreTrainedModel, PreTrainedTokenizerBase

from hf_tlaser.data import (
    Pair,
    ParallelExamples,
    Source,
    corpus_languages,
    curriculum_pairs,
    parse_languages,
    parse_pairs,
    resolve_corpora,
)
from hf_tlaser.errors import UsageError
from hf_tlaser.training.presets import (
    BACKBONE_MEMBERS,
    DECODER_VOCAB_MEMBERS,
    WARM_ENCODER_LR,
    WARM_FREEZE_UPDATES,
    WARM_RECIPE,
    Preset,
    Recipe,
    get_preset,
)
from hf_tlaser.training.spec import CHOICES, RECIPE_FLAGS, RunSpec, flag_error

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


def check_corpora_flag(spec: str | list[str], data_dir: str | None = None) -> list[Source]:
    """``--corpora`` -> its Sources, checked without reading text; UsageError prefixed with the flag."""
    try:
        return resolve_corpora(spec, data_dir)
    except UsageError as err:
        raise flag_error("--corpora", err) from None


@dataclass
class DataPlan:
    """What ``--corpora``, ``--pivots`` and ``--pairs`` ask for, checked before any text is read."""

    sources: list[Source]
    pivots: list[str]
    pairs: list[Pair]

    @property
    def languages(self) -> list[str]:
        """The languages of the curriculum (the columns read, what the BPE covers)."""
        return sorted({lang for pair in self.pairs for lang in pair})

    def describe(self) -> str:
        return f"--corpora {','.join(s.spec for s in self.sources)} --pairs {','.join('-'.join(p) for p in self.pairs)}"


def plan_data(spec: RunSpec) -> DataPlan:
    """The checked corpora, pivots and curriculum pairs of the run (``--pairs``, else the paper's pattern over the
    corpora's languages); UsageError naming the flag for a malformed spec or code, a missing file, a pivot or a
    ``--pairs`` language that no corpus has."""
    try:
        pivots = parse_languages(spec.pivots, "pivot")
    except ValueError as err:
        raise flag_error("--pivots", err) from None
    explicit = None
    if spec.pairs:
        try:
            explicit = parse_pairs(spec.pairs)
        except ValueError as err:
            raise flag_error("--pairs", err) from None
    sources = check_corpora_flag(spec.corpora, spec.data_dir)
    try:
        available = corpus_languages(sources)
    except UsageError as err:
        raise flag_error("--corpora", err) from None
    names = ", ".join(source.spec for source in sources)
    if explicit is not None:
        for lang in sorted({lang for pair in explicit for lang in pair}):
            if lang not in available:
                raise UsageError(
                    f"--pairs {spec.pairs}: no corpus has {lang!r} text (the corpora {names} have "
                    f"{', '.join(available)}); add a corpus with {lang} to --corpora (e.g. moses:FOLDER or hf:ID) or "
                    "drop the pair"
                )
        return DataPlan(sources, pivots, explicit)
    for pivot in pivots:
        if pivot not in available:
            raise UsageError(
                f"--pivots {spec.pivots}: {pivot!r} is not in the data (the corpora {names} have "
                f"{', '.join(available)}); choose pivots among them, or give --pairs"
            )
    if len(available) < 2:
        raise UsageError(f"--corpora {names}: one language ({', '.join(available)}); parallel text needs two")
    return DataPlan(sources, pivots, curriculum_pairs(available, pivots))


@dataclass(frozen=True)
class RunPlan:
    """One run, planned: every default decided and every check made before training starts. ``cli.resolve``
    fills it in two steps: the defaults (``decide``, no file read: the preset, the recipe (flags over the warm recipe
    over the preset's), whether the encoder starts from ``--init-from`` (``warm``), the pooling flag (None: the
    preset's), the decoder's vocabulary, the frozen updates and the encoder's peak learning rate (None: the
    recipe's)), then the family's training (``cli.TRAININGS``) checks the run and adds the rest: the checkpoint
    it continues, the data plan, the model config values (``--set``, the plug-ins', the language table; the
    tokenizer's follow when the model is built), the tokenizer and its name in messages (None: a joint BPE is
    trained), the plug-ins, and what only that training reads (``extra``: cNV's NMT pair). The families' trainers
    build from it and call fit."""

    spec: RunSpec
    preset: Preset
    recipe: Recipe
    warm: bool
    pooling: str | None
    decoder_vocab: str
    freeze_encoder_steps: int
    encoder_lr: float | None
    checkpoint: Path | None = None
    data: DataPlan | None = None
    config: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    tokenizer: PreTrainedTokenizerBase | None = None
    tokenizer_source: str = ""
    plugins: tuple[Plugin, ...] = ()
    extra: Any = None


def decide(spec: RunSpec) -> RunPlan:
    """``spec`` with every default filled (the plan's first step, after ``RunSpec.check_families``: reads no file);
    UsageError (naming the flag) on a value out of range or a combination refused."""
    preset = get_preset(spec.model, spec.preset)
    warm = spec.init_from is not None and spec.model in BACKBONE_MEMBERS
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
    if spec.cluster_model is not None and recipe.batch_composition != "cluster":
        raise UsageError("--cluster-model: only with --batch-composition cluster (it chooses the clusters)")
    pooling = spec.pooling or ("backbone" if warm else None)
    return RunPlan(
        spec=spec,
        preset=preset,
        recipe=recipe,
        warm=warm,
        pooling=pooling,
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
    collator, the run's tokenizer, dataset and data plan (``data``), this rank's batch sampler (None when streaming)
    and the number of micro-batches the run reads from it (None: not known)."""

    model: PreTrainedModel
    collator: object
    tokenizer: PreTrainedTokenizerBase
    dataset: ParallelExamples
    data: DataPlan
    resumed: bool
    sampler: Sampler | None = None
    micro_batches: int | None = None


class Plugin:
    """A run-wide addition of the joint-BPE path, made by ``check`` from the plan in progress (its defaults and the
    config values so far) before any data is read. What it adds to the plan is data: its ``config`` values (over
    ``--set``'s), the ``tokenizer`` a fresh run trains with instead of a joint BPE (and its name in messages), its
    keyword arguments of ``Run.fit`` (``fit_options``) and its words after the model's name in the run's log
    (``describes``). ``joint.py`` calls ``attach`` once the model and the family's collator are built, and, before
    any data is read, ``check_config`` of a plugin that has one (a method taking the config, once its values are
    final, and the data plan: the teacher's width)."""

    config: Mapping[str, Any] = MappingProxyType({})
    tokenizer: tuple[PreTrainedTokenizerBase, str] | None = None
    fit_options: Mapping[str, Any] = MappingProxyType({})
    describes: str = ""
    check_config: Callable[[PretrainedConfig, DataPlan], None] | None = None

    @classmethod
    def check(cls, plan: RunPlan) -> Plugin:
        """The plugin of a run that asks for it, checked before any data is read."""
        raise NotImplementedError

    def attach(self, built: Built):
        """After the model and the family's collator are built: the collator the run trains with."""
        raise NotImplementedError

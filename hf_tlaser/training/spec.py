"""``RunSpec``: one training run as a typed object, what ``hf-tlaser train`` turns its flags into and what every
family's training reads (``hf_tlaser.training.families.train``) once ``resolve`` has decided its defaults; its
``--set`` values.
Each field declares the families (``--model``) that take its flag (``flag``: the field metadata the parser's help
reads too); ``RunSpec.check_families`` refuses a flag that the run's family does not take.

A script builds one directly: ``train(RunSpec(output_dir="runs/ct", model="ctlaser", max_steps=50))`` runs what
``hf-tlaser train --output-dir runs/ct --model ctlaser --max-steps 50`` runs (the parser takes its defaults from here).
"""

from __future__ import annotations

import inspect
from dataclasses import MISSING, asdict, dataclass, field, fields
from pathlib import Path

import yaml
from transformers import PretrainedConfig

from hf_tlaser.data import COMPOSITIONS, DEFAULT_PIVOTS, DEFAULT_TRAIN_CORPORA
from hf_tlaser.errors import UsageError
from hf_tlaser.training.presets import (
    BACKBONE_MEMBERS,
    DECODER_VOCAB_MEMBERS,
    JOINT_BPE,
    MODELS,
    MULTIWAY_FAMILIES,
)
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


def flag(default=MISSING, *, families: tuple[str, ...], values: dict | None = None, default_factory=MISSING):
    """A ``RunSpec`` field whose flag the ``families`` (``--model`` names) take; ``values``: ``{value: families}``
    for a value only some of them take (``--batching multiway``). Any other family refuses it
    (``RunSpec.check_families``)."""
    metadata = {"families": families, "values": values or {}}
    return field(default=default, default_factory=default_factory, metadata=metadata)


@dataclass(kw_only=True)
class RunSpec:
    """What a training run asks for: one field per ``hf-tlaser train`` flag (dashes as underscores), in the parser's
    order, each with the families that take it (``flag``); ``to_dict()`` is the ``args`` of the run's record.
    ``check_families`` refuses a flag that ``--model`` does not take; ``resolve`` (``training/resolve.py``)
    decides every default and checks the numbers; the families check the rest (output dir, corpora, model config)
    before reading any data."""

    config: str | None = flag(None, families=MODELS)
    """The ``--config`` file the values came from (recorded, not read again)."""
    model: str = flag("ctlaser", families=MODELS)
    preset: str = flag("tiny", families=MODELS)
    corpora: str | list[str] = flag(",".join(DEFAULT_TRAIN_CORPORA), families=MODELS)
    pivots: str = flag(",".join(DEFAULT_PIVOTS), families=JOINT_BPE)
    """The default curriculum's targets (cnv trains its one ``--pairs`` pair)."""
    pairs: str | None = flag(None, families=MODELS)
    streaming: bool = flag(False, families=JOINT_BPE)
    shuffle_buffer: int = flag(10_000, families=JOINT_BPE)
    data_dir: str | None = flag(None, families=MODELS)
    tokenizer: str | None = flag(None, families=JOINT_BPE)
    """An existing tokenizer instead of the joint BPE (cnv: each NMT model brings its own)."""
    output_dir: str = flag(families=MODELS)
    overwrite: bool = flag(False, families=MODELS)
    max_steps: int = flag(1000, families=MODELS)
    max_minutes: float | None = flag(None, families=MODELS)
    seed: int = flag(1, families=MODELS)
    precision: str = flag("auto", families=MODELS)
    use_cpu: bool = flag(False, families=MODELS)
    logging_steps: int = flag(10, families=MODELS)
    save_steps: int = flag(200, families=MODELS)
    save_total_limit: int = flag(2, families=MODELS)
    resume: str | None = flag(None, families=MODELS)
    set: list[str] = flag(default_factory=list, families=MODELS)
    """Model config overrides ``KEY=VALUE`` (``config_overrides``: its keys are checked against each family's
    config)."""
    nmt_steps: int | None = flag(None, families=("cnv",))
    nmt_pair: str | None = flag(None, families=("cnv",))
    teacher: str | None = flag(None, families=JOINT_BPE)
    """``--teacher SPEC``: distil towards a teacher's sentence vectors (``hf_tlaser.training.distill``); cnv's vectors
    are r x d matrices per language pair, with no single sentence vector to regress onto a teacher's."""
    distill_weight: float = flag(1.0, families=JOINT_BPE)
    teacher_cache: str | None = flag(None, families=JOINT_BPE)
    """Teacher-vector cache root (None: ``$HF_TLASER_TEACHER_CACHE`` or ``~/.cache``; ``none``: no cache)."""
    init_from: str | None = flag(None, families=BACKBONE_MEMBERS)
    """``--init-from SPEC``: the encoder starts from a pretrained Hugging Face encoder (``hf_tlaser.training.warm``);
    the members whose encoder is a transformer."""
    pooling: str | None = flag(None, families=BACKBONE_MEMBERS)
    """``cls``, ``mean`` or ``backbone`` (the ``--init-from`` model's own); None: ``backbone`` with ``--init-from``,
    else the preset's. Yu 2018's pooling (mean, max, self_attention) is ``--set pooling=...``."""
    decoder_vocab: str | None = flag(None, families=DECODER_VOCAB_MEMBERS)
    """``full`` or ``targets`` (the pieces of the training targets); None: ``targets`` with ``--init-from``."""
    freeze_encoder_steps: int | None = flag(None, families=BACKBONE_MEMBERS)
    """Updates without a gradient into the encoder (None: ``WARM_FREEZE_UPDATES`` with ``--init-from``, else 0); the
    members whose encoder reads ``frozen``."""
    encoder_lr: float | None = flag(None, families=JOINT_BPE)
    """Peak learning rate of the encoder's weights (None: ``WARM_ENCODER_LR`` with ``--init-from``, else the
    recipe's ``learning_rate``)."""
    # recipe overrides (RECIPE_FLAGS): None keeps the preset's value; numbers are cast to the recipe's type
    vocab_size: float | None = flag(None, families=MODELS)
    max_tokens: float | None = flag(None, families=MODELS)
    update_tokens: float | None = flag(None, families=MODELS)
    learning_rate: float | None = flag(None, families=MODELS)
    warmup_updates: float | None = flag(None, families=MODELS)
    warmup_init_lr: float | None = flag(None, families=MODELS)
    lr_schedule: str | None = flag(None, families=MODELS)
    lr_step_epochs: float | None = flag(None, families=MODELS)
    weight_decay: float | None = flag(None, families=MODELS)
    max_grad_norm: float | None = flag(None, families=MODELS)
    max_sentence_tokens: float | None = flag(None, families=MODELS)
    batching: str | None = flag(None, families=MODELS, values={"multiway": MULTIWAY_FAMILIES})
    batch_composition: str | None = flag(None, families=MODELS)
    max_lines: int | None = flag(None, families=MODELS)
    max_sentences: int | None = flag(None, families=MODELS)

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

    def check_families(self) -> None:
        """UsageError (one line, naming the flag, ``--model`` and the families that take it) for a flag given (its
        value differs from its default) that ``--model`` does not take, or one of its values that it does not take.
        Reads no file: the first check of a run."""
        if self.model not in MODELS:
            raise UsageError(f"--model {self.model}: expected one of {', '.join(MODELS)}")
        defaults = self.defaults()
        for item in fields(self):
            value, name = getattr(self, item.name), f"--{item.name.replace('_', '-')}"
            given = item.name not in defaults or value != defaults[item.name]
            refusals = [(name, item.metadata["families"])] if given else []
            refusals += [(f"{name} {value}", f) for choice, f in item.metadata["values"].items() if choice == value]
            for what, families in refusals:
                if self.model not in families:
                    raise UsageError(
                        f"{what} is an option of --model {', '.join(families)}, not of --model {self.model}"
                    )


def families_of(name: str) -> tuple[str, ...]:
    """The families (``--model`` names) that take the ``RunSpec`` field ``name``'s flag."""
    return next(item.metadata["families"] for item in fields(RunSpec) if item.name == name)


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

"""``RunSpec``: one training run as a typed object, what ``hf-tlaser train`` turns its flags into and what every
family's training reads (``hf_tlaser.training.cli.train``) once ``resolve`` has decided its defaults; its
``--set`` values.
Each field declares the families (``--model``) that take its flag (``flag``: the field metadata the parser's help
reads too); ``RunSpec.check_families`` refuses a flag that the run's family does not take.

A script builds one directly: ``train(RunSpec(output_dir="runs/ct", model="ctlaser", max_steps=50))`` runs what
``hf-tlaser train --output-dir runs/ct --model ctlaser --max-steps 50`` runs (the parser takes its defaults from here).
"""

from __future__ import annotations

import inspect
import math
import types
import typing
from dataclasses import MISSING, asdict, dataclass, field, fields
from pathlib import Path

import yaml
from transformers import PretrainedConfig

from hf_tlaser.data import COMPOSITIONS, DEFAULT_PAIRS, DEFAULT_PIVOTS, DEFAULT_TRAIN_CORPORA, REGISTRY, SPEC_HELP
from hf_tlaser.encoders import SPEC_HELP as TEACHER_SPEC_HELP
from hf_tlaser.errors import UsageError
from hf_tlaser.hardware import PRECISIONS
from hf_tlaser.training.presets import (
    BACKBONE_MEMBERS,
    DECODER_VOCAB_MEMBERS,
    JOINT_BPE,
    MODELS,
    MULTIWAY_FAMILIES,
    SIZES,
    WARM_ENCODER_LR,
    WARM_FREEZE_UPDATES,
    Recipe,
    get_preset,
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


INIT_HINT = "a Hugging Face encoder folder or Hub id (XLM-R, BERT, e5, LaBSE, ...) or a sentence-transformers folder"
DECODER_VOCABS = ("full", "targets")
POOLING_CHOICES = ("cls", "mean", "backbone")


def flag(
    default=MISSING,
    *,
    families: tuple[str, ...],
    values: dict | None = None,
    default_factory=MISSING,
    help: str | None = None,  # noqa: A002 - argparse's name
    choices: tuple[str, ...] | None = None,
    metavar: str | None = None,
):
    """A ``RunSpec`` field whose flag the ``families`` (``--model`` names) take; ``values``: ``{value: families}``
    for a value only some of them take (``--batching multiway``). Any other family refuses it
    (``RunSpec.check_families``). ``help``, ``choices`` and ``metavar`` are the flag's in ``hf-tlaser train``
    (``training.cli.build_parser`` generates the parser from the fields)."""
    metadata = {
        "families": families,
        "values": values or {},
        "argparse": dict(help=help, choices=choices, metavar=metavar),
    }
    return field(default=default, default_factory=default_factory, metadata=metadata)


def recipe_flag(name: str, *, values: dict | None = None):
    """The ``RunSpec`` field of a recipe flag (``RECIPE_FLAGS``): None keeps the preset's value, whose value for each
    size its help lists."""
    sizes = [getattr(get_preset(MODELS[0], size).recipe, name) for size in SIZES]
    presets = ", ".join(f"{size} {'all' if value is None else value}" for size, value in zip(SIZES, sizes))
    what = next(f.metadata["help"] for f in fields(Recipe) if f.name == name)
    help = f"{what} (default: the preset's: {presets})"
    return flag(None, families=MODELS, values=values, choices=CHOICES.get(name), help=help)


@dataclass(kw_only=True)
class RunSpec:
    """What a training run asks for: one field per ``hf-tlaser train`` flag (dashes as underscores), in the parser's
    order, each with the families that take it (``flag``); ``to_dict()`` is the ``args`` of the run's record.
    ``check_families`` refuses a flag that ``--model`` does not take; ``resolve`` (``training/resolve.py``)
    decides every default and checks the numbers; the families check the rest (output dir, corpora, model config)
    before reading any data."""

    config: str | None = flag(
        None, families=MODELS, help="YAML/JSON file whose keys are these options, dashed or not (flags win)"
    )
    """The ``--config`` file the values came from (recorded, not read again)."""
    model: str = flag("ctlaser", families=MODELS, choices=MODELS)
    preset: str = flag("tiny", families=MODELS, choices=SIZES)
    corpora: str | list[str] = flag(
        ",".join(DEFAULT_TRAIN_CORPORA),
        families=MODELS,
        help=f"comma-separated corpus specs (or a YAML list), each one of: {SPEC_HELP}; registered: "
        f"{','.join(REGISTRY)} (docs/data.md)",
    )
    pivots: str = flag(
        ",".join(DEFAULT_PIVOTS),
        families=JOINT_BPE,
        help="pivot (target) languages of the default curriculum; language codes are ISO 639-1/3, with an optional "
        "script: zh_Hans",
    )
    """The default curriculum's targets (cnv trains its one ``--pairs`` pair)."""
    pairs: str | None = flag(
        None,
        families=MODELS,
        help="curriculum pairs src-tgt, comma-separated (default: every language of the corpora toward every pivot, "
        "the pivots toward each other; the default corpora and pivots give the paper's "
        + ",".join("-".join(pair) for pair in DEFAULT_PAIRS)
        + ")",
    )
    streaming: bool = flag(
        False,
        families=JOINT_BPE,
        help="read the corpora as streams (datasets.IterableDataset): flat memory for corpora of any size, pair "
        "batching only, no English pivot join (docs/data.md)",
    )
    shuffle_buffer: int = flag(
        10_000,
        families=JOINT_BPE,
        help="--streaming: groups per pair read, cleaned, sorted and packed at once (the shuffle buffer)",
    )
    data_dir: str | None = flag(
        None, families=MODELS, help="corpora folder (default: $HF_TLASER_DATA or ../shared/data)"
    )
    tokenizer: str | None = flag(
        None, families=JOINT_BPE, help="existing tokenizer folder (default: train a joint BPE)"
    )
    """An existing tokenizer instead of the joint BPE (cnv: each NMT model brings its own)."""
    output_dir: str = flag(families=MODELS, help="run folder; must be empty unless --resume or --overwrite")
    overwrite: bool = flag(False, families=MODELS, help="replace the run in --output-dir (other files are kept)")
    max_steps: int = flag(1000, families=MODELS, help="optimizer updates the run trains for")
    max_minutes: float | None = flag(None, families=MODELS, help="safety stop (and save) after this wall-clock time")
    seed: int = flag(1, families=MODELS)
    precision: str = flag("auto", families=MODELS, choices=PRECISIONS, help="auto: what is fast on this hardware")
    use_cpu: bool = flag(False, families=MODELS, help="train on CPU even if a GPU is present (gloo for DDP)")
    logging_steps: int = flag(10, families=MODELS)
    save_steps: int = flag(200, families=MODELS)
    save_total_limit: int = flag(2, families=MODELS, help="checkpoints kept (older ones are deleted)")
    resume: str | None = flag(
        None,
        families=MODELS,
        help="checkpoint folder, or 'auto' for the last one in --output-dir, or 'force' for the last one even where "
        "this command's plan (data, batches, clusters, teacher, start, recipe) differs from the run's",
    )
    set: list[str] = flag(
        default_factory=list,
        families=MODELS,
        metavar="KEY=VALUE",
        help="model config override (cnv: nmt.KEY=VALUE for the Marian config of its NMT pair)",
    )
    """Model config overrides ``KEY=VALUE`` (``config_overrides``: its keys are checked against each family's
    config)."""
    nmt_steps: int | None = flag(
        None,
        families=("cnv",),
        help="updates of each NMT direction in stage 1 (default: the preset's: "
        + ", ".join(f"{size} {get_preset('cnv', size).nmt.steps}" for size in SIZES)
        + ")",
    )
    nmt_pair: str | None = flag(
        None,
        families=("cnv",),
        metavar="A_TO_B,B_TO_A",
        help="two existing Hugging Face seq2seq folders or Hub ids (a->b, b->a) instead of training them",
    )
    teacher: str | None = flag(
        None,
        families=JOINT_BPE,
        help="distil towards a teacher's sentence vectors (MSE of both sides of each pair to the teacher's vector "
        f"of the pivot text): {TEACHER_SPEC_HELP}",
    )
    """``--teacher SPEC``: distil towards a teacher's sentence vectors (``hf_tlaser.training.distill``); cnv's vectors
    are r x d matrices per language pair, with no single sentence vector to regress onto a teacher's."""
    distill_weight: float = flag(
        1.0, families=JOINT_BPE, help="--teacher: weight of the distillation MSE, added to the family's own losses"
    )
    teacher_cache: str | None = flag(
        None,
        families=JOINT_BPE,
        help="--teacher, --cluster-model: teacher-vector cache folder, or 'none' (default: $HF_TLASER_TEACHER_CACHE "
        "or ~/.cache)",
    )
    """Teacher-vector cache root (None: ``$HF_TLASER_TEACHER_CACHE`` or ``~/.cache``; ``none``: no cache)."""
    cluster_model: str | None = flag(
        None,
        families=JOINT_BPE,
        metavar="SPEC",
        help="--batch-composition cluster: the model whose vectors of the pivot sentences cluster the pairs "
        f"(default: the --init-from model; cached under --teacher-cache): {TEACHER_SPEC_HELP}",
    )
    """The model of ``--batch-composition cluster``'s hard-negative batches (``training/hard_negatives.py``)."""
    cluster_size: int = flag(
        64,
        families=JOINT_BPE,
        help="--batch-composition cluster: rows per cluster of a stream (k-means; a micro-batch of ~1,000 target "
        "tokens holds ~35 pairs)",
    )
    cluster_pool: int | None = flag(
        None,
        families=JOINT_BPE,
        metavar="N",
        help="--batch-composition cluster: embed and cluster at most N rows of each stream (a random sample fixed by "
        "the seed; the stream draws from these only): a run that reads a part of an epoch need not embed the whole "
        "corpus (default: every row)",
    )
    init_from: str | None = flag(
        None,
        families=BACKBONE_MEMBERS,
        metavar="SPEC",
        help=f"start the encoder from a pretrained model (with its tokenizer, no joint BPE): {INIT_HINT}",
    )
    """``--init-from SPEC``: the encoder starts from a pretrained Hugging Face encoder (``hf_tlaser.training.warm``);
    the members whose encoder is a transformer."""
    init_layers: str | None = flag(
        None,
        families=BACKBONE_MEMBERS,
        metavar="N|I,J,...",
        help="--init-from: keep N of the pretrained encoder's layers, spread evenly (6 of 12: every other one, as "
        "DistilBERT starts its student), or the listed ones (0-based, ascending) (default: all)",
    )
    """A layer-reduced student of the ``--init-from`` model (``student.student_layers``)."""
    freeze_word_embeddings: bool = flag(
        False,
        families=BACKBONE_MEMBERS,
        help="--init-from: the pretrained word embeddings get no gradient and no optimizer state for the whole run "
        "(the largest matrix of a multilingual encoder: its gradient and Adam step are a large part of a CPU update); "
        "a weight tied to them (LDT's generative output, --set tie_decoder_to_encoder=true) stays too",
    )
    freeze_layers: int | None = flag(
        None,
        families=BACKBONE_MEMBERS,
        metavar="N",
        help="--init-from: the encoder's embeddings and its first N layers get no gradient and no optimizer state for "
        "the whole run, so the backward pass stops above them (a cheaper update; default: every layer trains)",
    )
    """``--freeze-layers N``: train only the top layers of the pretrained encoder (``student.freeze_bottom``)."""
    pooling: str | None = flag(
        None,
        families=BACKBONE_MEMBERS,
        choices=POOLING_CHOICES,
        help="the sentence vector: cls (position 0, the paper), mean, or backbone (the --init-from model's own; "
        "the default with --init-from, else the preset's)",
    )
    """None: ``backbone`` with ``--init-from``, else the preset's (``resolve``). Yu 2018's pooling (mean, max,
    self_attention) is ``--set pooling=...``."""
    decoder_vocab: str | None = flag(
        None,
        families=DECODER_VOCAB_MEMBERS,
        choices=DECODER_VOCABS,
        help="the decoder's vocabulary, full or the pieces of the training targets (default: targets "
        "with --init-from, else full)",
    )
    freeze_encoder_steps: int | None = flag(
        None,
        families=BACKBONE_MEMBERS,
        help="updates during which the encoder gets no gradient, so that a decoder at random init trains first "
        f"(default: {WARM_FREEZE_UPDATES} with --init-from, measured in docs/results.md; else 0)",
    )
    """The members whose encoder reads ``frozen``."""
    encoder_lr: float | None = flag(
        None,
        families=JOINT_BPE,
        help=f"peak learning rate of the encoder's weights (default: {WARM_ENCODER_LR} with --init-from, else "
        "--learning-rate's)",
    )
    # recipe overrides (RECIPE_FLAGS): None keeps the preset's value; numbers are cast to the recipe's type
    vocab_size: float | None = recipe_flag("vocab_size")
    max_tokens: float | None = recipe_flag("max_tokens")
    update_tokens: float | None = recipe_flag("update_tokens")
    learning_rate: float | None = recipe_flag("learning_rate")
    warmup_updates: float | None = recipe_flag("warmup_updates")
    warmup_init_lr: float | None = recipe_flag("warmup_init_lr")
    lr_schedule: str | None = recipe_flag("lr_schedule")
    lr_step_epochs: float | None = recipe_flag("lr_step_epochs")
    weight_decay: float | None = recipe_flag("weight_decay")
    max_grad_norm: float | None = recipe_flag("max_grad_norm")
    max_sentence_tokens: float | None = recipe_flag("max_sentence_tokens")
    batching: str | None = recipe_flag("batching", values={"multiway": MULTIWAY_FAMILIES})
    batch_composition: str | None = recipe_flag("batch_composition", values={"cluster": JOINT_BPE})
    max_lines: int | None = recipe_flag("max_lines")
    max_sentences: int | None = recipe_flag("max_sentences")

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


KINDS = {
    bool: "true or false",
    int: "an integer",
    float: "a finite number",
    str: "a string",
    list: "a list [A, B]",
    tuple: "a list [A, B]",
    dict: "a mapping {KEY: VALUE}",
    type(None): "null",
}
"""How a ``--set`` error names each type a config parameter takes."""


def parameter_types(config_class: type[PretrainedConfig]) -> dict[str, object]:
    """The type of each ``__init__`` parameter of ``config_class``: its annotation, or, where the annotations cannot
    be resolved (a library's config that names a type it imports only for type checkers), its default's type (None:
    any value)."""
    parameters = inspect.signature(config_class.__init__).parameters
    try:
        hints = typing.get_type_hints(config_class.__init__)
    except (NameError, TypeError):
        hints = {}
    return {
        name: hints.get(name, None if item.default in (None, inspect.Parameter.empty) else type(item.default))
        for name, item in parameters.items()
        if name not in ("self", "kwargs")
    }


def typed_value(key: str, text: str, kind: object) -> object:
    """``text`` (a ``--set KEY=TEXT`` value) as a value of ``kind`` (a type, or a union of types; None: any): parsed as
    a YAML scalar (text that is no YAML stays text), a number checked to be finite, an integer refused where a bool is
    asked (and the reverse), the text as written where a string is asked and YAML reads something else. UsageError
    (naming the key and the types it takes) for a value of none of them."""
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError:
        value = text
    if kind is None:
        return value
    options = (
        typing.get_args(kind)
        if isinstance(kind, types.UnionType) or typing.get_origin(kind) is typing.Union
        else (kind,)
    )
    for option in options:
        base = typing.get_origin(option) or option
        if base is bool and isinstance(value, bool) or base is type(None) and value is None:
            return value
        if base is int and isinstance(value, int) and not isinstance(value, bool):
            return value
        if base is float and isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            return value
        if base in (list, tuple) and isinstance(value, list) or base is dict and isinstance(value, dict):
            return value
    if str in options and value is not None:
        return value if isinstance(value, str) else text
    taken = " or ".join(
        dict.fromkeys(KINDS.get(typing.get_origin(option) or option, str(option)) for option in options)
    )
    raise UsageError(f"--set {key}={text}: {key} takes {taken}")


def config_overrides(items: list[str], config_class: type[PretrainedConfig]) -> dict:
    """``["distance_beta=0.5", "distance_vnorm_grad=false"]`` -> typed dict (values parsed as YAML scalars and checked
    against the type of the parameter of ``config_class``: ``typed_value``; their ranges are the class's own checks,
    made when the run's config is built, before any data is read).

    UsageError on a malformed item, a key that is not a parameter of ``config_class`` or a value of another type.
    """
    kinds = parameter_types(config_class)
    out = {}
    for item in items:
        if "=" not in item:
            raise UsageError(f"--set {item!r}: expected KEY=VALUE")
        key, value = (part.strip() for part in item.split("=", 1))
        if key not in kinds:
            raise UsageError(f"unknown --set key {key!r}; known keys: {', '.join(kinds)}")
        out[key] = typed_value(key, value, kinds[key])
    return out

"""The families trained on one joint BPE over the curriculum languages (``tlaser``, ``ctlaser``, ``laser1``,
``laser6``, ``claser6``, ``yu2018``, ``ldt``): corpora -> joint BPE (or ``--tokenizer``) -> curriculum batches ->
``Run.fit``. Each family is its preset (the config and model class, whose forward returns its loss) and the collator
options its model asks for (``collator_for``)."""

from __future__ import annotations

import inspect
import json
import logging
from dataclasses import dataclass
from itertools import islice
from pathlib import Path

from transformers import AutoTokenizer, PretrainedConfig, PreTrainedTokenizerBase

from hf_tlaser.data import Pair, TranslationCollator, decoder_languages
from hf_tlaser.errors import UsageError
from hf_tlaser.models.registry import FAMILIES
from hf_tlaser.teachers import Teacher
from hf_tlaser.tokenization import save_tokenizer, write_token_report
from hf_tlaser.training.distill import (
    DistillCollator,
    check_teacher,
    check_widths,
    pivot_languages,
    teacher_matrix,
    warn_languages,
)
from hf_tlaser.training.plan import DataPlan, plan_corpus, plan_data, plan_stream, train_joint_bpe
from hf_tlaser.training.presets import DECODER_VOCAB_MEMBERS, Preset, Recipe, get_preset
from hf_tlaser.training.run import Run
from hf_tlaser.training.run_dir import check_checkpoint, check_output_dir, check_resume, check_resume_config
from hf_tlaser.training.spec import RunSpec, config_overrides
from hf_tlaser.training.trainer import LaserTrainer, StreamStateCallback
from hf_tlaser.training.warm import Backbone, backbone_overrides, check_backbone, target_vocabulary, unk_rates

logger = logging.getLogger("hf_tlaser.train")

SPECIAL_TOKEN_IDS = {"pad_token_id": "pad_token", "eos_token_id": "eos_token", "cls_token_id": "cls_token"}
"""Config fields that must match the tokenizer (``unk_token_id`` too where the tokenizer has one)."""


def special_token_ids(tokenizer: PreTrainedTokenizerBase, source: str, config_class: type) -> dict[str, int]:
    """The config fields that must follow the tokenizer's special tokens; UsageError if pad, ``</s>`` or the
    STR_TAG (cls) token is missing. Ids that differ from the config defaults are logged (at INFO: the config follows
    the tokenizer by design)."""
    ids = {}
    for key, token in SPECIAL_TOKEN_IDS.items():
        token_id = getattr(tokenizer, key)
        if getattr(tokenizer, token) is None or token_id is None:
            raise UsageError(
                f"--tokenizer {source} has no {token}; the models need pad, eos (</s>) and cls (STR_TAG) tokens "
                f"(set them in its tokenizer_config.json)"
            )
        ids[key] = token_id
    if tokenizer.unk_token is not None:
        ids["unk_token_id"] = tokenizer.unk_token_id
    ids["decoder_start_token_id"] = ids["eos_token_id"]
    defaults = inspect.signature(config_class.__init__).parameters
    ids = {key: value for key, value in ids.items() if key in defaults}  # an encoder-only config has no decoder start
    changed = [
        f"{key}={value} (config default {defaults[key].default})"
        for key, value in ids.items()
        if value != defaults[key].default
    ]
    if changed:
        logger.info("special-token ids from the tokenizer: %s", ", ".join(changed))
    return ids


def model_config(preset: Preset, tokenizer: PreTrainedTokenizerBase, source: str, overrides: dict) -> PretrainedConfig:
    """The preset's config for ``tokenizer``: its vocabulary size and special-token ids, then the ``--set`` values."""
    ids = special_token_ids(tokenizer, source, preset.config_class)
    return preset.make_config(len(tokenizer), **{**ids, **overrides})


def load_tokenizer(folder: Path, flag: str) -> PreTrainedTokenizerBase:
    """The tokenizer saved in ``folder``; UsageError naming ``flag`` when there is none."""
    if not (folder / "tokenizer.json").is_file() and not (folder / "tokenizer_config.json").is_file():
        raise UsageError(f"{flag} {folder}: no tokenizer files there")
    return AutoTokenizer.from_pretrained(folder)


def resume_tokenizer(checkpoint: Path) -> Path:
    """The folder of the tokenizer saved with the run of ``checkpoint`` (the checkpoint, else the run dir)."""
    for folder in (checkpoint, checkpoint.parent):
        if (folder / "tokenizer.json").is_file():
            return folder
    raise UsageError(f"--resume {checkpoint}: no tokenizer.json in {checkpoint} or {checkpoint.parent}")


def model_languages_for(preset: Preset, pairs: list[Pair]) -> list[str]:
    """``config.languages`` for the curriculum: the rows of the model's language table (the targets of ``pairs``,
    and their sources for a model that also translates back, Yu 2018), or every curriculum language for a model
    without one (LDT)."""
    family = FAMILIES[preset.config_class.model_type]
    return decoder_languages(pairs, with_sources=family.translates_back or not family.language_table)


def resumed_languages(checkpoint: Path, needed: list[str]) -> list[str] | None:
    """The checkpoint's ``config.languages`` when it holds every language the curriculum needs (a run saved before
    the table followed the pivots keeps its table), else None."""
    saved = resumed_value(checkpoint, "languages")
    return list(saved) if saved and set(needed) <= set(saved) else None


def collator_for(model, tokenizer: PreTrainedTokenizerBase, pairs: list[Pair]) -> TranslationCollator:
    """The family's collator: the translation batches, with what its model reads besides them (the target
    sentences encoded too, the source language)."""
    return TranslationCollator(
        tokenizer,
        model.config.languages,
        with_target_encoding=model.needs_target_encoding,
        pairs=pairs,
        max_length=None,
        with_source_language=getattr(model, "needs_source_language", False),
    )


@dataclass
class JointPlan:
    """What the checked run of a joint-BPE family asks for: its preset and recipe, the checkpoint it continues, the
    data plan, the model config (vocabulary and special ids follow the tokenizer) with its ``--set`` overrides, and
    the tokenizer given (``--tokenizer``, or the resumed run's; None: train a joint BPE)."""

    preset: Preset
    recipe: Recipe
    checkpoint: Path | None
    data: DataPlan
    overrides: dict
    config: PretrainedConfig
    tokenizer: PreTrainedTokenizerBase | None
    teacher: Teacher | None = None
    backbone: Backbone | None = None
    decoder_vocab: str = "full"


def check_joint(spec: RunSpec) -> JointPlan:
    """The checks of a joint-BPE family's run, before any corpus text is read; UsageError on a mistake. Flags the
    family does not take were refused before (``RunSpec.check_families``)."""
    preset = get_preset(spec.model, spec.preset)
    recipe = spec.recipe(preset)
    if spec.streaming and recipe.batching != "pair":
        raise UsageError(
            "--streaming trains with --batching pair: multi-way batching assigns every group by the rarest pair of "
            "the whole corpus"
        )
    teacher = check_teacher(spec)
    decoder_vocab = check_decoder_vocab(spec, preset)
    backbone = check_backbone(spec.init_from, spec.model, spec.tokenizer) if spec.init_from else None
    checkpoint = check_output_dir(spec)
    if checkpoint is not None:
        check_resume(checkpoint, spec)
        step = check_checkpoint(checkpoint)
    overrides = config_overrides(spec.set, preset.config_class)
    if spec.pooling not in (None, "backbone"):
        overrides["pooling"] = spec.pooling
    if backbone is not None:
        logger.info("--init-from: %s", backbone.describe())
        overrides = backbone_overrides(backbone, spec.pooling or "backbone", overrides)
    elif spec.pooling == "backbone":
        raise UsageError("--pooling backbone: only with --init-from (the pretrained model's own pooling)")
    if checkpoint is not None and decoder_vocab == "targets":
        overrides["decoder_vocab_size"] = resumed_value(checkpoint, "decoder_vocab_size")
    try:
        preset.make_config(recipe.vocab_size, **overrides)
    except ValueError as err:
        raise UsageError(f"model config ({preset.name} with --set {spec.set}): {err}") from None
    plan = plan_data(spec)
    languages = plan.languages
    evaluation = [source.spec for source in plan.sources if source.evaluation]
    if evaluation:
        logger.warning(
            "--corpora %s: evaluation corpora (retrieval sets of hf-tlaser evaluate); their scores will not measure "
            "generalisation",
            ", ".join(evaluation),
        )
    needed = model_languages_for(preset, plan.pairs)
    table = overrides.get("languages") or (checkpoint and resumed_languages(checkpoint, needed)) or needed
    missing = sorted(set(needed) - set(table))
    if missing:
        raise UsageError(f"--set languages={table} lacks {missing}, which the curriculum {plan.describe()} needs")
    overrides = {**overrides, "languages": list(table), "training_languages": languages}
    config = preset.make_config(recipe.vocab_size, **overrides)  # vocab size and special ids follow below
    if teacher is not None:
        check_widths(teacher, config, spec)
        warn_languages(teacher, languages)
    if checkpoint is not None:
        tokenizer_source = resume_tokenizer(checkpoint)
        logger.info(
            "resuming from %s (step %d); tokenizer: %s (saved with the run)", checkpoint, step, tokenizer_source
        )
        if spec.tokenizer and Path(spec.tokenizer).resolve() != tokenizer_source.resolve():
            logger.warning(
                "--tokenizer %s is ignored: a resumed run keeps the tokenizer it was trained with", spec.tokenizer
            )
    else:
        tokenizer_source = Path(spec.tokenizer) if spec.tokenizer else None
    tokenizer = None
    if backbone is not None and checkpoint is None:
        tokenizer = backbone.tokenizer
        config = model_config(preset, tokenizer, f"--init-from {spec.init_from}", overrides)
    elif tokenizer_source is not None:
        tokenizer = load_tokenizer(tokenizer_source, "--resume" if checkpoint else "--tokenizer")
        config = model_config(preset, tokenizer, str(tokenizer_source), overrides)
    if checkpoint is not None:
        check_resume_config(checkpoint, config)
    return JointPlan(preset, recipe, checkpoint, plan, overrides, config, tokenizer, teacher, backbone, decoder_vocab)


def check_decoder_vocab(spec: RunSpec, preset: Preset) -> str:
    """``--decoder-vocab`` of the run (default: ``targets`` with ``--init-from``, else ``full``); UsageError for a
    streamed corpus (whose targets are not known in advance)."""
    choice = spec.decoder_vocab or ("targets" if spec.init_from else "full")
    if choice == "targets" and spec.model not in DECODER_VOCAB_MEMBERS:
        return "full"  # the flag itself is refused for such a member (RunSpec.check_families)
    if choice == "targets" and spec.streaming:
        raise UsageError("--decoder-vocab targets reads every training target first: not with --streaming (use full)")
    return choice


def resumed_value(checkpoint: Path, key: str):
    """A value of the checkpoint's ``config.json`` (None without the file or the key)."""
    path = checkpoint / "config.json"
    return json.loads(path.read_text(encoding="utf-8")).get(key) if path.is_file() else None


def train_joint(spec: RunSpec) -> LaserTrainer:
    """Run one training job of a joint-BPE family; returns the trainer (its ``args.output_dir`` holds the saved
    model). Raises UsageError (before reading any corpus where it can) on a mistake the user can fix."""
    checked = check_joint(spec)
    preset, recipe, checkpoint, plan = checked.preset, checked.recipe, checked.checkpoint, checked.data
    config, tokenizer, languages = checked.config, checked.tokenizer, plan.languages
    run = Run.open(spec, preset, recipe, checkpoint)
    logger.info(
        "languages %s; pivots %s; %d curriculum pairs: %s",
        languages,
        plan.pivots,
        len(plan.pairs),
        ",".join("-".join(pair) for pair in plan.pairs),
    )

    token_report = None
    if tokenizer is None:
        tokenizer, token_report = train_joint_bpe(plan, spec.data_dir, recipe, spec.streaming)
        config = model_config(preset, tokenizer, "the trained BPE", checked.overrides)

    if spec.streaming:
        dataset = plan_stream(plan, tokenizer, recipe, run.training_args, spec.shuffle_buffer, checkpoint)
        sampler, groups = None, "streamed"
        run.training_args.ignore_data_skip = True  # the stream state continues the data, not a replay
    else:
        dataset, sampler = plan_corpus(plan, tokenizer, recipe, run.training_args, spec.data_dir)
        groups = f"{len(dataset)} groups"
    vocabulary = None  # a resumed run's restricted vocabulary comes with its checkpoint
    if checked.decoder_vocab == "targets" and checkpoint is None:
        targets = sorted({b for _, b in plan.pairs})
        vocabulary = target_vocabulary(tokenizer, (t for lang in targets for t in dataset.dataset[lang] if t))
        config.decoder_vocab_size = len(vocabulary)
        logger.info(
            "decoder vocabulary: the %d pieces of the %s targets (of %d)", len(vocabulary), targets, len(tokenizer)
        )
    model = preset.model_class(config)
    if vocabulary is not None:
        model.decoder_vocab_ids.copy_(vocabulary)
    if checked.backbone is not None:
        if checkpoint is None:
            checked.backbone.load_into(model.encoder)
        if not spec.streaming:
            samples = {lang: list(islice(filter(None, dataset.dataset[lang]), 2000)) for lang in languages}
            unk_rates(tokenizer, samples)
    collator = collator_for(model, tokenizer, plan.pairs)
    if checked.teacher is not None:
        matrix, row_of = teacher_matrix(
            checked.teacher, spec.teacher_cache, dataset, pivot_languages(plan.pairs, plan.pivots)
        )
        collator = DistillCollator(collator, tokenizer, matrix, row_of, plan.pairs, plan.pivots)
    logger.info(
        "%s: %.1fM parameters, %s, %s micro-batches/epoch/rank, accumulation %d, batching=%s, language table %s; "
        "training %d updates",
        preset.name if checked.backbone is None else f"{spec.model} on {checked.backbone.name}",
        sum(p.numel() for p in model.parameters()) / 1e6,
        groups,
        "endless (streaming)" if sampler is None else len(sampler),
        run.training_args.gradient_accumulation_steps,
        recipe.batching,
        config.languages,
        spec.max_steps,
    )
    if run.main_process:  # the first files of the run: a mistake found above leaves the output dir as it was
        save_tokenizer(tokenizer, run.out)
        if token_report is not None:
            write_token_report(token_report, run.out)
        run.record["data"] = {
            "corpora": [source.spec for source in plan.sources],
            "languages": languages,
            "pivots": plan.pivots,
            "pairs": ["-".join(pair) for pair in plan.pairs],
            "streaming": spec.streaming,
        }
        run.write_record()
    callbacks = [StreamStateCallback(dataset)] if spec.streaming else []
    return run.fit(
        model,
        dataset,
        collator,
        sampler,
        callbacks=callbacks,
        tokenizer=tokenizer,
        distill_weight=spec.distill_weight,
        freeze_encoder_steps=spec.encoder_schedule[0],
        encoder_lr=spec.encoder_schedule[1],
        save_dtype=None if checked.backbone is None else checked.backbone.stored_dtype,
    )

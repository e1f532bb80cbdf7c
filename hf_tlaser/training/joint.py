"""The families trained on one joint BPE over the curriculum languages (``tlaser``, ``ctlaser``, ``laser1``,
``laser6``, ``claser6``, ``yu2018``, ``ldt``): corpora -> joint BPE (or ``--tokenizer``) -> curriculum batches ->
``Run.fit``. Each family is its preset (the config and model class, whose forward returns its loss) and the collator
options its model asks for (``collator_for``)."""

from __future__ import annotations

import inspect
import json
import logging
from dataclasses import dataclass
from pathlib import Path

from transformers import AutoTokenizer, PretrainedConfig, PreTrainedTokenizerBase

from hf_tlaser.data import Pair, TranslationCollator, decoder_languages
from hf_tlaser.errors import UsageError
from hf_tlaser.models.registry import FAMILIES
from hf_tlaser.tokenization import save_tokenizer, write_token_report
from hf_tlaser.training.distill import Distillation
from hf_tlaser.training.hard_negatives import HardNegatives
from hf_tlaser.training.plan import DataPlan, plan_corpus, plan_data, plan_stream, train_joint_bpe
from hf_tlaser.training.presets import Preset
from hf_tlaser.training.resolve import Built, Plugin, Resolved, resolve
from hf_tlaser.training.run import Run
from hf_tlaser.training.run_dir import check_checkpoint, check_output_dir, check_resume, check_resume_config
from hf_tlaser.training.spec import RunSpec, config_overrides
from hf_tlaser.training.trainer import LaserTrainer, StreamStateCallback
from hf_tlaser.training.warm import WarmStart, target_vocabulary

logger = logging.getLogger("hf_tlaser.train")

SPECIAL_TOKEN_IDS = {"pad_token_id": "pad_token", "eos_token_id": "eos_token", "cls_token_id": "cls_token"}
"""Config fields that must match the tokenizer (``unk_token_id`` too where the tokenizer has one)."""


def special_token_ids(tokenizer: PreTrainedTokenizerBase, source: str, config_class: type) -> dict[str, int]:
    """The config fields that must follow the tokenizer's special tokens; UsageError if pad, ``</s>`` or the
    STR_TAG (cls) token is missing."""
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
    return {key: value for key, value in ids.items() if key in defaults}  # an encoder-only config has no decoder start


def model_config(preset: Preset, tokenizer: PreTrainedTokenizerBase, source: str, overrides: dict) -> PretrainedConfig:
    """The preset's config for ``tokenizer``: its vocabulary size and special-token ids, then ``overrides``. Ids
    that differ from the config defaults are logged (at INFO: the config follows the tokenizer by design)."""
    ids = special_token_ids(tokenizer, source, preset.config_class)
    defaults = inspect.signature(preset.config_class.__init__).parameters
    changed = [
        f"{key}={value} (config default {defaults[key].default})"
        for key, value in ids.items()
        if value != defaults[key].default
    ]
    if changed:
        logger.info("special-token ids from the tokenizer: %s", ", ".join(changed))
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
        with_text_keys=getattr(model.config, "negative_memory_size", 0) > 0,
    )


PLUGINS: tuple[type[Plugin], ...] = (HardNegatives, Distillation, WarmStart)
"""The run-wide additions of the joint-BPE path (``--batch-composition cluster``, ``--teacher``, ``--init-from``), in
the order of their hooks (the clusters first: they decide the plan that the teacher's vectors follow)."""


@dataclass
class JointPlan:
    """What the checked run of a joint-BPE family asks for: its resolved spec, the checkpoint it continues, the data
    plan, the model config values (``--set``, the plugins', the language table; the tokenizer's follow at build
    time), the tokenizer given and its name (``--tokenizer``, the resumed run's or a plugin's; None: train a joint
    BPE) and the run's plugins."""

    resolved: Resolved
    checkpoint: Path | None
    data: DataPlan
    overrides: dict
    tokenizer: PreTrainedTokenizerBase | None
    tokenizer_source: str
    plugins: list[Plugin]


def check_joint(spec: RunSpec) -> JointPlan:
    """The checks of a joint-BPE family's run, before any corpus text is read; UsageError on a mistake. Flags the
    family does not take were refused before (``RunSpec.check_families``). The config built here is a check (of the
    values, the teacher's width, a resumed run's config); the model's is built once the data is read."""
    resolved = resolve(spec)
    preset, recipe = resolved.preset, resolved.recipe
    plugins = [plugin for plugin in (kind.check(resolved) for kind in PLUGINS) if plugin is not None]
    checkpoint = check_output_dir(spec)
    if checkpoint is not None:
        check_resume(checkpoint, spec)
        step = check_checkpoint(checkpoint)
    overrides = config_overrides(spec.set, preset.config_class)
    if resolved.pooling not in (None, "backbone"):
        overrides["pooling"] = resolved.pooling
    for plugin in plugins:
        overrides = plugin.configure(resolved, overrides)
    if checkpoint is not None and resolved.decoder_vocab == "targets":
        overrides["decoder_vocab_size"] = resumed_value(checkpoint, "decoder_vocab_size")
    plan = plan_data(spec)
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
    inherited = overrides.get("training_languages") or []  # a member's, when it is the --init-from start
    overrides = {**overrides, "languages": list(table), "training_languages": sorted({*inherited, *plan.languages})}
    tokenizer, source = None, ""
    if checkpoint is not None:
        folder = resume_tokenizer(checkpoint)
        logger.info("resuming from %s (step %d); tokenizer: %s (saved with the run)", checkpoint, step, folder)
        if spec.tokenizer and Path(spec.tokenizer).resolve() != folder.resolve():
            logger.warning(
                "--tokenizer %s is ignored: a resumed run keeps the tokenizer it was trained with", spec.tokenizer
            )
        tokenizer, source = load_tokenizer(folder, "--resume"), str(folder)
    elif spec.tokenizer:
        tokenizer, source = load_tokenizer(Path(spec.tokenizer), "--tokenizer"), str(Path(spec.tokenizer))
    else:
        tokenizer, source = next(filter(None, (plugin.tokenizer() for plugin in plugins)), (None, ""))
    ids = {} if tokenizer is None else special_token_ids(tokenizer, source, preset.config_class)
    try:
        config = preset.make_config(recipe.vocab_size if tokenizer is None else len(tokenizer), **{**ids, **overrides})
    except ValueError as err:
        raise UsageError(f"model config ({preset.name} with --set {spec.set}): {err}") from None
    for plugin in plugins:
        plugin.check_config(config, plan)
    if checkpoint is not None:
        check_resume_config(checkpoint, config)
    return JointPlan(resolved, checkpoint, plan, overrides, tokenizer, source, plugins)


def resumed_value(checkpoint: Path, key: str):
    """A value of the checkpoint's ``config.json`` (None without the file or the key)."""
    path = checkpoint / "config.json"
    return json.loads(path.read_text(encoding="utf-8")).get(key) if path.is_file() else None


def train_joint(spec: RunSpec) -> LaserTrainer:
    """Run one training job of a joint-BPE family; returns the trainer (its ``args.output_dir`` holds the saved
    model). Raises UsageError (before reading any corpus where it can) on a mistake the user can fix."""
    checked = check_joint(spec)
    resolved, checkpoint, plan, plugins = checked.resolved, checked.checkpoint, checked.data, checked.plugins
    preset, recipe, tokenizer, languages = resolved.preset, resolved.recipe, checked.tokenizer, plan.languages
    run = Run.open(spec, preset, recipe, checkpoint)
    logger.info(
        "languages %s; pivots %s; %d curriculum pairs: %s",
        languages,
        plan.pivots,
        len(plan.pairs),
        ",".join("-".join(pair) for pair in plan.pairs),
    )

    token_report, tokenizer_source = None, checked.tokenizer_source
    if tokenizer is None:
        tokenizer, token_report = train_joint_bpe(plan, spec.data_dir, recipe, spec.streaming)
        tokenizer_source = "the trained BPE"

    if spec.streaming:
        dataset = plan_stream(plan, tokenizer, recipe, run.training_args, spec.shuffle_buffer, checkpoint)
        sampler, groups = None, "streamed"
        run.training_args.ignore_data_skip = True  # the stream state continues the data, not a replay
    else:
        dataset, sampler = plan_corpus(plan, tokenizer, recipe, run.training_args, spec.data_dir)
        groups = f"{len(dataset)} groups"
    vocabulary, overrides = None, checked.overrides  # a resumed run's restricted vocabulary comes with its checkpoint
    if resolved.decoder_vocab == "targets" and checkpoint is None:
        targets = sorted({b for _, b in plan.pairs})
        vocabulary = target_vocabulary(tokenizer, (t for lang in targets for t in dataset.dataset[lang] if t))
        overrides = {**overrides, "decoder_vocab_size": len(vocabulary)}
        logger.info(
            "decoder vocabulary: the %d pieces of the %s targets (of %d)", len(vocabulary), targets, len(tokenizer)
        )
    config = model_config(preset, tokenizer, tokenizer_source, overrides)
    model = preset.model_class(config) if vocabulary is None else preset.model_class(config, vocabulary)
    collator = collator_for(model, tokenizer, plan.pairs)
    # the micro-batches the run reads from the sampler: accelerate's loader fetches one ahead of the last
    micro_batches = spec.max_steps * run.training_args.gradient_accumulation_steps + 1
    for plugin in plugins:
        built = Built(model, collator, tokenizer, dataset, plan, checkpoint is not None, sampler, micro_batches)
        collator = plugin.attach(built)
    name = preset.name
    for plugin in plugins:
        name = plugin.model_name(name)
    logger.info(
        "%s: %.1fM parameters, %s, %s micro-batches/epoch/rank, accumulation %d, batching=%s, language table %s; "
        "training %d updates",
        name,
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
    options = {key: value for plugin in plugins for key, value in plugin.fit_options().items()}
    return run.fit(
        model,
        dataset,
        collator,
        sampler,
        callbacks=callbacks,
        tokenizer=tokenizer,
        freeze_encoder_steps=resolved.freeze_encoder_steps,
        encoder_lr=resolved.encoder_lr,
        **options,
    )

"""The families trained on one joint BPE over the curriculum languages (``tlaser``, ``ctlaser``, ``laser1``,
``laser6``, ``claser6``, ``yu2018``, ``ldt``): corpora -> joint BPE (or ``--tokenizer``) -> curriculum batches ->
``Run.fit``. Each family is its preset (the config and model class, whose forward returns its loss) and the collator
options its model asks for (``collator_for``)."""

from __future__ import annotations

import inspect
import json
import logging
from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace
from pathlib import Path
from types import MappingProxyType

import torch
from transformers import (
    AutoTokenizer,
    PretrainedConfig,
    PreTrainedTokenizerBase,
    PreTrainedTokenizerFast,
    TrainingArguments,
)

from hf_tlaser.data import (
    CleaningConfig,
    MultiwayBatchSampler,
    Pair,
    PairBatchSampler,
    ParallelExamples,
    TranslationCollator,
    corpus_sentences,
    decoder_languages,
    load_corpora,
    sentence_lengths,
)
from hf_tlaser.data.source_datasets import stream_source
from hf_tlaser.data.streaming import StreamingPairBatches, stream_sentences
from hf_tlaser.errors import UsageError
from hf_tlaser.models.registry import FAMILIES
from hf_tlaser.tokenization import (
    LanguageSample,
    language_token_report,
    save_tokenizer,
    train_tokenizer,
    write_token_report,
)
from hf_tlaser.training.distill import Distillation
from hf_tlaser.training.full_vocabulary import save_full_vocabulary
from hf_tlaser.training.hard_negatives import HardNegatives
from hf_tlaser.training.presets import Preset, Recipe
from hf_tlaser.training.resolve import Built, DataPlan, Plugin, RunPlan
from hf_tlaser.training.resume import check_checkpoint, check_resume, check_resume_config
from hf_tlaser.training.run import (
    Run,
    check_output_dir,
    plan_batches,
    rank_batching,
)
from hf_tlaser.training.spec import config_overrides
from hf_tlaser.training.trainer import STREAM_STATE, LaserTrainer, StreamStateCallback
from hf_tlaser.training.warm import WarmStart

logger = logging.getLogger("hf_tlaser.train")

DECODER_SPECIALS = ("pad_token", "eos_token", "unk_token", "cls_token", "bos_token")
"""Special tokens whose ids a restricted decoder vocabulary keeps (``target_vocabulary``)."""
STREAM_TOKENIZER_SENTENCES = 200_000
"""``--streaming`` without ``--max-lines``: sentences per language the joint BPE is trained on (the first ones)."""
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


def target_vocabulary(tokenizer: PreTrainedTokenizerFast, texts: Iterable[str]) -> torch.LongTensor:
    """The decoder's restricted vocabulary: every piece of ``texts`` (the training targets) and every id up to the
    largest special token's (so that pad, ``</s>``, ``<unk>`` and the start token keep their ids), sorted."""
    special = max(getattr(tokenizer, f"{name}_id") for name in DECODER_SPECIALS if getattr(tokenizer, name, None))
    keep = set(range(special + 1))
    batch: list[str] = []
    for text in texts:
        batch.append(text)
        if len(batch) == 4096:
            keep.update(i for ids in tokenizer(batch, add_special_tokens=False)["input_ids"] for i in ids)
            batch = []
    if batch:
        keep.update(i for ids in tokenizer(batch, add_special_tokens=False)["input_ids"] for i in ids)
    return torch.tensor(sorted(keep), dtype=torch.long)


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


def tokenizer_texts(plan: DataPlan, data_dir: str | None, recipe: Recipe, streaming: bool) -> Iterator[tuple]:
    """``(language, sentence)`` for the joint BPE: at most ``max_lines`` sentences per language (streaming: at most
    STREAM_TOKENIZER_SENTENCES when the recipe reads everything)."""
    if not streaming:
        return corpus_sentences(plan.sources, data_dir, plan.languages, max_sentences=recipe.max_lines)
    cap = recipe.max_lines or STREAM_TOKENIZER_SENTENCES
    streams = [item for source in plan.sources for item in stream_source(source, recipe.max_lines)]
    return stream_sentences(streams, plan.languages, cap)


def train_joint_bpe(
    plan: DataPlan, data_dir: str | None, recipe: Recipe, streaming: bool
) -> tuple[PreTrainedTokenizerBase, dict]:
    """The joint BPE of the recipe's size over the plan's languages (``tokenizer_texts``), and its per-language token
    report (``hf_tlaser.tokenization.language_token_report``)."""
    logger.info("training a %d-token joint BPE on %s (%s)", recipe.vocab_size, plan.describe(), plan.languages)
    sample = LanguageSample()
    tokenizer = train_tokenizer(
        vocab_size=recipe.vocab_size, texts=sample.watch(tokenizer_texts(plan, data_dir, recipe, streaming))
    )
    return tokenizer, language_token_report(tokenizer, sample)


def plan_corpus(
    plan: DataPlan,
    tokenizer: PreTrainedTokenizerBase,
    recipe: Recipe,
    training_args: TrainingArguments,
    data_dir: str | None,
) -> tuple[ParallelExamples, PairBatchSampler | MultiwayBatchSampler]:
    """The plan's corpora read into memory (cleaned: sentences of at most ``max_sentence_tokens`` tokens with the
    language tag and ``</s>``) and this rank's curriculum sampler of the recipe's batching (``plan_batches``)."""
    languages = plan.languages
    cleaning = CleaningConfig(max_tokens=recipe.max_sentence_tokens - 2)
    corpus = load_corpora(
        plan.sources, data_dir, languages, cleaning=cleaning, tokenizer=tokenizer, max_lines=recipe.max_lines
    )
    lengths = sentence_lengths(corpus, tokenizer, languages)
    sampler_class = MultiwayBatchSampler if recipe.batching == "multiway" else PairBatchSampler
    sampler = plan_batches(lengths, recipe, plan.pairs, training_args, plan.describe(), sampler_class)
    return ParallelExamples(corpus, languages), sampler


def plan_stream(
    plan: DataPlan,
    tokenizer: PreTrainedTokenizerBase,
    recipe: Recipe,
    training_args: TrainingArguments,
    buffer_size: int,
    checkpoint: Path | None,
) -> StreamingPairBatches:
    """``--streaming``: this rank's stream of micro-batches (``buffer_size``: ``--shuffle-buffer``; continued from
    ``checkpoint``'s stream state)."""
    options = rank_batching(recipe, training_args)
    streams = [item for source in plan.sources for item in stream_source(source, recipe.max_lines)]
    cleaning = CleaningConfig(max_tokens=recipe.max_sentence_tokens - 2)
    try:
        stream = StreamingPairBatches(
            streams, plan.pairs, tokenizer, int(recipe.max_tokens), cleaning=cleaning, buffer_size=buffer_size,
            **options,
        )  # fmt: skip
    except ValueError as err:
        raise UsageError(f"no training batches from {plan.describe()}: {err}") from None
    if checkpoint is not None:
        saved = checkpoint / STREAM_STATE.format(rank=training_args.process_index)
        state = json.loads(saved.read_text(encoding="utf-8")) if saved.is_file() else None
        if state is None or state["world_size"] != training_args.world_size:
            logger.warning(
                "--resume %s: %s; the streams start again from the beginning of the corpora (the data order is not "
                "the uninterrupted run's)",
                checkpoint,
                f"no {saved.name}"
                if state is None
                else f"its streams were split between {state['world_size']} processes, not {training_args.world_size}",
            )
        else:
            stream.load_state(state)
            logger.info("--resume: the streams continue at micro-batch %d of this rank", state["batches"])
    return stream


PLUGINS: tuple[tuple[Callable[[RunPlan], bool], type[Plugin]], ...] = (
    (lambda plan: plan.recipe.batch_composition == "cluster", HardNegatives),
    (lambda plan: plan.spec.teacher is not None, Distillation),
    (lambda plan: plan.warm, WarmStart),
)
"""The run-wide additions of the joint-BPE path, each with the plan's question that asks for it
(``--batch-composition cluster``, ``--teacher``, ``--init-from``), in the order of their hooks (the clusters first:
they decide the plan that the teacher's vectors follow)."""


def check(plan: RunPlan) -> RunPlan:
    """The checks of a joint-BPE family's run, before any corpus text is read, and the plan they complete
    (``RunPlan``: checkpoint, config values, tokenizer, plug-ins); UsageError on a mistake. ``plan`` holds the run's
    defaults and data plan (``cli.resolve``: flags the family does not take were refused there). The config
    built here is a check (of the values, the teacher's width, a resumed run's config); the model's is built once the
    data is read."""
    spec, preset, recipe = plan.spec, plan.preset, plan.recipe
    checkpoint = check_output_dir(spec)
    if checkpoint is not None:
        check_resume(checkpoint, spec)
        step = check_checkpoint(checkpoint)
    config, plugins = config_overrides(spec.set, preset.config_class), []
    if plan.pooling not in (None, "backbone"):
        config["pooling"] = plan.pooling
    for asked, kind in PLUGINS:
        if asked(plan):
            plugin = kind.check(replace(plan, config=config))
            plugins.append(plugin)
            config = {**config, **plugin.config}
    if checkpoint is not None and plan.decoder_vocab == "targets":
        config["decoder_vocab_size"] = resumed_value(checkpoint, "decoder_vocab_size")
    data = plan.data
    evaluation = [source.spec for source in data.sources if source.evaluation]
    if evaluation:
        logger.warning(
            "--corpora %s: evaluation corpora (retrieval sets of hf-tlaser evaluate); their scores will not measure "
            "generalisation",
            ", ".join(evaluation),
        )
    needed = model_languages_for(preset, data.pairs)
    table = config.get("languages") or (checkpoint and resumed_languages(checkpoint, needed)) or needed
    missing = sorted(set(needed) - set(table))
    if missing:
        raise UsageError(f"--set languages={table} lacks {missing}, which the curriculum {data.describe()} needs")
    inherited = config.get("training_languages") or []  # a member's, when it is the --init-from start
    config = {**config, "languages": list(table), "training_languages": sorted({*inherited, *data.languages})}
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
        tokenizer, source = next((plugin.tokenizer for plugin in plugins if plugin.tokenizer), (None, ""))
    ids = {} if tokenizer is None else special_token_ids(tokenizer, source, preset.config_class)
    try:
        built = preset.make_config(recipe.vocab_size if tokenizer is None else len(tokenizer), **{**ids, **config})
    except ValueError as err:
        raise UsageError(f"model config ({preset.name} with --set {spec.set}): {err}") from None
    for plugin in plugins:
        if plugin.check_config is not None:
            plugin.check_config(built, data)
    if checkpoint is not None:
        check_resume_config(checkpoint, built)
    return replace(
        plan,
        checkpoint=checkpoint,
        config=MappingProxyType(config),
        tokenizer=tokenizer,
        tokenizer_source=source,
        plugins=tuple(plugins),
    )


def resumed_value(checkpoint: Path, key: str):
    """A value of the checkpoint's ``config.json`` (None without the file or the key)."""
    path = checkpoint / "config.json"
    return json.loads(path.read_text(encoding="utf-8")).get(key) if path.is_file() else None


def train(plan: RunPlan) -> LaserTrainer:
    """Run the planned job of a joint-BPE family (``check``'s plan): read the data, build the model and its collator,
    fit; returns the trainer (its ``args.output_dir`` holds the saved model)."""
    spec, preset, recipe, checkpoint, data = plan.spec, plan.preset, plan.recipe, plan.checkpoint, plan.data
    run = Run.open(plan)
    logger.info(
        "languages %s; pivots %s; %d curriculum pairs: %s",
        data.languages,
        data.pivots,
        len(data.pairs),
        ",".join("-".join(pair) for pair in data.pairs),
    )

    tokenizer, token_report, tokenizer_source = plan.tokenizer, None, plan.tokenizer_source
    if tokenizer is None:
        tokenizer, token_report = train_joint_bpe(data, spec.data_dir, recipe, spec.streaming)
        tokenizer_source = "the trained BPE"

    if spec.streaming:
        dataset = plan_stream(data, tokenizer, recipe, run.training_args, spec.shuffle_buffer, checkpoint)
        sampler, groups = None, "streamed"
    else:
        dataset, sampler = plan_corpus(data, tokenizer, recipe, run.training_args, spec.data_dir)
        groups = f"{len(dataset)} groups"
    vocabulary, values = None, dict(plan.config)  # a resumed run's restricted vocabulary comes with its checkpoint
    if plan.decoder_vocab == "targets" and checkpoint is None:
        targets = sorted({b for _, b in data.pairs})
        vocabulary = target_vocabulary(tokenizer, (t for lang in targets for t in dataset.dataset[lang] if t))
        values["decoder_vocab_size"] = len(vocabulary)
        logger.info(
            "decoder vocabulary: the %d pieces of the %s targets (of %d)", len(vocabulary), targets, len(tokenizer)
        )
    config = model_config(preset, tokenizer, tokenizer_source, values)
    model = preset.model_class(config) if vocabulary is None else preset.model_class(config, vocabulary)
    collator = collator_for(model, tokenizer, data.pairs)
    # the micro-batches the run reads from the sampler: accelerate's loader fetches one ahead of the last
    micro_batches = spec.max_steps * run.training_args.gradient_accumulation_steps + 1
    for plugin in plan.plugins:
        built = Built(model, collator, tokenizer, dataset, data, checkpoint is not None, sampler, micro_batches)
        collator = plugin.attach(built)
    # the backbone's words first: "ctlaser on multilingual-e5-small, hard-negative batches"
    name = (spec.model if plan.warm else preset.name) + "".join(p.describes for p in reversed(plan.plugins))
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
            "corpora": [source.spec for source in data.sources],
            "languages": data.languages,
            "pivots": data.pivots,
            "pairs": ["-".join(pair) for pair in data.pairs],
            "streaming": spec.streaming,
        }
        run.write_record()
    callbacks = [StreamStateCallback(dataset)] if spec.streaming else []
    options = {key: value for plugin in plan.plugins for key, value in plugin.fit_options.items()}
    trainer = run.fit(
        model,
        dataset,
        collator,
        sampler,
        callbacks=callbacks,
        tokenizer=tokenizer,
        **options,
    )
    warm = [plugin for plugin in plan.plugins if isinstance(plugin, WarmStart)]
    if warm and run.main_process:  # a start trimmed to some pieces: the model is saved with the full vocabulary
        save_full_vocabulary(run.out, warm[0].backbone)
    return trainer

"""A run's data plan: the corpora, pivots and curriculum pairs of its spec, checked before any text is read; its
joint BPE and the text it is trained on; ``--streaming``'s stream of micro-batches."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from transformers import PreTrainedTokenizerBase, TrainingArguments

from hf_tlaser.data import (
    CleaningConfig,
    MultiwayBatchSampler,
    Pair,
    PairBatchSampler,
    ParallelExamples,
    Source,
    corpus_languages,
    corpus_sentences,
    curriculum_pairs,
    load_corpora,
    parse_languages,
    parse_pairs,
    resolve_corpora,
    sentence_lengths,
)
from hf_tlaser.data.source_datasets import stream_source
from hf_tlaser.data.streaming import StreamingPairBatches, stream_sentences
from hf_tlaser.errors import UsageError
from hf_tlaser.tokenization import LanguageSample, language_token_report, train_tokenizer
from hf_tlaser.training.presets import Recipe
from hf_tlaser.training.run import plan_batches, rank_batching
from hf_tlaser.training.spec import RunSpec, flag_error
from hf_tlaser.training.trainer import STREAM_STATE

logger = logging.getLogger("hf_tlaser.train")

STREAM_TOKENIZER_SENTENCES = 200_000
"""``--streaming`` without ``--max-lines``: sentences per language the joint BPE is trained on (the first ones)."""


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
    ``checkpoint``'s stream state), after setting the accumulation as ``plan_batches`` does."""
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

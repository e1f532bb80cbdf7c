"""``--streaming`` batches against the in-memory path on a small real corpus: the same pairs cleaned the same way,
the same batch statistics per pair cycle, the uniform pair draw, disjoint ranks and an exact resume."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest

from hf_tlaser.data import (
    DEFAULT_PAIRS,
    CleaningConfig,
    PairBatchSampler,
    load_corpora,
    resolve_corpora,
    sentence_lengths,
)
from hf_tlaser.data.source_datasets import stream_source
from hf_tlaser.data.streaming import StreamingPairBatches, stream_sentences

MAX_TOKENS, MAX_LINES = 600, 120
CLEANING = CleaningConfig(max_tokens=60)


@pytest.fixture(scope="module")
def corpus(data_dir, tokenizer):
    ds = load_corpora(["wmt-newstest-multiway"], data_dir, cleaning=CLEANING, tokenizer=tokenizer, max_lines=MAX_LINES)
    return ds, sentence_lengths(ds, tokenizer)


@pytest.fixture(scope="module")
def sources(data_dir):
    (source,) = resolve_corpora(["wmt-newstest-multiway"], data_dir)
    return stream_source(source, MAX_LINES)


def stream(sources, tokenizer, pairs=DEFAULT_PAIRS, **kwargs) -> StreamingPairBatches:
    options = dict(cleaning=CLEANING, buffer_size=5000, seed=0) | kwargs
    return StreamingPairBatches(sources, pairs, tokenizer, MAX_TOKENS, **options)


def one_cycle(pair_stream) -> list[list[dict]]:
    """The micro-batches of one pair until its first cycle ends."""
    batches = []
    while pair_stream.cycle == 0:
        batches.append(pair_stream.next_batch())
    return batches


def padded(sizes: list[tuple[int, int]]) -> int:
    return len(sizes) * max(s for s, _ in sizes)


def test_same_batch_statistics_as_in_memory(corpus, sources, tokenizer):
    ds, lengths = corpus
    sampler = PairBatchSampler(lengths, MAX_TOKENS, DEFAULT_PAIRS, seed=0)
    streamed = stream(sources, tokenizer)
    assert streamed.pairs == sampler.pairs == list(DEFAULT_PAIRS)
    for index, (a, b) in enumerate(DEFAULT_PAIRS):
        memory = [[(ds[row][a], ds[row][b]) for row in rows] for rows in sampler._cycle(index, 0, 0)]
        streaming = [[(item["src"], item["tgt"]) for item in batch] for batch in one_cycle(streamed.streams[index])]
        # the same sentence pairs survive cleaning and the budget, each once per cycle
        assert Counter(p for batch in streaming for p in batch) == Counter(p for batch in memory for p in batch), (a, b)
        for batches in (memory, streaming):
            sizes = [[(len(tokenizer(s)["input_ids"]), len(tokenizer(t)["input_ids"])) for s, t in b] for b in batches]
            assert all(padded(size) <= MAX_TOKENS for size in sizes)
        # sorted and packed the same way: batch counts and sizes agree (ties in length may fall differently)
        assert abs(len(streaming) - len(memory)) <= max(1, 0.03 * len(memory)), (a, b, len(streaming), len(memory))
        mean = [np.mean([len(batch) for batch in batches]) for batches in (memory, streaming)]
        assert mean[1] == pytest.approx(mean[0], rel=0.05), (a, b)


def test_uniform_pair_draw(sources, tokenizer):
    streamed = stream(sources, tokenizer, buffer_size=200)
    counts = Counter(
        (batch[0]["src_lang"], batch[0]["tgt_lang"]) for batch in (streamed.next_batch() for _ in range(800))
    )
    assert set(counts) == set(DEFAULT_PAIRS)
    chi2 = sum((n - 100) ** 2 / 100 for n in counts.values())
    assert chi2 < 24.3  # chi-square, 7 degrees of freedom, p = 0.001


def test_ranks_split_the_groups(sources, tokenizer):
    pair = [("de", "en")]
    whole = {p for b in one_cycle(stream(sources, tokenizer, pairs=pair).streams[0]) for p in map(str, b)}
    ranks = [stream(sources, tokenizer, pairs=pair, rank=r, world_size=2) for r in (0, 1)]
    halves = [{p for b in one_cycle(s.streams[0]) for p in map(str, b)} for s in ranks]
    assert not halves[0] & halves[1] and halves[0] | halves[1] == whole
    assert min(map(len, halves)) > 0.3 * len(whole)


def test_resume_continues_exactly(sources, tokenizer):
    first = stream(sources, tokenizer, buffer_size=150, seed=3)
    batches = [first.next_batch() for _ in range(60)]
    state = json.loads(json.dumps(first.state(25)))  # a checkpoint's copy, taken after the loader ran ahead
    resumed = stream(sources, tokenizer, buffer_size=150, seed=3)
    resumed.load_state(state)
    assert [resumed.next_batch() for _ in range(35)] == batches[25:]
    assert state["batches"] == 25 and set(state["pairs"]) == {f"{a}-{b}" for a, b in DEFAULT_PAIRS}


def test_tokenizer_text_from_the_stream(sources):
    texts = list(stream_sentences(sources, ["de", "it"], max_sentences=50))
    counts = Counter(lang for lang, _ in texts)
    assert counts == {"de": 50, "it": 50} and all(text for _, text in texts)

"""Curriculum samplers and the collator: budgets, uniform pairs, determinism/resume, ranks, batch contract."""

from __future__ import annotations

import itertools
from collections import Counter

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from hf_tlaser.data import (
    DEFAULT_PAIRS,
    LANGUAGES,
    MultiwayBatchSampler,
    PairBatchSampler,
    ParallelExamples,
    TranslationCollator,
    count_target_tokens,
    get_data_dir,
    load_corpora,
    sentence_lengths,
)
from hf_tlaser.tokenization import train_tokenizer

MAX_TOKENS = 600
BATCH_KEYS = {"input_ids", "attention_mask", "labels", "tgt_lang", "group_index"}
"""The keys of every collated batch: pair mode adds the target encodings, multi-way mode the pair indices."""


@pytest.fixture(scope="module")
def corpus():
    try:
        data_dir = get_data_dir()
    except FileNotFoundError:
        pytest.skip("shared corpora not available")
    # multi-way (newstest, it only in 2009 sets) + it-en bitexts + de-en/fr-en bitexts: all 8 default pairs
    return load_corpora(
        ["wmt-newstest-multiway", "europarl-v2-it-en", "wmt-newstest-bilingual"], data_dir, max_lines=300
    )


@pytest.fixture(scope="module")
def tokenizer(corpus):
    texts = [t for lang in LANGUAGES for t in corpus[lang] if t]
    return train_tokenizer(texts=texts, vocab_size=1000, show_progress=False)


@pytest.fixture(scope="module")
def lengths(corpus, tokenizer):
    return sentence_lengths(corpus, tokenizer)


def test_pair_batches_one_pair_under_budget(corpus, tokenizer, lengths):
    sampler = PairBatchSampler(lengths, MAX_TOKENS, seed=1)
    collator = TranslationCollator(tokenizer, with_target_encoding=True)
    loader = DataLoader(ParallelExamples(corpus), batch_sampler=sampler, collate_fn=collator)
    assert len(loader) == len(sampler) > 50
    for step, batch in enumerate(loader):
        assert set(batch) == BATCH_KEYS | {"tgt_input_ids", "tgt_attention_mask"}
        assert (batch["group_index"] <= torch.arange(batch["labels"].shape[0])).all()  # each pair its own, or merged
        assert batch["input_ids"].numel() <= MAX_TOKENS and batch["tgt_input_ids"].numel() <= MAX_TOKENS
        assert batch["labels"].numel() <= MAX_TOKENS and batch["tgt_lang"].unique().numel() == 1
        assert (batch["input_ids"][:, 0] == tokenizer.cls_token_id).all()
        assert count_target_tokens(batch) == int((batch["labels"] != -100).sum()) > 0
        if step == 20:
            break


def test_only_pairs_that_share_a_sentence_share_a_group(corpus, tokenizer, lengths):
    """Short sentences repeat ("Thank you."): two such pairs in one micro-batch are not each other's negatives."""
    sampler = PairBatchSampler(lengths, MAX_TOKENS, seed=1)
    examples, collator = ParallelExamples(corpus), TranslationCollator(tokenizer, with_target_encoding=True)
    merged = 0
    for items in sampler:
        batch = examples.__getitems__(items)
        groups = collator(batch)["group_index"].tolist()
        texts = [{ex["src"], ex["tgt"]} for ex in batch]
        for i, j in itertools.combinations(range(len(batch)), 2):
            if texts[i] & texts[j]:
                assert groups[i] == groups[j], (batch[i], batch[j])
        for i, group in enumerate(groups):  # a merged pair shares a sentence with another of its group
            if group != i:
                assert any(texts[i] & texts[j] for j in range(len(batch)) if j != i and groups[j] == group)
                merged += 1
    assert merged > 0  # it happens in real micro-batches


def test_pair_sampling_is_uniform(lengths):
    sampler = PairBatchSampler(lengths, MAX_TOKENS, seed=0, num_batches=8000)
    counts = sampler.pair_counts()
    assert set(counts) == set(DEFAULT_PAIRS)  # every pair has data (de-es/fr-es/it-es from multi-way sets)
    expected = 8000 / 8
    chi2 = sum((n - expected) ** 2 / expected for n in counts.values())
    assert chi2 < 24.3  # chi-square, 7 degrees of freedom, p = 0.001


def test_determinism_epochs_and_resume(lengths):
    make = lambda: PairBatchSampler(lengths, MAX_TOKENS, seed=3)  # noqa: E731
    first, again = make(), make()
    assert list(first) == list(again)
    k = len(first) // 3
    assert list(again.iter_from(k)) == list(first)[k:]
    again.set_epoch(1)
    assert list(again) != list(first) and len(again) == len(first)
    first.set_epoch(1)
    assert list(first) == list(again)


def test_accelerate_skip_first_batches_resumes(corpus, tokenizer, lengths):
    accelerate = pytest.importorskip("accelerate")
    collator = TranslationCollator(tokenizer)
    loader = DataLoader(
        ParallelExamples(corpus),
        batch_sampler=PairBatchSampler(lengths, MAX_TOKENS, seed=5, num_batches=12),
        collate_fn=collator,
    )
    full = [b["labels"] for b in loader]
    resumed = [b["labels"] for b in accelerate.skip_first_batches(loader, 7)]
    assert len(resumed) == 5 and all(torch.equal(a, b) for a, b in zip(full[7:], resumed))


def test_ranks_disjoint_and_equal(lengths):
    single = PairBatchSampler(lengths, MAX_TOKENS, seed=7, num_batches=101)
    ranks = [PairBatchSampler(lengths, MAX_TOKENS, seed=7, num_batches=101, rank=r, world_size=2) for r in (0, 1)]
    plans = [list(s) for s in ranks]
    assert len(plans[0]) == len(plans[1]) == len(ranks[0]) == 50
    assert [b for pair in zip(*plans) for b in pair] == list(single)[:100]
    assert not {tuple(b) for b in plans[0]} & {tuple(b) for b in plans[1]}


def test_multiway_batches(corpus, tokenizer, lengths):
    sampler = MultiwayBatchSampler(lengths, MAX_TOKENS, seed=0)
    loader = DataLoader(
        ParallelExamples(corpus),
        batch_sampler=sampler,
        collate_fn=TranslationCollator(tokenizer, with_target_encoding=True),
    )
    directions = Counter()
    for step, batch in enumerate(loader):
        assert set(batch) == BATCH_KEYS | {"src_index", "pair_index"}
        assert batch["input_ids"].numel() <= MAX_TOKENS and batch["labels"].numel() <= MAX_TOKENS
        n, t = batch["input_ids"].shape[0], batch["labels"].shape[0]
        assert batch["pair_index"].shape == (t, 2) and torch.equal(batch["pair_index"][:, 0], batch["src_index"])
        assert batch["group_index"].shape == (t,) and batch["group_index"].diff().ge(0).all()
        assert int(batch["pair_index"].max()) < n and len(set(batch["src_index"].tolist())) <= n
        directions.update(batch["tgt_lang"].tolist())
        if step == 30:
            break
    assert set(directions) == {LANGUAGES.index(lang) for lang in ("en", "es")}
    counts = sampler.pair_counts()
    assert len(counts) >= 4 and max(counts.values()) < 3 * min(counts.values())


def test_collator_contract_pair_mode(tokenizer):
    collator = TranslationCollator(tokenizer)
    items = [
        {"src_lang": "de", "tgt_lang": "es", "src": "guten tag", "tgt": "buenos días a todos"},
        {"src_lang": "de", "tgt_lang": "es", "src": "ja", "tgt": "sí"},
    ]
    batch = collator(items)
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    src = tokenizer("ja")["input_ids"]
    assert batch["input_ids"][1, : len(src)].tolist() == src and (batch["input_ids"][1, len(src) :] == pad).all()
    assert batch["attention_mask"][1].sum() == len(src)
    tgt = tokenizer("sí", add_special_tokens=False)["input_ids"] + [eos]
    assert batch["labels"][1, : len(tgt)].tolist() == tgt and (batch["labels"][1, len(tgt) :] == -100).all()
    assert batch["tgt_lang"].tolist() == [2, 2] and batch["labels"].dtype == torch.long
    with pytest.raises(ValueError, match="one language pair"):
        collator([items[0], {**items[1], "tgt_lang": "en"}])


def test_collator_contract_multiway(tokenizer):
    group = {"de": "hallo", "en": "hello", "es": "hola", "fr": None, "it": "ciao"}
    batch = TranslationCollator(tokenizer)([group])
    # directions of DEFAULT_PAIRS present: de-en, de-es, en-es, es-en, it-en, it-es; rows de, en, es, it
    assert batch["input_ids"].shape[0] == 4
    assert batch["src_index"].tolist() == [0, 0, 1, 2, 3, 3]
    assert batch["pair_index"].tolist() == [[0, 1], [0, 2], [1, 2], [2, 1], [3, 1], [3, 2]]
    assert batch["tgt_lang"].tolist() == [1, 2, 2, 1, 1, 2]
    assert batch["group_index"].tolist() == [0] * 6
    two = TranslationCollator(tokenizer)([group, {"de": "ja", "en": "yes", "es": None, "fr": None, "it": None}])
    assert two["group_index"].tolist() == [0] * 6 + [1] and two["pair_index"][-1].tolist() == [4, 5]
    assert np.array_equal(batch["labels"][1, :2].numpy(), batch["labels"][2, :2].numpy())


def test_cleaning_stores_the_lengths_the_samplers_read(tokenizer, data_dir):
    from hf_tlaser.data import CleaningConfig, load_corpora
    from hf_tlaser.data.lengths import LENGTH_PREFIX

    ds = load_corpora(
        ["wmt-newstest-multiway"], data_dir, cleaning=CleaningConfig(max_tokens=60), tokenizer=tokenizer, max_lines=300
    )
    stored = sentence_lengths(ds, tokenizer)
    recomputed = sentence_lengths(
        ds.remove_columns([c for c in ds.column_names if c.startswith(LENGTH_PREFIX)]), tokenizer
    )
    assert stored.keys() == recomputed.keys()
    for lang in stored:
        assert (stored[lang] == recomputed[lang]).all(), lang
        assert stored[lang].max() <= 62


def test_lengths_ignore_padding_left_in_a_tokenizer(tokenizer):
    from hf_tlaser.data.lengths import token_counts

    texts = ["a", "the european parliament adjourned the session"]
    expected = [len(tokenizer(t, add_special_tokens=False)["input_ids"]) for t in texts]
    tokenizer(texts, padding=True)  # leaves BatchLongest padding in the Rust backend
    assert token_counts(texts, tokenizer) == expected

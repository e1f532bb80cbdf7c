"""Curriculum shares on real data: target tokens per direction over one planned epoch. Pair mode keeps every
direction near 1/8 (the paper's uniform curriculum); multi-way mode draws streams uniformly but its shares follow
the groups' composition, as the ``hf_tlaser.data.batching`` docstring documents."""

from __future__ import annotations

import numpy as np
import pytest

from hf_tlaser.data import DEFAULT_PAIRS, MultiwayBatchSampler, PairBatchSampler, load_corpora, sentence_lengths

MAX_TOKENS = 1000
UNIFORM = 100 / len(DEFAULT_PAIRS)


@pytest.fixture(scope="module")
def lengths(data_dir, tokenizer) -> dict[str, np.ndarray]:
    # multi-way newstest (it only in the 2009 sets) + it-en and de-en/fr-en bitexts: all 8 default pairs
    corpus = load_corpora(
        ["wmt-newstest-multiway", "europarl-v2-it-en", "wmt-newstest-bilingual"], data_dir, max_lines=300
    )
    return sentence_lengths(corpus, tokenizer)


def target_shares(sampler: PairBatchSampler | MultiwayBatchSampler, lengths: dict[str, np.ndarray]) -> dict:
    """Percent of the planned epoch's target tokens (labels: tokens + eos) in each direction."""
    tokens = dict.fromkeys(DEFAULT_PAIRS, 0)
    for stream, rows in sampler.plan():
        rows = np.asarray(rows)
        # pair mode: the stream's direction only; multi-way: every curriculum direction present in each group
        directions = [stream] if isinstance(sampler, PairBatchSampler) else DEFAULT_PAIRS
        for a, b in directions:
            present = (lengths[a][rows] > 0) & (lengths[b][rows] > 0)
            tokens[(a, b)] += int((lengths[b][rows][present] + 1).sum())
    total = sum(tokens.values())
    return {f"{a}-{b}": 100 * n / total for (a, b), n in tokens.items()}


def test_pair_mode_shares_are_uniform(lengths):
    shares = target_shares(PairBatchSampler(lengths, MAX_TOKENS, seed=0), lengths)
    print("pair mode target-token shares (%):", {k: round(v, 1) for k, v in shares.items()})
    assert all(abs(share - UNIFORM) < 2 for share in shares.values()), shares


def test_multiway_shares_follow_group_composition(lengths):
    sampler = MultiwayBatchSampler(lengths, MAX_TOKENS, seed=0)
    counts = sampler.pair_counts()
    expected = len(sampler) / len(counts)  # micro-batches: uniform over the streams that have groups
    assert all(abs(n - expected) < 0.25 * expected for n in counts.values()), counts
    assert ("es", "en") not in counts  # its groups all carry en-es, as rare: that stream takes them
    shares = target_shares(sampler, lengths)
    print("multi-way target-token shares (%):", {k: round(v, 1) for k, v in shares.items()})
    assert all(share > 0 for share in shares.values())
    # tokens: pairs found only in the multi-way groups fall below 1/8, directions that bitexts add rise above
    for rare in ("de-es", "it-es"):
        assert shares[rare] < UNIFORM - 2, shares
    for common in ("de-en", "fr-en"):
        assert shares[common] > UNIFORM + 2, shares

"""In-batch negatives and one-pair batches on real batches: negatives never come from the anchor's multi-way group,
repeated vector pairs count once, and batches without any negative train on translation alone (T-LASER and LASER).
"""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader

from hf_tlaser import LaserConfig, LaserForTranslation, TLaserConfig, TLaserForTranslation
from hf_tlaser.data import (
    MultiwayBatchSampler,
    PairBatchSampler,
    ParallelExamples,
    TranslationCollator,
    load_corpora,
    sentence_lengths,
)
from hf_tlaser.models.common import losses as shared_losses
from hf_tlaser.models.common.losses import sample_negatives, unique_pairs

MAX_TOKENS = 2000
NUM_NEGATIVES = 20


@pytest.fixture(scope="module")
def multiway(data_dir):
    return load_corpora(["wmt-newstest-multiway"], data_dir, max_lines=300)


@pytest.fixture(scope="module")
def multiway_batches(multiway, tokenizer) -> list[dict[str, torch.Tensor]]:
    sampler = MultiwayBatchSampler(sentence_lengths(multiway, tokenizer), MAX_TOKENS, seed=0, num_batches=60)
    loader = DataLoader(ParallelExamples(multiway), batch_sampler=sampler, collate_fn=TranslationCollator(tokenizer))
    return list(loader)


def models(tokenizer, tiny_tlaser_kwargs) -> list[torch.nn.Module]:
    torch.manual_seed(0)
    laser = LaserConfig(
        vocab_size=len(tokenizer), embed_dim=16, lstm_hidden_size=12, decoder_hidden_size=24, dropout=0.0
    )
    return [TLaserForTranslation(TLaserConfig(**tiny_tlaser_kwargs)), LaserForTranslation(laser)]


def row_groups(batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """Group of every encoded sentence row, from the collator's pairs."""
    groups = torch.full((batch["input_ids"].shape[0],), -1)
    groups[batch["pair_index"].flatten()] = batch["group_index"].repeat_interleave(2)
    return groups


def test_negatives_never_share_the_anchor_group(multiway_batches):
    generator = torch.Generator().manual_seed(0)
    before = after = total_before = total_after = 0
    for batch in multiway_batches:
        pair_index, group_index = batch["pair_index"], batch["group_index"]
        assert group_index.shape == (batch["labels"].shape[0],) and torch.equal(pair_index[:, 0], batch["src_index"])
        groups_of = row_groups(batch)
        assert (groups_of >= 0).all()
        # before: every direction a pair and only the row itself excluded
        neg = sample_negatives(len(pair_index), NUM_NEGATIVES, generator=generator)
        before += int((groups_of[pair_index[neg, 1]] == groups_of[pair_index[:, 0]]).sum())
        total_before += neg.numel()
        pairs, groups = unique_pairs(pair_index, group_index)
        assert len({tuple(p) for p in pairs.tolist()}) == len(pairs) and (pairs[:, 0] < pairs[:, 1]).all()
        assert torch.equal(groups, groups_of[pairs[:, 0]])
        if groups.unique().numel() < 2:
            continue
        for _ in range(2):  # neg_ab and neg_ba
            neg = sample_negatives(len(pairs), NUM_NEGATIVES, generator=generator, groups=groups)
            anchors = groups_of[pairs[:, 0]]
            after += int((groups_of[pairs[neg, 0]] == anchors).sum() + (groups_of[pairs[neg, 1]] == anchors).sum())
            total_after += neg.numel()
    print(f"false-negative share: before {before / total_before:.3f}, after {after / max(total_after, 1):.3f}")
    assert total_after > 0 and after == 0
    assert before / total_before > 0.05


@pytest.mark.parametrize("kind", ["tlaser", "laser"])
def test_multiway_forward_uses_groups(multiway_batches, tokenizer, tiny_tlaser_kwargs, kind, monkeypatch):
    model = models(tokenizer, tiny_tlaser_kwargs)[kind == "laser"]
    model.config.align_loss_weight = 1.0
    batch = max(multiway_batches, key=lambda b: b["group_index"].unique().numel())
    assert batch["group_index"].unique().numel() >= 2
    calls = []

    def spy(*args, **kwargs):
        neg = sample_negatives(*args, **kwargs)
        calls.append((neg, kwargs["groups"]))
        return neg

    monkeypatch.setattr(shared_losses, "sample_negatives", spy)
    out = model(**batch)
    out.loss.backward()
    assert out.skipped_pair_losses.item() == 0 and torch.isfinite(out.loss)
    assert out.loss_distance is not None and out.loss_align is not None and out.centered_cosine is not None
    pairs, groups = unique_pairs(batch["pair_index"], batch["group_index"])
    assert len(calls) == 2
    for neg, passed in calls:
        assert torch.equal(passed, groups) and neg.shape == (model.config.distance_negatives, len(pairs))
        assert not (groups[neg] == groups).any()


@pytest.mark.parametrize("kind", ["tlaser", "laser"])
def test_pair_mode_unchanged_by_group_index(multiway, tokenizer, tiny_tlaser_kwargs, kind):
    model = models(tokenizer, tiny_tlaser_kwargs)[kind == "laser"]
    model.config.align_loss_weight = 1.0
    sampler = PairBatchSampler(sentence_lengths(multiway, tokenizer), 600, pairs=[("de", "en")], num_batches=1)
    batch = TranslationCollator(tokenizer, with_target_encoding=True)(
        ParallelExamples(multiway).__getitems__(next(iter(sampler)))
    )
    assert torch.equal(batch["group_index"], torch.arange(batch["labels"].shape[0]))
    torch.manual_seed(1)
    with_groups = model(**batch)
    batch.pop("group_index")
    torch.manual_seed(1)
    without = model(**batch)
    for name in ("loss", "loss_distance", "loss_align", "d_n", "hinge"):
        torch.testing.assert_close(with_groups[name], without[name], rtol=0, atol=0)


@pytest.mark.parametrize("kind", ["tlaser", "laser"])
@pytest.mark.parametrize("mode", ["pair", "multiway"])
def test_batches_without_negatives_train_on_translation(multiway, tokenizer, tiny_tlaser_kwargs, kind, mode):
    model = models(tokenizer, tiny_tlaser_kwargs)[kind == "laser"]
    model.config.align_loss_weight = 1.0
    lengths = sentence_lengths(multiway, tokenizer)
    # one-item micro-batches (a long pair or group fills the budget alone): one pair, or one multi-way group
    if mode == "pair":
        rows = next(iter(PairBatchSampler(lengths, MAX_TOKENS, seed=0, max_sentences=1, num_batches=1)))
        batch = TranslationCollator(tokenizer, with_target_encoding=True)(ParallelExamples(multiway).__getitems__(rows))
    else:
        rows = next(iter(MultiwayBatchSampler(lengths, MAX_TOKENS, seed=0, max_sentences=1, num_batches=1)))
        batch = TranslationCollator(tokenizer)(ParallelExamples(multiway).__getitems__(rows))
        assert batch["labels"].shape[0] > 1  # the other pairs are all translations of the anchor
    out = model(**batch)
    out.loss.backward()
    assert out.skipped_pair_losses.item() == 1
    assert out.loss_distance is None and out.loss_align is None
    assert (out.centered_cosine is None) == (mode == "pair")  # one pair: no centred pair cosine
    expected = model.config.distance_mt_weight * out.loss_mt / out.num_tokens  # eq. (10)'s weight on l_mt
    torch.testing.assert_close(out.loss, expected)
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)

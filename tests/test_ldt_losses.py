"""LDT losses on tiny tensors against hand-computed values: the label distributions of eq. (3)-(4), L_XMLM (eq. 2),
SMLM (eq. 1), MLM, alignment (eq. 5), similarity (eq. 6), eq. (7), the single-word masking, and their degenerate
cases (no masked token, one pair, identical pairs)."""

from __future__ import annotations

import math

import pytest
import torch

from hf_tlaser.models.ldt import (
    alignment_loss,
    kl_to_labels,
    ldt_loss,
    mlm_loss,
    similarity_loss,
    single_word_mask,
    smlm_loss,
    ugt_labels,
    xmlm_loss,
    xtr_labels,
)

LOG2 = math.log(2)


def log_probs(*rows: list[float]) -> torch.Tensor:
    return torch.tensor(rows).log()


def test_xtr_labels_uniform_over_distinct_tokens_or_by_count():
    ids = torch.tensor([[5, 6, 6, 0], [3, 0, 0, 0]])
    keep = torch.tensor([[True, True, True, False], [False, False, False, False]])
    uniform = xtr_labels(ids, keep, vocab_size=8)  # eq. (3) with N_wi = 1 (footnote 4)
    expected = torch.zeros(2, 8)
    expected[0, 5] = expected[0, 6] = 0.5
    torch.testing.assert_close(uniform, expected)  # the second row keeps no token: all zero
    counts = xtr_labels(ids, keep, vocab_size=8, counts=True)  # N_wi / ||S||
    expected[0, 5], expected[0, 6] = 1 / 3, 2 / 3
    torch.testing.assert_close(counts, expected)


def test_ugt_labels_put_half_the_mass_on_the_masked_token():
    xtr_q = torch.tensor([[0.0, 0.5, 0.5, 0.0]] * 3 + [[0.0, 0.0, 0.0, 0.0]])
    masked = torch.tensor([3, 1, -100, 2])
    q = ugt_labels(xtr_q, masked)  # eq. (4)
    expected = torch.tensor(
        [
            [0.0, 0.25, 0.25, 0.5],  # w_t outside the translation
            [0.0, 0.75, 0.25, 0.0],  # w_t also in the translation: the two halves add up
            [0.0, 0.5, 0.5, 0.0],  # nothing masked in this sentence: eq. (3)
            [0.0, 0.0, 1.0, 0.0],  # an empty translation: all the mass on w_t
        ]
    )
    torch.testing.assert_close(q, expected)
    torch.testing.assert_close(q.sum(-1), torch.ones(4))


def test_kl_and_xmlm_loss():
    uniform = log_probs([0.25] * 4, [0.25] * 4)
    q = torch.tensor([[0.5, 0.5, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
    torch.testing.assert_close(kl_to_labels(uniform, q), torch.tensor([LOG2, 0.0]))  # 0 log 0 = 0
    onehot = torch.tensor([[1.0, 0.0, 0.0, 0.0], [0.5, 0.5, 0.0, 0.0]])
    # eq. (2), mean over the 2 pairs: (log 2 + log 4 + 0 + log 2) / 2
    torch.testing.assert_close(xmlm_loss(uniform, uniform, q, onehot), torch.tensor(2 * LOG2))


def test_smlm_loss_from_both_sides_and_without_masked_token():
    masked_side = log_probs([0.5, 0.25, 0.25], [0.2, 0.3, 0.5])
    translation = log_probs([0.25, 0.5, 0.25], [0.6, 0.2, 0.2])
    target = torch.tensor([0, -100])  # the second pair has no masked token
    # eq. (1): -log 0.5 - log 0.25 for the one pair with a masked token
    torch.testing.assert_close(smlm_loss(masked_side, translation, target), torch.tensor(3 * LOG2))
    leaf = masked_side.clone().requires_grad_()
    none = smlm_loss(leaf, translation, torch.tensor([-100, -100]))
    assert none.item() == 0.0
    none.backward()  # still in the graph: a batch without a masked token trains nothing, without an error
    assert leaf.grad.abs().sum() == 0


def test_mlm_loss_mean_over_masked_tokens():
    torch.testing.assert_close(mlm_loss(torch.zeros(3, 4), torch.tensor([0, 1, 3])), torch.tensor(math.log(4)))
    assert mlm_loss(torch.zeros(0, 4), torch.zeros(0, dtype=torch.long)).item() == 0.0


def test_alignment_loss_inner_products():
    eye = torch.eye(2)
    # scores = I: each of the 2 x 2 cross entropies is -log(e / (e + 1)); mean over pairs, both directions
    torch.testing.assert_close(alignment_loss(eye, eye), torch.tensor(2 * math.log(1 + math.exp(-1))))
    # inner products, not cosine: scaling the vectors sharpens the softmax
    assert alignment_loss(10 * eye, eye) < alignment_loss(eye, eye)
    # one pair: no negative, the loss is 0; identical pairs in a batch: log 2 per direction
    assert alignment_loss(torch.randn(1, 3), torch.randn(1, 3)).item() == 0.0
    same = torch.tensor([[1.0, 0.0], [1.0, 0.0]])
    torch.testing.assert_close(alignment_loss(same, same), torch.tensor(2 * LOG2))


def test_similarity_loss_log_cos():
    u, v = torch.eye(2), torch.zeros(2, 2)
    # softmax rows of U U^T: [e, 1] / (e + 1); of V V^T: [1/2, 1/2]; every entry differs by e / (e + 1) - 1/2
    delta = math.e / (1 + math.e) - 0.5
    expected = -4 * math.log(math.cos(math.pi / 2 * delta))  # eq. (6), summed over the 4 entries
    torch.testing.assert_close(similarity_loss(u, v), torch.tensor(expected))
    x = torch.randn(5, 3)
    assert similarity_loss(x, x.clone()).item() == 0.0  # identical sides
    assert similarity_loss(torch.randn(1, 3), torch.randn(1, 3)).item() == 0.0  # one pair
    saturated = similarity_loss(100 * torch.eye(3), torch.zeros(3, 3))  # |difference| -> 1: floored, finite
    assert torch.isfinite(saturated) and saturated > 0


def test_losses_run_in_fp32_under_autocast():
    u, v = torch.randn(4, 8), torch.randn(4, 8)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        for loss in (alignment_loss(u, v), similarity_loss(u, v)):
            assert loss.dtype == torch.float32
    torch.testing.assert_close(alignment_loss(u, v), alignment_loss(u, v))


def test_eq7_weights():
    one, half, quarter = torch.tensor(1.0), torch.tensor(0.5), torch.tensor(0.25)
    torch.testing.assert_close(ldt_loss(one, half, quarter), torch.tensor(1 + 2 * 0.5 + 2 * 0.25))  # (1, 2, 2)
    torch.testing.assert_close(ldt_loss(one, None, quarter, weights=(1.0, 0.0, 3.0)), torch.tensor(1.75))
    with pytest.raises(ValueError, match="at least one"):
        ldt_loss(None, None, None)


def test_single_word_mask_one_token_per_pair():
    maskable_a = torch.tensor([[False, True, True, False]] * 3 + [[False] * 4])
    maskable_b = torch.tensor([[False, True, False], [False] * 3, [False, True, False], [False] * 3])
    generator = torch.Generator().manual_seed(0)
    for _ in range(20):
        a, b = single_word_mask(maskable_a, maskable_b, generator)
        assert not (a & ~maskable_a).any() and not (b & ~maskable_b).any()  # only maskable positions
        per_pair = a.sum(1) + b.sum(1)
        assert per_pair.tolist() == [1, 1, 1, 0]  # the last pair has no maskable token
        assert a[1].sum() == 1  # the second pair's b side has none: the a side takes the mask
    # the side is drawn uniformly, and so is the position among the maskable tokens
    many_a = torch.tensor([[False, True, True, False]]).expand(4000, -1)
    many_b = torch.tensor([[False, True, False]]).expand(4000, -1)
    a, b = single_word_mask(many_a, many_b, torch.Generator().manual_seed(1))
    assert abs(a.any(1).float().mean().item() - 0.5) < 0.04
    assert abs(a[:, 1].sum().item() / a.sum().item() - 0.5) < 0.05

"""The cT-LASER distance-constraint loss (eq. 7-10) against a hand computation, and its negatives."""

from __future__ import annotations

import math

import pytest
import torch

from hf_tlaser.models.common.losses import (
    align_loss,
    centered_pair_cosine,
    distance_constraint_loss,
    mean_pairwise_cosine,
    sample_negatives,
    unique_pairs,
)

P_A = torch.tensor([[1.0, 0.0, 0.0, 0.0], [0.0, 2.0, 0.0, 0.0], [0.0, 0.0, 1.0, 1.0]])
P_B = torch.tensor([[1.0, 1.0, 0.0, 0.0], [0.0, 2.0, 0.0, 1.0], [1.0, 0.0, 1.0, 1.0]])
# N_s = 2 negatives per row: neg_ab indexes p_b, neg_ba indexes p_a
NEG_AB = torch.tensor([[1, 2, 0], [2, 0, 1]])
NEG_BA = torch.tensor([[2, 0, 1], [1, 2, 0]])


def hand_loss(squared: bool, alpha=0.5, beta=0.25, lam=0.125, eps=1e-6):
    """Eq. (7)-(10) written out with Python floats."""
    a, b = P_A.tolist(), P_B.tolist()

    def norm(v):
        return math.sqrt(sum(x * x for x in v))

    mean_a = [sum(r[k] for r in a) / 3 for k in range(4)]
    mean_b = [sum(r[k] for r in b) / 3 for k in range(4)]
    v_norm = (norm(mean_a) + norm(mean_b)) / 2

    def dist(x, y):
        sq = sum((p - q) ** 2 for p, q in zip(x, y))
        return (sq if squared else math.sqrt(sq)) / (v_norm + eps)

    d_p = [dist(a[i], b[i]) for i in range(3)]
    hinge = 0.0
    for j in range(2):
        for i in range(3):
            hinge += max(0.0, alpha - (dist(a[i], b[NEG_AB[j][i]]) - d_p[i]))
            hinge += max(0.0, alpha - (dist(b[i], a[NEG_BA[j][i]]) - d_p[i]))
    return beta * sum(d_p) + lam / 2 * hinge, d_p, v_norm


@pytest.mark.parametrize("distance, squared", [("l2", False), ("squared_l2", True)])
def test_matches_hand_computation(distance, squared):
    out = distance_constraint_loss(P_A, P_B, NEG_AB, NEG_BA, distance=distance)
    total, d_p, v_norm = hand_loss(squared)
    assert out.total.item() == pytest.approx(total, rel=1e-5)
    assert out.d_p.tolist() == pytest.approx(d_p, rel=1e-5)
    assert out.v_norm.item() == pytest.approx(v_norm, rel=1e-6)
    assert out.hinge.shape == (2, 3) and out.d_n.shape == (2, 3)


def test_distance_options_differ_and_weights_apply():
    l2 = distance_constraint_loss(P_A, P_B, NEG_AB, NEG_BA)
    sq = distance_constraint_loss(P_A, P_B, NEG_AB, NEG_BA, distance="squared_l2")
    assert not torch.allclose(l2.total, sq.total)
    only_dp = distance_constraint_loss(P_A, P_B, NEG_AB, NEG_BA, beta=1.0, lam=0.0)
    torch.testing.assert_close(only_dp.total, l2.d_p.sum())
    with pytest.raises(ValueError, match="distance="):
        distance_constraint_loss(P_A, P_B, NEG_AB, NEG_BA, distance="cosine")


def test_vnorm_grad_option():
    a, b = P_A.clone().requires_grad_(), P_B.clone().requires_grad_()
    with_grad = distance_constraint_loss(a, b, NEG_AB, NEG_BA)
    with_grad.total.backward()
    grad_with = a.grad.clone()
    a.grad = None
    detached = distance_constraint_loss(a, b, NEG_AB, NEG_BA, vnorm_grad=False)
    torch.testing.assert_close(detached.total, with_grad.total)  # same value, different gradient
    detached.total.backward()
    assert not torch.allclose(a.grad, grad_with)
    # a common offset raises v_norm and shrinks every normalised distance: the collapse direction
    shifted = distance_constraint_loss(P_A + 10, P_B + 10, NEG_AB, NEG_BA)
    assert shifted.v_norm > with_grad.v_norm and shifted.d_p.sum() < with_grad.d_p.sum()


def test_negatives_never_pick_the_positive():
    torch.manual_seed(0)
    neg = sample_negatives(5, 400)
    assert neg.shape == (400, 5)
    assert not (neg == torch.arange(5)).any()
    assert set(neg.flatten().tolist()) == set(range(5))  # every other row is reachable
    with pytest.raises(ValueError, match="at least 2 groups"):
        sample_negatives(1, 3)


def test_group_negatives_skip_the_same_group_and_keep_the_pair_mode_draw():
    old_rule = torch.randint(0, 4, (50, 5), generator=torch.Generator().manual_seed(3))
    old_rule = old_rule + (old_rule >= torch.arange(5)).long()  # the pair-mode rule before groups existed
    for groups in (None, torch.tensor([7, 3, 9, 0, 1])):  # all groups distinct: the same draw
        neg = sample_negatives(5, 50, generator=torch.Generator().manual_seed(3), groups=groups)
        assert torch.equal(neg, old_rule)
    groups = torch.tensor([0, 0, 0, 1, 2, 2])
    neg = sample_negatives(6, 2000, generator=torch.Generator().manual_seed(0), groups=groups)
    assert not (groups[neg] == groups).any()
    for row in range(6):  # uniform over the other groups' rows
        counts = torch.bincount(neg[:, row], minlength=6).float()
        allowed = groups != groups[row]
        assert (counts[~allowed] == 0).all() and (counts[allowed] / 2000 - 1 / allowed.sum()).abs().max() < 0.05
    with pytest.raises(ValueError, match="at least 2 groups"):
        sample_negatives(3, 2, groups=torch.tensor([4, 4, 4]))


def test_unique_pairs_merge_repeated_vector_pairs():
    # multi-way group 0 encodes rows 0-2 (en-es and es-en are rows 1-2 twice), group 1 rows 3-4
    pair_index = torch.tensor([[0, 1], [1, 2], [2, 1], [0, 2], [3, 4]])
    pairs, groups = unique_pairs(pair_index, torch.tensor([0, 0, 0, 0, 1]))
    assert pairs.tolist() == [[0, 1], [0, 2], [1, 2], [3, 4]] and groups.tolist() == [0, 0, 0, 1]
    rows = torch.arange(3)
    pairs, groups = unique_pairs(torch.stack([rows, rows + 3], 1))  # pair mode: order kept, one group each
    assert torch.equal(pairs[:, 0], rows) and torch.equal(groups, rows)
    with pytest.raises(ValueError, match="one entry per pair"):
        unique_pairs(pair_index, torch.tensor([0, 1]))


def test_align_loss_and_collapse_signal():
    good = align_loss(P_A, P_A.clone())
    bad = align_loss(P_A, P_A.flip(0))
    assert good < bad
    assert mean_pairwise_cosine(torch.ones(4, 3)).item() == pytest.approx(1.0)
    assert mean_pairwise_cosine(torch.eye(3)).item() == pytest.approx(0.0, abs=1e-6)


def test_align_loss_masks_the_same_group():
    a, b = P_A.clone().requires_grad_(), P_B.clone().requires_grad_()
    torch.testing.assert_close(align_loss(a, b, groups=torch.arange(3)), align_loss(a, b))
    groups = torch.tensor([0, 0, 1])  # rows 0 and 1 are translations of one group
    grouped = align_loss(a, b, groups=groups)
    sim = 20 * torch.nn.functional.normalize(P_A, dim=-1) @ torch.nn.functional.normalize(P_B, dim=-1).T
    expected = 0.0
    for i in range(3):
        allowed = [j for j in range(3) if j == i or groups[j] != groups[i]]
        expected += torch.logsumexp(sim[i, allowed], 0) - sim[i, i]  # a_i against b_j
        expected += torch.logsumexp(sim[allowed, i], 0) - sim[i, i]  # b_i against a_j
    assert grouped.item() == pytest.approx(expected.item(), abs=1e-5)
    grouped.backward()
    assert torch.isfinite(a.grad).all() and torch.isfinite(b.grad).all()


def test_centered_cosine_ignores_the_shared_component():
    torch.manual_seed(0)
    offset = torch.full((16,), 10.0)  # the component every sentence shares
    sentences = torch.randn(4, 16)
    aligned = torch.cat([sentences, sentences + 0.1 * torch.randn(4, 16)]) + offset  # pairs (i, i + 4) agree
    noise = torch.randn(8, 16) + offset  # collapsed: the offset plus nothing pair-specific
    pairs = torch.tensor([[i, i + 4] for i in range(4)])
    assert mean_pairwise_cosine(aligned).item() > 0.9 and mean_pairwise_cosine(noise).item() > 0.9
    assert centered_pair_cosine(aligned, pairs).item() > 0.95
    assert abs(centered_pair_cosine(noise, pairs).item()) < 0.5
    assert centered_pair_cosine(aligned, pairs[:1]) is None


def test_identical_pairs_keep_finite_gradients():
    a = P_A.clone().requires_grad_()
    b = P_A.clone().requires_grad_()  # every pair identical, as for a name that reads the same in two languages
    out = distance_constraint_loss(a, b, NEG_AB, NEG_BA)
    out.total.backward()
    assert torch.isfinite(a.grad).all() and torch.isfinite(b.grad).all()
    assert out.d_p.abs().max() < 1e-5

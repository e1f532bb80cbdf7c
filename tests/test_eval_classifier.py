"""MLDoc-protocol classifier: epoch selection, hand-written gradients, determinism, learning, summaries."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from hf_tlaser.evaluation.classifier import (
    ClassifierConfig,
    TransferResult,
    _BatchedMLP,
    select_epoch,
    zero_shot_transfer,
)


def test_select_epoch_ties_go_to_later_epoch():
    assert select_epoch(np.array([0.5, 0.7, 0.6, 0.7, 0.65])) == 3
    assert select_epoch(np.array([0.9, 0.1, 0.2])) == 0
    curves = np.array([[0.5, 0.2], [0.8, 0.2], [0.8, 0.1], [0.7, 0.2]])
    assert select_epoch(curves).tolist() == [2, 3]


def test_backward_matches_autograd():
    rng = np.random.default_rng(0)
    mlp = _BatchedMLP(4, [6, 5, 3, 4], [np.random.default_rng(1), np.random.default_rng(2)], lr=1e-3)
    x = rng.normal(size=(4, 7, 6)).astype(np.float32)
    y = rng.integers(0, 4, size=(4, 7))
    masks = [((rng.random((4, 7, w)) > 0.2) * 1.25).astype(np.float32) for w in (6, 5, 3)]
    params = [torch.tensor(p, requires_grad=True) for p in mlp.params]
    h = torch.from_numpy(x)
    for i in range(3):
        h = torch.baddbmm(params[2 * i + 1], h * torch.from_numpy(masks[i]), params[2 * i])
        h = torch.tanh(h) if i < 2 else h
    loss = sum(torch.nn.functional.cross_entropy(h[m], torch.from_numpy(y[m])) for m in range(4))
    loss.backward()
    before = mlp.flat.copy()
    mlp.train_step(x, y, masks)
    for mine, ref in zip(mlp.grads, params):
        assert np.allclose(mine, ref.grad.numpy(), atol=1e-5)
    # first Adam step moves every parameter with a non-zero gradient by ~lr
    moved = np.abs(mlp.flat - before)[np.abs(mlp.grad) > 1e-6]
    assert np.allclose(moved, 1e-3, rtol=1e-2)


def _toy(seed=0, n_train=60, n_dev=30, n_test=40, dim=8, classes=3, spread=0.4):
    """Gaussian clusters shared by two 'languages' that differ by a small shift."""
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(classes, dim)) * 2
    data = {}
    for lang, shift in (("en", 0.0), ("de", 0.3)):
        data[lang] = {}
        for split, n in (("train", n_train), ("dev", n_dev), ("test", n_test)):
            y = rng.integers(0, classes, n)
            x = centers[y] + shift + spread * rng.normal(size=(n, dim))
            data[lang][split] = (x.astype(np.float32), y)
    return data


def test_learns_separable_toy_problem():
    result = zero_shot_transfer(_toy(), seeds=(0,), config=ClassifierConfig(epochs=150))
    assert result.mean.shape == (2, 2)
    assert result.mean.min() >= 90.0
    assert 1 <= result.best_epochs.min() and result.best_epochs.max() <= 150


def test_same_seed_same_matrix_and_seed_independence():
    data = _toy(spread=3.0)  # noisy: accuracies vary with the seed
    config = ClassifierConfig(epochs=20)
    first = zero_shot_transfer(data, seeds=(3, 4), config=config)
    again = zero_shot_transfer(data, seeds=(3, 4), config=config)
    alone = zero_shot_transfer(data, seeds=(4,), config=config)
    assert np.array_equal(first.per_seed, again.per_seed)
    assert np.array_equal(first.best_epochs, again.best_epochs)
    assert np.array_equal(first.per_seed[1], alone.per_seed[0])
    other = zero_shot_transfer(data, seeds=(5, 6), config=config)
    assert not np.array_equal(first.per_seed, other.per_seed)


def test_unequal_sizes_train_in_separate_groups():
    data = _toy()
    x, y = data["de"]["train"]
    data["de"]["train"] = (x[:45], y[:45])
    result = zero_shot_transfer(data, train_langs=["de"], seeds=(0,), config=ClassifierConfig(epochs=60))
    assert result.per_seed.shape == (1, 1, 2) and result.mean.min() >= 80.0


def test_transfer_result_summary_and_markdown():
    per_seed = np.array([[[90.0, 70.0], [60.0, 80.0]], [[92.0, 72.0], [62.0, 82.0]]])
    result = TransferResult(["en", "de"], ["en", "de"], [0, 1], per_seed, np.array([[3, 4], [5, 6]]))
    summary = result.summary()
    assert summary["same"] == pytest.approx((86.0, 1.0))
    assert summary["cross"] == pytest.approx((66.0, 1.0))
    assert summary["all"] == pytest.approx((76.0, 1.0))
    assert np.allclose(result.std, 1.0)
    text = result.to_markdown()
    assert "| en | 91.00 ± 1.00 | 71.00 ± 1.00 |" in text and "**cross** 66.00 ± 1.00" in text


def test_bad_language_and_labels():
    data = _toy()
    with pytest.raises(ValueError, match=r"unknown language\(s\) \['fr'\]"):
        zero_shot_transfer(data, train_langs=["fr"], config=ClassifierConfig(epochs=1))
    data["en"]["dev"] = (data["en"]["dev"][0], data["en"]["dev"][1][:5])
    with pytest.raises(ValueError, match=r"data\['en'\]\['dev'\]: 30 embeddings but 5 labels"):
        zero_shot_transfer(data, config=ClassifierConfig(epochs=1))


def test_linear_svm_option_learns_and_transfers():
    """The NV/cNV papers' protocol: a linear SVM per training language; a shift of the test language's inputs that
    moves them across the classes is what cross-lingual transfer measures."""
    data = _toy()
    svm = zero_shot_transfer(data, seeds=(0, 1), config=ClassifierConfig(kind="linear-svm"))
    assert svm.per_seed.shape == (2, 2, 2) and np.all(svm.mean > 90)
    shifted = {**data, "de": {split: (x + 3.0, y) for split, (x, y) in data["de"].items()}}
    moved = zero_shot_transfer(shifted, train_langs=["en"], seeds=(0,), config=ClassifierConfig(kind="linear-svm"))
    assert moved.mean[0, 1] < moved.mean[0, 0] - 20
    with pytest.raises(ValueError, match="classifier kind 'svm'"):
        zero_shot_transfer(data, config=ClassifierConfig(kind="svm"))

"""``hf_tlaser.encode``: one string, an empty list, and the ``precision`` choice."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import hf_tlaser
from hf_tlaser import LaserConfig, LaserModel, TLaserConfig, TLaserModel
from hf_tlaser.hardware import cpu_capability, resolve_precision

NATIVE_BF16 = resolve_precision("auto", "cpu").bf16


@pytest.fixture()
def models(tokenizer, tiny_tlaser_kwargs):
    torch.manual_seed(0)
    laser = LaserModel(LaserConfig(vocab_size=len(tokenizer), embed_dim=16, lstm_hidden_size=8, num_layers=2))
    return [TLaserModel(TLaserConfig(**tiny_tlaser_kwargs)).eval(), laser.eval()]


def test_single_string_is_one_vector(models, tokenizer, newstest_lines):
    text = newstest_lines["en"][0]
    for model in models:
        d = model.config.hidden_size
        vector = hf_tlaser.encode(model, tokenizer, text, precision="fp32")
        assert vector.shape == (d,) and vector.dtype == np.float32  # sentence-transformers' shape for a str
        np.testing.assert_allclose(vector, hf_tlaser.encode(model, tokenizer, [text], precision="fp32")[0], atol=1e-6)
        tensor = hf_tlaser.encode(model, tokenizer, text, convert_to_tensor=True, normalize=True)
        assert tensor.shape == (d,) and abs(float(tensor.norm()) - 1) < 1e-5
        document = hf_tlaser.encode(model, tokenizer, text, documents=True, document_mode="sentences")
        assert document.shape == (d,)


def test_empty_list(models, tokenizer):
    for model in models:
        d = model.config.hidden_size
        for kwargs in ({}, {"documents": True}, {"documents": True, "document_mode": "sentences"}):
            out = hf_tlaser.encode(model, tokenizer, [], **kwargs)
            assert out.shape == (0, d) and out.dtype == np.float32, kwargs
        assert hf_tlaser.encode(model, tokenizer, [], convert_to_tensor=True).shape == (0, d)


def test_precision_choice(models, tokenizer, newstest_lines):
    model = models[0]
    texts = newstest_lines["de"][:6]
    fp32 = hf_tlaser.encode(model, tokenizer, texts, precision="fp32")
    np.testing.assert_array_equal(fp32, model.encode(texts, tokenizer))
    auto = hf_tlaser.encode(model, tokenizer, texts)  # bf16 on a native-bf16 CPU, else fp32
    cosine = (auto * fp32).sum(1) / np.linalg.norm(auto, axis=1) / np.linalg.norm(fp32, axis=1)
    assert cosine.min() > 0.99
    assert np.array_equal(auto, fp32) != NATIVE_BF16
    # an explicit autocast_dtype overrides precision; None is "no autocast" (fp32), as before precision existed
    override = hf_tlaser.encode(model, tokenizer, texts, precision="fp32", autocast_dtype=torch.bfloat16)
    assert not np.array_equal(override, fp32)
    np.testing.assert_array_equal(hf_tlaser.encode(model, tokenizer, texts, autocast_dtype=None), fp32)
    with pytest.raises(ValueError, match="expected one of"):
        hf_tlaser.encode(model, tokenizer, texts, precision="int8")


@pytest.mark.skipif(not NATIVE_BF16, reason=f"CPU capability {cpu_capability()}: bf16 is not native here")
def test_explicit_bf16_matches_autocast(models, tokenizer, newstest_lines):
    model = models[1]  # LASER: its LSTMs run under bf16 autocast on a native CPU
    texts = newstest_lines["it"][:6]
    bf16 = hf_tlaser.encode(model, tokenizer, texts, precision="bf16")
    np.testing.assert_array_equal(bf16, hf_tlaser.encode(model, tokenizer, texts, autocast_dtype=torch.bfloat16))

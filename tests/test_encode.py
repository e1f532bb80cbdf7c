"""``hf_tlaser.encode``: input order under length sorting, equality with one-by-one encoding, token budgets,
documents (whole / sentence average), normalisation."""

from __future__ import annotations

import logging

import numpy as np
import pytest
import torch

import hf_tlaser
from hf_tlaser import LaserConfig, LaserModel, TLaserConfig, TLaserModel
from hf_tlaser.encoding import split_sentences


@pytest.fixture()
def models(tokenizer, tiny_tlaser_kwargs):
    torch.manual_seed(0)
    laser = LaserModel(
        LaserConfig(vocab_size=len(tokenizer), embed_dim=16, lstm_hidden_size=8, decoder_hidden_size=32, num_layers=2)
    )
    return [TLaserModel(TLaserConfig(**tiny_tlaser_kwargs)).eval(), laser.eval()]


def test_order_and_equality_with_one_by_one(models, tokenizer, newstest_lines):
    texts = newstest_lines["de"][:40]
    assert len({len(t) for t in texts}) > 10  # lengths differ, so sorting reorders
    for model in models:
        batched = hf_tlaser.encode(model, tokenizer, texts, max_tokens=400, precision="fp32")
        single = np.stack([hf_tlaser.encode(model, tokenizer, [t], precision="fp32")[0] for t in texts])
        np.testing.assert_allclose(batched, single, atol=2e-5)
        unsorted = model.encode(texts, tokenizer, sort_by_length=False)
        np.testing.assert_allclose(batched, unsorted, atol=2e-5)
        assert batched.dtype == np.float32 and batched.shape == (40, model.config.hidden_size)


def test_token_budget_batches(models, tokenizer, newstest_lines, monkeypatch):
    model = models[0]
    texts = newstest_lines["en"][:60]
    shapes = []
    forward = model.forward

    def spy(input_ids, attention_mask=None, **kwargs):
        shapes.append(tuple(input_ids.shape))
        assert kwargs.get("pooled_only") is True
        return forward(input_ids, attention_mask, **kwargs)

    monkeypatch.setattr(model, "forward", spy)
    model.encode(texts, tokenizer, max_tokens=500)
    assert sum(rows for rows, _ in shapes) == 60
    assert all(rows * width <= 500 for rows, width in shapes)
    assert len(shapes) < 60 and max(rows for rows, _ in shapes) > 1  # never one sentence per batch
    widths = [width for _, width in shapes]
    assert widths == sorted(widths, reverse=True)  # length-sorted batches


def test_documents_whole_and_sentence_average(models, tokenizer, newstest_lines, caplog):
    model = models[0]
    doc = " ".join(newstest_lines["en"][1:3])
    limit = len(doc.split()) + 1
    long_doc = " ".join(["word"] * (limit + 10))
    with caplog.at_level(logging.WARNING, logger="hf_tlaser.encoding"):
        whole = hf_tlaser.encode(model, tokenizer, [doc, long_doc], documents=True, max_words=limit)
    assert f"truncated 1 of 2 documents to their first {limit} words" in caplog.text
    expected_whole = hf_tlaser.encode(model, tokenizer, [doc, " ".join(["word"] * limit)])
    np.testing.assert_allclose(whole, expected_whole, atol=1e-5)
    averaged = hf_tlaser.encode(model, tokenizer, [doc], documents=True, document_mode="sentences")
    sentences = split_sentences(doc)
    assert len(sentences) == 2
    expected = hf_tlaser.encode(model, tokenizer, sentences).mean(0)
    np.testing.assert_allclose(averaged[0], expected, atol=1e-5)
    with pytest.raises(ValueError, match="document_mode"):
        hf_tlaser.encode(model, tokenizer, [doc], documents=True, document_mode="paragraphs")


def test_normalize_tensor_and_bf16(models, tokenizer, newstest_lines):
    model = models[0]
    texts = newstest_lines["fr"][:8]
    out = hf_tlaser.encode(model, tokenizer, texts, normalize=True, convert_to_tensor=True)
    assert isinstance(out, torch.Tensor)
    torch.testing.assert_close(out.norm(dim=-1), torch.ones(8))
    bf16 = hf_tlaser.encode(model, tokenizer, texts, autocast_dtype=torch.bfloat16)
    fp32 = hf_tlaser.encode(model, tokenizer, texts, precision="fp32")
    assert bf16.dtype == np.float32 and not np.array_equal(bf16, fp32)


def test_single_string_and_empty_list(models, tokenizer, newstest_lines):
    """As sentence-transformers: a str is one text and gives a vector [d]; an empty list gives [0, d]."""
    text = newstest_lines["es"][3]
    for model in models:
        dim = model.config.hidden_size
        one = model.encode(text, tokenizer)
        assert one.shape == (dim,) and one.dtype == np.float32
        np.testing.assert_allclose(one, model.encode([text], tokenizer)[0], atol=1e-6)
        tensor = model.encode(text, tokenizer, convert_to_tensor=True, normalize=True)
        assert tensor.shape == (dim,) and tensor.norm().item() == pytest.approx(1.0, abs=1e-5)
        empty = model.encode([], tokenizer)
        assert empty.shape == (0, dim) and empty.dtype == np.float32
        assert model.encode([], tokenizer, convert_to_tensor=True).shape == (0, dim)


def test_the_document_policy_by_hand():
    """The helpers that ``encode`` and ``hf-tlaser embed --documents`` share (once, since issue 49)."""
    from hf_tlaser.encoding import cut_words, document_sentences, mean_by_document

    texts, cut = cut_words(["a b  c", "a b", ""], 2)
    assert texts == ["a b", "a b", ""] and cut.tolist() == [True, False, False]
    sentences, owner = document_sentences(["One. Two!\nThree", "", "Four?"])
    assert sentences == ["One.", "Two!", "Three", "", "Four?"] and owner.tolist() == [0, 0, 0, 1, 2]
    vectors = torch.tensor([[1.0, 0.0], [3.0, 2.0], [5.0, 1.0], [7.0, 7.0], [-1.0, 4.0]])
    torch.testing.assert_close(mean_by_document(vectors, owner, 3), torch.tensor([[3.0, 1.0], [7.0, 7.0], [-1.0, 4.0]]))

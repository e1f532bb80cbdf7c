"""sentence-transformers layout: SentenceTransformer(folder).encode equals hf_tlaser.encode (LASER: max pooling)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from transformers import AutoModel, AutoTokenizer

import hf_tlaser
from hf_tlaser import LaserConfig, LaserForTranslation, save_tokenizer
from hf_tlaser.hub import add_sentence_transformers_files

TEXTS = ["Hello world.", "A much longer sentence about the markets, the economy and the weather.", ""]


@pytest.fixture()
def laser_dir(tmp_path, tokenizer):
    config = LaserConfig(
        vocab_size=len(tokenizer), embed_dim=16, lstm_hidden_size=12, decoder_hidden_size=24, dropout=0.0
    )
    torch.manual_seed(0)
    LaserForTranslation(config).save_pretrained(tmp_path)
    save_tokenizer(tokenizer, tmp_path)
    return tmp_path


@pytest.mark.parametrize("normalize", [False, True])
def test_laser_sentence_transformers_matches_encode(laser_dir, normalize):
    from sentence_transformers import SentenceTransformer

    add_sentence_transformers_files(laser_dir, normalize=normalize)
    pooling = json.loads((laser_dir / "1_Pooling" / "config.json").read_text())
    assert pooling["pooling_mode_max_tokens"] and not pooling["pooling_mode_cls_token"]
    assert pooling["word_embedding_dimension"] == 24
    model = AutoModel.from_pretrained(laser_dir, trust_remote_code=True)
    tokenizer = AutoTokenizer.from_pretrained(laser_dir)
    expected = hf_tlaser.encode(model, tokenizer, TEXTS, normalize=normalize)
    got = SentenceTransformer(str(laser_dir), trust_remote_code=True, device="cpu").encode(TEXTS)
    np.testing.assert_allclose(got, expected, atol=1e-5)
    if normalize:
        np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)


def test_rejects_foreign_model(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "bert", "hidden_size": 8}))
    with pytest.raises(ValueError, match="not an hf_tlaser model"):
        add_sentence_transformers_files(tmp_path)
    assert not (tmp_path / "modules.json").exists()

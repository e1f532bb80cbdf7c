"""sentence-transformers layout: written by every save_pretrained; SentenceTransformer(folder).encode and the
feature-extraction pipeline agree with the model's own encode (T-LASER: CLS pooling, LASER: max pooling)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from transformers import AutoModel, AutoTokenizer

from hf_tlaser import (
    LaserConfig,
    LaserForTranslation,
    LaserModel,
    TLaserConfig,
    TLaserForTranslation,
    TLaserModel,
    save_tokenizer,
)
from hf_tlaser.hub import add_sentence_transformers_files
from hf_tlaser.models.common.st_folder import has_sentence_transformers_files

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
    expected = model.encode(TEXTS, tokenizer, normalize=normalize)
    got = SentenceTransformer(str(laser_dir), trust_remote_code=True, device="cpu").encode(TEXTS)
    np.testing.assert_allclose(got, expected, atol=1e-5)
    if normalize:
        np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)


def test_rejects_foreign_model(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "bert", "hidden_size": 8}))
    with pytest.raises(ValueError, match="not an hf_tlaser model"):
        add_sentence_transformers_files(tmp_path)
    assert not (tmp_path / "modules.json").exists()


def tiny_models(tokenizer, tiny_tlaser_kwargs) -> dict:
    torch.manual_seed(0)
    laser = LaserConfig(
        vocab_size=len(tokenizer), embed_dim=16, lstm_hidden_size=12, decoder_hidden_size=24, dropout=0.0
    )
    tlaser = TLaserConfig(**tiny_tlaser_kwargs)
    return {
        "tlaser-translation": TLaserForTranslation(tlaser),
        "laser-translation": LaserForTranslation(laser),
        "tlaser-encoder": TLaserModel(tlaser),
        "laser-encoder": LaserModel(laser),
    }


@pytest.mark.parametrize("name", ["tlaser-translation", "laser-translation", "tlaser-encoder", "laser-encoder"])
def test_save_pretrained_writes_the_layout(tmp_path, tokenizer, tiny_tlaser_kwargs, name):
    from sentence_transformers import SentenceTransformer
    from transformers import pipeline

    model = tiny_models(tokenizer, tiny_tlaser_kwargs)[name].eval()
    encoder = getattr(model, "encoder", model)
    model.save_pretrained(tmp_path)
    save_tokenizer(tokenizer, tmp_path)
    assert has_sentence_transformers_files(tmp_path)
    pooling = json.loads((tmp_path / "1_Pooling" / "config.json").read_text())
    mode = "cls" if name.startswith("tlaser") else "max"
    assert pooling["pooling_mode_cls_token"] == (mode == "cls") and pooling["pooling_mode_max_tokens"] == (
        mode == "max"
    )
    assert pooling["word_embedding_dimension"] == encoder.config.hidden_size
    expected = encoder.encode(TEXTS, tokenizer)
    got = SentenceTransformer(str(tmp_path), trust_remote_code=True, device="cpu").encode(TEXTS)
    np.testing.assert_allclose(got, expected, atol=1e-5)
    # the pipeline returns per-token final-layer outputs [1, S, d]: the sentence vector is position 0 (T-LASER)
    # or the max over the tokens (LASER)
    extractor = pipeline("feature-extraction", model=str(tmp_path), trust_remote_code=True, device="cpu")
    for text, vector in zip(TEXTS, expected):
        tokens = np.asarray(extractor(text))[0]
        assert tokens.shape == (len(tokenizer(text)["input_ids"]), encoder.config.hidden_size)
        pooled = tokens[0] if mode == "cls" else tokens.max(0)
        np.testing.assert_allclose(pooled, vector, atol=1e-5)


def test_resave_keeps_normalize(laser_dir):
    add_sentence_transformers_files(laser_dir, normalize=True)
    LaserForTranslation.from_pretrained(laser_dir).save_pretrained(laser_dir)
    modules = json.loads((laser_dir / "modules.json").read_text())
    assert modules[-1]["type"] == "sentence_transformers.models.Normalize"
    add_sentence_transformers_files(laser_dir, normalize=False)
    assert len(json.loads((laser_dir / "modules.json").read_text())) == 2


def test_prepare_folder_normalize_applies_to_a_saved_folder(laser_dir):
    """Every saved folder already has the layout: ``push --normalize`` must still add the Normalize module."""
    from hf_tlaser.hub.push import prepare_folder

    assert len(json.loads((laser_dir / "modules.json").read_text())) == 2
    prepare_folder(laser_dir, normalize=True)
    modules = json.loads((laser_dir / "modules.json").read_text())
    assert modules[-1]["type"] == "sentence_transformers.models.Normalize"
    prepare_folder(laser_dir)  # None keeps the folder's choice
    assert len(json.loads((laser_dir / "modules.json").read_text())) == 3

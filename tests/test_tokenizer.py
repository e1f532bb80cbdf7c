"""Joint BPE: STR_TAG ... </s> wrapping, lowercasing, AutoTokenizer round trip, 4.x-loadable config."""

from __future__ import annotations

import json

from transformers import AutoTokenizer

from hf_tlaser import save_tokenizer, train_tokenizer
from hf_tlaser.tokenization import SPECIAL_TOKENS


def test_wraps_inputs_with_str_tag_and_eos(tokenizer):
    ids = tokenizer("Die Prager Börse")["input_ids"]
    assert ids[0] == tokenizer.cls_token_id == SPECIAL_TOKENS.index("STR_TAG")
    assert ids[-1] == tokenizer.eos_token_id and tokenizer.pad_token_id == 0
    assert tokenizer("")["input_ids"] == [tokenizer.cls_token_id, tokenizer.eos_token_id]
    assert tokenizer("x", add_special_tokens=False)["input_ids"][0] not in (
        tokenizer.cls_token_id,
        tokenizer.eos_token_id,
    )


def test_lowercase_switch(newstest_lines):
    texts = newstest_lines["en"][:200]
    lower = train_tokenizer(texts=texts, vocab_size=300, show_progress=False)
    cased = train_tokenizer(texts=texts, vocab_size=300, lowercase=False, show_progress=False)
    assert lower("Prague")["input_ids"] == lower("prague")["input_ids"]
    assert cased("Prague")["input_ids"] != cased("prague")["input_ids"]
    assert lower.decode(lower("the prague stock exchange")["input_ids"], skip_special_tokens=True) == (
        "the prague stock exchange"
    )


def test_save_load_with_auto_tokenizer(tmp_path, tokenizer):
    save_tokenizer(tokenizer, tmp_path)
    config = json.loads((tmp_path / "tokenizer_config.json").read_text())
    assert config["tokenizer_class"] == "PreTrainedTokenizerFast"  # loads in transformers 4.x too
    loaded = AutoTokenizer.from_pretrained(tmp_path)
    text = "El Parlamento Europeo, ¿verdad?"
    assert loaded(text)["input_ids"] == tokenizer(text)["input_ids"]
    assert loaded.cls_token == "STR_TAG" and loaded.pad_token == "<pad>"

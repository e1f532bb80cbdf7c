"""A prompt built into the saved tokenizer (a warm start from e5 adds ``"query: "`` to every text) and passed again
by the user: ``hf_tlaser.encode`` (texts that start with it) and the model's forward (its pieces repeated right after
the built-in ones: what sentence-transformers and ``AutoModel`` users run) warn once per model, and not for normal
input; the model card says that the prompt is built in."""

from __future__ import annotations

import logging

import torch
from transformers import AutoModel, PreTrainedTokenizerFast

import hf_tlaser
from hf_tlaser.hub.model_card import render_model_card
from tests.test_warm_start import TEXTS

WARNING = "which this model's tokenizer already adds"


def warnings_of(caplog) -> list[str]:
    return [record.getMessage() for record in caplog.records if WARNING in record.getMessage()]


def test_the_config_knows_the_prompt_and_its_pieces(warm_dir):
    model = AutoModel.from_pretrained(warm_dir, trust_remote_code=True)
    tokenizer = PreTrainedTokenizerFast.from_pretrained(warm_dir)
    assert model.config.prompt == "query: "
    pieces = model.config.prompt_ids
    assert pieces == tokenizer("query:", add_special_tokens=False)["input_ids"] and len(pieces) >= 1
    ids = tokenizer(TEXTS[0])["input_ids"]
    assert ids[1 : 1 + len(pieces)] == pieces and ids[1 + len(pieces) : 1 + 2 * len(pieces)] != pieces


def test_encode_warns_once_for_texts_that_start_with_the_built_in_prompt(warm_dir, caplog):
    tokenizer = PreTrainedTokenizerFast.from_pretrained(warm_dir)
    prompted = ["query: " + text for text in TEXTS]
    model = AutoModel.from_pretrained(warm_dir, trust_remote_code=True)
    model.config.prompt_ids = None  # the forward cannot tell: the texts alone are checked
    with caplog.at_level(logging.WARNING):
        hf_tlaser.encode(model, tokenizer, TEXTS, precision="fp32")
        assert warnings_of(caplog) == []
        for _ in range(2):
            hf_tlaser.encode(model, tokenizer, prompted, precision="fp32")
    found = warnings_of(caplog)
    assert len(found) == 1 and "'query: '" in found[0] and "do not pass it again" in found[0]
    caplog.clear()
    with caplog.at_level(logging.WARNING):  # both checks on: still one warning (the forward's knows it was given)
        model = AutoModel.from_pretrained(warm_dir, trust_remote_code=True)
        hf_tlaser.encode(model, tokenizer, prompted, precision="fp32")
    assert len(warnings_of(caplog)) == 1


def test_the_forward_warns_once_when_the_prompt_pieces_repeat(warm_dir, caplog):
    tokenizer = PreTrainedTokenizerFast.from_pretrained(warm_dir)
    model = AutoModel.from_pretrained(warm_dir, trust_remote_code=True).eval()
    normal = tokenizer(TEXTS, padding=True, return_tensors="pt")
    twice = tokenizer(["query: " + TEXTS[0], TEXTS[1]], padding=True, return_tensors="pt")
    with caplog.at_level(logging.WARNING), torch.no_grad():
        model(**normal)
        model.train()(**twice)  # training batches come from the collator: not checked
        assert warnings_of(caplog) == []
        model.eval()
        model(**twice)
        model(**twice)
    assert len(warnings_of(caplog)) == 1


def test_a_sentence_transformers_user_passing_the_prompt_is_warned_once(warm_dir, caplog):
    from sentence_transformers import SentenceTransformer

    with caplog.at_level(logging.WARNING):
        plain = SentenceTransformer(str(warm_dir), trust_remote_code=True).encode(TEXTS)
        assert warnings_of(caplog) == []
        model = SentenceTransformer(str(warm_dir), trust_remote_code=True)
        again = model.encode(TEXTS, prompt="query: ")
        model.encode(TEXTS, prompt="query: ")
    assert len(warnings_of(caplog)) == 1
    assert plain.shape == again.shape


def test_the_model_card_says_the_prompt_is_built_into_the_tokenizer(warm_dir):
    card = render_model_card(warm_dir)
    details, usage = card.split("## Model details")[1].split("## Usage")
    for section in (details, usage.split("## Training")[0]):  # the details table and the usage
        assert "The prompt 'query: ' is built into the tokenizer" in section
        assert "Do not pass it again (no `prompt=` / `prompt_name=` in sentence-transformers" in section

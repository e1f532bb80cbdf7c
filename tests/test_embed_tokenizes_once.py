"""``hf-tlaser embed`` tokenizes every line once (issue 72): the ids it packs into batches by their length are the
ids the model reads, for an hf_tlaser folder and for a sentence-transformers model with a prompt alike. The texts are
counted where every fast tokenizer tokenizes: its Rust backend's ``encode`` and ``encode_batch``, whoever calls them
(the tokenizer's ``__call__`` or a caller that reaches the backend directly). The one tokenizer call tells which
texts it cut, with a fast tokenizer and with one without Rust encodings alike."""

from __future__ import annotations

from collections import Counter

import pytest
from transformers import BatchEncoding
from transformers.tokenization_utils_tokenizers import TokenizersBackend

from hf_tlaser.cli import main as hf_tlaser_main
from hf_tlaser.inference import read_embeddings
from hf_tlaser.models.common.encode import tokenize


class CountingBackend:
    """A tokenizer's Rust backend that notes every text it encodes in ``seen`` and does the rest as the backend."""

    def __init__(self, backend, seen: list[str]) -> None:
        object.__setattr__(self, "_backend", backend)
        object.__setattr__(self, "_seen", seen)

    def __getattr__(self, name: str):
        return getattr(self._backend, name)

    def __setattr__(self, name: str, value) -> None:
        setattr(self._backend, name, value)

    def encode(self, sequence, *args, **kwargs):
        self._seen.append(sequence)
        return self._backend.encode(sequence, *args, **kwargs)

    def encode_batch(self, inputs, *args, **kwargs):
        self._seen.extend(inputs)
        return self._backend.encode_batch(inputs, *args, **kwargs)


@pytest.fixture
def tokenized(monkeypatch) -> list[str]:
    """Every text that the tokenizers loaded from now on tokenize."""
    seen: list[str] = []
    init = TokenizersBackend.__init__

    def counting_init(self, *args, **kwargs) -> None:
        init(self, *args, **kwargs)
        self._tokenizer = CountingBackend(self._tokenizer, seen)

    monkeypatch.setattr(TokenizersBackend, "__init__", counting_init)
    return seen


@pytest.mark.parametrize("model", ["tlaser_folder", "st_folder"])
def test_embed_tokenizes_every_line_once(model, tlaser_folder, st_folder, newstest_lines, tokenized, tmp_path):
    folder = {"tlaser_folder": tlaser_folder, "st_folder": st_folder}[model]
    lines = newstest_lines["de"][:20]
    source = tmp_path / "de.txt"
    source.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    args = ["embed", "--model", str(folder), "--input", str(source), "--output", str(tmp_path / "de.npy")]
    assert hf_tlaser_main([*args, "--precision", "fp32", "--batch-size", "8"]) == 0
    prompt = read_embeddings(tmp_path / "de.npy")[1]["prompt"] or ""
    counts = Counter(tokenized)
    assert [counts[prompt + line] for line in lines] == [1] * len(lines)
    assert set(counts) <= {prompt, *(prompt + line for line in lines)}  # else only the prompt (its token length)


def test_one_tokenizer_call_tells_what_it_cut(tokenizer, newstest_lines):
    texts = newstest_lines["en"][:30] + [" ".join(newstest_lines["en"][:5])]
    whole = [len(ids) for ids in tokenizer(texts)["input_ids"]]
    limit = sorted(whole)[-3]  # a text of exactly the limit is not cut; the longer ones are
    expected = ([n > limit for n in whole], tokenizer(texts, truncation=True, max_length=limit)["input_ids"])

    def without_encodings(batch: list[str], **kwargs) -> BatchEncoding:
        return BatchEncoding(dict(tokenizer(batch, **kwargs)))

    for tokenize_with in (tokenizer, without_encodings):
        ids, cut = tokenize(tokenize_with, texts, limit)
        assert (cut, ids) == expected and any(cut)
    assert tokenize(tokenizer, texts, None) == (tokenizer(texts)["input_ids"], [False] * len(texts))

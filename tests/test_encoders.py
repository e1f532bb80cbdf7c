"""The one embedding layer (``hf_tlaser.encoders``, issue 49): every SPEC loads into an ``Encoder``; an hf_tlaser
model gives what ``hf_tlaser.encode`` gives, per language for cNV-like models too; the document policy is one
function."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import hf_tlaser
from hf_tlaser import encoders
from hf_tlaser.encoders import Encoder, HfTlaserEncoder, SentenceTransformerEncoder, VectorsEncoder, load
from hf_tlaser.encoding import DOCUMENT_WORDS, embed_documents
from hf_tlaser.errors import UsageError
from hf_tlaser.teachers import targets


@pytest.fixture(scope="module")
def texts(newstest_lines) -> list[str]:
    return newstest_lines["de"][:6] + newstest_lines["en"][:6]


def test_every_spec_is_an_encoder_with_its_fingerprint(tlaser_folder, st_folder, tmp_path, texts):
    folder = load(str(tlaser_folder), device="cpu", precision="fp32")
    st = load(str(st_folder), device="cpu", precision="fp32")
    assert isinstance(folder, HfTlaserEncoder) and isinstance(st, SentenceTransformerEncoder)
    assert folder.fingerprint == encoders.folder_fingerprint(tlaser_folder) and len(st.fingerprint) == 64
    # what embed batches by: the tokenizer and the token limit of each
    assert folder.tokenizer is not None and folder.max_length == folder.model.config.max_position_embeddings
    assert st.tokenizer is st.model.tokenizer and st.max_length == st.model.max_seq_length
    encoders.write_vectors(tmp_path / "v.npy", texts, st.encode(texts), teacher=st.to_dict(), dtype="float32")
    vectors = load(f"vectors:{tmp_path / 'v.npy'}")
    assert isinstance(vectors, VectorsEncoder) and vectors.tokenizer is None and vectors.max_length is None
    assert vectors.fingerprint == st.fingerprint  # the vectors name the model that computed them
    assert f"of sentence-transformers model {st.identity}" in vectors.describe()  # and describe it
    np.testing.assert_array_equal(vectors.encode(texts[::-1]), st.encode(texts)[::-1])
    with pytest.raises(UsageError, match=r"^--model '.*nothing': no such folder"):
        load(str(tmp_path / "nothing"))


def test_an_hf_tlaser_encoder_gives_what_hf_tlaser_encode_gives(tlaser_folder, texts):
    model, tokenizer = hf_tlaser.load_model(tlaser_folder, backend="torch")
    expected = hf_tlaser.encode(model, tokenizer, texts, truncation=True, autocast_dtype=None, device="cpu")
    in_memory = HfTlaserEncoder(model, tokenizer, "cpu")
    np.testing.assert_array_equal(in_memory(texts), expected)
    np.testing.assert_array_equal(in_memory.encode(texts), expected)
    assert (in_memory.name, in_memory.dim, in_memory.fingerprint) == ("cT-LASER", 32, None)
    assert in_memory.languages == ["de", "en"] and not in_memory.per_language
    long = [" ".join(texts) * 80]  # far over DOCUMENT_WORDS words
    whole = hf_tlaser.encode(model, tokenizer, long, truncation=True, autocast_dtype=None, device="cpu", documents=True)
    np.testing.assert_array_equal(in_memory.embed_documents(long), whole)
    with pytest.raises(ValueError, match="leave lang out"):
        in_memory(texts[:2], langs=["de", "de"])


def test_a_hub_id_is_named_by_its_id_and_a_local_folder_by_its_name(tmp_path):
    folder = tmp_path / "snapshots" / "0123abcd"
    folder.mkdir(parents=True)
    assert encoders.identity.display_name("org/model", folder) == "org/model"  # a Hub id, found in the cache
    assert encoders.identity.display_name(str(folder), folder) == "0123abcd"


def test_the_document_policy_counts_what_it_truncates():
    seen: list[list[str]] = []

    def encode(batch: list[str]) -> tuple[torch.Tensor, np.ndarray]:
        seen.append(batch)
        vectors = torch.tensor([[float(len(text.split())), 1.0] for text in batch])
        return vectors, np.array(["over" in text for text in batch])

    long = " ".join(["w"] * (DOCUMENT_WORDS + 5))
    vectors, truncated = embed_documents(encode, ["a b", long, "over limit"])
    assert seen[-1][1] == " ".join(["w"] * DOCUMENT_WORDS)  # cut to its first words
    assert vectors[:, 0].tolist() == [2.0, float(DOCUMENT_WORDS), 2.0] and truncated.tolist() == [False, True, True]
    vectors, truncated = embed_documents(encode, [long, "One two. Three over four! Five."], "sentences")
    assert seen[-1] == [long, "One two.", "Three over four!", "Five."]  # whole documents are not cut here
    assert vectors[1, 0].item() == pytest.approx((2 + 3 + 1) / 3)  # the mean of its sentences
    assert truncated.tolist() == [False, True]  # a sentence over the limit truncates its document
    _, truncated = embed_documents(encode, [long], max_words=None)
    assert not truncated.any() and len(seen[-1][0].split()) == DOCUMENT_WORDS + 5


def test_a_teacher_is_an_encoder_named_by_its_flag(tlaser_folder, tmp_path):
    teacher = targets.load_teacher(str(tlaser_folder), device="cpu", precision="fp32")
    assert isinstance(teacher, targets.Teacher) and targets.Teacher is Encoder
    with pytest.raises(UsageError, match=r"^--teacher '"):
        targets.load_teacher(str(tmp_path / "nothing"))

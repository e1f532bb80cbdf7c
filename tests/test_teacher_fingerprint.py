"""Teacher fingerprints see every byte that determines the vectors (issue 34): one tensor changed in the middle of a
3 MiB ``model.safetensors`` (bytes that the former 18-sample hash never read) gives another fingerprint, another
cache folder and fresh vectors; every module/tokenizer/prompt file counts, run records do not; the file-digest memo
is used only while a file's size, times and inode are unchanged."""

from __future__ import annotations

import json
import os
import shutil
import struct
from pathlib import Path

import numpy as np
import pytest

from hf_tlaser.encoders import identity as loading_module
from hf_tlaser.encoders.identity import ENV_VAR, folder_fingerprint
from hf_tlaser.teachers.cache import TeacherCache
from hf_tlaser.teachers.targets import load_teacher
from tests.tiny_models import make_st_model

OLD_SAMPLE, OLD_SAMPLES = 1 << 16, 16
"""The former fingerprint of a file over 1 MiB: its size and 64 KiB read at 18 places."""
TENSOR = "encoder.layer.0.attention.output.dense.weight"


@pytest.fixture(autouse=True)
def cache_env(tmp_path, monkeypatch):
    """The default cache root (and its file-digest memo) in the test's folder, never the user's."""
    monkeypatch.setenv(ENV_VAR, str(tmp_path / "default-cache"))


@pytest.fixture(scope="module")
def big_teacher(tmp_path_factory, tokenizer) -> Path:
    folder = make_st_model(tmp_path_factory.mktemp("big"), tokenizer, hidden_size=256)
    assert (folder / "model.safetensors").stat().st_size > 3 << 20
    return folder


def former_samples(size: int) -> list[tuple[int, int]]:
    """Byte ranges that the former fingerprint read from a file of ``size`` bytes."""
    step = [(size - OLD_SAMPLE) * i // (OLD_SAMPLES + 1) for i in range(1, OLD_SAMPLES + 1)]
    return [(start, start + OLD_SAMPLE) for start in [0, *step, size - OLD_SAMPLE]]


def tensor_bytes(path: Path, name: str) -> tuple[int, int]:
    """Absolute byte range of tensor ``name`` in a safetensors file."""
    with path.open("rb") as handle:
        length = struct.unpack("<Q", handle.read(8))[0]
        header = json.loads(handle.read(length))
    start, end = header[name]["data_offsets"]
    return 8 + length + start, 8 + length + end


def unsampled_run(path: Path, name: str, floats: int = 256) -> int:
    """Offset of ``floats`` float32 values of tensor ``name`` that the former fingerprint never read."""
    start, end = tensor_bytes(path, name)
    samples = former_samples(path.stat().st_size)
    for offset in range(start, end - 4 * floats, 4):
        if all(offset + 4 * floats <= a or offset >= b for a, b in samples):
            return offset
    raise AssertionError(f"{name}: every part of it was sampled")


def test_one_tensor_changed_mid_file_gives_a_new_fingerprint_and_fresh_vectors(big_teacher, tmp_path, newstest_lines):
    texts = newstest_lines["en"][:8]
    copy = Path(shutil.copytree(big_teacher, tmp_path / "copy"))
    weights = copy / "model.safetensors"
    offset = unsampled_run(weights, TENSOR)  # a run in the middle of the file that the former sampler missed
    size = weights.stat().st_size
    with weights.open("r+b") as handle:
        handle.seek(offset)
        handle.write(struct.pack("<256f", *([1.0] * 256)))
    assert weights.stat().st_size == size
    assert folder_fingerprint(copy, memo=None) != folder_fingerprint(big_teacher, memo=None)

    old = load_teacher(str(big_teacher), device="cpu", precision="fp32")
    new = load_teacher(str(copy), device="cpu", precision="fp32")
    old_vectors, new_vectors = old.encode(texts), new.encode(texts)
    assert not np.allclose(old_vectors, new_vectors, atol=1e-2)  # the change matters to the vectors
    root = tmp_path / "cache"
    TeacherCache(root, old, show_progress=False).get(texts)  # the old vectors are cached
    cache = TeacherCache(root, new, show_progress=False)
    got = cache.get(texts)
    assert cache.last.computed == len(set(texts))  # not served from the old teacher's folder
    np.testing.assert_allclose(got, new_vectors, atol=2e-3)


@pytest.mark.parametrize(
    "name",
    [
        "model.safetensors",
        "config.json",
        "modules.json",
        "1_Pooling/config.json",
        "2_Normalize/config.json",
        "config_sentence_transformers.json",
        "sentence_bert_config.json",
        "tokenizer.json",
        "tokenizer_config.json",
        "2_Dense/model.pt",  # a module's weights saved by torch.save count too
    ],
)
def test_every_file_that_determines_the_vectors_counts(name, big_teacher, tmp_path):
    copy = Path(shutil.copytree(big_teacher, tmp_path / "copy"))
    before = folder_fingerprint(copy, memo=None)
    path = copy / name
    path.parent.mkdir(exist_ok=True)
    with path.open("ab") as handle:
        handle.write(b" ")
    assert folder_fingerprint(copy, memo=None) != before


@pytest.mark.parametrize(
    "name",
    [
        "README.md",
        "trainer_state.json",
        "training_args.bin",
        "optimizer.pt",
        "checkpoint-10/model.safetensors",
        "eval/results.json",
        "onnx/model.onnx",
        "train.log",
    ],
)
def test_run_records_and_exports_do_not_count(name, big_teacher, tmp_path):
    copy = Path(shutil.copytree(big_teacher, tmp_path / "copy"))
    before = folder_fingerprint(copy, memo=None)
    (copy / name).parent.mkdir(exist_ok=True)
    (copy / name).write_bytes(b"anything")
    assert folder_fingerprint(copy, memo=None) == before


def test_memo_is_used_only_while_size_times_and_inode_are_unchanged(big_teacher, tmp_path, monkeypatch):
    """A memoised file is not read again; rewriting bytes in place with the size and mtime restored (ctime moves)
    hashes it again in full."""
    monkeypatch.setattr(loading_module, "RACY_SECONDS", 0)  # files written just now may be memoised
    copy = Path(shutil.copytree(big_teacher, tmp_path / "copy"))
    memo = tmp_path / "memo.json"
    fingerprint = folder_fingerprint(copy, memo=memo)
    entries = json.loads(memo.read_text())
    assert str((copy / "model.safetensors").resolve()) in entries

    hashed = []
    full_hash = loading_module.hash_file
    monkeypatch.setattr(loading_module, "hash_file", lambda path: hashed.append(path.name) or full_hash(path))
    assert folder_fingerprint(copy, memo=memo) == fingerprint and hashed == []  # every digest from the memo

    weights = copy / "model.safetensors"
    stat = weights.stat()
    offset = unsampled_run(weights, TENSOR)
    with weights.open("r+b") as handle:
        handle.seek(offset)
        handle.write(struct.pack("<f", 7.0))
    os.utime(weights, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # same size, same mtime, same inode
    assert (weights.stat().st_size, weights.stat().st_mtime_ns) == (stat.st_size, stat.st_mtime_ns)
    assert folder_fingerprint(copy, memo=memo) != fingerprint and hashed == ["model.safetensors"]
    assert folder_fingerprint(copy, memo=None) == folder_fingerprint(copy, memo=memo)


def test_recently_modified_files_are_not_memoised(big_teacher, tmp_path):
    """A file written within ``RACY_SECONDS`` may change again within the same clock tick: never memoised."""
    copy = Path(shutil.copytree(big_teacher, tmp_path / "copy"))
    memo = tmp_path / "memo.json"
    folder_fingerprint(copy, memo=memo)
    assert not memo.exists() or not json.loads(memo.read_text())


def test_default_memo_lives_under_the_cache_root(big_teacher, tmp_path, monkeypatch):
    monkeypatch.setattr(loading_module, "RACY_SECONDS", 0)
    folder_fingerprint(big_teacher)
    memo = tmp_path / "default-cache" / loading_module.MEMO_NAME
    assert str((big_teacher / "model.safetensors").resolve()) in json.loads(memo.read_text())

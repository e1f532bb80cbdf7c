"""The teacher cache refuses a folder whose ``meta.json`` records another teacher (before any row is served) and
repairs a lost one; concurrent writers (real processes, a tiny fake teacher) store each text once (issue 34)."""

from __future__ import annotations

import hashlib
import json
import logging
import multiprocessing
import time

import numpy as np
import pytest

from hf_tlaser.errors import UsageError
from hf_tlaser.teachers.cache import TeacherCache
from hf_tlaser.teachers.targets import Teacher

DIM = 8


class HashTeacher(Teacher):
    """Vectors from each text's SHA-256 (the same in every process), ``delay`` seconds per batch."""

    def __init__(self, fingerprint: str = "f" * 64, prompt: str | None = "query: ", dim: int = DIM, delay=0.0):
        super().__init__("hash", "hash", "hash", fingerprint, dim, prompt_name="query", prompt=prompt)
        self.delay = delay

    def _encode(self, texts, batch_size, show_progress):
        time.sleep(self.delay)
        rows = [np.frombuffer(hashlib.sha256(t.encode()).digest()[: self.dim], dtype=np.uint8) for t in texts]
        return np.stack(rows).astype(np.float32) / 255.0


TEXTS = [f"sentence number {i}" + " x" * (i % 17) for i in range(600)]


def stored_keys(cache: TeacherCache) -> list[bytes]:
    """The key of every row stored in the cache folder, duplicates included."""
    return [key for path in cache.shards.glob("*.keys.npy") for key in np.load(path).tolist()]


@pytest.mark.parametrize(
    ("field", "other"), [("fingerprint", {"fingerprint": "0" * 64}), ("prompt", {"prompt": "query : "}), ("dim", {})]
)
def test_meta_of_another_teacher_is_refused_before_any_row_is_served(field, other, tmp_path):
    teacher = HashTeacher()
    first = TeacherCache(tmp_path, teacher, show_progress=False)
    first.get(TEXTS[:10])
    meta_path = first.folder / "meta.json"
    meta = json.loads(meta_path.read_text())
    meta.update(other or {"dim": DIM + 1})
    meta_path.write_text(json.dumps(meta))
    again = TeacherCache(tmp_path, teacher, show_progress=False)
    with pytest.raises(UsageError, match=rf"teacher cache .*meta.json records another teacher: {field} "):
        again.get(TEXTS[:10])  # every text is there: a cache that does not check would serve them
    with pytest.raises(UsageError, match="remove that folder, or give another cache folder"):
        again.refresh()


def test_lost_meta_is_written_again_and_dtype_follows_the_folder(tmp_path, caplog):
    teacher = HashTeacher()
    first = TeacherCache(tmp_path, teacher, show_progress=False)
    expected = first.get(TEXTS[:10])
    (first.folder / "meta.json").unlink()
    with caplog.at_level(logging.WARNING):
        again = TeacherCache(tmp_path, teacher, show_progress=False)
        np.testing.assert_array_equal(again.get(TEXTS[:10]), expected)
    assert "was missing; written again" in caplog.text and again.last.hits == 10
    assert json.loads((first.folder / "meta.json").read_text())["fingerprint"] == teacher.fingerprint
    later = TeacherCache(tmp_path, teacher, dtype="float32", show_progress=False)
    with caplog.at_level(logging.WARNING):
        later.get(TEXTS[10:12])
    assert "stores float16 vectors (asked: float32)" in caplog.text
    assert {np.load(p, mmap_mode="r").dtype for p in later.shards.glob("*.vec.npy")} == {np.dtype("float16")}


def fill(root, chunk_size, barrier, results):
    cache = TeacherCache(root, HashTeacher(delay=0.02), chunk_size=chunk_size, batch_size=16, show_progress=False)
    barrier.wait()
    vectors = cache.get(TEXTS)
    results.put((cache.last.computed, float(np.abs(vectors - HashTeacher().encode(TEXTS)).max())))


@pytest.mark.parametrize("chunk_size", [1000, 50])
def test_concurrent_writers_store_each_text_once(chunk_size, tmp_path):
    """Three processes fill one folder with the same 600 texts at the same time: one chunk (all of them compute it,
    one stores it) or 12 chunks (they share them); every process gets every vector, each text is stored once."""
    context = multiprocessing.get_context("fork")
    barrier, results = context.Barrier(3), context.Queue()
    workers = [context.Process(target=fill, args=(tmp_path, chunk_size, barrier, results)) for _ in range(3)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(120)
    assert [worker.exitcode for worker in workers] == [0, 0, 0]
    outcomes = [results.get(timeout=5) for _ in workers]
    assert all(error < 2e-3 for _, error in outcomes), outcomes  # float16 storage
    cache = TeacherCache(tmp_path, HashTeacher(), show_progress=False)
    keys = stored_keys(cache)
    assert len(keys) == len(set(keys)) == len(TEXTS)

"""A text file too large to hold: its digest read in chunks, its lines as keys, its unique lines from the keys in
bounded memory; each equal to what reading the whole file gives (``read_texts``, ``unique_rows``)."""

from __future__ import annotations

import gzip

import numpy as np
import pytest

from hf_tlaser.bitext.select import first_rows, unique_rows
from hf_tlaser.bitext.texts import KEY_DTYPE, digest_texts, line_keys, read_texts, text_keys
from hf_tlaser.data.readers import DataFormatError
from hf_tlaser.errors import UsageError

CONTENTS = {
    "plain.txt": "\ufefffirst\nsecond\r\n\n  \nfirst\nlast without newline",
    "newline.txt": "a\nb\na\n",
    "crlf.txt": "x\r\ny\r\nx\r\n",
    "one.txt": "only",
}


@pytest.mark.parametrize("name", sorted(CONTENTS))
@pytest.mark.parametrize("compressed", [False, True])
def test_the_digest_read_in_chunks_is_read_texts_digest(tmp_path, monkeypatch, name, compressed):
    data = CONTENTS[name].encode()
    path = tmp_path / (name + (".gz" if compressed else ""))
    path.write_bytes(gzip.compress(data) if compressed else data)
    monkeypatch.setattr("hf_tlaser.bitext.texts.CHUNK", 3)  # lines cut across chunks
    assert digest_texts(path, "--src") == read_texts(path, "--src").digest
    assert digest_texts(path, "--src").lines == len(read_texts(path, "--src").lines)


def test_a_missing_empty_or_damaged_file_is_one_line(tmp_path):
    with pytest.raises(UsageError, match="--src .*: no such file"):
        digest_texts(tmp_path / "none.txt", "--src")
    (tmp_path / "empty.txt").write_text("")
    with pytest.raises(UsageError, match="--tgt .*: the file is empty"):
        digest_texts(tmp_path / "empty.txt", "--tgt")
    (tmp_path / "cut.gz").write_bytes(gzip.compress(b"hello\n" * 1000)[:40])
    with pytest.raises(UsageError, match="--src .*cut.gz: unreadable"):
        digest_texts(tmp_path / "cut.gz", "--src")


def test_line_keys_are_equal_for_equal_lines_and_zero_for_blank_ones(tmp_path):
    path = tmp_path / "t.txt"
    lines = ["same", "other", "", "same", "  ", "Same", "same "]
    path.write_text("\n".join(lines) + "\n")
    keys = line_keys(path, 0, len(lines))
    assert keys.dtype == KEY_DTYPE and len(keys) == len(lines)
    assert keys[0] == keys[3] and len({bytes(key) for key in keys[[0, 1, 5, 6]]}) == 4
    assert keys[2] == keys[4] == np.zeros((), KEY_DTYPE) and (keys[[0, 1, 3, 5, 6]] != keys[2]).all()
    assert line_keys(path, 3, 6).tolist() == keys[3:6].tolist()
    assert text_keys(["same"])[0] == keys[0]
    path.write_bytes(b"fine\n\xff broken\n")
    assert len(line_keys(path, 0, 1)) == 1  # read up to its slice only
    with pytest.raises(DataFormatError, match=r"t.txt:2: not valid UTF-8"):
        line_keys(path, 1, 2)


@pytest.mark.parametrize(("bucket_rows", "block"), [(10**9, 1 << 20), (50, 64), (7, 5)])
def test_first_rows_from_keys_are_unique_rows(tmp_path, bucket_rows, block):
    rng = np.random.default_rng(0)
    lines = [f"line {rng.integers(250)}" if rng.random() > 0.1 else " " * rng.integers(2) for _ in range(3000)]
    keys = text_keys(lines)
    keys[[not line.strip() for line in lines]] = (0, 0)
    path = tmp_path / "rows.npy"
    count = first_rows([keys[:1000], keys[1000:1001], keys[1001:]], path, bucket_rows=bucket_rows, block=block)
    expected = unique_rows(lines)
    assert count == len(expected) > 200 and np.load(path).tolist() == expected.tolist()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rows.npy"]  # its buckets removed

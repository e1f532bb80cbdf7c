"""``hf-tlaser embed`` (hf_tlaser.inference): one run gives the vectors the model gives; sharded, resumed and
2-process runs give the one-run rows; gz input, documents modes, float16 and normalised output; the embeddings file
format (sidecar, shard joining, compatibility check); every bad input is one line, exit 2, nothing written."""

from __future__ import annotations

import gzip
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

import hf_tlaser
from hf_tlaser.cli import main as hf_tlaser_main
from hf_tlaser.errors import UsageError
from hf_tlaser.inference import EmbeddingsWriter, check_compatible, read_embeddings
from hf_tlaser.inference.lines import plan_lines


@pytest.fixture(scope="module")
def lines(newstest_lines, tokenizer) -> list[str]:
    """70 real lines within both tiny models' token limits, an empty one and one over them (line 40)."""
    en = [line for line in newstest_lines["en"] if len(tokenizer(line)["input_ids"]) < 50][:70]
    return en[:20] + [""] + en[20:39] + [" ".join(en[:12])] + en[39:]


@pytest.fixture(scope="module")
def input_file(tmp_path_factory, lines):
    path = tmp_path_factory.mktemp("input") / "en.txt"
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def embed(model, source, output, *extra) -> int:
    args = ["embed", "--model", str(model), "--input", str(source), "--output", str(output), "--precision", "fp32"]
    return hf_tlaser_main([*args, "--chunk-size", "16", "--batch-size", "8", *map(str, extra)])


def test_one_run_gives_the_model_vectors_and_counts(tlaser_folder, input_file, lines, tmp_path, capsys):
    assert embed(tlaser_folder, input_file, tmp_path / "out.npy") == 0
    vectors, meta = read_embeddings(tmp_path / "out.npy")
    model, tokenizer = hf_tlaser.load_model(tlaser_folder, backend="torch")
    expected = hf_tlaser.encode(model, tokenizer, lines, truncation=True, autocast_dtype=None, device="cpu")
    assert isinstance(vectors, np.memmap) and vectors.dtype == np.float32
    np.testing.assert_allclose(vectors, expected, atol=2e-5)
    assert meta["format"] == "hf_tlaser-embeddings/1" and meta["count"] == meta["lines"] == len(lines) == 72
    assert (meta["start"], meta["stop"], meta["shard"], meta["input_lines"]) == (0, 72, None, 72)
    assert (meta["truncated"], meta["empty"], meta["precision"], meta["documents"]) == (1, 1, "fp32", None)
    assert len(meta["fingerprint"]) == 64 and not meta["normalized"] and meta["model"] == str(tlaser_folder)
    assert sorted(os.listdir(tmp_path)) == ["out.npy", "out.npy.json"]  # the run's partial files are gone
    assert os.path.getsize(tmp_path / "out.npy") == vectors.offset + vectors.nbytes  # allocated as the rows need
    assert "truncated: 1" in capsys.readouterr().out


def test_sharded_and_resumed_runs_equal_one_run(st_folder, input_file, tmp_path, monkeypatch):
    assert embed(st_folder, input_file, tmp_path / "one.npy") == 0
    one, one_meta = read_embeddings(tmp_path / "one.npy")
    assert one_meta["prompt"] == "query: " and one_meta["truncated"] == 1

    shards = [tmp_path / f"shard{i}.npy" for i in range(3)]
    for i, shard in enumerate(shards):
        assert embed(st_folder, input_file, shard, "--shard", f"{i}/3") == 0
    metas = [read_embeddings(shard)[1] for shard in shards]
    assert [(m["start"], m["stop"], m["shard"]) for m in metas] == [(0, 16, [0, 3]), (16, 48, [1, 3]), (48, 72, [2, 3])]
    joined, meta = read_embeddings([shards[2], shards[0], shards[1]])  # any order
    np.testing.assert_array_equal(joined, one)
    assert (meta["count"], meta["truncated"], meta["empty"]) == (72, 1, 1)
    with pytest.raises(UsageError, match="lines 16-47 are missing"):
        read_embeddings([shards[0], shards[2]])
    assert embed(st_folder, input_file, tmp_path / "empty.npy", "--shard", "0/6") == 0  # 5 chunks, 6 shards
    empty, empty_meta = read_embeddings(tmp_path / "empty.npy")
    assert empty.shape == (0, one.shape[1]) and (empty_meta["start"], empty_meta["stop"]) == (0, 0)

    written = []
    write_chunk = EmbeddingsWriter.write_chunk

    def killed_after_two_chunks(self, chunk, *args, **kwargs):
        if len(written) == 2:
            raise KeyboardInterrupt("killed")
        written.append(chunk)
        write_chunk(self, chunk, *args, **kwargs)

    monkeypatch.setattr(EmbeddingsWriter, "write_chunk", killed_after_two_chunks)
    output = tmp_path / "resumed.npy"
    with pytest.raises(KeyboardInterrupt):
        embed(st_folder, input_file, output)
    assert not output.exists() and (tmp_path / "resumed.npy.partial").exists()
    assert embed(st_folder, input_file, output) == 2  # not without --resume
    resumed_chunks = []

    def counted(self, chunk, *args, **kwargs):
        resumed_chunks.append(chunk)
        write_chunk(self, chunk, *args, **kwargs)

    monkeypatch.setattr(EmbeddingsWriter, "write_chunk", counted)
    assert embed(st_folder, input_file, output, "--resume") == 0
    assert written == [0, 1] and resumed_chunks == [2, 3, 4]  # 72 lines in chunks of 16: only the missing ones
    resumed, resumed_meta = read_embeddings(output)
    np.testing.assert_array_equal(resumed, one)
    assert resumed_meta["truncated"] == 1 and resumed_meta["empty"] == 1  # the killed run's chunks counted too
    assert embed(st_folder, input_file, output, "--resume") == 0  # finished: nothing to do


def test_resume_refuses_other_settings(st_folder, input_file, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(EmbeddingsWriter, "write_chunk", lambda *a, **k: (_ for _ in ()).throw(KeyboardInterrupt()))
    with pytest.raises(KeyboardInterrupt):
        embed(st_folder, input_file, tmp_path / "out.npy")
    monkeypatch.undo()
    capsys.readouterr()
    assert embed(st_folder, input_file, tmp_path / "out.npy", "--resume", "--normalize") == 2
    assert "normalized=False" in capsys.readouterr().err


def test_array_of_shard_processes_equals_one_run(st_folder, input_file, tmp_path):
    """A job array on one machine: ``hf-tlaser embed --shard I/2`` in two processes at once, joined by
    ``read_embeddings``, gives the one-run rows."""
    assert embed(st_folder, input_file, tmp_path / "one.npy") == 0
    common = ["--model", str(st_folder), "--input", str(input_file), "--precision", "fp32", "--chunk-size", "16"]
    jobs = [
        subprocess.Popen(
            [sys.executable, "-m", "hf_tlaser.cli", "embed", *common, "--output", str(tmp_path / f"{i}.npy")]
            + ["--shard", f"{i}/2"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "OMP_NUM_THREADS": "1"},
        )
        for i in range(2)
    ]
    for job in jobs:
        _, err = job.communicate(timeout=300)
        assert job.returncode == 0, err[-4000:]
    joined, meta = read_embeddings([tmp_path / "1.npy", tmp_path / "0.npy"])
    np.testing.assert_allclose(joined, read_embeddings(tmp_path / "one.npy")[0], atol=1e-6)
    assert (meta["start"], meta["stop"], meta["count"]) == (0, 72, 72)


def test_two_processes_equal_one(st_folder, input_file, tmp_path):
    """``accelerate launch`` with 2 CPU processes (gloo) writes the rows that one process writes."""
    assert embed(st_folder, input_file, tmp_path / "one.npy") == 0
    output = tmp_path / "two.npy"
    cmd = [
        sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
        "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no", "-m", "hf_tlaser.cli", "embed",
        "--model", str(st_folder), "--input", str(input_file), "--output", str(output), "--precision", "fp32",
        "--chunk-size", "16", "--batch-size", "8",
    ]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"}, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "processes: 2" in proc.stdout
    two, meta = read_embeddings(output)
    np.testing.assert_allclose(two, read_embeddings(tmp_path / "one.npy")[0], atol=1e-6)
    assert meta["count"] == 72 and meta["truncated"] == 1


def test_gz_float16_normalized(tlaser_folder, input_file, tmp_path):
    gz = tmp_path / "en.txt.gz"
    gz.write_bytes(gzip.compress(input_file.read_bytes()))
    assert embed(tlaser_folder, input_file, tmp_path / "plain.npy", "--normalize") == 0
    assert embed(tlaser_folder, gz, tmp_path / "half.npy", "--dtype", "float16", "--normalize") == 0
    plain, _ = read_embeddings(tmp_path / "plain.npy")
    half, meta = read_embeddings(tmp_path / "half.npy")
    assert half.dtype == np.float16 and meta["dtype"] == "float16" and meta["normalized"]
    np.testing.assert_allclose(np.linalg.norm(plain, axis=1), 1.0, atol=1e-5)
    np.testing.assert_array_equal(half, plain.astype(np.float16))


@pytest.mark.parametrize("mode", ["whole", "sentences"])
def test_documents_modes_match_encode(mode, tlaser_folder, newstest_lines, tmp_path):
    en = newstest_lines["en"]
    documents = [" ".join(en[i : i + 4]) for i in range(0, 40, 4)] + [" ".join(en[:300])]  # the last: > 750 words
    source = tmp_path / "docs.txt"
    source.write_text("\n".join(documents) + "\n", encoding="utf-8")
    assert embed(tlaser_folder, source, tmp_path / "docs.npy", "--documents", mode) == 0
    vectors, meta = read_embeddings(tmp_path / "docs.npy")
    model, tokenizer = hf_tlaser.load_model(tlaser_folder, backend="torch")
    expected = hf_tlaser.encode(
        model, tokenizer, documents, documents=True, document_mode=mode, truncation=True, autocast_dtype=None
    )
    np.testing.assert_allclose(vectors, expected, atol=2e-5)
    assert meta["documents"] == mode and meta["count"] == 11
    assert meta["truncated"] >= 1  # the long document (whole: cut to 750 words; sentences: its longest sentences)


def test_embeddings_of_other_models_are_refused(st_folder, tlaser_folder, input_file, tmp_path):
    assert embed(st_folder, input_file, tmp_path / "a.npy") == 0
    assert embed(tlaser_folder, input_file, tmp_path / "b.npy") == 0
    assert embed(st_folder, input_file, tmp_path / "no_prompt.npy", "--prompt", "none") == 0
    a, b = read_embeddings(tmp_path / "a.npy")[1], read_embeddings(tmp_path / "b.npy")[1]
    no_prompt = read_embeddings(tmp_path / "no_prompt.npy")[1]
    check_compatible(a, a, "--src-embeddings/--tgt-embeddings")
    with pytest.raises(UsageError, match=r"a\.npy .*and .*b\.npy .*come from different models") as err:
        check_compatible(a, b, "--src-embeddings/--tgt-embeddings")
    assert "\n" not in str(err.value)
    assert a["dim"] == no_prompt["dim"]  # same model and width, another prompt: other vectors
    with pytest.raises(UsageError, match="different models or prompts"):
        check_compatible(a, no_prompt, "--src-embeddings/--tgt-embeddings")
    with pytest.raises(UsageError, match="no sidecar"):
        (tmp_path / "c.npy").write_bytes((tmp_path / "a.npy").read_bytes())
        read_embeddings(tmp_path / "c.npy")


def test_plan_cuts_shards_at_chunk_boundaries():
    plans = [plan_lines(105, 10, (i, 4)) for i in range(4)]  # 11 chunks over 4 shards
    assert [(p.start, p.stop) for p in plans] == [(0, 20), (20, 50), (50, 80), (80, 105)]
    assert plan_lines(5, 10, (0, 2)).chunks == 0 and plan_lines(5, 10, (1, 2)).stop == 5  # more shards than chunks


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("missing", "--input .*missing.txt: no such file"),
        ("input_folder", "--input .*texts: is a folder; give a text file"),
        ("empty", "--input .*empty.txt: empty file"),
        ("latin1", r"--input .*latin1.txt:3: not valid UTF-8"),
        ("output_exists", "--output .*exists.npy: exists"),
        ("partial_exists", "an interrupted run left exists.npy.partial; give --resume"),
        ("shard_range", "--shard 3/3: I must be 0 to 2"),
        ("shard_zero", r"--shard 0/0: N must be at least 1 \(I/N: shard I of N, e.g. 0/8\)$"),
        ("shard_malformed", "--shard 1of3: expected I/N"),
        ("output_suffix", "--output .*out.txt: give a path ending in .npy"),
        ("vectors_model", "a vectors: file is not a model"),
        ("no_model", "--model .*nowhere.*no such folder"),
    ],
)
def test_bad_input_is_one_line_and_writes_nothing(case, message, st_folder, input_file, tmp_path, capsys):
    source, output, extra, model = input_file, tmp_path / "out.npy", [], st_folder
    if case == "missing":
        source = tmp_path / "missing.txt"
    elif case == "input_folder":
        source = tmp_path / "texts"
        source.mkdir()
    elif case == "empty":
        source = tmp_path / "empty.txt"
        source.write_bytes(b"")
    elif case == "latin1":
        source = tmp_path / "latin1.txt"
        source.write_bytes("one\ntwo\ncaf\u00e9\n".encode("latin-1"))
    elif case in ("output_exists", "partial_exists"):
        output = tmp_path / "exists.npy"
        (tmp_path / ("exists.npy" if case == "output_exists" else "exists.npy.partial")).write_bytes(b"mine")
    elif case.startswith("shard"):
        extra = ["--shard", {"shard_range": "3/3", "shard_zero": "0/0", "shard_malformed": "1of3"}[case]]
    elif case == "output_suffix":
        output = tmp_path / "out.txt"
    elif case == "vectors_model":
        model = f"vectors:{tmp_path / 'v.npy'}"
    elif case == "no_model":
        model = tmp_path / "nowhere"
    before = {p.name: p.is_file() and p.read_bytes() for p in tmp_path.iterdir()}
    assert embed(model, source, output, *extra) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert err.startswith("hf-tlaser embed: error: ")
    assert re.search(message, err), err
    assert {
        p.name: p.is_file() and p.read_bytes() for p in tmp_path.iterdir()
    } == before  # nothing written, nothing touched


def test_sidecar_is_json_beside_a_plain_npy(st_folder, input_file, tmp_path):
    assert embed(st_folder, input_file, tmp_path / "out.npy") == 0
    meta = json.loads((tmp_path / "out.npy.json").read_text())
    array = np.load(tmp_path / "out.npy")  # numpy alone reads it
    assert array.shape == (meta["count"], meta["dim"]) and str(array.dtype) == meta["dtype"]
    expected_keys = {
        "format", "model", "fingerprint", "dim", "count", "normalized", "dtype", "input", "lines", "start", "stop",
        "shard", "truncated", "prompt", "precision", "documents", "hf_tlaser_version",
    }  # fmt: skip
    assert expected_keys <= set(meta)


def test_lines_held_in_memory_are_chunked_and_cut_as_the_file_is(tmp_path):
    """``mine --model`` hands ``embed`` the lines it read: the same chunks, and the same cut, as reading the file."""
    from hf_tlaser.inference.lines import MAX_LINE_CHARS, Source, read_chunks, scan_input

    texts = ["short", "x" * (MAX_LINE_CHARS + 5), "", "last"]
    path = tmp_path / "in.txt"
    path.write_text("\n".join(texts) + "\n", encoding="utf-8")
    scanned = scan_input(path)
    assert (scanned.lines, scanned.texts) == (4, None)
    plan = plan_lines(4, 3, None)
    held = list(read_chunks(Source(path, 4, scanned.sha256, texts), plan))
    assert held == list(read_chunks(scanned, plan))
    assert [(chunk, [len(line) for line in lines], cut) for chunk, lines, cut in held] == [
        (0, [5, MAX_LINE_CHARS, 0], 1),
        (1, [4], 0),
    ]

"""The reliability sweep (issue "nothing stale, nothing silent, nothing run unasked"): each case as a careless or
hostile user meets it, on tiny models. Each command test here failed on the code before its fix (checked):

- ``export`` ran Python files named by a folder's ``auto_map`` without being asked (it loaded with
  ``trust_remote_code=True``): the marker file below was written and the export exited 0;
- a model with a NaN weight gave NaN vectors that ``embed`` wrote with exit 0, and ``mine`` read such rows and
  reported "0 pairs (of 0)" with exit 0.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from safetensors.torch import load_file, save_file

from hf_tlaser.backend.measured import MEASURED_FILE
from hf_tlaser.cli import main as hf_tlaser_main
from hf_tlaser.inference.store import first_non_finite
from tests.test_mine import mine_args, write_embeddings

EVIL = """
import os
from pathlib import Path

from transformers import PreTrainedTokenizerFast

Path(os.environ["HF_TLASER_TEST_MARKER"]).write_text("the folder's code ran")


class EvilTokenizer(PreTrainedTokenizerFast):
    pass
"""


def one_line(capsys, code: int, *expected: str) -> str:
    """The command's exit code is 2, no traceback, and its last line on stderr (after any progress bar) holds each of
    ``expected``."""
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err, err
    line = err.strip().splitlines()[-1]
    for text in expected:
        assert text in line, line
    return line


def name_code(folder: Path, tokenizer_class: str | None) -> None:
    """Make ``folder``'s tokenizer_config.json name ``tok_evil.EvilTokenizer`` in its ``auto_map`` and
    ``tokenizer_class`` as its class (None: the class it had)."""
    path = folder / "tokenizer_config.json"
    config = json.loads(path.read_text(encoding="utf-8"))
    config["auto_map"] = {"AutoTokenizer": [None, "tok_evil.EvilTokenizer"]}
    if tokenizer_class:
        config["tokenizer_class"] = tokenizer_class
    path.write_text(json.dumps(config), encoding="utf-8")


@pytest.fixture
def evil_folder(tlaser_folder, tmp_path, monkeypatch) -> Path:
    """A copy of the tiny T-LASER whose tokenizer is a class in a file of the folder (``tok_evil.py``), which writes
    ``ran.txt`` in the folder when imported (transformers imports a copy of it, so the path comes by environment)."""
    folder = Path(shutil.copytree(tlaser_folder, tmp_path / tmp_path.name))  # a module name of its own
    monkeypatch.setenv("HF_TLASER_TEST_MARKER", str(folder / "ran.txt"))
    (folder / "tok_evil.py").write_text(EVIL, encoding="utf-8")
    name_code(folder, "EvilTokenizer")
    return folder


def test_export_runs_no_code_from_the_folder_unless_asked(evil_folder, tlaser_folder, tmp_path, monkeypatch, capsys):
    pytest.importorskip("onnx")
    code = hf_tlaser_main(["export", str(evil_folder), "--backend", "onnx"])
    one_line(capsys, code, "hf-tlaser export: error:", str(evil_folder), "--trust-remote-code")
    assert not (evil_folder / "ran.txt").exists()
    assert not (evil_folder / "onnx").exists()
    # embed, which never trusts a folder's code, refuses it as well
    text = tmp_path / "in.txt"
    text.write_text("Stocks fall.\n", encoding="utf-8")
    code = hf_tlaser_main(
        ["embed", "--model", str(evil_folder), "--input", str(text), "--output", str(tmp_path / "v.npy")]
    )
    assert code == 2 and not (evil_folder / "ran.txt").exists()
    capsys.readouterr()
    # code named beside a stock class: the installed class builds the tokenizer and the folder's file stays unread
    stock = Path(shutil.copytree(tlaser_folder, tmp_path / "stock"))
    monkeypatch.setenv("HF_TLASER_TEST_MARKER", str(stock / "ran.txt"))
    (stock / "tok_evil.py").write_text(EVIL, encoding="utf-8")
    name_code(stock, None)
    assert hf_tlaser_main(["export", str(stock), "--backend", "onnx"]) == 0
    assert not (stock / "ran.txt").exists() and (stock / "onnx" / "model.onnx").is_file()


def test_export_runs_the_folders_code_when_asked(evil_folder):
    pytest.importorskip("onnx")
    pytest.importorskip("onnxruntime")
    assert hf_tlaser_main(["export", str(evil_folder), "--backend", "onnx", "--trust-remote-code"]) == 0
    assert (evil_folder / "ran.txt").read_text() == "the folder's code ran"
    assert (evil_folder / "onnx" / "model.onnx").is_file()


def test_first_non_finite_finds_the_first_bad_row_across_blocks():
    rows = np.zeros((10, 3), dtype=np.float16)
    assert first_non_finite(rows, block=4) is None
    rows[9, 1] = np.inf
    assert first_non_finite(rows, block=4) == 9
    rows[5, 0] = np.nan
    assert first_non_finite(rows, block=4) == 5
    assert first_non_finite(np.zeros((0, 3))) is None


def test_embed_stops_at_the_first_non_finite_vector(tlaser_folder, newstest_lines, tmp_path, capsys):
    folder = Path(shutil.copytree(tlaser_folder, tmp_path / "model"))
    weights = load_file(folder / "model.safetensors")
    name = next(key for key in weights if key.startswith("encoder.") and key.endswith("layer_norm.weight"))
    weights[name][0] = float("nan")  # one flipped exponent: every vector that passes that layer is NaN
    save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})
    source = tmp_path / "en.txt"
    source.write_text("".join(line + "\n" for line in newstest_lines["en"][:5]), encoding="utf-8")
    output = tmp_path / "out.npy"
    args = ["embed", "--model", str(folder), "--input", str(source), "--output", str(output), "--precision", "fp32"]
    code = hf_tlaser_main(args)
    one_line(capsys, code, "hf-tlaser embed: error:", f"line 1 of {source}", "not finite")
    assert not output.exists() and not Path(f"{output}.json").exists()  # nothing that looks finished


def test_mine_refuses_embeddings_with_a_non_finite_row(tmp_path, capsys):
    rng = np.random.default_rng(0)
    src, tgt = rng.normal(size=(8, 16)), rng.normal(size=(6, 16))
    src[3, 2] = np.nan
    (tmp_path / "src.txt").write_text("".join(f"source {i}\n" for i in range(8)), encoding="utf-8")
    (tmp_path / "tgt.txt").write_text("".join(f"target {i}\n" for i in range(6)), encoding="utf-8")
    write_embeddings(tmp_path / "src.npy", src)
    write_embeddings(tmp_path / "tgt.npy", tgt)
    code = hf_tlaser_main(["mine", *mine_args(tmp_path)])
    one_line(capsys, code, "--src-embeddings", f"line 4 of {tmp_path / 'src.txt'}", "not finite")
    assert not (tmp_path / "mined.tsv").exists()


def test_an_export_of_other_weights_is_refused_and_never_chosen(warm_dir, tmp_path, capsys):
    """Weights changed after an export: loading the old file, choosing it, embedding with it and quantising it are
    refused (one line naming the re-export), ``auto`` falls back to torch; re-exported, it runs again, and its
    embeddings' fingerprint differs from torch's (another file computes them)."""
    pytest.importorskip("onnxruntime")
    import hf_tlaser
    from hf_tlaser.backend import runtime as backends
    from hf_tlaser.backend.export import export_model
    from hf_tlaser.errors import UsageError

    folder = Path(shutil.copytree(warm_dir, tmp_path / "model"))
    export_model(folder, "onnx")
    record = json.loads((folder / "onnx" / backends.EXPORT_RECORD).read_text())
    assert record == {"model.onnx": backends.weights_digest(folder)}
    hf_tlaser.load_model(folder, backend="onnx")  # current: loads
    weights = load_file(folder / "model.safetensors")
    name = next(key for key in weights if key.endswith("attention.self.query.weight"))
    weights[name] = weights[name] * 2
    save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(UsageError, match="exported from other weights than .*--backend onnx --overwrite"):
        hf_tlaser.load_model(folder, backend="onnx")
    (folder / MEASURED_FILE).write_text(
        json.dumps({backends.cpu_class(): {"onnx": {"speedup": 3.0, "ntrex_delta": 0.0, "sib200_delta": 0.0}}})
    )
    assert backends.choose_backend(folder) == "torch"
    source = tmp_path / "in.txt"
    source.write_text("Stocks fall.\nDie Börse fällt.\n", encoding="utf-8")
    embed = ["embed", "--model", str(folder), "--input", str(source), "--precision", "auto"]
    one_line(capsys, hf_tlaser_main([*embed, "--backend", "onnx", "--output", str(tmp_path / "a.npy")]), "re-export")
    code = hf_tlaser_main(["export", str(folder), "--backend", "onnx", "--quantize", "int8", "--cpu", "avx2"])
    one_line(capsys, code, "model.onnx was exported from other weights", "--overwrite")
    assert not (folder / "onnx" / "model_quint8_avx2.onnx").exists()
    (folder / "onnx" / backends.EXPORT_RECORD).unlink()  # a file copied in without its record
    with pytest.raises(UsageError, match="has no record of the weights it was exported from"):
        hf_tlaser.load_model(folder, backend="onnx")
    assert hf_tlaser_main(["export", str(folder), "--backend", "onnx", "--overwrite"]) == 0
    assert hf_tlaser_main([*embed, "--backend", "onnx", "--output", str(tmp_path / "onnx.npy")]) == 0
    assert hf_tlaser_main([*embed, "--backend", "torch", "--output", str(tmp_path / "torch.npy")]) == 0
    fingerprints = {
        json.loads(Path(f"{tmp_path / name}.npy.json").read_text())["fingerprint"] for name in ("onnx", "torch")
    }
    assert len(fingerprints) == 2
    capsys.readouterr()


@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
def test_mine_refuses_a_threshold_that_is_no_number(tmp_path, capsys, value):
    """``--threshold nan`` kept no pair (every comparison with NaN is false) and wrote an empty TSV, exit 0."""
    rng = np.random.default_rng(0)
    (tmp_path / "src.txt").write_text("".join(f"source {i}\n" for i in range(8)), encoding="utf-8")
    (tmp_path / "tgt.txt").write_text("".join(f"target {i}\n" for i in range(6)), encoding="utf-8")
    write_embeddings(tmp_path / "src.npy", rng.normal(size=(8, 16)))
    write_embeddings(tmp_path / "tgt.npy", rng.normal(size=(6, 16)))
    code = hf_tlaser_main(["mine", *mine_args(tmp_path, f"--threshold={value}")])
    one_line(capsys, code, f"--threshold {float(value)}: give a finite score")
    assert not (tmp_path / "mined.tsv").exists()


def test_saved_weights_are_as_readable_as_the_folders_other_files(tmp_path, tiny_tlaser_kwargs):
    """transformers writes the weights through a private temporary file: model.safetensors had mode 600 beside
    644 files, unreadable in a shared folder to the users who could read the rest."""
    from hf_tlaser import TLaserConfig, TLaserForTranslation

    model = TLaserForTranslation(TLaserConfig(**tiny_tlaser_kwargs, training_languages=["de", "en"]))
    model.save_pretrained(tmp_path / "model")
    modes = {path.name: path.stat().st_mode & 0o777 for path in (tmp_path / "model").iterdir() if path.is_file()}
    assert modes["model.safetensors"] == modes["config.json"], modes


# --- case 4: free space and write errors ----------------------------------------------------------------------------


def small_input(tmp_path: Path, lines: int = 5) -> Path:
    source = tmp_path / "in.txt"
    source.write_text("".join(f"Stocks fall, line {i}.\n" for i in range(lines)), encoding="utf-8")
    return source


def embed_args(model: Path, source: Path, output: Path, *extra: str) -> list[str]:
    args = ["embed", "--model", str(model), "--input", str(source), "--output", str(output), "--precision", "fp32"]
    return [*args, *extra]


def no_space(free: int = 0):
    """A ``shutil.disk_usage`` whose filesystems have ``free`` bytes free."""
    return lambda path: shutil._ntuple_diskusage(10**12, 10**12 - free, free)


def test_embed_checks_the_free_space_before_it_allocates(tlaser_folder, tmp_path, monkeypatch, capsys):
    """A full disk ended ``embed`` with SIGBUS (exit 135) on the sparse memory map, nothing said."""
    source, output = small_input(tmp_path), tmp_path / "out.npy"
    monkeypatch.setattr(shutil, "disk_usage", no_space())
    one_line(capsys, hf_tlaser_main(embed_args(tlaser_folder, source, output)), "--output", "needs about", "free")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt"]


def test_embed_allocates_its_file_and_a_full_disk_is_one_line(tlaser_folder, tmp_path, monkeypatch, capsys):
    import errno
    import os

    source, output = small_input(tmp_path), tmp_path / "out.npy"
    allocated = []

    def full(fd, offset, length):
        allocated.append(length)
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "posix_fallocate", full)
    code = hf_tlaser_main(embed_args(tlaser_folder, source, output))
    one_line(capsys, code, "--output", f"writing {output}.partial failed", "No space left", "free some space")
    assert allocated and sorted(p.name for p in tmp_path.iterdir()) == ["in.txt"]
    monkeypatch.undo()
    assert hf_tlaser_main(embed_args(tlaser_folder, source, output)) == 0  # space freed: it runs


def test_mine_and_export_check_the_free_space_first(tlaser_folder, tmp_path, monkeypatch, capsys):
    from hf_tlaser.backend import export

    rng = np.random.default_rng(0)
    (tmp_path / "src.txt").write_text("".join(f"source {i}\n" for i in range(8)), encoding="utf-8")
    (tmp_path / "tgt.txt").write_text("".join(f"target {i}\n" for i in range(6)), encoding="utf-8")
    write_embeddings(tmp_path / "src.npy", rng.normal(size=(8, 16)))
    write_embeddings(tmp_path / "tgt.npy", rng.normal(size=(6, 16)))
    monkeypatch.setattr(shutil, "disk_usage", no_space(1000))
    one_line(capsys, hf_tlaser_main(["mine", *mine_args(tmp_path)]), "--output", "the TSV needs about")
    assert not (tmp_path / "mined.tsv").exists()
    pytest.importorskip("onnx")
    folder = Path(shutil.copytree(tlaser_folder, tmp_path / "model"))

    def loaded(*args, **kwargs):
        raise AssertionError("the model loaded before the checks")

    monkeypatch.setattr(export, "load_for_export", loaded)
    one_line(capsys, hf_tlaser_main(["export", str(folder), "--backend", "onnx"]), "needs about", "free")
    assert not (folder / "onnx").exists()


# --- case 5: a bounded line length -----------------------------------------------------------------------------------


def test_read_lines_cuts_a_huge_line_in_bounded_reads(tmp_path):
    from hf_tlaser.inference.lines import read_lines

    path = tmp_path / "t.txt"
    path.write_bytes("\ufeffshort\r\n".encode() + b"x" * 100 + "é".encode() * 30 + b"\n" + b"last")
    assert list(read_lines(path, limit=10)) == [("short", False), ("x" * 10, True), ("last", False)]
    assert list(read_lines(path, limit=1000)) == [("short", False), ("x" * 100 + "é" * 30, False), ("last", False)]
    path.write_bytes(b"x" * 100 + b"\xe9" + b"\nok\n")  # invalid UTF-8 in the part past the bound: still found
    with pytest.raises(Exception, match=r":1: not valid UTF-8 .* at byte 100"):
        list(read_lines(path, limit=10))
    path.write_bytes(b"one\rtwo\r" * 20)  # \r line endings: one line, refused rather than embedded whole
    with pytest.raises(Exception, match="carriage returns"):
        list(read_lines(path, limit=10))


def test_embed_cuts_a_huge_line_before_tokenising_it(tlaser_folder, tmp_path, monkeypatch):
    """A 10 MB line took 2.36 GB and 38 s: every text was tokenised whole, without truncation."""
    from hf_tlaser.encoders import Encoder
    from hf_tlaser.inference.lines import MAX_LINE_CHARS

    source = tmp_path / "in.txt"
    source.write_text("Stocks fall.\n" + "word " * (MAX_LINE_CHARS // 2) + "\nDie Börse fällt.\n", encoding="utf-8")
    longest = []
    tokenize = Encoder.tokenize

    def spy(self, texts, *args, **kwargs):
        longest.append(max(len(text) for text in texts))
        return tokenize(self, texts, *args, **kwargs)

    monkeypatch.setattr(Encoder, "tokenize", spy)
    assert hf_tlaser_main(embed_args(tlaser_folder, source, tmp_path / "out.npy")) == 0
    meta = json.loads((tmp_path / "out.npy.json").read_text())
    assert (meta["cut"], meta["truncated"], meta["count"]) == (1, 1, 3)
    assert max(longest) <= MAX_LINE_CHARS
    assert meta["input_sha256"] == hashlib.sha256(source.read_bytes()).hexdigest()


def test_embed_refuses_a_file_with_carriage_return_line_endings(tlaser_folder, tmp_path, capsys):
    source = tmp_path / "mac.txt"
    source.write_bytes(b"Stocks fall.\r" * 20_000)  # 260,000 characters, no \n: one line
    code = hf_tlaser_main(embed_args(tlaser_folder, source, tmp_path / "out.npy"))
    one_line(capsys, code, f"--input {source}:1:", "carriage returns", "tr ")
    assert not list(tmp_path.glob("out.npy*"))


# --- case 6: one line, exit 2, before the work ----------------------------------------------------------------------


@pytest.fixture
def unwritable(tmp_path, monkeypatch) -> Path:
    """A folder where no file can be created by ``os.open`` (as for a user without write permission, root included,
    os.open refusing to create a file under it)."""
    import os

    folder = tmp_path / "ro"
    folder.mkdir()
    real_open = os.open

    def refusing(path, flags, *args, **kwargs):
        if folder in Path(path).parents and flags & os.O_CREAT:
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", refusing)
    return folder


def test_an_unwritable_output_is_found_before_the_work(tlaser_folder, tmp_path, unwritable, monkeypatch, capsys):
    from hf_tlaser.inference import embed

    def loaded(*args, **kwargs):
        raise AssertionError("the model loaded before the checks")

    monkeypatch.setattr(embed, "load", loaded)
    source = small_input(tmp_path)
    code = hf_tlaser_main(embed_args(tlaser_folder, source, unwritable / "out.npy"))
    one_line(capsys, code, f"--output {unwritable / 'out.npy'}: cannot write in {unwritable}")
    folder = tmp_path / "texts"
    folder.mkdir()
    (folder / "src.txt").write_text("a\nb\n", encoding="utf-8")
    (folder / "tgt.txt").write_text("c\nd\n", encoding="utf-8")
    args = ["mine", "--src", str(folder / "src.txt"), "--tgt", str(folder / "tgt.txt"), "--model", str(tlaser_folder)]
    code = hf_tlaser_main([*args, "--output", str(unwritable / "pairs.tsv")])
    one_line(capsys, code, f"--output {unwritable / 'pairs.tsv'}: cannot write in")
    pytest.importorskip("onnx")
    from hf_tlaser.backend import export

    model = Path(shutil.copytree(tlaser_folder, unwritable / "model"))  # copied by open(), which is not refused
    monkeypatch.setattr(export, "load_for_export", loaded)
    code = hf_tlaser_main(["export", str(model), "--backend", "onnx"])
    one_line(capsys, code, f"export to {model / 'onnx'}: cannot write in {model}")


def test_mine_over_a_folder_with_overwrite_is_one_line_and_leaves_nothing(tmp_path, capsys):
    rng = np.random.default_rng(0)
    (tmp_path / "src.txt").write_text("".join(f"source {i}\n" for i in range(8)), encoding="utf-8")
    (tmp_path / "tgt.txt").write_text("".join(f"target {i}\n" for i in range(6)), encoding="utf-8")
    write_embeddings(tmp_path / "src.npy", rng.normal(size=(8, 16)))
    write_embeddings(tmp_path / "tgt.npy", rng.normal(size=(6, 16)))
    (tmp_path / "mined.tsv").mkdir()
    code = hf_tlaser_main(["mine", *mine_args(tmp_path, "--overwrite")])
    one_line(capsys, code, f"--output {tmp_path / 'mined.tsv'}: is a folder")
    assert not list(tmp_path.glob("*.tmp*")) and not (tmp_path / "mined.png").exists()


@pytest.mark.parametrize("content", ["[]", '{"CLASS": {"onnx": {"speedup": "fast"}}}', '{"CLASS": ["onnx"]}', "{"])
def test_a_malformed_backends_json_is_ignored_with_a_warning(tlaser_folder, tmp_path, caplog, content):
    """``backends.json`` as ``[]`` or with strings for numbers: AttributeError / TypeError tracebacks (exit 1)."""
    from hf_tlaser.backend import runtime as backends

    folder = Path(shutil.copytree(tlaser_folder, tmp_path / "model"))
    (folder / MEASURED_FILE).write_text(content.replace("CLASS", backends.cpu_class()), encoding="utf-8")
    with caplog.at_level("WARNING", logger="hf_tlaser.backend.runtime"):
        assert backends.choose_backend(folder) == "torch"
    assert f"{folder / MEASURED_FILE} is" in caplog.text and "ignored" in caplog.text


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("HNSW8", "graph indexes (IndexHNSWFlat; HNSW, NSG) are not supported"),
        ("IDMap,Flat", "faiss cannot run it as the search does"),
        ("IVF4096,Flat", "4096 inverted lists need at least as many rows to train on, the database has"),
    ],
)
def test_an_index_the_search_cannot_run_is_refused_before_it(tmp_path, monkeypatch, capsys, spec, message):
    from hf_tlaser.bitext import mining

    rng = np.random.default_rng(0)
    (tmp_path / "src.txt").write_text("".join(f"source {i}\n" for i in range(1000)), encoding="utf-8")
    (tmp_path / "tgt.txt").write_text("".join(f"target {i}\n" for i in range(1000)), encoding="utf-8")
    write_embeddings(tmp_path / "src.npy", rng.normal(size=(1000, 16)))
    write_embeddings(tmp_path / "tgt.npy", rng.normal(size=(1000, 16)))
    searched = []
    search = mining.search

    def spy(*args, **kwargs):
        searched.append(1)
        return search(*args, **kwargs)

    monkeypatch.setattr(mining, "search", spy)
    one_line(capsys, hf_tlaser_main(["mine", *mine_args(tmp_path, "--index", spec)]), f"--index {spec!r}", message)
    assert not searched and not (tmp_path / "mined.tsv").exists()


def test_mine_with_a_model_refuses_a_bad_index_before_the_model_embeds(tlaser_folder, tmp_path, monkeypatch, capsys):
    """``mine --model`` embedded both files (minutes at scale) and only then refused ``--index``; it is now checked
    for the width the model's files state, before the model loads."""
    from hf_tlaser.inference import embed

    (tmp_path / "src.txt").write_text("".join(f"source {i}\n" for i in range(50)), encoding="utf-8")
    (tmp_path / "tgt.txt").write_text("".join(f"target {i}\n" for i in range(50)), encoding="utf-8")
    monkeypatch.setattr(embed, "run", lambda job: pytest.fail("embedded before the --index check"))
    args = ["mine", "--src", str(tmp_path / "src.txt"), "--tgt", str(tmp_path / "tgt.txt"), "--threads", "1"]
    args += ["--model", str(tlaser_folder), "--output", str(tmp_path / "pairs.tsv"), "--index", "IVF64,Flat"]
    one_line(capsys, hf_tlaser_main(args), "--index 'IVF64,Flat'", "64 inverted lists need at least as many rows")
    assert sorted(path.name for path in tmp_path.iterdir()) == ["src.txt", "tgt.txt"]


@pytest.mark.parametrize("damage", ["truncated", "mislabelled"])
def test_a_damaged_gz_text_is_one_line_naming_it(tmp_path, capsys, damage):
    rng = np.random.default_rng(0)
    text = "".join(f"source {i}\n" for i in range(800)).encode()
    src = tmp_path / "src.txt.gz"
    src.write_bytes(gzip.compress(text)[:-30] if damage == "truncated" else text)
    (tmp_path / "tgt.txt").write_text("".join(f"target {i}\n" for i in range(6)), encoding="utf-8")
    write_embeddings(tmp_path / "src.npy", rng.normal(size=(800, 16)))
    write_embeddings(tmp_path / "tgt.npy", rng.normal(size=(6, 16)))
    args = mine_args(tmp_path)
    args[args.index("--src") + 1] = str(src)
    one_line(capsys, hf_tlaser_main(["mine", *args]), f"--src {src}: unreadable")


# --- case 7: one run per output --------------------------------------------------------------------------------------

HOLDER = """
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o644)
fcntl.flock(fd, fcntl.LOCK_EX)
os.write(fd, f"{os.getpid()}\\n".encode())
print("locked", flush=True)
time.sleep(120)
"""


def hold_lock(path: Path):
    """Another process that holds ``path``'s lock (as a running embed or mine does), until it is killed."""
    import subprocess
    import sys

    holder = subprocess.Popen([sys.executable, "-c", HOLDER, f"{path}.lock"], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "locked"
    return holder


def test_a_second_run_on_an_output_names_the_process_that_holds_it(tlaser_folder, tmp_path, monkeypatch, capsys):
    """Two embeds on one output wrote into one ``.partial``; the loser crashed saying "run again with --resume"."""
    from hf_tlaser.inference import EmbeddingsWriter

    source, output = small_input(tmp_path), tmp_path / "out.npy"
    monkeypatch.setattr(EmbeddingsWriter, "write_chunk", lambda *a, **k: (_ for _ in ()).throw(KeyboardInterrupt()))
    with pytest.raises(KeyboardInterrupt):  # an interrupted run: --resume would continue it
        hf_tlaser_main(embed_args(tlaser_folder, source, output))
    monkeypatch.undo()
    capsys.readouterr()
    holder = hold_lock(output)
    try:
        for extra in ([], ["--resume"]):
            code = hf_tlaser_main(embed_args(tlaser_folder, source, output, *extra))
            one_line(capsys, code, f"--output {output}: another run (pid {holder.pid}) is writing it")
        assert not output.exists() and not list(tmp_path.glob("out.npy.partial.done-*"))
    finally:
        holder.kill()
        holder.wait()
    assert hf_tlaser_main(embed_args(tlaser_folder, source, output, "--resume")) == 0  # the lock went with it
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt", "out.npy", "out.npy.json"]

    rng = np.random.default_rng(0)
    (tmp_path / "src.txt").write_text("".join(f"source {i}\n" for i in range(8)), encoding="utf-8")
    (tmp_path / "tgt.txt").write_text("".join(f"target {i}\n" for i in range(6)), encoding="utf-8")
    write_embeddings(tmp_path / "src.npy", rng.normal(size=(8, 16)))
    write_embeddings(tmp_path / "tgt.npy", rng.normal(size=(6, 16)))
    holder = hold_lock(tmp_path / "mined.tsv")
    try:
        code = hf_tlaser_main(["mine", *mine_args(tmp_path)])
        one_line(capsys, code, f"--output {tmp_path / 'mined.tsv'}: another run (pid {holder.pid})")
    finally:
        holder.kill()
        holder.wait()
    assert hf_tlaser_main(["mine", *mine_args(tmp_path)]) == 0


def test_output_lock_is_exclusive_and_removed_on_release(tmp_path):
    import os

    from hf_tlaser.errors import UsageError
    from hf_tlaser.guards import OutputLock

    first = OutputLock(tmp_path / "x.npy", "--output").acquire()
    assert (tmp_path / "x.npy.lock").read_text() == f"{os.getpid()}\n"
    with pytest.raises(UsageError, match=rf"another run \(pid {os.getpid()}\)"):
        OutputLock(tmp_path / "x.npy", "--output").acquire()
    first.release()
    assert not (tmp_path / "x.npy.lock").exists()
    with OutputLock(tmp_path / "x.npy", "--output"):
        assert (tmp_path / "x.npy.lock").exists()
    assert not (tmp_path / "x.npy.lock").exists()


# --- case 8 ----------------------------------------------------------------------------------------------------------


def test_mine_refuses_the_embeddings_of_another_text_of_the_same_length(tmp_path, capsys):
    """``mine`` compared the line counts only: the vectors of another text of as many lines were mined silently."""
    import hashlib

    rng = np.random.default_rng(0)
    (tmp_path / "src.txt").write_text("".join(f"source {i}\n" for i in range(8)), encoding="utf-8")
    (tmp_path / "tgt.txt").write_text("".join(f"target {i}\n" for i in range(8)), encoding="utf-8")
    for side in ("src", "tgt"):
        write_embeddings(tmp_path / f"{side}.npy", rng.normal(size=(8, 16)))
        meta = json.loads((tmp_path / f"{side}.npy.json").read_text())
        text = (tmp_path / f"{side}.txt").read_bytes()
        meta.update(input=f"{side}.txt", input_sha256=hashlib.sha256(text).hexdigest())  # as embed writes it
        (tmp_path / f"{side}.npy.json").write_text(json.dumps(meta))
    assert hf_tlaser_main(["mine", *mine_args(tmp_path, "--threshold", "0")]) == 0
    args = mine_args(tmp_path, "--threshold", "0", "--overwrite")
    args[args.index("--src") + 1] = str(tmp_path / "tgt.txt")  # 8 lines as well, another text
    one_line(capsys, hf_tlaser_main(["mine", *args]), "--src-embeddings: embedded from src.txt", "not from --src")
    assert hf_tlaser_main(["mine", *mine_args(tmp_path, "--threshold", "0", "--overwrite")]) == 0
    (tmp_path / "src.txt.gz").write_bytes(gzip.compress((tmp_path / "src.txt").read_bytes()))
    args = mine_args(tmp_path, "--threshold", "0", "--overwrite")
    args[args.index("--src") + 1] = str(tmp_path / "src.txt.gz")  # the same text, gzipped: the same input
    assert hf_tlaser_main(["mine", *args]) == 0


def test_a_kill_between_the_final_renames_is_finished_by_resume(tlaser_folder, tmp_path, monkeypatch, capsys):
    """Killed between its two final renames, embed left PATH without PATH.json, which --resume refused ("exists")."""
    import os

    from hf_tlaser.inference import read_embeddings

    source, output = small_input(tmp_path), tmp_path / "out.npy"
    assert hf_tlaser_main(embed_args(tlaser_folder, source, tmp_path / "one.npy")) == 0
    finals = []
    real_replace = os.replace

    def killed_between(src, dst):
        if Path(dst) in (output, Path(f"{output}.json")):
            finals.append(dst)
            if len(finals) == 2:
                raise KeyboardInterrupt("killed")
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", killed_between)
    with pytest.raises(KeyboardInterrupt):
        hf_tlaser_main(embed_args(tlaser_folder, source, output))
    monkeypatch.undo()
    with pytest.raises(Exception, match="unfinished|no sidecar"):
        read_embeddings(output)  # never taken as finished
    assert hf_tlaser_main(embed_args(tlaser_folder, source, output, "--resume")) == 0
    np.testing.assert_array_equal(read_embeddings(output)[0], read_embeddings(tmp_path / "one.npy")[0])
    assert not list(tmp_path.glob("out.npy.*partial*"))


def test_tabs_and_line_separators_keep_the_tsv_rows_and_columns(tmp_path, capsys):
    """A tab or U+2028 in a text gave a TSV row with four columns, or two rows."""
    breaks = ["tab\there", "line\u2028separator", "para\u2029graph", "next\x85line", "cr\rinside", "ff\x0cform"]
    src_texts = [f"{text} {i}" for i, text in enumerate(breaks)]
    (tmp_path / "src.txt").write_text("\n".join(src_texts) + "\n", encoding="utf-8")
    (tmp_path / "tgt.txt").write_text("".join(f"target\t{i}\n" for i in range(6)), encoding="utf-8")
    vectors = np.eye(6, 16)
    write_embeddings(tmp_path / "src.npy", vectors)
    write_embeddings(tmp_path / "tgt.npy", vectors + 0.01)
    assert hf_tlaser_main(["mine", *mine_args(tmp_path, "--threshold", "0")]) == 0
    text = (tmp_path / "mined.tsv").read_text(encoding="utf-8")
    rows = text.splitlines()
    assert len(rows) == 6 and all(len(row.split("\t")) == 3 for row in rows), rows
    assert {row.split("\t")[1] for row in rows} == {
        t.translate(str.maketrans("\t\u2028\u2029\x85\r\x0c", "      ")) for t in src_texts
    }
    assert "12 texts with tabs or line breaks written with spaces" in capsys.readouterr().out


def test_mine_with_a_model_keeps_its_embeddings_beside_the_output(tlaser_folder, tmp_path, monkeypatch):
    """A killed ``mine --model`` left /tmp/hf-tlaser-mine-* behind for good."""
    from hf_tlaser.inference import embed, mine

    (tmp_path / "src.txt").write_text("Stocks fall.\nIt rains.\n", encoding="utf-8")
    (tmp_path / "tgt.txt").write_text("Die Börse fällt.\nEs regnet.\n", encoding="utf-8")
    output = tmp_path / "out" / "pairs.tsv"
    output.parent.mkdir()
    left = output.parent / "pairs.tsv.embeddings.tmp"
    left.mkdir()
    (left / "src.npy.partial").write_bytes(b"what a killed run left")
    outputs = []
    real_run = embed.run

    def spy(args):
        outputs.append(Path(args.output))
        return real_run(args)

    monkeypatch.setattr(embed, "run", spy)
    monkeypatch.setattr(mine, "plot_histogram", lambda mined, path, *args: path.write_bytes(b"png"))  # test below
    args = ["mine", "--src", str(tmp_path / "src.txt"), "--tgt", str(tmp_path / "tgt.txt"), "--threads", "1"]
    assert hf_tlaser_main([*args, "--model", str(tlaser_folder), "--output", str(output), "--precision", "fp32"]) == 0
    assert [path.parent for path in outputs] == [left, left]
    assert sorted(p.name for p in output.parent.iterdir()) == [
        "pairs.lines.tsv",
        "pairs.png",
        "pairs.summary.json",
        "pairs.tsv",
    ]


def test_each_text_file_is_read_once_by_mine_and_twice_by_embed(tlaser_folder, tmp_path, monkeypatch):
    """``mine --model`` read each text file six times (checked, counted, hashed, embedded, read, hashed again) and
    re-parsed an argv list for ``embed``; now it reads each file once and hands its lines to ``embed``. ``embed``
    reads its input twice: one pass counts, checks and hashes it, one embeds it."""
    from hf_tlaser.data import readers
    from hf_tlaser.inference import embed, lines

    (tmp_path / "src.txt").write_text("Stocks fall.\nIt rains.\nStocks fall.\n", encoding="utf-8")
    (tmp_path / "tgt.txt").write_text("Die Börse fällt.\nEs regnet.\n", encoding="utf-8")
    opened = []

    def counting(module):
        real = module.open_binary

        def spy(path):
            opened.append(Path(path).name)
            return real(path)

        monkeypatch.setattr(module, "open_binary", spy)

    counting(readers)
    counting(lines)
    monkeypatch.setattr(embed, "build_parser", lambda: pytest.fail("mine --model re-parsed an embed command line"))
    args = ["mine", "--src", str(tmp_path / "src.txt"), "--tgt", str(tmp_path / "tgt.txt"), "--threads", "1"]
    output = tmp_path / "pairs.tsv"
    assert hf_tlaser_main([*args, "--model", str(tlaser_folder), "--output", str(output), "--precision", "fp32"]) == 0
    assert sorted(opened) == ["src.txt", "tgt.txt"]
    assert len(output.read_text(encoding="utf-8").splitlines()) <= 2
    opened.clear()
    monkeypatch.undo()
    counting(readers)
    counting(lines)
    assert hf_tlaser_main(embed_args(tlaser_folder, tmp_path / "src.txt", tmp_path / "src.npy")) == 0
    assert opened == ["src.txt", "src.txt"]
    meta = json.loads((tmp_path / "src.npy.json").read_text())
    assert meta["input_sha256"] == hashlib.sha256((tmp_path / "src.txt").read_bytes()).hexdigest()
    assert meta["count"] == 3


def test_resume_refuses_an_input_edited_to_the_same_length(tlaser_folder, tmp_path, monkeypatch, capsys):
    """``--resume`` after an edit that kept the byte length kept the old vectors of the lines done before it."""
    from hf_tlaser.inference import EmbeddingsWriter

    source, output = small_input(tmp_path, 40), tmp_path / "out.npy"
    write_chunk = EmbeddingsWriter.write_chunk
    written = []

    def killed_after_one(self, chunk, *args, **kwargs):
        if written:
            raise KeyboardInterrupt("killed")
        written.append(chunk)
        write_chunk(self, chunk, *args, **kwargs)

    monkeypatch.setattr(EmbeddingsWriter, "write_chunk", killed_after_one)
    with pytest.raises(KeyboardInterrupt):
        hf_tlaser_main(embed_args(tlaser_folder, source, output, "--chunk-size", "16"))
    monkeypatch.undo()
    capsys.readouterr()
    text = source.read_text(encoding="utf-8")
    source.write_text(text.replace("line 3.", "line 9."), encoding="utf-8")  # same bytes, same lines
    code = hf_tlaser_main(embed_args(tlaser_folder, source, output, "--chunk-size", "16", "--resume"))
    one_line(capsys, code, "--resume", "input_sha256=")


def test_the_histogram_of_equal_scores_is_drawn(tmp_path):
    """Scores equal but for float32 rounding (a few pairs of a random model) stopped ``mine`` after the search with
    numpy's "Too many bins for data range" traceback."""
    from hf_tlaser.bitext.mining import Mined
    from hf_tlaser.inference.mine import plot_histogram

    scores = np.array([1.0, np.nextafter(np.float32(1.0), np.float32(2.0))], dtype=np.float32)
    mined = Mined(scores, np.arange(2), np.arange(2), 2)
    plot_histogram(mined, tmp_path / "h.png", "ratio", 4, 1.0)
    assert (tmp_path / "h.png").read_bytes()[:4] == b"\x89PNG"

"""The reliability sweep (issue "nothing stale, nothing silent, nothing run unasked"): each case as a careless or
hostile user meets it, on tiny models. Each command test here failed on the code before its fix (checked):

- ``export`` ran Python files named by a folder's ``auto_map`` without being asked (it loaded with
  ``trust_remote_code=True``): the marker file below was written and the export exited 0;
- a model with a NaN weight gave NaN vectors that ``embed`` wrote with exit 0, and ``mine`` read such rows and
  reported "0 pairs (of 0)" with exit 0.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from safetensors.torch import load_file, save_file

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
    from hf_tlaser import backends
    from hf_tlaser.errors import UsageError
    from hf_tlaser.inference.export import export_model

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
    (folder / backends.MEASURED_FILE).write_text(
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

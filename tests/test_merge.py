"""``hf-tlaser merge`` (WiSE-FT, issue 53): alpha = 0 gives the start's vectors and alpha = 1 the tuned model's,
exactly; in between, the encoder weights are the interpolation and the decoder stays tuned; bad input is one line."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from hf_tlaser.encoding import encode, load_model
from hf_tlaser.training.merge import RECORD
from hf_tlaser.training.merge import main as merge_main

TEXTS = ["Guten Morgen.", "Das Haus ist rot.", "The house is red.", "El perro duerme."]


@pytest.fixture(scope="module")
def tuned(warm_dir, tmp_path_factory):
    """``warm_dir`` after a pretend fine-tuning: every weight moved by noise, saved as its own folder."""
    folder = tmp_path_factory.mktemp("tuned") / "tuned"
    shutil.copytree(warm_dir, folder)
    generator = torch.Generator().manual_seed(0)
    for path in folder.glob("*.safetensors"):
        state = load_file(path)
        moved = {
            k: v + 0.05 * torch.randn(v.shape, generator=generator) if v.is_floating_point() else v
            for k, v in state.items()
        }
        save_file(moved, path, metadata={"format": "pt"})
    return folder


def vectors(folder) -> np.ndarray:
    model, tokenizer = load_model(folder, backend="torch")
    return encode(model, tokenizer, TEXTS, precision="fp32")


def merged(tuned, warm_dir, tmp_path, alpha: float):
    out = tmp_path / f"merged-{alpha}"
    code = merge_main([str(tuned), "--start", str(warm_dir.parent / "st"), "--alpha", str(alpha), "--output", str(out)])
    assert code == 0
    return out


def test_alpha_ends_give_the_two_folders_vectors_exactly(tuned, warm_dir, tmp_path):
    start, end = vectors(warm_dir), vectors(tuned)
    assert not np.allclose(start, end, atol=1e-3)
    np.testing.assert_array_equal(vectors(merged(tuned, warm_dir, tmp_path, 0.0)), start)
    np.testing.assert_array_equal(vectors(merged(tuned, warm_dir, tmp_path, 1.0)), end)


def test_halfway_interpolates_the_encoder_and_keeps_the_decoder(tuned, warm_dir, tmp_path):
    out = merged(tuned, warm_dir, tmp_path, 0.25)
    state, before, after = (load_file(folder / "model.safetensors") for folder in (out, warm_dir, tuned))
    encoder = [name for name in state if name.startswith("encoder.backbone.") and state[name].is_floating_point()]
    assert encoder and len(encoder) == json.loads((out / RECORD).read_text())["interpolated_weights"]
    for name in encoder:
        torch.testing.assert_close(state[name], 0.75 * before[name] + 0.25 * after[name])
    for name in (n for n in state if n.startswith("decoder.")):
        torch.testing.assert_close(state[name], after[name], rtol=0, atol=0)
    assert (out / "tokenizer.json").is_file() and (out / "config.json").is_file()
    middle = vectors(out)
    assert not np.allclose(middle, vectors(warm_dir), atol=1e-4) and not np.allclose(middle, vectors(tuned), atol=1e-4)


def test_bad_input_is_one_line(tuned, warm_dir, st_folder, tmp_path, capsys):
    start = str(warm_dir.parent / "st")
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "mine.txt").write_text("a user's file")
    cases = [
        ([str(tuned), "--start", start, "--alpha", "1.5", "--output", str(tmp_path / "a")], "--alpha 1.5"),
        ([str(tuned), "--start", start, "--alpha", "nan", "--output", str(tmp_path / "a")], "--alpha nan"),
        ([str(tuned), "--start", start, "--alpha", "0.5", "--output", str(taken)], "not empty"),
        ([str(tuned), "--start", str(st_folder), "--alpha", "0.5", "--output", str(tmp_path / "b")], "--start"),
        ([str(st_folder), "--alpha", "0.5", "--output", str(tmp_path / "c")], "not an hf_tlaser model"),
    ]
    for argv, message in cases:
        assert merge_main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and message in err, err
    assert (taken / "mine.txt").read_text() == "a user's file" and not (tmp_path / "b").exists()

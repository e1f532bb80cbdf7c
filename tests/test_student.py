"""A layer-reduced student (``--init-from SPEC --init-layers N``): the kept layers, renumbered, carry the pretrained
weights of the layers they name; a run with ``--teacher`` the full model trains, saves a folder of the reduced depth
that loads in a fresh process without hf_tlaser, and bad values are one line before any data is read. Frozen word
embeddings (``--freeze-word-embeddings``) stay the start's while the rest trains."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import AutoModel, AutoTokenizer

from hf_tlaser.errors import UsageError
from hf_tlaser.models.tlaser import TLaserConfig, TLaserModel
from hf_tlaser.training.cli import main
from hf_tlaser.training.student import keep_layers, student_layers
from hf_tlaser.training.warm import check_backbone
from tests.fresh_process import auto_model_vectors
from tests.test_warm_start import TEXTS, train_args


def test_layer_choices():
    assert student_layers("6", 12) == (0, 2, 4, 6, 8, 10)  # DistilBERT's every other layer
    assert student_layers("3", 12) == (0, 4, 8) and student_layers("12", 12) == tuple(range(12))
    assert student_layers("0,5,11", 12) == (0, 5, 11) and student_layers("7,", 12) == (7,)
    for bad in ("0", "13", "x", "3,1", "2,2", "0,12", "-1,3"):
        with pytest.raises(UsageError, match="--init-layers"):
            student_layers(bad, 12)


def test_kept_layers_are_renumbered_and_the_others_dropped():
    state = {f"encoder.layer.{i}.dense.weight": torch.full((1,), float(i)) for i in range(4)}
    state["embeddings.word_embeddings.weight"] = torch.zeros(2)
    kept = keep_layers(state, (1, 3))
    assert sorted(kept) == [
        "embeddings.word_embeddings.weight",
        "encoder.layer.0.dense.weight",
        "encoder.layer.1.dense.weight",
    ]
    assert kept["encoder.layer.0.dense.weight"].item() == 1 and kept["encoder.layer.1.dense.weight"].item() == 3
    with pytest.raises(RuntimeError, match="no weight of the pretrained model names a layer"):
        keep_layers({"a.weight": torch.zeros(1)}, (0,))


def test_the_student_starts_from_the_layers_it_names(backbone_dir):
    full = AutoModel.from_pretrained(backbone_dir).state_dict()
    backbone = check_backbone(str(backbone_dir), "ctlaser", None, layers="1,")
    assert backbone.config.num_hidden_layers == 1 and backbone.layers == (1,)
    assert "1 layers of its 2: 1" in backbone.describe()
    student = TLaserModel(
        TLaserConfig(
            vocab_size=len(backbone.tokenizer), backbone=backbone.config.to_dict(), hidden_size=32,
            num_attention_heads=2, intermediate_size=64, max_position_embeddings=64,
        )
    )  # fmt: skip
    backbone.load_into(student)
    weights = student.backbone.state_dict()
    assert torch.equal(
        weights["encoder.layer.0.attention.self.query.weight"], full["encoder.layer.1.attention.self.query.weight"]
    )
    assert torch.equal(weights["embeddings.word_embeddings.weight"], full["embeddings.word_embeddings.weight"])


@pytest.fixture(scope="module")
def student_run(st_dir, tmp_path_factory) -> tuple[Path, Path]:
    """The full warm-started member (2 layers, 2 updates), then a 1-layer student started from its first layer and
    distilled from it (2 updates)."""
    root = tmp_path_factory.mktemp("student")
    full = root / "full"
    assert main(train_args(full, st_dir, "--max-steps", "2")) == 0
    student = ["--max-steps", "2", "--init-layers", "1", "--teacher", str(full), "--teacher-cache", "none"]
    assert main(train_args(root / "student", full, *student)) == 0
    return full, root / "student"


def test_a_student_of_a_trained_member_starts_from_its_layers(student_run):
    full, _ = student_run
    backbone = check_backbone(str(full), "ctlaser", None, layers="1,")
    saved = json.loads((full / "config.json").read_text())
    assert backbone.member and backbone.layers == (1,) and backbone.depth == 2
    assert (backbone.pooling, backbone.prompt) == (saved["pooling"], saved["prompt"]) == ("mean", "query: ")
    assert backbone.tokenizer("x")["input_ids"] == AutoTokenizer.from_pretrained(full)("x")["input_ids"]  # one prompt
    student = TLaserModel(TLaserConfig(**{**saved, "backbone": backbone.config.to_dict()}))
    backbone.load_into(student)
    trained = TLaserModel.from_pretrained(full).backbone.state_dict()
    weights = student.backbone.state_dict()
    for name in ("encoder.layer.0.output.dense.weight", "embeddings.word_embeddings.weight"):
        source = name.replace("layer.0.", "layer.1.")
        assert torch.equal(weights[name], trained[source].to(weights[name].dtype)), name


def test_the_student_trains_with_the_teacher_and_loads_in_a_fresh_process(student_run, tmp_path):
    full, student = student_run
    config = json.loads((student / "config.json").read_text())
    assert config["backbone"]["num_hidden_layers"] == 1
    assert json.loads((full / "config.json").read_text())["backbone"]["num_hidden_layers"] == 2
    recorded = json.loads((student / "hf_tlaser_train.json").read_text())
    assert recorded["args"]["init_layers"] == "1" and recorded["args"]["teacher"] == str(full)
    assert recorded["args"]["init_from"] == str(full) and config["prompt"] == "query: "
    losses = [json.loads(line) for line in (student / "train_log.jsonl").read_text().splitlines()]
    assert all(entry["loss_distill"] > 0 for entry in losses if "loss" in entry), losses
    expected = TLaserModel.from_pretrained(student).eval()
    tokenizer = AutoTokenizer.from_pretrained(student)
    with torch.no_grad():
        local = expected(**tokenizer(TEXTS, padding=True, return_tensors="pt")).pooler_output.numpy()
    vectors = auto_model_vectors(
        student, TEXTS, tmp_path, check="assert type(model).__module__.startswith('transformers_modules')"
    )
    np.testing.assert_allclose(vectors, local, atol=1e-5)


def test_init_layers_needs_init_from_and_a_valid_choice(st_dir, tmp_path, capsys):
    args = ["--model", "ctlaser", "--output-dir", str(tmp_path / "a"), "--init-layers", "6"]
    assert main(args) == 2
    assert "--init-layers: only with --init-from" in capsys.readouterr().err
    assert main(train_args(tmp_path / "b", st_dir, "--init-layers", "3")) == 2
    err = capsys.readouterr().err.strip()
    assert "--init-layers '3'" in err and len(err.splitlines()) == 1 and not (tmp_path / "b").exists()


def test_frozen_word_embeddings_keep_the_starts_and_the_rest_trains(st_dir, tmp_path, capsys):
    out = tmp_path / "frozen"
    assert main(train_args(out, st_dir, "--max-steps", "2", "--freeze-word-embeddings")) == 0
    start = AutoModel.from_pretrained(st_dir).state_dict()
    trained = TLaserModel.from_pretrained(out).backbone.state_dict()
    name = "embeddings.word_embeddings.weight"
    assert torch.equal(trained[name], start[name].to(trained[name].dtype))
    layer = "encoder.layer.0.output.dense.weight"
    assert not torch.equal(trained[layer], start[layer].to(trained[layer].dtype))
    assert main(["--model", "ctlaser", "--output-dir", str(tmp_path / "a"), "--freeze-word-embeddings"]) == 2
    assert "--freeze-word-embeddings: only with --init-from" in capsys.readouterr().err


def test_frozen_bottom_layers_keep_the_starts_and_the_top_trains(st_dir, tmp_path, capsys, caplog):
    """``--freeze-layers 1``: the embeddings and layer 0 stay the start's, the layers above and the decoder train;
    a value that leaves no layer to train, or no --init-from, is one line and exit 2."""
    start = AutoModel.from_pretrained(st_dir).state_dict()
    depth = AutoModel.from_pretrained(st_dir).config.num_hidden_layers
    out = tmp_path / "frozen"
    with caplog.at_level(logging.INFO, logger="hf_tlaser.train"):
        assert main(train_args(out, st_dir, "--max-steps", "2", "--freeze-layers", "1")) == 0
    trained = TLaserModel.from_pretrained(out).backbone.state_dict()

    def same(name: str) -> bool:
        return torch.equal(trained[name], start[name].to(trained[name].dtype))

    assert same("embeddings.word_embeddings.weight") and same("embeddings.LayerNorm.weight")
    assert same("encoder.layer.0.output.dense.weight") and same("encoder.layer.0.attention.self.query.weight")
    assert not same(f"encoder.layer.{depth - 1}.output.dense.weight")
    assert "--freeze-layers 1:" in caplog.text
    capsys.readouterr()
    assert main(train_args(tmp_path / "b", st_dir, "--freeze-layers", str(depth))) == 2
    err = capsys.readouterr().err.strip()
    assert f"--freeze-layers {depth}" in err and len(err.splitlines()) == 1 and not (tmp_path / "b").exists()
    assert main(["--model", "ctlaser", "--output-dir", str(tmp_path / "a"), "--freeze-layers", "1"]) == 2
    assert "--freeze-layers: only with --init-from" in capsys.readouterr().err

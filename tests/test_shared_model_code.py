"""The model code the families share has one home, hf_tlaser/models/common/sentence_embedding.py: each family's
``sentence_embedding`` is that module, a saved folder carries its real source, and the repository holds no symbolic
link (a Windows checkout turns one into a one-line text file). Loading saved folders without hf_tlaser is tested per
family next to its model (test_tlaser_model, test_laser_model, test_yu2018_model, test_ldt_model, test_cnv_model,
test_generation)."""

from __future__ import annotations

import importlib
import json
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

import hf_tlaser
from hf_tlaser import (
    LaserConfig,
    LaserForTranslation,
    LaserModel,
    LDTConfig,
    LDTForAlignment,
    LDTModel,
    TLaserConfig,
    TLaserForTranslation,
    TLaserModel,
    Yu2018Config,
    Yu2018ForTranslation,
    Yu2018Model,
)
from hf_tlaser.models.common import sentence_embedding as shared

PACKAGE = Path(hf_tlaser.__file__).resolve().parent
REPO = PACKAGE.parent
FAMILIES = ("tlaser", "laser", "yu2018", "ldt", "cnv")
TINY = {
    "tlaser": (
        TLaserConfig,
        dict(hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32, decoder_ffn_dim=32),
    ),
    "laser": (LaserConfig, dict(embed_dim=8, lstm_hidden_size=4, decoder_hidden_size=8)),
    "yu2018": (Yu2018Config, dict(embed_dim=8, encoder_hidden_size=4, hidden_size=8, decoder_hidden_size=8)),
    "ldt": (LDTConfig, dict(hidden_size=16, num_attention_heads=2, intermediate_size=32)),
}
CLASSES = [
    (TLaserForTranslation, "tlaser"),
    (TLaserModel, "tlaser"),
    (LaserForTranslation, "laser"),
    (LaserModel, "laser"),
    (Yu2018ForTranslation, "yu2018"),
    (Yu2018Model, "yu2018"),
    (LDTForAlignment, "ldt"),
    (LDTModel, "ldt"),
]


def tiny(model_class: type, family: str) -> torch.nn.Module:
    config_class, sizes = TINY[family]
    torch.manual_seed(0)
    return model_class(config_class(vocab_size=40, max_position_embeddings=32, **sizes))


def test_no_symbolic_links():
    """Neither git's index (mode 120000) nor the files on disk hold a symbolic link."""
    if shutil.which("git"):
        listing = subprocess.run(["git", "ls-files", "-s"], cwd=REPO, capture_output=True, text=True)
        if listing.returncode == 0:  # a git checkout
            links = [line.split("\t", 1)[-1] for line in listing.stdout.splitlines() if line.startswith("120000 ")]
            assert links == []
    on_disk = [p for folder in (PACKAGE, REPO / "tests") for p in folder.rglob("*") if p.is_symlink()]
    assert on_disk == []


@pytest.mark.parametrize("family", FAMILIES)
def test_each_family_imports_the_one_shared_module(family):
    """``from .sentence_embedding import ...`` in every model file gives the shared module itself, not a copy."""
    assert importlib.import_module(f"hf_tlaser.models.{family}.sentence_embedding") is shared
    modeling = importlib.import_module(f"hf_tlaser.models.{family}.modeling_{family}")
    assert modeling.SharedCodeMixin is shared.SharedCodeMixin
    assert Path(shared.__file__).parent.name == "common"


@pytest.mark.parametrize(("model_class", "family"), CLASSES, ids=lambda v: getattr(v, "__name__", v))
def test_saved_folder_carries_the_shared_source(model_class, family, tmp_path):
    """save_pretrained writes the shared module's source, byte for byte, in place of the family's alias file."""
    tiny(model_class, family).save_pretrained(tmp_path)
    assert (tmp_path / "sentence_embedding.py").read_bytes() == Path(shared.__file__).read_bytes()
    assert (tmp_path / f"modeling_{family}.py").is_file()


def test_save_without_model_code_writes_no_shared_file(tmp_path):
    assert shared.save_shared_code(tmp_path) is None
    assert not (tmp_path / "sentence_embedding.py").exists()


def test_save_pretrained_with_push_uploads_the_complete_folder(tmp_path, monkeypatch):
    """``push_to_hub=True`` goes through ``push_to_hub`` (which saves the whole folder, then uploads it): transformers'
    own upload inside ``save_pretrained`` would send the alias file instead of the shared source."""
    model = tiny(LaserModel, "laser")
    pushed = {}

    def push_to_hub(repo_id, **kwargs):  # what PushToHubMixin.push_to_hub does, without the upload
        model.save_pretrained(tmp_path / "upload")
        pushed.update(repo_id=repo_id, **kwargs)

    monkeypatch.setattr(model, "push_to_hub", push_to_hub)
    model.save_pretrained(tmp_path / "local", push_to_hub=True, repo_id="someone/tiny", commit_message="tiny")
    assert pushed == {"repo_id": "someone/tiny", "token": None, "commit_message": "tiny"}
    for folder in (tmp_path / "local", tmp_path / "upload"):
        assert (folder / "sentence_embedding.py").read_bytes() == Path(shared.__file__).read_bytes()
        assert json.loads((folder / "modules.json").read_text())[1]["path"] == "1_Pooling"

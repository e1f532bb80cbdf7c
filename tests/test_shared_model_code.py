"""The model code the families share has one home, hf_tlaser/models/common/, one module per concern: each family's
model file imports it as ordinary package modules (``from ..common.losses import ...``), a saved folder carries the
modules it needs byte for byte next to the model file (its imports made flat), and the repository holds no symbolic
link (a Windows checkout turns one into a one-line text file). Loading saved folders without hf_tlaser is tested per
family next to its model (test_tlaser_model, test_laser_model, test_yu2018_model, test_ldt_model, test_cnv_model,
test_generation)."""

from __future__ import annotations

import json
import re
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
from hf_tlaser.models.common import remote_code
from hf_tlaser.models.laser.modeling_laser import LaserPreTrainedModel

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


COMMON = PACKAGE / "models" / "common"


@pytest.mark.parametrize("family", FAMILIES)
def test_no_family_folder_holds_shared_code(family):
    """A family folder holds its configuration, its model file and its ``__init__``; nothing else, no alias module
    (its registry entry is in ``models/registry.py``)."""
    names = {p.name for p in (PACKAGE / "models" / family).glob("*.py")}
    assert names == {"__init__.py", f"configuration_{family}.py", f"modeling_{family}.py"}


@pytest.mark.parametrize(("model_class", "family"), CLASSES, ids=lambda v: getattr(v, "__name__", v))
def test_saved_folder_carries_the_shared_modules(model_class, family, tmp_path):
    """save_pretrained writes every shared module the model file imports, recursively, byte for byte, and the model
    file with its imports made flat; every relative import of the folder names a file in it."""
    tiny(model_class, family).save_pretrained(tmp_path)
    source = (PACKAGE / "models" / family / f"modeling_{family}.py").read_text(encoding="utf-8")
    shared = set(re.findall(r"^from \.\.common\.(\w+) import", source, flags=re.MULTILINE))
    assert {"remote_code", "translation" if family != "ldt" else "backbone"} <= shared
    saved = (tmp_path / f"modeling_{family}.py").read_text(encoding="utf-8")
    assert saved == source.replace("from ..common.", "from .")
    for path in tmp_path.glob("*.py"):
        if (COMMON / path.name).is_file():
            assert path.read_bytes() == (COMMON / path.name).read_bytes(), path.name
        imported = re.findall(r"^\s*from\s+\.(\w+)\s+import", path.read_text(encoding="utf-8"), flags=re.MULTILINE)
        assert all((tmp_path / f"{name}.py").is_file() for name in imported), path.name
    assert shared <= {path.stem for path in tmp_path.glob("*.py")}


def test_model_code_follows_imports_up_and_flat(tmp_path):
    """``model_code`` resolves ``..package.module`` and ``.module`` imports and writes both flat."""
    (tmp_path / "common").mkdir()
    (tmp_path / "family").mkdir()
    (tmp_path / "common" / "base.py").write_text("X = 1\n")
    (tmp_path / "common" / "helper.py").write_text("from .base import X\n")
    (tmp_path / "family" / "config.py").write_text("Y = 2\n")
    (tmp_path / "family" / "model.py").write_text("from ..common.helper import X\nfrom .config import Y\n")
    code = remote_code.model_code(tmp_path / "family" / "model.py")
    assert code == {
        "model.py": "from .helper import X\nfrom .config import Y\n",
        "helper.py": "from .base import X\n",
        "base.py": "X = 1\n",
        "config.py": "Y = 2\n",
    }


def test_save_restores_the_auto_class(tmp_path):
    """transformers' code copy is off only during the save: the class stays registered for its auto class."""
    tiny(LaserModel, "laser").save_pretrained(tmp_path)
    assert LaserModel._auto_class == "AutoModel" and "_auto_class" in vars(LaserModel)
    assert "_auto_class" not in vars(LaserPreTrainedModel)


def test_save_pretrained_with_push_uploads_the_complete_folder(tmp_path, monkeypatch):
    """``push_to_hub=True`` goes through ``push_to_hub`` (which saves the whole folder, then uploads it): transformers'
    own upload inside ``save_pretrained`` would run before the shared modules and the sentence-transformers files are
    written."""
    model = tiny(LaserModel, "laser")
    pushed = {}

    def push_to_hub(repo_id, **kwargs):  # what PushToHubMixin.push_to_hub does, without the upload
        model.save_pretrained(tmp_path / "upload")
        pushed.update(repo_id=repo_id, **kwargs)

    monkeypatch.setattr(model, "push_to_hub", push_to_hub)
    model.save_pretrained(tmp_path / "local", push_to_hub=True, repo_id="someone/tiny", commit_message="tiny")
    assert pushed == {"repo_id": "someone/tiny", "token": None, "commit_message": "tiny"}
    for folder in (tmp_path / "local", tmp_path / "upload"):
        assert (folder / "rnn.py").read_bytes() == (COMMON / "rnn.py").read_bytes()
        assert json.loads((folder / "modules.json").read_text())[1]["path"] == "1_Pooling"

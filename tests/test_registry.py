"""The family registry: each family declared once (``hf_tlaser/models/registry.py``: its classes and
capabilities) with one entry in each table by ``model_type`` (its presets, its training, its model card's section),
and what the rest of the package derives from it agrees with the model classes themselves (the probes that training
used to run)."""

from __future__ import annotations

import inspect

import pytest
import torch
from transformers import MarianConfig

from hf_tlaser.backend.runtime import EXPORTED
from hf_tlaser.hub.model_card import CARD_SECTIONS
from hf_tlaser.model_folders import MODEL_TYPES
from hf_tlaser.models.common.pooling import SAVED_WITHOUT_POOLING, pooling_mode
from hf_tlaser.models.registry import FAMILIES
from hf_tlaser.training import cnv
from hf_tlaser.training.cli import TRAININGS, training
from hf_tlaser.training.presets import (
    BACKBONE_MEMBERS,
    DECODER_VOCAB_MEMBERS,
    JOINT_BPE,
    MEMBERS,
    MODELS,
    MULTIWAY_FAMILIES,
    PRESETS,
    SIZES,
    TEACHER_HEAD_MEMBERS,
    get_preset,
)


def test_every_family_has_one_entry_everywhere():
    assert MODEL_TYPES == tuple(FAMILIES) == ("tlaser", "laser", "cnv", "yu2018", "ldt")
    assert tuple(CARD_SECTIONS) == tuple(PRESETS) == tuple(TRAININGS) == tuple(FAMILIES)
    # every family has members, listed family after family in the registry's order
    assert tuple(dict.fromkeys(member.family.model_type for member in MEMBERS.values())) == tuple(FAMILIES)
    # a family's pooling is its config's (saved with it, read by the folder's own code), exportability its Family's
    pooling = {t: f.config_class().to_dict().get("pooling") for t, f in FAMILIES.items()}
    assert pooling == {"tlaser": "cls", "laser": "max", "cnv": None, "yu2018": "mean", "ldt": "mean"}
    assert {t: pooling_mode(f.config_class().to_dict()) for t, f in FAMILIES.items() if pooling[t]} == {
        t: mode for t, mode in pooling.items() if mode
    }
    assert all(pooling[t] == mode for t, mode in SAVED_WITHOUT_POOLING.items())  # older folders pool as new ones
    assert EXPORTED == ("tlaser", "ldt")


def test_member_lists_follow_the_registry():
    assert MODELS == ("tlaser", "ctlaser", "laser1", "laser6", "claser6", "cnv", "yu2018", "ldt")
    assert JOINT_BPE == tuple(model for model in MODELS if model != "cnv")
    assert BACKBONE_MEMBERS == TEACHER_HEAD_MEMBERS == ("tlaser", "ctlaser", "ldt")
    assert DECODER_VOCAB_MEMBERS == ("tlaser", "ctlaser")
    assert MULTIWAY_FAMILIES == ("tlaser", "ctlaser", "laser1", "laser6", "claser6")


@pytest.mark.parametrize("model", MODELS)
def test_every_member_has_every_size(model):
    """Each family's presets cover every size with config kwargs its config takes and ``Recipe`` fields (cNV: and
    its NMT pair's), and its training checks a plan and trains from it."""
    presets = MEMBERS[model].presets
    assert tuple(presets.sizes) == tuple(presets.recipes) == SIZES
    module = training(model)
    assert callable(module.check) and callable(module.train)
    assert (presets.nmt is not None) == (module is cnv)
    assert presets.nmt is None or tuple(presets.nmt) == SIZES
    for size in SIZES:
        preset = get_preset(model, size)  # builds the Recipe (and NMTPreset): a misspelled field fails here
        preset.make_config(1000)  # the config checks the values
        assert set(preset.config_kwargs) <= set(inspect.signature(preset.config_class.__init__).parameters)
        if preset.nmt is not None:
            assert set(preset.nmt.config_kwargs) <= set(inspect.signature(MarianConfig.__init__).parameters)


@pytest.mark.parametrize("model_type", list(FAMILIES))
def test_every_family_describes_itself_in_its_card(model_type):
    """The card section's rows and summary, from the config of the family's tiny preset."""
    section = CARD_SECTIONS[model_type]
    assert section.tags and section.citation and "sentence-transformers" not in section.tags
    member = next(member for member in MEMBERS.values() if member.family.model_type == model_type)
    config = get_preset(member.name).make_config(1000, languages=["de", "en"]).to_dict()
    dim = member.family.vector_size(config)
    rows = section.rows(config, dim)
    assert [len(row) for row in rows] == [2] * len(rows) and all(isinstance(value, str) for _, value in rows)
    assert {"Sentence vector", "Training objective"} <= {name for name, _ in rows}
    assert f"{dim}-dim vector" in section.summary(config, "X", dim, "German, English")


@pytest.mark.parametrize("model", [model for model in MODELS if model != "cnv"])
def test_declared_capabilities_match_the_classes(model):
    """What each family declares is what its classes do (a meta-device model: no weights allocated)."""
    preset = get_preset(model)
    family = MEMBERS[model].family
    config_keys = inspect.signature(preset.config_class.__init__).parameters
    with torch.device("meta"):
        probe = preset.model_class(preset.make_config(1000, languages=["en", "de"]))
    assert family.language_table == any(name.endswith("embed_langs") for name, _ in probe.named_modules())
    assert family.translates_back == bool(getattr(probe, "needs_source_language", False))
    assert family.multiway == getattr(probe, "supports_multiway", True)
    assert family.decoder_vocab == ("decoder_vocab_size" in config_keys)
    assert family.teacher_head == ("teacher_dim" in config_keys)
    assert family.takes_backbone == ("backbone" in config_keys)
    assert preset.model_class is family.trained_class

"""The family registry: each family declared once (``hf_tlaser/models/<folder>/family.py``), and what the rest of the
package derives from it agrees with the model classes themselves (the probes that training used to run)."""

from __future__ import annotations

import inspect

import pytest
import torch

from hf_tlaser.hub.model_card import CARD_SECTIONS
from hf_tlaser.model_folders import MODEL_TYPES
from hf_tlaser.models.common.pooling import POOLING
from hf_tlaser.models.registry import FAMILIES
from hf_tlaser.training.presets import (
    BACKBONE_MEMBERS,
    DECODER_VOCAB_MEMBERS,
    JOINT_BPE,
    MEMBERS,
    MODELS,
    MULTIWAY_FAMILIES,
    TEACHER_HEAD_MEMBERS,
    get_preset,
)


def test_every_family_has_one_entry_everywhere():
    assert MODEL_TYPES == tuple(FAMILIES) == ("tlaser", "laser", "yu2018", "ldt", "cnv")
    assert set(CARD_SECTIONS) == set(FAMILIES)
    assert {member.family.model_type for member in MEMBERS.values()} == set(FAMILIES)
    assert {t: f.pooling for t, f in FAMILIES.items() if f.pooling} == POOLING  # the saved folders' own table


def test_member_lists_follow_the_registry():
    assert MODELS == ("tlaser", "ctlaser", "laser1", "laser6", "claser6", "cnv", "yu2018", "ldt")
    assert JOINT_BPE == tuple(model for model in MODELS if model != "cnv")
    assert BACKBONE_MEMBERS == TEACHER_HEAD_MEMBERS == ("tlaser", "ctlaser", "ldt")
    assert DECODER_VOCAB_MEMBERS == ("tlaser", "ctlaser")
    assert MULTIWAY_FAMILIES == ("tlaser", "ctlaser", "laser1", "laser6", "claser6")


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

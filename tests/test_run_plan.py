"""One frozen plan per run (issue 49): ``resolve`` decides every default and makes every check before any corpus text
is read, and hands the family's training one ``RunPlan``; the training is the module its ``Family`` names
(``Presets.training``), which builds from the plan and fits."""

from __future__ import annotations

import warnings
from dataclasses import FrozenInstanceError, replace
from types import SimpleNamespace

import pytest

import hf_tlaser.data.corpora as corpora_module
from hf_tlaser.models.family import JOINT_TRAINING
from hf_tlaser.training import RunSpec
from hf_tlaser.training import families as deprecated
from hf_tlaser.training import resolve as resolve_module
from hf_tlaser.training.cnv import CNVPlan
from hf_tlaser.training.resolve import RunPlan, resolve, train


def no_text(*args, **kwargs):
    raise AssertionError("corpus text was read while the run was being planned")


@pytest.fixture
def unread(monkeypatch):
    """Planning must not read corpus text: the readers fail when called."""
    monkeypatch.setattr(corpora_module, "load_corpus", no_text)
    monkeypatch.setattr(corpora_module, "corpus_sentences", no_text)


def test_resolve_plans_a_joint_run_before_any_text_is_read(data_dir, tmp_path, unread):
    spec = RunSpec(
        output_dir=str(tmp_path / "run"), model="ctlaser", corpora="multi30k", data_dir=data_dir,
        set=["distance_beta=0.5"], pairs="de-en,fr-en",
    )  # fmt: skip
    plan = resolve(spec)
    assert isinstance(plan, RunPlan) and plan.training == JOINT_TRAINING
    assert (plan.checkpoint, plan.tokenizer, plan.plugins, plan.extra) == (None, None, (), None)
    assert plan.data.pairs == [("de", "en"), ("fr", "en")] and plan.data.languages == ["de", "en", "fr"]
    assert plan.config["distance_beta"] == 0.5
    assert plan.config["languages"] == ["en"] and plan.config["training_languages"] == ["de", "en", "fr"]
    assert not (tmp_path / "run").exists()  # planning writes nothing
    with pytest.raises(FrozenInstanceError):
        plan.checkpoint = tmp_path  # type: ignore[misc]
    with pytest.raises(TypeError):
        plan.config["distance_beta"] = 1.0  # type: ignore[index]


def test_resolve_plans_cnv_with_its_stage_one(data_dir, tmp_path, unread):
    spec = RunSpec(
        output_dir=str(tmp_path / "run"), model="cnv", corpora="multi30k", data_dir=data_dir, pairs="de-en",
        set=["distance_beta=0"], nmt_steps=3,
    )  # fmt: skip
    plan = resolve(spec)
    assert plan.training == "hf_tlaser.training.cnv" and plan.checkpoint is None
    assert isinstance(plan.extra, CNVPlan) and plan.extra.pair == ("de", "en") and plan.extra.nmt.steps == 3
    assert plan.extra.saved is None and plan.data.pairs == [("de", "en")]
    assert plan.config["distance_beta"] == 0


def test_train_runs_the_training_its_family_names(monkeypatch, tmp_path):
    calls = []

    def check(plan: RunPlan) -> RunPlan:
        calls.append(("check", plan.spec.model))
        return replace(plan, extra="checked")

    def fit(plan: RunPlan) -> str:
        calls.append(("train", plan.extra))
        return "trainer"

    def import_module(name: str) -> SimpleNamespace:
        calls.append(("import", name))
        return SimpleNamespace(check=check, train=fit)

    monkeypatch.setattr(resolve_module, "import_module", import_module)
    for model, module in (("cnv", "hf_tlaser.training.cnv"), ("ldt", JOINT_TRAINING)):
        calls.clear()
        assert train(RunSpec(output_dir=str(tmp_path), model=model)) == "trainer"
        assert calls == [("import", module), ("check", model), ("import", module), ("train", "checked")]


def test_the_old_entry_point_warns_and_runs_the_same(monkeypatch, tmp_path):
    spec = RunSpec(output_dir=str(tmp_path))
    monkeypatch.setattr(resolve_module, "train", lambda given: ("trained", given))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert deprecated.train(spec) == ("trained", spec)
    assert [w.category for w in caught] == [FutureWarning]
    assert "hf_tlaser.training.resolve.train" in str(caught[0].message)

"""One frozen plan per run (issue 49): ``resolve`` decides every default and makes every check before any corpus text
is read, and hands the family's training one ``RunPlan``; the training is its family's module
(``cli.TRAININGS``), which builds from the plan and fits."""

from __future__ import annotations

from dataclasses import FrozenInstanceError, replace
from types import SimpleNamespace

import pytest

import hf_tlaser.data.corpora as corpora_module
from hf_tlaser.training import RunSpec, cnv, joint
from hf_tlaser.training import cli as training_cli
from hf_tlaser.training.cli import resolve, train, training
from hf_tlaser.training.cnv import CNVPlan
from hf_tlaser.training.resolve import RunPlan


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
    assert isinstance(plan, RunPlan) and training(plan.spec.model) is joint
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
    assert training(plan.spec.model) is cnv and plan.checkpoint is None
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

    def family_training(model: str) -> SimpleNamespace:
        calls.append(("training", training(model).__name__))
        return SimpleNamespace(check=check, train=fit)

    monkeypatch.setattr(training_cli, "training", family_training)
    for model, module in (("cnv", "hf_tlaser.training.cnv"), ("ldt", "hf_tlaser.training.joint")):
        calls.clear()
        assert train(RunSpec(output_dir=str(tmp_path), model=model)) == "trainer"
        assert calls == [("training", module), ("check", model), ("training", module), ("train", "checked")]

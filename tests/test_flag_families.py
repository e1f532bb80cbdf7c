"""Every ``hf-tlaser train`` flag declares the families (``--model``) that take it (``RunSpec`` field metadata); any
other family refuses it, when given (a value other than its default), with one line and exit code 2 before any data
is read. ``TAKES`` and ``VALUES`` are the expected table, written out here: a declaration changed in ``spec.py`` fails
the table."""

from __future__ import annotations

import json
from dataclasses import fields

import pytest

from hf_tlaser.training.cli import main
from hf_tlaser.training.presets import MODELS, WARM_RECIPE, get_preset
from hf_tlaser.training.resolve import decide
from hf_tlaser.training.spec import RunSpec

JOINT = ("tlaser", "ctlaser", "laser1", "laser6", "claser6", "yu2018", "ldt")
TRANSFORMER = ("tlaser", "ctlaser", "ldt")
TAKES = {
    "pivots": JOINT,
    "streaming": JOINT,
    "shuffle_buffer": JOINT,
    "tokenizer": JOINT,
    "nmt_steps": ("cnv",),
    "nmt_pair": ("cnv",),
    "teacher": JOINT,
    "distill_weight": JOINT,
    "teacher_cache": JOINT,
    "cluster_model": JOINT,
    "cluster_size": JOINT,
    "cluster_pool": JOINT,
    "init_from": TRANSFORMER,
    "init_layers": TRANSFORMER,
    "freeze_word_embeddings": TRANSFORMER,
    "freeze_layers": TRANSFORMER,
    "pooling": TRANSFORMER,
    "decoder_vocab": ("tlaser", "ctlaser"),
    "freeze_encoder_steps": TRANSFORMER,
    "encoder_lr": JOINT,
}
"""The flags that only some families take; every other flag is taken by all of them."""
VALUES = {
    ("batching", "multiway"): ("tlaser", "ctlaser", "laser1", "laser6", "claser6"),
    ("batch_composition", "cluster"): JOINT,
}
"""The values of a flag that only some families take."""
SAMPLES = {
    "pivots": "de",
    "streaming": None,
    "shuffle_buffer": "5",
    "tokenizer": "/nonexistent/tok",
    "nmt_steps": "3",
    "nmt_pair": "/nonexistent/a,/nonexistent/b",
    "teacher": "/nonexistent/teacher",
    "distill_weight": "0.5",
    "teacher_cache": "none",
    "cluster_model": "/nonexistent/model",
    "cluster_size": "8",
    "cluster_pool": "100",
    "init_from": "/nonexistent/backbone",
    "init_layers": "6",
    "freeze_word_embeddings": None,
    "freeze_layers": "1",
    "pooling": "mean",
    "decoder_vocab": "full",
    "freeze_encoder_steps": "2",
    "encoder_lr": "1e-4",
}
"""A value other than the default for each flag of ``TAKES`` (``None``: a switch); a row of ``VALUES`` names its own."""
NO_DATA = "/nonexistent/corpora"
REFUSED = [(flag, model) for flag, takers in {**TAKES, **VALUES}.items() for model in MODELS if model not in takers]


def flag_text(flag: str | tuple[str, str]) -> str:
    name, value = flag if isinstance(flag, tuple) else (flag, None)
    return f"--{name.replace('_', '-')}" + (f" {value}" if value else "")


def sample_argv(flag: str | tuple[str, str]) -> list[str]:
    """``flag`` given with a value other than its default: its ``SAMPLES`` value, or the value its ``VALUES`` row
    names."""
    value = None if isinstance(flag, tuple) else SAMPLES[flag]
    return flag_text(flag).split() + ([] if value is None else [value])


def error_lines(capsys) -> list[str]:
    return [line for line in capsys.readouterr().err.splitlines() if line.strip()]


def test_every_flag_declares_its_families():
    """A field without a declaration (a new flag) fails here, and so does a declaration that differs from the
    table."""
    for item in fields(RunSpec):
        families = item.metadata.get("families")
        assert families and set(families) <= set(MODELS), item.name
    declared = {item.name: item.metadata for item in fields(RunSpec)}
    assert {name: meta["families"] for name, meta in declared.items() if meta["families"] != MODELS} == TAKES
    values = {(name, value): takers for name, meta in declared.items() for value, takers in meta["values"].items()}
    assert values == VALUES
    assert set(SAMPLES) == set(TAKES)


@pytest.mark.parametrize(("flag", "model"), REFUSED, ids=[f"{flag_text(f)}-{m}" for f, m in REFUSED])
def test_a_family_refuses_a_flag_it_does_not_take(tmp_path, capsys, flag, model):
    """One line naming the flag, the family and the families that take it, before the (missing) data dir is read."""
    out = tmp_path / "out"
    argv = ["--model", model, "--output-dir", str(out), "--data-dir", NO_DATA, *sample_argv(flag)]
    assert main(argv) == 2
    takers = ", ".join(TAKES.get(flag) or VALUES[flag])
    expected = f"hf-tlaser train: error: {flag_text(flag)} is an option of --model {takers}, not of --model {model}"
    assert error_lines(capsys) == [expected]
    assert not out.exists()


@pytest.mark.parametrize(
    ("flag", "model"),
    [
        ("nmt_steps", "cnv"),
        ("pivots", "ctlaser"),
        ("streaming", "yu2018"),
        ("pooling", "ldt"),
        ("decoder_vocab", "tlaser"),
        ("freeze_encoder_steps", "ldt"),
        ("encoder_lr", "laser6"),
        (("batching", "multiway"), "laser1"),
    ],
    ids=flag_text,
)
def test_a_family_takes_its_flags(tmp_path, capsys, flag, model):
    """Past the family check: the run stops at the next cheap check, the missing data dir."""
    argv = ["--model", model, "--output-dir", str(tmp_path / "out"), "--data-dir", NO_DATA, "--pairs", "de-en"]
    assert main(argv + sample_argv(flag)) == 2
    (line,) = error_lines(capsys)
    assert f"data dir {NO_DATA}" in line, line


def test_a_flag_at_its_default_is_not_given():
    RunSpec(output_dir="x", model="cnv", pivots="en,es", shuffle_buffer=10_000, distill_weight=1.0).check_families()
    RunSpec(output_dir="x", model="ldt", batching="pair", streaming=False).check_families()


def test_config_file_values_are_checked_too(tmp_path, capsys):
    config = tmp_path / "run.json"
    config.write_text(json.dumps({"model": "cnv", "pairs": "de-en", "teacher": "x"}))
    assert main(["--config", str(config), "--output-dir", str(tmp_path / "out"), "--data-dir", NO_DATA]) == 2
    assert error_lines(capsys) == [f"hf-tlaser train: error: --teacher is an option of --model {', '.join(JOINT)}, "
                                   "not of --model cnv"]  # fmt: skip
    config.write_text(json.dumps({"model": "xlaser"}))
    assert main(["--config", str(config), "--output-dir", str(tmp_path / "out")]) == 2
    assert error_lines(capsys) == [f"hf-tlaser train: error: --model xlaser: expected one of {', '.join(MODELS)}"]


def test_the_warm_recipe_only_where_init_from_is_taken():
    cnv = get_preset("cnv", "tiny")
    resolved = decide(RunSpec(output_dir="x", model="cnv", init_from="e5"))
    assert resolved.recipe == cnv.recipe and (resolved.freeze_encoder_steps, resolved.encoder_lr) == (0, None)
    assert decide(RunSpec(output_dir="x", init_from="e5")).recipe.max_tokens == WARM_RECIPE["max_tokens"]

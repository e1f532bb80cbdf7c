"""``hf-tlaser`` dispatcher: ``--help`` lists every sub-command, ``env`` prints the environment report, an unknown
command exits 2 with one line."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest
import torch

from hf_tlaser import cli


def test_help_lists_every_command(capsys):
    assert cli.main(["--help"]) == 0
    out = capsys.readouterr().out
    for name in ("train-tokenizer", "train", "evaluate", "push", "merge", "env"):
        assert any(line.split()[:1] == [name] and len(line.split()) > 1 for line in out.splitlines()), name
    assert cli.main([]) == 2
    assert "train-tokenizer" in capsys.readouterr().err


def test_unknown_command(capsys):
    assert cli.main(["trian"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.strip().splitlines() == [
        "hf-tlaser: unknown command 'trian'; choose from train-tokenizer, train, add-language, evaluate, "
        "teacher-vectors, push, embed, mine, mine-pipeline, export, merge, env"
    ]


def test_env(capsys):
    assert cli.main(["env"]) == 0
    lines = capsys.readouterr().out.splitlines()
    report = dict(line.split(":", 1) for line in lines)
    assert report["torch"].strip() == torch.__version__
    for key in ("transformers", "cpu_model", "cpu_capability", "cpu_bf16_native", "torch_threads", "precision"):
        assert key in report, key
    assert report["precision_reason"].strip().startswith("auto: ")
    assert cli.main(["env", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["torch"] == torch.__version__


@pytest.mark.skipif(shutil.which("hf-tlaser") is None, reason="console script not installed")
def test_console_script_help():
    result = subprocess.run(["hf-tlaser", "--help"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and "env" in result.stdout

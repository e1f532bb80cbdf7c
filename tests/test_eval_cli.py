"""``hf-tlaser evaluate`` on a saved tiny model: report, results, plots, random-init baseline, summary."""

from __future__ import annotations

import json

import torch

from hf_tlaser import TLaserConfig, TLaserForTranslation, save_tokenizer
from hf_tlaser.evaluation.cli import main, summarize


def test_evaluate_command_writes_report(tmp_path, tokenizer, tiny_tlaser_kwargs, capsys):
    torch.manual_seed(0)
    folder = tmp_path / "model"
    TLaserForTranslation(TLaserConfig(**tiny_tlaser_kwargs)).save_pretrained(folder)
    save_tokenizer(tokenizer, folder)
    argv = [str(folder), "--suite", "retrieval", "sib200", "--retrieval-sets", "ntrex128", "--seeds", "0"]
    assert main([*argv, "--epochs", "3", "--projection", "pca"]) == 0
    out = folder / "eval"
    results = json.loads((out / "results.json").read_text())
    assert set(results) == {"retrieval", "sib200"}
    assert len(results["sib200"]["mean"]) == 5 and len(results["sib200"]["mean"][0]) == 5
    report = (out / "report.md").read_text()
    assert "sib200" in report and "ntrex128" in report
    for png in ("transfer_sib200.png", "embeddings_sib200.png", "xsim_ntrex128_ratio.png"):
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    printed = capsys.readouterr().out
    assert printed.strip() == summarize(results)
    assert "ntrex128: mean xsim error" in printed and "sib200: cross" in printed
    assert main([*argv, "--epochs", "3", "--projection", "none", "--random-init"]) == 0
    assert (folder / "eval_random_init" / "results.json").exists()

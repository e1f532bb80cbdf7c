"""The release recipe (scripts/release.py) at tiny size: a warm start from the tiny sentence-transformers backbone, a
few updates, the evaluation with the start, TF-IDF and random init as reference rows, and a card that states the
data, the recipe, the languages, the table, the built-in prompt and the limits; the folder pushes to a local Hub, and a
second start after the run has finished keeps it."""

from __future__ import annotations

import functools
import json
import subprocess
from pathlib import Path

import pytest
from hub_server import HubServer

from hf_tlaser.evaluation import cli as eval_cli
from hf_tlaser.evaluation.suite import lexical_reference
from hf_tlaser.hub import cli as push
from tests.scripts import ROOT, load_script
from tests.test_warm_start import train_args


@pytest.fixture(scope="module")
def release():
    return load_script("release")


def tiny_train_args() -> list[str]:
    """The tiny test runs' train flags (tests/test_warm_start.py) that the recipe does not set itself."""
    args = train_args(Path("unused"), Path("unused"))
    keep = []
    skip = {"--model", "--corpora", "--output-dir", "--init-from"}
    i = 0
    while i < len(args):
        if args[i] in skip:
            i += 2
            continue
        keep.append(args[i])
        i += 1
    return keep


def test_release_recipe_writes_a_pushable_folder_with_its_card(release, st_dir, data_dir, tmp_path, monkeypatch):
    # the tfidf-char row with 16 SVD dimensions: its 512 cost 19 s an evaluation here, and the row is under test as a
    # row of the card, not as a number
    monkeypatch.setattr(eval_cli, "lexical_reference", functools.partial(lexical_reference, svd_dim=16))
    out = tmp_path / "release"
    lines = {"de": tmp_path / "dev.de", "en": tmp_path / "dev.en"}
    for path, name in zip(lines.values(), ("newstest2019-ref.deu.txt", "newstest2019-src.eng.txt")):
        text = (Path(data_dir) / "ntrex128" / name).read_text(encoding="utf-8")
        path.write_text("\n".join(text.splitlines()[:30]) + "\n", encoding="utf-8")
    aligned = f"files:de={lines['de']}:en={lines['en']}"
    argv = ["--output", str(out), "--data-dir", str(data_dir), "--init", str(st_dir), "--updates", "2"]
    argv += ["--corpora", "wmt-newstest-multiway", "--retrieval-sets", aligned, "--seeds", "0", "--epochs", "5"]
    argv += ["--recipe", "hard-negatives"]
    # the tiny backbone has 64 positions, which a 64-token sentence with the prompt "query: " overflows: the clusters'
    # pool of two clusters (128 rows) holds one (the length filter does not count the prompt; e5 has 512 positions)
    tiny = [*tiny_train_args(), "--max-sentence-tokens", "60"]
    assert release.main([*argv, "--", *tiny]) == 0
    assert json.loads((out / "trainer_state.json").read_text())["global_step"] == 2
    results = json.loads((out / "eval" / "results.json").read_text())
    assert results["retrieval"]["matrices"][aligned] and "sib200" in results
    card = (out / "README.md").read_text()
    for expected in (
        "wmt-newstest-multiway",  # the data
        "| optimizer updates | 2 |",  # the recipe
        "German, English",  # the languages
        "| batch composition | cluster: hard negatives in the batch (128 rows of each stream embedded by",  # the levers
        "random init (reference)",  # the table's reference rows
        "tfidf-char",
        f"{st_dir.name} (reference)",  # the start
        "The prompt 'query: ' is built into the tokenizer",
        "vectors of other languages are not aligned",  # the limits
        "Inputs are limited to",
    ):
        assert expected in card, expected
    assert "CPU reproduction" not in card  # a warm start, not a small-scale reproduction of the paper
    before = (out / "model.safetensors").read_bytes()
    assert release.main([*argv, "--", *tiny]) == 0  # finished: evaluated again, not retrained
    assert (out / "model.safetensors").read_bytes() == before
    monkeypatch.setenv("HF_TOKEN", "dummy-token")
    with HubServer() as hub:
        assert push.main([str(out), "tester/release", "--endpoint", hub.url]) == 0
        files = hub.repos["tester/release"].commits[hub.repos["tester/release"].branches["main"]]
    assert {"README.md", "model.safetensors", "modules.json", "eval/results.json"} <= set(files)


@pytest.mark.parametrize("recipe", [None, "hard-negatives", "plain"])
def test_release_recipe_trains_with_its_levers(release, monkeypatch, tmp_path, recipe):
    """The default recipe adds the subtitle pairs; hard-negatives adds clustered batches (a pool of 5 rows per
    update); plain has neither; a given --corpora is taken as it is."""
    import hf_tlaser.cli

    calls = []
    monkeypatch.setattr(hf_tlaser.cli, "main", lambda argv: calls.append(argv) or 3)
    argv = ["--output", str(tmp_path / "r"), "--updates", "40", *(["--recipe", recipe] if recipe else [])]
    assert release.main(argv) == 3
    assert release.main([*argv, "--corpora", "multi30k", "--", "--max-minutes", "1"]) == 3
    train, given = calls
    corpora = train[train.index("--corpora") + 1].split(",")
    assert corpora[-2:] == (["stsb-multi-mt", "wmt-newstest-more"] if recipe == "plain" else ["xed", "xed-more"])
    assert given[given.index("--corpora") + 1] == "multi30k" and given[-2:] == ["--max-minutes", "1"]
    if recipe == "hard-negatives":
        assert train[train.index("--batch-composition") + 1 :][:3] == ["cluster", "--cluster-pool", "200"]
    else:
        assert "--batch-composition" not in train and "--cluster-pool" not in train


def test_main_job_refuses_an_unknown_recipe_before_set_up():
    """``DEMO_RECIPE`` is checked before set-up: one line naming it and the choices, exit code 2."""
    done = subprocess.run(
        ["bash", str(ROOT / "scripts" / "demo.sh")],
        env={"PATH": "/usr/bin:/bin", "DEMO_RECIPE": "hard"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip().splitlines() == [
        "scripts/demo.sh: DEMO_RECIPE must be conversational, hard-negatives or plain, not 'hard'"
    ]

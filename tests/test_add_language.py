"""``hf-tlaser add-language`` at tiny size: a language joins a trained member end to end (a folder that loads in a
fresh process, whose config and model card name the language and the data); the teacher is the start, frozen (every
distillation target is the start's vector of the English side, and its files are unchanged); the replayed pairs are
trained on beside the new ones; bad input is one line and exit code 2 before any data is read."""

from __future__ import annotations

import hashlib
import itertools
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import AutoTokenizer

from hf_tlaser.data.readers import iter_lines
from hf_tlaser.errors import UsageError
from hf_tlaser.hub.model_card import _added_language, render_model_card
from hf_tlaser.models.tlaser import TLaserModel
from hf_tlaser.teachers.targets import load_teacher
from hf_tlaser.training import add_language
from hf_tlaser.training.add_language import add_language_spec
from hf_tlaser.training.cli import main as train_main
from hf_tlaser.training.distill import DistillCollator
from tests.fresh_process import auto_model_vectors
from tests.test_train_cli_errors import usage_errors
from tests.test_warm_start import TEXTS, train_args

TINY = [
    "--max-lines", "80", "--max-tokens", "400", "--update-tokens", "400", "--logging-steps", "1",
    "--precision", "fp32", "--set=decoder_attention_heads=2", "--set=decoder_ffn_dim=64", "--teacher-cache", "none",
]  # fmt: skip


def digest(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir()) if p.is_file()}


@pytest.fixture(scope="module")
def icelandic_pairs(data_dir, tmp_path_factory) -> Path:
    """The first 60 en-is subtitle pairs of xed-subtitles-more (header ``en is en_doc is_doc``)."""
    path = tmp_path_factory.mktemp("pairs") / "en-is.tsv"
    lines = itertools.islice(iter_lines(data_dir / "xed-subtitles-more" / "en-is.tsv"), 61)
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def added(st_dir, icelandic_pairs, tmp_path_factory):
    """A warm-started member (de-en, en-es; 2 updates), then Icelandic added with de-en replayed (3 updates), every
    micro-batch's examples and distillation targets recorded."""
    root = tmp_path_factory.mktemp("add")
    start = root / "start"
    assert train_main(train_args(start, st_dir, "--max-steps", "2")) == 0
    before = digest(start)
    seen = []
    collate = DistillCollator.__call__

    def record(self, examples):
        batch = collate(self, examples)
        seen.append((examples, self.sentences(examples)[1], batch["distill_targets"].clone()))
        return batch

    argv = [
        str(start), "--language", "is", "--language-pairs", f"tsv:{icelandic_pairs}", "--replay",
        "wmt-newstest-multiway", "--replay-pairs", "de-en", "--output-dir", str(root / "out"), "--max-steps", "3",
        *TINY,
    ]  # fmt: skip
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(DistillCollator, "__call__", record)
        assert add_language.main(argv) == 0
    return start, root / "out", before, seen


def test_the_added_model_names_the_language_and_loads_in_a_fresh_process(added, icelandic_pairs, tmp_path):
    start, out, _, _ = added
    config = json.loads((out / "config.json").read_text())
    assert config["training_languages"] == ["de", "en", "es", "is"]  # the start's and the added one
    assert json.loads((start / "config.json").read_text())["training_languages"] == ["de", "en", "es"]
    assert json.loads((out / "hf_tlaser_add_language.json").read_text()) == {
        "language": "is",
        "start": str(start),
        "language_pairs": f"tsv:{icelandic_pairs}",
        "replay": "wmt-newstest-multiway",
        "replay_pairs": "de-en",
    }
    args = json.loads((out / "hf_tlaser_train.json").read_text())["args"]
    assert (args["init_from"], args["teacher"], args["distill_weight"]) == (str(start), str(start), 500.0)
    assert args["pairs"] == "is-en,de-en" and args["model"] == "ctlaser"
    card = render_model_card(out)
    assert "**Added language: Icelandic (`is`)**" in card and f"`tsv:{icelandic_pairs}`" in card
    assert "- is\n" in card and "replay of `wmt-newstest-multiway` (de-en)" in card
    expected = TLaserModel.from_pretrained(out).eval()
    texts = [*TEXTS, "Hvar er lestarstöðin?"]
    with torch.no_grad():
        local = expected(**AutoTokenizer.from_pretrained(out)(texts, padding=True, return_tensors="pt")).pooler_output
    np.testing.assert_allclose(auto_model_vectors(out, texts, tmp_path), local.numpy(), atol=1e-5)


def test_the_teacher_is_the_start_frozen(added):
    start, _, before, seen = added
    assert digest(start) == before  # its files, weights included, are unchanged
    teacher = load_teacher(str(start), precision="fp32")  # the run's --precision
    pivots = [text for _, texts, _ in seen for text in texts]
    targets = torch.cat([batch for _, _, batch in seen]).numpy()
    assert len(pivots) == len(targets) > 0
    np.testing.assert_allclose(targets, np.asarray(teacher.encode(pivots)), atol=1e-5)


def test_the_replayed_pairs_are_trained_beside_the_new_ones(added, icelandic_pairs):
    _, _, _, seen = added
    icelandic = {line.split("\t")[1].strip() for line in icelandic_pairs.read_text().splitlines()[1:]}
    kinds = [{(example["src_lang"], example["tgt_lang"]) for example in examples} for examples, _, _ in seen]
    assert {("is", "en")} in kinds and {("de", "en")} in kinds, kinds  # the curriculum takes the pairs in turn
    assert all(len(kind) == 1 for kind in kinds), kinds  # one pair a micro-batch
    sources = [example["src"] for examples, _, _ in seen for example in examples if example["src_lang"] == "is"]
    assert sources and set(sources) <= icelandic


@usage_errors(
    {
        "--init-from x": "--init-from: add-language decides it; give MODEL instead",
        "--pairs=de-en": "--pairs: add-language decides it; give --language and --replay-pairs instead",
        "--language en": "--language en: the pivot",
        "--language 'no such'": "--language:",
        "--language is,kab,is": "--language is,kab,is: a language is named twice",
        "--replay ''": "--replay-pairs de-en,fr-en: give the corpora they come from with --replay",
        "--replay-pairs de-de": "--replay-pairs 'de-de': bad language pair",
    }
)
def test_bad_input_is_one_line_before_any_data(extra, expected, st_dir, tmp_path, capsys):
    argv = [str(st_dir), "--language-pairs", "tsv:none.tsv", "--output-dir", str(tmp_path / "o"), *extra]
    if "--language" not in extra:
        argv += ["--language", "is"]
    assert add_language.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("hf-tlaser add-language: error: ") and expected in err, err
    assert not (tmp_path / "o").exists()


def test_a_start_that_is_no_trained_member_is_refused(st_dir, tmp_path, capsys):
    argv = [str(st_dir), "--language", "is", "--language-pairs", "tsv:x.tsv", "--output-dir", str(tmp_path / "o")]
    assert add_language.main(argv) == 2
    assert "not an hf_tlaser tlaser/ctlaser/ldt model trained by hf-tlaser train --init-from" in capsys.readouterr().err


def test_the_help_offers_no_flag_the_recipe_decides():
    text = add_language.build_add_parser().format_help()
    assert "--replay-pairs" in text and "--max-steps" in text
    offered = {line.split()[0] for line in text.splitlines() if line.startswith("  --")}  # not continued help
    assert "--language-pairs" in offered and not offered & {"--init-from", "--teacher", "--corpora", "--pairs"}


def test_several_languages_join_in_one_run(added, icelandic_pairs, tmp_path):
    start = added[0]
    kabyle = tmp_path / "en-kab.tsv"
    kabyle.write_text("en\tkab\nA bad word hurts.\tAwal yeqqaz.\nGood morning.\tTanemmirt.\n", encoding="utf-8")
    argv = [str(start), "--language", "is,kab", "--output-dir", str(tmp_path / "o"), "--language-pairs"]
    spec, record = add_language_spec([*argv, f"tsv:{icelandic_pairs},tsv:{kabyle}:en=en:kab=kab"])
    assert spec.pairs == "is-en,kab-en,de-en,fr-en" and record["language"] == "is,kab"
    assert spec.corpora == f"tsv:{icelandic_pairs},tsv:{kabyle}:en=en:kab=kab,multi30k"
    with pytest.raises(UsageError, match="--language-pairs tsv:.*: no kab text"):
        add_language_spec([*argv, f"tsv:{icelandic_pairs}"])
    card = _added_language({**record, "replay_pairs": "de-en"})[0]
    assert card.startswith("**Added languages: Icelandic (`is`), kab (`kab`)**")

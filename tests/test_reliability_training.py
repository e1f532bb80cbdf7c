"""Issue 71, the training half: nothing of the user's lost, nothing reused that changed, one line for a mistake.

``merge`` never writes over its inputs and replaces an old output only once the new one is whole; its default start
is the fingerprinted ``--init-from`` the tuned run recorded; ``train``, ``add-language`` and ``evaluate`` refuse an
output over an input; ``--set`` values are typed by the config class; a damaged negative memory in a checkpoint is
one line, and the file is written whole or not at all; an empty corpus is one line; a resume compares the whole plan
(``--resume force`` continues anyway); ``add-language`` refuses a language the start knows (``--again`` warns) and
names its own flags; a ``--cluster-size`` larger than the data is one line.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from hf_tlaser.errors import UsageError
from hf_tlaser.evaluation.cli import main as evaluate_main
from hf_tlaser.models.tlaser import TLaserConfig
from hf_tlaser.training import add_language
from hf_tlaser.training import merge as merge_module
from hf_tlaser.training import trainer as trainer_module
from hf_tlaser.training.cli import main as train_main
from hf_tlaser.training.merge import main as merge_main
from hf_tlaser.training.resume import check_checkpoint
from hf_tlaser.training.run import RECORD, START, start_record
from hf_tlaser.training.spec import config_overrides
from hf_tlaser.training.trainer import MEMORY_STATE, NegativeMemoryCallback
from tests.test_distill import distill_args
from tests.test_train_cli_errors import one_error_line, run_args, usage_errors
from tests.test_warm_start import train_args
from tests.tiny_models import make_st_model


def digest(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` by relative path, with the SHA-256 of its bytes."""
    return {
        str(path.relative_to(folder)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }


def one_line(capsys, code: int, command: str, *expected: str) -> str:
    """The one stderr line of a refused command (exit code 2), which holds every ``expected`` text."""
    err = capsys.readouterr().err
    assert code == 2, err
    lines = [line for line in err.splitlines() if line.startswith(f"{command}: error: ")]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert all(text in lines[0] for text in expected), lines[0]
    return lines[0]


# ---------------------------------------------------------------------------------------------------- merge


@pytest.fixture
def tuned(warm_dir, tmp_path) -> Path:
    """A writable copy of ``warm_dir`` as ``hf-tlaser train --init-from st`` saves it from the folder holding ``st``:
    the config names the start as given, the run record as resolved (its folder and fingerprint)."""
    folder = tmp_path / "tuned"
    shutil.copytree(warm_dir, folder)
    config = json.loads((folder / "config.json").read_text())
    config["backbone"]["_name_or_path"] = "st"
    (folder / "config.json").write_text(json.dumps(config))
    record = {"args": {"model": "ctlaser", "init_from": "st"}, START: start_record(str(warm_dir.parent / "st"))}
    (folder / RECORD).write_text(json.dumps(record))
    return folder


def test_merge_never_writes_over_its_inputs(tuned, warm_dir, tmp_path, capsys):
    """Case 3: ``merge runs/demo --output runs/demo --overwrite`` deleted the tuned model; an output holding the
    tuned folder, or the start itself, is refused too."""
    start = warm_dir.parent / "st"
    before, start_before = digest(tuned), digest(start)
    for output in (tuned, tmp_path, start):
        code = merge_main([str(tuned), "--start", str(start), "--alpha", "0.5", "--output", str(output), "--overwrite"])
        one_line(capsys, code, "hf-tlaser merge", f"--output {output}: ", "the input", "not even with --overwrite")
    assert digest(tuned) == before and digest(start) == start_before


def test_merge_output_that_is_a_file_is_one_line(tuned, tmp_path, capsys):
    taken = tmp_path / "merged"
    taken.write_text("a user's file")
    for extra in ([], ["--overwrite"]):
        code = merge_main([str(tuned), "--alpha", "0.5", "--output", str(taken), *extra])
        one_line(capsys, code, "hf-tlaser merge", f"--output {taken} is a file")
    assert taken.read_text() == "a user's file"


def test_merge_overwrite_keeps_the_old_output_until_the_new_one_is_whole(tuned, warm_dir, tmp_path, monkeypatch):
    """A merge that fails halfway leaves the old output as it was and nothing beside it; one that succeeds replaces
    it and leaves nothing beside it either."""
    output, start = tmp_path / "out" / "merged", str(warm_dir.parent / "st")
    assert merge_main([str(tuned), "--start", start, "--alpha", "0.0", "--output", str(output)]) == 0
    before = digest(output)

    def broken(*args, **kwargs):
        raise OSError(28, "No space left on device")

    with monkeypatch.context() as patch:
        patch.setattr(merge_module, "copy_folder", broken)
        with pytest.raises(OSError):
            merge_module.run(str(tuned), start, 1.0, output, overwrite=True)
    assert digest(output) == before and [p.name for p in output.parent.iterdir()] == ["merged"]
    assert merge_main([str(tuned), "--start", start, "--alpha", "1.0", "--output", str(output), "--overwrite"]) == 0
    assert digest(output) != before and [p.name for p in output.parent.iterdir()] == ["merged"]


def test_merge_takes_the_recorded_start_and_checks_its_fingerprint(tuned, warm_dir, tmp_path, monkeypatch, capsys):
    """Case 6: the default start is the folder the run resolved ``--init-from`` to, not the config's cwd-relative
    name read again from wherever merge runs (there, ``st`` is another copy); a start whose files differ is one line,
    ``--any-start`` takes it; an unchanged copy elsewhere is the same start."""
    start = warm_dir.parent / "st"
    elsewhere = tmp_path / "elsewhere"
    changed = elsewhere / "st"
    shutil.copytree(start, changed)
    modules = json.loads((changed / "modules.json").read_text())
    (changed / "modules.json").write_text(json.dumps(modules, indent=1))  # other bytes: another fingerprint
    monkeypatch.chdir(elsewhere)
    assert merge_main([str(tuned), "--alpha", "0.5", "--output", str(tmp_path / "a")]) == 0
    merged = json.loads((tmp_path / "a" / merge_module.RECORD).read_text())
    assert merged["start"] == str(start.resolve())
    assert merged["start_fingerprint"] == start_record(str(start))["fingerprint"]
    argv = [str(tuned), "--start", str(changed), "--alpha", "0.5", "--output", str(tmp_path / "b")]
    one_line(capsys, merge_main(argv), "hf-tlaser merge", f"--start {changed}: its files are not those", "--any-start")
    assert merge_main([*argv, "--any-start"]) == 0
    copy = tmp_path / "copy"
    shutil.copytree(start, copy)
    assert merge_main([str(tuned), "--start", str(copy), "--alpha", "0.5", "--output", str(tmp_path / "c")]) == 0
    (tuned / RECORD).unlink()
    code = merge_main([str(tuned), "--alpha", "0.5", "--output", str(tmp_path / "d")])
    one_line(capsys, code, "hf-tlaser merge", "records no fingerprinted start", "give --start SPEC")


def test_train_records_its_start_as_resolved_and_merge_finds_it_from_anywhere(st_dir, tmp_path, monkeypatch):
    """A run started with a relative ``--init-from`` records the folder it resolved and its fingerprint; merge run
    from another folder takes that start."""
    monkeypatch.chdir(st_dir.parent)
    out = tmp_path / "run"
    assert train_main(train_args(out, Path(st_dir.name), "--max-steps", "1", "--freeze-encoder-steps", "0")) == 0
    assert json.loads((out / RECORD).read_text())[START] == {**start_record(str(st_dir)), "init_from": st_dir.name}
    monkeypatch.chdir(tmp_path)
    assert merge_main([str(out), "--alpha", "0.5", "--output", str(tmp_path / "merged")]) == 0
    assert json.loads((tmp_path / "merged" / merge_module.RECORD).read_text())["start"] == str(st_dir.resolve())


# ---------------------------------------------------------------------------------------------------- train


@pytest.fixture(scope="module")
def memory_run(tmp_path_factory, tokenizer_dir) -> Path:
    """A 2-update run with a negative memory, its checkpoint-2 holding the memory file."""
    out = tmp_path_factory.mktemp("memory") / "run"
    argv = run_args(out, "--max-steps", "2", "--save-steps", "2", "--set=negative_memory_size=16")
    assert train_main([*argv, "--tokenizer", str(tokenizer_dir)]) == 0
    assert (out / "checkpoint-2" / MEMORY_STATE.format(rank=0)).is_file()
    return out


def resume_args(out: Path, *extra: str) -> list[str]:
    """The arguments of ``memory_run`` continued to update 3 from ``out``."""
    return [*run_args(out, "--max-steps", "3", "--set=negative_memory_size=16", "--resume", "auto"), *extra]


@pytest.mark.parametrize(
    ("item", "expected"),
    [
        ("negative_memory_size=abc", "--set negative_memory_size=abc: negative_memory_size takes an integer"),
        ("negative_memory_size=1.5", "--set negative_memory_size=1.5: negative_memory_size takes an integer"),
        ("distance_vnorm_grad=1", "distance_vnorm_grad takes true or false"),
        ("distance_beta=.nan", "distance_beta takes a finite number"),
        ("languages=de", "languages takes a list [A, B]"),
    ],
)
def test_set_values_are_typed_before_any_data(item, expected, tmp_path, capsys):
    """Item 4: ``=abc`` was a TypeError, ``=1.5`` trained until update 1 and left run files."""
    line = one_error_line(capsys, train_main(run_args(tmp_path / "out", f"--set={item}")))
    assert expected in line
    assert not (tmp_path / "out").exists()


def test_set_values_take_the_config_types():
    values = ["distance_beta=1", "negative_memory_size=8", "distance_lambda=null", "languages=[de, en]"]
    values += ["decoder_lang_mode=memory", "distance_vnorm_grad=false", "init_style=yes"]
    assert config_overrides(values, TLaserConfig) == {
        "distance_beta": 1,  # an integer is a number
        "negative_memory_size": 8,
        "distance_lambda": None,
        "languages": ["de", "en"],
        "decoder_lang_mode": "memory",
        "distance_vnorm_grad": False,
        "init_style": "yes",  # a string as written (YAML reads a bool; the class's own check refuses the word)
    }


def test_a_damaged_negative_memory_is_one_line_before_the_run(memory_run, tmp_path, capsys):
    out = tmp_path / "run"
    shutil.copytree(memory_run, out)
    memory = out / "checkpoint-2" / MEMORY_STATE.format(rank=0)
    memory.write_bytes(memory.read_bytes()[: memory.stat().st_size // 2])
    before = digest(out)
    line = one_error_line(capsys, train_main(resume_args(out)))
    assert f"{memory} is truncated or corrupt" in line and f"delete {memory.name}" in line
    assert digest(out) == before


def test_the_negative_memory_is_written_whole_or_not_at_all(tmp_path, monkeypatch):
    """A run killed while it writes the memory leaves no half file that a resume would read."""
    model = torch.nn.Module()
    model.negative_memory = trainer_module.NegativeMemory(4)
    keys = torch.tensor([1, 2, 3])
    model.negative_memory.add(torch.randn(3, 5), keys, keys + 3, torch.tensor([7] * 3))
    args = type("Args", (), {"output_dir": str(tmp_path), "process_index": 0})()
    state = type("State", (), {"global_step": 4})()
    saved = tmp_path / "checkpoint-4" / MEMORY_STATE.format(rank=0)

    def killed(tensors, path, *rest, **kwargs):
        Path(path).write_bytes(b"\x08\x00\x00")  # the first bytes, then the process dies
        raise KeyboardInterrupt

    with monkeypatch.context() as patch:
        patch.setattr(trainer_module, "save_file", killed)
        with pytest.raises(KeyboardInterrupt):
            NegativeMemoryCallback(None).on_save(args, state, None, model=model)
    assert not saved.exists()
    NegativeMemoryCallback(None).on_save(args, state, None, model=model)
    assert load_file(saved).keys() == model.negative_memory.state().keys()
    assert [path.name for path in saved.parent.iterdir()] == [saved.name]


def test_check_checkpoint_reads_every_safetensors_file(tmp_path):
    checkpoint = tmp_path / "checkpoint-3"
    checkpoint.mkdir()
    (checkpoint / "trainer_state.json").write_text(json.dumps({"global_step": 3}))
    save_file({"w": torch.zeros(2)}, checkpoint / "model.safetensors")
    (checkpoint / MEMORY_STATE.format(rank=1)).write_bytes(b"\x10\x00")
    with pytest.raises(UsageError, match=r"negative_memory_rank1.safetensors is truncated or corrupt .* or delete"):
        check_checkpoint(checkpoint)


def test_a_corpus_with_a_header_and_no_rows_is_one_line(tmp_path, tokenizer_dir, capsys):
    """``KeyError: '_dropped'`` before: the cleaning of no rows made none of its columns."""
    corpus = tmp_path / "en-de.tsv"
    corpus.write_text("en\tde\n", encoding="utf-8")
    argv = run_args(
        tmp_path / "out", "--corpora", f"tsv:{corpus}", "--pairs", "de-en", "--tokenizer", str(tokenizer_dir)
    )
    line = one_error_line(capsys, train_main(argv))
    assert f"no training batches from --corpora tsv:{corpus} --pairs de-en" in line


@usage_errors(
    {
        "--seed 2": "--seed 2 (the run: 1)",
        "--cluster-size 8": "--cluster-size 8 (the run: 64)",
        "--max-lines 40": "--max-lines 40 (the run: 60)",
        "--corpora wmt-newstest-multiway,multi30k": "(the run: ['wmt-newstest-multiway'])",
        "--pairs de-en": "--pairs de-en (the run: de-en,en-es)",
        "--batching multiway": "--batching multiway (the run: pair)",
    }
)
def test_resume_compares_the_whole_plan(memory_run, tmp_path, capsys, extra, expected):
    """Item 5: only the family, preset and streaming were compared; another seed, data or batches was resumed as if
    nothing had changed, and the record overwritten."""
    out = tmp_path / "run"
    shutil.copytree(memory_run, out)
    before = digest(out)
    line = one_error_line(capsys, train_main(resume_args(out, *extra)))
    assert expected in line and "--resume force" in line
    assert digest(out) == before


def test_resume_force_continues_with_another_plan(memory_run, tmp_path, caplog):
    out = tmp_path / "run"
    shutil.copytree(memory_run, out)
    caplog.set_level(logging.WARNING)
    argv = [arg if arg != "auto" else "force" for arg in resume_args(out, "--seed", "2")]
    assert train_main(argv) == 0
    assert "--resume force: continuing" in caplog.text and "--seed 2 (the run: 1)" in caplog.text
    assert json.loads((out / "trainer_state.json").read_text())["global_step"] == 3
    assert json.loads((out / RECORD).read_text())["args"]["seed"] == 2


def test_train_never_writes_over_its_start(st_dir, tmp_path, capsys):
    start = tmp_path / "start"
    shutil.copytree(st_dir, start)
    before = digest(start)
    for output in (start, tmp_path):
        argv = run_args(output, "--init-from", str(start), "--overwrite")
        line = one_error_line(capsys, train_main(argv))
        assert f"--output-dir {output}: " in line and "the input --init-from" in line
    assert digest(start) == before


@pytest.fixture(scope="module")
def cluster_model(tmp_path_factory, tokenizer) -> Path:
    return make_st_model(tmp_path_factory.mktemp("cluster"), tokenizer)


def test_a_cluster_size_larger_than_the_data_is_one_line(tmp_path, tokenizer_dir, cluster_model, capsys):
    extra = ["--batch-composition", "cluster", "--cluster-model", str(cluster_model), "--cluster-size", "500"]
    argv = distill_args(tmp_path / "run", tokenizer_dir, "ctlaser", *extra, "--max-lines", "40")
    argv += ["--teacher-cache", str(tmp_path / "cache")]
    line = one_error_line(capsys, train_main(argv))
    assert "--cluster-size 500: the de-en stream has" in line and "fewer than two clusters of 500" in line
    assert not (tmp_path / "run" / "model.safetensors").exists()


# ---------------------------------------------------------------------------------------------------- add-language


@pytest.fixture
def member(warm_dir, tmp_path) -> Path:
    """``warm_dir`` as a trained member: trained on de, en and es, its record naming its family."""
    folder = tmp_path / "member"
    shutil.copytree(warm_dir, folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "training_languages": ["de", "en", "es"]}))
    (folder / RECORD).write_text(json.dumps({"args": {"model": "ctlaser"}}))
    return folder


def add_args(member: Path, out: Path, *extra: str) -> list[str]:
    return [str(member), "--output-dir", str(out), "--replay", "wmt-newstest-multiway", "--replay-pairs", "de-en",
            "--teacher-cache", "none", *extra]  # fmt: skip


def test_add_language_refuses_a_language_the_start_knows(member, tmp_path, capsys, caplog):
    pairs = f"tsv:{tmp_path / 'en-es.tsv'}"
    code = add_language.main(add_args(member, tmp_path / "out", "--language", "es", "--language-pairs", pairs))
    one_line(capsys, code, "hf-tlaser add-language", "--language es: MODEL", "trained on es already", "--again")
    (tmp_path / "en-es.tsv").write_text("en\tes\nHello.\tHola.\n", encoding="utf-8")
    caplog.set_level(logging.WARNING)
    spec, record = add_language.add_language_spec(
        add_args(member, tmp_path / "out", "--language", "es", "--language-pairs", pairs, "--again")
    )
    assert record["language"] == "es" and spec.pairs == "es-en,de-en" and "--again: MODEL" in caplog.text


@pytest.mark.parametrize(
    ("pairs", "extra", "expected"),
    [
        ("tsv:/nonexistent/en-is.tsv", [], "--language-pairs: corpus"),
        ("wmt-newstest-multiway", [], "--language-pairs wmt-newstest-multiway: no is text"),
        ("PAIRS", ["--replay-pairs", "fi-en"], "--replay wmt-newstest-multiway: no fi text"),
    ],
)
def test_add_language_errors_name_its_own_flags(member, tmp_path, capsys, pairs, extra, expected):
    corpus = tmp_path / "en-is.tsv"
    corpus.write_text("en\tis\nHello.\tHalló.\n", encoding="utf-8")
    pairs = pairs.replace("PAIRS", f"tsv:{corpus}")
    code = add_language.main(
        [*add_args(member, tmp_path / "out", "--language", "is", "--language-pairs", pairs), *extra]
    )
    line = one_line(capsys, code, "hf-tlaser add-language", expected)
    assert "--corpora" not in line and "--pairs" not in line.replace("--replay-pairs", "").replace(
        "--language-pairs", ""
    )


def test_add_language_never_writes_over_its_start(member, tmp_path, capsys):
    corpus = tmp_path / "en-is.tsv"
    corpus.write_text("en\tis\nHello.\tHalló.\n", encoding="utf-8")
    before = digest(member)
    argv = add_args(member, member, "--language", "is", "--language-pairs", f"tsv:{corpus}", "--overwrite")
    one_line(capsys, add_language.main(argv), "hf-tlaser add-language", f"--output-dir {member}: is the input MODEL")
    assert digest(member) == before


def test_add_language_on_an_empty_corpus_is_one_line_in_its_own_flags(member, tmp_path, capsys):
    """``KeyError: '_dropped'`` before; the training's message then named ``--corpora`` and ``--pairs``."""
    corpus = tmp_path / "en-is.tsv"
    corpus.write_text("en\tis\n", encoding="utf-8")
    argv = [str(member), "--output-dir", str(tmp_path / "out"), "--language", "is", "--language-pairs",
            f"tsv:{corpus}", "--replay", "", "--replay-pairs", "", "--teacher-cache", "none", "--max-steps", "1",
            "--set=decoder_attention_heads=2", "--set=decoder_ffn_dim=64", "--precision", "fp32"]  # fmt: skip
    line = one_line(capsys, add_language.main(argv), "hf-tlaser add-language", "no training batches")
    assert f"--language-pairs tsv:{corpus} --language is:" in line and "--corpora" not in line


# ---------------------------------------------------------------------------------------------------- evaluate


def test_evaluate_never_writes_over_its_model(tlaser_folder, st_folder, capsys):
    before = digest(tlaser_folder)
    for output in (tlaser_folder, tlaser_folder.parent, st_folder):
        argv = [str(tlaser_folder), "--output-dir", str(output), "--reference", str(st_folder)]
        one_line(capsys, evaluate_main(argv), "hf-tlaser evaluate", f"--output-dir {output}: ", "the input")
    assert digest(tlaser_folder) == before

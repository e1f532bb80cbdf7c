"""``hf-tlaser train`` on user mistakes: one clear stderr line and exit code 2, cheap checks before any data is read;
the output-dir guard, ``--overwrite``, resume compatibility, ``--set`` keys, special-token ids, precision, help; the
compact progress line and the run's full log file."""

from __future__ import annotations

import ast
import json
import logging
import shlex
import shutil
import time
from dataclasses import fields
from pathlib import Path

import pytest

from hf_tlaser import save_tokenizer
from hf_tlaser.training.cli import build_parser, main, parse_args
from hf_tlaser.training.spec import RunSpec
from hf_tlaser.training.trainer import LogParts, TimeBudgetCallback

TINY = ["hidden_size=32", "num_hidden_layers=1", "num_attention_heads=4", "intermediate_size=64"]
TINY += ["decoder_attention_heads=4", "decoder_ffn_dim=64"]


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory, tokenizer) -> Path:
    folder = tmp_path_factory.mktemp("tok")
    save_tokenizer(tokenizer, folder)
    return folder


def run_args(out: Path, *extra: str, tokenizer_dir: Path | None = None, model: str = "ctlaser") -> list[str]:
    args = [
        "--model", model, "--preset", "tiny", "--corpora", "wmt-newstest-multiway", "--pairs", "de-en,en-es",
        "--max-lines", "60", "--output-dir", str(out), "--max-tokens", "600", "--update-tokens", "600",
        "--logging-steps", "1", "--precision", "fp32",
    ]  # fmt: skip
    if tokenizer_dir is not None:
        args += ["--tokenizer", str(tokenizer_dir)]
    return args + [f"--set={item}" for item in TINY] + list(extra)


def usage_errors(cases: dict[str, str]) -> pytest.MarkDecorator:
    """Parametrizes a test's ``extra`` and ``expected`` with each of ``cases``: its key's words (split as a shell
    splits them) and its value, a part of the one error line they give; each case is named by its key."""
    params = [(shlex.split(words), expected) for words, expected in cases.items()]
    return pytest.mark.parametrize(("extra", "expected"), params, ids=list(cases))


def one_error_line(capsys, rc: int) -> str:
    err = capsys.readouterr().err
    assert rc == 2, err
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.strip()]
    errors = [line for line in lines if "error" in line.lower()]  # datasets' progress bars may come before
    assert len(errors) == 1 and lines[-1].startswith("hf-tlaser train: error: "), err
    return lines[-1]


class Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())

    @property
    def text(self) -> str:
        return "\n".join(self.lines)


def run_main(argv: list[str]) -> tuple[int, str]:
    """main() with the INFO log lines collected (pytest's caplog is function-scoped)."""
    handler = Records()
    root = logging.getLogger()
    old_level = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    try:
        return main(argv), handler.text
    finally:
        root.removeHandler(handler)
        root.setLevel(old_level)


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory, tokenizer_dir) -> tuple[Path, str]:
    """A 2-update run (checkpoint-2 and the final model) and its log."""
    out = tmp_path_factory.mktemp("runs") / "run"
    rc, log = run_main(run_args(out, "--max-steps", "2", "--save-steps", "2", tokenizer_dir=tokenizer_dir))
    assert rc == 0
    return out, log


@usage_errors(
    {
        "--learning-rate -0.001": "--learning-rate",
        "--set num_attention_heads=5": "not divisible",
        "--set distance_mt_weight=-1": "TLaserConfig: distance_mt_weight=-1 must be >= 0",
        "--set no_such_key=1": "unknown --set key 'no_such_key'; known keys: vocab_size, hidden_size",
        "--set hidden_size": "--set 'hidden_size': expected KEY=VALUE",
        "--pairs de-xx": "--pairs de-xx: no corpus has 'xx' text (the corpora wmt-newstest-multiway have",
        "--pairs de-english": "--pairs: bad language pair 'de-english': bad language code 'english'",
        "--corpora tsv:": "--corpora: corpus spec 'tsv:': nothing after tsv:",
        "--corpora files:de=a.de": "--corpora: corpus spec 'files:de=a.de': files: needs two or more LANG=PATH",
        "--corpora hf:x:spilt=train": "--corpora: corpus spec 'hf:x:spilt=train': unknown option 'spilt'",
        "--corpora files:de=/no/a.de:en=/no/a.en": "--corpora: corpus file /no/a.de does not exist",
        "--corpora moses:/no/corpus": "--corpora: corpus spec 'moses:/no/corpus': no folder /no/corpus and no",
        "--pairs deen": "--pairs: bad language pair 'deen'",
        "--corpora europarl": "--corpora: unknown corpus 'europarl'; known corpora: wmt-newstest-multiway",
        "--data-dir /nonexistent/corpora": "data dir /nonexistent/corpora (from --data-dir / $HF_TLASER_DATA)",
        "--config /nonexistent/run.yaml": "--config /nonexistent/run.yaml",
        "--max-steps 0": "--max-steps",
    }
)
def test_cheap_mistakes_fail_before_loading_data(tmp_path, capsys, extra, expected):
    start = time.monotonic()
    line = one_error_line(capsys, main(run_args(tmp_path / "out", *extra)))
    assert expected in line
    assert time.monotonic() - start < 10  # no corpus read, no tokenizer trained
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_bad_config_file(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("max_steps: [1\n")
    line = one_error_line(capsys, main(run_args(tmp_path / "out", "--config", str(bad))))
    assert f"--config {bad}: not valid YAML" in line
    unknown = tmp_path / "unknown.yaml"
    unknown.write_text("max_stepz: 3\n")
    assert "unknown option(s) ['max_stepz']" in one_error_line(
        capsys, main(run_args(tmp_path / "o", "--config", str(unknown)))
    )


def test_config_accepts_dashed_and_underscored_keys(tmp_path):
    config = tmp_path / "run.yaml"
    config.write_text("max-steps: 7\nlearning_rate: 0.01\nwarmup-updates: 0\n")
    args = parse_args(["--output-dir", str(tmp_path), "--config", str(config)])
    assert (args.max_steps, args.learning_rate, args.warmup_updates) == (7, 0.01, 0)
    assert parse_args(["--output-dir", str(tmp_path), "--config", str(config), "--max-steps", "9"]).max_steps == 9


def write_corpus(root: Path, de: bytes, en: bytes) -> Path:
    folder = root / "wmt-newstest-multiway"
    folder.mkdir(parents=True)
    (folder / "newstest2009.de").write_bytes(de)
    (folder / "newstest2009.en").write_bytes(en)
    return folder


@pytest.mark.parametrize(
    ("de", "en", "expected"),
    [
        (b"eins\nzwei\ndrei\n", b"one\ntwo\n", r"newstest2009.de has 3 lines, {folder}/newstest2009.en has 2 lines"),
        (b"gut\nsch\xf6n\n", b"good\nnice\n", "{folder}/newstest2009.de:2: not valid UTF-8"),
        (b"", b"", "{folder}/newstest2009.de is empty (0 lines)"),
        (b"\n  \n\n", b"\n\n\n", "{folder}/newstest2009.de has only blank lines (3 lines)"),
    ],
)
def test_bad_corpus_files(tmp_path, capsys, tokenizer_dir, de, en, expected):
    folder = write_corpus(tmp_path / "data", de, en)
    argv = run_args(tmp_path / "out", "--data-dir", str(tmp_path / "data"), "--pairs", "de-en")
    for tokenizer in (["--tokenizer", str(tokenizer_dir)], []):  # with and without training a BPE
        line = one_error_line(capsys, main(argv + tokenizer))
        assert expected.format(folder=folder) in line


def test_missing_corpus_folder(tmp_path, capsys, tokenizer_dir):
    (tmp_path / "data").mkdir()
    line = one_error_line(capsys, main(run_args(tmp_path / "out", "--data-dir", str(tmp_path / "data"))))
    assert f"corpus folder {tmp_path / 'data' / 'wmt-newstest-multiway'} does not exist" in line
    assert "--data-dir" in line and "$HF_TLASER_DATA" in line


def test_blank_texts_do_not_make_a_tokenizer():
    from hf_tlaser import train_tokenizer
    from hf_tlaser.errors import UsageError

    with pytest.raises(UsageError, match="no text to train the tokenizer on"):
        train_tokenizer(texts=["", "  ", "\t"], vocab_size=100, show_progress=False)


def test_a_finished_run_is_not_overwritten(finished_run, capsys, tokenizer_dir):
    out, log = finished_run
    before = (out / "model.safetensors").stat().st_mtime_ns
    line = one_error_line(capsys, main(run_args(out, "--max-steps", "2", tokenizer_dir=tokenizer_dir)))
    assert f"--output-dir {out} already holds a run" in line
    assert "--resume auto" in line and "--overwrite" in line
    assert (out / "model.safetensors").stat().st_mtime_ns == before
    # the first run logged its precision, threads and the checkpoint-free start
    assert "precision: fp32 (fp32 requested" in log and "torch threads:" in log
    saved = json.loads((out / "hf_tlaser_train.json").read_text())
    assert saved["precision"]["precision"] == "fp32" and saved["precision"]["requested"] == "fp32"


def test_overwrite_replaces_only_the_runs_own_files(finished_run, tmp_path, tokenizer_dir):
    out = tmp_path / "run"
    shutil.copytree(finished_run[0], out)
    (out / "notes.txt").write_text("mine")
    rc, log = run_main(
        run_args(out, "--max-steps", "1", "--save-steps", "100", "--overwrite", tokenizer_dir=tokenizer_dir)
    )
    assert rc == 0
    assert (out / "notes.txt").read_text() == "mine"
    assert not (out / "checkpoint-2").exists()
    assert json.loads((out / "trainer_state.json").read_text())["global_step"] == 1
    removing = next(line for line in log.splitlines() if line.startswith("--overwrite: removing"))
    assert removing.startswith(f"--overwrite: removing the previous run's outputs in {out}: ")
    assert {"checkpoint-2", "config.json", "model.safetensors", "tokenizer.json"} <= set(
        removing.split(": ")[-1].split(", ")
    )
    assert f"--overwrite: keeping 1 other file(s) in {out}: notes.txt" in log


@pytest.mark.parametrize(
    ("model", "extra", "expected"),
    [
        ("tlaser", [], "--model tlaser, but {out} was trained with --model ctlaser --preset tiny"),
        ("laser6", [], "--model laser6, but {out} was trained with --model ctlaser --preset tiny"),
        ("ctlaser", ["--set", "distance_beta=0.5"], "distance_beta: 0.25 in the checkpoint, 0.5 now"),
    ],
)
def test_resume_refuses_another_architecture(finished_run, capsys, model, extra, expected):
    out = finished_run[0]
    argv = run_args(out, "--max-steps", "3", "--resume", "auto", *extra, model=model)
    line = one_error_line(capsys, main(argv))
    assert expected.format(out=out) in line


def test_resume_loads_the_runs_tokenizer(finished_run, tmp_path):
    out = tmp_path / "run"
    shutil.copytree(finished_run[0], out)
    tokenizer_bytes = (out / "tokenizer.json").read_bytes()
    rc, log = run_main(run_args(out, "--max-steps", "3", "--save-steps", "100", "--resume", "auto"))  # no --tokenizer
    assert rc == 0
    assert f"resuming from {out / 'checkpoint-2'} (step 2)" in log
    assert f"(step 2); tokenizer: {out}" in log and "(saved with the run)" in log and "training a" not in log
    assert (out / "tokenizer.json").read_bytes() == tokenizer_bytes
    assert json.loads((out / "trainer_state.json").read_text())["global_step"] == 3


def test_resume_auto_without_checkpoint(tmp_path, capsys):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "config.json").write_text("{}")
    line = one_error_line(capsys, main(run_args(tmp_path / "out", "--resume", "auto")))
    assert f"--resume auto: {tmp_path / 'out'} holds no checkpoint-* folder" in line


def test_truncated_checkpoint(finished_run, tmp_path, capsys):
    out = tmp_path / "run"
    shutil.copytree(finished_run[0], out)
    weights = out / "checkpoint-2" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    line = one_error_line(capsys, main(run_args(out, "--max-steps", "3", "--resume", "auto")))
    assert f"{weights} is truncated or corrupt" in line


def test_tokenizer_special_ids_go_into_the_config(tmp_path, tokenizer_dir):
    moved = tmp_path / "tok"
    shutil.copytree(tokenizer_dir, moved)
    config = json.loads((moved / "tokenizer_config.json").read_text())
    config["pad_token"] = "<unk>"  # pad id 1 instead of 0
    (moved / "tokenizer_config.json").write_text(json.dumps(config))
    out = tmp_path / "run"
    rc, log = run_main(run_args(out, "--max-steps", "1", "--save-steps", "100", tokenizer_dir=moved))
    assert rc == 0
    assert "special-token ids from the tokenizer: pad_token_id=1 (config default 0)" in log
    saved = json.loads((out / "config.json").read_text())
    assert (saved["pad_token_id"], saved["eos_token_id"], saved["cls_token_id"]) == (1, 2, 3)
    assert saved["decoder_start_token_id"] == saved["eos_token_id"]


def test_tokenizer_without_a_required_token(tmp_path, capsys, tokenizer_dir):
    moved = tmp_path / "tok"
    shutil.copytree(tokenizer_dir, moved)
    config = json.loads((moved / "tokenizer_config.json").read_text())
    config.pop("cls_token")
    (moved / "tokenizer_config.json").write_text(json.dumps(config))
    line = one_error_line(capsys, main(run_args(tmp_path / "out", tokenizer_dir=moved)))
    assert f"--tokenizer {moved} has no cls_token" in line


def test_help_shows_defaults_and_choices(monkeypatch):
    monkeypatch.setenv("COLUMNS", "1000")  # no line wrapping inside the values
    text = build_parser().format_help()
    assert "--batching {pair,multiway}" in text
    assert "--precision {auto,fp32,bf16,fp16}" in text
    assert "the default corpora and pivots give the paper's de-en,de-es,en-es,es-en,fr-en,fr-es,it-en,it-es)" in text
    assert "(default: en,es)" in text  # --pivots
    assert "moses:FOLDER" in text and "hf:ID_OR_FOLDER[:config=NAME]" in text  # --corpora specs
    assert "(default: 1000)" in text  # --max-steps
    assert "(default: wmt-newstest-multiway,europarl-v2-it-en,multi30k," in text  # --corpora
    assert (
        "read only the first N lines of every corpus file (default: the preset's: paper all, small all, tiny 60000)"
        in text
    )
    assert "cap on the sentences of a micro-batch" in text  # --max-sentences: each recipe flag says what it does


def test_the_flags_are_the_run_spec(tmp_path):
    """One flag per RunSpec field, in its order (the record's ``args``), with its default."""
    dests = [action.dest for action in build_parser()._actions if action.dest != "help"]
    assert list(dict.fromkeys(dests)) == [item.name for item in fields(RunSpec)]
    spec = parse_args(["--output-dir", str(tmp_path)])
    assert spec == RunSpec(output_dir=str(tmp_path))
    assert list(spec.to_dict()) == list(dict.fromkeys(dests))


def test_bf16_flag_is_an_alias(tmp_path, caplog):
    assert parse_args(["--output-dir", str(tmp_path), "--bf16"]).precision == "bf16"
    assert "--bf16 is deprecated: use --precision bf16" in caplog.text
    assert parse_args(["--output-dir", str(tmp_path)]).precision == "auto"


def test_time_budget_says_where_it_stopped(caplog):
    from transformers import TrainerControl, TrainerState

    callback = TimeBudgetCallback(0.0)
    state = TrainerState(global_step=3, max_steps=10)
    callback.on_train_begin(None, state, TrainerControl())
    with caplog.at_level(logging.INFO):
        control = callback.on_step_end(None, state, TrainerControl())
    assert control.should_training_stop and control.should_save
    assert "stopped by --max-minutes after 3 of 10 updates" in caplog.text


def test_the_bar_shows_a_compact_line_and_the_log_file_the_full_record(tmp_path, capsys, tokenizer_dir):
    """Each training log beside the bar: the short names, 4 significant digits; ``train_log.jsonl``: every record of
    ``trainer_state.json``'s log history, in full; a resumed run's file continues from its checkpoint's records."""
    out = tmp_path / "run"
    for extra, logged in (([], 2), (["--resume", str(out / "checkpoint-1")], 1)):
        assert main(run_args(out, "--max-steps", "2", "--save-steps", "1", *extra, tokenizer_dir=tokenizer_dir)) == 0
        printed = capsys.readouterr()
        lines = (printed.out + printed.err).splitlines()
        shown = [ast.literal_eval(line) for line in lines if line.startswith("{'loss'")]
        assert len(shown) == logged  # --logging-steps 1
        for line in shown:
            assert {"loss", "mt", "dist", "align", "cos", "ccos", "tok/s", "lr"} <= set(line)
            assert set(line) <= set(LogParts.SHORT_NAMES.values()) | {"epoch"}
            assert all(len(f"{float(value):.4g}") == len(str(value)) for value in line.values())  # 4 digits, no more
        records = [json.loads(line) for line in (out / LogParts.FILE).read_text().splitlines()]
        assert records == json.loads((out / "trainer_state.json").read_text())["log_history"]
        assert [record.get("step") for record in records] == [1, 2, 2]  # two updates and the summary
        full = {"loss_mt_per_token", "loss_distance_per_token", "d_p", "v_norm", "mean_cosine", "centered_cosine"}
        full |= {"tokens_per_second", "pairs", "grad_norm", "learning_rate", "epoch", "step"}
        assert full <= set(records[0])

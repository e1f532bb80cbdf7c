"""Nothing of the user's lost, nothing stale reused, in ``hf-tlaser embed``, ``mine``, ``mine-pipeline`` and
``export`` (issue 71): an output never replaces an input (:func:`hf_tlaser.guards.refuse_outputs_over_inputs`); a
pipeline task is done when its record says so, so a cut output or embeddings replaced in place run their tasks again;
damaged files of a work folder and input problems inside a task are one line (exit 2), as ``hf-tlaser mine`` gives
them."""

from __future__ import annotations

import errno
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from test_mine import parallel_corpus, write_embeddings

from hf_tlaser.bitext import texts
from hf_tlaser.errors import UsageError
from hf_tlaser.guards import refuse_outputs_over_inputs
from hf_tlaser.inference import embed, mine, pipeline
from hf_tlaser.inference.store import describe, write_sidecar

pytest.importorskip("faiss")


# --- the output guard ----------------------------------------------------------------------------------------------


def test_the_guard_refuses_an_output_that_is_or_contains_an_input(tmp_path):
    text = tmp_path / "data" / "en.txt"
    text.parent.mkdir()
    text.write_text("hello\n")
    (tmp_path / "link.txt").symlink_to(text)
    os.link(text, tmp_path / "hard.txt")
    with pytest.raises(UsageError, match=r"^--output .*link.txt: is the input --tgt \(.*en.txt\); .*not even with"):
        refuse_outputs_over_inputs({"--output": tmp_path / "link.txt"}, {"--tgt": text})
    with pytest.raises(UsageError, match="--output .*hard.txt: is the input --tgt"):  # a hard link is the file
        refuse_outputs_over_inputs({"--output": tmp_path / "hard.txt"}, {"--tgt": str(text)})
    with pytest.raises(UsageError, match=r"--work .*data: contains the input --tgt \(.*en.txt\)"):
        refuse_outputs_over_inputs({"--work": tmp_path / "x" / ".." / "data"}, {"--src": None, "--tgt": [text]})
    with pytest.raises(UsageError, match="--histogram .*en.txt: is the input --src-embeddings"):  # several paths
        refuse_outputs_over_inputs({"--histogram": [tmp_path / "a.png", text]}, {"--src-embeddings": ["b", text]})
    refuse_outputs_over_inputs(
        {"--output": tmp_path / "data" / "pairs.tsv", "--histogram": None, "--lines": [tmp_path / "new" / "x"]},
        {"--src": text, "MODEL": tmp_path / "data", "--tgt": None},
    )  # an output inside an input's folder, outputs that do not exist yet: no input is replaced


# --- tiny corpus ---------------------------------------------------------------------------------------------------


@pytest.fixture
def corpus(tmp_path) -> Path:
    """Texts and fp16 embeddings of two sides (60 translations among 30 unmatched lines a side), in a folder of
    this test's own (the tests change them)."""
    folder = tmp_path / "corpus"
    folder.mkdir()
    src, tgt, _ = parallel_corpus(pairs=60, extra=30, dim=16, seed=5)
    (folder / "de.txt").write_text("".join(f"quelle {i}\n" for i in range(len(src))))
    (folder / "en.txt").write_text("".join(f"target {i}\n" for i in range(len(tgt))))
    write_embeddings(folder / "de.npy", src)
    write_embeddings(folder / "en.npy", tgt)
    return folder


def mine_args(corpus: Path, output: Path, *extra: str) -> list[str]:
    return [
        "--src", str(corpus / "de.txt"), "--tgt", str(corpus / "en.txt"),
        "--src-embeddings", str(corpus / "de.npy"), "--tgt-embeddings", str(corpus / "en.npy"),
        "--batch-size", "30", "--index-memory", "0.000002", "--output", str(output), *extra,
    ]  # fmt: skip


def pipeline_args(corpus: Path, output: Path, *extra: str) -> list[str]:
    work = ["--work", str(output.parent / "work"), "--shards", "2", "--launcher", "inline"]
    return [*mine_args(corpus, output, *extra), *work]


def one_line(capsys, command: str) -> str:
    """The one line a refused run printed on stderr (without its ``COMMAND: error:`` prefix)."""
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"{command}: error: "), err
    return err[0].removeprefix(f"{command}: error: ")


def files_of(folder: Path) -> dict[str, bytes]:
    return {str(path.relative_to(folder)): path.read_bytes() for path in sorted(folder.rglob("*")) if path.is_file()}


# --- outputs over inputs -------------------------------------------------------------------------------------------


def test_mine_pipeline_refuses_an_output_that_is_its_own_target_text(corpus, capsys):
    """Case 1: ``--output en.txt --overwrite`` where en.txt is ``--tgt``: refused, the text whole, no work folder."""
    before = files_of(corpus)
    args = pipeline_args(corpus, corpus / "en.txt", "--overwrite")
    assert pipeline.main(args) == 2
    line = one_line(capsys, "hf-tlaser mine-pipeline")
    assert line.startswith(f"--output {corpus / 'en.txt'}: is the input --tgt") and "not even with --overwrite" in line
    assert files_of(corpus) == before and not (corpus / "work").exists()
    args = pipeline_args(corpus, corpus / "pairs.tsv")
    args[args.index("--work") + 1] = str(corpus)  # a work folder holding the inputs
    assert pipeline.main(args) == 2
    assert one_line(capsys, "hf-tlaser mine-pipeline").startswith(f"--work {corpus}: contains the input --src")
    assert files_of(corpus) == before


def test_mine_refuses_a_histogram_over_its_source_embeddings(corpus, tmp_path, capsys):
    """Case 2: ``--histogram de.npy --overwrite`` where de.npy is ``--src-embeddings``: refused, the embeddings (and
    their sidecar) whole."""
    before = files_of(corpus)
    args = mine_args(corpus, tmp_path / "pairs.tsv", "--histogram", str(corpus / "de.npy"), "--overwrite")
    assert mine.main(args) == 2
    assert one_line(capsys, "hf-tlaser mine").startswith(f"--histogram {corpus / 'de.npy'}: is the input --src-emb")
    assert mine.main(mine_args(corpus, corpus / "en.npy.json", "--overwrite")) == 2
    assert "is the input --tgt-embeddings" in one_line(capsys, "hf-tlaser mine")  # the sidecar is an input too
    assert files_of(corpus) == before and not list(tmp_path.glob("pairs*"))


def test_a_failed_overwrite_leaves_the_old_output_whole_and_no_file_of_the_users_touched(
    corpus, tmp_path, monkeypatch, capsys
):
    """``--overwrite`` writes a temporary sibling of this process's own name, then renames it: a write failing midway
    (a full disk) leaves the old TSV whole, and a user's file named as a fixed temporary name would be is untouched."""
    out = tmp_path / "pairs.tsv"
    assert mine.main(mine_args(corpus, out)) == 0
    before = files_of(tmp_path)
    (tmp_path / "pairs.tsv.tmp").write_text("a file of the user's\n")
    calls = iter(range(1000))

    def full_disk(text: str) -> tuple[str, bool]:
        if next(calls) == 5:
            raise OSError(errno.ENOSPC, "No space left on device")
        return text, False

    monkeypatch.setattr(texts, "tsv_field", full_disk)
    capsys.readouterr()
    assert mine.main([*mine_args(corpus, out), "--overwrite"]) == 2
    assert "No space left on device" in one_line(capsys, "hf-tlaser mine")
    assert files_of(tmp_path) == {**before, "pairs.tsv.tmp": b"a file of the user's\n"}


def test_embed_refuses_an_input_among_the_files_of_its_run(corpus, tmp_path, capsys):
    """``hf-tlaser embed --input X.npy.lock --output X.npy``: the lock file of the run would be truncated, then
    removed; refused before the model loads, the text whole."""
    text = tmp_path / "out.npy.lock"
    text.write_text("a sentence\n")
    assert embed.main(["--model", "no/such-model", "--input", str(text), "--output", str(tmp_path / "out.npy")]) == 2
    assert one_line(capsys, "hf-tlaser embed").startswith(f"--output {text}: is the input --input")
    assert text.read_text() == "a sentence\n"


def test_export_refuses_a_calibration_text_among_its_outputs(tlaser_folder, tmp_path, capsys):
    from hf_tlaser.backend import export

    folder = Path(shutil.copytree(tlaser_folder, tmp_path / "model"))
    calibration = folder / "openvino" / "openvino_model_qint8_static.xml"
    calibration.parent.mkdir()
    calibration.write_text("ein Satz\n")
    args = [str(folder), "--backend", "openvino", "--quantize", "int8-static", "--calibration", str(calibration)]
    assert export.main([*args, "--overwrite"]) == 2
    assert one_line(capsys, "hf-tlaser export").startswith(f"export {calibration}: is the input --calibration")
    assert calibration.read_text() == "ein Satz\n"


# --- a task is done when its record says so ------------------------------------------------------------------------


def test_a_cut_write_slice_is_written_again(corpus, tmp_path, capsys):
    """Case 4: half of ``write/KEY/0000.tsv`` cut, the command run again on the same ``--output``: the slice is
    written again, and the TSV and the summary agree with the first run."""
    out = tmp_path / "pairs.tsv"
    assert pipeline.main(pipeline_args(corpus, out)) == 0
    first, summary = out.read_bytes(), json.loads(out.with_suffix(".summary.json").read_text())
    assert first.count(b"\n") == summary["counts"]["written"] > 10
    (piece,) = (tmp_path / "work" / "write").glob("*/0000.tsv")
    piece.write_bytes(piece.read_bytes()[: len(piece.read_bytes()) // 2])
    capsys.readouterr()
    assert pipeline.main([*pipeline_args(corpus, out), "--overwrite"]) == 0
    assert "stage write: 1 tasks run, 1 done before" in capsys.readouterr().out
    assert out.read_bytes() == first
    assert json.loads(out.with_suffix(".summary.json").read_text())["counts"] == summary["counts"]


def test_embeddings_replaced_in_place_run_the_stages_that_read_them_again(corpus, tmp_path, capsys):
    """Case 5: the target embeddings embedded again in place (same fingerprint and width, fp32 instead of fp16,
    slightly other values): the stages from ``train`` on run again (``lines`` and ``unique`` read no vector), and the
    pairs are ``hf-tlaser mine``'s on the current files."""
    out = tmp_path / "staged.tsv"
    assert pipeline.main(pipeline_args(corpus, out)) == 0
    stale = out.read_bytes()
    vectors = np.load(corpus / "en.npy").astype(np.float32)
    vectors += np.random.default_rng(0).normal(scale=0.05, size=vectors.shape).astype(np.float32)
    np.save(corpus / "en.npy", vectors)
    meta = json.loads((corpus / "en.npy.json").read_text())
    write_sidecar(corpus / "en.npy", {**meta, "dtype": "float32", "precision": "bf16"})
    assert mine.main(mine_args(corpus, tmp_path / "one.tsv")) == 0
    assert (tmp_path / "one.tsv").read_bytes() != stale  # the new vectors mine other scores
    capsys.readouterr()
    assert pipeline.main([*pipeline_args(corpus, out), "--overwrite"]) == 0
    printed = capsys.readouterr().out
    assert "stage lines: 0 tasks run" in printed and "stage unique: 0 tasks run" in printed
    assert "stage train: 2 tasks run, 0 done before" in printed and "stage write: 2 tasks run" in printed
    assert out.read_bytes() == (tmp_path / "one.tsv").read_bytes()


# --- damaged or foreign files of a work folder ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "stage", "writer"),
    [
        ("mined.npz", "write", "mine"),
        ("rows.src.npy", "search", "unique"),
        ("index/tgt.0001.faiss", "search", "populate"),
    ],
)
def test_a_damaged_work_file_is_one_line_naming_it_and_the_stage_that_rewrites_it(
    corpus, tmp_path, capsys, name, stage, writer
):
    """A damaged file of an earlier stage than those ``--stage`` runs: one line naming the file and the stage to run
    again (which runs its task again: the record no longer matches); ``--stage all`` runs it again itself."""
    out = tmp_path / "pairs.tsv"
    assert pipeline.main(pipeline_args(corpus, out)) == 0
    first = out.read_bytes()
    damaged = tmp_path / "work" / name
    damaged.write_bytes(damaged.read_bytes()[:100])
    capsys.readouterr()
    assert pipeline.main([*pipeline_args(corpus, out, "--overwrite"), "--stage", stage]) == 2
    line = one_line(capsys, "hf-tlaser mine-pipeline")
    assert line.startswith(f"--stage {stage}: needs the files of the stage {writer}, and {damaged} does not match")
    assert line.endswith(f"run --stage {writer} again (it runs that task again), or --stage all")
    assert pipeline.main([*pipeline_args(corpus, out, "--overwrite"), "--stage", writer]) == 0
    assert f"stage {writer}: 1 tasks run" in capsys.readouterr().out
    damaged.write_bytes(b"")
    assert pipeline.main([*pipeline_args(corpus, out, "--overwrite")]) == 0
    assert f"stage {writer}: 1 tasks run" in capsys.readouterr().out and out.read_bytes() == first


def test_a_damaged_pipeline_json_or_record_is_one_line_or_run_again(corpus, tmp_path, capsys):
    out = tmp_path / "pairs.tsv"
    assert pipeline.main(pipeline_args(corpus, out)) == 0
    work = tmp_path / "work"
    record = work / "stats" / "search.fwd.0.json"
    record.write_text("{")  # a record cut: its task runs again
    capsys.readouterr()
    assert pipeline.main([*pipeline_args(corpus, out), "--overwrite"]) == 0
    assert "stage search: 1 tasks run, 3 done before" in capsys.readouterr().out
    foreign = json.loads(record.read_text())
    foreign["used"]["pipeline"] = "0" * 64  # a record of another pipeline's task
    record.write_text(json.dumps(foreign))
    assert pipeline.main([*pipeline_args(corpus, out), "--overwrite"]) == 0
    assert "stage search: 1 tasks run, 3 done before" in capsys.readouterr().out
    (work / "pipeline.json").write_text('{"format": ')
    assert pipeline.main([*pipeline_args(corpus, out), "--overwrite"]) == 2
    line = one_line(capsys, "hf-tlaser mine-pipeline")
    assert line.startswith(f"--work {work}: its pipeline.json is unreadable") and "remove the folder" in line


# --- input problems inside a task: what mine says ------------------------------------------------------------------


def test_a_vector_that_is_not_finite_is_the_line_mine_gives(corpus, tmp_path, capsys):
    vectors = np.load(corpus / "en.npy").astype(np.float32)
    vectors[37, 2] = np.nan
    write_embeddings(corpus / "en.npy", vectors)
    assert mine.main(mine_args(corpus, tmp_path / "one.tsv")) == 2
    expected = one_line(capsys, "hf-tlaser mine")
    assert pipeline.main(pipeline_args(corpus, tmp_path / "staged.tsv")) == 2
    assert one_line(capsys, "hf-tlaser mine-pipeline") == expected
    assert expected.startswith(f"--tgt-embeddings: the vector of line 38 of {corpus / 'en.txt'} is not finite")


@pytest.mark.parametrize("launcher", ["inline", "local"])
def test_a_line_that_is_not_utf8_is_the_line_mine_gives(corpus, tmp_path, capsys, launcher):
    """Inline, and in a local job (a fresh process: its failure comes back as its traceback's text)."""
    pytest.importorskip("submitit")
    lines = (corpus / "de.txt").read_bytes().split(b"\n")
    lines[70] = b"quelle \xff"
    (corpus / "de.txt").write_bytes(b"\n".join(lines))
    assert mine.main(mine_args(corpus, tmp_path / "one.tsv")) == 2
    expected = one_line(capsys, "hf-tlaser mine")
    args = pipeline_args(corpus, tmp_path / "staged.tsv")
    args[args.index("--launcher") + 1] = launcher
    assert pipeline.main(args) == 2
    assert one_line(capsys, "hf-tlaser mine-pipeline") == expected
    assert expected.startswith(f"--src {corpus / 'de.txt'}:71: not valid UTF-8") and "iconv" in expected


# --- files named in errors -----------------------------------------------------------------------------------------


def test_embeddings_of_other_widths_are_named_by_their_files(corpus, tmp_path, capsys):
    """Mismatched widths name both files (their paths and models), never ``? (None ...)``."""
    write_embeddings(corpus / "en.npy", np.load(corpus / "en.npy")[:, :8])
    assert pipeline.main(pipeline_args(corpus, tmp_path / "pairs.tsv")) == 2
    line = one_line(capsys, "hf-tlaser mine-pipeline")
    assert f"{corpus / 'de.npy'} (tiny, fingerprint model-a, 16 dimensions) and {corpus / 'en.npy'} (tiny" in line
    assert "?" not in line and "None" not in line
    shards = {"path": None, "paths": ["de.0.npy", "de.1.npy"], "model": "m", "fingerprint": "f", "dim": 4}
    assert describe(shards) == "de.0.npy + de.1.npy (m, fingerprint f, 4 dimensions)"

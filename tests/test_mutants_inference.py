"""Behaviour that the mutation run of issue 50 (``scripts/mutation.py --modules inference,store,backends``,
docs/testing.md) found unpinned in embed, mine, the embeddings store and the backends: the messages a user reads
(which argument, which file, which process), the log lines of a search, a GPU never used under ``--device cpu``, an
index trained on distinct rows, the sidecar's layout, a finished output that ``--resume`` leaves alone, the CPU's
flags read from a damaged ``/proc/cpuinfo``, the ARM int8 target and the export command of a quantised backend; and the
width a model's files state, which ``embed`` checks the free space with before the model loads. No model weights
beyond the session's tiny folders."""

from __future__ import annotations

import errno
import json
import logging
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from hf_tlaser.backend import runtime as backends
from hf_tlaser.bitext import index, mining
from hf_tlaser.encoders import vector_width
from hf_tlaser.errors import UsageError
from hf_tlaser.guards import OutputLock
from hf_tlaser.inference import mine, store
from hf_tlaser.inference.store import EmbeddingsWriter, describe, partial_paths, read_embeddings, sidecar_path
from hf_tlaser.teachers.targets import load_teacher
from tests.test_mine import write_embeddings
from tests.tiny_models import st_modules

# --- the width before the model loads ---------------------------------------------------------------------------------


def st_model(folder: Path, backbone: Path, pooling: dict, dense: int | None) -> Path:
    """A sentence-transformers folder over ``backbone`` with a Pooling of ``pooling``'s modes and an optional Dense."""
    from sentence_transformers import SentenceTransformer

    modules = st_modules()
    layers = [modules.Transformer(str(backbone)), modules.Pooling(32, **pooling)]
    if dense:
        layers.append(modules.Dense(32, dense))
    SentenceTransformer(modules=layers, device="cpu").save(str(folder))
    return folder


@pytest.mark.parametrize(
    ("pooling", "dense", "width"),
    [({"pooling_mode": "mean"}, None, 32), ({"pooling_mode": ["cls", "mean", "max"]}, None, 96), ("cls", 12, 12)],
)
def test_the_width_the_files_state_is_the_loaded_models(pooling, dense, width, backbone_dir, tmp_path):
    folder = st_model(
        tmp_path / "st", backbone_dir, pooling if isinstance(pooling, dict) else {"pooling_mode": pooling}, dense
    )
    assert vector_width(str(folder)) == load_teacher(str(folder), device="cpu", argument="--model").dim == width


def test_the_width_of_an_hf_tlaser_folder_and_of_the_older_pooling_layout(tlaser_folder, data_dir, tmp_path):
    assert vector_width(str(tlaser_folder)) == load_teacher(str(tlaser_folder), device="cpu").dim
    assert vector_width(str(data_dir / "multilingual-e5-small")) == 384  # its Pooling has one flag per mode
    (tmp_path / "bare").mkdir()
    (tmp_path / "bare" / "modules.json").write_text('[{"type": "x.Pooling", "path": "p"}]')
    assert vector_width(str(tmp_path / "bare")) is None  # the files do not say: checked once the model is loaded


def test_embed_checks_the_free_space_before_the_model_loads(tlaser_folder, tmp_path, monkeypatch, capsys):
    """The width comes from the folder's config, so a full disk stops ``embed`` before any weight is read."""
    import shutil

    from hf_tlaser.cli import main
    from hf_tlaser.inference import embed

    def no_loading(*args, **kwargs):
        raise AssertionError("the model was loaded before the free space was checked")

    source = tmp_path / "in.txt"
    source.write_text("one\ntwo\n", encoding="utf-8")
    monkeypatch.setattr(embed, "load", no_loading)
    monkeypatch.setattr(shutil, "disk_usage", lambda path: shutil._ntuple_diskusage(10**12, 10**12, 0))
    code = main(["embed", "--model", str(tlaser_folder), "--input", str(source), "--output", str(tmp_path / "o.npy")])
    err = capsys.readouterr().err
    assert code == 2 and "needs about" in err and "Traceback" not in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt"]


# --- messages ---------------------------------------------------------------------------------------------------------


def test_a_held_output_says_how_to_go_on(tmp_path):
    with OutputLock(tmp_path / "out.npy", "--output"):
        with pytest.raises(
            UsageError,
            match=r"^--output .*out.npy: another run \(pid \d+\) is writing it \(.*\); wait for it to end, or stop it$",
        ):
            OutputLock(tmp_path / "out.npy", "--output").acquire()


@pytest.mark.parametrize("flag", ["--neighbours", "--nprobe", "--refine"])
def test_a_search_setting_below_one_is_named(flag):
    args = dict(model="m", src_embeddings=None, tgt_embeddings=None, neighbours=4, nprobe=32, refine=4)
    args[flag.lstrip("-")] = 0
    with pytest.raises(UsageError, match=f"^{flag} 0: must be at least 1$"):
        mine.check_args(SimpleNamespace(**args, threshold=None, batch_size=1, index_memory=1.0, train_size=0))


def test_shards_that_overlap_are_named_without_an_argument(tmp_path):
    rng = np.random.default_rng(0)
    paths = []
    for name, start, stop in (("a", 0, 3), ("b", 2, 4)):
        path = tmp_path / f"{name}.npy"
        write_embeddings(path, rng.normal(size=(stop - start, 4)), lines=4)
        meta = json.loads(sidecar_path(path).read_text())
        store.write_sidecar(path, {**meta, "start": start, "stop": stop, "count": stop - start})
        paths.append(path)
    with pytest.raises(UsageError, match=r"^embeddings: .*b.npy starts at line 2: overlaps; give each shard once$"):
        read_embeddings(paths)


def test_a_file_that_disagrees_with_its_sidecar_is_named_with_its_argument(tmp_path):
    path = tmp_path / "src.npy"
    write_embeddings(path, np.ones((3, 4)))
    np.save(path, np.ones((3, 5), dtype=np.float16))
    with pytest.raises(UsageError, match=rf"^--src-embeddings {path}: the array \(\(3, 5\).*disagree"):
        read_embeddings(path, "--src-embeddings")


def test_two_models_are_told_apart_by_their_fingerprints():
    meta = {"path": "a.npy", "model": "m", "fingerprint": "0123456789abcdef", "dim": 8}
    assert describe(meta) == "a.npy (m, fingerprint 0123456789ab, 8 dimensions)"


# --- the embeddings store ---------------------------------------------------------------------------------------------


def test_resume_leaves_a_finished_output_alone(tmp_path):
    path = tmp_path / "done.npy"
    write_embeddings(path, np.ones((2, 4)))
    assert EmbeddingsWriter.check_output(path, resume=True) is True
    with pytest.raises(UsageError, match="exists"):
        EmbeddingsWriter.check_output(path, resume=False)


def test_a_failed_allocation_is_one_line_naming_the_partial_file(tmp_path, monkeypatch):
    def refused(path, rows, dim, dtype):
        raise OSError(errno.EDQUOT, "Disk quota exceeded")

    monkeypatch.setattr(store, "allocate", refused)
    path = tmp_path / "out.npy"
    with pytest.raises(UsageError, match=rf"writing {partial_paths(path)[0]} failed .*Disk quota exceeded"):
        EmbeddingsWriter.prepare(path, 4, 3, "float16", {"dim": 3}, resume=False)
    assert list(tmp_path.iterdir()) == []


def test_resume_without_a_run_says_it_starts_one(tmp_path, caplog):
    path = tmp_path / "out.npy"
    with caplog.at_level(logging.INFO, logger="hf_tlaser.inference.store"):
        assert EmbeddingsWriter.prepare(path, 4, 3, "float16", {"dim": 3}, resume=True) == 0
    assert f"--resume: no unfinished run at {partial_paths(path)[0]}; starting it" in caplog.text


def test_a_filesystem_that_cannot_allocate_ahead_is_warned_of_and_the_file_still_has_its_size(
    tmp_path, monkeypatch, caplog
):
    import os

    def unsupported(fd, offset, length):
        raise OSError(errno.EOPNOTSUPP, "Operation not supported")

    monkeypatch.setattr(os, "posix_fallocate", unsupported)
    path = tmp_path / "x.npy"
    with caplog.at_level(logging.WARNING, logger="hf_tlaser.inference.store"):
        store.allocate(path, 5, 3, "float32")
    assert (
        f"{path}: the filesystem cannot allocate ahead" in caplog.text and "a full disk may stop the run" in caplog.text
    )
    assert np.load(path, mmap_mode="r").shape == (5, 3)


def test_the_sidecar_is_indented_json_that_keeps_non_ascii_text(tmp_path):
    meta = {"format": store.FORMAT, "input": "données/ünï.txt", "dim": 4}
    written = store.write_sidecar(tmp_path / "x.npy", meta)
    expected = f'{{\n  "format": "{store.FORMAT}",\n  "input": "données/ünï.txt",\n  "dim": 4\n}}\n'
    assert written.read_text(encoding="utf-8") == expected


# --- the search ------------------------------------------------------------------------------------------------------


def test_cpu_never_searches_on_a_gpu_that_faiss_sees(monkeypatch):
    monkeypatch.setattr(index, "require_faiss", lambda: SimpleNamespace(get_num_gpus=lambda: 1))
    assert index.use_gpu("cpu") is False
    assert index.use_gpu("auto") is True and index.use_gpu("gpu") is True


def test_an_index_is_trained_on_distinct_rows(monkeypatch):
    seen = []

    class Index:
        is_trained = False

        def train(self, vectors):
            seen.append(np.asarray(vectors))

    monkeypatch.setattr(index, "require_faiss", lambda: SimpleNamespace(try_extract_index_ivf=lambda index: None))
    array = np.eye(50, dtype=np.float32)
    index.train(Index(), index.Rows(array, np.arange(50)), index.SearchPlan(train_size=50, seed=3))
    assert len(seen) == 1 and seen[0].shape == (50, 50)
    assert len({row.argmax() for row in seen[0]}) == 50  # each row once


def test_the_search_logs_what_it_searched_and_mined(caplog):
    rng = np.random.default_rng(0)
    rows = index.Rows(rng.normal(size=(20, 8)).astype(np.float32), np.arange(20))
    with caplog.at_level(logging.INFO, logger="hf_tlaser.bitext"):
        mined = mining.mine_vectors(rows, rows, k=2, threshold=100.0, plan=index.SearchPlan(index="Flat"))
    assert "searched Flat database rows 0-20 with 20 queries" in caplog.text
    assert f"mined {len(mined.scores)} pairs (0 above the threshold) in " in caplog.text


# --- the backends ----------------------------------------------------------------------------------------------------


def test_the_cpu_flags_are_read_past_a_byte_that_is_not_utf8(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_bytes(b"model name\t: Caf\xe9 CPU\nflags\t\t: fpu avx2 avx512f\n")
    assert backends.cpu_flags(info) == {"fpu", "avx2", "avx512f"}
    info.write_bytes(b"Features\t: fp asimd\n")  # ARM's line
    assert backends.cpu_flags(info) == {"fp", "asimd"}
    assert backends.cpu_flags(tmp_path / "none") == set()


def test_an_arm_cpu_takes_the_arm64_int8_target(monkeypatch):
    import platform

    monkeypatch.setattr(platform, "machine", lambda: "aarch64")
    assert backends.widest_target() == "arm64"


@pytest.mark.parametrize(
    ("backend", "command"),
    [
        ("onnx", "hf-tlaser export m --backend onnx"),
        ("onnx-int8", "hf-tlaser export m --backend onnx --quantize int8"),
        (
            "openvino-int8-static",
            "hf-tlaser export m --backend openvino --quantize int8-static --calibration TEXT_FILE",
        ),
    ],
)
def test_the_export_command_of_each_backend(backend, command):
    assert backends.export_command(Path("m"), backend) == command


def test_an_unfinished_run_needs_no_more_room(tmp_path, monkeypatch):
    import shutil

    path = tmp_path / "out.npy"
    EmbeddingsWriter.prepare(path, 4, 3, "float16", {"dim": 3}, resume=False)  # allocated: PATH.partial
    monkeypatch.setattr(shutil, "disk_usage", lambda folder: shutil._ntuple_diskusage(10**12, 10**12, 0))
    EmbeddingsWriter.check_room(path, 4, 3, "float16")  # its blocks are there already
    partial_paths(path)[1].unlink()  # killed before its settings were written: the rows' file decides
    EmbeddingsWriter.check_room(path, 4, 3, "float16")
    with pytest.raises(UsageError, match=r"^--output .*other.npy: the embeddings needs about "):
        EmbeddingsWriter.check_room(tmp_path / "other.npy", 4, 3, "float16")


def test_a_quantised_export_lists_the_file_asked_for_first(tlaser_folder, tmp_path):
    pytest.importorskip("onnxruntime")
    import shutil

    from hf_tlaser.backend.export import export_model

    folder = Path(shutil.copytree(tlaser_folder, tmp_path / "model"))
    written = export_model(folder, "onnx", "int8", cpu="avx2")  # no fp32 file yet: both are written
    assert [item.path for item in written] == [backends.onnx_int8_file("avx2"), backends.ONNX_FILE]
    assert all((folder / item.path).is_file() for item in written)


def test_a_folder_without_exported_files_runs_in_torch_by_default(tlaser_folder):
    assert backends.load_backend(tlaser_folder) is None  # backend "auto": nothing measured, torch


def test_a_long_first_line_after_a_byte_order_mark_is_counted_as_cut(tmp_path):
    """The first read holds 4 x limit + 4 bytes: of four-byte characters after the BOM, exactly ``limit`` of them,
    so only the bytes read after it show that the line goes on."""
    from hf_tlaser.inference.lines import read_lines

    path = tmp_path / "emoji.txt"
    path.write_bytes(b"\xef\xbb\xbf" + ("\U0001f600" * 20 + "\n" + "short\n").encode("utf-8"))
    assert list(read_lines(path, limit=10)) == [("\U0001f600" * 10, True), ("short", False)]

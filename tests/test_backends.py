"""Inference backends (hf_tlaser.backend): ``hf_tlaser.encode(..., backend=)``, ``load_model`` and
``hf-tlaser embed --backend`` run the files ``hf-tlaser export`` wrote and give the torch fp32 vectors (fp32 within
1e-5; int8 within the cosine of tests/test_export.py); ``backend="auto"`` takes a backend only where the folder's
``backends.json`` measured it on this CPU class without quality loss; bad input is one line."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

import hf_tlaser
from hf_tlaser.backend import runtime as backends
from hf_tlaser.backend.export import export_model
from hf_tlaser.backend.measured import MEASURED_FILE
from hf_tlaser.cli import main as hf_tlaser_main
from hf_tlaser.errors import UsageError
from hf_tlaser.inference import read_embeddings
from tests.scripts import load_script

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("onnxruntime") is None, reason="the [onnx] extra is not installed"
)
TEXTS = ["The weather is lovely today.", "Das Wetter ist heute schön.", "x", "Une phrase un peu plus longue."]
FP32_TOL = 1e-5
INT8_COSINE = 0.99


@pytest.fixture(scope="module")
def exported(warm_dir, tmp_path_factory) -> Path:
    """The warm-started tiny cT-LASER (mean pooling, a carried Normalize, a built-in prompt) with its ONNX fp32 file
    and an int8 file for AVX2 (which every x86 CPU that runs the tests has), exported one after the other."""
    folder = Path(shutil.copytree(warm_dir, tmp_path_factory.mktemp("exported") / "model"))
    export_model(folder, "onnx")
    export_model(folder, "onnx", "int8", cpu="avx2")  # reuses the fp32 file
    return folder


@pytest.fixture(scope="module")
def reference(exported) -> np.ndarray:
    model, tokenizer = hf_tlaser.load_model(exported, backend="torch")
    return hf_tlaser.encode(model, tokenizer, TEXTS, autocast_dtype=None, device="cpu")


def record(folder: Path, **by_backend: dict) -> None:
    """A ``backends.json`` for this CPU class."""
    (folder / MEASURED_FILE).write_text(json.dumps({backends.cpu_class(): by_backend}))


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def test_encode_on_each_backend_gives_the_torch_vectors(exported, reference):
    onnx = hf_tlaser.encode(exported, None, TEXTS, backend="onnx")
    assert np.abs(onnx - reference).max() < FP32_TOL
    int8 = hf_tlaser.encode(str(exported), None, TEXTS, backend="onnx-int8")
    assert cosines(int8, reference).min() > INT8_COSINE and not np.allclose(int8, reference, atol=FP32_TOL)
    model, tokenizer = hf_tlaser.load_model(exported, backend="onnx")
    assert isinstance(model, backends.ExportedEncoder) and model.describe() == "onnx (onnx/model.onnx)"
    single = hf_tlaser.encode(model, tokenizer, TEXTS[0], normalize=True)
    assert single.shape == reference[0].shape and abs(np.linalg.norm(single) - 1) < 1e-5
    np.testing.assert_allclose(single, reference[0] / np.linalg.norm(reference[0]), atol=FP32_TOL)


def test_an_exported_encoder_has_a_fingerprint_of_its_own(exported, reference):
    """The files another backend runs are part of what the vectors are (int8 ones differ), so the teacher cache and
    the embeddings' sidecars must not take them for the torch model's."""
    from hf_tlaser.encoders import load

    by_backend = {name: load(str(exported), backend=name) for name in ("torch", "onnx", "onnx-int8")}
    assert len({encoder.fingerprint for encoder in by_backend.values()}) == 3
    assert by_backend["torch"].backend == "torch" and by_backend["onnx"].backend == "onnx (onnx/model.onnx)"
    assert np.abs(by_backend["onnx"].encode(TEXTS) - reference).max() < FP32_TOL


def test_a_torch_model_finds_its_folder_for_a_backend(exported, reference):
    model, tokenizer = hf_tlaser.load_model(exported, backend="torch")
    vectors = hf_tlaser.encode(model, tokenizer, TEXTS, backend="onnx")
    assert np.abs(vectors - reference).max() < FP32_TOL


def test_auto_takes_only_a_backend_measured_here_without_quality_loss(exported, tmp_path):
    folder = Path(shutil.copytree(exported, tmp_path / "model"))
    assert backends.choose_backend(folder) == "torch"  # nothing measured
    fast = {"speedup": 3.0, "ntrex_delta": 0.1, "sib200_delta": -0.4}
    record(folder, **{"onnx-int8": fast, "onnx": {"speedup": 1.2, "ntrex_delta": 0.0, "sib200_delta": 0.0}})
    assert backends.choose_backend(folder) == "onnx-int8"
    model, _ = hf_tlaser.load_model(folder)
    assert isinstance(model, backends.ExportedEncoder) and model.backend == "onnx-int8"
    model, _ = hf_tlaser.load_model(folder, precision="fp32")  # an explicit precision stays in torch
    assert not isinstance(model, backends.ExportedEncoder)
    record(folder, **{"onnx-int8": {**fast, "ntrex_delta": 0.5}})  # lost retrieval quality
    assert backends.choose_backend(folder) == "torch"
    record(folder, **{"onnx-int8": {**fast, "sib200_delta": -1.5}})  # lost classification quality
    assert backends.choose_backend(folder) == "torch"
    record(folder, **{"onnx-int8": {**fast, "speedup": 0.8}})  # slower than torch
    assert backends.choose_backend(folder) == "torch"
    record(folder, **{"openvino": fast})  # no openvino files in the folder
    assert backends.choose_backend(folder) == "torch"
    (folder / MEASURED_FILE).write_text(json.dumps({"some-other-cpu": {"onnx-int8": fast}}))
    assert backends.choose_backend(folder) == "torch"


def test_embed_runs_a_backend_and_records_it(exported, reference, tmp_path):
    source = tmp_path / "in.txt"
    source.write_text("".join(text + "\n" for text in TEXTS), encoding="utf-8")
    args = ["embed", "--model", str(exported), "--input", str(source), "--backend", "onnx"]
    assert hf_tlaser_main([*args, "--output", str(tmp_path / "onnx.npy")]) == 0
    vectors, meta = read_embeddings(tmp_path / "onnx.npy")
    assert np.abs(np.asarray(vectors) - reference).max() < FP32_TOL
    assert meta["backend"] == "onnx (onnx/model.onnx)"
    record(exported, **{"onnx-int8": {"speedup": 3.0, "ntrex_delta": 0.0, "sib200_delta": 0.0}})
    try:
        args[-1] = "auto"
        assert hf_tlaser_main([*args, "--output", str(tmp_path / "auto.npy")]) == 0
        assert read_embeddings(tmp_path / "auto.npy")[1]["backend"] == "onnx-int8 (onnx/model_quint8_avx2.onnx)"
        fp32 = [*args, "--precision", "fp32", "--output", str(tmp_path / "fp32.npy")]
        assert hf_tlaser_main(fp32) == 0
        assert read_embeddings(tmp_path / "fp32.npy")[1]["backend"] == "torch"
    finally:
        (exported / MEASURED_FILE).unlink()


VNNI_AMX = {"avx2", "avx512f", "avx512_vnni", "amx_bf16"}


@pytest.mark.parametrize(
    ("flags", "capability", "bf16_native", "target", "cpu"),
    [
        ({"avx2", "fma"}, "AVX2", False, "avx2", "avx2"),
        ({"avx2", "avx512f", "avx512_bf16"}, "AVX512", True, "avx512", "avx512+bf16"),
        (VNNI_AMX, "AVX512", True, "avx512_vnni", "avx512_vnni+bf16"),
        ({"sse4_2"}, "DEFAULT", False, None, "x86"),
        # the same CPU limited to AVX2 (ATEN_CPU_CAPABILITY=avx2, or ONEDNN_MAX_CPU_ISA=AVX2): a class of its own
        (VNNI_AMX, "AVX2", True, "avx512_vnni", backends.LIMITED_CLASS),
        (VNNI_AMX, "AVX512", False, "avx512_vnni", backends.LIMITED_CLASS),
    ],
)
def test_the_cpu_class_is_the_widest_int8_target_and_native_bf16(
    monkeypatch, flags, capability, bf16_native, target, cpu
):
    monkeypatch.setattr(backends, "is_arm", lambda: False)
    monkeypatch.setattr(backends, "cpu_flags", lambda: flags)
    monkeypatch.setattr(backends, "cpu_capability", lambda: capability)
    monkeypatch.setattr(backends, "cpu_bf16_native", lambda: bf16_native)
    assert backends.cpu_class() == cpu
    if target is None:
        with pytest.raises(UsageError, match="this CPU has no AVX2"):
            backends.this_cpu_target()
    else:
        assert backends.this_cpu_target() == target


def test_an_openvino_answer_of_the_wrong_shape_is_an_error(monkeypatch):
    """A runtime that returns no final states (OpenVINO's int8-weight kernels under ONEDNN_MAX_CPU_ISA=AVX2 on an
    AVX512 CPU) stops with a message naming the file, the shapes and the limit, not with vectors of nothing."""
    openvino = pytest.importorskip("openvino")

    class Compiled:
        def output(self, index):
            return index

        def __call__(self, inputs):
            return [np.zeros((0, 0, 8), dtype=np.float32)]

    monkeypatch.setattr(openvino, "Core", lambda: type("Core", (), {"compile_model": lambda *a: Compiled()})())
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    run = backends.openvino_runner(Path("model.xml"))
    ids = np.ones((2, 5), dtype=np.int64)
    shapes = r"shape \(0, 0, 8\) for input ids of shape \(2, 5\); ONEDNN_MAX_CPU_ISA=AVX2 is set"
    with pytest.raises(RuntimeError, match=r"model\.xml: OpenVINO returned final states of " + shapes):
        run(ids, ids)


@pytest.mark.parametrize(
    ("cpu", "precision", "hint"),
    [
        ("avx512_vnni+bf16", "auto", None),  # the plugin's default: bf16 where native
        ("avx512_vnni+bf16", "fp32", "f32"),
        (backends.LIMITED_CLASS, "auto", "f32"),  # its bf16 kernels would be refused under the oneDNN limit
        ("avx2", "auto", None),  # a real AVX2-only CPU: the plugin's default is f32 already
    ],
)
def test_openvino_computes_in_f32_where_asked_or_limited(monkeypatch, cpu, precision, hint):
    openvino = pytest.importorskip("openvino")
    configs: list[dict] = []

    class Core:
        def compile_model(self, path, device, config):
            configs.append(config)
            return type("Compiled", (), {"output": lambda self, index: index})()

    monkeypatch.setattr(openvino, "Core", Core)
    monkeypatch.setattr(backends, "cpu_class", lambda: cpu)
    backends.openvino_runner(Path("model.xml"), precision, threads=2)
    assert configs == [{"INFERENCE_NUM_THREADS": 2, **({"INFERENCE_PRECISION_HINT": hint} if hint else {})}]


def test_an_int8_file_for_other_instructions_is_not_taken(exported, tmp_path, monkeypatch):
    folder = Path(shutil.copytree(exported, tmp_path / "model"))
    (folder / "onnx/model_quint8_avx2.onnx").rename(folder / "onnx/model_qint8_avx512_vnni.onnx")
    monkeypatch.setattr(backends, "cpu_flags", lambda: {"avx2", "fma"})
    with pytest.raises(UsageError, match="model_quint8_avx2.onnx does not exist"):
        hf_tlaser.load_model(folder, backend="onnx-int8")
    with pytest.raises(UsageError, match="quantised for avx512_vnni, which this CPU lacks"):
        backends.ExportedEncoder(folder, "onnx-int8", file_name="onnx/model_qint8_avx512_vnni.onnx")


def test_bad_backend_input_is_one_line(exported, tlaser_folder, st_folder, tmp_path, capsys):
    with pytest.raises(UsageError, match="openvino_model.xml does not exist; write it with: hf-tlaser export"):
        hf_tlaser.load_model(exported, backend="openvino")
    with pytest.raises(UsageError, match="onnx/model.onnx does not exist.*--backend onnx$"):
        hf_tlaser.load_model(tlaser_folder, backend="onnx")
    laser = Path(shutil.copytree(tlaser_folder, tmp_path / "laser"))
    config = json.loads((laser / "config.json").read_text())
    (laser / "config.json").write_text(json.dumps({**config, "model_type": "laser"}))
    with pytest.raises(UsageError, match="model_type 'laser' has no exported backend"):
        backends.ExportedEncoder(laser, "onnx")
    source = tmp_path / "in.txt"
    source.write_text("a line\n", encoding="utf-8")
    for model in (tlaser_folder, st_folder):
        argv = ["embed", "--model", str(model), "--input", str(source), "--output", str(tmp_path / "o.npy")]
        assert hf_tlaser_main([*argv, "--backend", "onnx"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "onnx" in err[0] and not (tmp_path / "o.npy").exists(), err


def test_evaluate_measures_a_backend(exported, tmp_path, newstest_lines):
    from hf_tlaser.evaluation.cli import evaluate_model

    for lang in ("de", "en"):
        (tmp_path / f"dev.{lang}").write_text("\n".join(newstest_lines[lang][:40]) + "\n", encoding="utf-8")
    aligned = f"files:de={tmp_path / 'dev.de'}:en={tmp_path / 'dev.en'}"

    def xsim(backend: str) -> tuple[dict, dict]:
        results = evaluate_model(
            exported, ["retrieval"], tmp_path / backend, retrieval_sets=(aligned,), references=False, backend=backend
        )
        return results["evaluated"], results["retrieval"]["matrices"][aligned]

    about, errors = xsim("onnx")
    assert about["backend"] == "onnx (onnx/model.onnx)"
    assert xsim("torch") == ({**about, "backend": "torch"}, errors)


@pytest.fixture(scope="module")
def bench():
    return load_script("bench_backends")


def test_bench_quality_reads_the_model_and_each_model_beside_it(bench, monkeypatch, tmp_path):
    """``quality``: the evaluated model's NTREX and SIB-200 cross, and each sentence-transformers model's from the
    reference rows (cross-model rows skipped); an evaluation without references has no ``references`` entry."""
    from hf_tlaser.evaluation import cli as evaluation

    def row(xsim: float, cross: float) -> dict:
        matrix = {"langs": ["de", "en"], "xsim": [[None, xsim], [xsim, None]]}
        return {"retrieval": {"matrices": {"ntrex128": {"absolute": matrix}}}, "sib200": {"summary": {"cross": cross}}}

    def evaluate(folder, suites, out, reference_specs=(), **options) -> dict:
        results = row(2.0, 80.0)
        if reference_specs:
            results["references"] = {"e5": row(6.5, 81.5), "cross-model: e5": {"retrieval": row(9.0, 0)["retrieval"]}}
        return results

    monkeypatch.setattr(evaluation, "evaluate_model", evaluate)
    assert bench.quality(tmp_path, "torch", "fp32", "data", tmp_path) == {"": (2.0, 80.0)}
    scores = bench.quality(tmp_path, "torch", "fp32", "data", tmp_path, ["e5-folder"])
    assert scores == {"": (2.0, 80.0), "e5-folder": (6.5, 81.5)}


def test_bench_backends_compares_other_models(bench, warm_dir, st_dir, data_dir, tmp_path):
    """``scripts/bench_backends.py --compare``: another hf_tlaser folder and a sentence-transformers model run in
    their own rows beside FOLDER's torch fp32, in a subsection of the report that the backends section keeps."""
    report = tmp_path / "BENCH.md"
    section = "## 8. Inference backends\n\n<!-- backends:start -->\nkept\n<!-- backends:end -->\n"
    report.write_text(f"# Benchmarks\n\n{section}")
    argv = [str(warm_dir), "--smoke", "--rows", "torch", "--compare", str(st_dir), "--data-dir", str(data_dir)]
    assert bench.main([*argv, "--output", str(report)]) == 0
    text = report.read_text()
    assert "kept" in text and text.index("<!-- backends:end -->") < text.index(bench.COMPARE_TITLE)
    table = text[text.index("<!-- compare:start -->") : text.index("<!-- compare:end -->")]
    rows = [line for line in table.splitlines() if line.startswith("| ") and "---" not in line][1:]
    names = [row.split(" | ")[0].lstrip("| ") for row in rows]
    assert names[0] == "torch fp32" and f"{st_dir.name}: torch fp32" in names
    assert not any(name.startswith("ONNX") or name.startswith("OpenVINO") for name in names)  # --rows torch
    assert not (warm_dir / "onnx").exists() and not (warm_dir / "openvino").exists()  # nothing exported
    own = next(row for row in rows if row.startswith(f"| {st_dir.name}: torch fp32"))
    assert float(own.split(" | ")[4]) > 0  # its speed as a ratio to FOLDER's

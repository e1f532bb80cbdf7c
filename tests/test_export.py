"""``hf-tlaser export``: ONNX / OpenVINO files in a saved model folder, on tiny random models built here (a cT-LASER
warm-started from an XLM-R sentence-transformers model with mean pooling and a built-in prompt, and a from-scratch
T-LASER with CLS pooling).

Tolerances: fp32 files give the torch fp32 sentence vectors within 1e-5 (max absolute difference); int8 files keep a
cosine of at least 0.99 to them on these tiny models (measured: >= 0.9999). Each test skips where its optional
package is missing (CI installs the pinned stack only); the ``backend=`` loading tests also skip where optimum does
not import with the installed transformers (optimum-onnx 0.1.0 and optimum-intel 2.2.0 need transformers < 4.58 and
< 5.6)."""

from __future__ import annotations

import importlib
import json
import logging
import os
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import AutoModel

import hf_tlaser
from hf_tlaser.backend import runtime as backends
from hf_tlaser.errors import UsageError

TEXTS = [
    "The weather is lovely today.",
    "Das Wetter ist heute schön.",
    "He drove to the stadium, which was a long way from the city centre, and parked there.",
    "x",
]
FP32_TOL = 1e-5
INT8_COSINE = 0.99
STATIC_COSINE = 0.98


def needs(*names: str) -> None:
    """Skip unless every ``module`` or ``module:attribute`` imports (any ImportError, not only a missing package:
    optimum's modules fail to import with a transformers newer than they support)."""
    for name in names:
        module, _, attribute = name.partition(":")
        try:
            found = importlib.import_module(module)
            if attribute:
                getattr(found, attribute)
        except (ImportError, AttributeError) as error:
            pytest.skip(f"{name} does not import: {error}")


@pytest.fixture(params=["warm", "scratch"])
def folder(request, tmp_path) -> Path:
    """A writable copy of the warm-started cT-LASER or of the from-scratch T-LASER (``tlaser_folder``)."""
    source = request.getfixturevalue("warm_dir" if request.param == "warm" else "tlaser_folder")
    return Path(shutil.copytree(source, tmp_path / "model"))


def torch_vectors(folder: Path) -> np.ndarray:
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(folder), trust_remote_code=True, device="cpu").encode(TEXTS)


def pooled_vectors(folder: Path, run) -> np.ndarray:
    """The folder's sentence-transformers pipeline with the Transformer module's states from
    ``run(input_ids, attention_mask)`` (numpy in and out)."""
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(folder), trust_remote_code=True, device="cpu")
    features = model.tokenize(TEXTS)
    features["token_embeddings"] = torch.from_numpy(
        run(features["input_ids"].numpy(), features["attention_mask"].numpy())
    )
    with torch.no_grad():
        for module in list(model)[1:]:
            features = module(features)
    return features["sentence_embedding"].numpy()


def backend_vectors(folder: Path, backend: str) -> np.ndarray:
    """``hf_tlaser.encode`` on ``backend``'s files, fp32 where the backend has a choice."""
    return hf_tlaser.encode(folder, None, TEXTS, backend=backend, precision="fp32")


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def run_cli(argv: list[str]) -> int:
    from hf_tlaser.cli import main

    return main(["export", *argv])


def test_onnx_fp32_and_int8_match_torch(folder):
    needs("onnx", "onnxruntime")
    reference = torch_vectors(folder)
    assert run_cli([str(folder), "--backend", "onnx", "--quantize", "int8", "--cpu", "avx2"]) == 0
    written = {p.name for p in (folder / "onnx").iterdir()}
    assert written == {"model.onnx", "model_quint8_avx2.onnx", backends.EXPORT_RECORD}  # + the weights they came from
    fp32 = pooled_vectors(folder, backends.onnx_runner(folder / backends.ONNX_FILE))
    assert np.abs(fp32 - reference).max() < FP32_TOL
    assert np.abs(backend_vectors(folder, "onnx") - reference).max() < FP32_TOL
    int8 = pooled_vectors(folder, backends.onnx_runner(folder / "onnx/model_quint8_avx2.onnx"))
    assert cosines(int8, reference).min() > INT8_COSINE
    assert np.abs(backend_vectors(folder, "onnx-int8") - int8).max() < FP32_TOL


ISA_LIMITED = os.environ.get("ONEDNN_MAX_CPU_ISA", "").upper().startswith("AVX2") and "avx512f" in backends.cpu_flags()
"""An AVX512 CPU made to act as an AVX2-only one (README, "Testing the other CPU class")."""


@pytest.mark.skipif(
    ISA_LIMITED,
    reason="OpenVINO's int8-weight kernels return an empty array when ONEDNN_MAX_CPU_ISA limits an AVX512 CPU "
    "(an artefact of the limit: real AVX2-only CPUs run them)",
)
def test_openvino_fp32_and_int8_match_torch(folder):
    needs("onnx", "onnxruntime", "openvino", "nncf")
    reference = torch_vectors(folder)
    levels = [handler.level for handler in logging.getLogger().handlers]
    assert run_cli([str(folder), "--backend", "openvino", "--quantize", "int8"]) == 0
    assert [handler.level for handler in logging.getLogger().handlers] == levels  # nncf left them alone
    fp32 = pooled_vectors(folder, backends.openvino_runner(folder / backends.OPENVINO_FILE))
    assert np.abs(fp32 - reference).max() < FP32_TOL
    assert np.abs(backend_vectors(folder, "openvino") - reference).max() < FP32_TOL
    int8 = pooled_vectors(folder, backends.openvino_runner(folder / backends.OPENVINO_INT8_FILE))
    assert cosines(int8, reference).min() > INT8_COSINE
    assert np.abs(backend_vectors(folder, "openvino-int8") - int8).max() < FP32_TOL


def test_openvino_static_int8_is_calibrated_and_matches_torch(folder, tmp_path, newstest_lines, capsys):
    needs("onnx", "onnxruntime", "openvino", "nncf")
    calibration = tmp_path / "calibration.txt"
    one_line_error(capsys, [str(folder), "--backend", "openvino", "--quantize", "int8-static"], "--calibration FILE")
    one_line_error(
        capsys, [str(folder), "--quantize", "int8-static", "--calibration", str(calibration)], "OpenVINO only"
    )
    one_line_error(
        capsys,
        [str(folder), "--backend", "openvino", "--quantize", "int8-static", "--calibration", str(calibration)],
        "cannot read it",
    )
    calibration.write_text("\n".join(newstest_lines["en"][:40] + newstest_lines["de"][:40]) + "\n", encoding="utf-8")
    argv = [str(folder), "--backend", "openvino", "--quantize", "int8-static", "--calibration", str(calibration)]
    assert run_cli(argv) == 0
    assert 'type="FakeQuantize"' in (folder / backends.OPENVINO_STATIC_FILE).read_text()  # activations quantised
    reference = torch_vectors(folder)
    static = pooled_vectors(folder, backends.openvino_runner(folder / backends.OPENVINO_STATIC_FILE))
    assert cosines(static, reference).min() > STATIC_COSINE
    assert np.abs(backend_vectors(folder, "openvino-int8-static") - static).max() < FP32_TOL


def test_the_folder_loads_as_before_after_an_export(warm_dir, tmp_path):
    needs("onnx", "onnxruntime")
    folder = Path(shutil.copytree(warm_dir, tmp_path / "model"))
    assert run_cli([str(folder), "--backend", "onnx"]) == 0
    assert np.array_equal(torch_vectors(folder), torch_vectors(warm_dir))
    batch = {"input_ids": torch.tensor([[0, 5, 6, 2]])}
    with torch.no_grad():
        before = AutoModel.from_pretrained(warm_dir, trust_remote_code=True)(**batch).pooler_output
        after = AutoModel.from_pretrained(folder, trust_remote_code=True)(**batch).pooler_output
    assert torch.equal(before, after)


def test_sentence_transformers_loads_the_onnx_files_with_backend(folder):
    needs("onnxruntime", "optimum.onnxruntime:ORTModelForFeatureExtraction")
    from sentence_transformers import SentenceTransformer

    reference = torch_vectors(folder)
    assert run_cli([str(folder), "--backend", "onnx", "--quantize", "int8", "--cpu", "avx2"]) == 0
    model = SentenceTransformer(str(folder), backend="onnx", trust_remote_code=True, device="cpu")
    assert np.abs(model.encode(TEXTS) - reference).max() < FP32_TOL
    kwargs = {"file_name": "onnx/model_quint8_avx2.onnx"}
    model = SentenceTransformer(str(folder), backend="onnx", trust_remote_code=True, model_kwargs=kwargs)
    assert cosines(model.encode(TEXTS), reference).min() > INT8_COSINE


def test_sentence_transformers_loads_the_openvino_files_with_backend(folder):
    needs("onnx", "onnxruntime", "openvino", "optimum.intel.openvino:OVModelForFeatureExtraction")
    from sentence_transformers import SentenceTransformer

    reference = torch_vectors(folder)
    assert run_cli([str(folder), "--backend", "openvino"]) == 0
    kwargs = {"ov_config": {"INFERENCE_PRECISION_HINT": "f32"}}
    model = SentenceTransformer(str(folder), backend="openvino", trust_remote_code=True, model_kwargs=kwargs)
    assert np.abs(model.encode(TEXTS) - reference).max() < FP32_TOL


def one_line_error(capsys, argv: list[str], *expected: str) -> None:
    code = run_cli(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("hf-tlaser export: error: "), err
    assert all(text in err[0] for text in expected), err[0]


def test_an_architecture_the_exporter_does_not_take_is_one_line(tlaser_folder, tmp_path, capsys):
    folder = Path(shutil.copytree(tlaser_folder, tmp_path / "model"))
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "model_type": "laser"}))
    one_line_error(capsys, [str(folder)], "model_type 'laser' cannot be exported", "tlaser")


def test_a_missing_backend_package_names_the_extra(tlaser_folder, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # import onnxruntime now raises ImportError
    one_line_error(capsys, [str(tlaser_folder)], "pip install 'hf_tlaser[onnx]'")
    monkeypatch.setitem(sys.modules, "openvino", None)
    one_line_error(capsys, [str(tlaser_folder), "--backend", "openvino"], "pip install 'hf_tlaser[openvino]'")


def test_an_existing_output_is_refused_without_overwrite(tlaser_folder, tmp_path, capsys):
    folder = Path(shutil.copytree(tlaser_folder, tmp_path / "model"))
    (folder / "onnx").mkdir()
    (folder / "onnx" / "model.onnx").write_bytes(b"")
    one_line_error(capsys, [str(folder)], "onnx/model.onnx exists", "--overwrite")
    (folder / "openvino").mkdir()
    (folder / "openvino" / "openvino_model_qint8_quantized.xml").write_bytes(b"")
    one_line_error(capsys, [str(folder), "--backend", "openvino", "--quantize", "int8"], "--overwrite")


def test_an_int8_file_for_instructions_this_cpu_lacks_is_refused():
    with pytest.raises(UsageError, match="quantised for avx512_vnni, which this CPU lacks"):
        backends.check_quantized_file_cpu("onnx/model_qint8_avx512_vnni.onnx", flags={"avx2", "avx512f"})
    backends.check_quantized_file_cpu("onnx/model_quint8_avx2.onnx", flags={"avx2"})
    backends.check_quantized_file_cpu("onnx/model.onnx", flags=set())

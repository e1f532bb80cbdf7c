"""The converters behind ``hf-tlaser export``, each a call into the library that does the work: PyTorch's ONNX
exporter (:func:`export_onnx`), ONNX Runtime's dynamic quantiser (:func:`quantize_onnx`), OpenVINO's converter
(:func:`export_openvino`) and NNCF (:func:`compress_openvino`, :func:`quantize_openvino_static`). The command, its
checks and its files are :mod:`hf_tlaser.backend.export`."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

import torch

from hf_tlaser.backend.runtime import ONNX_CPU_TARGETS

OPSET = 17
"""The ONNX opset of the exported graph."""


class LastHiddenState(torch.nn.Module):
    """The encoder's per-token final states: what sentence-transformers' Transformer module hands to Pooling."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=input_ids, attention_mask=attention_mask, return_dict=True).last_hidden_state


def sample_batch(tokenizer, texts: Sequence[str]) -> dict[str, torch.Tensor]:
    """Tokenized, right-padded ``texts`` (padding present, so the traced graph keeps its attention mask), cut at 128
    tokens or the model's limit."""
    limit = min(128, tokenizer.model_max_length)
    batch = tokenizer(list(texts), padding=True, truncation=True, max_length=limit, return_tensors="pt")
    return {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}


def export_onnx(model: torch.nn.Module, tokenizer, path: Path) -> None:
    """``path``: the fp32 ONNX graph of ``LastHiddenState(model)``, batch and sequence axes dynamic."""
    import warnings

    path.parent.mkdir(parents=True, exist_ok=True)
    batch = sample_batch(tokenizer, ["a sample to trace", "a much longer sample sentence to trace the export with"])
    axes = {"input_ids": {0: "batch", 1: "sequence"}, "attention_mask": {0: "batch", 1: "sequence"}}
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the tracer's warnings about Python values read from tensors
        torch.onnx.export(
            LastHiddenState(model),
            (batch["input_ids"], batch["attention_mask"]),
            str(path),
            input_names=["input_ids", "attention_mask"],
            output_names=["last_hidden_state"],
            dynamic_axes={**axes, "last_hidden_state": {0: "batch", 1: "sequence"}},
            opset_version=OPSET,
            dynamo=False,
            do_constant_folding=True,
        )


def quantize_onnx(source: Path, target_path: Path, target: str) -> None:
    """ONNX Runtime's dynamic quantisation of ``source``'s MatMul/Gemm weights to int8, per channel, for ``target``
    (unsigned weights for AVX2)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    weights = QuantType.QUInt8 if ONNX_CPU_TARGETS[target][0] == "quint8" else QuantType.QInt8
    root = logging.getLogger()
    level = root.level
    root.setLevel(max(level, logging.WARNING))  # the quantiser logs a line per tensor on the root logger
    try:
        quantize_dynamic(
            str(source),
            str(target_path),
            weight_type=weights,
            per_channel=True,
            reduce_range=False,
            op_types_to_quantize=["MatMul", "Gemm"],
        )
    finally:
        root.setLevel(level)


def export_openvino(onnx_path: Path, xml_path: Path) -> None:
    """OpenVINO's conversion of the ONNX graph, saved in fp32."""
    import openvino as ov

    xml_path.parent.mkdir(parents=True, exist_ok=True)
    ov.save_model(ov.convert_model(str(onnx_path)), str(xml_path), compress_to_fp16=False)


def compress_openvino(xml_path: Path, target_path: Path) -> None:
    """NNCF's int8 weight compression of an OpenVINO model (activations stay fp32)."""
    import nncf
    import openvino as ov

    # its per-layer table: quiet on nncf's logger only, for this call (nncf.set_log_level would also change the level
    # of every handler that logger holds, the application's included)
    nncf_logger = logging.getLogger("nncf")
    level = nncf_logger.level
    nncf_logger.setLevel(logging.ERROR)
    try:
        model = ov.Core().read_model(str(xml_path))
        compressed = nncf.compress_weights(model, mode=nncf.CompressWeightsMode.INT8_ASYM)
    finally:
        nncf_logger.setLevel(level)
    ov.save_model(compressed, str(target_path), compress_to_fp16=False)


def quantize_openvino_static(xml_path: Path, target_path: Path, tokenizer, texts: Sequence[str]) -> None:
    """NNCF's post-training int8 quantisation of an OpenVINO model (weights and activations; the transformer preset
    keeps what it must in fp32), calibrated on ``texts``, one sentence per sample."""
    import nncf
    import openvino as ov

    samples = [{key: value.numpy() for key, value in sample_batch(tokenizer, [text]).items()} for text in texts]
    nncf_logger = logging.getLogger("nncf")
    level = nncf_logger.level
    nncf_logger.setLevel(logging.ERROR)
    try:
        quantized = nncf.quantize(
            ov.Core().read_model(str(xml_path)),
            nncf.Dataset(samples),
            model_type=nncf.ModelType.TRANSFORMER,
            subset_size=len(samples),
        )
    finally:
        nncf_logger.setLevel(level)
    ov.save_model(quantized, str(target_path), compress_to_fp16=False)

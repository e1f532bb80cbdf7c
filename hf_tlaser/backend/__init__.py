"""Exported encoders, made and run in one package (as sentence-transformers' ``backend/``):

- :mod:`~hf_tlaser.backend.export`: ``hf-tlaser export``, which writes a folder's ONNX / OpenVINO files (dynamic int8,
  OpenVINO int8 weights or static int8), checks each against torch and notes the weights it came from;
- :mod:`~hf_tlaser.backend.runtime`: those files run behind ``hf_tlaser.encode`` (``backend=``), with the folder's
  pooling and carried modules, and ``auto``, which takes only a backend measured on this CPU class without quality
  loss (``backends.json``).
"""

from .export import export_model
from .runtime import BACKENDS, EXPORTED, ExportedEncoder, choose_backend, cpu_class, load_backend

__all__ = ["BACKENDS", "EXPORTED", "ExportedEncoder", "choose_backend", "cpu_class", "export_model", "load_backend"]

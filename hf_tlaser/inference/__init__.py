"""Inference at corpus scale: ``hf-tlaser embed`` (:mod:`hf_tlaser.inference.embed`) writes a text file's vectors to
an embeddings file (:mod:`hf_tlaser.inference.store`), which ``hf-tlaser mine`` and numpy read."""

from .store import (
    DTYPES,
    FORMAT,
    EmbeddingsWriter,
    check_compatible,
    read_embeddings,
    read_sidecar,
    sidecar_path,
    write_sidecar,
)

__all__ = [
    "DTYPES",
    "FORMAT",
    "EmbeddingsWriter",
    "check_compatible",
    "read_embeddings",
    "read_sidecar",
    "sidecar_path",
    "write_sidecar",
]

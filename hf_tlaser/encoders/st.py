"""A sentence-transformers model (a folder or a Hub id) as an :class:`~hf_tlaser.encoders.base.Encoder`: its own
``encode``, with the chosen prompt prepended to every text."""

from __future__ import annotations

import contextlib
from pathlib import Path

import numpy as np
import torch

from hf_tlaser.errors import UsageError
from hf_tlaser.hardware import resolve_precision
from hf_tlaser.model_folders import choose_prompt, first_line

from .base import Encoder
from .identity import card_languages, display_name, folder_fingerprint


class SentenceTransformerEncoder(Encoder):
    """A sentence-transformers model (its ``encode``, with the chosen prompt prepended to every text)."""

    kind = "sentence-transformers"

    def __init__(self, model, autocast_dtype: torch.dtype | None = None, **fields) -> None:
        super().__init__(**fields)
        self.model = model
        self.autocast_dtype = autocast_dtype

    @property
    def tokenizer(self):
        return self.model.tokenizer

    @property
    def max_length(self) -> int:
        return self.model.max_seq_length

    def _encode(self, texts: list[str], batch_size: int, show_progress: bool) -> np.ndarray:
        device = self.model.device
        autocast = (
            torch.autocast(device.type, dtype=self.autocast_dtype)
            if self.autocast_dtype is not None
            else contextlib.nullcontext()
        )
        with torch.inference_mode(), autocast:
            vectors = self.model.encode(
                texts,
                prompt=self.prompt or "",  # "" (not None): no prompt, and no default prompt either
                batch_size=batch_size,
                show_progress_bar=show_progress,
                convert_to_numpy=False,
                convert_to_tensor=True,
            )
        return vectors.float().cpu().numpy()


def load_sentence_transformer(
    spec: str, folder: Path, identity: str, where: str, device, precision: str, prompt_name, prefer, batch_size
) -> SentenceTransformerEncoder:
    from sentence_transformers import SentenceTransformer

    try:
        model = SentenceTransformer(str(folder), device=str(device), local_files_only=True)
    except Exception as err:  # noqa: BLE001 - any loading failure is the user's folder
        raise UsageError(f"{where}: cannot load it as a sentence-transformers model ({first_line(err)})") from None
    model.eval()
    name, prompt = choose_prompt(model.prompts, model.default_prompt_name, prompt_name, prefer, where)
    width = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
    return SentenceTransformerEncoder(
        model,
        resolve_precision(precision, device).autocast_dtype,
        spec=spec,
        name=display_name(spec, folder),
        identity=identity,
        fingerprint=folder_fingerprint(folder),
        dim=width(),
        languages=card_languages(folder),
        prompt_name=name,
        prompt=prompt,
        batch_size=batch_size,
    )

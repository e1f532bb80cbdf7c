"""A sentence-transformers model (a folder or a Hub id) as an :class:`~hf_tlaser.encoders.base.Encoder`: its own
``encode``, with the chosen prompt prepended to every text; or, for a caller that batches by tokens itself, the ids
of ``tokenize`` as its ``encode`` would pad them, through its modules (``embed_ids``)."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from hf_tlaser.errors import UsageError
from hf_tlaser.hardware import resolve_precision
from hf_tlaser.model_folders import choose_prompt, first_line
from hf_tlaser.models.common.encode import pad_ids

from .base import Encoder
from .identity import card_languages, display_name, folder_fingerprint


class SentenceTransformerEncoder(Encoder):
    """A sentence-transformers model (its ``encode``, with the chosen prompt prepended to every text)."""

    kind = "sentence-transformers"

    def __init__(self, model, autocast_dtype: torch.dtype | None = None, **fields) -> None:
        super().__init__(**fields)
        self.model = model
        self.autocast_dtype = autocast_dtype
        self._text_features: dict | None = None

    @property
    def tokenizer(self):
        return self.model.tokenizer

    @property
    def max_length(self) -> int:
        return self.model.max_seq_length

    def _autocast(self):
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.model.device.type, dtype=self.autocast_dtype)

    def tokenize(self, texts: Sequence[str]) -> tuple[list[list[int]], list[bool]]:
        """As ``Encoder.tokenize``: the prompt and the text, as the model's ``encode`` tokenises them (``UsageError``
        for a model whose texts go through a chat template)."""
        if "message" in getattr(self.model[0], "modality_config", {}):
            raise UsageError(f"{self.spec}: its texts go through a chat template; give a model that reads plain text")
        return super().tokenize(texts)

    def embed_ids(self, rows: Sequence[Sequence[int]]) -> np.ndarray:
        """The vectors of one batch of ``tokenize``'s rows, padded on the tokenizer's side as the model's ``encode``
        pads a batch, with the features its ``preprocess`` adds to every text batch (modality, prompt length)."""
        if self._text_features is None:
            features = self.model.preprocess([""], prompt=self.prompt)
            self._text_features = {key: value for key, value in features.items() if not torch.is_tensor(value)}
        tokenizer, device = self.tokenizer, self.model.device
        ids = pad_ids(rows, tokenizer.pad_token_id, tokenizer.padding_side)
        features = {
            "input_ids": ids,
            "attention_mask": pad_ids([[1] * len(row) for row in rows], 0, tokenizer.padding_side),
        }
        if "token_type_ids" in tokenizer.model_input_names:  # a single text's: all 0
            features["token_type_ids"] = torch.zeros_like(ids)
        features = {key: value.to(device) for key, value in features.items()}
        with torch.inference_mode(), self._autocast():
            vectors = self.model({**features, **self._text_features})["sentence_embedding"]
        return vectors.float().cpu().numpy()

    def _encode(self, texts: list[str], batch_size: int, show_progress: bool) -> np.ndarray:
        with torch.inference_mode(), self._autocast():
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

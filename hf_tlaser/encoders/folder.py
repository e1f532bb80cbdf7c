"""An hf_tlaser model (a saved folder, or a model in memory) as an :class:`~hf_tlaser.encoders.base.Encoder`, on
torch or on the files ``hf-tlaser export`` wrote (:mod:`hf_tlaser.backend`).

It encodes through :func:`hf_tlaser.encode` (the model's own ``encode``: length-sorted batches of at most
``max_tokens`` padded tokens, inputs over the model's length limit truncated) and its document policy: documents
(MLDoc) are embedded whole, T-LASER's cut to their first 750 words, LASER's after the clean-up of LASER's
``mldoc.sh``; a caller that batches by tokens itself runs the ids of ``tokenize`` through the model's
``sentence_vectors`` (``embed_ids``). A model with one encoder per language (cNV) is ``per_language``: it takes the
language of each text and embeds every language through its own encoder.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

import hf_tlaser
from hf_tlaser.backend.runtime import ExportedEncoder
from hf_tlaser.encoding import (
    DOCUMENT_WORDS,
    laser_mldoc_cleanup,
    load_model,
    model_encoder,
    model_languages,
    trained_languages,
    warn_passed_prompt,
)
from hf_tlaser.errors import UsageError
from hf_tlaser.hardware import default_device, resolve_precision
from hf_tlaser.model_folders import check_model_folder, first_line, model_name, sentence_vector_size
from hf_tlaser.models.common.encode import inference, pad_ids

from .base import Encoder
from .identity import display_name, file_digest, folder_fingerprint


class HfTlaserEncoder(Encoder):
    """An hf_tlaser model and its tokenizer (None for cNV: its per-language tokenizers), on ``device`` (default:
    CUDA, else MPS, else CPU) with ``autocast_dtype`` (None: fp32); an exported model runs on the CPU in the
    precision it was exported in. ``fields`` (spec, name, identity, fingerprint, ...) default to what the model's
    config says (fingerprint None: not computed for a model in memory)."""

    kind = "hf_tlaser"

    def __init__(
        self,
        model: torch.nn.Module,
        tokenizer=None,
        device: str | torch.device | None = None,
        autocast_dtype: torch.dtype | None = None,
        max_tokens: int = 16000,
        **fields,
    ) -> None:
        config = model.config.to_dict()
        fields.setdefault("spec", getattr(model.config, "name_or_path", "") or config["model_type"])
        fields.setdefault("name", model_name(config))
        fields.setdefault("identity", fields["spec"])
        fields.setdefault("fingerprint", None)
        fields.setdefault("dim", sentence_vector_size(config))
        fields.setdefault("languages", trained_languages(config) or None)
        super().__init__(**fields)
        exported = isinstance(model, ExportedEncoder)
        self.model, self.tokenizer, self.max_tokens = model, tokenizer, max_tokens
        self.device = torch.device("cpu") if exported else torch.device(device) if device else default_device()
        self.autocast_dtype = None if exported else autocast_dtype
        self.backend = model.describe() if exported else "torch"
        self.max_length = getattr(model.config, "max_position_embeddings", None)  # cNV: one per language

    @property
    def per_language(self) -> bool:
        """Whether the model needs the language of each text (one encoder per language)."""
        return model_languages(self.model) is not None

    def describe(self) -> str:
        """As ``Encoder.describe``, with the backend that runs it."""
        return f"{super().describe()} on {self.backend}"

    def _run(self, texts: list[str], lang: str | None = None, **document) -> np.ndarray:
        """One language's texts through ``hf_tlaser.encode`` (``document``: its ``document_mode`` and
        ``max_words``)."""
        language = {"lang": lang} if lang is not None else {}
        return hf_tlaser.encode(
            self.model,
            self.tokenizer,
            texts,
            max_tokens=self.max_tokens,
            truncation=True,
            autocast_dtype=self.autocast_dtype,
            device=self.device,
            documents=bool(document),
            **document,
            **language,
        )

    def _by_language(self, texts: list[str], langs: list[str] | None, **document) -> np.ndarray:
        if langs is None:
            return self._run(texts, **document)
        rows = {lang: [i for i, text_lang in enumerate(langs) if text_lang == lang] for lang in dict.fromkeys(langs)}
        parts = {lang: self._run([texts[i] for i in where], lang, **document) for lang, where in rows.items()}
        if not parts:
            return self._run([], model_languages(self.model)[0])
        out = np.empty((len(texts), next(iter(parts.values())).shape[1]), dtype=np.float32)
        for lang, where in rows.items():
            out[where] = parts[lang]
        return out

    def _encode(self, texts: list[str], batch_size: int, show_progress: bool) -> np.ndarray:
        return self._by_language(texts, None)

    def tokenize(self, texts: Sequence[str]) -> tuple[list[list[int]], list[bool]]:
        """As ``Encoder.tokenize``, with ``hf_tlaser.encode``'s warning for texts that repeat the model's built-in
        prompt."""
        warn_passed_prompt(model_encoder(self.model, self.tokenizer, None)[0], list(texts))
        return super().tokenize(texts)

    def embed_ids(self, rows: Sequence[Sequence[int]]) -> np.ndarray:
        """The sentence vectors of one batch of ``tokenize``'s rows: right-padded, on ``device``, under the
        encoder's autocast (what ``encode_texts`` runs for each of its batches)."""
        encoder = model_encoder(self.model, self.tokenizer, None)[0].to(self.device)
        pad_id = self.tokenizer.pad_token_id
        ids = pad_ids(rows, pad_id).to(self.device)
        with inference(encoder, self.autocast_dtype):
            vectors = encoder.sentence_vectors(ids, ids.ne(pad_id).long())
        return vectors.float().cpu().numpy()

    def __call__(self, texts: list[str], langs: list[str] | None = None) -> np.ndarray:
        """float32 [len(texts), dim]; ``langs`` (the language of each text) is required by a ``per_language``
        model and refused by any other."""
        return self._by_language(list(texts), langs)

    def embed_documents(self, texts: list[str], langs: list[str] | None = None) -> np.ndarray:
        """Whole-document vectors (see the module docstring)."""
        if self.model.config.model_type == "laser":
            cleaned = [laser_mldoc_cleanup(t) for t in texts]
            return self._by_language(cleaned, langs, document_mode="whole", max_words=None)
        return self._by_language(list(texts), langs, document_mode="whole", max_words=DOCUMENT_WORDS)


def load_hf_tlaser(
    spec: str,
    folder: Path,
    identity: str,
    argument: str,
    device,
    precision: str,
    batch_size: int,
    backend: str = "torch",
    *,
    random_init: bool = False,
    per_language: bool = False,
    max_tokens: int = 16000,
) -> HfTlaserEncoder:
    """The hf_tlaser model folder of a SPEC as an encoder (``hf_tlaser.encoders.load``'s arguments). Its fingerprint
    is computed when first read; a model at ``random_init`` has none."""
    where = f"{argument} {spec!r}"
    config = check_model_folder(folder, argument)
    if model_languages(config) is not None and not per_language:
        raise UsageError(
            f"{where} is a {config['model_type']} model, which embeds each language through its own encoder and "
            "needs the language of every text: it cannot be a teacher; give a multilingual model"
        )
    try:
        model, tokenizer = load_model(folder, backend, precision, random_init)
    except UsageError:  # the backend: unknown, not exported, its package missing
        raise
    except Exception as err:  # noqa: BLE001 - any loading failure is the user's folder
        raise UsageError(f"{where}: cannot load the model ({first_line(err)})") from None

    def fingerprint() -> str:
        digest = folder_fingerprint(folder)
        if not isinstance(model, ExportedEncoder):
            return digest
        # another file computes the vectors (int8 ones differ): it is part of what they are
        files = [model.path, model.path.with_suffix(".bin")]  # an OpenVINO graph keeps its weights in .bin
        parts = "\0".join([digest, model.backend, *(file_digest(path) for path in files if path.is_file())])
        return hashlib.sha256(parts.encode()).hexdigest()

    return HfTlaserEncoder(
        model,
        tokenizer,
        device,
        resolve_precision(precision, device).autocast_dtype,  # an exported model runs without
        max_tokens,
        spec=spec,
        name=f"{model_name(config)} {display_name(spec, folder)}",
        identity=identity,
        fingerprint=None if random_init else fingerprint,
        dim=sentence_vector_size(config),
        languages=trained_languages(config) or None,
        batch_size=batch_size,
    )

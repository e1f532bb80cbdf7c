"""The encoder of a saved hf_tlaser model folder as an evaluation embedder (``Embed``): sentences as they are,
documents whole (T-LASER's cut to 750 words, LASER's after the clean-up of LASER's ``mldoc.sh``), a per-language
model (cNV) through the encoder of each text's language."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from transformers import AutoModel, AutoTokenizer

import hf_tlaser
from hf_tlaser.encoding import model_languages
from hf_tlaser.evaluation.readers import laser_mldoc_cleanup

DOCUMENT_WORDS = 750
"""T-LASER embeds a document whole, cut to its first 750 words (Li & Mak 2020)."""


def load_encoder(model_dir: str | Path, random_init: bool = False) -> tuple[torch.nn.Module, object]:
    """The encoder and tokenizer of a saved model folder (``random_init``: same architecture, fresh weights).

    A cNV folder gives the model and None: its per-language tokenizers come with it (``model.get_tokenizer``); at
    random init every weight is fresh, the NMT encoders' too, and the saved tokenizers are kept.
    """
    model = AutoModel.from_pretrained(model_dir)
    languages = model_languages(model)
    tokenizer = AutoTokenizer.from_pretrained(model_dir) if languages is None else None
    if random_init:
        torch.manual_seed(0)
        fresh = type(model)(model.config)
        if languages is not None:
            fresh.tokenizers.update({lang: model.get_tokenizer(lang) for lang in languages})
        model = fresh
    return model.eval(), tokenizer


@dataclass
class EncoderEmbed:
    """An ``Embed`` for a loaded hf_tlaser encoder.

    Sentences are embedded as they are (inputs over the model's length limit are truncated). Documents (MLDoc) are
    embedded whole: T-LASER's cut to their first 750 words, LASER's after the clean-up of LASER's ``mldoc.sh``.
    A model with one encoder per language (cNV) is ``per_language``: it takes the language of each text and embeds
    every language through its own encoder (``tokenizer`` None: the model's own per-language tokenizers).
    """

    model: torch.nn.Module
    tokenizer: object
    device: torch.device
    autocast_dtype: torch.dtype | None = None
    max_tokens: int = 16000

    @property
    def per_language(self) -> bool:
        """Whether the model needs the language of each text (one encoder per language)."""
        return model_languages(self.model) is not None

    def _encode(self, texts: list[str], langs: list[str] | None = None, **options) -> np.ndarray:
        def run(batch: list[str], **lang) -> np.ndarray:
            return hf_tlaser.encode(
                self.model,
                self.tokenizer,
                batch,
                max_tokens=self.max_tokens,
                truncation=True,
                autocast_dtype=self.autocast_dtype,
                device=self.device,
                **lang,
                **options,
            )

        if langs is None:
            return run(texts)
        rows = {lang: [i for i, text_lang in enumerate(langs) if text_lang == lang] for lang in dict.fromkeys(langs)}
        parts = {lang: run([texts[i] for i in where], lang=lang) for lang, where in rows.items()}
        if not parts:
            return run([], lang=model_languages(self.model)[0])
        out = np.empty((len(texts), next(iter(parts.values())).shape[1]), dtype=np.float32)
        for lang, where in rows.items():
            out[where] = parts[lang]
        return out

    def __call__(self, texts: list[str], langs: list[str] | None = None) -> np.ndarray:
        return self._encode(texts, langs)

    def embed_documents(self, texts: list[str], langs: list[str] | None = None) -> np.ndarray:
        """Whole-document vectors (see the class docstring)."""
        if self.model.config.model_type == "laser":
            cleaned = [laser_mldoc_cleanup(t) for t in texts]
            return self._encode(cleaned, langs, documents=True, document_mode="whole", max_words=None)
        return self._encode(texts, langs, documents=True, document_mode="whole", max_words=DOCUMENT_WORDS)

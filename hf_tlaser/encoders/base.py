"""The one embedding interface: :class:`Encoder`. Whatever turns texts into vectors (an hf_tlaser model, a
sentence-transformers model, a file of precomputed vectors; on any backend) is an ``Encoder``, loaded from a SPEC by
:func:`hf_tlaser.encoders.load`; ``hf-tlaser embed``, ``mine``, ``evaluate`` and the teachers all use it."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from hf_tlaser.models.common.encode import tokenize


class Encoder:
    """A loaded model SPEC (see :func:`hf_tlaser.encoders.load`). ``encode(texts)`` gives float32 [N, dim] in input
    order; ``encoder(texts)`` is the same (an evaluation embedder).

    ``spec`` is what was given, ``kind`` one of ``sentence-transformers``, ``hf_tlaser``, ``vectors``; ``name`` a
    short display name; ``identity`` says where it comes from (folder, Hub id at its commit); ``fingerprint`` hashes
    what determines the vectors (with ``prompt``, the teacher cache's key; None for a model built in memory; given
    as a function, it is computed when first read); ``prompt_name``/``prompt`` the prompt prepended to every text
    (sentence-transformers), else None; ``backend`` what runs it. ``tokenizer`` and ``max_length`` (tokens a text
    may have before it is truncated) are None for an encoder that tokenises nothing (precomputed vectors).

    A caller that batches by tokens itself (``hf-tlaser embed``) tokenises every text once with :meth:`tokenize` and
    runs batches of those ids through :meth:`embed_ids`.
    """

    kind = "encoder"
    tokenizer = None
    max_length: int | None = None
    backend = "torch"

    def __init__(
        self, spec: str, name: str, identity: str, fingerprint: str | Callable[[], str] | None, dim: int, **details
    ) -> None:
        self.spec = spec
        self.name = name
        self.identity = identity
        self._fingerprint = fingerprint
        self.dim = int(dim)
        self.languages: list[str] | None = details.get("languages")
        self.prompt_name: str | None = details.get("prompt_name")
        self.prompt: str | None = details.get("prompt")
        self.batch_size: int = details.get("batch_size", 64)

    @property
    def fingerprint(self) -> str | None:
        if callable(self._fingerprint):
            self._fingerprint = self._fingerprint()
        return self._fingerprint

    def _encode(self, texts: list[str], batch_size: int, show_progress: bool) -> np.ndarray:
        raise NotImplementedError

    def tokenize(self, texts: Sequence[str]) -> tuple[list[list[int]], list[bool]]:
        """The token ids of every text as the model reads it (``prompt`` first; cut to ``max_length`` tokens), in
        one tokenizer call, and which texts were cut: what :meth:`embed_ids` takes, a batch at a time."""
        if self.tokenizer is None:
            raise TypeError(f"{type(self).__name__} reads no tokens")
        prompt = self.prompt or ""
        return tokenize(self.tokenizer, [prompt + text for text in texts], self.max_length)

    def embed_ids(self, rows: Sequence[Sequence[int]]) -> np.ndarray:
        """float32 [len(rows), dim]: one batch of :meth:`tokenize`'s rows, padded and run through the model."""
        raise NotImplementedError

    def encode(self, texts: Sequence[str], *, batch_size: int | None = None, show_progress: bool = False) -> np.ndarray:
        """float32 [len(texts), dim], row i the vector of ``texts[i]`` (an empty list gives [0, dim])."""
        texts = [texts] if isinstance(texts, str) else list(texts)
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        vectors = np.asarray(self._encode(texts, batch_size or self.batch_size, show_progress), dtype=np.float32)
        if vectors.shape != (len(texts), self.dim):
            raise RuntimeError(f"encoder {self.name} gave {vectors.shape} for {len(texts)} texts of width {self.dim}")
        return vectors

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        return self.encode(texts)

    def to_dict(self) -> dict:
        """What the encoder is, for sidecars and result files."""
        keys = ("kind", "spec", "name", "identity", "fingerprint", "dim", "prompt_name", "prompt", "languages")
        return {key: getattr(self, key) for key in keys}

    def describe(self) -> str:
        """One line: kind, identity, width and prompt."""
        prompt = f", prompt {self.prompt_name} {self.prompt!r}" if self.prompt else ", no prompt"
        return f"{self.kind} model {self.identity} ({self.dim} dimensions{prompt})"

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.describe()})"

"""Load a model SPEC into an :class:`~hf_tlaser.encoders.base.Encoder` (:func:`load`), or read the width of its
vectors from its files without loading it (:func:`vector_width`).

A SPEC is one of

* an hf_tlaser model folder (T-LASER, LASER, ... as saved by ``hf-tlaser train``; a translation model's encoder),
  on torch or an exported backend (:class:`~hf_tlaser.encoders.folder.HfTlaserEncoder`);
* a sentence-transformers model folder or Hub model id (``ID`` or ``ID@REVISION``), encoded with one of its prompts
  (e5: ``query: ``, its prompt for symmetric tasks such as bitext retrieval)
  (:class:`~hf_tlaser.encoders.st.SentenceTransformerEncoder`);
* ``vectors:PATH``: vectors precomputed for an ordered list of texts (``hf-tlaser teacher-vectors --output``; format
  in :mod:`hf_tlaser.encoders.vectors`).

:func:`load` checks and loads a SPEC (``UsageError`` naming the argument, before any data is read): its width
``dim``, its ``fingerprint`` (:func:`~hf_tlaser.encoders.identity.folder_fingerprint`: a hash of the model files'
content, not their path or dates), the ``languages`` its card or config lists (else None) and
``encode(texts) -> np.ndarray``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path

import torch

from hf_tlaser.errors import UsageError
from hf_tlaser.hardware import default_device
from hf_tlaser.model_folders import (
    AUTO,
    EVAL_PROMPTS,
    MODEL_TYPES,
    first_line,
    model_folder,
    sentence_vector_size,
)

from .base import Encoder
from .folder import load_hf_tlaser
from .st import load_sentence_transformer
from .vectors import VECTORS_PREFIX, load_vectors

logger = logging.getLogger(__name__)

SPEC_HELP = (
    "a sentence-transformers model folder or Hub id (ID or ID@REVISION), an hf_tlaser model folder (hf-tlaser train "
    "--output-dir), or vectors:PATH (hf-tlaser teacher-vectors --output)"
)


def load(
    spec: str,
    *,
    prompt_name: str | None = AUTO,
    prefer: Sequence[str] = EVAL_PROMPTS,
    device: str | torch.device | None = None,
    precision: str = "auto",
    batch_size: int = 64,
    revision: str | None = None,
    texts: Sequence[str] | None = None,
    argument: str = "--model",
    backend: str = "torch",
    random_init: bool = False,
    per_language: bool = False,
    max_tokens: int = 16000,
) -> Encoder:
    """Load a SPEC (module docstring) into an :class:`~hf_tlaser.encoders.base.Encoder`: what ``hf-tlaser embed``,
    ``mine --model``, ``evaluate`` (its model, random-init and ``--reference`` rows) and the teachers load a model
    with (an hf_tlaser folder's weights and tokenizer through :func:`hf_tlaser.encoding.load_model`).

    ``prompt_name`` (sentence-transformers): ``auto`` takes the first of ``prefer`` the model defines
    (``EVAL_PROMPTS``: e5's ``query: ``), else its default prompt; ``none``
    prepends nothing; a name must be one of the model's prompts. ``device`` defaults to CUDA, else MPS, else CPU;
    ``precision`` (auto/fp32/bf16/fp16) is the autocast of the forward pass (not part of the fingerprint: vectors of
    one model in another precision are the same vectors to within rounding). ``revision`` (or ``ID@REVISION``) pins
    a Hub model. ``texts`` checks a ``vectors:`` file against the corpus (row count and texts hash). ``backend``
    runs an hf_tlaser folder's exported files (``hf_tlaser.backend.load_backend``: "auto" chooses only with
    ``precision`` "auto"); a sentence-transformers model runs in torch. An hf_tlaser folder only: ``random_init``
    gives the same architecture with fresh weights (in torch, no fingerprint), ``per_language`` admits a model with
    one encoder per language (cNV; its caller gives the language of every text), ``max_tokens`` bounds the padded
    tokens of its ``encode``'s batches.

    ``UsageError`` naming ``argument`` when the SPEC cannot be loaded: a missing folder or file, a folder that is no
    model, an unknown prompt, a cNV model (one encoder per language), a ``vectors:`` file whose files disagree or
    whose rows do not match ``texts``.
    """
    spec = str(spec).strip()
    where = f"{argument} {spec!r}"
    if not spec:
        raise UsageError(f"{argument}: empty; give {SPEC_HELP}")
    if spec.startswith(VECTORS_PREFIX):
        encoder = load_vectors(spec, argument)
        if texts is not None:
            encoder.check_texts(texts)
        return encoder
    folder, identity = model_folder(spec, where, revision, SPEC_HELP)
    device = torch.device(device) if device is not None else default_device()
    config = _read_config(folder / "config.json", where)
    if config is not None and config.get("model_type") in MODEL_TYPES:
        encoder = load_hf_tlaser(
            spec,
            folder,
            identity,
            argument,
            device,
            precision,
            batch_size,
            backend,
            random_init=random_init,
            per_language=per_language,
            max_tokens=max_tokens,
        )
    elif backend not in ("torch", "auto"):
        raise UsageError(f"{where}: --backend {backend} runs hf_tlaser model folders only; use --backend torch")
    elif config is not None or (folder / "modules.json").is_file():
        encoder = load_sentence_transformer(
            spec, folder, identity, where, device, precision, prompt_name, prefer, batch_size
        )
    else:
        raise UsageError(f"{where} is not a model folder (no config.json or modules.json); give {SPEC_HELP}")
    logger.info("%s: %s", argument.lstrip("-"), encoder.describe())
    return encoder


def _read_config(path: Path, where: str) -> dict | None:
    if not path.is_file():
        return None
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise UsageError(f"{where}: unreadable config.json ({first_line(err)})") from None
    if not isinstance(config, dict):
        raise UsageError(f"{where}: config.json is not a JSON object")
    return config


def vector_width(spec: str, argument: str = "--model") -> int | None:
    """The width of a model SPEC's vectors read from its files, without loading it: an hf_tlaser config's sentence
    vector, a sentence-transformers folder's last Dense output, else its Pooling's (the token width times the modes
    it concatenates). None where the files do not say it (the width is then known once the model is loaded)."""
    folder, _ = model_folder(spec, f"{argument} {spec!r}", hint=SPEC_HELP)
    config = _read_config(folder / "config.json", f"{argument} {spec!r}")
    if config is not None and config.get("model_type") in MODEL_TYPES:
        return sentence_vector_size(config)
    width = None
    try:
        modules = json.loads((folder / "modules.json").read_text(encoding="utf-8"))
        for module in modules:
            kind = str(module["type"]).rsplit(".", 1)[-1]
            if kind not in ("Dense", "Pooling"):
                continue
            part = json.loads((folder / module["path"] / "config.json").read_text(encoding="utf-8"))
            if kind == "Dense":
                width = int(part["out_features"])
                continue
            modes = part.get("pooling_mode")
            if modes is None:  # the older layout: one flag per mode
                modes = [key for key, on in part.items() if key.startswith("pooling_mode_") and on is True]
            count = 1 if isinstance(modes, str) else len(modes)
            width = count * int(part.get("word_embedding_dimension", part.get("embedding_dimension")))
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return None  # no modules.json, or one this reading does not know
    return width

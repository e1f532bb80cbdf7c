"""Teachers: whatever turns texts into the vectors a student learns to reproduce (LASER3-style distillation), and the
reference rows of ``hf-tlaser evaluate --reference``.

A teacher SPEC is one of

* a sentence-transformers model folder or Hub model id (``ID`` or ``ID@REVISION``), encoded with one of its prompts
  (e5: ``query: ``, its prompt for symmetric tasks such as bitext retrieval, both for the texts to distill and for
  evaluation rows: a student is judged in the space it learnt);
* an hf_tlaser model folder (T-LASER, LASER, ... as saved by ``hf-tlaser train``; a translation model's encoder),
  encoded with ``hf_tlaser.encode``: a big T-LASER can teach a tiny one;
* ``vectors:PATH``: vectors precomputed for an ordered list of texts (``hf-tlaser teacher-vectors --output``; format
  in :mod:`hf_tlaser.teachers.vectors`).

:func:`load_teacher` checks and loads a SPEC (``UsageError`` naming the argument, before any data is read) into a
:class:`Teacher`: its width ``dim``, its ``fingerprint`` (a hash of what determines its vectors: the model files'
content, not their path or dates, so a copy on another machine has the same one), the ``languages`` its card or
config lists (else None) and ``encode(texts) -> np.ndarray``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from transformers import AutoTokenizer

from hf_tlaser.backend.runtime import ExportedEncoder, hash_file, load_backend
from hf_tlaser.errors import UsageError
from hf_tlaser.hardware import default_device, resolve_precision
from hf_tlaser.model_folders import (
    ADD_LANGUAGE_RECORD,
    AUTO,
    EVAL_PROMPTS,
    MODEL_TYPES,
    EncoderEmbed,
    check_model_folder,
    choose_prompt,
    first_line,
    load_encoder,
    model_folder,
    model_name,
    sentence_vector_size,
)

from .cache import cache_root
from .vectors import FORMAT, KEY_DTYPE, VERSION, save_json, sidecar_paths, text_keys, texts_digest

logger = logging.getLogger(__name__)

VECTORS_PREFIX = "vectors:"
TRAIN_PROMPTS = EVAL_PROMPTS
"""Preferred prompt names for the texts a student is distilled on: the evaluation rows' (e5: ``query: ``), so that
the student learns the space it is judged in (``scripts/teacher_prompt.py``; docs/training.md, "Teacher prompt")."""
SPEC_HELP = (
    "a sentence-transformers model folder or Hub id (ID or ID@REVISION), an hf_tlaser model folder (hf-tlaser train "
    "--output-dir), or vectors:PATH (hf-tlaser teacher-vectors --output)"
)
_SKIP_DIRS = re.compile(r"^(\.|checkpoint-|eval|runs$|__pycache__$|onnx$|openvino$)")
_SKIP_FILES = {
    "trainer_state.json",
    "hf_tlaser_train.json",
    ADD_LANGUAGE_RECORD,
    "training_args.bin",
    "results.json",
    "optimizer.pt",
    "scheduler.pt",
    "scaler.pt",
    "rng_state.pth",
}
_SKIP_SUFFIXES = {".md", ".png", ".log", ".lock", ".tmp"}
MEMO_NAME = "file-digests.json"
"""File of the file-digest memo under the teacher cache root."""
RACY_SECONDS = 2


class Teacher:
    """A loaded teacher (see :func:`load_teacher`). ``encode(texts)`` gives float32 [N, dim] in input order.

    ``spec`` is what was given, ``kind`` one of ``sentence-transformers``, ``hf_tlaser``, ``vectors``; ``name`` a
    short display name; ``identity`` says where it comes from (folder, Hub id at its commit); ``fingerprint`` hashes
    what determines the vectors (the cache key, with ``prompt``); ``prompt_name``/``prompt`` the prompt prepended to
    every text (sentence-transformers), else None. A teacher is an evaluation embedder too: ``teacher(texts)``.
    """

    kind = "teacher"

    def __init__(self, spec: str, name: str, identity: str, fingerprint: str, dim: int, **details) -> None:
        self.spec = spec
        self.name = name
        self.identity = identity
        self.fingerprint = fingerprint
        self.dim = int(dim)
        self.languages: list[str] | None = details.get("languages")
        self.prompt_name: str | None = details.get("prompt_name")
        self.prompt: str | None = details.get("prompt")
        self.batch_size: int = details.get("batch_size", 64)

    def _encode(self, texts: list[str], batch_size: int, show_progress: bool) -> np.ndarray:
        raise NotImplementedError

    def encode(self, texts: Sequence[str], *, batch_size: int | None = None, show_progress: bool = False) -> np.ndarray:
        """float32 [len(texts), dim], row i the vector of ``texts[i]`` (an empty list gives [0, dim])."""
        texts = [texts] if isinstance(texts, str) else list(texts)
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        vectors = np.asarray(self._encode(texts, batch_size or self.batch_size, show_progress), dtype=np.float32)
        if vectors.shape != (len(texts), self.dim):
            raise RuntimeError(f"teacher {self.name} gave {vectors.shape} for {len(texts)} texts of width {self.dim}")
        return vectors

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        return self.encode(texts)

    def to_dict(self) -> dict:
        """What the teacher is, for sidecars and result files."""
        keys = ("kind", "spec", "name", "identity", "fingerprint", "dim", "prompt_name", "prompt", "languages")
        return {key: getattr(self, key) for key in keys}

    def describe(self) -> str:
        """One line: kind, identity, width and prompt."""
        prompt = f", prompt {self.prompt_name} {self.prompt!r}" if self.prompt else ", no prompt"
        return f"{self.kind} model {self.identity} ({self.dim} dimensions{prompt})"

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.describe()})"


class SentenceTransformerTeacher(Teacher):
    """A sentence-transformers model (its ``encode``, with the chosen prompt prepended to every text)."""

    kind = "sentence-transformers"

    def __init__(self, model, autocast_dtype: torch.dtype | None = None, **fields) -> None:
        super().__init__(**fields)
        self.model = model
        self.autocast_dtype = autocast_dtype

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


class HfTlaserTeacher(Teacher):
    """An hf_tlaser model folder, encoded as ``hf-tlaser evaluate`` encodes it (``EncoderEmbed``)."""

    kind = "hf_tlaser"

    def __init__(self, embed, **fields) -> None:
        super().__init__(**fields)
        self.embed = embed
        self.backend = embed.model.describe() if isinstance(embed.model, ExportedEncoder) else "torch"

    def describe(self) -> str:
        """As ``Teacher.describe``, with the backend that runs it."""
        return f"{super().describe()} on {self.backend}"

    def _encode(self, texts: list[str], batch_size: int, show_progress: bool) -> np.ndarray:
        return self.embed(texts)

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        """Whole documents, as ``hf-tlaser evaluate`` embeds them for the model itself (MLDoc)."""
        return np.asarray(self.embed.embed_documents(texts), dtype=np.float32)


class VectorsTeacher(Teacher):
    """Precomputed vectors (a ``vectors:PATH`` file): ``encode`` looks every text up by its SHA-1."""

    kind = "vectors"

    def __init__(self, path: Path, argument: str, meta: dict, **fields) -> None:
        super().__init__(**fields)
        self.path = path
        self.argument = argument
        self.meta = meta
        matrix, keys, _ = sidecar_paths(path)
        self.vectors = np.load(matrix, mmap_mode="r")
        self.keys = np.load(keys)
        self._order = np.argsort(self.keys, kind="stable")

    def describe(self) -> str:
        teacher = self.meta.get("teacher") or {}
        return (
            f"vectors {self.path} ({self.meta['rows']} rows, {self.dim} dimensions) of {teacher.get('kind', '?')} "
            f"model {teacher.get('identity', '?')} (prompt {teacher.get('prompt')!r})"
        )

    def check_texts(self, texts: Sequence[str]) -> None:
        """``UsageError`` unless ``texts`` are the texts the vectors were computed for, in the same order."""
        where = f"{self.argument} {VECTORS_PREFIX}{self.path}"
        hint = "recompute it with hf-tlaser teacher-vectors --output for this corpus"
        if len(texts) != self.meta["rows"]:
            raise UsageError(f"{where} holds {self.meta['rows']} rows but the corpus gives {len(texts)} texts; {hint}")
        digest = texts_digest(texts)
        if digest != self.meta["texts_sha1"]:
            raise UsageError(
                f"{where}: its texts differ from the corpus's (texts hash {self.meta['texts_sha1'][:12]} vs "
                f"{digest[:12]}): another corpus, order or --limit; {hint}"
            )

    def rows_of(self, texts: Sequence[str]) -> np.ndarray:
        """Row of every text in the file; ``UsageError`` naming the first text that is not there."""
        keys = text_keys(texts)
        position = np.searchsorted(self.keys, keys, sorter=self._order)
        position = np.minimum(position, len(self.keys) - 1)
        rows = self._order[position] if len(self.keys) else np.zeros(len(keys), dtype=np.int64)
        missing = np.flatnonzero(self.keys[rows] != keys) if len(self.keys) else np.arange(len(keys))
        if len(missing):
            first = texts[int(missing[0])]
            raise UsageError(
                f"{self.argument} {VECTORS_PREFIX}{self.path}: {len(missing)} of {len(texts)} texts are not in it "
                f"(first: {first[:60]!r}); recompute it with hf-tlaser teacher-vectors --output for this corpus"
            )
        return rows

    def _encode(self, texts: list[str], batch_size: int, show_progress: bool) -> np.ndarray:
        rows = self.rows_of(texts)
        order = np.argsort(rows)  # memory-mapped rows read in file order
        out = np.empty((len(rows), self.dim), dtype=np.float32)
        out[order] = self.vectors[rows[order]]
        return out


# ---------------------------------------------------------------------------------------------------- identity


def _stat_key(stat: os.stat_result) -> list[int]:
    return [stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns, stat.st_ino, stat.st_dev]


def _read_memo(path: Path | None) -> dict:
    if path is None or not path.is_file():
        return {}
    try:
        memo = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return memo if isinstance(memo, dict) else {}


def _write_memo(path: Path, memo: dict) -> None:
    """Save the memo (atomically), without the entries of files that are gone; a memo that cannot be written is
    skipped (the next call hashes again)."""
    kept = {name: entry for name, entry in memo.items() if os.path.exists(name)}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        save_json(path, kept)
    except OSError as err:
        logger.debug("file digest memo %s not written: %s", path, err)


def file_digest(path: Path, memo: dict | None = None) -> str:
    """Hex SHA-256 of every byte of ``path``. ``memo`` (``{absolute path: [size, mtime_ns, ctime_ns, inode, device,
    digest]}``) is read and updated: an entry is used only while the file's size, times, inode and device are all
    unchanged, else the whole file is hashed again; a file modified within ``RACY_SECONDS`` (a change in the same
    clock tick would keep its times) or while it was read is not memoised."""
    name = str(path.resolve())
    before = path.stat()
    entry = (memo or {}).get(name)
    if isinstance(entry, list) and entry[:-1] == _stat_key(before):
        return entry[-1]
    digest = hash_file(path)
    after = path.stat()
    recent = time.time_ns() - max(after.st_mtime_ns, after.st_ctime_ns) < RACY_SECONDS * 1e9
    if memo is not None and _stat_key(after) == _stat_key(before) and not recent:
        memo[name] = [*_stat_key(after), digest]
    return digest


def folder_fingerprint(folder: str | os.PathLike, memo: str | os.PathLike | None = AUTO) -> str:
    """Hex SHA-256 of what in a model folder determines its vectors: weights, config, tokenizer, sentence-transformers
    modules (``modules.json`` and every module folder: Pooling, Dense, Normalize...) and prompts
    (``config_sentence_transformers.json``), sub-folders included, every byte of each file by content and relative
    path (not absolute paths or dates: a copy elsewhere has the same fingerprint); run records, evaluations,
    checkpoints, trainer state, ONNX/OpenVINO exports and docs are left out.

    ``memo``: a JSON file of file digests (:func:`file_digest`) that spares hashing unchanged files again; ``auto``:
    ``MEMO_NAME`` under the teacher cache root (``hf_tlaser.teachers.cache_root``), None: hash every file."""
    root = Path(folder)
    memo_path = cache_root() / MEMO_NAME if memo == AUTO else (Path(memo) if memo is not None else None)
    digests = _read_memo(memo_path)
    known = dict(digests)
    digest = hashlib.sha256()
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not _SKIP_DIRS.match(d))
        for filename in sorted(filenames):
            path = Path(dirpath) / filename
            if filename in _SKIP_FILES or path.suffix in _SKIP_SUFFIXES or not path.is_file():
                continue
            relative = path.relative_to(root).as_posix()
            digest.update(f"{relative}\0{file_digest(path, digests)}\n".encode())
    if memo_path is not None and digests != known:
        _write_memo(memo_path, digests)
    return digest.hexdigest()


def card_languages(folder: Path) -> list[str] | None:
    """The ``language:`` list of a model card's YAML header (README.md); None without one, or for a word such as
    ``multilingual`` that names no language."""
    readme = folder / "README.md"
    if not readme.is_file():
        return None
    text = readme.read_text(encoding="utf-8", errors="replace")
    if not text.startswith("---"):
        return None
    import yaml

    try:
        header = yaml.safe_load(text.split("---", 2)[1]) or {}
    except yaml.YAMLError:
        return None
    languages = header.get("language") if isinstance(header, dict) else None
    languages = [languages] if isinstance(languages, str) else languages
    if not isinstance(languages, list):
        return None
    codes = [str(lang) for lang in languages if re.fullmatch(r"[a-z]{2,3}([-_][A-Za-z0-9]+)?", str(lang))]
    return codes or None


# ---------------------------------------------------------------------------------------------------- loading


def _load_sentence_transformer(
    spec: str, folder: Path, identity: str, where: str, device, precision: str, prompt_name, prefer, batch_size
) -> SentenceTransformerTeacher:
    from sentence_transformers import SentenceTransformer

    try:
        model = SentenceTransformer(str(folder), device=str(device), local_files_only=True)
    except Exception as err:  # noqa: BLE001 - any loading failure is the user's folder
        raise UsageError(f"{where}: cannot load it as a sentence-transformers model ({first_line(err)})") from None
    model.eval()
    name, prompt = choose_prompt(model.prompts, model.default_prompt_name, prompt_name, prefer, where)
    width = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
    return SentenceTransformerTeacher(
        model,
        resolve_precision(precision, device).autocast_dtype,
        spec=spec,
        name=_display_name(spec, folder),
        identity=identity,
        fingerprint=folder_fingerprint(folder),
        dim=width(),
        languages=card_languages(folder),
        prompt_name=name,
        prompt=prompt,
        batch_size=batch_size,
    )


def _load_hf_tlaser(
    spec: str, folder: Path, identity: str, argument: str, device, precision: str, batch_size, backend: str = "torch"
) -> HfTlaserTeacher:
    from hf_tlaser.encoding import model_languages, trained_languages

    where = f"{argument} {spec!r}"
    config = check_model_folder(folder, argument)
    if model_languages(config) is not None:
        raise UsageError(
            f"{where} is a {config['model_type']} model, which embeds each language through its own encoder and "
            "needs the language of every text: it cannot be a teacher; give a multilingual model"
        )
    exported = load_backend(folder, backend, precision)
    try:
        if exported is None:
            model, tokenizer = load_encoder(folder)
        else:
            model, tokenizer = exported, AutoTokenizer.from_pretrained(folder)
    except Exception as err:  # noqa: BLE001 - any loading failure is the user's folder
        raise UsageError(f"{where}: cannot load the model ({first_line(err)})") from None
    autocast = None if exported is not None else resolve_precision(precision, device).autocast_dtype
    embed = EncoderEmbed(model, tokenizer, torch.device("cpu") if exported is not None else device, autocast)
    fingerprint = folder_fingerprint(folder)
    if exported is not None:  # another file computes the vectors (int8 ones differ): it is part of what they are
        files = [exported.path, exported.path.with_suffix(".bin")]  # an OpenVINO graph keeps its weights in .bin
        parts = "\0".join([fingerprint, exported.backend, *(file_digest(path) for path in files if path.is_file())])
        fingerprint = hashlib.sha256(parts.encode()).hexdigest()
    return HfTlaserTeacher(
        embed,
        spec=spec,
        name=f"{model_name(config)} {_display_name(spec, folder)}",
        identity=identity,
        fingerprint=fingerprint,
        dim=sentence_vector_size(config),
        languages=trained_languages(config) or None,
        batch_size=batch_size,
    )


def _load_vectors(spec: str, argument: str) -> VectorsTeacher:
    path = Path(spec[len(VECTORS_PREFIX) :]).expanduser()
    where = f"{argument} {spec}"
    hint = "write it with hf-tlaser teacher-vectors --output PATH.npy"
    matrix, keys, sidecar = sidecar_paths(path)
    if not path.name.endswith(".npy"):
        raise UsageError(f"{where}: expected a .npy file; {hint}")
    for file in (matrix, keys, sidecar):
        if not file.is_file():
            raise UsageError(f"{where}: {file} does not exist; {hint}")
    try:
        meta = json.loads(sidecar.read_text(encoding="utf-8"))
        shape = np.load(matrix, mmap_mode="r").shape
        key_array = np.load(keys, mmap_mode="r")
    except (OSError, ValueError, EOFError) as err:
        raise UsageError(f"{where}: unreadable ({first_line(err)}); {hint}") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT or meta.get("version") != VERSION:
        raise UsageError(f"{where}: {sidecar} is not a {FORMAT} v{VERSION} sidecar; {hint}")
    rows = meta.get("rows")
    if shape != (rows, meta.get("dim")) or key_array.shape != (rows,) or key_array.dtype != KEY_DTYPE:
        raise UsageError(
            f"{where}: the files do not agree (matrix {shape}, {key_array.shape[0]} keys, sidecar {rows} rows x "
            f"{meta.get('dim')}): truncated or mixed files; {hint}"
        )
    teacher = meta.get("teacher") or {}
    return VectorsTeacher(
        path,
        argument,
        meta,
        spec=spec,
        name=f"vectors {path.name}",
        identity=f"{path.resolve()} (from {teacher.get('identity', 'an unknown teacher')})",
        fingerprint=teacher.get("fingerprint") or f"vectors-{meta['texts_sha1']}",
        dim=meta["dim"],
        languages=teacher.get("languages"),
        prompt_name=teacher.get("prompt_name"),
        prompt=teacher.get("prompt"),
    )


def _display_name(spec: str, folder: Path) -> str:
    looks_local = spec.startswith((".", "/", "~")) or Path(spec).exists()
    return folder.resolve().name if looks_local else spec


def load_teacher(
    spec: str,
    *,
    prompt_name: str | None = AUTO,
    prefer: Sequence[str] = TRAIN_PROMPTS,
    device: str | torch.device | None = None,
    precision: str = "auto",
    batch_size: int = 64,
    revision: str | None = None,
    texts: Sequence[str] | None = None,
    argument: str = "--teacher",
    backend: str = "torch",
) -> Teacher:
    """Load a teacher SPEC (module docstring) into a :class:`Teacher`.

    ``prompt_name`` (sentence-transformers): ``auto`` takes the first of ``prefer`` the model defines
    (``TRAIN_PROMPTS`` = ``EVAL_PROMPTS``: e5's ``query: ``), else its default prompt; ``none``
    prepends nothing; a name must be one of the model's prompts. ``device`` defaults to CUDA, else MPS, else CPU;
    ``precision`` (auto/fp32/bf16/fp16) is the autocast of the forward pass (not part of the fingerprint: vectors of
    one model in another precision are the same vectors to within rounding). ``revision`` (or ``ID@REVISION``) pins
    a Hub model. ``texts`` checks a ``vectors:`` file against the corpus (row count and texts hash). ``backend``
    runs an hf_tlaser folder's exported files (``hf_tlaser.backend.load_backend``: "auto" chooses only with
    ``precision`` "auto"); a sentence-transformers model runs in torch.

    ``UsageError`` naming ``argument`` when the SPEC cannot be loaded: a missing folder or file, a folder that is no
    model, an unknown prompt, a cNV model (one encoder per language), a ``vectors:`` file whose files disagree or
    whose rows do not match ``texts``.
    """
    spec = str(spec).strip()
    where = f"{argument} {spec!r}"
    if not spec:
        raise UsageError(f"{argument}: empty; give {SPEC_HELP}")
    if spec.startswith(VECTORS_PREFIX):
        teacher = _load_vectors(spec, argument)
        if texts is not None:
            teacher.check_texts(texts)
        return teacher
    folder, identity = model_folder(spec, where, revision, SPEC_HELP)
    device = torch.device(device) if device is not None else default_device()
    config = _read_config(folder / "config.json", where)
    if config is not None and config.get("model_type") in MODEL_TYPES:
        teacher = _load_hf_tlaser(spec, folder, identity, argument, device, precision, batch_size, backend)
    elif backend not in ("torch", "auto"):
        raise UsageError(f"{where}: --backend {backend} runs hf_tlaser model folders only; use --backend torch")
    elif config is not None or (folder / "modules.json").is_file():
        teacher = _load_sentence_transformer(
            spec, folder, identity, where, device, precision, prompt_name, prefer, batch_size
        )
    else:
        raise UsageError(f"{where} is not a model folder (no config.json or modules.json); give {SPEC_HELP}")
    logger.info("teacher: %s", teacher.describe())
    return teacher


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

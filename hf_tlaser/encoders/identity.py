"""What an encoder is, read from its files: the fingerprint of a model folder (a hash of what determines its
vectors, by content: a copy on another machine has the same one), the languages its card lists, a display name, and
the cache root under which file digests (and the teachers' vector cache) are kept."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import time
from pathlib import Path

from hf_tlaser.backend.runtime import hash_file
from hf_tlaser.model_folders import ADD_LANGUAGE_RECORD, AUTO

from .vectors import save_json

logger = logging.getLogger(__name__)

ENV_VAR = "HF_TLASER_TEACHER_CACHE"
"""Environment variable naming the cache root (:func:`cache_root`)."""
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
"""File of the file-digest memo under the cache root."""
RACY_SECONDS = 2


def cache_root(cache_dir: str | os.PathLike | None = None) -> Path:
    """The cache root: ``cache_dir``, else ``$HF_TLASER_TEACHER_CACHE``, else ``$XDG_CACHE_HOME/hf_tlaser/teachers``
    (``~/.cache/hf_tlaser/teachers``)."""
    if cache_dir is None:
        cache_dir = os.environ.get(ENV_VAR)
    if cache_dir is None:
        return Path(os.environ.get("XDG_CACHE_HOME") or "~/.cache").expanduser() / "hf_tlaser" / "teachers"
    return Path(cache_dir).expanduser()


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
    ``MEMO_NAME`` under :func:`cache_root`, None: hash every file."""
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


def display_name(spec: str, folder: Path) -> str:
    looks_local = spec.startswith((".", "/", "~")) or Path(spec).exists()
    return folder.resolve().name if looks_local else spec

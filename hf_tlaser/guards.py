"""What ``hf-tlaser embed``, ``mine`` and ``export`` check before they write, and how a failed write is reported.

* :func:`check_writable`: the output's folder exists and a file can be created in it (tried, not guessed from the
  mode bits: root passes every mode check), before the model loads;
* :func:`check_space`: the filesystem has the bytes the output will take (``shutil.disk_usage``), before the work
  that writes them;
* :class:`OutputLock`: one run per output. ``fcntl.flock`` on ``OUTPUT.lock`` (the holder's pid inside): a second
  run on the same output stops in one line naming the pid that holds it; the kernel drops the lock when the process
  ends, however it ends, and a lock file left by a killed run holds no lock;
* :func:`write_failed`: an ``OSError`` while writing (a full disk, a quota, a folder made read-only meanwhile) as one
  line naming the path;
* :func:`refuse_outputs_over_inputs`: no output is, or contains, one of the command's inputs (compared as real
  paths, symbolic links resolved, and as files: a hard link is the file it links), whatever ``--overwrite`` says:
  ``--overwrite`` replaces what the command wrote, never what it reads.
"""

from __future__ import annotations

import errno
import fcntl
import os
import shutil
from collections.abc import Iterable, Mapping
from pathlib import Path

from hf_tlaser.errors import UsageError

SPACE_MARGIN = 1 << 20
"""Bytes kept free beyond an output's expected size (its sidecar, logs, the filesystem's own blocks)."""
LOCK_SUFFIX = ".lock"


def megabytes(size: float) -> str:
    """``size`` bytes in MB, one decimal."""
    return f"{size / 1e6:.1f} MB"


def check_writable(path: str | os.PathLike, argument: str) -> Path:
    """``UsageError`` unless ``path``'s folder exists and a file can be created there (one is created and removed);
    ``path`` itself must not be a folder. The folder."""
    path = Path(path)
    folder = path.parent
    if path.is_dir():
        raise UsageError(f"{argument} {path}: is a folder; give a file path")
    if not folder.is_dir():
        raise UsageError(f"{argument} {path}: no folder {folder}; create it first")
    probe = folder / f".hf-tlaser-probe-{os.getpid()}"
    try:
        os.close(os.open(probe, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
        os.unlink(probe)
    except FileExistsError:  # a probe left by a killed run of this pid number: the folder is writable
        probe.unlink(missing_ok=True)
    except OSError as err:
        problem = f"cannot write in {folder} ({err.strerror})"
        raise UsageError(f"{argument} {path}: {problem}; choose a writable folder") from None
    return folder


def check_space(folder: str | os.PathLike, needed: int, argument: str, what: str) -> None:
    """``UsageError`` when ``folder``'s filesystem has less than ``needed`` bytes (plus ``SPACE_MARGIN``) free."""
    free = shutil.disk_usage(folder).free
    if free < needed + SPACE_MARGIN:
        raise UsageError(
            f"{argument}: {what} needs about {megabytes(needed)}, the filesystem of {folder} has {megabytes(free)} "
            "free; free some space or write elsewhere"
        )


def write_failed(err: OSError, path: str | os.PathLike, argument: str) -> UsageError:
    """A write error as one line naming the file (the error's own, else ``path``) and what to do."""
    where = err.filename or path
    hint = "free some space and run again" if err.errno in (errno.ENOSPC, errno.EDQUOT) else "check the folder"
    return UsageError(f"{argument}: writing {where} failed ({err.strerror or err}); {hint}")


PathArgument = str | os.PathLike | Iterable[str | os.PathLike] | None
"""A command's path argument: one path, several (``nargs="+"``), or ``None`` when not given."""


def _paths(value: PathArgument) -> list[Path]:
    """The paths of one argument (none for ``None``)."""
    if value is None:
        return []
    if isinstance(value, (str, os.PathLike)):
        return [Path(value)]
    return [Path(path) for path in value]


def _same_file(a: Path, b: Path) -> bool:
    """``a`` and ``b`` are one file: the same real path, or, both existing, the same inode (a hard link)."""
    if os.path.realpath(a) == os.path.realpath(b):
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:  # one of them does not exist (yet)
        return False


def refuse_outputs_over_inputs(outputs: Mapping[str, PathArgument], inputs: Mapping[str, PathArgument]) -> None:
    """``UsageError`` (one line naming both arguments) when an output of ``outputs`` (``{"--output": path, ...}``) is
    an input of ``inputs`` (``{"--src": path, "--src-embeddings": [path, ...], "MODEL": folder, ...}``) or a folder
    that contains one, compared as real paths (``os.path.realpath``: symbolic links and ``..`` resolved; a path that
    does not exist yet is compared as it would be created) and, where both exist, as files (a hard link is the file
    it links). A value may be one path or several; ``None`` entries are skipped. Call it before anything is read or
    written."""
    real_inputs = [
        (name, path, Path(os.path.realpath(path))) for name, value in inputs.items() for path in _paths(value)
    ]
    for out_name, value in outputs.items():
        for out_path in _paths(value):
            real_out = Path(os.path.realpath(out_path))
            for in_name, in_path, real_in in real_inputs:
                if _same_file(out_path, in_path):
                    problem = "is"
                elif real_out in real_in.parents:
                    problem = "contains"
                else:
                    continue
                raise UsageError(
                    f"{out_name} {out_path}: {problem} the input {in_name} ({real_in}); an output never replaces what "
                    "the command reads, not even with --overwrite: give another path"
                )


def lock_path(path: str | os.PathLike) -> Path:
    """``OUTPUT.lock``: the lock file of an output."""
    return Path(f"{path}{LOCK_SUFFIX}")


class OutputLock:
    """An exclusive ``fcntl.flock`` on ``OUTPUT.lock`` (see the module docstring); a context manager. ``UsageError``
    naming the holder's pid when another process holds it."""

    def __init__(self, path: str | os.PathLike, argument: str) -> None:
        self.path, self.argument = Path(path), argument
        self.file = lock_path(path)
        self.fd: int | None = None

    def acquire(self) -> OutputLock:
        while True:
            fd = os.open(self.file, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.read(fd, 64).decode("ascii", "replace").strip() or "unknown"
                os.close(fd)
                raise UsageError(
                    f"{self.argument} {self.path}: another run (pid {holder}) is writing it (it holds {self.file}); "
                    "wait for it to end, or stop it"
                ) from None
            try:
                same = os.stat(self.file).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if same:  # else the holder removed the file as we opened it: lock the new one
                break
            os.close(fd)
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self.fd = fd
        return self

    def release(self) -> None:
        """Remove the lock file, then drop the lock (in this order, so no process locks a removed file)."""
        if self.fd is None:
            return
        self.file.unlink(missing_ok=True)
        os.close(self.fd)
        self.fd = None

    def __enter__(self) -> OutputLock:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()

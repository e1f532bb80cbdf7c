"""The session's processes: commands under time limits (their process groups stopped), detached runs that
outlive a call, their liveness and logs."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from .records import checkpoints

KILL_AFTER = 10
"""Seconds between SIGTERM and SIGKILL of a command over its limit (``timeout --kill-after``)."""

CURVE_EVERY = 20
"""Seconds between the checkpoint evaluator's passes beside the detached run."""


def exit_status(returncode: int) -> int:
    """A process's exit status as a shell reports it: 128 + the signal for one killed by a signal."""
    return 128 - returncode if returncode < 0 else returncode


def last_lines(text: str, count: int, width: int, pattern: str | None = None) -> list[str]:
    """The last ``count`` non-blank lines of a log (progress bars' carriage returns as line ends), matching
    ``pattern`` where given, each cut to ``width`` characters."""
    lines = [line for line in text.replace("\r", "\n").split("\n") if line.strip()]
    if pattern is not None:
        lines = [line for line in lines if re.search(pattern, line)]
    return [line[:width] for line in lines[-count:]] if count else []


def read_log(path: Path) -> str:
    return path.read_text(errors="replace") if path.is_file() else ""


def alive(pid: int) -> bool:
    """Whether process ``pid`` still runs (``kill -0``; a child of this process that has ended is reaped, and a
    zombie counts as ended)."""
    if pid <= 0:
        return False
    try:
        if os.waitpid(pid, os.WNOHANG)[0] == pid:
            return False
    except ChildProcessError:
        pass
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        return state not in ("Z", "X")
    except (OSError, IndexError):
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def signal_group(pid: int, sig: int) -> None:
    """``kill -SIG -- -PID``: the process group that ``pid`` leads (never this session's own: no pid, 0 or 1)."""
    if pid <= 1:
        return
    with contextlib.suppress(OSError):
        os.killpg(pid, sig)


def run_limited(
    cmd: Sequence[str | Path], log: Path, seconds: int, env: Mapping[str, str] | None = None, append: bool = True
) -> int:
    """``timeout --kill-after=10 SECONDS CMD >>LOG 2>&1``: CMD in its own process group, its output in ``log``,
    the group stopped (SIGTERM, then SIGKILL) after ``seconds``; CMD's exit status, 124 when it was stopped (137 when
    it had to be killed)."""
    with log.open("ab" if append else "wb") as out:
        proc = subprocess.Popen(
            [str(c) for c in cmd],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=None if env is None else {**os.environ, **env},
            process_group=0,
        )
        try:
            return exit_status(proc.wait(timeout=seconds))
        except subprocess.TimeoutExpired:
            signal_group(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=KILL_AFTER)
                return 124
            except subprocess.TimeoutExpired:
                signal_group(proc.pid, signal.SIGKILL)
                proc.wait()
                return 137
        except BaseException:
            signal_group(proc.pid, signal.SIGKILL)
            raise


def detach(cmd: Sequence[str | Path], log: Path | None, pid_file: Path) -> int:
    """``setsid nohup CMD >LOG 2>&1 &``: CMD in a session of its own that outlives this call; its pid in
    ``pid_file`` (also its process group's)."""
    with log.open("wb") if log is not None else open(os.devnull, "wb") as out:
        proc = subprocess.Popen(
            ["nohup", *(str(c) for c in cmd)],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    pid_file.write_text(f"{proc.pid}\n")
    return proc.pid


def curve_evaluator(pid: int, python: str, run: Path, log: Path) -> int:
    """Beside the detached run ``pid``: its checkpoints evaluated every ``CURVE_EVERY`` s while it trains (the
    learning curve grows)."""
    while alive(pid):
        time.sleep(CURVE_EVERY)
        with log.open("ab") as out:
            subprocess.run([python, "scripts/learning_curve.py", "evaluate", str(run)], stdout=out, stderr=out)
    return 0


def progress(train_log: Path, run: Path) -> str:
    """The run's last logged loss, throughput, pairs and epoch, and its checkpoints so far."""
    updates = re.findall(r"\{'loss'[^}\n]*\}", read_log(train_log))
    keys = re.findall(r"'(loss|tokens_per_second|pairs|epoch)': '?([0-9.e+-]*)", updates[-1]) if updates else []
    last = " ".join(f"{key}: {value}" for key, value in keys) or "no update logged yet"
    return f"{last} | checkpoints: {len(checkpoints(run))}"

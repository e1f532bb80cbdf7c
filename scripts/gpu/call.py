"""One device call's base (``Call``): its flags, profile, clock and folders, its commands under time limits,
and publishing into $OUT."""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tarfile
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import NoReturn

from .carry import CARRY, MIB
from .processes import last_lines, read_log, run_limited
from .profiles import PROFILES, Clock, stage_list, work_dir
from .records import note, summary

PUBLISHED = (
    "SUMMARY.md",
    "BENCHMARKS.md",
    "BENCHMARKS.json",
    "environment.json",
    "learning_curve.md",
    "learning_curve.png",
)
"""The results copied into $OUT as they are; with ``ARCHIVES``, every file a session publishes."""
ARCHIVES = ("results.tar.gz", "logs.tar.gz")
OUT_FILES_MAX = 8
OUT_FILE_LIMIT = 16 * MIB
"""What comes back from the device machine: at most 8 flat files, each under 16 MiB."""
RELEASE_RESULTS = ("README.md", "trainer_state.json", "train_log.jsonl", "hf_tlaser_train.json", "eval/results.json")
LEVER_RESULTS = ("results.json", "train_log.jsonl", "hf_tlaser_train.json")


def die(message: str) -> NoReturn:
    """``gpu_session: MESSAGE`` on stderr, exit status 2."""
    print(f"gpu_session: {message}", file=sys.stderr, flush=True)
    raise SystemExit(2)


class Call:
    """One device call: its flags, profile, clock and folders; its commands under time limits, its results published."""

    def __init__(
        self, args: argparse.Namespace, environ: Mapping[str, str] = os.environ, now: Callable[[], float] = time.time
    ) -> None:
        self.size: str = args.size
        self.profile = PROFILES[args.size]
        self.stages = stage_list(args.stage)
        self.train_minutes: str = args.train_minutes or self.profile.train_minutes
        self.wait_minutes: float | None = args.wait_minutes
        self.save_steps: str | None = args.save_steps or self.profile.save_steps
        self.deadline_minutes: float = (
            self.profile.deadline_minutes if args.deadline_minutes is None else args.deadline_minutes
        )
        self.clock = Clock(self.deadline_minutes, now)
        self.python = environ.get("PYTHON") or self.profile.python
        self.out = Path(args.out or environ.get("OUT") or "runs/gpu_session")
        self.work = work_dir(args.size, environ)
        self.results = self.work / "results"
        self.logs = self.work / "logs"
        self.run_dir = self.work / "train" / "ctlaser-small"
        self.carry = Path(CARRY)
        self._precision: str | None = None

    def say(self, message: str) -> None:
        print(f"[gpu_session {time.strftime('%H:%M:%S')} +{self.clock.elapsed()}s] {message}", flush=True)

    def limit(
        self,
        seconds: int,
        log: Path,
        cmd: Sequence[str | Path],
        env: Mapping[str, str] | None = None,
        append: bool = True,
        quiet: bool = False,
    ) -> int:
        """CMD with its output in ``log``, stopped after ``seconds`` capped by the deadline (keeping
        ``PUBLISH_SECONDS`` to publish); its exit status, 124 when stopped or not started for want of time."""
        seconds = self.clock.cap(seconds)
        words = " ".join(str(c) for c in cmd)
        if seconds <= 5:
            self.say(f"no time left for: {words}")
            with log.open("a") as handle:
                handle.write(f"no time left for: {words}\n")
            return 124
        if not quiet:
            self.say(f"$ {words} (limit {seconds}s, log {log})")
        rc = run_limited(cmd, log, seconds, env=env, append=append)
        if not quiet:
            for line in last_lines(read_log(log), 3, 240):
                print(line, flush=True)
        return rc

    def probe(self, code: str) -> str | None:
        """``$PY -c CODE``'s output, None when it fails."""
        try:
            done = subprocess.run([self.python, "-c", code], capture_output=True, text=True, timeout=300)
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    def precision(self) -> str:
        """fp32 on a CPU, else bf16 where the GPU has it, fp16 where not."""
        if self._precision is None:
            if self.profile.device == "cpu":
                self._precision = "fp32"
            else:
                code = 'import torch; print("bf16" if torch.cuda.is_bf16_supported() else "fp16")'
                self._precision = self.probe(code) or "fp16"
        return self._precision

    def note(self, name: str, key: str, value: str) -> None:
        note(self.results / name, key, value)

    def data(self) -> Path:
        return Path(os.environ["HF_TLASER_DATA"])

    def result_paths(self) -> list[str]:
        """What results.tar.gz holds, relative to the work folder: the stages' records, the run's curve, the
        evaluation, the release run's and the levers' results."""
        names = [f"results/{f}" for f in ("distributed.json", "train.json") if (self.results / f).is_file()]
        if (self.run_dir / "curve.json").is_file():
            names.append(str((self.run_dir / "curve.json").relative_to(self.work)))
        if (self.work / "eval").is_dir():
            names.append("eval")
        if (self.results / "release.json").is_file():
            names.append("results/release.json")
        names += [f"release/{f}" for f in RELEASE_RESULTS if (self.work / "release" / f).is_file()]
        for f in LEVER_RESULTS:
            names += [str(p.relative_to(self.work)) for p in sorted(self.work.glob(f"levers/*/{f}")) if p.is_file()]
        return names

    def publish(self) -> list[Path]:
        """At most ``OUT_FILES_MAX`` flat files into $OUT, each under ``OUT_FILE_LIMIT``: SUMMARY.md (written now) and
        the stages' results as they are, results.tar.gz and logs.tar.gz. The files published."""
        with (self.logs / "publish.log").open("a") as handle:
            try:
                summary(self.results)
            except Exception:  # (a summary that fails must not stop the session)
                handle.write(traceback.format_exc())
                self.say("summary failed (see logs)")
        published = []
        for name in PUBLISHED:
            if (self.results / name).is_file():
                shutil.copy(self.results / name, self.out / name)
                published.append(self.out / name)
        extra = self.result_paths()
        archives = {"results.tar.gz": extra, "logs.tar.gz": ["logs"]}
        for archive, names in archives.items():
            if names:
                try:
                    with tarfile.open(self.out / archive, "w:gz") as tar:
                        for name in names:
                            tar.add(self.work / name, arcname=name)
                    published.append(self.out / archive)
                except OSError as err:  # a file that changed while read (a detached run's log, say)
                    self.say(f"WARNING: {archive} failed ({err})")
        files = sorted(p for p in self.out.iterdir() if p.is_file())
        for path in files:
            if path.stat().st_size > OUT_FILE_LIMIT:
                self.say(f"WARNING: {path} is over {OUT_FILE_LIMIT // MIB} MiB and will not come back")
        if len(files) > OUT_FILES_MAX:
            self.say(f"WARNING: {len(files)} files in {self.out}, more than the {OUT_FILES_MAX} that come back")
        self.say(f"published {len(files)} files into {self.out}")
        return published

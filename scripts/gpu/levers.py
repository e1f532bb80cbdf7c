"""The stages of the release recipe: release (timed), then its levers and issue 53's in-batch negatives, side by
side."""

from __future__ import annotations

import concurrent.futures
import functools
import json
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from .call import Call
from .processes import exit_status, last_lines, read_log
from .profiles import lever_runs, negative_runs, negatives_stop, release_facts

NO_LIMIT = 10**9


class ReleaseStages(Call):
    """The release recipe's stages: release, levers and negatives."""

    def release_command(self) -> list[str]:
        """scripts/release.py on this device; --save-total-limit after --: every 250-update checkpoint stays (the
        levers' plain point)."""
        out = self.work / "release"
        return [
            *(self.python, "scripts/release.py", "--output", str(out), "--data-dir", str(self.data())),
            *(*self.profile.release_args, "--", "--save-total-limit", "100", *self.profile.release_train),
        ]

    def stage_release(self) -> None:
        """The release recipe (scripts/release.py) on this device, timed: training, then the evaluation."""
        out = self.work / "release"
        start = time.monotonic()
        if not (self.data() / "multilingual-e5-small" / "config.json").is_file():
            self.say(f"release: no start in {self.data() / 'multilingual-e5-small'} (pack-data --release)")
            return
        if out.exists():
            self.say(f"release: {out} exists on this machine: release.py continues it (or evaluates it, if trained)")
        self.say(
            f"release: scripts/release.py {' '.join(self.profile.release_args)}, the recipe's checkpoints kept "
            "for the levers"
        )
        log = self.logs / "release.log"
        with log.open("wb") as handle:
            proc = subprocess.Popen(self.release_command(), stdout=handle, stderr=subprocess.STDOUT)
        trained = None
        while proc.poll() is None:
            if trained is None and (out / "trainer_state.json").is_file():
                trained = int(time.monotonic() - start)
                self.note("release.json", "train_seconds", str(trained))
                self.say(f"release: trained in {trained} s (data included); evaluating")
            if self.clock.left() <= 25:
                self.say("release: out of time; stopping it (started again, release.py evaluates the trained model)")
                proc.terminate()
                break
            time.sleep(5)
        self.note("release.json", "exit", str(exit_status(proc.wait())))
        self.note("release.json", "seconds", str(int(time.monotonic() - start)))
        self.note("release.json", "device", json.dumps(self.profile.device))
        for line in last_lines(read_log(log), 3, 10**6, r"^release:|Error"):
            print(line, flush=True)

    def lever_train_command(self, name: str, updates: int, args: Sequence[str], corpora: str) -> list[str]:
        """One warm-start run at the release recipe (from the start, its corpora), ``args`` what differs."""
        data = self.data()
        return [
            *("nice", "-n", "10", self.python, "-m", "hf_tlaser.cli", "train", "--model", "ctlaser", "--seed", "1"),
            *("--corpora", corpora, "--init-from", str(data / "multilingual-e5-small"), "--data-dir", str(data)),
            *("--max-steps", str(updates), "--save-steps", "1000000", "--output-dir", str(self.work / "levers" / name)),
            *args,
            *self.profile.release_train,
        ]

    def lever_eval_command(self, name: str, folder: Path, sets: Sequence[str]) -> list[str]:
        """The release recipe's retrieval sets, Multi30k test 2016 and SIB-200 (seed 0) of one lever's model."""
        data = self.data()
        m30k = data / "multi30k" / "task1-raw" / "test_2016_flickr"
        files = "files:" + ":".join(f"{lang}={m30k}.{lang}.gz" for lang in ("cs", "de", "en", "fr"))
        return [
            *("nice", "-n", "10", self.python, "-m", "hf_tlaser.cli", "evaluate", str(folder), "--suite", "retrieval"),
            *("sib200", "--data-dir", str(data), "--retrieval-sets", *sets, files, "--projection", "none"),
            *("--no-references", *self.profile.lever_eval, "--output-dir", str(self.work / "levers" / f"{name}-eval")),
        ]

    def lever_eval(self, name: str, folder: Path, sets: Sequence[str]) -> int:
        log = self.logs / f"lever-{name}.log"
        rc = self.limit(NO_LIMIT, log, self.lever_eval_command(name, folder, sets), quiet=True)
        tail = read_log(log)[-160:].replace("\r", " ").replace("\n", " ")
        self.say(f"lever {name}: exit {rc} ({tail})")
        return rc

    def lever(self, name: str, updates: int, args: Sequence[str], corpora: str, sets: Sequence[str]) -> int:
        """One lever run until the deadline, then its evaluation."""
        log = self.logs / f"lever-{name}.log"
        cmd = self.lever_train_command(name, updates, args, corpora)
        rc = self.limit(NO_LIMIT, log, cmd, append=False, quiet=True)
        if rc != 0:
            self.say(f"lever {name}: training exit {rc} (logs/lever-{name}.log)")
            return rc
        return self.lever_eval(name, self.work / "levers" / name, sets)

    def side_by_side(self, jobs: Sequence[Callable[[], object]]) -> None:
        """Run ``jobs`` at once (each starts its processes), and wait for all."""
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, len(jobs))) as pool:
            for done in [pool.submit(job) for job in jobs]:
                error = done.exception()
                if error is not None:
                    self.say(f"a side-by-side run failed: {error!r}")

    def stage_levers(self) -> None:
        """The release curve's levers at ``lever_updates`` against the recipe's own checkpoint there, side by side."""
        corpora, sets = release_facts()
        (self.work / "levers").mkdir(parents=True, exist_ok=True)
        start = self.data() / "multilingual-e5-small"
        plain = self.work / "release" / f"checkpoint-{self.profile.lever_updates}"
        jobs: list[Callable[[], object]] = []
        if plain.is_dir():
            jobs.append(functools.partial(self.lever_eval, "plain", plain, sets))
        else:
            self.say(f"levers: no {plain} (run the release stage first)")
        for name, updates, args in lever_runs(self.profile, start):
            jobs.append(functools.partial(self.lever, name, updates, args, corpora, sets))
        self.side_by_side(jobs)

    def stage_negatives(self) -> None:
        """Issue 53: in-batch negatives side by side from the start (``negative_runs``); a run still training when
        only the data's and the evaluation's minutes are left stops and saves (the safety stop)."""
        stop = negatives_stop(self.clock.left(), self.profile.neg_reserve)
        corpora, sets = release_facts()
        (self.work / "levers").mkdir(parents=True, exist_ok=True)
        self.say(f"negatives: {self.profile.neg_updates} updates each, training stopped after {stop} min at the latest")
        runs = negative_runs(self.profile, stop)
        self.side_by_side([functools.partial(self.lever, n, u, a, corpora, sets) for n, u, a in runs])

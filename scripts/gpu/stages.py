"""The stages of a lease: setup, bench, dist, train (detached) and finish."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Sequence

from .call import Call, die
from .carry import ROOT
from .data import make_tiny_data
from .processes import alive, detach, last_lines, progress, read_log, read_pid, signal_group
from .profiles import accelerate_command, launcher_env, torch_pin
from .records import checkpoints, dist_facts, save_steps, train_facts

PIP_ARGS = ("-m", "pip", "install", "--no-index", "--no-deps", "--no-build-isolation", "--disable-pip-version-check")


class LeaseStages(Call):
    """The stages of a lease (``--stage all``): setup, bench, dist, train and finish."""

    def stage_setup(self) -> None:
        """torch checked (the machine's own CUDA build vs the pin), the carried wheels installed (full), the corpora
        unpacked (HF_TLASER_DATA), environment.json. Done once per machine (a marker in the work folder)."""
        found = self.probe("import torch; print(torch.__version__, torch.cuda.is_available())")
        if found is None:
            die(f"no torch in {self.python}: the GPU machine's python3 has it; set PYTHON")
        torch_version, cuda = found.split()[-2:]
        pin = torch_pin(ROOT / "constraints.txt")
        self.say(f"torch {torch_version} here (constraints.txt pins {pin}); cuda available: {cuda}")
        if self.size == "full" and cuda != "True":
            die("--size full needs CUDA and torch sees none (use --size tiny on a CPU)")
        marker = self.work / ".setup_done"
        install = "not run"
        setup_log = self.logs / "setup.log"
        if marker.is_file():
            self.say(f"setup: already done on this machine ({marker.read_text().strip()})")
        elif self.size == "tiny":
            install = "skipped: --size tiny installs nothing into this shared environment"
            pip_there = f"{self.python} -m pip install --no-index --no-deps {self.carry}/wheels/*.whl, then -e ."
            self.say(f"setup: {install}; on the GPU machine: {pip_there}")
        else:
            if not (self.carry / "wheels").is_dir():
                die(
                    f"no {self.carry}/wheels: run scripts/gpu_session.sh --prepare here and name {self.carry} in the "
                    "call's carry"
                )
            # the carried wheels as they are (each at its constraints.txt pin), without a resolver: faiss-cpu, a core
            # dependency, stays home (SKIPPED), so pip could never resolve hf_tlaser's requirements here; the image
            # has the rest (seen on an H100 machine, 2026-11-26), and the import check below says if that changes
            wheels = sorted(str(p) for p in (self.carry / "wheels").glob("*.whl"))
            pip_cmd = [self.python, *PIP_ARGS]
            if (
                self.limit(240, setup_log, pip_cmd + wheels) == 0
                and self.limit(120, setup_log, pip_cmd + ["-e", "."]) == 0
            ):
                install = "carried wheels at their constraints.txt pins (--no-deps), the image's versions of the rest"
            else:
                errors = [line for line in read_log(setup_log).splitlines() if "ERROR" in line]
                die(f"pip install failed (logs in {setup_log}): {errors[-1] if errors else ''}")
            self.say(f"setup: installed ({install})")
        archive = self.carry / "data" / "data.tar.xz"
        if archive.is_file():  # the corpora: the carried archive if any, else this machine's data dir
            unpacked = self.work / "data"
            if not (unpacked / ".unpacked").is_file():
                shutil.rmtree(unpacked, ignore_errors=True)
                unpacked.mkdir(parents=True)
                if subprocess.run(["tar", "-xJf", str(archive), "-C", str(unpacked)]).returncode != 0:
                    die(f"cannot unpack {archive}")
                (unpacked / ".unpacked").touch()
            os.environ["HF_TLASER_DATA"] = str(unpacked)
            about = read_log(self.carry / "data" / "DATA.txt").strip() or str(archive)
            self.say(f"corpora: {about} -> {unpacked}")
        else:
            if "HF_TLASER_DATA" not in os.environ:
                found = self.probe("from hf_tlaser.data.paths import get_data_dir; print(get_data_dir())")
                if not found:
                    die(f"no corpora: no {archive} (scripts/gpu_session.sh --pack-data) and no data dir here")
                os.environ["HF_TLASER_DATA"] = found
            self.say(f"corpora: {os.environ['HF_TLASER_DATA']} (no carried archive)")
        if self.size == "tiny":
            tiny = self.work / "tiny-data"
            if not (tiny / ".made").is_file():
                make_tiny_data(self.data(), tiny)
            os.environ["HF_TLASER_DATA"] = str(tiny)
            self.say(f"corpora (tiny): {tiny}, NTREX-128 cut to 300 lines, SIB-200 to 140/30/70 per language")
        env_cmd = [
            self.python,
            "scripts/gpu_session.py",
            "environment",
            "--output",
            str(self.results / "environment.json"),
        ]
        env_cmd += [install, torch_version, pin, self.size, str(self.data())]
        with setup_log.open("a") as err:
            if subprocess.run(env_cmd, stderr=err).returncode != 0:
                self.say("environment.json failed")
            imports = "import hf_tlaser, transformers, datasets, sentence_transformers"
            if subprocess.run([self.python, "-c", imports], stderr=err).returncode != 0:
                die("hf_tlaser does not import after setup (logs/setup.log)")
        if not marker.is_file():
            marker.write_text(f"torch {torch_version}; {install}\n")

    def bench_command(self) -> list[str]:
        p = self.profile
        return [
            *(self.python, "-m", "benchmarks", "--size", p.bench_size, "--only", "1", "2", "3", "--device", p.device),
            *("--presets", *p.bench_presets, "--output", str(self.results / "BENCHMARKS.md")),
        ]

    def stage_bench(self) -> None:
        """The paper's speed claims on this device (python -m benchmarks --only 1 2 3)."""
        rc = self.limit(self.profile.bench_limit, self.logs / "bench.log", self.bench_command())
        self.say("bench: done" if rc == 0 else f"bench: FAILED (exit {rc}; logs/bench.log)")

    def dist_run(self, name: str, launcher: Sequence[str]) -> int:
        """One accelerate launch of the training CLI, its facts into distributed.json."""
        out = self.work / "dist" / name
        shutil.rmtree(out, ignore_errors=True)
        begin = time.monotonic()
        log = self.logs / f"dist-{name}.log"
        env = launcher_env(self.profile.dist_procs, 29500 + random.randrange(1000))
        rc = self.limit(
            self.profile.dist_limit,
            log,
            accelerate_command(self.python, self.profile, launcher, self.precision(), out),
            env=env,
        )
        facts = dist_facts(self.results / "distributed.json", name, out, rc, int(time.monotonic() - begin), log)
        print(f"{name}: {facts}", flush=True)
        return rc

    def stage_dist(self) -> None:
        """The FSDP config, then DeepSpeed ZeRO-2 where it imports: distributed.json says what ran."""
        (self.work / "dist").mkdir(parents=True, exist_ok=True)
        if self.dist_run("fsdp", ["--config_file", "docs/configs/accelerate_fsdp.yaml"]) == 0:
            self.say("dist: FSDP config ran")
        else:
            self.say("dist: FSDP run FAILED (logs/dist-fsdp.log)")
        if self.probe("import deepspeed") is not None:
            if (
                self.dist_run(
                    "deepspeed", ["--use_deepspeed", "--deepspeed_config_file", "docs/configs/deepspeed_zero2.json"]
                )
                == 0
            ):
                self.say("dist: DeepSpeed ZeRO-2 ran")
            else:
                self.say("dist: DeepSpeed ZeRO-2 run FAILED (logs/dist-deepspeed.log)")
        else:
            self.note("distributed.json", "deepspeed", '"skipped: deepspeed does not import here (not installed)"')
            self.say("dist: DeepSpeed skipped (does not import)")

    def train_command(self, steps: str) -> list[str]:
        """The train stage's run; --save-steps BEFORE the run folder: after it, argparse's REMAINDER takes it for
        hf-tlaser train, whose later default --save-steps 100 then wins."""
        return [
            *(self.python, "scripts/learning_curve.py", "train", "--save-steps", steps, str(self.run_dir), "--"),
            *("--model", "ctlaser", *self.profile.train_args, "--max-minutes", self.train_minutes),
            *("--precision", self.precision()),
        ]

    def stage_train(self) -> None:
        """A `small` cT-LASER for --train-minutes, detached, with a checkpoint evaluator and the TF-IDF line beside
        it; watched for --wait-minutes (default: until the deadline)."""
        pid = read_pid(self.work / "train.pid")
        if pid is not None and alive(pid):
            self.say(f"train: a run is already going (pid {pid}); watching it")
        else:
            steps = self.save_steps or str(save_steps(self.results / "BENCHMARKS.json", float(self.train_minutes)))
            shutil.rmtree(self.run_dir, ignore_errors=True)
            self.run_dir.parent.mkdir(parents=True, exist_ok=True)
            args = " ".join(self.profile.train_args)
            self.say(
                f"train: cT-LASER {args} for {self.train_minutes} minutes, a checkpoint every {steps} updates, detached"
            )
            pid = detach(self.train_command(steps), self.logs / "train.log", self.work / "train.pid")
            evaluator = [sys.executable, "scripts/gpu_session.py", "curve-evaluator", str(pid), self.python]
            detach([*evaluator, str(self.run_dir), str(self.logs / "curve.log")], None, self.work / "curve.pid")
            lexical = ["timeout", "900", self.python, "scripts/learning_curve.py", "lexical", "--output"]
            detach([*lexical, str(self.work / "lexical.json")], self.logs / "lexical.log", self.work / "lexical.pid")
            self.note("train.json", "started", json.dumps(time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())))
            self.note("train.json", "train_minutes", self.train_minutes)
            self.note("train.json", "save_steps", steps)
        if not self.watch_run(self.wait_minutes, 30):
            self.say("train: the run goes on detached: send the next call AT ONCE (--stage finish)")

    def watch_run(self, minutes: float | None, reserve: int) -> bool:
        """Wait for the run, at most ``minutes`` (None: no limit) and until ``reserve`` seconds are left in the call;
        True when the run has ended, False when it still runs."""
        pid = read_pid(self.work / "train.pid") or 0
        until = int(self.clock.now()) + int((1000 if minutes is None else minutes) * 60)
        while alive(pid):
            if int(self.clock.now()) >= until or self.clock.left() <= reserve:
                self.say(f"train: still running (pid {pid}): {progress(self.logs / 'train.log', self.run_dir)}")
                return False
            time.sleep(15)
            self.say(f"train: {progress(self.logs / 'train.log', self.run_dir)}")
        last = last_lines(read_log(self.logs / "train.log"), 1, 200)
        self.say(f"train: the run has ended: {last[0] if last else ''}")
        return True

    def stage_finish(self) -> None:
        """Wait for the run (stopping it when it would eat into the evaluations' time), its last checkpoints
        evaluated, the learning curve and hf-tlaser evaluate; train.json."""
        if not (self.work / "train.pid").is_file():
            self.say(
                "finish: no run on this machine (it was given back since the train stage?): run --stage "
                "train,finish --train-minutes 5 --wait-minutes 7"
            )
            self.note("train.json", "finish", '"no run on this machine"')
            return
        pid = read_pid(self.work / "train.pid") or 0
        if not self.watch_run(None, self.profile.finish_reserve):
            self.say(
                "finish: the run would outlast the evaluations' time in this call; stopping it (its checkpoints count)"
            )
            signal_group(pid, signal.SIGTERM)
            time.sleep(10)
        curve_pid = read_pid(self.work / "curve.pid")
        if curve_pid is not None:
            signal_group(curve_pid, signal.SIGTERM)
        curve = [self.python, "scripts/learning_curve.py"]
        if self.limit(self.profile.finish_eval_limit, self.logs / "curve.log", [*curve, "evaluate", str(self.run_dir)]):
            self.say("finish: learning_curve evaluate FAILED or was cut (logs/curve.log)")
        lexical_pid = read_pid(self.work / "lexical.pid")
        waited = 0
        while lexical_pid is not None and alive(lexical_pid) and self.clock.left() > 60:
            if waited == 0:
                self.say("finish: waiting for the TF-IDF reference (logs/lexical.log)")
            time.sleep(5)
            waited += 5
        lexical = self.work / "lexical.json"
        if not (lexical.is_file() and lexical.stat().st_size > 0):
            self.limit(180, self.logs / "lexical.log", [*curve, "lexical", "--output", str(lexical)])
        report = [*curve, "report", str(self.run_dir), "--lexical", str(lexical)]
        if self.limit(60, self.logs / "curve.log", [*report, "--output", str(self.results / "learning_curve.md")]):
            self.say("finish: learning curve report FAILED (logs/curve.log)")
        model = self.run_dir
        if not (model / "config.json").is_file():
            found = checkpoints(self.run_dir)
            model = found[-1] if found else None
        if model is not None and (model / "config.json").is_file():
            shutil.rmtree(self.work / "eval", ignore_errors=True)
            evaluate = [self.python, "-m", "hf_tlaser.cli", "evaluate", str(model), "--suite", "retrieval", "sib200"]
            evaluate += [
                "--retrieval-sets",
                "ntrex128",
                "--output-dir",
                str(self.work / "eval"),
                *self.profile.eval_args,
            ]
            if self.limit(self.profile.finish_eval_limit, self.logs / "evaluate.log", evaluate):
                self.say("finish: hf-tlaser evaluate FAILED (logs/evaluate.log)")
        else:
            self.say(f"finish: no saved model or checkpoint in {self.run_dir}")
        try:
            train_facts(self.results / "train.json", self.run_dir, self.work / "eval" / "results.json")
        except Exception:  # (the record of a broken run must not stop the session)
            self.say("finish: train.json failed")
        self.say("finish: done")

"""What ``--size`` sets (``Profile``), the call's clock, the stages named, and the command lines of the runs the
stages launch."""

from __future__ import annotations

import re
import runpy
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import NamedTuple

from check_newest import read_pins

from .carry import ROOT

STAGES = ("setup", "bench", "dist", "train", "finish", "release", "levers", "negatives")
ALL_STAGES = ("setup", "bench", "dist", "train", "finish")
"""What ``--stage all`` (the default) runs."""

PUBLISH_SECONDS = 20
"""What every limited command leaves of the call for publishing."""


class Profile(NamedTuple):
    """What ``--size`` sets: the device, the commands' sizes and time limits (seconds), the default deadline."""

    device: str
    bench_size: str
    python: str
    train_minutes: str
    finish_reserve: int
    bench_limit: int
    bench_presets: tuple[str, ...]
    dist_args: tuple[str, ...]
    dist_procs: int
    dist_limit: int
    train_args: tuple[str, ...]
    save_steps: str | None
    eval_args: tuple[str, ...]
    finish_eval_limit: int
    release_args: tuple[str, ...]
    release_train: tuple[str, ...]
    lever_updates: int
    lever_eval: tuple[str, ...]
    neg_updates: int
    neg_long: int
    neg_big: int
    neg_acc: int
    neg_mid: int
    neg_reserve: int
    deadline_minutes: float


PROFILES = {
    "full": Profile(
        device="cuda",
        bench_size="full",
        python="python3",
        train_minutes="10",
        finish_reserve=180,  # seconds the finish stage keeps for the evaluations
        bench_limit=480,
        bench_presets=("small", "paper"),
        dist_args=(
            *("--preset", "small", "--max-steps", "300", "--save-steps", "150", "--max-minutes", "1.5"),
            *("--max-lines", "30000", "--vocab-size", "8000", "--logging-steps", "25"),
        ),
        dist_procs=1,
        dist_limit=150,
        train_args=("--preset", "small", "--max-steps", "1000000"),
        save_steps=None,  # from the bench stage's tokens/s (save_steps)
        eval_args=("--seeds", "0", "1", "2"),
        finish_eval_limit=240,
        release_args=(),  # the recipe as it is: 2,000 updates, the dev sets, SIB-200 seeds 0 1 2
        release_train=(),
        lever_updates=500,
        lever_eval=("--seeds", "0"),
        neg_updates=200,
        neg_long=2000,
        neg_big=32000,
        neg_acc=4000,
        neg_mid=8000,
        neg_reserve=360,  # s: data ~170, evaluation ~180
        deadline_minutes=9.5,
    ),
    "tiny": Profile(
        device="cpu",
        bench_size="smoke",
        python="python",
        train_minutes="1",
        finish_reserve=120,
        bench_limit=600,  # a shared 2-core machine: 15 s idle, minutes when busy
        bench_presets=("small",),  # shrunk at smoke size: `paper` would run the same code on the same shapes again
        dist_args=(
            *("--preset", "tiny", "--max-steps", "4", "--save-steps", "2", "--max-lines", "300"),
            *("--vocab-size", "500", "--logging-steps", "1"),
        ),
        dist_procs=2,  # gloo: accelerate runs DDP on a CPU whatever the config (FSDP needs a GPU)
        dist_limit=180,
        train_args=("--preset", "tiny", "--max-steps", "6", "--max-lines", "2000", "--vocab-size", "1000"),
        save_steps="3",  # curve points: random init, update 3, update 6
        eval_args=("--seeds", "0", "--epochs", "20", "--projection", "none"),
        finish_eval_limit=300,
        release_args=("--updates", "4", "--seeds", "0", "--epochs", "5", "--retrieval-sets", "ntrex128"),
        release_train=("--save-steps", "2"),
        lever_updates=2,
        lever_eval=("--seeds", "0", "--epochs", "5"),
        neg_updates=2,
        neg_long=4,
        neg_big=2000,
        neg_acc=500,
        neg_mid=1000,
        neg_reserve=600,
        deadline_minutes=30,
    ),
}
"""--size full: CUDA on the GPU machine, the real sizes; --size tiny: the whole session on a CPU in minutes."""


class Clock:
    """The call's time: started now, ``minutes`` to its deadline, whole seconds as ``date +%s`` counts them."""

    def __init__(self, minutes: float, now: Callable[[], float] = time.time) -> None:
        self.now = now
        self.start = int(now())
        self.deadline = self.start + int(minutes * 60)

    def elapsed(self) -> int:
        return int(self.now()) - self.start

    def left(self) -> int:
        """Seconds left in this call."""
        return self.deadline - int(self.now())

    def cap(self, seconds: int) -> int:
        """A command's limit: ``seconds``, at most what the call has left less the time to publish."""
        return min(seconds, self.left() - PUBLISH_SECONDS)


def stage_list(stages: str) -> list[str]:
    """``--stage``'s comma-separated list, ``all`` for ``ALL_STAGES``."""
    return list(ALL_STAGES) if stages == "all" else stages.split(",")


def work_dir(size: str, environ: Mapping[str, str]) -> Path:
    """Where a session keeps its runs, results and logs (they survive between calls while the machine stays warm)."""
    if environ.get("HF_TLASER_GPU_WORK"):
        return Path(environ["HF_TLASER_GPU_WORK"])
    if size == "full":
        return Path("/tmp/hf_tlaser_gpu")
    return Path(environ.get("TMPDIR") or "/tmp") / "hf_tlaser_gpu_tiny"


def torch_pin(constraints: Path) -> str:
    """The torch version constraints.txt pins ('' when none)."""
    return re.split(r"[ ;]", read_pins(constraints).get("torch", ""), maxsplit=1)[0]


def accelerate_command(python: str, profile: Profile, launcher: Sequence[str], precision: str, out: Path) -> list[str]:
    """The dist stage's ``accelerate launch`` of the training CLI with one launcher config."""
    mixed = "no" if precision == "fp32" else precision
    return [
        *(python, "-m", "accelerate.commands.launch", *launcher, "--num_processes", str(profile.dist_procs)),
        *("--num_machines", "1", "--mixed_precision", mixed, "--dynamo_backend", "no", "-m", "hf_tlaser.training.cli"),
        *("--model", "ctlaser", *profile.dist_args, "--precision", precision, "--output-dir", str(out)),
    ]


def launcher_env(procs: int, port: int) -> dict[str, str]:
    """The dist run's environment: one process gets the rank variables, so that accelerate sets up the process group
    (and so FSDP / DeepSpeed) even where it starts the script directly; a launcher that starts ranks sets its own."""
    env = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
    if procs == 1:
        env.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", LOCAL_WORLD_SIZE="1")
    return env


def negative_runs(profile: Profile, stop: str) -> list[tuple[str, int, list[str]]]:
    """Issue 53's six runs, each (name, updates, training flags), side by side from the start: ``plain`` the recipe's
    1,000 tokens; ``big`` one micro-batch of ``neg_big`` tokens per update; ``acc`` the same pairs per update in
    micro-batches of ``neg_acc`` tokens; ``mid`` one micro-batch of ``neg_mid``; and at the release recipe's tokens
    (``neg_long`` updates of 1,000), the recipe itself and the big batch's updates. Each stops training after
    ``stop`` minutes at the latest (the safety stop)."""
    big = ["--max-tokens", str(profile.neg_big), "--update-tokens", str(profile.neg_big)]
    cut = ["--max-minutes", stop]
    return [
        ("plain", profile.neg_updates, cut),
        ("big", profile.neg_updates, cut + big),
        ("acc", profile.neg_updates, cut + ["--max-tokens", str(profile.neg_acc), "--update-tokens", big[3]]),
        (
            "mid",
            profile.neg_updates,
            cut + ["--max-tokens", str(profile.neg_mid), "--update-tokens", str(profile.neg_mid)],
        ),
        ("plain-long", profile.neg_long, cut),
        ("big-long", profile.neg_long * 1000 // profile.neg_big, cut + big),
    ]


def lever_runs(profile: Profile, start: Path) -> list[tuple[str, int, list[str]]]:
    """The release curve's levers at ``lever_updates``: twice the batch at equal tokens (half the updates), and
    self-distillation toward the start at weights 100 and 1000."""
    updates = profile.lever_updates
    return [
        ("batch2x", updates // 2, ["--update-tokens", "2000"]),
        ("distill100", updates, ["--teacher", str(start), "--distill-weight", "100"]),
        ("distill1000", updates, ["--teacher", str(start), "--distill-weight", "1000"]),
    ]


def negatives_stop(left: int, reserve: int) -> str:
    """The negatives' training limit in minutes (one decimal, at least 0.5): what the call has left less the data's
    and the evaluation's ``reserve`` seconds."""
    minutes = (left - reserve) / 60
    return f"{max(0.5, minutes):.1f}"


def release_facts() -> tuple[str, list[str]]:
    """The release recipe's corpora and retrieval sets, read from scripts/release.py."""
    recipe = runpy.run_path(str(ROOT / "scripts" / "release.py"))
    return recipe["CORPORA"], list(recipe["RETRIEVAL_SETS"])

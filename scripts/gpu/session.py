"""The session: ``scripts/gpu_session.sh`` execs ``gpu_session.py run`` with its own command line: the stages,
each bounded by the call's deadline, their commands run with time limits, and the files that come back published
into $OUT."""

from __future__ import annotations

import contextlib
import os
import sys
import traceback

from .call import die
from .levers import ReleaseStages
from .profiles import STAGES
from .records import summary
from .stages import LeaseStages

STAGE_SECONDS = 30
"""A stage starts only with more than this left in the call."""

ENVIRONMENT = {
    "PYTHONUNBUFFERED": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "HF_HUB_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
}


class Session(LeaseStages, ReleaseStages):
    """One device call: its flags, profile, clock and folders; ``run()`` runs the stages and publishes."""

    def run_stages(self) -> None:
        """Setup, then each stage named in order while the call has time left, publishing after each."""
        self.stage_setup()
        for stage in self.stages:
            if stage == "setup":
                continue
            if stage not in STAGES:
                self.say(f"unknown stage {stage} ({', '.join(STAGES)}, all)")
                continue
            if self.clock.left() <= STAGE_SECONDS:
                self.say(f"no time left in this call for stage {stage}")
                continue
            self.say(f"=== stage {stage}")
            try:
                getattr(self, f"stage_{stage}")()
            except Exception:  # (a stage's bug must not cost the others or the publishing)
                with (self.logs / "gpu_session.log").open("a") as handle:
                    handle.write(traceback.format_exc())
                self.say(f"{stage}: FAILED ({sys.exc_info()[1]!r}; logs/gpu_session.log)")
            self.publish()

    def run(self) -> int:
        """The whole call: folders, environment, stages, the last publishing and the summary."""
        for folder in (self.results, self.logs, self.out):
            try:
                folder.mkdir(parents=True, exist_ok=True)
            except OSError:
                die(f"cannot create {self.results}, {self.logs} or {self.out}")
        os.environ.update(ENVIRONMENT)
        self.say(
            f"size {self.size}, device {self.profile.device}, stages {','.join(self.stages)}, work {self.work}, "
            f"out {self.out}, deadline {self.deadline_minutes:g} min"
        )
        self.run_stages()
        self.publish()
        with contextlib.suppress(Exception):
            print("\n".join(summary(self.results).splitlines()[-40:]), flush=True)
        names = " ".join(sorted(p.name for p in self.out.iterdir() if p.is_file()))
        self.say(f"done in {self.clock.elapsed()} s; results in {self.out}: {names}")
        return 0

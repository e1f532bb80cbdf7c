"""Where one training update's time goes: runs ``hf-tlaser train`` for a few updates under cProfile and splits the
update into encoder forward, decoder forward (+ output softmax and losses), backward and the optimizer step. Compare
two runs (e.g. with and without ``--freeze-word-embeddings``) through their shares: on a shared machine the seconds
move with the load, the encoder forward's share much less.

    python scripts/profile_update.py --steps 6 -- --model ctlaser --init-from ../shared/data/multilingual-e5-small \\
        --corpora wmt-newstest-multiway --precision fp32 --seed 1

The train arguments after ``--`` are the main job's; ``--output-dir`` and ``--max-steps`` are set here (a temporary
folder). The first update is included (one-time costs such as oneDNN's kernel choice); use more steps to dilute it.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
import tempfile
import time
from pathlib import Path

import torch

PARTS = {  # (file suffix, function) -> part of the update
    "encoder forward": ("modeling_tlaser.py", "forward", "TLaserModel"),
    "decoder forward": ("modeling_tlaser.py", "forward", "TLaserDecoder"),
    "model forward (all, with losses)": ("modeling_tlaser.py", "forward", "TLaserForTranslation"),
    "backward": ("graph.py", "_engine_run_backward", None),
    "optimizer step": ("optimizer.py", "wrapper", None),
    "training step (forward + backward)": ("trainer.py", "training_step", None),
}


def line_of(cls_name: str | None, file_suffix: str) -> int | None:
    """The first line of ``cls_name.forward`` in the package's source (cProfile keys functions by file and line)."""
    if cls_name is None:
        return None
    import inspect

    import hf_tlaser.models.tlaser.modeling_tlaser as modeling

    return inspect.getsourcelines(getattr(modeling, cls_name).forward)[1]


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    split = argv.index("--") if "--" in argv else len(argv)
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=6)
    args = parser.parse_args(argv[:split])
    train_args = argv[split + 1 :]
    from hf_tlaser.training.cli import main as train

    with tempfile.TemporaryDirectory(prefix="profile-update-") as tmp:
        out = Path(tmp) / "run"
        profile = cProfile.Profile()
        start = time.perf_counter()
        profile.enable()
        code = train([*train_args, "--output-dir", str(out), "--max-steps", str(args.steps), "--save-steps", "100000"])
        profile.disable()
        wall = time.perf_counter() - start
        if code:
            return code
        stats = pstats.Stats(profile).stats
    rows = []
    for part, (suffix, name, cls_name) in PARTS.items():
        first = line_of(cls_name, suffix)
        total = sum(
            entry[3]
            for (file, line, function), entry in stats.items()
            if file.endswith(suffix) and function == name and (first is None or line == first)
        )
        rows.append((part, total / args.steps))
    step = dict(rows)["training step (forward + backward)"] + dict(rows)["optimizer step"]
    threads = torch.get_num_threads()
    print(f"{args.steps} updates, {threads} thread(s); whole run {wall:.1f} s (data and set-up included)\n")
    print("| part of one update | seconds | share of forward + backward + optimizer |\n|---|---|---|")
    for part, seconds in rows:
        print(f"| {part} | {seconds:.3f} | {seconds / step:.0%} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

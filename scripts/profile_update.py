"""Where one training update's time goes: runs ``hf-tlaser train`` for a few updates under cProfile and splits the
update into encoder forward, decoder forward (+ output softmax and losses), backward and the optimizer step; then
times AdamW on the word-embedding matrix alone (the backbone's ``vocab x hidden`` weights and their dense gradient).

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


def adam_on_embeddings(vocab: int, hidden: int, repeats: int = 3) -> float:
    """Seconds of one AdamW step on a ``vocab x hidden`` fp32 weight with a dense gradient (median of ``repeats``)."""
    weight = torch.nn.Parameter(torch.randn(vocab, hidden) * 0.02)
    weight.grad = torch.randn_like(weight) * 1e-3
    optimizer = torch.optim.AdamW([weight], lr=1e-5)
    optimizer.step()  # the state's allocation
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        optimizer.step()
        times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2]


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
        import json

        config = json.loads((out / "config.json").read_text())
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
    vocab, hidden = config["vocab_size"], config["hidden_size"]
    adam = adam_on_embeddings(vocab, hidden)
    threads = torch.get_num_threads()
    print(f"{args.steps} updates, {threads} thread(s); whole run {wall:.1f} s (data and set-up included)\n")
    print("| part of one update | seconds | share of forward + backward + optimizer |\n|---|---|---|")
    for part, seconds in rows:
        print(f"| {part} | {seconds:.3f} | {seconds / step:.0%} |")
    print(f"| AdamW step on the {vocab} x {hidden} word embeddings alone | {adam:.3f} | {adam / step:.0%} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

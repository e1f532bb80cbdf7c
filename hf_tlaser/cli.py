"""``hf-tlaser`` console script: one sub-command per workflow, each implemented next to its code."""

from __future__ import annotations

import argparse
import importlib
import json
import sys

# sub-command -> ("module:function" taking argv and returning the exit status, one-line description)
COMMANDS = {
    "train-tokenizer": ("hf_tlaser.tokenization:main", "train the joint BPE tokenizer on files or registered corpora"),
    "train": ("hf_tlaser.training.cli:main", "train a T-LASER / cT-LASER / LASER model into a save_pretrained folder"),
    "add-language": (
        "hf_tlaser.training.add_language:main",
        "add a language to a trained model LASER3-style (itself as frozen teacher, replay of its languages)",
    ),
    "evaluate": ("hf_tlaser.evaluation.cli:main", "run LASER's evaluation protocols on a saved model"),
    "teacher-vectors": (
        "hf_tlaser.teachers.cli:main",
        "compute a teacher's vectors of a corpus once, into the teacher cache (and a vectors: file)",
    ),
    "push": ("hf_tlaser.hub.cli:main", "publish a trained model folder on the Hugging Face Hub"),
    "embed": (
        "hf_tlaser.inference.embed:main",
        "embed every line of a text file into a memory-mappable .npy (streamed, resumable, sharded)",
    ),
    "mine": (
        "hf_tlaser.inference.mine:main",
        "mine parallel sentences from two text files with LASER's margin (TSV + score histogram)",
    ),
    "mine-pipeline": (
        "hf_tlaser.inference.pipeline:main",
        "mine as stages on disk (train, populate, search, mine), each stage's tasks as local or Slurm jobs",
    ),
    "export": (
        "hf_tlaser.backend.export:main",
        "write ONNX / OpenVINO (optionally int8) files into a model folder for sentence-transformers' backend=",
    ),
    "merge": (
        "hf_tlaser.training.merge:main",
        "WiSE-FT: interpolate a warm-started model's encoder between its start and its tuned weights",
    ),
    "env": ("hf_tlaser.cli:env_main", "print versions, device, CPU, bf16 support and threads (for bug reports)"),
}


def usage() -> str:
    """``hf-tlaser --help``: every sub-command with its one-line description."""
    width = max(map(len, COMMANDS))
    lines = ["usage: hf-tlaser COMMAND [options]   (hf-tlaser COMMAND --help for its options)", "", "commands:"]
    lines += [f"  {name:<{width}}  {description}" for name, (_, description) in COMMANDS.items()]
    return "\n".join(lines)


def env_main(argv: list[str]) -> int:
    """``hf-tlaser env``: the environment report, one ``key: value`` line each (``--json`` for JSON)."""
    parser = argparse.ArgumentParser(prog="hf-tlaser env", description=COMMANDS["env"][1])
    parser.add_argument("--json", action="store_true", help="print the report as one JSON object")
    args = parser.parse_args(argv)
    from hf_tlaser.hardware import environment_report

    report = environment_report()
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        width = max(map(len, report))
        print("\n".join(f"{key + ':':<{width + 1}} {value}" for key, value in report.items()))
    return 0


def main(argv: list[str] | None = None) -> int:
    """Dispatch ``hf-tlaser COMMAND ...`` to the function that implements COMMAND."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in {"-h", "--help"}:
        print(usage())
        return 0
    if not argv:
        print(usage(), file=sys.stderr)
        return 2
    if argv[0] not in COMMANDS:
        print(f"hf-tlaser: unknown command {argv[0]!r}; choose from {', '.join(COMMANDS)}", file=sys.stderr)
        return 2
    module, function = COMMANDS[argv[0]][0].split(":")
    return int(getattr(importlib.import_module(module), function)(argv[1:]) or 0)


if __name__ == "__main__":
    sys.exit(main())

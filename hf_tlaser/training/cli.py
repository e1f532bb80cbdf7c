"""``hf-tlaser train``: corpora -> joint BPE -> curriculum batches -> Trainer -> a ``save_pretrained`` model folder.

Single process: ``hf-tlaser train --model ctlaser --preset tiny --output-dir runs/ct``. Two CPU processes (gloo):
``accelerate launch --multi_gpu --num_processes 2 --num_machines 1 --mixed_precision no --dynamo_backend no
-m hf_tlaser.training.cli --use-cpu ...`` (``--cpu --num_processes 2`` silently runs one process) or
``torchrun --standalone --nproc_per_node 2 -m hf_tlaser.training.cli --use-cpu ...``.

This module turns the flags (and a ``--config`` file) into a ``RunSpec`` and runs it
(``hf_tlaser.training.families.train``). A user mistake (argument, file, data, output-dir state) ends with one
``hf-tlaser train: error: ...`` line on stderr and exit code 2; the cheap checks run before any data is read.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from dataclasses import Field, fields
from pathlib import Path

import torch
import yaml

from hf_tlaser.commands import run_command
from hf_tlaser.data import DEFAULT_PAIRS, REGISTRY, SPEC_HELP
from hf_tlaser.errors import UsageError
from hf_tlaser.hardware import PRECISIONS
from hf_tlaser.teachers import SPEC_HELP as TEACHER_SPEC_HELP
from hf_tlaser.training.families import train
from hf_tlaser.training.presets import MODELS, SIZES, WARM_ENCODER_LR, WARM_FREEZE_UPDATES, get_preset
from hf_tlaser.training.spec import CHOICES, RECIPE_FLAGS, RunSpec
from hf_tlaser.training.warm import DECODER_VOCABS, INIT_HINT, POOLING_CHOICES

logger = logging.getLogger("hf_tlaser.train")


class _DeprecatedBf16(argparse.Action):
    """``--bf16``: the old flag, kept as ``--precision bf16`` with a warning."""

    def __init__(self, option_strings: list[str], dest: str, **kwargs) -> None:
        super().__init__(option_strings, dest, nargs=0, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        logger.warning("--bf16 is deprecated: use --precision bf16 (or --precision auto)")
        setattr(namespace, self.dest, "bf16")


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows ``(default: ...)`` except where the default is None (the help text says what None means)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        return action.help if action.default is None else super()._get_help_string(action)


def _recipe_help(name: str) -> str:
    values = [getattr(get_preset(MODELS[0], size).recipe, name) for size in SIZES]
    values = ", ".join(f"{size} {'all' if value is None else value}" for size, value in zip(SIZES, values))
    return f"recipe override (default: the preset's: {values})"


def build_parser() -> argparse.ArgumentParser:
    """The ``hf-tlaser train`` flags: one per ``RunSpec`` field, with its default."""
    defaults = RunSpec.defaults()
    p = argparse.ArgumentParser(
        prog="hf-tlaser train", description=__doc__.split("\n")[0], formatter_class=_HelpFormatter
    )
    p.add_argument("--config", help="YAML/JSON file whose keys are these options, dashed or not (flags win)")
    p.add_argument("--model", choices=MODELS, default=defaults["model"])
    p.add_argument("--preset", choices=SIZES, default=defaults["preset"])
    p.add_argument(
        "--corpora",
        default=defaults["corpora"],
        help=f"comma-separated corpus specs (or a YAML list), each one of: {SPEC_HELP}; registered: "
        f"{','.join(REGISTRY)} (docs/data.md)",
    )
    p.add_argument(
        "--pivots",
        default=defaults["pivots"],
        help="pivot (target) languages of the default curriculum; language codes are ISO 639-1/3, with an optional "
        "script: zh_Hans",
    )
    p.add_argument(
        "--pairs",
        default=None,
        help="curriculum pairs src-tgt, comma-separated (default: every language of the corpora toward every pivot, "
        "the pivots toward each other; the default corpora and pivots give the paper's "
        + ",".join("-".join(pair) for pair in DEFAULT_PAIRS)
        + ")",
    )
    p.add_argument(
        "--streaming",
        action="store_true",
        help="read the corpora as streams (datasets.IterableDataset): flat memory for corpora of any size, pair "
        "batching only, no English pivot join (docs/data.md)",
    )
    p.add_argument(
        "--shuffle-buffer",
        type=int,
        default=defaults["shuffle_buffer"],
        help="--streaming: groups per pair read, cleaned, sorted and packed at once (the shuffle buffer)",
    )
    p.add_argument("--data-dir", default=None, help="corpora folder (default: $HF_TLASER_DATA or ../shared/data)")
    p.add_argument("--tokenizer", default=None, help="existing tokenizer folder (default: train a joint BPE)")
    p.add_argument("--output-dir", required=True, help="run folder; must be empty unless --resume or --overwrite")
    p.add_argument("--overwrite", action="store_true", help="replace the run in --output-dir (other files are kept)")
    p.add_argument("--max-steps", type=int, default=defaults["max_steps"], help="optimizer updates the run trains for")
    p.add_argument("--max-minutes", type=float, default=None, help="safety stop (and save) after this wall-clock time")
    p.add_argument("--seed", type=int, default=defaults["seed"])
    p.add_argument(
        "--precision", choices=PRECISIONS, default=defaults["precision"], help="auto: what is fast on this hardware"
    )
    p.add_argument("--bf16", dest="precision", action=_DeprecatedBf16, help="deprecated alias of --precision bf16")
    p.add_argument("--use-cpu", action="store_true", help="train on CPU even if a GPU is present (gloo for DDP)")
    p.add_argument("--logging-steps", type=int, default=defaults["logging_steps"])
    p.add_argument("--save-steps", type=int, default=defaults["save_steps"])
    p.add_argument(
        "--save-total-limit",
        type=int,
        default=defaults["save_total_limit"],
        help="checkpoints kept (older ones are deleted)",
    )
    p.add_argument("--resume", default=None, help="checkpoint folder, or 'auto' for the last one in --output-dir")
    p.add_argument(
        "--set",
        action="append",
        default=defaults["set"],
        metavar="KEY=VALUE",
        help="model config override (cnv: nmt.KEY=VALUE for the Marian config of its NMT pair)",
    )
    p.add_argument(
        "--nmt-steps",
        type=int,
        default=None,
        help="updates of each NMT direction in stage 1 (default: the preset's: "
        + ", ".join(f"{size} {get_preset('cnv', size).nmt.steps}" for size in SIZES)
        + ")",
    )
    p.add_argument(
        "--nmt-pair",
        default=None,
        metavar="A_TO_B,B_TO_A",
        help="two existing Hugging Face seq2seq folders or Hub ids (a->b, b->a) instead of training them",
    )
    p.add_argument(
        "--teacher",
        default=None,
        help=f"distil towards a teacher's sentence vectors (MSE of both sides of each pair to the teacher's vector "
        f"of the pivot text): {TEACHER_SPEC_HELP}",
    )
    p.add_argument(
        "--distill-weight",
        type=float,
        default=defaults["distill_weight"],
        help="--teacher: weight of the distillation MSE, added to the family's own losses",
    )
    p.add_argument(
        "--teacher-cache",
        default=None,
        help="--teacher: teacher-vector cache folder, or 'none' (default: $HF_TLASER_TEACHER_CACHE or ~/.cache)",
    )
    p.add_argument(
        "--init-from",
        default=None,
        metavar="SPEC",
        help=f"start the encoder from a pretrained model (with its tokenizer, no joint BPE): {INIT_HINT}",
    )
    p.add_argument(
        "--pooling",
        default=None,
        choices=POOLING_CHOICES,
        help="the sentence vector: cls (position 0, the paper), mean, or backbone (the --init-from model's own; "
        "the default with --init-from, else the preset's)",
    )
    p.add_argument(
        "--decoder-vocab",
        default=None,
        choices=DECODER_VOCABS,
        help="the decoder's vocabulary, full or the pieces of the training targets (default: targets "
        "with --init-from, else full)",
    )
    p.add_argument(
        "--freeze-encoder-steps",
        type=int,
        default=None,
        help=f"updates during which the encoder gets no gradient, so that a decoder at random init trains first "
        f"(default: {WARM_FREEZE_UPDATES} with --init-from, measured in docs/results.md; else 0)",
    )
    p.add_argument(
        "--encoder-lr",
        type=float,
        default=None,
        help=f"peak learning rate of the encoder's weights (default: {WARM_ENCODER_LR} with --init-from, else "
        "--learning-rate's)",
    )
    for name in RECIPE_FLAGS:
        kind = str if name in CHOICES else {"max_lines": int, "max_sentences": int}.get(name, float)
        choices = CHOICES.get(name)
        p.add_argument(f"--{name.replace('_', '-')}", default=None, type=kind, choices=choices, help=_recipe_help(name))
    declared = {item.name: item for item in fields(RunSpec)}
    for action in p._actions:
        if action.dest in declared and action.help is not None:
            action.help += _family_note(declared[action.dest])
    return p


def _family_note(item: Field) -> str:
    """`` [--model A, B]`` (or ``[not --model C]``, the shorter) after the help of a flag that only some families take
    (``RunSpec`` field metadata), and ``[VALUE: ...]`` for a value that only some take."""

    def models(families: tuple[str, ...]) -> str:
        others = [model for model in MODELS if model not in families]
        return f"not --model {', '.join(others)}" if len(others) < len(families) else f"--model {', '.join(families)}"

    notes = [] if item.metadata["families"] == MODELS else [models(item.metadata["families"])]
    notes += [f"{value}: {models(families)}" for value, families in item.metadata["values"].items()]
    return f" [{'; '.join(notes)}]" if notes else ""


def _read_config(path: Path) -> dict:
    """The options of a ``--config`` file, keys spelled with underscores."""
    if not path.is_file():
        raise UsageError(f"--config {path}: no such file")
    text = path.read_text(encoding="utf-8")
    try:
        values = yaml.safe_load(text) if path.suffix in (".yaml", ".yml") else json.loads(text)
    except (yaml.YAMLError, json.JSONDecodeError) as err:
        kind = "YAML" if path.suffix in (".yaml", ".yml") else "JSON"
        raise UsageError(f"--config {path}: not valid {kind} ({' '.join(str(err).split())})") from None
    if not isinstance(values, dict):
        raise UsageError(f"--config {path}: expected a mapping of option: value")
    return {str(key).replace("-", "_"): value for key, value in values.items()}


def parse_args(argv: list[str] | None) -> RunSpec:
    """The run of the command line: its flags over ``--config`` values over the defaults."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.config:
        path = Path(args.config)
        values = _read_config(path)
        known = {action.dest for action in parser._actions} - {"help"}
        unknown = sorted(set(values) - known)
        if unknown:
            raise UsageError(f"--config {path}: unknown option(s) {unknown}; known: {', '.join(sorted(known))}")
        parser.set_defaults(**values)
        args = parser.parse_args(argv)
    return RunSpec(**vars(args))


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``hf-tlaser train`` (and of ``python -m hf_tlaser.training.cli`` under a launcher)."""

    def work() -> int:
        out = train(parse_args(argv)).args.output_dir
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            # a clean exit under torchrun/accelerate: see ../shared/notes (rank 0 could abort at interpreter exit)
            torch.distributed.barrier()
            torch.distributed.destroy_process_group()
            sys.stdout.flush()
            os._exit(0)
        print(f"saved model and tokenizer to {out}")
        return 0

    return run_command("hf-tlaser train", work)


if __name__ == "__main__":
    sys.exit(main())

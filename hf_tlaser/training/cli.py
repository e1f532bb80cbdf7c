"""``hf-tlaser train``: corpora -> joint BPE -> curriculum batches -> Trainer -> a ``save_pretrained`` model folder.

Single process: ``hf-tlaser train --model ctlaser --preset tiny --output-dir runs/ct``. Two CPU processes (gloo):
``accelerate launch --multi_gpu --num_processes 2 --num_machines 1 --mixed_precision no --dynamo_backend no
-m hf_tlaser.training.cli --use-cpu ...`` (``--cpu --num_processes 2`` silently runs one process) or
``torchrun --standalone --nproc_per_node 2 -m hf_tlaser.training.cli --use-cpu ...``.

This module is the run read top to bottom: the flags (and a ``--config`` file) become a ``RunSpec`` (what the user
asked), ``resolve`` makes its one frozen ``RunPlan`` (``hf_tlaser.training.resolve``: every default and check, then
the checks of its family's training, before any corpus text is read) and ``train`` hands the plan to the module that
trains the family (``TRAININGS``: its ``train(plan)`` builds from the plan and fits). The trainings import the plan's
classes from ``resolve``, so their table is here, above them. A user mistake (argument, file, data, output-dir state)
ends with one ``hf-tlaser train: error: ...`` line on stderr and exit code 2.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from dataclasses import MISSING, Field, fields, replace
from pathlib import Path
from types import ModuleType
from typing import get_type_hints

import torch
import yaml

from hf_tlaser.commands import run_command
from hf_tlaser.errors import UsageError
from hf_tlaser.training import cnv, joint
from hf_tlaser.training.presets import MEMBERS, MODELS
from hf_tlaser.training.resolve import RunPlan, decide, plan_data
from hf_tlaser.training.spec import RunSpec
from hf_tlaser.training.trainer import LaserTrainer

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


DEPRECATED = {
    "precision": ("--bf16", dict(dest="precision", action=_DeprecatedBf16, help="deprecated alias of --precision bf16"))
}
"""Old flags, each added after the flag that replaces it."""


def _argument(item: Field, hint: object) -> dict:
    """The ``add_argument`` keywords of a ``RunSpec`` field: its metadata's help, choices and metavar; a switch for a
    bool, repeated for a list, typed for a number; its default, or required without one."""
    kwargs = {key: value for key, value in item.metadata["argparse"].items() if value is not None}
    kind = next((kind for kind in (int, float) if hint in (kind, kind | None)), None)
    if hint is bool:
        kwargs["action"] = "store_true"
    elif hint == list[str]:
        kwargs["action"] = "append"
    elif kind is not None:
        kwargs["type"] = kind
    if item.default is MISSING and item.default_factory is MISSING:
        kwargs["required"] = True
    else:
        kwargs["default"] = item.default_factory() if item.default is MISSING else item.default
    return kwargs


def build_parser() -> argparse.ArgumentParser:
    """The ``hf-tlaser train`` flags, generated from ``RunSpec``'s fields: one per field, with its default, type,
    choices, help and the families that take it."""
    p = argparse.ArgumentParser(
        prog="hf-tlaser train", description=__doc__.split("\n")[0], formatter_class=_HelpFormatter
    )
    hints = get_type_hints(RunSpec)
    for item in fields(RunSpec):
        action = p.add_argument(f"--{item.name.replace('_', '-')}", **_argument(item, hints[item.name]))
        if action.help is not None:
            action.help += _family_note(item)
        if item.name in DEPRECATED:
            name, kwargs = DEPRECATED[item.name]
            p.add_argument(name, **kwargs)
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


def parse_namespace(parser: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """The flags of ``parser`` (``build_parser``'s, or one built on it) over its ``--config`` values over the
    defaults."""
    args = parser.parse_args(argv)
    if args.config:
        path = Path(args.config)
        values = _read_config(path)
        known = {action.dest for action in parser._actions} - {"help"}  # argparse lists its actions nowhere public
        unknown = sorted(set(values) - known)
        if unknown:
            raise UsageError(f"--config {path}: unknown option(s) {unknown}; known: {', '.join(sorted(known))}")
        parser.set_defaults(**values)
        args = parser.parse_args(argv)
    return args


def parse_args(argv: list[str] | None) -> RunSpec:
    """The run of the command line: its flags over ``--config`` values over the defaults."""
    return RunSpec(**vars(parse_namespace(build_parser(), argv)))


TRAININGS: dict[str, ModuleType] = {"tlaser": joint, "laser": joint, "cnv": cnv, "yu2018": joint, "ldt": joint}
"""``model_type`` -> the module that trains the family: ``joint`` (one joint BPE over the curriculum languages: the
members of ``presets.JOINT_BPE``) or cNV's ``cnv`` (its NMT pair first, then the shared layers over it)."""


def training(model: str) -> ModuleType:
    """The module that trains ``model`` (a ``--model``): its family's in ``TRAININGS``."""
    return TRAININGS[MEMBERS[model].family.model_type]


def resolve(spec: RunSpec) -> RunPlan:
    """The run's plan: the flags its family takes (``RunSpec.check_families``), its defaults (``decide``), its data
    plan (``plan_data``: corpora, pivots, pairs), then the checks and plan of its family's training (its
    ``check(plan)``); UsageError (naming the flag) on a mistake, before any corpus text is read."""
    spec.check_families()
    plan = replace(decide(spec), data=plan_data(spec))
    return training(spec.model).check(plan)


def train(spec: RunSpec) -> LaserTrainer:
    """Run one training job; returns the trainer (its ``args.output_dir`` holds the saved model). UsageError (before
    reading any corpus where it can) on a mistake the user can fix; first on a flag the family does not take."""
    plan = resolve(spec)
    return training(spec.model).train(plan)


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

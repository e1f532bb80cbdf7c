"""``hf-tlaser merge``: weight interpolation between the pretrained start of a warm-started model and the model after
fine-tuning (WiSE-FT, Wortsman et al. 2022, eq. 1: ``theta = (1 - alpha) * theta_start + alpha * theta_tuned``), to
keep what the start knew (its classification quality) with most of what the fine-tuning gained (retrieval).

Only the sentence encoder is interpolated: the weights the start has (``encoder.backbone``, and the sentence-
transformers modules after pooling it carried, ``encoder.sentence_head``). The translation decoder, which the start
has no counterpart of, keeps the tuned weights. ``alpha`` = 1 gives the tuned folder's weights and ``alpha`` = 0 the
start's, bit for bit (``torch.lerp`` is exact at both ends); each weight is computed in fp32 and stored in the tuned
folder's dtype.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import shutil
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from hf_tlaser.commands import print_summary, run_command
from hf_tlaser.errors import UsageError
from hf_tlaser.model_folders import model_folder
from hf_tlaser.models.registry import FAMILIES
from hf_tlaser.training.warm import check_backbone

logger = logging.getLogger(__name__)

RECORD = "hf_tlaser_merge.json"
"""The merged folder's record: the two folders it came from and alpha."""
NOT_COPIED = (
    "eval",
    "onnx",
    "openvino",
    "runs",
    "backends.json",
    "hf_tlaser_export.json",
    "train_log.jsonl",
    "trainer_state.json",
    "summary.txt",
)
"""Entries of the tuned folder a merged folder does not take: results, training logs and exported files of other
weights (the checkpoints, ``checkpoint-*``, are left out too)."""
STARTED_FROM = ("backbone.", "sentence_head.")
"""Prefixes (after ``encoder.``) of the tuned weights that the start has."""


def interpolate(
    start: dict[str, torch.Tensor], tuned: dict[str, torch.Tensor], alpha: float
) -> tuple[dict[str, torch.Tensor], int]:
    """WiSE-FT of ``tuned`` (a saved member's state) toward ``start`` (``{"encoder.backbone.X": tensor, ...}``, the
    start's weights under the member's names): every tuned weight the start has becomes ``lerp(start, tuned,
    alpha)``, in fp32, stored in the tuned dtype; the others stay. Returns (state, number interpolated); UsageError
    (one line) when a backbone weight of the tuned folder has no counterpart of the same shape in the start."""
    merged, count = {}, 0
    for name, value in tuned.items():
        started = any(name.startswith(f"encoder.{prefix}") for prefix in STARTED_FROM)
        if not started or not value.is_floating_point():
            merged[name] = value
            continue
        if name not in start or start[name].shape != value.shape:
            found = "missing" if name not in start else f"of shape {tuple(start[name].shape)}"
            raise UsageError(
                f"--start: its weight for {name} is {found} (the tuned model has {tuple(value.shape)}): give the "
                "model the tuned folder was warm-started from (hf-tlaser train --init-from)"
            )
        merged[name] = torch.lerp(start[name].float(), value.float(), alpha).to(value.dtype)  # eq. (1) of WiSE-FT
        count += 1
    return merged, count


def start_weights(spec: str, saved: dict) -> dict[str, torch.Tensor]:
    """The start's encoder weights (an ``--init-from`` SPEC, checked as ``hf-tlaser train`` does) under the names a
    warm-started member saves them with; UsageError (one line, before any weight is read) when its architecture is
    not the one of the member's ``saved`` config."""
    backbone = check_backbone(spec, saved["model_type"], None)
    for key in ("model_type", "hidden_size", "num_hidden_layers", "vocab_size"):
        theirs, ours = getattr(backbone.config, key, None), saved["backbone"].get(key)
        if theirs != ours:
            raise UsageError(
                f"--start {spec}: its {key} is {theirs}, the tuned model's backbone has {ours}: give the model the "
                "tuned folder was warm-started from (hf-tlaser train --init-from)"
            )
    state = {f"encoder.backbone.{name}": value for name, value in backbone.weights().items()}
    state.update({f"encoder.sentence_head.{name}": value for name, value in backbone.carried.weights.items()})
    return state


def copy_folder(tuned: Path, output: Path) -> None:
    """The tuned folder's files (config, tokenizer, model code, sentence-transformers layout) into ``output``,
    without its weights, results, exports and checkpoints."""
    for entry in sorted(tuned.iterdir()):
        if entry.name in NOT_COPIED or entry.name.startswith("checkpoint-") or entry.suffix == ".safetensors":
            continue
        if entry.is_dir():
            shutil.copytree(entry, output / entry.name)
        else:
            shutil.copy2(entry, output / entry.name)


def run(tuned_spec: str, start_spec: str | None, alpha: float, output: Path, overwrite: bool = False) -> dict:
    """Write the WiSE-FT interpolation of the warm-started folder ``tuned_spec`` and its start (``start_spec``;
    default: the start its config names) at ``alpha`` into ``output``; the summary."""
    if not (0.0 <= alpha <= 1.0 and math.isfinite(alpha)):
        raise UsageError(f"--alpha {alpha}: give a weight of the tuned model in [0, 1] (0: the start, 1: the tuned)")
    if output.exists() and any(output.iterdir()) and not overwrite:
        raise UsageError(f"--output {output} is not empty; give a new folder, or --overwrite to replace it")
    tuned, _ = model_folder(tuned_spec, "TUNED")
    config = json.loads((tuned / "config.json").read_text(encoding="utf-8"))
    if config.get("model_type") not in FAMILIES or not config.get("backbone"):
        raise UsageError(f"TUNED {tuned_spec}: not an hf_tlaser model trained with --init-from (nothing to merge to)")
    start_spec = start_spec or config["backbone"].get("_name_or_path")
    if not start_spec:
        raise UsageError(f"TUNED {tuned_spec}: its config does not name its start; give --start SPEC")
    weights = sorted(tuned.glob("*.safetensors"))
    if not weights:
        raise UsageError(f"TUNED {tuned_spec}: no *.safetensors weights in {tuned}")
    start = start_weights(start_spec, config)
    count = 0
    staging = output.with_name(output.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    for path in weights:  # one output file per input file (a sharded folder keeps its index)
        part, done = interpolate(start, load_file(path), alpha)
        save_file(part, staging / path.name, metadata={"format": "pt"})
        count += done
    if not count:
        raise UsageError(f"TUNED {tuned_spec}: none of its weights are the start's; nothing was interpolated")
    copy_folder(tuned, staging)
    record = {"tuned": str(tuned), "start": start_spec, "alpha": alpha, "interpolated_weights": count}
    (staging / RECORD).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    if output.exists():
        shutil.rmtree(output)
    staging.rename(output)
    logger.info("merged %d encoder weights at alpha=%g into %s", count, alpha, output)
    return {"output": str(output), "alpha": alpha, "interpolated_weights": count, "start": start_spec}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="hf-tlaser merge",
        description="WiSE-FT: interpolate a warm-started model's encoder between its pretrained start and its "
        "fine-tuned weights, (1 - alpha) * start + alpha * tuned, into a new complete model folder",
    )
    parser.add_argument("tuned", help="model folder written by hf-tlaser train --init-from")
    parser.add_argument(
        "--start", default=None, help="the model it was warm-started from (default: the one its config names)"
    )
    parser.add_argument("--alpha", type=float, required=True, help="weight of the tuned model, in [0, 1]")
    parser.add_argument("--output", type=Path, required=True, help="new model folder")
    parser.add_argument("--overwrite", action="store_true", help="replace a non-empty --output")
    args = parser.parse_args(argv)
    return run_command(
        "hf-tlaser merge",
        lambda: print_summary(run(args.tuned, args.start, args.alpha, args.output, args.overwrite)),
    )

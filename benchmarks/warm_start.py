"""Warm start (``hf-tlaser train --init-from``): training pairs/s, target tokens/s and peak RSS of cT-LASER on a
pretrained backbone for each decoder-vocabulary option, in fp32 and under bf16 autocast.

``python -m benchmarks.warm_start [--backbone FOLDER] [--steps N] [--pairs P] [--threads T]``: each option runs in
its own process (peak RSS is per process) on the same micro-batches of P de->en / fi->en / zh->en news pairs (the
targets encoded too, for the distance and alignment losses): N timed updates (forward, backward, AdamW) after two
untimed ones. The options:

* ``full``: own decoder embeddings and output layer over the backbone's whole vocabulary;
* ``targets``: both over the pieces of the training targets (the en/es sides of the main job's corpora);
* ``tied``: the backbone's input embeddings read and score the decoder's tokens (whole vocabulary);
* ``tied+targets``: tied, over the target pieces;
* ``sampled``: full tables, the training softmax over the batch's target pieces and 2,048 drawn rows.

bf16 is timed only where the CPU runs it natively (``hf_tlaser.hardware``); elsewhere its row says so.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

import torch

from hf_tlaser.data import DEFAULT_TRAIN_CORPORA, TranslationCollator, corpus_sentences, load_corpora
from hf_tlaser.hardware import configure_threads, resolve_precision
from hf_tlaser.training.joint import target_vocabulary
from hf_tlaser.training.presets import get_preset
from hf_tlaser.training.warm import backbone_overrides, check_backbone

OPTIONS = {
    "full": {},
    "targets": {"targets": True},
    "tied": {"tie_decoder_to_encoder": True},
    "tied+targets": {"tie_decoder_to_encoder": True, "targets": True},
    "sampled": {"sampled_softmax": 2048},
}
PAIRS = (("de", "wmt-newstest-bilingual"), ("fi", "wmt-newstest-more"), ("zh", "wmt-newstest-more"))


def batches(tokenizer, pairs: int, count: int) -> list[dict]:
    """``count`` micro-batches of ``pairs`` xx->en pairs, cycling through PAIRS."""
    collator = TranslationCollator(tokenizer, ["en"], with_target_encoding=True, pairs=[(x, "en") for x, _ in PAIRS])
    texts = {}
    for lang, corpus in PAIRS:
        ds = load_corpora([corpus], languages=[lang, "en"], max_lines=4000, tokenizer=tokenizer)
        texts[lang] = [(r[lang], r["en"]) for r in ds if r[lang] and r["en"] and len(r[lang]) < 200]
    out = []
    for i in range(count):
        lang = PAIRS[i % len(PAIRS)][0]
        rows = texts[lang][i * pairs : (i + 1) * pairs]
        out.append(collator([{"src": a, "tgt": b, "src_lang": lang, "tgt_lang": "en"} for a, b in rows]))
    return out


def child(backbone_spec: str, option: str, dtype: str, steps: int, pairs: int) -> dict:
    """One option's timing in this process."""
    configure_threads()
    backbone = check_backbone(backbone_spec, "ctlaser", None)
    preset = get_preset("ctlaser", "tiny")
    settings = dict(OPTIONS[option])
    targets = settings.pop("targets", False)
    vocabulary = None
    if targets:
        sentences = corpus_sentences(DEFAULT_TRAIN_CORPORA, max_sentences=60000)
        texts = (text for lang, text in sentences if lang in ("en", "es"))
        vocabulary = target_vocabulary(backbone.tokenizer, texts)
        settings["decoder_vocab_size"] = len(vocabulary)
    tok = backbone.tokenizer
    ids = {"pad_token_id": tok.pad_token_id, "eos_token_id": tok.eos_token_id, "cls_token_id": tok.cls_token_id}
    ids.update(unk_token_id=tok.unk_token_id, decoder_start_token_id=tok.eos_token_id)
    overrides = backbone_overrides(backbone, "backbone", {**settings, **ids, "languages": ["en"]})
    config = preset.make_config(len(tok), **overrides)
    model = preset.model_class(config)
    if vocabulary is not None:
        model.decoder_vocab_ids.copy_(vocabulary)
    backbone.load_into(model.encoder)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
    data = batches(tok, pairs, steps + 2)
    autocast = resolve_precision(dtype, "cpu").autocast_dtype
    times = []
    for i, batch in enumerate(data):
        start = time.perf_counter()
        with torch.autocast("cpu", dtype=autocast, enabled=autocast is not None):
            loss = model(**batch).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if i >= 2:
            times.append(time.perf_counter() - start)
    tokens = sum(int(b["labels"].ne(-100).sum()) for b in data[2:])
    seconds = sum(times)
    return {
        "option": option,
        "dtype": dtype,
        "decoder_rows": config.decoder_vocab,
        "parameters_m": round(sum(p.numel() for p in model.parameters()) / 1e6, 1),
        "pairs_per_s": round(pairs * len(times) / seconds, 2),
        "target_tokens_per_s": round(tokens / seconds, 1),
        "peak_rss_gb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.warm_start", description=__doc__.split("\n")[0])
    p.add_argument("--backbone", default="../shared/data/multilingual-e5-small")
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--pairs", type=int, default=32)
    p.add_argument("--options", nargs="+", default=list(OPTIONS), choices=list(OPTIONS))
    p.add_argument("--dtypes", nargs="+", default=["fp32", "bf16"], choices=["fp32", "bf16"])
    p.add_argument("--output", default=None, help="also write the rows as JSON here")
    p.add_argument("--child", nargs=2, metavar=("OPTION", "DTYPE"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.backbone, *args.child, args.steps, args.pairs)))
        return 0
    rows = []
    for dtype in args.dtypes:
        if dtype == "bf16" and not resolve_precision("auto", "cpu").bf16:
            rows.append({"option": "all", "dtype": "bf16", "note": "not native on this CPU: not timed"})
            continue
        for option in args.options:
            cmd = [sys.executable, "-m", "benchmarks.warm_start", "--backbone", args.backbone, "--steps"]
            cmd += [str(args.steps), "--pairs", str(args.pairs), "--child", option, dtype]
            done = subprocess.run(cmd, capture_output=True, text=True, check=True)
            rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
            print(rows[-1], file=sys.stderr, flush=True)
    keys = ["option", "dtype", "decoder_rows", "parameters_m", "pairs_per_s", "target_tokens_per_s", "peak_rss_gb"]
    print("| " + " | ".join(keys) + " |\n|" + "---|" * len(keys))
    for row in rows:
        print("| " + " | ".join(str(row.get(key, row.get("note", ""))) for key in keys) + " |")
    if args.output:
        with open(args.output, "w", encoding="utf-8") as f:
            json.dump({"threads": torch.get_num_threads(), "rows": rows}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())

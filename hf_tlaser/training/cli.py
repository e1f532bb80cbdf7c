"""``hf-tlaser train``: corpora -> joint BPE -> curriculum batches -> Trainer -> a ``save_pretrained`` model folder.

Single process: ``hf-tlaser train --model ctlaser --preset tiny --output-dir runs/ct``. Two CPU processes (gloo):
``accelerate launch --multi_gpu --num_processes 2 --num_machines 1 --mixed_precision no --dynamo_backend no
-m hf_tlaser.training.cli --use-cpu ...`` (``--cpu --num_processes 2`` silently runs one process) or
``torchrun --standalone --nproc_per_node 2 -m hf_tlaser.training.cli --use-cpu ...``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from dataclasses import asdict, replace
from pathlib import Path

import torch
import yaml
from transformers import AutoTokenizer, TrainingArguments, set_seed
from transformers.trainer_utils import get_last_checkpoint

from hf_tlaser.data import (
    DEFAULT_TRAIN_CORPORA,
    CleaningConfig,
    MultiwayBatchSampler,
    PairBatchSampler,
    ParallelExamples,
    TranslationCollator,
    corpus_texts,
    load_corpora,
    parse_pairs,
    sentence_lengths,
)
from hf_tlaser.tokenization import save_tokenizer, train_tokenizer
from hf_tlaser.training.presets import MODELS, SIZES, get_preset
from hf_tlaser.training.trainer import LaserTrainer, TimeBudgetCallback

logger = logging.getLogger("hf_tlaser.train")

RECIPE_FLAGS = (
    "vocab_size",
    "max_tokens",
    "update_tokens",
    "learning_rate",
    "warmup_updates",
    "warmup_init_lr",
    "weight_decay",
    "max_grad_norm",
    "max_sentence_tokens",
    "batching",
    "max_lines",
)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="hf-tlaser train", description=__doc__.split("\n")[0])
    p.add_argument("--config", help="YAML/JSON file whose keys are these options (command-line flags win)")
    p.add_argument("--model", choices=MODELS, default="ctlaser")
    p.add_argument("--preset", choices=SIZES, default="tiny")
    p.add_argument("--pairs", default="de-en,de-es,en-es,es-en,fr-en,fr-es,it-en,it-es", help="curriculum pairs")
    p.add_argument("--corpora", default=",".join(DEFAULT_TRAIN_CORPORA), help="registered corpus names")
    p.add_argument("--data-dir", default=None, help="corpora folder (default: $HF_TLASER_DATA or ../shared/data)")
    p.add_argument("--tokenizer", default=None, help="existing tokenizer folder (default: train a joint BPE)")
    p.add_argument("--output-dir", required=True)
    p.add_argument("--max-steps", type=int, default=1000, help="optimizer updates")
    p.add_argument("--max-minutes", type=float, default=None, help="stop (and save) after this wall-clock budget")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--bf16", action="store_true", help="bf16 autocast (CPU or GPU)")
    p.add_argument("--fp16", action="store_true", help="fp16 mixed precision (GPU)")
    p.add_argument("--use-cpu", action="store_true", help="train on CPU even if a GPU is present (gloo for DDP)")
    p.add_argument("--logging-steps", type=int, default=10)
    p.add_argument("--save-steps", type=int, default=200)
    p.add_argument("--save-total-limit", type=int, default=2, help="checkpoints kept (older ones are deleted)")
    p.add_argument("--resume", default=None, help="checkpoint folder, or 'auto' for the last one in --output-dir")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="model config override")
    for name in RECIPE_FLAGS:
        kind = {"batching": str, "max_lines": int}.get(name, float)
        p.add_argument(f"--{name.replace('_', '-')}", default=None, type=kind, help="recipe override (see presets)")
    return p


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.config:
        path = Path(args.config)
        values = yaml.safe_load(path.read_text()) if path.suffix in (".yaml", ".yml") else json.loads(path.read_text())
        known = {action.dest for action in parser._actions}
        unknown = sorted(set(values) - known)
        if unknown:
            parser.error(f"{path}: unknown option(s) {unknown}")
        parser.set_defaults(**{k.replace("-", "_"): v for k, v in values.items()})
        args = parser.parse_args(argv)
    return args


def config_overrides(items: list[str]) -> dict:
    """``["distance_beta=0.5", "distance_vnorm_grad=false"]`` -> typed dict (values parsed as YAML scalars)."""
    out = {}
    for item in items:
        if "=" not in item:
            raise ValueError(f"--set {item!r}: expected KEY=VALUE")
        key, value = item.split("=", 1)
        out[key.strip()] = yaml.safe_load(value)
    return out


def train(args: argparse.Namespace) -> LaserTrainer:
    """Run one training job; returns the trainer (its ``args.output_dir`` holds the saved model)."""
    preset = get_preset(args.model, args.preset)
    recipe = replace(
        preset.recipe,
        **{
            name: getattr(args, name)
            if getattr(preset.recipe, name) is None
            else type(getattr(preset.recipe, name))(getattr(args, name))
            for name in RECIPE_FLAGS
            if getattr(args, name) is not None
        },
    )
    set_seed(args.seed)
    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    pairs = parse_pairs(args.pairs)
    languages = sorted({lang for pair in pairs for lang in pair})
    corpora = [c for c in args.corpora.split(",") if c]
    overrides = config_overrides(args.set)

    if args.tokenizer:
        tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
    else:
        logger.info("training a %d-token joint BPE on %s", recipe.vocab_size, corpora)
        texts = corpus_texts(corpora, args.data_dir, languages, max_sentences=recipe.max_lines)
        tokenizer = train_tokenizer(vocab_size=recipe.vocab_size, texts=texts)
    save_tokenizer(tokenizer, out)

    cleaning = CleaningConfig(max_tokens=recipe.max_sentence_tokens - 2)
    dataset = load_corpora(
        corpora, args.data_dir, languages, cleaning=cleaning, tokenizer=tokenizer, max_lines=recipe.max_lines
    )
    lengths = sentence_lengths(dataset, tokenizer, languages)
    training_args = TrainingArguments(
        output_dir=str(out),
        max_steps=args.max_steps,
        per_device_train_batch_size=1,  # micro-batches come from the token-budget batch sampler
        learning_rate=recipe.learning_rate,
        warmup_steps=int(recipe.warmup_updates),
        weight_decay=recipe.weight_decay,
        adam_beta1=recipe.adam_betas[0],
        adam_beta2=recipe.adam_betas[1],
        max_grad_norm=recipe.max_grad_norm or 0.0,
        logging_steps=args.logging_steps,
        logging_first_step=True,
        save_steps=args.save_steps,
        save_total_limit=args.save_total_limit,
        bf16=args.bf16,
        fp16=args.fp16,
        use_cpu=args.use_cpu or not torch.cuda.is_available(),
        seed=args.seed,
        report_to="none",
        remove_unused_columns=False,
        dataloader_num_workers=0,
    )
    world = training_args.world_size
    training_args.gradient_accumulation_steps = max(1, round(recipe.update_tokens / (recipe.max_tokens * world)))
    sampler_class = MultiwayBatchSampler if recipe.batching == "multiway" else PairBatchSampler
    sampler = sampler_class(
        lengths,
        int(recipe.max_tokens),
        pairs,
        seed=args.seed,
        rank=training_args.process_index,
        world_size=world,
    )
    config = preset.make_config(len(tokenizer), **overrides)
    unknown = sorted(set(languages) - set(config.languages))
    if unknown:
        raise ValueError(f"--pairs uses languages {unknown} that the model config does not know ({config.languages})")
    model = preset.model_class(config)
    constrained = config.distance_beta > 0 or config.align_loss_weight > 0
    collator = TranslationCollator(
        tokenizer, config.languages, with_target_encoding=constrained, pairs=pairs, max_length=None
    )
    logger.info(
        "%s: %.1fM parameters, %d groups, %d micro-batches/epoch/rank, accumulation %d, batching=%s, languages %s",
        preset.name,
        sum(p.numel() for p in model.parameters()) / 1e6,
        len(dataset),
        len(sampler),
        training_args.gradient_accumulation_steps,
        recipe.batching,
        config.languages,
    )
    (out / "hf_tlaser_train.json").write_text(
        json.dumps({"args": vars(args), "recipe": asdict(recipe), "preset": preset.name}, indent=2, default=str)
    )
    trainer = LaserTrainer(
        model=model,
        args=training_args,
        train_dataset=ParallelExamples(dataset, config.languages),
        data_collator=collator,
        batch_sampler=sampler,
        warmup_init_lr=recipe.warmup_init_lr,
        callbacks=[TimeBudgetCallback(args.max_minutes)] if args.max_minutes else None,
    )
    resume = get_last_checkpoint(str(out)) if args.resume == "auto" else args.resume
    trainer.train(resume_from_checkpoint=resume)
    trainer.save_model(str(out))
    trainer.save_state()
    if trainer.is_world_process_zero():
        save_tokenizer(tokenizer, out)
    return trainer


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``hf-tlaser train`` (and of ``python -m hf_tlaser.training.cli`` under a launcher)."""
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
    out = train(parse_args(argv)).args.output_dir
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        # a clean exit under torchrun/accelerate: see ../shared/notes (rank 0 could abort at interpreter exit)
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()
        sys.stdout.flush()
        os._exit(0)
    print(f"saved model and tokenizer to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Stage 1 of cNV: a bilingual NMT pair a->b and b->a, trained from the shared corpora as stock ``MarianMTModel``s.

Each direction gets a complete Hugging Face folder (``config.json``, ``model.safetensors``, ``generation_config.json``,
``tokenizer.json`` ...) that ``AutoModelForSeq2SeqLM`` / ``AutoTokenizer`` / ``pipeline("translation")`` load without
this package: the models are what an opus-mt checkpoint would be, at the preset's size. Both tokenizers are one joint
BPE over the two languages in the Marian format (``tokens </s>``, ``hf_tlaser.tokenization`` ``style="marian"``),
trained once on the pair's text and saved with each model. Training: label-smoothed cross entropy (0.1) summed over
the target tokens of the update and divided by their number (fairseq's normalisation, as ``LaserTrainer``), the
pair-mode token-budget batches of ``PairBatchSampler`` and fairseq's inverse-sqrt schedule.

``transformers``' Marian initialises every linear and embedding N(0, 0.02) whatever the width (``init_std``): not
scale-aware. ``fairseq_init_`` replaces it with fairseq's transformer init (xavier-uniform linears, q/k/v with gain
1/sqrt(2), embeddings N(0, d^-1/2) scaled by sqrt(d) in the forward pass, ``scale_embedding=True``).
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from types import SimpleNamespace

import datasets
import torch
import torch.nn.functional as F
from torch import nn
from transformers import GenerationConfig, MarianConfig, MarianMTModel, PreTrainedTokenizerBase
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from hf_tlaser.data import (
    DEFAULT_TRAIN_CORPORA,
    CleaningConfig,
    ParallelExamples,
    Source,
    corpus_texts,
    load_corpora,
    resolve_corpora,
    sentence_lengths,
)
from hf_tlaser.data.collator import IGNORE_INDEX, Seq2SeqCollator
from hf_tlaser.errors import UsageError
from hf_tlaser.tokenization import save_tokenizer, train_tokenizer
from hf_tlaser.training.presets import NMTPreset, Recipe, get_preset
from hf_tlaser.training.run import plan_batches, training_arguments
from hf_tlaser.training.spec import RunSpec
from hf_tlaser.training.trainer import LaserTrainer

logger = logging.getLogger("hf_tlaser.train")

SAMPLE = {"en": "The house is small.", "de": "Das Haus ist klein.", "es": "La casa es pequeña."}
"""A sentence translated after training (logged), as a sanity check that the model generates."""


def nmt_folder(src: str, tgt: str) -> str:
    """Name of the src->tgt model's folder in a cNV run dir."""
    return f"nmt-{src}-{tgt}"


def make_nmt_config(tokenizer: PreTrainedTokenizerBase, **kwargs) -> MarianConfig:
    """A ``MarianConfig`` for ``tokenizer`` (shared source/target vocabulary), opus-mt's conventions: pad =
    decoder start, eos = ``</s>`` (also forced last), embeddings scaled by sqrt(d_model)."""
    pad, eos = tokenizer.pad_token_id, tokenizer.eos_token_id
    if pad is None or eos is None:
        raise ValueError("the NMT tokenizer needs a pad and an eos (</s>) token")
    defaults = dict(scale_embedding=True, max_position_embeddings=512, share_encoder_decoder_embeddings=True)
    special = dict(pad_token_id=pad, eos_token_id=eos, decoder_start_token_id=pad, forced_eos_token_id=eos)
    return MarianConfig(**{**defaults, **kwargs, "vocab_size": len(tokenizer), **special})


def make_generation_config(config: MarianConfig, max_length: int = 256, num_beams: int = 4) -> GenerationConfig:
    """opus-mt's generation settings: beam search, never generate pad (the decoder start token)."""
    return GenerationConfig(
        decoder_start_token_id=config.decoder_start_token_id,
        pad_token_id=config.pad_token_id,
        eos_token_id=config.eos_token_id,
        forced_eos_token_id=config.eos_token_id,
        bad_words_ids=[[config.pad_token_id]],
        max_length=max_length,
        num_beams=num_beams,
    )


@torch.no_grad()
def fairseq_init_(model: MarianMTModel) -> MarianMTModel:
    """fairseq's transformer init in place: xavier-uniform linears (gain 1/sqrt(2) on q/k/v), zero biases, token
    embeddings N(0, d_model^-1/2) with a zero pad row (the output projection is tied to them)."""
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear) and module is not model.lm_head:
            gain = 2**-0.5 if name.endswith(("q_proj", "k_proj", "v_proj")) else 1.0
            nn.init.xavier_uniform_(module.weight, gain=gain)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
    embedding = model.get_input_embeddings()
    nn.init.normal_(embedding.weight, mean=0.0, std=model.config.d_model**-0.5)
    embedding.weight[model.config.pad_token_id].zero_()
    return model


def label_smoothed_nll(
    logits: torch.Tensor, labels: torch.Tensor, epsilon: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(label-smoothed loss, cross entropy, target tokens), the losses summed over the tokens of ``labels`` != -100.

    The smoothed loss is fairseq's / ``F.cross_entropy(label_smoothing=epsilon)``'s: ``(1 - eps) nll + eps / V
    sum_v -log p(v)``.
    """
    mask = labels != IGNORE_INDEX
    lprobs = F.log_softmax(logits[mask].float(), dim=-1)
    nll = -lprobs.gather(-1, labels[mask].unsqueeze(-1)).sum()
    smoothed = (1.0 - epsilon) * nll - epsilon / lprobs.shape[-1] * lprobs.sum()
    return smoothed, nll, mask.sum()


class NMTTrainer(LaserTrainer):
    """``LaserTrainer`` for a stock seq2seq model (no loss parts of its own): label-smoothed cross entropy summed
    over the micro-batch's target tokens and divided by the update's (``num_items_in_batch``); the logs get
    ``loss_mt_per_token`` (the plain cross entropy per target token), ``pairs`` and ``tokens_per_second``."""

    loss_is_scaled_for_ga = True  # divided by the update's target tokens already

    def __init__(self, *args, label_smoothing: float = 0.1, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.label_smoothing = label_smoothing

    def compute_loss(self, model, inputs, return_outputs: bool = False, num_items_in_batch=None):
        if model.training and not self._parts:
            self._last_log_time = time.monotonic()  # tokens/s counts from the first micro-batch after a log
        labels = inputs["labels"]
        decoder_input_ids = self.accelerator.unwrap_model(model).prepare_decoder_input_ids_from_labels(labels=labels)
        outputs = model(
            input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"], decoder_input_ids=decoder_input_ids
        )
        smoothed, nll, tokens = label_smoothed_nll(outputs.logits, labels, self.label_smoothing)
        denominator = tokens if num_items_in_batch is None else num_items_in_batch
        loss = smoothed / denominator
        if self.args.average_tokens_across_devices and num_items_in_batch is not None:
            loss = loss * self.accelerator.num_processes  # DDP averages the gradients of the processes
        if model.training:
            # LogParts reads num_tokens, the rows of sentence_embedding (pairs) and loss_mt (summed)
            self._parts.add(SimpleNamespace(num_tokens=tokens, sentence_embedding=labels, loss_mt=nll))
        outputs.loss = loss
        return (loss, outputs) if return_outputs else loss


@dataclass
class NMTResult:
    """A trained direction: its folder and the cross entropy per target token of the first and last log."""

    folder: Path
    updates: int
    first_loss: float | None
    last_loss: float | None


def pair_corpora(
    pair: Sequence[str],
    corpora: str | Sequence[str | Source] = DEFAULT_TRAIN_CORPORA,
    data_dir: str | os.PathLike | None = None,
) -> list[Source]:
    """The corpora (specs or Sources) with a file set that holds both languages of ``pair`` (the others are logged);
    UsageError if none does."""
    kept = []
    sources = resolve_corpora(corpora, data_dir)
    for source in sources:
        if any(set(pair) <= set(part.languages) for part in source.parts):
            kept.append(source)
        else:
            logger.info("skipping %s: no %s text", source.spec, "-".join(pair))
    if not kept:
        raise UsageError(f"none of the corpora {', '.join(s.spec for s in sources)} has {'-'.join(pair)} text")
    return kept


def train_marian_bpe(
    pair: Sequence[str],
    corpora: str | Sequence[str | Source] = DEFAULT_TRAIN_CORPORA,
    data_dir: str | os.PathLike | None = None,
    vocab_size: int = 8000,
    max_lines: int | None = None,
) -> PreTrainedTokenizerBase:
    """The joint Marian-format BPE over the two languages of ``pair`` in ``corpora`` (``pair_corpora``)."""
    kept = pair_corpora(pair, corpora, data_dir)
    names = ", ".join(source.spec for source in kept)
    logger.info("training a %d-token joint Marian BPE on %s (%s)", vocab_size, names, "-".join(pair))
    texts = corpus_texts(kept, data_dir, list(pair), max_sentences=max_lines)
    return train_tokenizer(texts=texts, vocab_size=vocab_size, style="marian", show_progress=False)


def load_pair_corpora(
    pair: Sequence[str],
    tokenizer: PreTrainedTokenizerBase,
    recipe: Recipe,
    corpora: str | Sequence[str | Source] = DEFAULT_TRAIN_CORPORA,
    data_dir: str | os.PathLike | None = None,
) -> datasets.Dataset:
    """The cleaned groups of ``corpora`` that hold the pair's languages; sentences of more than
    ``recipe.max_sentence_tokens`` tokens (with ``</s>``) of ``tokenizer`` are dropped."""
    cleaning = CleaningConfig(max_tokens=recipe.max_sentence_tokens - 1)
    return load_corpora(
        corpora, data_dir, list(pair), cleaning=cleaning, tokenizer=tokenizer, max_lines=recipe.max_lines
    )


def train_nmt(
    dataset: datasets.Dataset,
    tokenizer: PreTrainedTokenizerBase,
    direction: tuple[str, str],
    output_dir: str | os.PathLike,
    nmt: NMTPreset,
    training_args,
    *,
    resume_from: str | os.PathLike | None = None,
    keep_checkpoints: bool = False,
) -> NMTResult:
    """Train the ``direction`` (src, tgt) model for ``nmt.steps`` updates of ``nmt.recipe`` and save it as a
    complete folder in ``output_dir`` (its checkpoints go there too and are deleted at the end unless
    ``keep_checkpoints``). ``training_args``: ``TrainingArguments`` whose ``output_dir`` is ``output_dir``."""
    out = Path(output_dir)
    src, tgt = direction
    recipe = nmt.recipe
    lengths = sentence_lengths(dataset, tokenizer, list(direction))
    sampler = plan_batches(lengths, recipe, [direction], training_args, f"the {src}-{tgt} text of the corpora")
    config = make_nmt_config(tokenizer, **nmt.config_kwargs)
    torch.manual_seed(training_args.seed)
    model = fairseq_init_(MarianMTModel(config))
    model.generation_config = make_generation_config(config, max_length=2 * recipe.max_sentence_tokens)
    logger.info(
        "NMT %s->%s: Marian d_model %d, %d+%d layers, %.1fM parameters, %d micro-batches/epoch/rank, accumulation "
        "%d; training %d updates into %s",
        src,
        tgt,
        config.d_model,
        config.encoder_layers,
        config.decoder_layers,
        sum(p.numel() for p in model.parameters()) / 1e6,
        len(sampler),
        training_args.gradient_accumulation_steps,
        training_args.max_steps,
        out,
    )
    trainer = NMTTrainer(
        model=model,
        args=training_args,
        train_dataset=ParallelExamples(dataset, list(direction)),
        data_collator=Seq2SeqCollator(tokenizer, max_length=recipe.max_sentence_tokens),
        batch_sampler=sampler,
        warmup_init_lr=recipe.warmup_init_lr,
        label_smoothing=nmt.label_smoothing,
    )
    trainer.train(resume_from_checkpoint=None if resume_from is None else str(resume_from))
    trainer.save_model(str(out))
    trainer.save_state()
    if training_args.process_index == 0:
        save_tokenizer(tokenizer, out)
        if not keep_checkpoints:
            for checkpoint in out.glob(f"{PREFIX_CHECKPOINT_DIR}-*"):
                shutil.rmtree(checkpoint)
        if src in SAMPLE:
            logger.info("NMT %s->%s sample: %r -> %r", src, tgt, SAMPLE[src], translate(model, tokenizer, SAMPLE[src]))
    history = [entry["loss_mt_per_token"] for entry in trainer.state.log_history if "loss_mt_per_token" in entry]
    return NMTResult(out, trainer.state.global_step, *(history[:1] or [None]), *(history[-1:] or [None]))


def translate(model: MarianMTModel, tokenizer: PreTrainedTokenizerBase, texts: str | list[str], **kwargs) -> str | list:
    """Greedy translations of ``texts`` (a sanity check); ``kwargs`` go to ``model.generate`` (beam search with
    ``num_beams=4`` is the saved generation config's default)."""
    single = isinstance(texts, str)
    batch = tokenizer([texts] if single else texts, return_tensors="pt", padding=True).to(model.device)
    model.eval()
    with torch.no_grad():
        out = model.generate(**batch, **{"num_beams": 1, **kwargs})
    decoded = tokenizer.batch_decode(out, skip_special_tokens=True)
    return decoded[0] if single else decoded


def finished_nmt(folder: str | os.PathLike) -> bool:
    """Whether ``folder`` holds a complete NMT model folder (what ``train_nmt`` saves at its end)."""
    folder = Path(folder)
    needed = ("config.json", "model.safetensors", "generation_config.json", "tokenizer.json", "trainer_state.json")
    return all((folder / name).is_file() for name in needed)


def train_nmt_pair(
    pair: Sequence[str],
    output_dir: str | os.PathLike,
    preset: str | NMTPreset = "tiny",
    *,
    corpora: str | Sequence[str | Source] = DEFAULT_TRAIN_CORPORA,
    data_dir: str | os.PathLike | None = None,
    steps: int | None = None,
    vocab_size: int | None = None,
    max_lines: int | None = None,
    max_sentence_tokens: int | None = None,
    seed: int = 1,
    use_cpu: bool = True,
    logging_steps: int = 10,
    **config_kwargs,
) -> tuple[Path, Path]:
    """Train the NMT pair a->b and b->a of ``pair`` (``("en", "de")``) into ``output_dir/nmt-a-b`` and
    ``output_dir/nmt-b-a``; returns the two folders (``CNVModel.from_nmt_pair(*folders)`` takes them).

    ``preset``: a cNV preset size (its NMT sizes and recipes; the cNV recipe's vocabulary, sentence length and line
    cap) or an ``NMTPreset`` (then with the tiny cNV recipe's data settings); ``steps``, ``vocab_size``,
    ``max_lines``, ``max_sentence_tokens`` and ``config_kwargs`` (``MarianConfig`` fields) override them.
    """
    cnv = get_preset("cnv", preset if isinstance(preset, str) else "tiny")
    nmt = cnv.nmt if isinstance(preset, str) else preset
    data = {"vocab_size": vocab_size, "max_lines": max_lines, "max_sentence_tokens": max_sentence_tokens}
    recipe = replace(cnv.recipe, **{key: value for key, value in data.items() if value is not None})
    nmt = nmt_with_data(nmt, recipe, steps, config_kwargs)
    a, b = pair
    tokenizer = train_marian_bpe(pair, corpora, data_dir, recipe.vocab_size, recipe.max_lines)
    dataset = load_pair_corpora(pair, tokenizer, recipe, corpora, data_dir)
    spec = RunSpec(
        output_dir=str(output_dir), use_cpu=use_cpu, seed=seed, logging_steps=logging_steps, save_steps=10**9
    )
    folders = []
    for direction in ((a, b), (b, a)):
        folder = Path(output_dir) / nmt_folder(*direction)
        args = training_arguments(spec, None, folder, nmt.recipe, nmt.steps)
        folders.append(train_nmt(dataset, tokenizer, direction, folder, nmt, args).folder)
    return folders[0], folders[1]


def nmt_with_data(
    nmt: NMTPreset, recipe: Recipe, steps: int | None = None, config_kwargs: dict | None = None
) -> NMTPreset:
    """``nmt`` with the data settings (vocabulary, sentence length, line cap) of the cNV ``recipe``, and ``steps``
    and ``config_kwargs`` (``MarianConfig`` fields) where given."""
    data = {name: getattr(recipe, name) for name in ("vocab_size", "max_sentence_tokens", "max_lines")}
    return replace(
        nmt,
        recipe=replace(nmt.recipe, **data),
        steps=nmt.steps if steps is None else steps,
        config_kwargs={**nmt.config_kwargs, **(config_kwargs or {})},
    )


__all__ = [
    "NMTResult",
    "NMTTrainer",
    "fairseq_init_",
    "finished_nmt",
    "label_smoothed_nll",
    "load_pair_corpora",
    "make_generation_config",
    "make_nmt_config",
    "nmt_folder",
    "nmt_with_data",
    "train_marian_bpe",
    "train_nmt",
    "train_nmt_pair",
    "translate",
]

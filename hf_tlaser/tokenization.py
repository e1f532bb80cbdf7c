"""Joint BPE over all languages (the LASER recipe: one vocabulary, no language id on the encoder side).

Every encoded input is ``STR_TAG text </s>``: STR_TAG is the CLS-like token whose final encoder output is the
sentence embedding (Li & Mak 2020, sec. 2).
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import os
from collections.abc import Iterable, Iterator
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerFast

from hf_tlaser.data.readers import iter_lines

logger = logging.getLogger(__name__)

PAD, UNK, EOS, STR_TAG = "<pad>", "<unk>", "</s>", "STR_TAG"
SPECIAL_TOKENS = [PAD, UNK, EOS, STR_TAG]  # ids 0..3, matching the model configs' defaults


def build_tokenizer(tokenizer: Tokenizer) -> PreTrainedTokenizerFast:
    """Wrap a trained ``tokenizers.Tokenizer`` whose vocabulary starts with SPECIAL_TOKENS."""
    str_tag, eos = tokenizer.token_to_id(STR_TAG), tokenizer.token_to_id(EOS)
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{STR_TAG} $A {EOS}",
        pair=f"{STR_TAG} $A {EOS} $B:1 {EOS}:1",
        special_tokens=[(STR_TAG, str_tag), (EOS, eos)],
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        pad_token=PAD,
        unk_token=UNK,
        eos_token=EOS,
        cls_token=STR_TAG,
        padding_side="right",
        model_max_length=2048,
    )


def train_tokenizer(
    files: Iterable[str | os.PathLike] | None = None,
    vocab_size: int = 50000,
    lowercase: bool = True,
    *,
    texts: Iterable[str] | None = None,
    min_frequency: int = 2,
    model_max_length: int = 2048,
    show_progress: bool = True,
) -> PreTrainedTokenizerFast:
    """Train one joint BPE over ``files`` (plain or .gz, one sentence per line) and/or ``texts``.

    NFKC normalisation, optional lowercasing (on by default, as in LASER), whitespace/punctuation-aware
    pre-tokenisation with reversible word-boundary markers. Empty lines are skipped.
    """
    if files is None and texts is None:
        raise ValueError("train_tokenizer needs files or texts")
    norm = [normalizers.NFKC()] + ([normalizers.Lowercase()] if lowercase else [])
    tokenizer = Tokenizer(models.BPE(unk_token=UNK))
    tokenizer.normalizer = normalizers.Sequence(norm)
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
    tokenizer.decoder = decoders.Metaspace()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=SPECIAL_TOKENS,
        show_progress=show_progress,
    )

    def corpus() -> Iterator[str]:
        lines = (line for path in files or () for line in iter_lines(path))
        yield from (t for t in itertools.chain(lines, texts or ()) if t.strip())

    tokenizer.train_from_iterator(corpus(), trainer=trainer)
    wrapped = build_tokenizer(tokenizer)
    wrapped.model_max_length = model_max_length
    logger.info("trained joint BPE with %d tokens (lowercase=%s)", len(wrapped), lowercase)
    return wrapped


def save_tokenizer(tokenizer: PreTrainedTokenizerFast, save_directory: str | os.PathLike) -> None:
    """``save_pretrained`` plus a ``tokenizer_config.json`` that transformers 4.x loads too.

    transformers 5 writes ``"tokenizer_class": "TokenizersBackend"``, unknown to 4.x; ``PreTrainedTokenizerFast``
    loads in both.
    """
    # padding/truncation left in the backend by earlier batch calls must not become the saved defaults
    tokenizer.backend_tokenizer.no_padding()
    tokenizer.backend_tokenizer.no_truncation()
    tokenizer.save_pretrained(save_directory)
    config_path = Path(save_directory) / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config["tokenizer_class"] = "PreTrainedTokenizerFast"
    config_path.write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n")


def main(argv: list[str] | None = None) -> int:
    """``hf-tlaser train-tokenizer``: train the joint BPE on files or registered corpora and save it."""
    parser = argparse.ArgumentParser(prog="hf-tlaser train-tokenizer", description=main.__doc__)
    parser.add_argument("--files", nargs="*", default=[], help="text files (plain or .gz), one sentence per line")
    parser.add_argument("--corpora", default=None, help="comma-separated corpus names from the data registry")
    parser.add_argument("--data-dir", default=None, help="corpora folder (default: $HF_TLASER_DATA or ../shared/data)")
    parser.add_argument("--vocab-size", type=int, default=50000)
    parser.add_argument("--no-lowercase", action="store_true")
    parser.add_argument("--max-sentences", type=int, default=None, help="cap on corpus sentences (per language)")
    parser.add_argument("--output-dir", required=True)
    args = parser.parse_args(argv)
    texts: Iterable[str] = ()
    if args.corpora:
        from hf_tlaser.data import corpus_texts

        texts = corpus_texts(args.corpora.split(","), data_dir=args.data_dir, max_sentences=args.max_sentences)
    if not args.files and not args.corpora:
        parser.error("give --files and/or --corpora")
    tokenizer = train_tokenizer(args.files, args.vocab_size, not args.no_lowercase, texts=texts)
    save_tokenizer(tokenizer, args.output_dir)
    print(f"saved a {len(tokenizer)}-token joint BPE to {args.output_dir}")
    return 0

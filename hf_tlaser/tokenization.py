"""Joint BPE over all languages (the LASER recipe: one vocabulary, no language id on the encoder side).

Every encoded input is ``STR_TAG text </s>``: STR_TAG is the CLS-like token whose final encoder output is the
sentence embedding (Li & Mak 2020, sec. 2). Characters the BPE never saw (a script absent from the training text)
fall back to their UTF-8 bytes, the 256 ``<0xNN>`` tokens after the special tokens (as sentencepiece/Llama do),
instead of one ``<unk>`` each: different Chinese sentences keep different ids.

``style="marian"`` builds the tokenizer of a bilingual Marian/opus-mt style NMT model instead (the cNV family's NMT
pair): ``text </s>``, no STR_TAG (neither in the vocabulary nor in the encoding), pad/unk/eos at ids 0..2.
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import os
import sys
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerFast

from hf_tlaser.data.readers import iter_lines
from hf_tlaser.errors import UsageError

logger = logging.getLogger(__name__)

PAD, UNK, EOS, STR_TAG = "<pad>", "<unk>", "</s>", "STR_TAG"
SPECIAL_TOKENS = [PAD, UNK, EOS, STR_TAG]  # ids 0..3, matching the model configs' defaults
BYTE_TOKENS = [f"<0x{byte:02X}>" for byte in range(256)]  # ids 4..259 with byte fallback
STYLES = ("laser", "marian")
"""``laser``: ``STR_TAG text </s>`` (the sentence encoders); ``marian``: ``text </s>`` (a bilingual NMT model)."""


def _special_tokens(style: str) -> list[str]:
    if style not in STYLES:
        raise ValueError(f"unknown tokenizer style {style!r}; expected one of {STYLES}")
    return SPECIAL_TOKENS if style == "laser" else SPECIAL_TOKENS[:3]


def _add_byte_fallback(tokenizer: Tokenizer, first: int = len(SPECIAL_TOKENS)) -> Tokenizer:
    """The trained BPE with the 256 byte tokens inserted after the ``first`` special tokens (learned ids shift by
    256) and ``byte_fallback`` on; the merges, hence the tokenization of text the BPE saw, are unchanged."""
    data = json.loads(tokenizer.to_str())
    vocab = {token: i if i < first else i + len(BYTE_TOKENS) for token, i in data["model"]["vocab"].items()}
    vocab.update({token: first + byte for byte, token in enumerate(BYTE_TOKENS)})
    data["model"].update(vocab=vocab, byte_fallback=True)
    with_bytes = Tokenizer.from_str(json.dumps(data))
    with_bytes.decoder = decoders.Sequence([decoders.ByteFallback(), decoders.Metaspace()])
    return with_bytes


MODEL_INPUT_NAMES = ["input_ids", "attention_mask"]
"""What the tokenizers return: no ``token_type_ids`` (transformers 4.x's default adds them; no model here takes them,
and a Marian NMT model's ``forward`` rejects them)."""
WRAPPER_KWARGS = dict(
    pad_token=PAD,
    unk_token=UNK,
    eos_token=EOS,
    padding_side="right",
    model_max_length=2048,
    model_input_names=MODEL_INPUT_NAMES,
)


def build_tokenizer(tokenizer: Tokenizer, style: str = "laser") -> PreTrainedTokenizerFast:
    """Wrap a trained ``tokenizers.Tokenizer`` whose vocabulary starts with the special tokens of ``style``
    (SPECIAL_TOKENS; without STR_TAG for ``"marian"``)."""
    eos = tokenizer.token_to_id(EOS)
    if _special_tokens(style) != SPECIAL_TOKENS:  # marian: "text </s>", as MarianTokenizer encodes
        tokenizer.post_processor = processors.TemplateProcessing(
            single=f"$A {EOS}", pair=f"$A $B:1 {EOS}:1", special_tokens=[(EOS, eos)]
        )
        return PreTrainedTokenizerFast(tokenizer_object=tokenizer, **WRAPPER_KWARGS)
    str_tag = tokenizer.token_to_id(STR_TAG)
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{STR_TAG} $A {EOS}",
        pair=f"{STR_TAG} $A {EOS} $B:1 {EOS}:1",
        special_tokens=[(STR_TAG, str_tag), (EOS, eos)],
    )
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, cls_token=STR_TAG, **WRAPPER_KWARGS)


def train_tokenizer(
    files: Iterable[str | os.PathLike] | None = None,
    vocab_size: int = 50000,
    lowercase: bool = True,
    *,
    texts: Iterable[str] | None = None,
    min_frequency: int = 2,
    model_max_length: int = 2048,
    show_progress: bool = True,
    byte_fallback: bool = True,
    style: str = "laser",
) -> PreTrainedTokenizerFast:
    """Train one joint BPE over ``files`` (plain or .gz, one sentence per line) and/or ``texts``.

    NFKC normalisation, optional lowercasing (on by default, as in LASER), whitespace/punctuation-aware
    pre-tokenisation with reversible word-boundary markers. Empty lines are skipped; UsageError if nothing is left.
    ``byte_fallback`` adds the 256 byte tokens (ids 4..259; the vocabulary grows to ``vocab_size + 256``) so that
    unseen characters become bytes instead of ``<unk>``. ``style``: one of STYLES (``"marian"``: ``text </s>``
    without STR_TAG, byte tokens at ids 3..258).
    """
    if files is None and texts is None:
        raise ValueError("train_tokenizer needs files or texts")
    special_tokens = _special_tokens(style)
    norm = [normalizers.NFKC()] + ([normalizers.Lowercase()] if lowercase else [])
    tokenizer = Tokenizer(models.BPE(unk_token=UNK))
    tokenizer.normalizer = normalizers.Sequence(norm)
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
    tokenizer.decoder = decoders.Metaspace()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=special_tokens,
        show_progress=show_progress,
    )

    seen = 0

    def corpus() -> Iterator[str]:
        nonlocal seen
        lines = (line for path in files or () for line in iter_lines(path))
        for text in itertools.chain(lines, texts or ()):
            if text.strip():
                seen += 1
                yield text

    tokenizer.train_from_iterator(corpus(), trainer=trainer)
    if not seen:
        sources = ", ".join(map(str, files or ())) or "the given texts"
        raise UsageError(f"no text to train the tokenizer on: only empty or blank lines in {sources}")
    if byte_fallback:
        tokenizer = _add_byte_fallback(tokenizer, len(special_tokens))
    wrapped = build_tokenizer(tokenizer, style)
    wrapped.model_max_length = model_max_length
    logger.info(
        "trained joint BPE with %d tokens on %d lines (lowercase=%s, byte_fallback=%s, style=%s)",
        len(wrapped),
        seen,
        lowercase,
        byte_fallback,
        style,
    )
    return wrapped


TOKEN_REPORT = "tokenizer_languages.json"
"""Per-language report of a trained joint BPE, next to the tokenizer (``language_token_report``)."""
BYTE_FALLBACK_WARNING = 0.05
"""A language whose sampled tokens are byte fallbacks more often than this is reported as poorly covered."""


class LanguageSample:
    """Watches the ``(language, sentence)`` items a joint BPE is trained on: counts sentences and characters per
    language and keeps the first ``size`` sentences of each (to measure the trained BPE on)."""

    def __init__(self, size: int = 2000) -> None:
        self.size = size
        self.sentences: Counter = Counter()
        self.characters: Counter = Counter()
        self.sample: dict[str, list[str]] = {}

    def watch(self, items: Iterable[tuple[str, str]]) -> Iterator[str]:
        """The sentences of ``items``, counted on the way."""
        for lang, text in items:
            self.sentences[lang] += 1
            self.characters[lang] += len(text)
            kept = self.sample.setdefault(lang, [])
            if len(kept) < self.size:
                kept.append(text)
            yield text


def language_token_report(tokenizer: PreTrainedTokenizerFast, sample: LanguageSample) -> dict:
    """How the trained BPE serves each language: sentences it was trained on, tokens per sentence and characters per
    token (on the sample), byte-fallback and ``<unk>`` shares of the tokens, and each language's share of the
    training text's tokens (sentences x tokens per sentence: exact when every sentence was sampled, else an
    estimate). Logged as a table; languages whose tokens are mostly bytes are warned about."""
    vocab = tokenizer.get_vocab()
    byte_ids = {vocab[token] for token in BYTE_TOKENS if token in vocab}
    languages: dict[str, dict] = {}
    for lang in sorted(sample.sample):
        texts = sample.sample[lang]
        ids = [i for seq in tokenizer(texts, add_special_tokens=False)["input_ids"] for i in seq]
        tokens = max(len(ids), 1)
        languages[lang] = {
            "sentences": sample.sentences[lang],
            "sampled_sentences": len(texts),
            "tokens_per_sentence": round(len(ids) / max(len(texts), 1), 2),
            "characters_per_token": round(sum(map(len, texts)) / tokens, 2),
            "byte_fallback_share": round(sum(i in byte_ids for i in ids) / tokens, 4),
            "unk_share": round(sum(i == tokenizer.unk_token_id for i in ids) / tokens, 4),
        }
    total = sum(row["sentences"] * row["tokens_per_sentence"] for row in languages.values()) or 1.0
    for row in languages.values():
        row["token_share"] = round(row["sentences"] * row["tokens_per_sentence"] / total, 4)
    lines = [f"{'lang':<8} {'sentences':>10} {'tok share':>9} {'tok/sent':>8} {'chars/tok':>9} {'bytes':>6}"]
    for lang, row in languages.items():
        lines.append(
            f"{lang:<8} {row['sentences']:>10,} {row['token_share']:>9.1%} {row['tokens_per_sentence']:>8.1f} "
            f"{row['characters_per_token']:>9.2f} {row['byte_fallback_share']:>6.1%}"
        )
    logger.info("joint BPE per language (%d tokens):\n%s", len(tokenizer), "\n".join(lines))
    for lang, row in languages.items():
        if row["byte_fallback_share"] > BYTE_FALLBACK_WARNING:
            logger.warning(
                "%s: %.0f%% of its tokens are byte fallbacks: the BPE hardly covers its script (raise --vocab-size, or "
                "give it more of the tokenizer's text)",
                lang,
                100 * row["byte_fallback_share"],
            )
    return {"vocab_size": len(tokenizer), "languages": languages}


def write_token_report(report: dict, folder: str | os.PathLike) -> Path:
    """Write ``report`` (``language_token_report``) as TOKEN_REPORT into ``folder``."""
    path = Path(folder) / TOKEN_REPORT
    path.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return path


def save_tokenizer(tokenizer: PreTrainedTokenizerFast, save_directory: str | os.PathLike) -> None:
    """``save_pretrained`` plus a ``tokenizer_config.json`` that transformers 4.x loads too.

    transformers 5 writes ``"tokenizer_class": "TokenizersBackend"``, unknown to 4.x; ``PreTrainedTokenizerFast``
    loads in both. ``model_input_names`` is written too: 4.x would otherwise return ``token_type_ids``.
    """
    # padding/truncation left in the backend by earlier batch calls must not become the saved defaults
    tokenizer.backend_tokenizer.no_padding()
    tokenizer.backend_tokenizer.no_truncation()
    tokenizer.save_pretrained(save_directory)
    config_path = Path(save_directory) / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config["tokenizer_class"] = "PreTrainedTokenizerFast"
    config["model_input_names"] = MODEL_INPUT_NAMES
    config_path.write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n")


def main(argv: list[str] | None = None) -> int:
    """``hf-tlaser train-tokenizer``: train the joint BPE on files or corpora (specs) and save it with its
    per-language report."""
    parser = argparse.ArgumentParser(prog="hf-tlaser train-tokenizer", description=main.__doc__)
    parser.add_argument("--files", nargs="*", default=[], help="text files (plain or .gz), one sentence per line")
    parser.add_argument("--corpora", default=None, help="comma-separated corpus specs, as hf-tlaser train --corpora")
    parser.add_argument("--data-dir", default=None, help="corpora folder (default: $HF_TLASER_DATA or ../shared/data)")
    parser.add_argument("--vocab-size", type=int, default=50000)
    parser.add_argument("--no-lowercase", action="store_true")
    parser.add_argument("--max-sentences", type=int, default=None, help="cap on corpus sentences (per language)")
    parser.add_argument("--output-dir", required=True)
    args = parser.parse_args(argv)
    if not args.files and not args.corpora:
        parser.error("give --files and/or --corpora")
    sample = LanguageSample()
    try:
        missing = [path for path in args.files if not Path(path).is_file()]
        if missing:
            raise UsageError(f"--files: {', '.join(missing)} not found")
        texts: Iterable[str] = ()
        if args.corpora:
            from hf_tlaser.data import corpus_sentences, resolve_corpora

            sources = resolve_corpora(args.corpora, args.data_dir)
            texts = sample.watch(corpus_sentences(sources, args.data_dir, max_sentences=args.max_sentences))
        tokenizer = train_tokenizer(args.files, args.vocab_size, not args.no_lowercase, texts=texts)
    except UsageError as err:
        print(f"{parser.prog}: error: {' '.join(str(err).splitlines())}", file=sys.stderr)
        return 2
    save_tokenizer(tokenizer, args.output_dir)
    if sample.sample:
        write_token_report(language_token_report(tokenizer, sample), args.output_dir)
    print(f"saved a {len(tokenizer)}-token joint BPE to {args.output_dir}")
    return 0

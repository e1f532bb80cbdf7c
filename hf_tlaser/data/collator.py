"""Collator producing the model's batch dict (the batch contract) from ``ParallelExamples`` items."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import torch
from transformers import PreTrainedTokenizerBase

from hf_tlaser.data.languages import DEFAULT_PAIRS, LANGUAGES, Pair, check_languages

IGNORE_INDEX = -100


def count_target_tokens(batch: dict[str, torch.Tensor]) -> int:
    """Number of target tokens (``labels != -100``) of a collated batch."""
    return int((batch["labels"] != IGNORE_INDEX).sum())


def text_key(text: str) -> int:
    """A stable 63-bit key of a sentence's text (the same in every process and run, unlike ``hash``), never 0."""
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(), "big") >> 1 or 1


def text_keys(texts: Sequence[str]) -> torch.LongTensor:
    """The ``text_key`` of each text, LongTensor[N]."""
    return torch.tensor([text_key(text) for text in texts], dtype=torch.long)


def language_keys(languages: Sequence[str]) -> torch.LongTensor:
    """A stable key of each language code, LongTensor[N] (``text_key`` of ``"lang:" + code``: never 0)."""
    return text_keys([f"lang:{lang}" for lang in languages])


def merge_shared_texts(groups: Sequence[int], texts: Sequence[Sequence[str]]) -> list[int]:
    """Each pair's group, where pairs that share a sentence (the same text on either side: a repeated short
    sentence, an untranslated name) share the smallest of their groups: such pairs are not negatives of each other.
    ``groups`` [P] and ``texts`` [P] (each pair's sentences) are aligned."""
    root = {group: group for group in groups}

    def find(group: int) -> int:
        while root[group] != group:
            root[group] = group = root[root[group]]
        return group

    first: dict[str, int] = {}
    for group, sentences in zip(groups, texts):
        for text in sentences:
            a, b = find(first.setdefault(text, group)), find(group)
            root[max(a, b)] = min(a, b)
    return [find(group) for group in groups]


def pad_labels(sequences: Sequence[Sequence[int]]) -> torch.Tensor:
    """Token id sequences -> ``[N, longest]`` LongTensor, right-padded with -100."""
    labels = torch.full((len(sequences), max(map(len, sequences))), IGNORE_INDEX, dtype=torch.long)
    for i, seq in enumerate(sequences):
        labels[i, : len(seq)] = torch.tensor(seq, dtype=torch.long)
    return labels


class TranslationCollator:
    """Tokenize micro-batches into the batch contract.

    Pair mode (items with ``src``/``tgt``; one pair a->b per batch): ``input_ids``/``attention_mask`` [B, S]
    source in encoder format (``STR_TAG ... </s>``, right-padded); ``labels`` [B, L] target tokens + eos, padded
    with -100; ``tgt_lang`` [B] index of b in ``languages``; with ``with_target_encoding`` also
    ``tgt_input_ids``/``tgt_attention_mask`` (target in encoder format); with ``with_source_language`` also
    ``src_lang`` [B] (index of a: models that also train b->a); ``group_index`` [B]: every pair its own group, except
    that pairs sharing a sentence share one (``merge_shared_texts``: never each other's negatives).

    Multi-way mode (group items ``{lang: text}``): ``input_ids``/``attention_mask`` [N, S] every sentence that takes
    part in a curriculum pair present in its group, once; per translation direction t: ``labels`` [T, L],
    ``tgt_lang`` [T], ``src_index`` [T] (row of the source in input_ids); ``pair_index`` [T, 2] (source row,
    target row) for the distance loss; ``group_index`` [T] (the micro-batch item each direction comes from, items
    that share a sentence merged: the model never takes a translation of the same group as a negative).

    With ``with_text_keys`` both modes also carry ``text_keys`` [R]: the ``text_key`` of each encoded row (pair mode:
    the sources, then the targets), by which a cross-batch memory of negatives leaves out the same sentences, and
    ``text_languages`` [R]: the ``language_keys`` of each row's language, by which it can keep one language's entries.
    """

    def __init__(
        self,
        tokenizer: PreTrainedTokenizerBase,
        languages: Sequence[str] = LANGUAGES,
        with_target_encoding: bool = False,
        pairs: Sequence[Pair] = DEFAULT_PAIRS,
        max_length: int | None = None,
        with_source_language: bool = False,
        with_text_keys: bool = False,
    ) -> None:
        """``languages``: the model's language table (``tgt_lang``/``src_lang`` index it; it must hold the targets of
        ``pairs``, and their sources with ``with_source_language``); ``pairs``: curriculum directions (multi-way
        mode); ``max_length`` truncates sentences (default: none); ``with_source_language``: pair batches also carry
        ``src_lang``."""
        if tokenizer.eos_token_id is None:
            raise ValueError("the tokenizer has no eos_token (expected '</s>')")
        check_languages(sorted({b for _, b in pairs}), languages, what="target language in pairs")
        if with_source_language:
            check_languages(sorted({a for a, _ in pairs}), languages, what="source language in pairs")
        self.tokenizer, self.languages, self.pairs = tokenizer, list(languages), list(pairs)
        self.sentence_languages = sorted({lang for pair in self.pairs for lang in pair})
        self.with_target_encoding, self.max_length = with_target_encoding, max_length
        self.with_source_language = with_source_language
        self.with_text_keys = with_text_keys

    def _encode(self, texts: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
        enc = self.tokenizer(
            texts,
            padding=True,
            padding_side="right",
            truncation=self.max_length is not None,
            max_length=self.max_length,
            return_tensors="pt",
        )
        return enc["input_ids"], enc["attention_mask"]

    def _labels(self, texts: list[str]) -> torch.Tensor:
        limit = None if self.max_length is None else self.max_length - 1
        return pad_labels(
            [
                seq[:limit] + [self.tokenizer.eos_token_id]
                for seq in self.tokenizer(texts, add_special_tokens=False)["input_ids"]
            ]
        )

    def __call__(self, examples: list[dict[str, str | None]]) -> dict[str, torch.Tensor]:
        if not examples:
            raise ValueError("empty micro-batch")
        return self._pair_batch(examples) if "src" in examples[0] else self._multiway_batch(examples)

    def _pair_batch(self, examples: list[dict[str, str | None]]) -> dict[str, torch.Tensor]:
        pairs = {(ex["src_lang"], ex["tgt_lang"]) for ex in examples}
        if len(pairs) != 1:
            raise ValueError(f"a pair-mode micro-batch must hold one language pair, got {sorted(pairs)}")
        ((src_lang, tgt_lang),) = pairs
        check_languages([tgt_lang], self.languages, what="target language")
        sources = [ex["src"] for ex in examples]
        targets = [ex["tgt"] for ex in examples]
        input_ids, attention_mask = self._encode(sources)
        batch = {
            "input_ids": input_ids,
            "attention_mask": attention_mask,
            "labels": self._labels(targets),
            "tgt_lang": torch.full((len(examples),), self.languages.index(tgt_lang), dtype=torch.long),
            "group_index": torch.tensor(merge_shared_texts(range(len(examples)), list(zip(sources, targets)))),
        }
        if self.with_target_encoding:
            batch["tgt_input_ids"], batch["tgt_attention_mask"] = self._encode(targets)
        if self.with_source_language:
            check_languages([src_lang], self.languages, what="source language")
            batch["src_lang"] = torch.full((len(examples),), self.languages.index(src_lang), dtype=torch.long)
        if self.with_text_keys:
            rows = sources + targets if self.with_target_encoding else sources
            batch["text_keys"] = text_keys(rows)
            batch["text_languages"] = language_keys([src_lang] * len(sources) + [tgt_lang] * (len(rows) - len(sources)))
        return batch

    def _multiway_batch(self, examples: list[dict[str, str | None]]) -> dict[str, torch.Tensor]:
        sentences: list[str] = []
        sentence_langs: list[str] = []
        targets: list[str] = []
        tgt_lang: list[int] = []
        pair_index: list[tuple[int, int]] = []
        group_index: list[int] = []
        for group, ex in enumerate(examples):
            directions = [(a, b) for a, b in self.pairs if ex.get(a) and ex.get(b)]
            row_of = {}
            for lang in self.sentence_languages:
                if any(lang in direction for direction in directions):
                    row_of[lang] = len(sentences)
                    sentences.append(ex[lang])
                    sentence_langs.append(lang)
            for a, b in directions:
                pair_index.append((row_of[a], row_of[b]))
                group_index.append(group)
                targets.append(ex[b])
                tgt_lang.append(self.languages.index(b))
        if not targets:
            raise ValueError(f"no curriculum pair {self.pairs} present in this micro-batch")
        input_ids, attention_mask = self._encode(sentences)
        group_index = merge_shared_texts(group_index, [(sentences[a], sentences[b]) for a, b in pair_index])
        pairs = torch.tensor(pair_index, dtype=torch.long)
        keys = (
            {"text_keys": text_keys(sentences), "text_languages": language_keys(sentence_langs)}
            if self.with_text_keys
            else {}
        )
        return {
            **keys,
            "input_ids": input_ids,
            "attention_mask": attention_mask,
            "labels": self._labels(targets),
            "tgt_lang": torch.tensor(tgt_lang, dtype=torch.long),
            "src_index": pairs[:, 0].clone(),
            "pair_index": pairs,
            "group_index": torch.tensor(group_index, dtype=torch.long),
        }


def _seq2seq_encode(
    tokenizer: PreTrainedTokenizerBase, texts: list[str], max_length: int | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Source side of a seq2seq model (its tokenizer's own format, e.g. ``tokens </s>``), right-padded."""
    enc = tokenizer(
        texts,
        padding=True,
        padding_side="right",
        truncation=max_length is not None,
        max_length=max_length,
        return_tensors="pt",
    )
    return enc["input_ids"], enc["attention_mask"]


def _seq2seq_targets(tokenizer: PreTrainedTokenizerBase, texts: list[str], max_length: int | None) -> list[list[int]]:
    """Target side of a seq2seq model: ``tokenizer(text_target=...)`` (``tokens </s>`` for Marian; a tokenizer with
    separate target vocabulary switches to it), unpadded."""
    enc = tokenizer(text_target=texts, truncation=max_length is not None, max_length=max_length)
    return enc["input_ids"]


def _texts_by_language(examples: list[dict[str, str | None]], languages: Sequence[str]) -> dict[str, list[str]]:
    """Pair-mode items (``src_lang``/``tgt_lang`` a->b or b->a) -> ``{a: texts, b: texts}``, row-aligned."""
    if not examples:
        raise ValueError("empty micro-batch")
    out: dict[str, list[str]] = {lang: [] for lang in languages}
    for ex in examples:
        if {ex["src_lang"], ex["tgt_lang"]} != set(languages):
            raise ValueError(f"item of pair {ex['src_lang']}-{ex['tgt_lang']}; this collator joins {list(languages)}")
        out[ex["src_lang"]].append(ex["src"])
        out[ex["tgt_lang"]].append(ex["tgt"])
    return out


class Seq2SeqCollator:
    """Pair-mode items of one direction src->tgt -> the batch of a Hugging Face seq2seq model (e.g.
    ``MarianMTModel``): ``input_ids``/``attention_mask`` [B, S] (the tokenizer's source format, right-padded),
    ``labels`` [B, L] (``tokenizer(text_target=...)``, ``tokens </s>``, -100 padded). The model shifts the labels
    into ``decoder_input_ids`` itself."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase, max_length: int | None = None) -> None:
        self.tokenizer, self.max_length = tokenizer, max_length

    def __call__(self, examples: list[dict[str, str | None]]) -> dict[str, torch.Tensor]:
        if not examples:
            raise ValueError("empty micro-batch")
        input_ids, attention_mask = _seq2seq_encode(self.tokenizer, [ex["src"] for ex in examples], self.max_length)
        labels = pad_labels(_seq2seq_targets(self.tokenizer, [ex["tgt"] for ex in examples], self.max_length))
        return {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}


class CNVCollator:
    """Pair-mode items of the pair (a, b) (either direction) -> the batch of ``CNVModel``.

    With ``tok_ab`` the a->b NMT model's tokenizer and ``tok_ba`` the b->a one's, for B aligned pairs:
    ``input_ids_a``/``attention_mask_a`` [B, S_a]: the a sentences by ``tok_ab`` (source format);
    ``input_ids_b``/``attention_mask_b`` [B, S_b]: the b sentences by ``tok_ba``;
    ``labels`` [2B, L], -100 padded: rows 0..B-1 the b sentences by ``tok_ab`` (target format ``tokens </s>``, what
    the a->b decoder predicts), rows B..2B-1 the a sentences by ``tok_ba``. Both directions sit in one ``labels``
    so that the Trainer's ``num_items_in_batch`` counts every target token of the update.
    """

    def __init__(
        self,
        tokenizer_a_to_b: PreTrainedTokenizerBase,
        tokenizer_b_to_a: PreTrainedTokenizerBase,
        languages: Sequence[str],
        max_length: int | None = None,
    ) -> None:
        """``languages``: ``[a, b]``; ``max_length`` truncates sentences (default: none)."""
        if len(languages) != 2 or languages[0] == languages[1]:
            raise ValueError(f"languages={list(languages)}: expected two different languages [a, b]")
        for name, tok in (("tokenizer_a_to_b", tokenizer_a_to_b), ("tokenizer_b_to_a", tokenizer_b_to_a)):
            if tok.eos_token_id is None:
                raise ValueError(f"{name} has no eos_token (expected '</s>')")
        self.tokenizers = (tokenizer_a_to_b, tokenizer_b_to_a)
        self.languages, self.max_length = list(languages), max_length

    def __call__(self, examples: list[dict[str, str | None]]) -> dict[str, torch.Tensor]:
        a, b = self.languages
        tok_ab, tok_ba = self.tokenizers
        texts = _texts_by_language(examples, self.languages)
        input_ids_a, attention_mask_a = _seq2seq_encode(tok_ab, texts[a], self.max_length)
        input_ids_b, attention_mask_b = _seq2seq_encode(tok_ba, texts[b], self.max_length)
        targets = _seq2seq_targets(tok_ab, texts[b], self.max_length) + _seq2seq_targets(
            tok_ba, texts[a], self.max_length
        )
        return {
            "input_ids_a": input_ids_a,
            "attention_mask_a": attention_mask_a,
            "input_ids_b": input_ids_b,
            "attention_mask_b": attention_mask_b,
            "labels": pad_labels(targets),
        }

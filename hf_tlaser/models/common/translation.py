"""Decoding from sentence vectors: the output and the decoder cache of the translation models (T-LASER, LASER,
Yu 2018), and ``TranslationMixin``, which encodes a batch, decodes it (training scores, ``generate`` through
transformers' ``GenerationMixin``) and leaves the loss to each family's ``forward``."""

from __future__ import annotations

import inspect
from dataclasses import dataclass

import torch
from transformers import GenerationConfig, GenerationMixin
from transformers.cache_utils import Cache
from transformers.utils import ModelOutput

from .encode import stack_padded
from .losses import (
    NegativeMemory,
    centered_pair_cosine,
    distance_constrained_loss,
    mean_pairwise_cosine,
    translation_loss,
)


@dataclass
class TranslationOutput(ModelOutput):
    """Output of the T-LASER and LASER translation models.

    Attributes:
        loss: total loss divided by the number of target tokens (or by ``num_items_in_batch`` when given).
        logits: decoder scores [T, L, vocab].
        sentence_embedding: sentence vectors of the translation sources [T, d].
        loss_mt: label-smoothed translation cross entropy, summed over target tokens.
        loss_distance: distance-constraint loss (eq. 10 without the translation term), summed over pairs.
        loss_align: in-batch alignment loss, mean over pairs.
        d_p, d_n, hinge: batch means of the normalised positive / negative distances and of the hinge terms.
        v_norm: the distance normaliser. mean_cosine: mean cosine between distinct encoded sentences.
        centered_cosine: mean cosine of the translation pairs after removing the batch mean
            (``centered_pair_cosine``); None without pairs in the batch.
        skipped_pair_losses: 1 when the distance and alignment terms were skipped because the batch has no
            negative (one pair, or one multi-way group), else 0; None when no pair loss applies.
        num_tokens: number of target tokens in this batch.
        cache: the decoder cache after this step (``generate``); None without one.
    """

    loss: torch.Tensor | None = None
    logits: torch.Tensor | None = None
    sentence_embedding: torch.Tensor | None = None
    loss_mt: torch.Tensor | None = None
    loss_distance: torch.Tensor | None = None
    loss_align: torch.Tensor | None = None
    d_p: torch.Tensor | None = None
    d_n: torch.Tensor | None = None
    hinge: torch.Tensor | None = None
    v_norm: torch.Tensor | None = None
    mean_cosine: torch.Tensor | None = None
    centered_cosine: torch.Tensor | None = None
    skipped_pair_losses: torch.Tensor | None = None
    num_tokens: torch.Tensor | None = None
    cache: TranslationCache | None = None


class TranslationCache(Cache):
    """The decoder cache of a translation model during ``generate``: the ``state`` dict that ``decoder_step``
    returns (every tensor batch first), and how many decoder tokens it has seen.

    Each family keeps what its decoder needs (T-LASER: self-attention keys/values per layer; LASER: the LSTM
    (h, c)), so the cache holds a dict instead of transformers' per-layer key/value lists; it is a ``Cache``
    because that is what GenerationMixin passes around, asks for ``get_seq_length`` and, in beam search, tells to
    ``reorder_cache``.
    """

    def __init__(self) -> None:
        super().__init__(layers=[])
        self.state: dict[str, torch.Tensor] | None = None
        self.seq_length = 0

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.seq_length

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        """Keep the rows of the beams that go on (beam search)."""
        if self.state is not None:
            self.state = {name: t.index_select(0, beam_idx.to(t.device)) for name, t in self.state.items()}


def generation_cache_name() -> str:
    """The keyword under which ``GenerationMixin`` keeps the cache in its model kwargs and hands it to
    ``prepare_inputs_for_generation``: ``cache`` since transformers 5.24, ``past_key_values`` before. Read from the
    installed ``GenerationMixin``'s own signature, so that both contracts work without naming a version."""
    params = inspect.signature(GenerationMixin.prepare_inputs_for_generation).parameters
    return "cache" if "cache" in params else "past_key_values"


CACHE_NAME = generation_cache_name()
CACHE_ALIASES = ("cache", "past_key_values")
DEFAULT_MAX_NEW_TOKENS = 64
"""``generate``'s length limit when neither the call nor the generation config sets one of ``LENGTH_LIMITS`` (a
value equal to transformers' own default, ``max_length=20`` in 4.x and None in 5.x, counts as unset)."""
LENGTH_LIMITS = ("max_new_tokens", "max_length")
LIBRARY_GENERATION_DEFAULTS = GenerationConfig()
"""transformers' own generation defaults, against which a config's ``LENGTH_LIMITS`` count as set."""


class TranslationMixin(GenerationMixin):
    """Encoding, language handling and decoding shared by the translation models (T-LASER, LASER, Yu 2018); each
    family's ``forward`` calls ``translate``, adds its own loss terms and ``set_loss``.

    Subclasses provide ``self.encoder`` (returning ``pooler_output``), a config with ``label_smoothing`` and
    ``decoder_step(decoder_input_ids, sentence_embedding, tgt_lang, cache=None) -> (logits, cache)``: logits
    [B, n, V] after each of the n NEW tokens ``decoder_input_ids`` [B, n] (the whole prefix, from
    ``decoder_start_token_id``, when ``cache`` is None), for the vectors [B, d] and language indices [B]; the cache
    is a dict of tensors with the batch on dim 0. ``decode_logits`` and ``generate`` (through transformers'
    ``GenerationMixin``: greedy, beam search, sampling) are built on it.
    """

    # forward takes ``num_items_in_batch``: the Trainer then passes the token count of the whole update and leaves
    # the gradient-accumulation scaling to the loss normalisation
    accepts_loss_kwargs = True
    # the cache cannot be cropped, so GenerationMixin refuses assisted decoding (which would roll it back)
    _is_stateful = True

    @classmethod
    def can_generate(cls) -> bool:
        """True: transformers only looks for ``GenerationMixin`` among a class's direct bases."""
        return True

    def lang_ids(self, tgt_lang, batch_size: int, device: torch.device) -> torch.LongTensor:
        """Target languages as indices into ``config.languages``; accepts codes, lists of codes or index tensors."""
        known = self.config.languages
        if isinstance(tgt_lang, str):
            tgt_lang = [tgt_lang] * batch_size
        if isinstance(tgt_lang, (list, tuple)) and tgt_lang and isinstance(tgt_lang[0], str):
            unknown = sorted({code for code in tgt_lang if code not in known})
            if unknown:
                raise ValueError(f"unknown tgt_lang {unknown}; this model knows {known}")
            tgt_lang = [known.index(code) for code in tgt_lang]
        ids = torch.as_tensor(tgt_lang, dtype=torch.long, device=device).reshape(-1)
        if ids.numel() == 1 and batch_size > 1:
            ids = ids.expand(batch_size)
        if ids.numel() != batch_size:
            raise ValueError(f"tgt_lang has {ids.numel()} entries for a batch of {batch_size}")
        if bool(((ids < 0) | (ids >= len(known))).any()):
            raise ValueError(f"tgt_lang index out of range; this model knows {known} (indices 0..{len(known) - 1})")
        return ids

    def shift_right(self, labels: torch.LongTensor) -> torch.LongTensor:
        """Decoder inputs: ``decoder_start_token_id`` followed by the labels minus their last position."""
        shifted = labels.new_full(labels.shape, self.config.pad_token_id)
        shifted[:, 0] = self.config.decoder_start_token_id
        shifted[:, 1:] = labels[:, :-1]
        return shifted.masked_fill(shifted.eq(-100), self.config.pad_token_id)

    def to_decoder_vocab(self, ids: torch.LongTensor) -> torch.LongTensor:
        """Tokenizer ids -> rows of a restricted decoder vocabulary (``decoder_vocab_ids``; -100 stays, a piece
        outside it becomes ``<unk>``); unchanged without a restriction."""
        table = getattr(self, "decoder_vocab_ids", None)
        if table is None:
            return ids
        rows = torch.searchsorted(table, ids.clamp(min=0)).clamp(max=len(table) - 1)  # the table is sorted
        rows = torch.where(table[rows].eq(ids), rows, self.config.unk_token_id)  # special ids keep their rows
        return torch.where(ids.eq(-100), ids, rows)

    def from_decoder_vocab(self, rows: torch.LongTensor) -> torch.LongTensor:
        """Rows of a restricted decoder vocabulary -> tokenizer ids (``decoder_vocab_ids``); unchanged without."""
        table = getattr(self, "decoder_vocab_ids", None)
        return rows if table is None else table[rows]

    @property
    def needs_target_encoding(self) -> bool:
        """Whether training batches must also carry the targets in encoder format (a loss on translation pairs)."""
        return self.config.distance_beta > 0 or self.config.align_loss_weight > 0

    def encode_sentences(self, input_ids: torch.LongTensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
        """The vectors the decoder reads: the encoder's sentence vectors (after the modules a backbone carried,
        ``config.sentence_modules``), before any projection head (``config.teacher_dim``)."""
        encoded = self.encoder(input_ids=input_ids, attention_mask=attention_mask, pooled_only=True, project=False)
        return encoded.pooler_output

    def decode_logits(
        self,
        decoder_input_ids: torch.LongTensor,
        sentence_embedding: torch.Tensor,
        tgt_lang: torch.LongTensor,
    ) -> torch.Tensor:
        """Scores [T, L, vocab] of the next token after every prefix of ``decoder_input_ids`` [T, L] (training)."""
        return self.decoder_step(decoder_input_ids, sentence_embedding, tgt_lang)[0]

    def training_logits(
        self,
        decoder_input_ids: torch.LongTensor,
        sentence_embedding: torch.Tensor,
        tgt_lang: torch.LongTensor,
        labels: torch.LongTensor,
    ) -> tuple[torch.Tensor, torch.LongTensor]:
        """Scores and labels of the training loss: ``decode_logits`` over the whole decoder vocabulary; a family
        with a sampled softmax scores fewer rows and renumbers the labels to them."""
        return self.decode_logits(decoder_input_ids, sentence_embedding, tgt_lang), labels

    def translate(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        tgt_lang=None,
        decoder_input_ids: torch.LongTensor | None = None,
        tgt_input_ids: torch.LongTensor | None = None,
        tgt_attention_mask: torch.Tensor | None = None,
        src_index: torch.LongTensor | None = None,
        pair_index: torch.LongTensor | None = None,
        sentence_embeddings: torch.Tensor | None = None,
        cache: TranslationCache | None = None,
    ) -> tuple[TranslationOutput, torch.Tensor, torch.LongTensor | None]:
        """Encode a batch and decode its sentence vectors: ``(out, vectors, pair_index)``, where ``out`` holds the
        source vectors, the decoder scores and, with ``labels``, the translation loss l_mt (``translation_loss``)
        and its token count; ``vectors`` are all encoded rows and ``pair_index`` the pairs among them.

        Args:
            input_ids, attention_mask: sentences to encode [N, S] (encoder format ``STR_TAG ... </s>``).
            labels: target tokens followed by ``</s>``, padded with -100, [T, L] (tokenizer ids).
            tgt_lang: target language of each label row (codes or indices into ``config.languages``).
            decoder_input_ids: default: ``labels`` shifted right behind ``decoder_start_token_id``. Rows of the
                decoder's vocabulary, which are tokenizer ids unless ``config.decoder_vocab_size`` restricts it
                (``to_decoder_vocab``); the logits are over the same rows.
            tgt_input_ids, tgt_attention_mask: the targets in encoder format [T, S']; encoded in the same encoder
                call as the sources and paired with them (the returned ``pair_index``).
            src_index: row of ``input_ids`` that is the source of each label row (multi-way batches; default
                ``arange(T)``).
            pair_index: LongTensor[P, 2] of rows of the encoded batch that are translations of each other.
            sentence_embeddings: precomputed source vectors [T, d] instead of ``input_ids`` (no encoder call; the
                other encoder-side arguments are then unused).
            cache: a ``TranslationCache`` (``generate``): ``decoder_input_ids`` are then only the tokens it has not
                seen, and it is updated in place with ``decoder_step`` and returned as ``out.cache``.
        """
        if (input_ids is None) == (sentence_embeddings is None):
            raise ValueError("forward needs either input_ids to encode or precomputed sentence_embeddings")
        if sentence_embeddings is None:
            num_src = input_ids.shape[0]
            if tgt_input_ids is not None:
                if pair_index is not None:
                    raise ValueError("pass either tgt_input_ids (pair batches) or pair_index (multi-way), not both")
                input_ids, attention_mask = stack_padded(
                    (input_ids, attention_mask),
                    (tgt_input_ids, tgt_attention_mask),
                    pad_id=self.config.pad_token_id,
                )
                rows = torch.arange(num_src, device=input_ids.device)
                pair_index = torch.stack([rows, rows + num_src], dim=1)
            vectors = self.encode_sentences(input_ids, attention_mask)
            src_vectors = vectors[:num_src] if src_index is None else vectors[src_index]
        else:
            vectors = src_vectors = sentence_embeddings
        out = TranslationOutput(sentence_embedding=src_vectors)
        if labels is not None:
            labels = self.to_decoder_vocab(labels)
        if labels is not None or decoder_input_ids is not None:
            tgt_lang = self.lang_ids(tgt_lang, src_vectors.shape[0], src_vectors.device)
            if decoder_input_ids is None:
                decoder_input_ids = self.shift_right(labels)
            if cache is None and labels is not None and self.training:
                out.logits, labels = self.training_logits(decoder_input_ids, src_vectors, tgt_lang, labels)
            elif cache is None:
                out.logits = self.decode_logits(decoder_input_ids, src_vectors, tgt_lang)
            else:
                out.logits, cache.state = self.decoder_step(decoder_input_ids, src_vectors, tgt_lang, cache.state)
                cache.seq_length += decoder_input_ids.shape[1]
                out.cache = cache
        if labels is not None:
            out.loss_mt = translation_loss(out.logits, labels, self.config.label_smoothing)
            out.num_tokens = labels.ne(-100).sum()
        return out, vectors, pair_index

    def pair_loss(
        self,
        out: TranslationOutput,
        vectors: torch.Tensor,
        pair_index: torch.LongTensor | None,
        group_index: torch.LongTensor | None,
        text_keys: torch.LongTensor | None,
        text_languages: torch.LongTensor | None = None,
    ) -> torch.Tensor:
        """l_mt plus the losses on the sentence vectors of the translation pairs (``distance_constrained_loss``: eq.
        10 and the alignment loss), with the cross-batch memory of ``config.negative_memory_size`` (created at the
        first training batch, written only in training)."""
        memory = None
        if getattr(self.config, "negative_memory_size", 0):
            if getattr(self, "negative_memory", None) is None:
                self.negative_memory = NegativeMemory(self.config.negative_memory_size).to(vectors.device)
            memory = self.negative_memory
        return distance_constrained_loss(
            out,
            vectors,
            pair_index,
            group_index,
            self.config,
            memory,
            text_keys,
            remember=self.training,
            text_languages=text_languages,
        )

    def set_loss(
        self,
        out: TranslationOutput,
        total: torch.Tensor,
        vectors: torch.Tensor,
        pair_index: torch.LongTensor | None,
        num_items_in_batch: int | torch.Tensor | None,
    ) -> None:
        """Set ``out.loss`` to the batch's summed loss ``total`` over ``num_items_in_batch`` (the target tokens of
        the whole update; default: this batch's), and the collapse signals of the encoded ``vectors``."""
        out.mean_cosine = mean_pairwise_cosine(vectors.detach())
        if pair_index is not None:
            out.centered_cosine = centered_pair_cosine(vectors.detach(), pair_index)
        normaliser = num_items_in_batch if num_items_in_batch is not None else out.num_tokens.clamp(min=1)
        out.loss = total / normaliser

    def prepare_inputs_for_generation(
        self,
        input_ids: torch.LongTensor,
        cache: TranslationCache | None = None,
        sentence_embeddings: torch.Tensor | None = None,
        tgt_lang: torch.LongTensor | None = None,
        use_cache: bool | None = True,
        past_key_values: TranslationCache | None = None,
        **kwargs,
    ) -> dict:
        """GenerationMixin hook: ``forward`` inputs for the next step, i.e. the decoder tokens the cache has not
        seen (the whole prefix without a cache), the sentence vectors and the target languages. The cache arrives as
        ``cache`` (transformers >= 5.24) or ``past_key_values`` (earlier releases; see ``generation_cache_name``).
        GenerationMixin's other bookkeeping (``next_sequence_length``, masks, ...) is not needed: the cache counts
        its tokens."""
        cache = cache if cache is not None else past_key_values
        cache = cache if use_cache is not False else None
        seen = cache.get_seq_length() if cache is not None else 0
        return {
            "decoder_input_ids": input_ids[:, seen:],
            "sentence_embeddings": sentence_embeddings,
            "tgt_lang": tgt_lang,
            "cache": cache,
        }

    @torch.no_grad()
    def generate(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        *,
        vectors: torch.Tensor | None = None,
        sentence_embeddings: torch.Tensor | None = None,
        tgt_lang,
        **generation_kwargs,
    ) -> torch.LongTensor | ModelOutput:
        """Decode sentence vectors (``vectors``, alias ``sentence_embeddings``; or encoded from ``input_ids``,
        ``attention_mask``) into ``tgt_lang`` (a code, codes or indices per row) with ``GenerationMixin.generate``.

        ``generation_kwargs`` go to ``GenerationMixin.generate``: greedy by default, ``num_beams``,
        ``length_penalty``, ``early_stopping``, ``do_sample``, ``top_k``, ``top_p``, ``temperature``,
        ``num_return_sequences``, ``max_new_tokens`` (default 64 unless the generation config sets a length),
        ``min_new_tokens``, ``use_cache`` (default True: the decoder state is cached, each step decodes one token),
        ``cache`` (alias ``past_key_values``: a ``TranslationCache`` to fill), ``return_dict_in_generate`` ...
        The model runs in eval mode (its mode is restored) without gradients.

        Returns token ids [B * num_return_sequences, L] WITHOUT the start token, each row ending with ``</s>``
        (unless cut by the length limit) and right-padded with pad; with ``return_dict_in_generate=True``,
        GenerationMixin's output whose ``sequences`` are in that format.
        """
        if sentence_embeddings is not None:
            if vectors is not None:
                raise ValueError("pass vectors or its alias sentence_embeddings, not both")
            vectors = sentence_embeddings
        if (vectors is None) == (input_ids is None):
            raise ValueError("generate needs either vectors (sentence embeddings) or input_ids to encode")
        config = generation_kwargs.get("generation_config") or self.generation_config
        if all(
            generation_kwargs.get(key) is None and getattr(config, key) == getattr(LIBRARY_GENERATION_DEFAULTS, key)
            for key in LENGTH_LIMITS
        ):
            generation_kwargs["max_new_tokens"] = DEFAULT_MAX_NEW_TOKENS
        given = [generation_kwargs.pop(name) for name in CACHE_ALIASES if generation_kwargs.get(name) is not None]
        if len(given) > 1:
            raise ValueError("pass cache or its alias past_key_values, not both")
        if given or generation_kwargs.get("use_cache", config.use_cache) is not False:
            generation_kwargs[CACHE_NAME] = given[0] if given else TranslationCache()
        was_training = self.training
        self.eval()
        try:
            if vectors is None:
                vectors = self.encode_sentences(input_ids, attention_mask)
            batch = vectors.shape[0]
            langs = self.lang_ids(tgt_lang, batch, vectors.device)
            start = torch.full((batch, 1), self.config.decoder_start_token_id, dtype=torch.long, device=vectors.device)
            out = super().generate(start, sentence_embeddings=vectors, tgt_lang=langs, **generation_kwargs)
        finally:
            self.train(was_training)
        sequences = out.sequences if isinstance(out, ModelOutput) else out
        tokens = self.from_decoder_vocab(
            generated_tokens(sequences, self.config.eos_token_id, self.config.pad_token_id)
        )
        if isinstance(out, ModelOutput):
            out.sequences = tokens
            return out
        return tokens


def generated_tokens(sequences: torch.LongTensor, eos_token_id: int, pad_token_id: int) -> torch.LongTensor:
    """GenerationMixin's sequences without the start token, with pad after each row's first eos (beam search fills
    finished rows with eos when ``pad_token_id`` is 0)."""
    tokens = sequences[:, 1:]
    is_eos = tokens.eq(eos_token_id).long()
    return tokens.masked_fill(is_eos.cumsum(1) - is_eos > 0, pad_token_id)

"""Yu, Li & Oguz 2018 (sec. 2): a two-layer LSTM encoder (BiLSTM 512, then LSTM 1024) whose pooled top states are
the sentence embedding h(s), trained as multilingual NMT in both directions of bilingual batches through an LSTM
decoder without attention, plus a similarity loss ||h(s) - h(t)||^2 between the embeddings of translations.

The decoder sees the input only through h(s): its initial state is a linear map of h(s) (the paper: h(s)
"initializes the decoder"; a learned map, as in this package's LASER decoder, also allows widths other than the
paper's equal 1024 / 1024) and h(s) is concatenated to its input at every step.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence
from transformers import PreTrainedModel
from transformers.modeling_outputs import BaseModelOutputWithPooling

from ..common.encode import SentenceEncoderMixin, stack_padded
from ..common.losses import centered_pair_cosine, mean_pairwise_cosine, translation_loss
from ..common.remote_code import ModelFolderMixin
from ..common.rnn import right_padded_lengths, run_rnn
from ..common.translation import TranslationMixin, TranslationOutput
from .configuration_yu2018 import Yu2018Config

try:  # transformers >= 5 tracks which weights were loaded; older versions use torch.nn.init directly
    from transformers import initialization as init
except ImportError:  # pragma: no cover
    from torch.nn import init


class Yu2018PreTrainedModel(ModelFolderMixin, PreTrainedModel):
    config_class = Yu2018Config
    config: Yu2018Config
    base_model_prefix = "encoder"
    main_input_name = "input_ids"

    @torch.no_grad()
    def _init_weights(self, module: nn.Module) -> None:
        """fairseq's LSTM-model init: every embedding, linear and LSTM weight and bias uniform(-0.1, 0.1), pad rows
        zero. (The paper starts from multi-CCA word vectors, not available here: the embeddings are random.)"""
        if not isinstance(module, (nn.LSTM, nn.Linear, nn.Embedding)):
            return
        for param in module.parameters(recurse=False):
            init.uniform_(param, -0.1, 0.1)
        if getattr(module, "padding_idx", None) is not None:
            init.zeros_(module.weight[module.padding_idx])


class Yu2018SelfAttentionPooling(nn.Module):
    """One-hop structured self-attention (Lin et al. 2017, sec. 2): a = softmax(w_2 tanh(W_1 h_i)) over the
    non-pad positions, pooled = sum_i a_i h_i. (Lin et al.'s r hops would multiply the vector width by r.)"""

    def __init__(self, config: Yu2018Config):
        super().__init__()
        self.w1 = nn.Linear(config.hidden_size, config.self_attention_dim, bias=False)
        self.w2 = nn.Linear(config.self_attention_dim, 1, bias=False)

    def forward(self, hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """hidden [B, S, H], mask [B, S] (True = token) -> [B, H]."""
        scores = self.w2(torch.tanh(self.w1(hidden))).squeeze(-1).float()
        weights = scores.masked_fill(~mask, float("-inf")).softmax(dim=1).to(hidden.dtype)
        return torch.einsum("bs,bsh->bh", weights, hidden)


class Yu2018Model(SentenceEncoderMixin, Yu2018PreTrainedModel):
    """The Yu 2018 encoder: BiLSTM (``encoder_hidden_size`` per direction) then LSTM (``hidden_size``) over
    right-padded ``STR_TAG text </s>`` inputs; ``pooler_output`` = h(s), the ``config.pooling`` of the top states."""

    # a translation checkpoint also holds the decoder: loading the encoder alone skips it quietly
    _keys_to_ignore_on_load_unexpected = [r"^decoder\.", r"^lm_head\."]

    def __init__(self, config: Yu2018Config):
        super().__init__(config)
        self.embed_tokens = nn.Embedding(config.vocab_size, config.embed_dim, padding_idx=config.pad_token_id)
        self.dropout = nn.Dropout(config.dropout)
        self.bilstm = nn.LSTM(config.embed_dim, config.encoder_hidden_size, bidirectional=True, batch_first=True)
        self.lstm = nn.LSTM(2 * config.encoder_hidden_size, config.hidden_size, batch_first=True)
        self.attention = Yu2018SelfAttentionPooling(config) if config.pooling == "self_attention" else None
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.embed_tokens

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        self.embed_tokens = value

    def l2_penalty(self) -> torch.Tensor:
        """Sum of squares of the LSTM and self-attention weight matrices: the encoder weight regularisation of
        sec. 2.2 (Table 2). Word embeddings and biases are left out."""
        modules = [self.bilstm, self.lstm] + ([self.attention] if self.attention is not None else [])
        weights = [p for m in modules for name, p in m.named_parameters() if "weight" in name]
        return sum(w.float().pow(2).sum() for w in weights)

    def forward(
        self,
        input_ids: torch.LongTensor,
        attention_mask: torch.Tensor | None = None,
        output_hidden_states: bool | None = None,
        pooled_only: bool = False,
        return_dict: bool | None = None,
        apply_dropout: bool = True,
        **kwargs,
    ) -> BaseModelOutputWithPooling | tuple:
        """Encode right-padded ``STR_TAG text </s>`` sequences.

        Args:
            input_ids: LongTensor[B, S]. attention_mask: 1 for tokens, 0 for padding (default: ids != pad); must be
                right padding (the sequences are packed, so padding never enters the LSTMs).
            output_hidden_states: also return (embeddings, BiLSTM outputs, top states).
            pooled_only: accepted for interface compatibility with T-LASER; no effect.
            apply_dropout: False skips every dropout of the encoder even in train mode (the vectors of L_sim).

        Returns:
            ``last_hidden_state`` [B, S, hidden_size], the top encoder states with zeros at padding (so that
            sentence-transformers' mean / max pooling over the mask reproduces h(s)), and ``pooler_output``
            [B, hidden_size] = h(s).
        """
        return_dict = self.config.return_dict if return_dict is None else return_dict
        seq_len = input_ids.shape[1]
        mask, lengths = right_padded_lengths(input_ids, attention_mask, self.config, "Yu2018Model")

        drop = self.dropout if apply_dropout else nn.Identity()
        embedded = drop(self.embed_tokens(input_ids))
        packed = pack_padded_sequence(embedded, lengths.cpu(), batch_first=True, enforce_sorted=False)
        first, _ = run_rnn(self.bilstm, packed)
        top, _ = run_rnn(self.lstm, first._replace(data=drop(first.data)))
        hidden, _ = pad_packed_sequence(top, batch_first=True, total_length=seq_len)  # zeros at padding
        hidden = drop(hidden)
        if self.config.pooling == "mean":  # sec. 2.2: element-wise mean of the encoder states
            pooled = hidden.sum(1) / lengths[:, None].to(hidden.dtype)
        elif self.config.pooling == "max":
            pooled = hidden.masked_fill(~mask[..., None], float("-inf")).amax(dim=1)
        else:
            pooled = self.attention(hidden, mask)

        hidden_states = None
        if output_hidden_states:
            first_padded, _ = pad_packed_sequence(first, batch_first=True, total_length=seq_len)
            hidden_states = (embedded, first_padded, hidden)
        if not return_dict:
            return tuple(v for v in (hidden, pooled, hidden_states) if v is not None)
        return BaseModelOutputWithPooling(last_hidden_state=hidden, pooler_output=pooled, hidden_states=hidden_states)


class Yu2018Decoder(nn.Module):
    """LSTM decoder without attention: input at step j = concat(embedding of token j, h(s)); initial (h, c) of every
    layer = linear maps of h(s). The target language is Johnson et al.'s token prepended to the decoder input: a
    learned language embedding takes the place of the start token's embedding at the first position."""

    def __init__(self, config: Yu2018Config):
        super().__init__()
        self.num_layers = config.decoder_layers
        self.hidden_size = config.decoder_hidden_size
        self.embed_tokens = nn.Embedding(config.vocab_size, config.embed_dim, padding_idx=config.pad_token_id)
        self.embed_langs = nn.Embedding(len(config.languages), config.embed_dim)
        state_size = config.decoder_layers * config.decoder_hidden_size
        self.hidden_proj = nn.Linear(config.hidden_size, state_size)
        self.cell_proj = nn.Linear(config.hidden_size, state_size)
        self.lstm = nn.LSTM(
            input_size=config.embed_dim + config.hidden_size,
            hidden_size=config.decoder_hidden_size,
            num_layers=config.decoder_layers,
            dropout=config.dropout if config.decoder_layers > 1 else 0.0,
            batch_first=True,
        )
        self.dropout = nn.Dropout(config.dropout)

    def initial_state(self, sentence_embedding: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(h0, c0) [layers, B, H] from h(s)."""
        batch = sentence_embedding.shape[0]

        def project(linear: nn.Linear) -> torch.Tensor:
            return linear(sentence_embedding).view(batch, self.num_layers, self.hidden_size).transpose(0, 1)

        return project(self.hidden_proj).contiguous(), project(self.cell_proj).contiguous()

    def forward(
        self,
        decoder_input_ids: torch.LongTensor,
        sentence_embedding: torch.Tensor,
        tgt_lang: torch.LongTensor,
        state: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """Outputs [B, n, decoder_hidden_size] and the final (h, c) [layers, B, H].

        ``state`` None: ``decoder_input_ids`` is a whole prefix (its first position, the start token, becomes the
        target-language embedding) and the state starts from h(s); otherwise the tokens continue from ``state``.
        """
        embedded = self.embed_tokens(decoder_input_ids)
        if state is None:
            lang = self.embed_langs(tgt_lang).to(embedded.dtype)
            embedded = torch.cat([lang[:, None], embedded[:, 1:]], dim=1)
            state = self.initial_state(sentence_embedding)
        sentence = sentence_embedding[:, None].expand(-1, embedded.shape[1], -1).to(embedded.dtype)
        output, state = run_rnn(self.lstm, torch.cat([self.dropout(embedded), sentence], dim=-1), state)
        return self.dropout(output), state


@dataclass
class Yu2018TranslationOutput(TranslationOutput):
    """Output of :class:`Yu2018ForTranslation`: ``TranslationOutput`` (``loss_mt`` holds both directions'
    cross entropy, summed over their target tokens) plus

    Attributes:
        loss_sim: similarity loss ||h(s) - h(t)||^2 (sec. 2.2), mean over the pairs of the batch (before alpha); on
            dropout-free vectors unless ``config.similarity_dropout``.
        loss_encoder_l2: the encoder weight penalty (before its weight); None when ``encoder_l2_weight`` is 0.
    """

    loss_sim: torch.Tensor | None = None
    loss_encoder_l2: torch.Tensor | None = None


class Yu2018ForTranslation(TranslationMixin, Yu2018PreTrainedModel):
    """Yu 2018 encoder + attention-free LSTM decoder, trained on both directions of bilingual batches with the
    similarity loss (sec. 2.1-2.2)."""

    supports_multiway = False
    """Bilingual (pair) batches only, as the paper samples them (sec. 2.1); read by ``hf-tlaser train``."""

    def __init__(self, config: Yu2018Config):
        super().__init__(config)
        self.encoder = Yu2018Model(config)
        self.decoder = Yu2018Decoder(config)
        self.lm_head = nn.Linear(config.decoder_hidden_size, config.vocab_size)
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.encoder.embed_tokens

    def get_output_embeddings(self) -> nn.Linear:
        return self.lm_head

    @property
    def needs_target_encoding(self) -> bool:
        """Always: the reverse direction and the similarity loss encode the targets."""
        return True

    @property
    def needs_source_language(self) -> bool:
        """Training batches carry ``src_lang``: the target language of the reverse direction."""
        return True

    def decoder_step(
        self,
        decoder_input_ids: torch.LongTensor,
        sentence_embedding: torch.Tensor,
        tgt_lang,
        cache: dict[str, torch.Tensor] | None = None,
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Logits [B, n, V] of the new tokens ``decoder_input_ids`` [B, n] (the whole prefix, from the start token,
        when ``cache`` is None) and the new cache ``{"h", "c"}``: the LSTM state as [B, layers, H]."""
        langs = self.lang_ids(tgt_lang, decoder_input_ids.shape[0], decoder_input_ids.device)
        state = (
            None
            if cache is None
            else (cache["h"].transpose(0, 1).contiguous(), cache["c"].transpose(0, 1).contiguous())
        )
        output, (h, c) = self.decoder(decoder_input_ids, sentence_embedding, langs, state)
        return self.lm_head(output), {"h": h.transpose(0, 1), "c": c.transpose(0, 1)}

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        tgt_lang=None,
        src_lang=None,
        decoder_input_ids: torch.LongTensor | None = None,
        tgt_input_ids: torch.LongTensor | None = None,
        tgt_attention_mask: torch.Tensor | None = None,
        src_index: torch.LongTensor | None = None,
        pair_index: torch.LongTensor | None = None,
        group_index: torch.LongTensor | None = None,
        num_items_in_batch: int | torch.Tensor | None = None,
        **decoding_kwargs,
    ) -> Yu2018TranslationOutput | TranslationOutput | tuple:
        """L = L_NMT(s->t) + L_NMT(t->s) + alpha * L_sim (sec. 2.2) for a bilingual batch; without ``labels``, the
        sentence vectors and decoder scores of ``TranslationMixin.translate`` (``generate`` passes ``decoding_kwargs``:
        ``sentence_embeddings``, ``cache``, ``return_dict``).

        Args:
            input_ids, attention_mask: sources s [B, S] in encoder format ``STR_TAG ... </s>``, right-padded.
            labels: targets t followed by ``</s>``, padded with -100, [B, L]. tgt_lang: language of t (codes or
                indices into ``config.languages``).
            tgt_input_ids, tgt_attention_mask: t in encoder format [B, S']; with them the batch also trains t->s
                (whose labels are ``input_ids`` without STR_TAG, into ``src_lang``) and the similarity loss.
            src_lang: language of s; needed with ``tgt_input_ids``.
            decoder_input_ids: of the s->t direction; default ``labels`` shifted right.
            src_index, pair_index: multi-way batches, not supported (ValueError). group_index: ignored (pair
                batches: every pair its own group).
            num_items_in_batch: normaliser (target tokens of ``labels`` over the whole update); default: this
                batch's. Both directions' summed cross entropies over the s->t target tokens give about
                L_NMT(s->t) + L_NMT(t->s), each a per-token mean as in the paper.

        Each pair adds alpha * L_sim times its number of target tokens, so that over the update's tokens it is the
        paper's per-pair L_NMT + alpha * L_sim (the summed cross entropy of a pair is its tokens x its mean); the
        encoder L2 penalty, once per update, is scaled by this batch's share of the update's target tokens. The
        loss is thus the same however the update is split into micro-batches and processes.
        """
        if pair_index is not None or src_index is not None:
            raise ValueError("Yu2018ForTranslation trains on bilingual pair batches only (no multi-way batches)")
        if labels is None:
            return_dict = decoding_kwargs.pop("return_dict", None)
            return_dict = self.config.return_dict if return_dict is None else return_dict
            out, _, _ = self.translate(
                input_ids=input_ids,
                attention_mask=attention_mask,
                tgt_lang=tgt_lang,
                decoder_input_ids=decoder_input_ids,
                **decoding_kwargs,
            )
            return out if return_dict else out.to_tuple()
        if decoding_kwargs:
            raise ValueError(f"{sorted(decoding_kwargs)} are decoding arguments; training batches take none")
        cfg = self.config
        device, num_src = input_ids.device, input_ids.shape[0]
        both = tgt_input_ids is not None
        if both:
            input_ids, attention_mask = stack_padded(
                (input_ids, attention_mask), (tgt_input_ids, tgt_attention_mask), pad_id=cfg.pad_token_id
            )
        vectors = self.encoder(input_ids=input_ids, attention_mask=attention_mask).pooler_output
        src_vectors, tgt_vectors = vectors[:num_src], vectors[num_src:]
        out = Yu2018TranslationOutput(sentence_embedding=src_vectors)
        tgt_lang = self.lang_ids(tgt_lang, num_src, device)
        if decoder_input_ids is None:
            decoder_input_ids = self.shift_right(labels)
        logits = self.decode_logits(decoder_input_ids, src_vectors, tgt_lang)
        loss_mt = translation_loss(logits, labels, cfg.label_smoothing)  # L_NMT(s->t), summed over tokens
        out.logits, out.num_tokens = logits, labels.ne(-100).sum()
        total = torch.zeros((), device=device)
        if both:
            if src_lang is None:
                raise ValueError("the t->s direction needs src_lang, the language of input_ids")
            src_lang = self.lang_ids(src_lang, num_src, device)
            if attention_mask is None:
                attention_mask = input_ids.ne(cfg.pad_token_id)
            # labels of t->s: the sources without STR_TAG (text </s>), padding -> -100
            reverse = input_ids[:num_src, 1:].masked_fill(~attention_mask[:num_src, 1:].bool(), -100)
            reverse_logits = self.decode_logits(self.shift_right(reverse), tgt_vectors, src_lang)
            loss_mt = loss_mt + translation_loss(reverse_logits, reverse, cfg.label_smoothing)  # + L_NMT(t->s)
            if self.training and cfg.dropout > 0 and not cfg.similarity_dropout:  # L_sim without the dropout floor
                vectors = self.encoder(input_ids=input_ids, attention_mask=attention_mask, apply_dropout=False)
                vectors = vectors.pooler_output
            sim = (vectors[:num_src].float() - vectors[num_src:].float()).pow(2).sum(-1)  # L_sim, sec. 2.2
            out.loss_sim = sim.mean()
            if cfg.similarity_weight > 0:  # each pair's alpha * L_sim weighted by its target tokens, as its L_NMT
                total = total + cfg.similarity_weight * (sim * labels.ne(-100).sum(1)).sum()
            rows = torch.arange(num_src, device=device)
            out.centered_cosine = centered_pair_cosine(vectors.detach(), torch.stack([rows, rows + num_src], 1))
        if cfg.encoder_l2_weight > 0:
            out.loss_encoder_l2 = self.encoder.l2_penalty()
            total = total + cfg.encoder_l2_weight * out.loss_encoder_l2 * out.num_tokens
        out.loss_mt = loss_mt
        out.mean_cosine = mean_pairwise_cosine(vectors.detach())
        normaliser = num_items_in_batch if num_items_in_batch is not None else out.num_tokens.clamp(min=1)
        out.loss = (loss_mt + total) / normaliser
        return out


Yu2018Model.register_for_auto_class("AutoModel")
Yu2018ForTranslation.register_for_auto_class("AutoModelForSeq2SeqLM")

"""LASER baselines of Li & Mak 2020 (LASER_1, LASER_6, cLASER): a BiLSTM encoder whose max-pooled outputs are the
sentence embedding (Artetxe & Schwenk 2019), trained through an LSTM decoder that sees only that vector, the
target-language embedding and the previous target token.

The layout follows fairseq-laser's ``laser_lstm_artetxe`` architecture (the code the authors borrowed): the decoder
input at every step is concat(token embedding, language embedding, sentence vector); its initial (h0, c0) are linear
maps of the sentence vector; its outputs go straight to the vocabulary (d_z -> V, no bottleneck). The older
fairseq-laser ``laser`` architecture also fed the previous decoder output back as input ("input feeding"); for a
one-layer decoder that only reparametrises the recurrent weight (W_feed h_{t-1} + W_hh h_{t-1}), so it is left out
and the decoder runs as one ``nn.LSTM`` call over the whole target sequence.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence
from transformers import PreTrainedModel
from transformers.modeling_outputs import BaseModelOutputWithPooling

from ..common.encode import SentenceEncoderMixin
from ..common.remote_code import ModelFolderMixin
from ..common.rnn import right_padded_lengths, run_rnn
from ..common.translation import TranslationCache, TranslationMixin, TranslationOutput
from .configuration_laser import LaserConfig

try:  # transformers >= 5 tracks which weights were loaded; older versions use torch.nn.init directly
    from transformers import initialization as init
except ImportError:  # pragma: no cover
    from torch.nn import init


class LaserPreTrainedModel(ModelFolderMixin, PreTrainedModel):
    config_class = LaserConfig
    config: LaserConfig
    base_model_prefix = "encoder"
    main_input_name = "input_ids"

    @torch.no_grad()
    def _init_weights(self, module: nn.Module) -> None:
        """``config.init_style``: "fairseq" (fairseq's LSTM models: every embedding, linear and LSTM weight and bias
        uniform(-0.1, 0.1), pad row zero) or "bert" (N(0, initializer_range) linear and embedding weights, zero
        biases and pad row; LSTM parameters uniform(-0.1, 0.1) as fairseq)."""
        if isinstance(module, nn.LSTM):
            for param in module.parameters(recurse=False):
                init.uniform_(param, -0.1, 0.1)
            return
        if not isinstance(module, (nn.Linear, nn.Embedding)):
            return
        bias = getattr(module, "bias", None)
        if self.config.init_style == "fairseq":
            init.uniform_(module.weight, -0.1, 0.1)
            if bias is not None:
                init.uniform_(bias, -0.1, 0.1)
        else:
            init.normal_(module.weight, mean=0.0, std=self.config.initializer_range)
            if bias is not None:
                init.zeros_(bias)
        if getattr(module, "padding_idx", None) is not None:
            init.zeros_(module.weight[module.padding_idx])


class LaserModel(SentenceEncoderMixin, LaserPreTrainedModel):
    """The LASER BiLSTM encoder. ``pooler_output`` (max over the non-pad BiLSTM outputs) is the sentence embedding.

    Inputs are the shared tokenizer's right-padded ``STR_TAG text </s>`` sequences; STR_TAG is kept (it is one more
    position to max-pool over, and it keeps one input format for LASER and T-LASER models).
    """

    # a translation checkpoint also holds the decoder: loading the encoder alone skips it quietly
    _keys_to_ignore_on_load_unexpected = [r"^decoder\.", r"^lm_head\."]

    def __init__(self, config: LaserConfig):
        super().__init__(config)
        self.embed_tokens = nn.Embedding(config.vocab_size, config.embed_dim, padding_idx=config.pad_token_id)
        self.dropout = nn.Dropout(config.dropout)
        self.lstm = nn.LSTM(
            input_size=config.embed_dim,
            hidden_size=config.lstm_hidden_size,
            num_layers=config.num_layers,
            dropout=config.dropout if config.num_layers > 1 else 0.0,
            bidirectional=True,
            batch_first=True,
        )
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.embed_tokens

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        self.embed_tokens = value

    def forward(
        self,
        input_ids: torch.LongTensor,
        attention_mask: torch.Tensor | None = None,
        output_hidden_states: bool | None = None,
        pooled_only: bool = False,
        return_dict: bool | None = None,
        **kwargs,
    ) -> BaseModelOutputWithPooling | tuple:
        """Encode right-padded ``STR_TAG text </s>`` sequences.

        Args:
            input_ids: LongTensor[B, S]. attention_mask: 1 for tokens, 0 for padding (default: ids != pad); must be
                right padding (the sequences are packed, so padding never enters the LSTM).
            output_hidden_states: also return (embedding output, BiLSTM output); ``nn.LSTM`` does not expose its
                intermediate layers.
            pooled_only: accepted for interface compatibility with T-LASER; no effect (every BiLSTM output is needed
                for the max-pool).

        Returns:
            ``last_hidden_state`` [B, S, 2 * lstm_hidden_size] (zeros at padding) and ``pooler_output``
            [B, 2 * lstm_hidden_size].
        """
        return_dict = self.config.return_dict if return_dict is None else return_dict
        seq_len = input_ids.shape[1]
        mask, lengths = right_padded_lengths(input_ids, attention_mask, self.config, "LaserModel")

        embedded = self.dropout(self.embed_tokens(input_ids))
        packed = pack_padded_sequence(embedded, lengths.cpu(), batch_first=True, enforce_sorted=False)
        packed_out, _ = run_rnn(self.lstm, packed)
        hidden, _ = pad_packed_sequence(packed_out, batch_first=True, total_length=seq_len)
        hidden = self.dropout(hidden)
        pooled = hidden.masked_fill(~mask[..., None], float("-inf")).amax(dim=1)

        hidden_states = (embedded, hidden) if output_hidden_states else None
        if not return_dict:
            return tuple(v for v in (hidden, pooled, hidden_states) if v is not None)
        return BaseModelOutputWithPooling(last_hidden_state=hidden, pooler_output=pooled, hidden_states=hidden_states)


class LaserDecoder(nn.Module):
    """LSTM decoder reading only the sentence vector, the target-language embedding and the previous token."""

    def __init__(self, config: LaserConfig):
        super().__init__()
        self.num_layers = config.decoder_layers
        self.hidden_size = config.decoder_hidden_size
        self.embed_tokens = nn.Embedding(config.vocab_size, config.embed_dim, padding_idx=config.pad_token_id)
        self.embed_langs = nn.Embedding(len(config.languages), config.lang_embed_dim)
        # initial (h0, c0) of every layer: linear maps of the sentence vector (fairseq-laser, no tanh)
        state_size = config.decoder_layers * config.decoder_hidden_size
        self.hidden_proj = nn.Linear(config.hidden_size, state_size)
        self.cell_proj = nn.Linear(config.hidden_size, state_size)
        self.lstm = nn.LSTM(
            input_size=config.embed_dim + config.lang_embed_dim + config.hidden_size,
            hidden_size=config.decoder_hidden_size,
            num_layers=config.decoder_layers,
            dropout=config.dropout if config.decoder_layers > 1 else 0.0,
            batch_first=True,
        )
        self.dropout = nn.Dropout(config.dropout)

    def initial_state(self, sentence_embedding: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        batch = sentence_embedding.shape[0]

        def project(linear: nn.Linear) -> torch.Tensor:
            state = linear(sentence_embedding).view(batch, self.num_layers, self.hidden_size)
            return state.transpose(0, 1).contiguous()

        return project(self.hidden_proj), project(self.cell_proj)

    def forward(
        self,
        decoder_input_ids: torch.LongTensor,
        sentence_embedding: torch.Tensor,
        tgt_lang: torch.LongTensor,
        state: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """Decoder outputs [B, n, decoder_hidden_size] of the n tokens in one LSTM call, and the LSTM (h, c)
        [layers, B, H] after them; ``state`` continues an earlier call (default: ``initial_state``)."""
        length = decoder_input_ids.shape[1]
        tokens = self.embed_tokens(decoder_input_ids)
        lang = self.embed_langs(tgt_lang)[:, None].expand(-1, length, -1).to(tokens.dtype)
        inputs = self.dropout(torch.cat([tokens, lang], dim=-1))
        sentence = sentence_embedding[:, None].expand(-1, length, -1).to(inputs.dtype)
        if state is None:
            state = self.initial_state(sentence_embedding)
        output, state = run_rnn(self.lstm, torch.cat([inputs, sentence], dim=-1), state)
        return self.dropout(output), state


class LaserForTranslation(TranslationMixin, LaserPreTrainedModel):
    """LASER BiLSTM encoder + LSTM decoder trained as multilingual NMT (cLASER with the distance loss)."""

    def __init__(self, config: LaserConfig):
        super().__init__(config)
        self.encoder = LaserModel(config)
        self.decoder = LaserDecoder(config)
        self.lm_head = nn.Linear(config.decoder_hidden_size, config.vocab_size)
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.encoder.embed_tokens

    def get_output_embeddings(self) -> nn.Linear:
        return self.lm_head

    def forward(
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
        group_index: torch.LongTensor | None = None,
        text_keys: torch.LongTensor | None = None,
        text_languages: torch.LongTensor | None = None,
        num_items_in_batch: int | torch.Tensor | None = None,
        sentence_embeddings: torch.Tensor | None = None,
        cache: TranslationCache | None = None,
        return_dict: bool | None = None,
    ) -> TranslationOutput | tuple:
        """The training loss of a batch; decoder scores for ``generate``. LASER trains on the translation loss
        l_mt; cLASER (``distance_beta`` > 0) adds cT-LASER's distance constraint, eq. (10) of Li & Mak 2020 (see
        ``TLaserForTranslation.forward``). Arguments as there."""
        return_dict = self.config.return_dict if return_dict is None else return_dict
        out, vectors, pair_index = self.translate(
            input_ids=input_ids,
            attention_mask=attention_mask,
            labels=labels,
            tgt_lang=tgt_lang,
            decoder_input_ids=decoder_input_ids,
            tgt_input_ids=tgt_input_ids,
            tgt_attention_mask=tgt_attention_mask,
            src_index=src_index,
            pair_index=pair_index,
            sentence_embeddings=sentence_embeddings,
            cache=cache,
        )
        if labels is not None:
            total = self.pair_loss(out, vectors, pair_index, group_index, text_keys, text_languages)  # l_mt (+ eq. 10)
            self.set_loss(out, total, vectors, pair_index, num_items_in_batch)
        return out if return_dict else out.to_tuple()

    def decoder_step(
        self,
        decoder_input_ids: torch.LongTensor,
        sentence_embedding: torch.Tensor,
        tgt_lang: torch.LongTensor,
        cache: dict[str, torch.Tensor] | None = None,
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Scores [B, n, vocab] after each new token of ``decoder_input_ids`` [B, n], and the cache: the LSTM state
        after them, batch first (``hidden``, ``cell``: [B, layers, H])."""
        state = None if cache is None else (cache["hidden"].transpose(0, 1), cache["cell"].transpose(0, 1))
        output, (hidden, cell) = self.decoder(decoder_input_ids, sentence_embedding, tgt_lang, state)
        return self.lm_head(output), {"hidden": hidden.transpose(0, 1), "cell": cell.transpose(0, 1)}


LaserModel.register_for_auto_class("AutoModel")
LaserForTranslation.register_for_auto_class("AutoModelForSeq2SeqLM")

"""T-LASER and cT-LASER (Li & Mak 2020): a pre-LN transformer encoder whose output at the STR_TAG position is the
sentence embedding, trained through a one-layer decoder that sees only that vector and a target-language
embedding."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from transformers import PreTrainedModel
from transformers.activations import ACT2FN
from transformers.modeling_outputs import BaseModelOutputWithPooling

from ..common.backbone import BackboneEncoderMixin, build_backbone, projection_head
from ..common.encode import SentenceEncoderMixin
from ..common.pooling import head_output_dim, sentence_head
from ..common.positions import SinusoidalPositions
from ..common.remote_code import ModelFolderMixin
from ..common.translation import TranslationCache, TranslationMixin, TranslationOutput
from .configuration_tlaser import TLaserConfig

try:  # transformers >= 5 tracks which weights were loaded; older versions use torch.nn.init directly
    from transformers import initialization as init
except ImportError:  # pragma: no cover
    from torch.nn import init


class TLaserAttention(nn.Module):
    """Multi-head attention (eq. 1-2) on `scaled_dot_product_attention`; keys/values may have their own width."""

    def __init__(self, embed_dim: int, num_heads: int, dropout: float, kv_dim: int | None = None):
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = embed_dim // num_heads
        self.dropout = dropout
        kv_dim = kv_dim or embed_dim
        self.q_proj = nn.Linear(embed_dim, embed_dim)
        self.k_proj = nn.Linear(kv_dim, embed_dim)
        self.v_proj = nn.Linear(kv_dim, embed_dim)
        self.out_proj = nn.Linear(embed_dim, embed_dim)
        if kv_dim == embed_dim:  # fairseq MultiheadAttention (qkv_same_dim): q/k/v xavier gain 1/sqrt(2)
            for proj in (self.q_proj, self.k_proj, self.v_proj):
                proj.xavier_gain = 2**-0.5

    def forward(
        self,
        query: torch.Tensor,
        key_value: torch.Tensor,
        attn_mask: torch.Tensor | None = None,
        is_causal: bool = False,
    ) -> torch.Tensor:
        return self.attend(query, *self.keys_values(key_value), attn_mask=attn_mask, is_causal=is_causal)

    def keys_values(self, key_value: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys and values [B, heads, kv_len, head_dim] of ``key_value`` [B, kv_len, kv_dim]."""
        bsz, kv_len = key_value.shape[:2]
        k = self.k_proj(key_value).view(bsz, kv_len, self.num_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(key_value).view(bsz, kv_len, self.num_heads, self.head_dim).transpose(1, 2)
        return k, v

    def attend(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        attn_mask: torch.Tensor | None = None,
        is_causal: bool = False,
    ) -> torch.Tensor:
        """Attention of ``query`` [B, q_len, d] over projected ``key`` / ``value`` (see ``keys_values``)."""
        bsz, q_len, embed_dim = query.shape
        q = self.q_proj(query).view(bsz, q_len, self.num_heads, self.head_dim).transpose(1, 2)
        out = F.scaled_dot_product_attention(
            q,
            key,
            value,
            attn_mask=attn_mask,
            dropout_p=self.dropout if self.training else 0.0,
            is_causal=is_causal,
        )
        return self.out_proj(out.transpose(1, 2).reshape(bsz, q_len, embed_dim))


def causal_mask(q_len: int, kv_len: int, device: torch.device) -> dict:
    """``attend`` arguments for queries that are the last ``q_len`` of ``kv_len`` positions, each seeing itself and
    the positions before it."""
    if q_len == 1:
        return {}
    if q_len == kv_len:
        return {"is_causal": True}
    positions = torch.arange(kv_len, device=device)
    return {"attn_mask": positions[None] <= positions[kv_len - q_len :, None]}


class TLaserFeedForward(nn.Module):
    """Position-wise FFN."""

    def __init__(self, config: TLaserConfig, ffn_dim: int):
        super().__init__()
        self.fc1 = nn.Linear(config.hidden_size, ffn_dim)
        self.fc2 = nn.Linear(ffn_dim, config.hidden_size)
        self.act = ACT2FN[config.activation_function]
        self.activation_dropout = nn.Dropout(config.activation_dropout)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.activation_dropout(self.act(self.fc1(hidden))))


class TLaserEncoderLayer(nn.Module):
    """Pre-LN encoder block: x + SelfAttn(LN(x)), then x + FFN(LN(x))."""

    def __init__(self, config: TLaserConfig):
        super().__init__()
        self.self_attn_layer_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.self_attn = TLaserAttention(config.hidden_size, config.num_attention_heads, config.attention_dropout)
        self.final_layer_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.ffn = TLaserFeedForward(config, config.intermediate_size)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, hidden: torch.Tensor, attn_mask: torch.Tensor | None, first_only: bool = False) -> torch.Tensor:
        """``first_only``: compute queries, residual and FFN for position 0 only (returns [B, 1, d])."""
        normed = self.self_attn_layer_norm(hidden)
        query, residual = (normed[:, :1], hidden[:, :1]) if first_only else (normed, hidden)
        hidden = residual + self.dropout(self.self_attn(query, normed, attn_mask))  # eq. (1)-(2)
        return hidden + self.dropout(self.ffn(self.final_layer_norm(hidden)))


class TLaserPreTrainedModel(ModelFolderMixin, PreTrainedModel):
    config_class = TLaserConfig
    config: TLaserConfig
    base_model_prefix = "encoder"
    main_input_name = "input_ids"
    _supports_sdpa = True
    _no_split_modules = ["TLaserEncoderLayer", "TLaserDecoderLayer"]

    @torch.no_grad()
    def _init_weights(self, module: nn.Module) -> None:
        """``config.init_style``: "bert" = N(0, initializer_range) for every linear and embedding weight; "fairseq" =
        fairseq's transformer init: xavier-uniform linears (gain ``module.xavier_gain``, 1/sqrt(2) on the q/k/v of
        same-width attention), embeddings and the output projection (``module.embedding_init``) N(0, d^-0.5).
        Zero biases and pad rows, unit LayerNorms. Only leaf modules are visited (transformers skips parameter-less
        parents of remote-code models), hence the attributes on the linears.
        """
        fairseq = self.config.init_style == "fairseq"
        std = self.config.initializer_range
        if isinstance(module, nn.Linear):
            if not fairseq:
                init.normal_(module.weight, mean=0.0, std=std)
            elif getattr(module, "embedding_init", False):
                init.normal_(module.weight, mean=0.0, std=module.in_features**-0.5)
            else:
                init.xavier_uniform_(module.weight, gain=getattr(module, "xavier_gain", 1.0))
            if module.bias is not None:
                init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            init.normal_(module.weight, mean=0.0, std=module.embedding_dim**-0.5 if fairseq else std)
            if module.padding_idx is not None:
                init.zeros_(module.weight[module.padding_idx])
        elif isinstance(module, nn.LayerNorm):
            init.ones_(module.weight)
            init.zeros_(module.bias)
        elif isinstance(module, SinusoidalPositions):
            module.reset_table()


class TLaserModel(BackboneEncoderMixin, SentenceEncoderMixin, TLaserPreTrainedModel):
    """The T-LASER encoder. ``pooler_output`` (final LayerNorm output at the STR_TAG position) is the embedding.

    With ``config.backbone`` (``hf-tlaser train --init-from``) a pretrained Hugging Face encoder replaces the layers:
    its ``<s>`` is STR_TAG, and ``config.pooling`` chooses position 0 or the mean of its final states; the modules
    a sentence-transformers backbone has after pooling (``config.sentence_modules``: Dense, Normalize) then shape
    ``pooler_output`` as there (``sentence_head``), while ``last_hidden_state`` stays the per-token states."""

    # a translation checkpoint also holds the decoder: loading the encoder alone skips it quietly
    _keys_to_ignore_on_load_unexpected = [r"^decoder\.", r"^lm_head\.", r"^decoder_vocab_ids$"]

    def __init__(self, config: TLaserConfig):
        super().__init__(config)
        self.backbone = build_backbone(config)
        if self.backbone is None:
            self.embed_scale = math.sqrt(config.hidden_size) if config.scale_embedding else 1.0
            self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=config.pad_token_id)
            self.embed_positions = SinusoidalPositions(config.max_position_embeddings, config.hidden_size)
            self.dropout = nn.Dropout(config.dropout)
            self.layers = nn.ModuleList(TLaserEncoderLayer(config) for _ in range(config.num_hidden_layers))
            self.layer_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.projection = projection_head(config)
        self.sentence_head = sentence_head(config)
        self.post_init()

    def forward(
        self,
        input_ids: torch.LongTensor,
        attention_mask: torch.Tensor | None = None,
        output_hidden_states: bool | None = None,
        pooled_only: bool = False,
        return_dict: bool | None = None,
        project: bool = True,
        **kwargs,
    ) -> BaseModelOutputWithPooling | tuple:
        """Encode right-padded ``STR_TAG text </s>`` sequences.

        Args:
            input_ids: LongTensor[B, S]. attention_mask: 1 for tokens, 0 for padding (default: ids != pad).
            output_hidden_states: also return the input of every layer and the final output.
            pooled_only: the last layer computes position 0 only (the paper's "sixth layer is entirely dedicated to
                refining H6[t0]"); ``last_hidden_state`` is then [B, 1, d]. Ignored with ``output_hidden_states``, a
                backbone or mean pooling.
            project: apply the projection head (``config.teacher_dim``) to the final states and a carried trailing
                ``Normalize`` to the pooled vector; False: the vectors the decoder and the training losses read.
        """
        first_only = pooled_only and self.config.pooling == "cls"
        return self.sentence_outputs(
            input_ids, attention_mask, output_hidden_states, return_dict, project, first_only=first_only
        )

    def encoder_states(
        self, input_ids: torch.LongTensor, attention_mask: torch.Tensor, output_hidden_states: bool, first_only: bool
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, ...] | None]:
        """The paper's encoder: final LayerNorm outputs [B, S, d] ([B, 1, d] with ``first_only``), and with
        ``output_hidden_states`` the input of every layer and the final output."""
        hidden = self.embed_tokens(input_ids) * self.embed_scale
        hidden = self.dropout(hidden + self.embed_positions(input_ids.shape[1]).to(hidden.dtype))
        key_mask = None if bool(attention_mask.all()) else attention_mask.bool()[:, None, None, :]
        all_hidden = []
        last = len(self.layers) - 1
        for i, layer in enumerate(self.layers):
            if output_hidden_states:
                all_hidden.append(hidden)
            hidden = layer(hidden, key_mask, first_only=first_only and not output_hidden_states and i == last)
        hidden = self.layer_norm(hidden)
        if output_hidden_states:
            all_hidden.append(hidden)
        return hidden, tuple(all_hidden) if output_hidden_states else None


class TLaserDecoderLayer(nn.Module):
    """Pre-LN decoder block: causal self-attention (eq. 4), attention over the sentence vector (eq. 5), FFN
    (eq. 6)."""

    def __init__(self, config: TLaserConfig):
        super().__init__()
        vector_dim = head_output_dim(config.sentence_modules, config.hidden_size)  # the encoder's final vector
        memory_dim = vector_dim + (config.lang_embed_dim if config.decoder_lang_mode == "memory" else 0)
        heads = config.decoder_attention_heads
        self.self_attn_layer_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.self_attn = TLaserAttention(config.hidden_size, heads, config.attention_dropout)
        self.encoder_attn_layer_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.encoder_attn = TLaserAttention(config.hidden_size, heads, config.attention_dropout, kv_dim=memory_dim)
        self.final_layer_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.ffn = TLaserFeedForward(config, config.decoder_ffn_dim)
        self.dropout = nn.Dropout(config.dropout)

    def forward(
        self, hidden: torch.Tensor, memory: torch.Tensor, past: tuple[torch.Tensor, torch.Tensor] | None = None
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """Outputs for the new positions ``hidden`` [B, n, d], and the self-attention keys/values of all positions
        so far; ``past``: those of the earlier positions."""
        normed = self.self_attn_layer_norm(hidden)
        key, value = self.self_attn.keys_values(normed)
        if past is not None:
            key, value = torch.cat([past[0], key], dim=2), torch.cat([past[1], value], dim=2)
        mask = causal_mask(hidden.shape[1], key.shape[2], hidden.device)
        hidden = hidden + self.dropout(self.self_attn.attend(normed, key, value, **mask))  # eq. (4)
        hidden = hidden + self.dropout(self.encoder_attn(self.encoder_attn_layer_norm(hidden), memory))  # eq. (5)
        return hidden + self.dropout(self.ffn(self.final_layer_norm(hidden))), (key, value)  # eq. (6)


class TLaserDecoder(nn.Module):
    """Decoder that reads only the sentence vector and the target-language embedding. The sentence vector is the
    encoder's final one: after the modules a backbone carried (``config.sentence_modules``), as wide as their last
    Dense's output."""

    def __init__(self, config: TLaserConfig):
        super().__init__()
        self.lang_mode = config.decoder_lang_mode
        self.embed_scale = math.sqrt(config.hidden_size) if config.scale_embedding else 1.0
        self.embed_tokens = (
            None
            if config.tie_decoder_to_encoder
            else nn.Embedding(config.decoder_vocab, config.hidden_size, padding_idx=config.pad_token_id)
        )
        self.embed_positions = SinusoidalPositions(config.max_position_embeddings, config.hidden_size)
        self.embed_langs = nn.Embedding(len(config.languages), config.lang_embed_dim)
        if self.lang_mode == "input":
            self.input_proj = nn.Linear(config.hidden_size + config.lang_embed_dim, config.hidden_size)
        self.dropout = nn.Dropout(config.dropout)
        self.layers = nn.ModuleList(TLaserDecoderLayer(config) for _ in range(config.decoder_layers))
        self.layer_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)

    def forward(
        self,
        decoder_input_ids: torch.LongTensor,
        sentence_embedding: torch.Tensor,
        tgt_lang: torch.LongTensor,
        past: list[tuple[torch.Tensor, torch.Tensor]] | None = None,
        token_table: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, list[tuple[torch.Tensor, torch.Tensor]]]:
        """Final hidden states [B, n, d] of the new tokens ``decoder_input_ids`` [B, n], and every layer's
        self-attention keys/values so far; ``past``: those of the earlier positions (the memory, one vector, is
        projected again at every call); ``token_table``: the token embeddings when tied to the encoder's."""
        offset = 0 if past is None else past[0][0].shape[2]
        lang = self.embed_langs(tgt_lang)  # E_l, [B, lang_embed_dim]
        tokens = (
            self.embed_tokens(decoder_input_ids) if token_table is None else F.embedding(decoder_input_ids, token_table)
        )
        hidden = tokens * self.embed_scale
        if self.lang_mode == "input":  # eq. (3): J0[t] = Concat(Y[t], E_l), projected to hidden_size
            lang_per_token = lang[:, None].expand(-1, hidden.shape[1], -1).to(hidden.dtype)
            hidden = self.input_proj(torch.cat([hidden, lang_per_token], dim=-1))
            memory = sentence_embedding[:, None]
        else:  # authors' code: the one key/value is Concat(H6[t0], E_l)
            memory = torch.cat([sentence_embedding, lang.to(sentence_embedding.dtype)], dim=-1)[:, None]
        positions = self.embed_positions(offset + hidden.shape[1])[offset:]
        hidden = self.dropout(hidden + positions.to(hidden.dtype))
        keys_values = []
        for i, layer in enumerate(self.layers):
            hidden, layer_kv = layer(hidden, memory, None if past is None else past[i])
            keys_values.append(layer_kv)
        return self.layer_norm(hidden), keys_values


class TLaserForTranslation(TranslationMixin, TLaserPreTrainedModel):
    """T-LASER encoder + one-layer decoder trained as multilingual NMT (cT-LASER with the distance loss)."""

    _tied_weights_keys = {"lm_head.weight": "decoder.embed_tokens.weight"}

    def __init__(self, config: TLaserConfig, decoder_vocab_ids: torch.LongTensor | None = None):
        """``decoder_vocab_ids``: the tokenizer ids of a restricted decoder vocabulary's rows (sorted; a training
        run's, ``config.decoder_vocab_size`` of them); a saved model loads them."""
        super().__init__(config)
        self.encoder = TLaserModel(config)
        self.decoder = TLaserDecoder(config)
        self.lm_head = None
        if not config.tie_decoder_to_encoder:
            self.lm_head = nn.Linear(config.hidden_size, config.decoder_vocab, bias=False)
            self.lm_head.embedding_init = True  # fairseq: output projection N(0, d^-0.5), like an embedding
        if config.decoder_vocab_size is not None:  # decoder row -> tokenizer id
            if decoder_vocab_ids is None:
                decoder_vocab_ids = torch.arange(config.decoder_vocab_size)
            self.register_buffer("decoder_vocab_ids", decoder_vocab_ids)
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.encoder.get_input_embeddings()

    def get_output_embeddings(self) -> nn.Linear | None:
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
        """The training loss of a batch; decoder scores for ``generate``.

        T-LASER trains on the translation loss l_mt alone. cT-LASER (``distance_beta`` > 0) adds the distance
        constraint on the vectors of each translation pair (a, b), eq. (10):

            l = beta * d_p + lambda / N_s * sum_j (delta_j^{a->b} + delta_j^{b->a}) + 0.5 * l_mt

        with d_p the normalised distance of the pair (eq. 7), delta the hinge on N_s in-batch negatives (eq. 8-9),
        summed over the pairs; optionally plus the in-batch alignment loss (``align_loss_weight``). The sum over the
        batch is divided by its target tokens (``num_items_in_batch``: those of the whole update).

        Args: see ``TranslationMixin.translate``; also ``group_index``: LongTensor[P], the group (multi-way: source
        group) of each pair, whose pairs are never negatives of each other (default: every pair its own group);
        ``text_keys``: LongTensor[R], the ``text_key`` of each encoded row (sources, then targets), which the
        cross-batch memory needs (``negative_memory_size``), and ``text_languages``: LongTensor[R], the key of each
        row's language (the collator's ``language_keys``); ``num_items_in_batch``; ``return_dict``: False returns a
        tuple (default: ``config.return_dict``).
        """
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
            total = self.pair_loss(out, vectors, pair_index, group_index, text_keys, text_languages)  # eq. (7)-(10)
            self.set_loss(out, total, vectors, pair_index, num_items_in_batch)
        return out if return_dict else out.to_tuple()

    def decoder_token_table(self) -> torch.Tensor | None:
        """With ``tie_decoder_to_encoder``: the encoder's input embeddings of the decoder's vocabulary (its
        ``decoder_vocab_ids`` rows when restricted), which the decoder reads and scores with; else None."""
        if not self.config.tie_decoder_to_encoder:
            return None
        table = self.encoder.get_input_embeddings().weight
        return table if self.config.decoder_vocab_size is None else table[self.decoder_vocab_ids]

    def decoder_step(
        self,
        decoder_input_ids: torch.LongTensor,
        sentence_embedding: torch.Tensor,
        tgt_lang: torch.LongTensor,
        cache: dict[str, torch.Tensor] | None = None,
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Scores [B, n, decoder vocab] after each new token of ``decoder_input_ids`` [B, n] (decoder rows: see
        ``to_decoder_vocab``), and the cache: every decoder
        layer's self-attention keys and values so far (``key.{i}``, ``value.{i}``: [B, heads, len, head_dim])."""
        layers = range(len(self.decoder.layers))
        past = None if cache is None else [(cache[f"key.{i}"], cache[f"value.{i}"]) for i in layers]
        table = self.decoder_token_table()
        hidden, keys_values = self.decoder(decoder_input_ids, sentence_embedding, tgt_lang, past, table)
        cache = {f"{name}.{i}": t for i, kv in enumerate(keys_values) for name, t in zip(("key", "value"), kv)}
        return F.linear(hidden, self.output_table(table)), cache

    def output_table(self, token_table: torch.Tensor | None = None) -> torch.Tensor:
        """The output layer's weight [decoder vocab, d]: ``lm_head``'s, or the tied token table."""
        return self.lm_head.weight if token_table is None else token_table

    def training_logits(
        self,
        decoder_input_ids: torch.LongTensor,
        sentence_embedding: torch.Tensor,
        tgt_lang: torch.LongTensor,
        labels: torch.LongTensor,
    ) -> tuple[torch.Tensor, torch.LongTensor]:
        """With ``config.sampled_softmax`` = S: the scores of the rows that occur in the batch's labels and of S
        rows drawn uniformly (a sampled softmax whose candidates always hold the true token), the labels renumbered
        to those rows; else the full scores."""
        if not self.config.sampled_softmax:
            return super().training_logits(decoder_input_ids, sentence_embedding, tgt_lang, labels)
        table = self.decoder_token_table()
        hidden, _ = self.decoder(decoder_input_ids, sentence_embedding, tgt_lang, None, table)
        weight = self.output_table(table)
        drawn = torch.randint(0, weight.shape[0], (self.config.sampled_softmax,), device=labels.device)
        rows = torch.cat([labels[labels.ne(-100)], drawn]).unique()  # sorted
        renumbered = torch.searchsorted(rows, labels.clamp(min=0))
        return F.linear(hidden, weight[rows]), torch.where(labels.ne(-100), renumbered, labels)


TLaserModel.register_for_auto_class("AutoModel")
TLaserForTranslation.register_for_auto_class("AutoModelForSeq2SeqLM")

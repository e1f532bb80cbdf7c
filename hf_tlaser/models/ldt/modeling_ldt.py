"""Lightweight Dual Transformer (Mao et al. 2021): a 2-layer transformer encoder shared by all languages whose
mean-pooled output is the sentence vector, trained on translation pairs without a decoder. The generative task
(SMLM, eq. 1, and XTR, eq. 2-3, unified by the label distribution of eq. 4) is predicted from each sentence vector
through a fully-connected layer and the tied token-embedding matrix; the in-batch sentence alignment (eq. 5) and
similarity (eq. 6) losses act on the sentence vectors; eq. (7) weighs the three (1, 2, 2)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from transformers import PreTrainedModel
from transformers.activations import ACT2FN
from transformers.modeling_outputs import BaseModelOutputWithPooling
from transformers.utils import ModelOutput

from ..common.backbone import BackboneEncoderMixin, build_backbone, projection_head
from ..common.encode import SentenceEncoderMixin, stack_padded
from ..common.losses import centered_pair_cosine, mean_pairwise_cosine
from ..common.pooling import sentence_head
from ..common.positions import SinusoidalPositions
from ..common.remote_code import ModelFolderMixin
from .configuration_ldt import LDTConfig

try:  # transformers >= 5 tracks which weights were loaded; older versions use torch.nn.init directly
    from transformers import initialization as init
except ImportError:  # pragma: no cover
    from torch.nn import init

IGNORE_INDEX = -100
SINGLE_WORD_TASKS = ("ugt", "smlm")
"""Generative tasks that mask one token per pair (SMLM)."""
XTR_TASKS = ("ugt", "xtr", "mlm_xtr")
"""Generative tasks whose labels include the translation's tokens (XTR)."""
MLM_TASKS = ("mlm", "mlm_xtr")
"""Generative tasks with BERT-style masking."""


# ----------------------------------------------------------------------------------------------------------- losses


def xtr_labels(token_ids: torch.LongTensor, keep: torch.Tensor, vocab_size: int, counts: bool = False) -> torch.Tensor:
    """q of eq. (3): per row, a distribution over the vocabulary from the tokens of the row's *translation*
    (``token_ids`` [N, S] where ``keep`` [N, S] is true). Uniform over the distinct tokens (footnote 4: every N_wi
    set to 1), or N_wi / ||S|| with ``counts``. Returns float32 [N, vocab_size]; a row without a kept token is zero.
    """
    weights = torch.zeros(token_ids.shape[0], vocab_size, device=token_ids.device)
    weights.scatter_add_(1, token_ids, keep.float())
    if not counts:
        weights = weights.clamp(max=1.0)
    return weights / weights.sum(-1, keepdim=True).clamp(min=1.0)


def ugt_labels(xtr_q: torch.Tensor, masked_token: torch.LongTensor) -> torch.Tensor:
    """q of eq. (4): a row whose own sentence had the token w_t masked (``masked_token`` [N], -100 for none) gets
    1/2 on w_t plus 1/2 times its eq. (3) labels ``xtr_q`` [N, V] (where w_t also occurs in the translation the two
    add up); other rows keep eq. (3). A masked row whose translation has no token puts all its mass on w_t."""
    onehot = F.one_hot(masked_token.clamp(min=0), xtr_q.shape[1]).to(xtr_q.dtype)
    half = torch.where(xtr_q.sum(-1, keepdim=True) > 0, 0.5, 1.0)
    return torch.where((masked_token >= 0)[:, None], half * onehot + (1 - half) * xtr_q, xtr_q)


def kl_to_labels(log_probs: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """D_KL(q || p) of each row (eq. 2) from log p [N, V] and labels q [N, V] (0 log 0 = 0: an all-zero q gives 0)."""
    return F.kl_div(log_probs.float(), q.float(), reduction="none").sum(-1)


def xmlm_loss(
    log_probs_a: torch.Tensor, log_probs_b: torch.Tensor, q_a: torch.Tensor, q_b: torch.Tensor
) -> torch.Tensor:
    """L_XMLM of eq. (2) for B pairs (S_a, S_b): D_KL(q(w_Sa) || p(h_Sa)) + D_KL(q(w_Sb) || p(h_Sb)), mean over the
    pairs (the authors' ``KLDivLoss(reduction="batchmean")`` on each side). With q of eq. (3) (``xtr_labels``) this is
    XTR; with q of eq. (4) (``ugt_labels``) it is the unified generative task UGT of eq. (7)."""
    return (kl_to_labels(log_probs_a, q_a) + kl_to_labels(log_probs_b, q_b)).mean()


def smlm_loss(
    log_probs_masked: torch.Tensor, log_probs_translation: torch.Tensor, masked_token: torch.LongTensor
) -> torch.Tensor:
    """SMLM, eq. (1): -log P(w_t | S_l without w_t) - log P(w_t | S_l') for the token w_t masked in one sentence S_l
    of each pair, predicted from the masked sentence (``log_probs_masked`` [B, V]) and from its translation
    (``log_probs_translation`` [B, V]). Mean over the pairs with a masked token (``masked_token`` [B], -100 for
    none); 0 (still in the graph) when no pair has one."""
    has = masked_token >= 0
    target = masked_token.clamp(min=0)[:, None]
    nll = -(log_probs_masked.float().gather(1, target) + log_probs_translation.float().gather(1, target))[:, 0]
    return (nll * has).sum() / has.sum().clamp(min=1)


def mlm_loss(logits: torch.Tensor, targets: torch.LongTensor) -> torch.Tensor:
    """BERT's masked language model (the "MLM" rows of Table 6): cross entropy of the M masked tokens ``targets``
    [M] from the scores ``logits`` [M, V] of their own final hidden states; mean over them, 0 when M = 0."""
    return F.cross_entropy(logits.float(), targets, reduction="sum") / max(targets.numel(), 1)


def alignment_loss(u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Sentence alignment loss, eq. (5): for each pair j, the cross entropy of picking v_j among the batch's v_k by
    the inner products u_j^T v_k, plus that of picking u_j among the u_k by u_k^T v_j (B - 1 in-batch negatives per
    language); mean over the pairs (the authors' code). Inner products, not cosine (footnote 5), computed in fp32.
    A batch of one pair has no negative: its loss is 0."""
    with torch.autocast(u.device.type, enabled=False):
        scores = u.float() @ v.float().T  # [B, B]: u_j^T v_k
        target = torch.arange(scores.shape[0], device=scores.device)
        return F.cross_entropy(scores, target) + F.cross_entropy(scores.T, target)


def similarity_loss(u: torch.Tensor, v: torch.Tensor, eps: float = 1e-7) -> torch.Tensor:
    """Sentence similarity loss, eq. (6): -sum_{j1, j2} log cos(pi/2 (softmax_k(u_j1^T u_k)_j2 -
    softmax_k(v_j1^T v_k)_j2)), summed over the B^2 entries of the batch (the authors' code, with which the weights
    (1, 2, 2) of eq. 7 were set). 0 for identical sides or one pair. The cosine is floored at ``eps``: a saturated
    entry (difference -> +-1) would give log 0. Computed in fp32."""
    with torch.autocast(u.device.type, enabled=False):
        u, v = u.float(), v.float()
        delta = torch.softmax(u @ u.T, dim=-1) - torch.softmax(v @ v.T, dim=-1)
        return -torch.log(torch.cos(math.pi / 2 * delta).clamp(min=eps)).sum()


def ldt_loss(
    generative: torch.Tensor | None,
    align: torch.Tensor | None,
    sim: torch.Tensor | None,
    weights: tuple[float, float, float] = (1.0, 2.0, 2.0),
) -> torch.Tensor:
    """Eq. (7): w_0 L_XMLM + w_1 L_align + w_2 L_sim, with the paper's weights (1, 2, 2); parts that are None
    (switched off) are left out."""
    parts = [weight * part for weight, part in zip(weights, (generative, align, sim)) if part is not None]
    if not parts:
        raise ValueError("eq. (7) needs at least one loss")
    return sum(parts[1:], parts[0])


def single_word_mask(
    maskable_a: torch.Tensor, maskable_b: torch.Tensor, generator: torch.Generator | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """SMLM masking (the authors' code): one token per pair, in a side drawn uniformly (the other side when the drawn
    one has no maskable token; none when neither has), at a uniformly drawn maskable position. ``maskable_*``
    [B, S_*] bool; returns the masked positions of both sides, same shapes."""
    device = maskable_a.device
    has_a, has_b = maskable_a.any(1), maskable_b.any(1)
    pick_a = torch.rand(maskable_a.shape[0], device=device, generator=generator) < 0.5
    side_a = has_a & (pick_a | ~has_b)
    side_b = has_b & ~side_a

    def one_position(maskable: torch.Tensor, side: torch.Tensor) -> torch.Tensor:
        scores = torch.rand(maskable.shape, device=device, generator=generator).masked_fill(~maskable, -1.0)
        chosen = F.one_hot(scores.argmax(1), maskable.shape[1]).bool()
        return chosen & maskable & side[:, None]

    return one_position(maskable_a, side_a), one_position(maskable_b, side_b)


# ------------------------------------------------------------------------------------------------------------ model


class LDTSelfAttention(nn.Module):
    """Multi-head self-attention on ``scaled_dot_product_attention`` with one fused q/k/v projection. Its
    xavier-uniform init (fan-out 3d) has the scale of fairseq's separate q/k/v projections with gain 1/sqrt(2)."""

    def __init__(self, config: LDTConfig):
        super().__init__()
        self.num_heads = config.num_attention_heads
        self.dropout = config.attention_dropout
        self.qkv = nn.Linear(config.hidden_size, 3 * config.hidden_size)
        self.out_proj = nn.Linear(config.hidden_size, config.hidden_size)

    def forward(self, hidden: torch.Tensor, key_mask: torch.Tensor | None) -> torch.Tensor:
        batch, length, dim = hidden.shape
        qkv = self.qkv(hidden).view(batch, length, 3, self.num_heads, dim // self.num_heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4)
        dropout = self.dropout if self.training else 0.0
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=key_mask, dropout_p=dropout)
        return self.out_proj(out.transpose(1, 2).reshape(batch, length, dim))


class LDTEncoderLayer(nn.Module):
    """Post-LN transformer block (BERT, the authors' code): LN(x + SelfAttn(x)), then LN(x + FFN(x))."""

    def __init__(self, config: LDTConfig):
        super().__init__()
        self.self_attn = LDTSelfAttention(config)
        self.self_attn_layer_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.fc1 = nn.Linear(config.hidden_size, config.intermediate_size)
        self.fc2 = nn.Linear(config.intermediate_size, config.hidden_size)
        self.act = ACT2FN[config.activation_function]
        self.final_layer_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, hidden: torch.Tensor, key_mask: torch.Tensor | None) -> torch.Tensor:
        hidden = self.self_attn_layer_norm(hidden + self.dropout(self.self_attn(hidden, key_mask)))
        return self.final_layer_norm(hidden + self.dropout(self.fc2(self.act(self.fc1(hidden)))))


class LDTPredictionHead(nn.Module):
    """The fully-connected layer before the generative loss (sec. 3.1, after Chen et al. 2020; in the authors' code
    BERT's prediction-head transform: dense, activation, LayerNorm), then scores over the vocabulary through the
    tied token-embedding matrix plus an output bias."""

    def __init__(self, config: LDTConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.act = ACT2FN[config.activation_function]
        self.layer_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.bias = nn.Parameter(torch.zeros(config.vocab_size))

    def forward(self, hidden: torch.Tensor, embedding_weight: torch.Tensor) -> torch.Tensor:
        return F.linear(self.layer_norm(self.act(self.dense(hidden))), embedding_weight, self.bias)


class LDTPreTrainedModel(ModelFolderMixin, PreTrainedModel):
    config_class = LDTConfig
    config: LDTConfig
    base_model_prefix = "encoder"
    main_input_name = "input_ids"
    _supports_sdpa = True
    _no_split_modules = ["LDTEncoderLayer"]

    @torch.no_grad()
    def _init_weights(self, module: nn.Module) -> None:
        """fairseq's transformer init (scale-aware): xavier-uniform linears and zero biases; token embeddings, which
        are also the output matrix of the generative loss, N(0, d^-0.5) with a zero pad row; unit LayerNorms; a
        zero output bias; the sinusoidal table recomputed (it is not saved)."""
        if isinstance(module, nn.Linear):
            init.xavier_uniform_(module.weight)
            if module.bias is not None:
                init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            init.normal_(module.weight, mean=0.0, std=module.embedding_dim**-0.5)
            if module.padding_idx is not None:
                init.zeros_(module.weight[module.padding_idx])
        elif isinstance(module, nn.LayerNorm):
            init.ones_(module.weight)
            init.zeros_(module.bias)
        elif isinstance(module, LDTPredictionHead):
            init.zeros_(module.bias)
        elif isinstance(module, SinusoidalPositions):
            module.reset_table()


class LDTModel(BackboneEncoderMixin, SentenceEncoderMixin, LDTPreTrainedModel):
    """The LDT encoder, shared by all languages. ``pooler_output``, the mean of the final hidden states over the
    non-pad positions (STR_TAG and ``</s>`` included, as sentence-transformers' mean pooling), is the embedding."""

    # a training checkpoint also holds the prediction head: loading the encoder alone skips it quietly
    _keys_to_ignore_on_load_unexpected = [r"^head\."]

    def __init__(self, config: LDTConfig):
        super().__init__(config)
        self.backbone = build_backbone(config)
        if self.backbone is None:
            self.embed_scale = math.sqrt(config.hidden_size)
            self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=config.pad_token_id)
            self.embed_positions = SinusoidalPositions(config.max_position_embeddings, config.hidden_size)
            self.embed_layer_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
            self.dropout = nn.Dropout(config.dropout)
            self.layers = nn.ModuleList(LDTEncoderLayer(config) for _ in range(config.num_hidden_layers))
        self.projection = projection_head(config)
        self.sentence_head = sentence_head(config)  # a backbone's Dense / Normalize after pooling
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
            pooled_only: accepted for the interface of the other hf_tlaser encoders; no effect (the mean needs
                every position).
            project: apply the projection head (``config.teacher_dim``) to the final states; False: the states the
                training losses read.

        Returns:
            ``last_hidden_state`` [B, S, d] and ``pooler_output`` [B, d], the mean over the non-pad positions
            (then the modules a backbone carried, ``config.sentence_modules``).
        """
        return self.sentence_outputs(input_ids, attention_mask, output_hidden_states, return_dict, project)

    def encoder_states(
        self, input_ids: torch.LongTensor, attention_mask: torch.Tensor, output_hidden_states: bool
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, ...] | None]:
        """The paper's encoder: final states [B, S, d], and with ``output_hidden_states`` the input of every layer and
        the final output."""
        mask = attention_mask.bool()
        hidden = self.embed_tokens(input_ids) * self.embed_scale
        hidden = hidden + self.embed_positions(input_ids.shape[1]).to(hidden.dtype)
        hidden = self.dropout(self.embed_layer_norm(hidden))
        key_mask = None if bool(mask.all()) else mask[:, None, None, :]
        all_hidden = []
        for layer in self.layers:
            if output_hidden_states:
                all_hidden.append(hidden)
            hidden = layer(hidden, key_mask)
        if output_hidden_states:
            all_hidden.append(hidden)
        return hidden, tuple(all_hidden) if output_hidden_states else None


@dataclass
class LDTOutput(ModelOutput):
    """Output of ``LDTForAlignment``.

    Attributes:
        loss: eq. (7), ``w_0 loss_generative + w_1 loss_align + w_2 loss_sim``, times this batch's share of the
            update (``num_tokens / num_items_in_batch``; 1 without ``num_items_in_batch``).
        sentence_embedding: mean-pooled vectors u of the first side's sentences [B, d].
        tgt_sentence_embedding: mean-pooled vectors v of their translations [B, d].
        loss_generative: the generative term of eq. (7) for ``config.generative_task``: L_XMLM (eq. 2) with q of
            eq. (4) ("ugt") or eq. (3) ("xtr"), SMLM (eq. 1), MLM, or MLM + XTR; None when its weight is 0.
        loss_smlm: eq. (1), mean over the pairs with a masked token ("ugt", "smlm"; with "ugt" a reading of how well
            the masked token is predicted, not a separate term of the loss).
        loss_xtr: eq. (2) with q of eq. (3), mean over the pairs ("ugt", "xtr", "mlm_xtr"; with "ugt" a reading).
        loss_mlm: masked language model loss over the masked tokens ("mlm", "mlm_xtr").
        loss_align: eq. (5), mean over the pairs; None when its weight is 0.
        loss_sim: eq. (6), summed over the batch's B^2 entries; None when its weight is 0.
        mean_cosine: mean cosine between the 2B sentence vectors (near 1: collapsed).
        centered_cosine: mean cosine of the pairs after removing the batch mean (``centered_pair_cosine``).
        num_tokens: target tokens of the batch (``labels != -100``), what the Trainer's normaliser counts.
    """

    loss: torch.Tensor | None = None
    sentence_embedding: torch.Tensor | None = None
    tgt_sentence_embedding: torch.Tensor | None = None
    loss_generative: torch.Tensor | None = None
    loss_smlm: torch.Tensor | None = None
    loss_xtr: torch.Tensor | None = None
    loss_mlm: torch.Tensor | None = None
    loss_align: torch.Tensor | None = None
    loss_sim: torch.Tensor | None = None
    mean_cosine: torch.Tensor | None = None
    centered_cosine: torch.Tensor | None = None
    num_tokens: torch.Tensor | None = None


class LDTForAlignment(LDTPreTrainedModel):
    """The LDT encoder with its training losses on translation pairs: both sides go through the same encoder (the
    "dual" transformer with shared parameters, here shared by all training languages), a token is masked inside the
    forward in training mode, and eq. (7) combines the generative, alignment and similarity losses."""

    # forward takes ``num_items_in_batch``: the Trainer then passes the target tokens of the whole update and leaves
    # the gradient-accumulation scaling to the loss normalisation
    accepts_loss_kwargs = True
    # the alignment and similarity losses contrast the two sides of bilingual pair batches
    supports_multiway = False

    def __init__(self, config: LDTConfig):
        super().__init__(config)
        self.encoder = LDTModel(config)
        self.head = LDTPredictionHead(config)
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.encoder.get_input_embeddings()

    @property
    def needs_target_encoding(self) -> bool:
        """LDT encodes both sides of every pair: training batches must carry the targets in encoder format."""
        return True

    def vocabulary_log_probs(self, hidden: torch.Tensor) -> torch.Tensor:
        """log p over the vocabulary (fp32) from hidden states [..., d], through the head and the tied embeddings."""
        return F.log_softmax(self.head(hidden, self.get_input_embeddings().weight).float(), dim=-1)

    def text_tokens(self, input_ids: torch.LongTensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Positions that may be masked and that make up label distributions: not pad, STR_TAG, ``</s>``, ``<unk>``
        or the mask token."""
        cfg = self.config
        special = [cfg.pad_token_id, cfg.eos_token_id, cfg.cls_token_id, cfg.unk_token_id, cfg.masking_token_id]
        return attention_mask.bool() & ~torch.isin(input_ids, torch.tensor(special, device=input_ids.device))

    def draw_mask(self, text_a: torch.Tensor, text_b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Masked positions of both sides for ``config.generative_task`` (none for "xtr")."""
        task = self.config.generative_task
        if task in SINGLE_WORD_TASKS:
            return single_word_mask(text_a, text_b)
        if task in MLM_TASKS:
            p = self.config.mlm_probability
            return tuple(text & (torch.rand(text.shape, device=text.device) < p) for text in (text_a, text_b))
        return torch.zeros_like(text_a), torch.zeros_like(text_b)

    def forward(
        self,
        input_ids: torch.LongTensor,
        attention_mask: torch.Tensor | None = None,
        tgt_input_ids: torch.LongTensor | None = None,
        tgt_attention_mask: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        masked_positions: torch.Tensor | None = None,
        tgt_masked_positions: torch.Tensor | None = None,
        num_items_in_batch: int | torch.Tensor | None = None,
        **kwargs,
    ) -> LDTOutput:
        """Eq. (7) on a batch of B translation pairs, or the sentence vectors alone without ``tgt_input_ids``.

        Args:
            input_ids, attention_mask: one side of the pairs, ``STR_TAG text </s>`` right-padded [B, S].
            tgt_input_ids, tgt_attention_mask: the other side in the same format [B, S'].
            labels: the collator's targets (``tokens </s>``, -100 padded); only counted (``num_tokens``). Without
                them ``num_tokens`` counts the same tokens from ``tgt_attention_mask``.
            masked_positions, tgt_masked_positions: bool [B, S] / [B, S'] text positions to mask (tests); default:
                drawn in training mode for ``config.generative_task``, none in eval mode. Single-word tasks take at
                most one per pair.
            num_items_in_batch: target tokens of the whole update (the Trainer's normaliser).
            kwargs: other keys of the translation batch contract (``tgt_lang``, ``group_index``, ...) are ignored;
                multi-way batches (``pair_index``) are not supported.
        """
        if kwargs.get("pair_index") is not None:
            raise ValueError("LDT trains on pair batches (tgt_input_ids), not multi-way batches (pair_index)")
        if tgt_input_ids is None:
            return LDTOutput(sentence_embedding=self.encoder(input_ids, attention_mask).pooler_output)
        cfg, num_pairs = self.config, input_ids.shape[0]
        if tgt_input_ids.shape[0] != num_pairs:
            raise ValueError(f"{num_pairs} sentences in input_ids but {tgt_input_ids.shape[0]} in tgt_input_ids")
        mask_a = input_ids.ne(cfg.pad_token_id) if attention_mask is None else attention_mask.bool()
        mask_b = tgt_input_ids.ne(cfg.pad_token_id) if tgt_attention_mask is None else tgt_attention_mask.bool()
        text_a, text_b = self.text_tokens(input_ids, mask_a), self.text_tokens(tgt_input_ids, mask_b)
        masked_a, masked_b = self._masked_positions(masked_positions, tgt_masked_positions, text_a, text_b)

        ids, mask = stack_padded((input_ids, mask_a), (tgt_input_ids, mask_b), pad_id=cfg.pad_token_id)
        masked, _ = stack_padded((masked_a.long(), mask_a), (masked_b.long(), mask_b), pad_id=0)
        masked = masked.bool()
        encoded = self.encoder(ids.masked_fill(masked, cfg.masking_token_id), mask, project=False)
        vectors = encoded.pooler_output
        u, v = vectors[:num_pairs], vectors[num_pairs:]
        if labels is not None:
            num_tokens = labels.ne(IGNORE_INDEX).sum()
        else:  # the collator's labels are the target text plus </s>: its encoder format minus STR_TAG
            num_tokens = mask_b.sum() - num_pairs
        out = LDTOutput(sentence_embedding=u, tgt_sentence_embedding=v, num_tokens=num_tokens)

        if cfg.generative_loss_weight > 0:
            out.loss_generative = self._generative_loss(out, encoded, vectors, ids, masked, text_a, text_b)
        if cfg.align_loss_weight > 0:
            out.loss_align = alignment_loss(u, v)  # eq. (5)
        if cfg.sim_loss_weight > 0:
            out.loss_sim = similarity_loss(u, v)  # eq. (6)
        weights = (cfg.generative_loss_weight, cfg.align_loss_weight, cfg.sim_loss_weight)
        total = ldt_loss(out.loss_generative, out.loss_align, out.loss_sim, weights)  # eq. (7)
        # per-batch means next to the Trainer's token normaliser: scaled to this batch's share of the update
        out.loss = total if num_items_in_batch is None else total * num_tokens / num_items_in_batch
        rows = torch.arange(num_pairs, device=vectors.device)
        out.mean_cosine = mean_pairwise_cosine(vectors.detach())
        out.centered_cosine = centered_pair_cosine(vectors.detach(), torch.stack([rows, rows + num_pairs], dim=1))
        return out

    def _masked_positions(
        self,
        masked_a: torch.Tensor | None,
        masked_b: torch.Tensor | None,
        text_a: torch.Tensor,
        text_b: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The given masked positions (checked), else drawn in training mode, else none."""
        if masked_a is None and masked_b is None:
            if self.training:
                return self.draw_mask(text_a, text_b)
            return torch.zeros_like(text_a), torch.zeros_like(text_b)
        masked_a = torch.zeros_like(text_a) if masked_a is None else masked_a.bool()
        masked_b = torch.zeros_like(text_b) if masked_b is None else masked_b.bool()
        if masked_a.shape != text_a.shape or masked_b.shape != text_b.shape:
            raise ValueError("masked_positions / tgt_masked_positions must have the shapes of their input ids")
        if bool((masked_a & ~text_a).any() or (masked_b & ~text_b).any()):
            raise ValueError("only text tokens can be masked (not STR_TAG, </s>, <unk>, the mask token or padding)")
        if self.config.generative_task in SINGLE_WORD_TASKS and bool((masked_a.sum(1) + masked_b.sum(1) > 1).any()):
            raise ValueError(f"generative_task={self.config.generative_task!r} masks at most one token per pair")
        return masked_a, masked_b

    def _generative_loss(
        self,
        out: LDTOutput,
        encoded: BaseModelOutputWithPooling,
        vectors: torch.Tensor,
        ids: torch.LongTensor,
        masked: torch.Tensor,
        text_a: torch.Tensor,
        text_b: torch.Tensor,
    ) -> torch.Tensor:
        """Set the generative parts of ``out`` and return the generative term of eq. (7)."""
        cfg, task, num_pairs = self.config, self.config.generative_task, text_a.shape[0]
        if task in MLM_TASKS:
            logits = self.head(encoded.last_hidden_state[masked], self.get_input_embeddings().weight)
            out.loss_mlm = mlm_loss(logits, ids[masked])
            if task == "mlm":
                return out.loss_mlm
        log_probs = self.vocabulary_log_probs(vectors)  # p(h_S) from the mean-pooled vectors, [2B, V]
        log_p_a, log_p_b = log_probs[:num_pairs], log_probs[num_pairs:]
        ids_a, ids_b = ids[:num_pairs, : text_a.shape[1]], ids[num_pairs:, : text_b.shape[1]]
        # each side reconstructs the tokens of its translation (eq. 3)
        q_a = xtr_labels(ids_b, text_b, cfg.vocab_size, cfg.xtr_label_counts)
        q_b = xtr_labels(ids_a, text_a, cfg.vocab_size, cfg.xtr_label_counts)
        if task in XTR_TASKS:
            out.loss_xtr = xmlm_loss(log_p_a, log_p_b, q_a, q_b)  # eq. (2)-(3)
            if task == "xtr":
                return out.loss_xtr
            if task == "mlm_xtr":
                return out.loss_mlm + out.loss_xtr
        masked_a, masked_b = masked[:num_pairs, : text_a.shape[1]], masked[num_pairs:, : text_b.shape[1]]
        target_a = torch.where(masked_a.any(1), (ids_a * masked_a).sum(1), IGNORE_INDEX)
        target_b = torch.where(masked_b.any(1), (ids_b * masked_b).sum(1), IGNORE_INDEX)
        side_a = (target_a >= 0)[:, None]
        out.loss_smlm = smlm_loss(  # eq. (1): from the masked sentence and from its translation
            torch.where(side_a, log_p_a, log_p_b), torch.where(side_a, log_p_b, log_p_a), target_a.maximum(target_b)
        )
        if task == "smlm":
            return out.loss_smlm
        return xmlm_loss(log_p_a, log_p_b, ugt_labels(q_a, target_a), ugt_labels(q_b, target_b))  # eq. (2), (4)


LDTModel.register_for_auto_class("AutoModel")
LDTForAlignment.register_for_auto_class("AutoModelForPreTraining")

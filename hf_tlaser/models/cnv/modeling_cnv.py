"""cNV (Li & Mak): cross-lingual sentence/document vectors from a pair of bilingual NMT models a->b and b->a.

Both NMT models are trained first (here: any Hugging Face seq2seq checkpoints, e.g. Marian/opus-mt style), then
copied in and frozen. Three shared layers are inserted between each encoder and its decoder and are the only
parameters trained:

1. a GRU over the encoder states h_i, giving z_i (d_h);
2. the r-head self-attentive summary of eq. 1-2, giving the context matrix P = [p_1 .. p_r] (r x d_h);
3. a linear map of each p_m to the decoder width: the r vectors are the "encoder states" the frozen decoder attends
   to (through its own cross-attention), so the decoder sees the input only through P.

Training (eq. 9): (1 - beta) x (l_mt(a->b) + l_mt(b->a)) + beta x the distance cost of eq. 7-8 between P(a) and
P(b) of a translation pair, against N_s in-batch negatives. At test time a sentence goes through its own language's
encoder and the shared layers only (cNV(y), Fig. 1c): no translation. The sentence vector is the concatenation
(eq. 5, ``sentence_vector="con"``) or the sum (eq. 3) of the r context vectors.

The paper leaves open how the shared layers meet the decoder and the GRU's direction (Fig. 1 is not in the text):
the memory map of layer 3 and a one-directional GRU are this implementation's reading (``gru_bidirectional`` is an
option).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence
from transformers import AutoConfig, AutoModelForSeq2SeqLM, AutoTokenizer, PreTrainedModel
from transformers.modeling_outputs import BaseModelOutput
from transformers.utils import ModelOutput, logging

from ..common.encode import encode_texts
from ..common.losses import centered_pair_cosine, mean_pairwise_cosine, sample_negatives
from ..common.remote_code import ModelFolderMixin
from ..common.rnn import run_rnn
from .configuration_cnv import CNVConfig

try:  # transformers >= 5 tracks which weights were loaded; older versions use torch.nn.init directly
    from transformers import initialization as init
except ImportError:  # pragma: no cover
    from torch.nn import init

logger = logging.get_logger(__name__)


@dataclass
class CNVDistanceOutput:
    """Parts of the cNV distance cost for one batch of parallel pairs.

    Attributes:
        total: sum over pairs i and negatives j of l_dj (eq. 7), i.e. eq. 9's distance term before beta.
        d_p: Frobenius distance of each pair, ``|P(a) - P(b)|`` (squared with ``squared``) [B].
        d_n: Frobenius distance to each negative, ``|P(a) - P(b_j)|`` (squared with ``squared``) [N_s, B].
        hinge: l_dj for each negative [N_s, B].
        v_norm: average Frobenius norm of the 2B context matrices of the batch.
    """

    total: torch.Tensor
    d_p: torch.Tensor
    d_n: torch.Tensor
    hinge: torch.Tensor
    v_norm: torch.Tensor


def cnv_distance_loss(
    p_a: torch.Tensor, p_b: torch.Tensor, negatives: torch.LongTensor, alpha: float, squared: bool = False
) -> CNVDistanceOutput:
    """The distance cost of eq. 7-9 between context matrices ``p_a[i]`` and ``p_b[i]`` of translation pairs.

    Args:
        p_a, p_b: [B, r, d_h] (or [B, D]) context matrices P(a), P(b); row i of each is a translation pair.
        negatives: LongTensor[N_s, B], rows of ``p_b`` that are the negatives b_j of ``p_a[i]``.
        alpha: the margin. squared: squared Frobenius distances (the paper's text, whose hinge ||P|| can switch off
            by growing); False (default): plain norms (scale-free: ``CNVConfig.distance_squared``).
    """
    if p_a.shape != p_b.shape:
        raise ValueError(f"p_a {tuple(p_a.shape)} and p_b {tuple(p_b.shape)} must have one shape")
    p_a, p_b = p_a.float().flatten(1), p_b.float().flatten(1)
    v_norm = torch.cat([p_a, p_b]).norm(dim=-1).mean()

    def dist(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        sq = ((x - y) ** 2).sum(-1)
        return sq if squared else sq.clamp_min(1e-12).sqrt()  # sqrt has an infinite gradient at 0

    d_p = dist(p_a, p_b)
    d_n = dist(p_a.unsqueeze(0), p_b[negatives])
    k = d_p - d_n  # eq. (8)
    hinge = F.relu(alpha + alpha * k / (2 * v_norm + 1))  # eq. (7)
    return CNVDistanceOutput(total=hinge.sum(), d_p=d_p, d_n=d_n, hinge=hinge, v_norm=v_norm)  # eq. (9): sum_j


class SelfAttentiveSummary(nn.Module):
    """The r-head self-attentive summary of eq. 1-2: each head m scores every position i by the inner product of
    its own query and key of z_i, and returns the softmax-weighted sum of its values, p_m (d_h)."""

    def __init__(self, hidden_size: int, num_heads: int) -> None:
        super().__init__()
        self.hidden_size, self.num_heads = hidden_size, num_heads
        self.query = nn.Linear(hidden_size, num_heads * hidden_size)  # W_q^m, b_q^m for every head m
        self.key = nn.Linear(hidden_size, num_heads * hidden_size)
        self.value = nn.Linear(hidden_size, num_heads * hidden_size)

    def forward(self, z: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """z [B, S, d_h], mask [B, S] (1 = token) -> P [B, r, d_h]."""
        heads = (*z.shape[:2], self.num_heads, self.hidden_size)
        q, k, v = self.query(z).view(heads), self.key(z).view(heads), self.value(z).view(heads)
        scores = (q * k).sum(-1).float() / math.sqrt(self.hidden_size)  # eq. (1), [B, S, r]
        scores = scores.masked_fill(~mask.bool()[..., None], float("-inf"))
        g = scores.softmax(dim=1).to(v.dtype)
        return torch.einsum("bsr,bsrd->brd", g, v)  # eq. (2)


@dataclass
class CNVOutput(ModelOutput):
    """Output of :class:`CNVModel`.

    Attributes:
        loss: eq. 9 summed over the batch, divided by the target tokens (or by ``num_items_in_batch``).
        sentence_embedding, sentence_embedding_b: cNV(y) vectors of the a-side and b-side sentences [B, D].
        loss_mt: the two translation cross entropies, summed over target tokens (before 1 - beta).
        loss_distance: beta x the distance cost (eq. 7-9), summed over pairs and negatives.
        d_p, d_n, hinge, v_norm: batch means of the pair and negative distances and of l_dj, and the normaliser.
        mean_cosine: mean cosine between the 2B vectors. centered_cosine: mean cosine of the translation pairs after
            removing the batch mean (near 0: collapsed or unaligned).
        skipped_pair_losses: 1 when the distance cost was skipped (a batch of one pair), else 0.
        num_tokens: target tokens of both directions in this batch.
    """

    loss: torch.Tensor | None = None
    sentence_embedding: torch.Tensor | None = None
    sentence_embedding_b: torch.Tensor | None = None
    loss_mt: torch.Tensor | None = None
    loss_distance: torch.Tensor | None = None
    d_p: torch.Tensor | None = None
    d_n: torch.Tensor | None = None
    hinge: torch.Tensor | None = None
    v_norm: torch.Tensor | None = None
    mean_cosine: torch.Tensor | None = None
    centered_cosine: torch.Tensor | None = None
    skipped_pair_losses: torch.Tensor | None = None
    num_tokens: torch.Tensor | None = None


def _seq2seq_from_dict(config: dict) -> PreTrainedModel:
    """An untrained Hugging Face seq2seq model from a ``config.to_dict()``."""
    values = dict(config)
    return AutoModelForSeq2SeqLM.from_config(AutoConfig.for_model(values.pop("model_type"), **values))


def _width(config) -> int:
    return getattr(config, "d_model", None) or config.hidden_size


class CNVPreTrainedModel(ModelFolderMixin, PreTrainedModel):
    config_class = CNVConfig
    config: CNVConfig
    base_model_prefix = "cnv"
    main_input_name = "input_ids_a"

    @torch.no_grad()
    def _init_weights(self, module: nn.Module) -> None:
        """The shared layers: xavier-uniform linear weights and zero biases (the GRU keeps PyTorch's uniform
        +-1/sqrt(hidden)). The NMT models are initialised by their own classes and then overwritten by the copied
        weights."""
        if isinstance(module, nn.Linear):
            init.xavier_uniform_(module.weight)
            if module.bias is not None:
                init.zeros_(module.bias)
        elif isinstance(module, nn.GRU):
            bound = 1.0 / math.sqrt(module.hidden_size)
            for param in module.parameters(recurse=False):
                init.uniform_(param, -bound, bound)


class CNVModel(CNVPreTrainedModel):
    """Two bilingual NMT models (``nmt_a_to_b``, ``nmt_b_to_a``) with the cNV shared layers; ``nmt[lang]`` is the
    one that reads ``lang``."""

    # forward takes ``num_items_in_batch`` (the target tokens of the whole update), as the T-LASER models
    accepts_loss_kwargs = True

    def __init__(self, config: CNVConfig) -> None:
        super().__init__(config)
        if config.nmt_a_to_b is None or config.nmt_b_to_a is None:
            raise ValueError("a CNVConfig needs nmt_a_to_b and nmt_b_to_a; build one with CNVModel.from_nmt_pair")
        a = config.languages[0]
        # direct children, so that post_init collects their tied embeddings (a ModuleDict would hide them)
        self.nmt_a_to_b = _seq2seq_from_dict(config.nmt_a_to_b)
        self.nmt_b_to_a = _seq2seq_from_dict(config.nmt_b_to_a)
        widths = {lang: _width(model.config) for lang, model in self.nmt.items()}
        if len(set(widths.values())) != 1:
            raise ValueError(f"the shared layers need NMT models of one width; got {widths}")
        width, hidden = widths[a], config.shared_hidden_size
        self.gru = nn.GRU(
            width,
            hidden // 2 if config.gru_bidirectional else hidden,
            batch_first=True,
            bidirectional=config.gru_bidirectional,
        )
        self.dropout = nn.Dropout(config.shared_dropout)
        self.summary = SelfAttentiveSummary(hidden, config.num_summary_heads)
        self.memory = nn.Linear(hidden, width)
        self.tokenizers: dict[str, object] = {}
        self.post_init()
        if config.freeze_nmt:
            for nmt in self.nmt.values():
                nmt.requires_grad_(False).eval()

    @property
    def nmt(self) -> dict[str, PreTrainedModel]:
        """The NMT model that reads each language: ``{a: a->b model, b: b->a model}``."""
        a, b = self.config.languages
        return {a: self.nmt_a_to_b, b: self.nmt_b_to_a}

    @property
    def languages(self) -> list[str]:
        return list(self.config.languages)

    def train(self, mode: bool = True) -> CNVModel:
        """Frozen NMT models stay in eval mode (no dropout) while the shared layers train."""
        super().train(mode)
        if self.config.freeze_nmt:
            for nmt in self.nmt.values():
                nmt.eval()
        return self

    def _check_lang(self, lang: str) -> None:
        if lang not in self.config.languages:
            raise ValueError(f"lang={lang!r}: this cNV model embeds {self.config.languages} only")

    def summarize(self, input_ids: torch.LongTensor, attention_mask: torch.Tensor, lang: str) -> torch.Tensor:
        """The context matrix P [B, r, d_h] of sentences in ``lang`` (its NMT encoder, the GRU, eq. 1-2)."""
        self._check_lang(lang)
        if attention_mask is None:
            attention_mask = input_ids.ne(self.nmt[lang].config.pad_token_id).long()
        encoder = self.nmt[lang].get_encoder()
        frozen = self.config.freeze_nmt
        with torch.set_grad_enabled(torch.is_grad_enabled() and not frozen):  # nothing to train below the GRU
            states = encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        lengths = attention_mask.sum(1).clamp(min=1).cpu()
        packed = pack_padded_sequence(states, lengths, batch_first=True, enforce_sorted=False)
        z, _ = run_rnn(self.gru, packed)
        z, _ = pad_packed_sequence(z, batch_first=True, total_length=states.shape[1])
        return self.summary(self.dropout(z), attention_mask)

    def sentence_vector(self, context: torch.Tensor) -> torch.Tensor:
        """cNV_con (eq. 5) or cNV_sum (eq. 3) of context matrices [B, r, d_h]."""
        return context.flatten(1) if self.config.sentence_vector == "con" else context.sum(1)

    def embed(self, input_ids: torch.LongTensor, attention_mask: torch.Tensor | None, lang: str) -> torch.Tensor:
        """cNV(y) vectors [B, D] of sentences in ``lang``, through that language's encoder only (no translation)."""
        return self.sentence_vector(self.summarize(input_ids, attention_mask, lang))

    def _translation_loss(self, context: torch.Tensor, labels: torch.LongTensor, lang: str) -> torch.Tensor:
        """Cross entropy (summed over target tokens) of the NMT model reading ``lang``, its decoder attending to
        the r memory vectors of ``context`` instead of its encoder states."""
        nmt = self.nmt[lang]
        memory = self.memory(context)
        start = nmt.config.decoder_start_token_id
        pad = nmt.config.pad_token_id
        decoder_input_ids = labels.new_full(labels.shape, pad)
        decoder_input_ids[:, 0] = pad if start is None else start
        decoder_input_ids[:, 1:] = labels[:, :-1].masked_fill(labels[:, :-1].eq(-100), pad)
        logits = nmt(
            encoder_outputs=BaseModelOutput(last_hidden_state=memory),
            attention_mask=torch.ones(memory.shape[:2], dtype=torch.long, device=memory.device),
            decoder_input_ids=decoder_input_ids,
            use_cache=False,
        ).logits
        return F.cross_entropy(
            logits.flatten(0, 1).float(),
            labels.flatten(),
            ignore_index=-100,
            label_smoothing=self.config.label_smoothing,
            reduction="sum",
        )

    def forward(
        self,
        input_ids_a: torch.LongTensor,
        attention_mask_a: torch.Tensor | None = None,
        input_ids_b: torch.LongTensor | None = None,
        attention_mask_b: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        num_items_in_batch: int | torch.Tensor | None = None,
    ) -> CNVOutput:
        """Vectors of a batch of translation pairs, and with ``labels`` the loss of eq. 9.

        Args:
            input_ids_a, attention_mask_a: the a-side sentences, tokenized for the a->b model [B, S].
            input_ids_b, attention_mask_b: the b-side sentences, tokenized for the b->a model [B, S'].
            labels: [2B, L], -100 padded: rows 0..B-1 the b-side sentences tokenized for the a->b model (its
                targets), rows B..2B-1 the a-side sentences tokenized for the b->a model.
            num_items_in_batch: normaliser of the loss (target tokens of the whole update); default: this batch's.
        """
        a, b = self.config.languages
        context_a = self.summarize(input_ids_a, attention_mask_a, a)
        out = CNVOutput(sentence_embedding=self.sentence_vector(context_a))
        if input_ids_b is None:
            return out
        context_b = self.summarize(input_ids_b, attention_mask_b, b)
        out.sentence_embedding_b = self.sentence_vector(context_b)
        num = context_a.shape[0]
        vectors = torch.cat([out.sentence_embedding, out.sentence_embedding_b]).detach()
        rows = torch.arange(num, device=vectors.device)
        out.mean_cosine = mean_pairwise_cosine(vectors)
        out.centered_cosine = centered_pair_cosine(vectors, torch.stack([rows, rows + num], dim=1))
        if labels is None:
            return out
        if labels.shape[0] != 2 * num:
            raise ValueError(f"labels has {labels.shape[0]} rows; expected 2 x {num} (a->b targets, then b->a)")
        beta = self.config.distance_beta
        out.loss_mt = self._translation_loss(context_a, labels[:num], a) + self._translation_loss(
            context_b, labels[num:], b
        )
        out.num_tokens = labels.ne(-100).sum()
        total = (1 - beta) * out.loss_mt  # eq. (9), translation part
        skip = num < 2 or self.config.num_negatives < 1
        out.skipped_pair_losses = torch.tensor(int(skip), device=vectors.device)
        if not skip:
            negatives = sample_negatives(num, self.config.num_negatives, vectors.device)
            dist = cnv_distance_loss(context_a, context_b, negatives, self.config.alpha, self.config.distance_squared)
            out.loss_distance = beta * dist.total
            total = total + out.loss_distance  # eq. (9), distance part (NV: beta = 0, logged only)
            out.d_p, out.d_n = dist.d_p.detach().mean(), dist.d_n.detach().mean()
            out.hinge, out.v_norm = dist.hinge.detach().mean(), dist.v_norm.detach()
        normaliser = num_items_in_batch if num_items_in_batch is not None else out.num_tokens.clamp(min=1)
        out.loss = total / normaliser
        return out

    def get_tokenizer(self, lang: str):
        """The tokenizer of the encoder that reads ``lang``: held in memory, else loaded from the folder or Hub
        repo the model came from (its ``tokenizer_<lang>`` subfolder)."""
        self._check_lang(lang)
        if lang not in self.tokenizers:
            source = self.name_or_path
            if not source:
                raise ValueError(f"no tokenizer for {lang!r}: pass tokenizer=..., or load the model from a folder")
            self.tokenizers[lang] = AutoTokenizer.from_pretrained(source, subfolder=f"tokenizer_{lang}")
        return self.tokenizers[lang]

    def encode(
        self,
        texts: str | list[str],
        tokenizer=None,
        *,
        lang: str,
        max_tokens: int = 16000,
        batch_size: int = 512,
        normalize: bool = False,
        convert_to_tensor: bool = False,
        truncation: bool = False,
        max_length: int | None = None,
        autocast_dtype: torch.dtype | None = None,
        sort_by_length: bool = True,
        show_progress: bool | None = None,
    ) -> np.ndarray | torch.Tensor:
        """cNV(y) vectors of ``texts`` in ``lang`` as float32 numpy [N, D] (a tensor with ``convert_to_tensor``).

        A single ``str`` gives one vector [D], an empty list [0, D]. ``tokenizer`` defaults to
        ``get_tokenizer(lang)``. Batching as ``hf_tlaser.encode`` (length-sorted, ``max_tokens`` padded tokens).
        """
        self._check_lang(lang)

        tokenizer = tokenizer or self.get_tokenizer(lang)

        def pooled(ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
            vectors = self.embed(ids, mask, lang)
            if self.config.combine_translation:
                vectors = vectors + self._translation_vectors(ids, mask, lang, tokenizer)
            return vectors

        return encode_texts(
            self,
            pooled,
            tokenizer,
            texts,
            limit=self.nmt[lang].config.max_position_embeddings,
            dim=self.config.embedding_size,
            max_tokens=max_tokens,
            batch_size=batch_size,
            normalize=normalize,
            convert_to_tensor=convert_to_tensor,
            truncation=truncation,
            max_length=max_length,
            autocast_dtype=autocast_dtype,
            sort_by_length=sort_by_length,
            show_progress=show_progress,
        )

    def _translation_vectors(
        self, input_ids: torch.LongTensor, attention_mask: torch.Tensor, lang: str, tokenizer
    ) -> torch.Tensor:
        """The other half of eq. 4 / 6: translate with the NMT model that reads ``lang`` (greedy, its own encoder
        and decoder, untouched by the shared layers), then embed the translations through the other language's
        encoder."""
        other = next(code for code in self.config.languages if code != lang)
        nmt = self.nmt[lang]
        limit = min(nmt.config.max_position_embeddings, 2 * input_ids.shape[1] + 10)
        generated = nmt.generate(
            input_ids=input_ids, attention_mask=attention_mask, num_beams=1, do_sample=False, max_new_tokens=limit
        )
        texts = tokenizer.batch_decode(generated, skip_special_tokens=True)
        encoded = self.get_tokenizer(other)(
            texts, padding=True, truncation=True, max_length=limit, return_tensors="pt"
        ).to(input_ids.device)
        return self.embed(encoded["input_ids"], encoded["attention_mask"], other)

    def save_extra_files(self, save_directory: str | os.PathLike) -> None:
        """Each language's tokenizer into ``tokenizer_<lang>/``."""
        for lang in self.config.languages:
            try:
                tokenizer = self.get_tokenizer(lang)
            except (OSError, ValueError) as err:
                logger.warning("saved %s without a tokenizer for %r (%s)", save_directory, lang, err)
                continue
            tokenizer.save_pretrained(os.path.join(save_directory, f"tokenizer_{lang}"))

    @classmethod
    def from_nmt_pair(
        cls,
        a_to_b: str | os.PathLike | PreTrainedModel,
        b_to_a: str | os.PathLike | PreTrainedModel,
        languages: tuple[str, str] | list[str] = ("en", "de"),
        tokenizers: dict | None = None,
        **config_kwargs,
    ) -> CNVModel:
        """A cNV model around two bilingual seq2seq models (folders, Hub ids or loaded models) whose weights are
        copied in (and frozen unless ``freeze_nmt=False``); the shared layers start untrained.

        ``tokenizers`` (lang -> tokenizer) defaults to the tokenizers saved with each NMT folder / Hub id.
        """
        languages = list(languages)
        tokenizers = dict(tokenizers or {})
        models = []
        for lang, source in zip(languages, (a_to_b, b_to_a)):
            if isinstance(source, PreTrainedModel):
                models.append(source)
                continue
            models.append(AutoModelForSeq2SeqLM.from_pretrained(source))
            if lang not in tokenizers:
                tokenizers[lang] = AutoTokenizer.from_pretrained(source)
        config = CNVConfig(
            languages=languages,
            nmt_a_to_b=models[0].config.to_dict(),
            nmt_b_to_a=models[1].config.to_dict(),
            **config_kwargs,
        )
        model = cls(config)
        for lang, nmt in zip(languages, models):
            model.nmt[lang].load_state_dict(nmt.state_dict())
        model.tokenizers = tokenizers
        return model


CNVModel.register_for_auto_class("AutoModel")

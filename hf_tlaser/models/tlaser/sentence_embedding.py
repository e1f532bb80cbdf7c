"""Pieces shared by the T-LASER and LASER model files: the cT-LASER distance-constraint loss (Li & Mak 2020,
eq. 7-10), the optional in-batch alignment loss, and token-budget ``encode``.

This file travels with the model code when a model is saved with ``trust_remote_code`` support, so it imports
only torch and transformers.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from transformers.utils import ModelOutput, logging

logger = logging.get_logger(__name__)


@dataclass
class DistanceLossOutput:
    """Parts of the distance-constraint loss for one batch of parallel pairs.

    Attributes:
        total: beta * sum_i d_p(i) + lambda / N_s * sum_j sum_i (hinge_ab + hinge_ba), a scalar (eq. 10 without the
            translation term).
        d_p: normalised distance of each parallel pair, shape [B] (eq. 7).
        d_n: normalised distance of each a->b negative, shape [N_s, B] (eq. 8).
        hinge: hinge_ab + hinge_ba for each negative, shape [N_s, B] (eq. 9).
        v_norm: the normaliser, mean L2 norm of the two batch-mean vectors.
    """

    total: torch.Tensor
    d_p: torch.Tensor
    d_n: torch.Tensor
    hinge: torch.Tensor
    v_norm: torch.Tensor


def sample_negatives(
    batch_size: int,
    num_negatives: int,
    device: torch.device | None = None,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Draw ``num_negatives`` in-batch negative indices for every row, never the row itself: LongTensor[N_s, B].

    Sampling is with replacement, as in the authors' code, but excludes the positive (their code could pick it).
    """
    if batch_size < 2:
        raise ValueError(f"in-batch negatives need at least 2 pairs in a batch, got batch_size={batch_size}")
    offsets = torch.randint(0, batch_size - 1, (num_negatives, batch_size), device=device, generator=generator)
    rows = torch.arange(batch_size, device=device)
    return offsets + (offsets >= rows).long()


def distance_constraint_loss(
    p_a: torch.Tensor,
    p_b: torch.Tensor,
    neg_ab: torch.Tensor,
    neg_ba: torch.Tensor,
    *,
    alpha: float = 0.5,
    beta: float = 0.25,
    lam: float = 0.125,
    distance: str = "l2",
    eps: float = 1e-6,
    vnorm_grad: bool = True,
) -> DistanceLossOutput:
    """cT-LASER distance constraint between parallel sentence vectors ``p_a[i]`` and ``p_b[i]``.

    Args:
        p_a, p_b: sentence vectors [B, d]; row i of each is a translation pair.
        neg_ab: LongTensor[N_s, B] of indices into ``p_b``: negatives of ``p_a[i]``.
        neg_ba: LongTensor[N_s, B] of indices into ``p_a``: negatives of ``p_b[i]``.
        alpha: hinge margin. beta: weight of d_p. lam: weight of the averaged hinge terms.
        distance: "l2" (authors' code, plain norm) or "squared_l2" (paper text, eq. 7-8).
        eps: added to v_norm. vnorm_grad: False detaches v_norm from the graph.
    """
    if distance not in ("l2", "squared_l2"):
        raise ValueError(f"distance={distance!r}; expected 'l2' or 'squared_l2'")
    if p_a.shape != p_b.shape or p_a.dim() != 2:
        raise ValueError(f"p_a {tuple(p_a.shape)} and p_b {tuple(p_b.shape)} must both be [B, d]")
    p_a, p_b = p_a.float(), p_b.float()
    v_norm = (p_a.mean(0).norm() + p_b.mean(0).norm()) / 2
    if not vnorm_grad:
        v_norm = v_norm.detach()
    scale = v_norm + eps

    def dist(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        diff = x - y
        sq = (diff * diff).sum(-1)
        # identical sentences (names, numbers) give sq = 0, where sqrt has an infinite gradient
        return (sq if distance == "squared_l2" else sq.clamp_min(1e-12).sqrt()) / scale

    d_p = dist(p_a, p_b)  # eq. (7)
    d_n_ab = dist(p_a.unsqueeze(0), p_b[neg_ab])  # eq. (8), [N_s, B]
    d_n_ba = dist(p_b.unsqueeze(0), p_a[neg_ba])
    hinge = F.relu(alpha - (d_n_ab - d_p)) + F.relu(alpha - (d_n_ba - d_p))  # eq. (9), both directions
    total = beta * d_p.sum() + lam / neg_ab.shape[0] * hinge.sum()  # eq. (10) without 0.5 * l_mt
    return DistanceLossOutput(total=total, d_p=d_p, d_n=d_n_ab, hinge=hinge, v_norm=v_norm)


def align_loss(p_a: torch.Tensor, p_b: torch.Tensor, scale: float = 20.0) -> torch.Tensor:
    """In-batch alignment loss (Lightweight Dual Transformer, eq. 5), summed over the batch.

    Cross entropy of each pair against the other sentences of the batch, in both directions, on cosine similarity
    times ``scale`` (the paper uses raw inner products; cosine keeps the scale of the vectors free).
    """
    logits = scale * F.normalize(p_a.float(), dim=-1) @ F.normalize(p_b.float(), dim=-1).T
    target = torch.arange(logits.shape[0], device=logits.device)
    return F.cross_entropy(logits, target, reduction="sum") + F.cross_entropy(logits.T, target, reduction="sum")


@torch.no_grad()
def mean_pairwise_cosine(vectors: torch.Tensor) -> torch.Tensor:
    """Mean cosine between distinct rows: near 1 means the vectors have collapsed onto one direction."""
    n = vectors.shape[0]
    if n < 2:
        return vectors.new_zeros(())
    unit = F.normalize(vectors.float(), dim=-1)
    total = unit.sum(0)
    return ((total @ total) - n) / (n * (n - 1))


class SentenceEncoderMixin:
    """``encode`` for encoder models whose forward returns ``pooler_output`` as the sentence vector."""

    @torch.inference_mode()
    def encode(
        self,
        texts: list[str],
        tokenizer,
        *,
        max_tokens: int = 16000,
        batch_size: int = 512,
        normalize: bool = False,
        convert_to_tensor: bool = False,
        truncation: bool = False,
        max_length: int | None = None,
        autocast_dtype: torch.dtype | None = None,
        sort_by_length: bool = True,
        show_progress: bool | None = None,
    ):
        """Embed ``texts``; returns a float32 numpy array [N, d] in input order (a tensor if ``convert_to_tensor``).

        Sentences are sorted by length and grouped so that rows x padded length stays under ``max_tokens``
        (at most ``batch_size`` rows); the last encoder layer only computes the pooled position. An empty string
        embeds ``STR_TAG </s>``. Inputs longer than ``max_position_embeddings`` raise unless ``truncation=True``.
        """
        if isinstance(texts, str):
            raise TypeError("encode expects a list of strings, got a single str")
        limit = self.config.max_position_embeddings
        encoded = tokenizer(
            list(texts), add_special_tokens=True, truncation=truncation, max_length=max_length or limit
        )["input_ids"]
        too_long = [i for i, ids in enumerate(encoded) if len(ids) > limit]
        if too_long:
            raise ValueError(
                f"{len(too_long)} input(s) exceed max_position_embeddings={limit} tokens (first: text #{too_long[0]}"
                f" with {len(encoded[too_long[0]])} tokens); pass truncation=True to cut them"
            )
        order = sorted(range(len(encoded)), key=lambda i: -len(encoded[i])) if sort_by_length else range(len(encoded))
        batches, current, width = [], [], 0
        for i in order:
            new_width = max(width, len(encoded[i]))
            if current and (new_width * (len(current) + 1) > max_tokens or len(current) >= batch_size):
                batches.append(current)
                current, new_width = [], len(encoded[i])
            current.append(i)
            width = new_width
        if current:
            batches.append(current)

        device = next(self.parameters()).device
        pad_id = tokenizer.pad_token_id
        out = torch.empty(len(encoded), self.config.hidden_size, dtype=torch.float32)
        was_training = self.training
        self.eval()
        progress = logging.tqdm(
            batches,
            desc="encode",
            unit="batch",
            disable=not (len(batches) > 4 if show_progress is None else show_progress),
        )
        for batch in progress:
            length = max(len(encoded[i]) for i in batch)
            ids = torch.full((len(batch), length), pad_id, dtype=torch.long)
            for row, i in enumerate(batch):
                ids[row, : len(encoded[i])] = torch.tensor(encoded[i])
            ids = ids.to(device)
            with torch.autocast(device.type, dtype=autocast_dtype, enabled=autocast_dtype is not None):
                pooled = self(input_ids=ids, attention_mask=ids.ne(pad_id).long(), pooled_only=True).pooler_output
            out[torch.tensor(batch)] = pooled.float().cpu()
        self.train(was_training)
        if normalize:
            out = F.normalize(out, dim=-1)
        return out if convert_to_tensor else out.numpy()


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
        num_tokens: number of target tokens in this batch.
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
    num_tokens: torch.Tensor | None = None


class TranslationMixin:
    """Loss, language handling and decoding shared by the T-LASER and LASER translation models.

    Subclasses provide ``self.encoder`` (returning ``pooler_output``), ``decode_logits(decoder_input_ids,
    sentence_embedding, tgt_lang) -> logits`` and a config with the distance-loss fields.
    """

    # forward takes ``num_items_in_batch``: the Trainer then passes the token count of the whole update and leaves
    # the gradient-accumulation scaling to the loss normalisation
    accepts_loss_kwargs = True

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

    def save_pretrained(self, save_directory, *args, **kwargs):
        """Save, and map ``AutoModel`` to the encoder class so that ``AutoModel.from_pretrained`` of a translation
        checkpoint gives the embedding model."""
        encoder_cls = type(self.encoder)
        auto_map = dict(getattr(self.config, "auto_map", None) or {})
        auto_map["AutoModel"] = f"{encoder_cls.__module__.rsplit('.', 1)[-1]}.{encoder_cls.__name__}"
        self.config.auto_map = auto_map
        return super().save_pretrained(save_directory, *args, **kwargs)

    def encode_sentences(self, input_ids: torch.LongTensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
        return self.encoder(input_ids=input_ids, attention_mask=attention_mask, pooled_only=True).pooler_output

    def forward(
        self,
        input_ids: torch.LongTensor,
        attention_mask: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        tgt_lang=None,
        decoder_input_ids: torch.LongTensor | None = None,
        tgt_input_ids: torch.LongTensor | None = None,
        tgt_attention_mask: torch.Tensor | None = None,
        src_index: torch.LongTensor | None = None,
        pair_index: torch.LongTensor | None = None,
        num_items_in_batch: int | torch.Tensor | None = None,
    ) -> TranslationOutput:
        """Translation loss (+ cT-LASER distance loss) for a batch.

        Args:
            input_ids, attention_mask: sentences to encode [N, S] (encoder format ``STR_TAG ... </s>``).
            labels: target tokens followed by ``</s>``, padded with -100, [T, L].
            tgt_lang: target language of each label row (codes or indices into ``config.languages``).
            decoder_input_ids: default: ``labels`` shifted right behind ``decoder_start_token_id``.
            tgt_input_ids, tgt_attention_mask: the targets in encoder format [T, S']; encoded in the same encoder
                call as the sources and paired with them for the distance loss.
            src_index: row of ``input_ids`` that is the source of each label row (multi-way batches; default
                ``arange(T)``).
            pair_index: LongTensor[P, 2] of rows of the encoded batch that are translations of each other.
            num_items_in_batch: normaliser of the loss (target tokens of the whole update); default: this batch's.
        """
        device = input_ids.device
        num_src = input_ids.shape[0]
        if tgt_input_ids is not None:
            if pair_index is not None:
                raise ValueError("pass either tgt_input_ids (pair batches) or pair_index (multi-way), not both")
            input_ids, attention_mask = _stack_padded(
                (input_ids, attention_mask),
                (tgt_input_ids, tgt_attention_mask),
                pad_id=self.config.pad_token_id,
            )
            rows = torch.arange(num_src, device=device)
            pair_index = torch.stack([rows, rows + num_src], dim=1)
        vectors = self.encode_sentences(input_ids, attention_mask)
        src_vectors = vectors[:num_src] if src_index is None else vectors[src_index]
        out = TranslationOutput(sentence_embedding=src_vectors)
        if labels is None:
            return out
        tgt_lang = self.lang_ids(tgt_lang, labels.shape[0], device)
        if decoder_input_ids is None:
            decoder_input_ids = self.shift_right(labels)
        logits = self.decode_logits(decoder_input_ids, src_vectors, tgt_lang)
        loss_mt = F.cross_entropy(
            logits.flatten(0, 1).float(),
            labels.flatten(),
            ignore_index=-100,
            label_smoothing=self.config.label_smoothing,
            reduction="sum",
        )
        out.logits, out.loss_mt, out.num_tokens = logits, loss_mt, labels.ne(-100).sum()
        total = loss_mt
        if pair_index is not None and (self.config.distance_beta > 0 or self.config.align_loss_weight > 0):
            total = self._pair_losses(vectors, pair_index, out)
        out.mean_cosine = mean_pairwise_cosine(vectors.detach())
        normaliser = num_items_in_batch if num_items_in_batch is not None else out.num_tokens.clamp(min=1)
        out.loss = total / normaliser
        return out

    def _pair_losses(self, vectors: torch.Tensor, pair_index: torch.LongTensor, out: TranslationOutput) -> torch.Tensor:
        """Add the distance (eq. 7-10) and alignment losses of the pairs to ``out``; return the total sum."""
        cfg = self.config
        p_a, p_b = vectors[pair_index[:, 0]], vectors[pair_index[:, 1]]
        total = out.loss_mt
        if cfg.distance_beta > 0:
            num = len(pair_index)
            dist = distance_constraint_loss(
                p_a,
                p_b,
                sample_negatives(num, cfg.distance_negatives, vectors.device),
                sample_negatives(num, cfg.distance_negatives, vectors.device),
                alpha=cfg.distance_alpha,
                beta=cfg.distance_beta,
                lam=cfg.distance_hinge_weight,
                distance=cfg.distance,
                eps=cfg.distance_eps,
                vnorm_grad=cfg.distance_vnorm_grad,
            )
            total = cfg.distance_mt_weight * out.loss_mt + dist.total  # eq. (10)
            out.loss_distance = dist.total
            out.d_p, out.d_n, out.hinge, out.v_norm = (
                dist.d_p.detach().mean(),
                dist.d_n.detach().mean(),
                dist.hinge.detach().mean() / 2,
                dist.v_norm.detach(),
            )
        if cfg.align_loss_weight > 0:
            out.loss_align = align_loss(p_a, p_b, cfg.align_scale) / len(pair_index)
            # a per-pair mean next to the per-token translation loss: scaled to this batch's share of the update
            total = total + cfg.align_loss_weight * out.loss_align * out.num_tokens
        return total

    @torch.no_grad()
    def generate(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        *,
        sentence_embeddings: torch.Tensor | None = None,
        tgt_lang,
        num_beams: int = 1,
        max_new_tokens: int = 64,
        length_penalty: float = 1.0,
    ) -> torch.LongTensor:
        """Decode from sentence vectors (given directly, or encoded from ``input_ids``) into ``tgt_lang``.

        Greedy for ``num_beams=1``, beam search otherwise. Returns token ids [B, L] without the start token,
        ending with ``</s>`` and right-padded with pad.
        """
        if sentence_embeddings is None:
            if input_ids is None:
                raise ValueError("generate needs sentence_embeddings or input_ids")
            sentence_embeddings = self.encode_sentences(input_ids, attention_mask)
        was_training = self.training
        self.eval()
        batch = sentence_embeddings.shape[0]
        langs = self.lang_ids(tgt_lang, batch, sentence_embeddings.device)
        decode = _greedy if num_beams == 1 else _beam_search
        result = decode(self, sentence_embeddings, langs, num_beams, max_new_tokens, length_penalty)
        self.train(was_training)
        return result


def _stack_padded(*parts: tuple[torch.Tensor, torch.Tensor | None], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Concatenate right-padded id batches of different widths along the batch axis."""
    width = max(ids.shape[1] for ids, _ in parts)
    ids = torch.cat([F.pad(i, (0, width - i.shape[1]), value=pad_id) for i, _ in parts])
    masks = [m if m is not None else i.ne(pad_id) for i, m in parts]
    mask = torch.cat([F.pad(m.long(), (0, width - m.shape[1]), value=0) for m in masks])
    return ids, mask


def _greedy(model, vectors, langs, num_beams, max_new_tokens, length_penalty) -> torch.LongTensor:
    cfg = model.config
    seqs = torch.full((vectors.shape[0], 1), cfg.decoder_start_token_id, dtype=torch.long, device=vectors.device)
    done = torch.zeros(vectors.shape[0], dtype=torch.bool, device=vectors.device)
    for _ in range(max_new_tokens):
        next_tok = model.decode_logits(seqs, vectors, langs)[:, -1].argmax(-1)
        next_tok = next_tok.masked_fill(done, cfg.pad_token_id)
        seqs = torch.cat([seqs, next_tok[:, None]], dim=1)
        done |= next_tok.eq(cfg.eos_token_id)
        if bool(done.all()):
            break
    return seqs[:, 1:]


def _beam_search(model, vectors, langs, num_beams, max_new_tokens, length_penalty) -> torch.LongTensor:
    cfg = model.config
    batch, device = vectors.shape[0], vectors.device
    vectors = vectors.repeat_interleave(num_beams, 0)
    langs = langs.repeat_interleave(num_beams, 0)
    seqs = torch.full((batch * num_beams, 1), cfg.decoder_start_token_id, dtype=torch.long, device=device)
    scores = torch.full((batch, num_beams), float("-inf"), device=device)
    scores[:, 0] = 0.0
    finished: list[list[tuple[float, list[int]]]] = [[] for _ in range(batch)]
    done = [False] * batch
    for step in range(1, max_new_tokens + 1):
        logp = model.decode_logits(seqs, vectors, langs)[:, -1].float().log_softmax(-1)
        vocab = logp.shape[-1]
        top_scores, top_idx = (scores.view(-1, 1) + logp).view(batch, -1).topk(2 * num_beams, dim=1)
        next_rows, next_tokens, next_scores = [], [], []
        for b in range(batch):
            alive = []
            for rank, (score, idx) in enumerate(zip(top_scores[b].tolist(), top_idx[b].tolist())):
                row, token = b * num_beams + idx // vocab, idx % vocab
                if token == cfg.eos_token_id:
                    if rank < num_beams and not done[b]:  # an ending counts only if it ranks among the live beams
                        _keep_best(
                            finished[b], (score / step**length_penalty, seqs[row, 1:].tolist() + [token]), num_beams
                        )
                elif len(alive) < num_beams:
                    alive.append((row, token, score if not done[b] else float("-inf")))
            best_alive = max(score for _, _, score in alive)
            if len(finished[b]) >= num_beams and best_alive / step**length_penalty <= min(f[0] for f in finished[b]):
                done[b] = True
            for row, token, score in alive:
                next_rows.append(row)
                next_tokens.append(token)
                next_scores.append(score)
        if all(done):
            break
        seqs = torch.cat([seqs[next_rows], torch.tensor(next_tokens, device=device)[:, None]], dim=1)
        scores = torch.tensor(next_scores, device=device).view(batch, num_beams)
    for b in range(batch):
        if not finished[b]:
            for k in range(num_beams):
                hyp = seqs[b * num_beams + k, 1:].tolist()
                finished[b].append((scores[b, k].item() / max(len(hyp), 1) ** length_penalty, hyp))
    best = [max(f, key=lambda item: item[0])[1] for f in finished]
    width = max(len(h) for h in best)
    return torch.tensor([h + [cfg.pad_token_id] * (width - len(h)) for h in best], device=device)


def _keep_best(hyps: list[tuple[float, list[int]]], hyp: tuple[float, list[int]], size: int) -> None:
    """Add ``hyp`` to the ``size`` best finished hypotheses."""
    hyps.append(hyp)
    if len(hyps) > size:
        hyps.remove(min(hyps, key=lambda item: item[0]))

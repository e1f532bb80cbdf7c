"""The sentence-vector losses every family may train with: the cT-LASER distance constraint (Li & Mak 2020,
eq. 7-10) with its in-batch negatives, the in-batch alignment loss, the translation cross entropy, and the collapse
signals logged next to them."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from transformers.utils import ModelOutput


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


def unique_pairs(
    pair_index: torch.LongTensor, group_index: torch.LongTensor | None = None
) -> tuple[torch.LongTensor, torch.LongTensor]:
    """Pairs of encoded rows with repeats removed (a-b and b-a of a multi-way group are one pair of vectors), and
    the group of each: ``(pairs [P', 2], groups [P'])``. ``group_index`` defaults to every pair its own group.

    Rows come out sorted (smaller row first, pairs in lexicographic order), so pair-mode batches keep their order.
    """
    if group_index is None:
        group_index = torch.arange(len(pair_index), device=pair_index.device)
    if group_index.shape != pair_index.shape[:1]:
        raise ValueError(
            f"group_index {tuple(group_index.shape)} needs one entry per pair of {tuple(pair_index.shape)}"
        )
    pairs, inverse = pair_index.sort(dim=1).values.unique(dim=0, return_inverse=True)
    return pairs, group_index.new_empty(len(pairs)).scatter_(0, inverse, group_index)


def sample_negatives(
    batch_size: int,
    num_negatives: int,
    device: torch.device | None = None,
    generator: torch.Generator | None = None,
    groups: torch.Tensor | None = None,
) -> torch.Tensor:
    """Draw ``num_negatives`` in-batch negative indices for every row: LongTensor[N_s, B].

    A row's candidates are the rows of other groups (``groups``: LongTensor[B], the group of each pair; default:
    every row its own group, so a row excludes only itself). In a multi-way batch the other translations of the
    same group are not negatives. Sampling is uniform among the candidates, with replacement, as in the authors'
    code (which could also pick the positive). With all groups distinct this is the pair-mode draw, identical for
    the same RNG state. A row has no candidate only when the whole batch is one group; that raises ValueError.
    """
    rows = torch.arange(batch_size, device=device)
    groups = rows if groups is None else groups.to(rows.device)
    candidate = groups[None, :] != groups[:, None]  # [B, B]: column j is a candidate negative of row i
    counts = candidate.sum(1)
    if batch_size == 0 or not bool(counts.all()):
        raise ValueError(f"in-batch negatives need pairs from at least 2 groups; got {batch_size} pair(s) of 1 group")
    if bool((counts == batch_size - 1).all()):  # every other row is a candidate: the pair-mode draw
        draw = torch.randint(0, batch_size - 1, (num_negatives, batch_size), device=device, generator=generator)
    else:
        uniform = torch.rand((num_negatives, batch_size), device=device, generator=generator)
        draw = torch.minimum((uniform * counts).long(), counts - 1)
    # the draw-th candidate of each row (for distinct groups: draw + (draw >= row))
    position = candidate.long().cumsum(1)
    return torch.searchsorted(position, draw.T.contiguous() + 1).T


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


def align_loss(
    p_a: torch.Tensor,
    p_b: torch.Tensor,
    scale: float = 20.0,
    groups: torch.Tensor | None = None,
    margin: float = 0.0,
    memory: torch.Tensor | None = None,
    memory_mask: torch.Tensor | None = None,
    memory_mask_ba: torch.Tensor | None = None,
) -> torch.Tensor:
    """In-batch alignment loss (Lightweight Dual Transformer, eq. 5), summed over the batch.

    Cross entropy of each pair against the other sentences of the batch, in both directions, on cosine similarity
    times ``scale`` (the paper uses raw inner products; cosine keeps the scale of the vectors free). ``groups``
    (LongTensor[B]): other pairs of the same group (multi-way translations of one another) are masked out, neither
    positives nor negatives.

    ``margin``: LaBSE's additive margin softmax (Yang et al. 2019, Feng et al. 2022): the positive's cosine minus
    ``margin`` before scaling, in both directions. ``memory`` [N, d]: unit vectors of earlier batches (a cross-batch
    memory, Wang et al. 2020) as extra negatives of every row, in both directions, without gradient;
    ``memory_mask`` [B, N] (True: not a negative of pair i, e.g. the same text or a translation of it), for the
    a -> b direction (a's row finds b among the negatives); ``memory_mask_ba`` [B, N] for b -> a (default: the same).
    """
    a, b = F.normalize(p_a.float(), dim=-1), F.normalize(p_b.float(), dim=-1)
    cosine = a @ b.T
    target = torch.arange(cosine.shape[0], device=cosine.device)
    logits = scale * (cosine - margin * torch.eye(len(target), device=cosine.device))  # s * (cos - m) on the positive
    if groups is not None:
        same_group = (groups[:, None] == groups[None, :]) & (target[:, None] != target[None, :])
        logits = logits.masked_fill(same_group, float("-inf"))
    logits_ba = logits.T
    if memory is not None and len(memory):
        memory = memory.to(a.device, a.dtype)
        extra_ab, extra_ba = scale * (a @ memory.T), scale * (b @ memory.T)  # [B, N] each
        if memory_mask is not None:
            extra_ab = extra_ab.masked_fill(memory_mask, float("-inf"))
            extra_ba = extra_ba.masked_fill(memory_mask if memory_mask_ba is None else memory_mask_ba, float("-inf"))
        logits, logits_ba = torch.cat([logits, extra_ab], dim=1), torch.cat([logits_ba, extra_ba], dim=1)
    return F.cross_entropy(logits, target, reduction="sum") + F.cross_entropy(logits_ba, target, reduction="sum")


class NegativeMemory(nn.Module):
    """A cross-batch memory (XBM, Wang et al. 2020; MoCo's queue): the unit sentence vectors of the last ``size``
    encoded rows of earlier micro-batches, with the keys of their text, of their pair's target text and of their
    language, used as extra negatives of the alignment loss. Entries get no gradient; the oldest are overwritten first.

    Buffers are not saved with the model (``persistent=False``); a training checkpoint carries them in its own file
    (``state`` / ``load_state``), so a resumed run sees the negatives of the uninterrupted one."""

    def __init__(self, size: int) -> None:
        super().__init__()
        if size < 1:
            raise ValueError(f"negative_memory_size={size}; expected at least 1 (0 means no memory)")
        self.size = size
        self.register_buffer("vectors", torch.zeros(0, 0), persistent=False)  # [filled, d], allocated at first use
        # [filled, (own text, pair's target text, language)]
        self.register_buffer("keys", torch.zeros(0, 3, dtype=torch.long), persistent=False)
        self.register_buffer("position", torch.zeros((), dtype=torch.long), persistent=False)  # next slot to write

    def __len__(self) -> int:
        return len(self.vectors)

    @torch.no_grad()
    def add(
        self, vectors: torch.Tensor, own: torch.LongTensor, anchor: torch.LongTensor, language: torch.LongTensor
    ) -> None:
        """Write ``vectors`` [M, d] (normalised, detached, fp32) with their text keys ``own`` [M], their pair's
        target keys ``anchor`` [M] and their language keys ``language`` [M], over the oldest entries once the memory
        is full."""
        vectors = F.normalize(vectors.detach().float(), dim=-1)[-self.size :]
        keys = torch.stack([own, anchor, language], dim=1)[-self.size :]
        if len(self) < self.size:  # still filling: append what fits, the rest overwrites from slot 0
            if not len(self):
                self.vectors = vectors.new_zeros(0, vectors.shape[1])
            fits = min(self.size - len(self), len(vectors))
            self.vectors = torch.cat([self.vectors, vectors[:fits]])
            self.keys = torch.cat([self.keys, keys[:fits].to(self.keys.device)])
            self.position.fill_(len(self) % self.size)
            vectors, keys = vectors[fits:], keys[fits:]
            if not len(vectors):
                return
        slots = (self.position + torch.arange(len(vectors), device=self.vectors.device)) % self.size
        # out of place: the loss of this micro-batch may still hold the old tensor for its backward pass (in fp32
        # the product with the memory saves the buffer itself)
        self.vectors = self.vectors.index_copy(0, slots, vectors.to(self.vectors.device))
        self.keys = self.keys.index_copy(0, slots, keys.to(self.keys.device))
        self.position.copy_((self.position + len(vectors)) % self.size)

    def mask(
        self, row_keys: torch.LongTensor, row_group: torch.LongTensor, pair_group: torch.LongTensor
    ) -> torch.Tensor:
        """[P, N] True where entry n must not be a negative of pair p: its text, or the target its own pair was
        translated into, is the text of a sentence of p's group (the same sentence seen earlier, or a translation of
        it through a shared English or Spanish target). ``row_keys`` [R] and ``row_group`` [R]: each encoded row's
        text key and group; ``pair_group`` [P]: each pair's group."""
        hits = (row_keys[:, None, None] == self.keys[None, :, :2]).any(-1)  # [R, N]
        per_group = torch.zeros(int(row_group.max()) + 1, len(self), device=hits.device)
        per_group.index_add_(0, row_group, hits.float())
        return per_group[pair_group] > 0

    def other_language(self, languages: torch.LongTensor) -> torch.Tensor:
        """[P, N] True where entry n is not in language ``languages[p]`` (language keys, [P])."""
        return self.keys[None, :, 2] != languages[:, None]

    def state(self) -> dict[str, torch.Tensor]:
        """The memory's tensors, for a checkpoint."""
        return {"vectors": self.vectors.contiguous(), "keys": self.keys.contiguous(), "position": self.position}

    def load_state(self, state: dict[str, torch.Tensor]) -> None:
        """Restore ``state`` (a checkpoint's); ValueError if it holds more entries than the memory. Entries of a
        checkpoint written before the memory kept languages get language key 0, which no language has."""
        if len(state["vectors"]) > self.size:
            raise ValueError(f"{len(state['vectors'])} saved entries do not fit negative_memory_size={self.size}")
        device = self.position.device
        keys = F.pad(state["keys"], (0, 3 - state["keys"].shape[1]))
        self.vectors, self.keys = state["vectors"].to(device), keys.to(device)
        self.position = state["position"].to(device)


def distill_loss(student: torch.Tensor, teacher: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(MSE over every element, mean cosine) of student sentence vectors [M, D] against teacher vectors [M, D]: the
    ``--teacher`` distillation term (the trainer scales it by ``distill_weight`` and the micro-batch's share)."""
    student = student.float()
    mse = F.mse_loss(student, teacher.float())
    cosine = F.cosine_similarity(student.detach(), teacher.float(), dim=-1).mean()
    return mse, cosine


@torch.no_grad()
def mean_pairwise_cosine(vectors: torch.Tensor) -> torch.Tensor:
    """Mean cosine between distinct rows: near 1 means the vectors have collapsed onto one direction."""
    n = vectors.shape[0]
    if n < 2:
        return vectors.new_zeros(())
    unit = F.normalize(vectors.float(), dim=-1)
    total = unit.sum(0)
    return ((total @ total) - n) / (n * (n - 1))


@torch.no_grad()
def centered_pair_cosine(vectors: torch.Tensor, pair_index: torch.LongTensor) -> torch.Tensor | None:
    """Mean cosine between the two sides of each translation pair after removing the batch mean vector.

    The raw mean cosine is dominated by the component every sentence shares (a large common offset reads as
    collapse). Without it, translations of each other still point the same way (toward 1) only if the vectors carry
    what is specific to the sentence; collapsed vectors leave noise (near 0). (The mean cosine between all centred
    vectors would say nothing: it is about -1 / (n - 1) whatever the vectors.) None for fewer than 2 pairs.
    """
    if len(pair_index) < 2:
        return None
    centred = vectors.float() - vectors.float().mean(0)
    return F.cosine_similarity(centred[pair_index[:, 0]], centred[pair_index[:, 1]], dim=-1).mean()


def translation_loss(logits: torch.Tensor, labels: torch.LongTensor, label_smoothing: float) -> torch.Tensor:
    """l_mt: label-smoothed cross entropy of decoder scores [T, L, V] against ``labels`` [T, L] (-100 ignored),
    summed over the target tokens, in fp32."""
    return F.cross_entropy(
        logits.flatten(0, 1).float(),
        labels.flatten(),
        ignore_index=-100,
        label_smoothing=label_smoothing,
        reduction="sum",
    )


def distance_constrained_loss(
    out: ModelOutput,
    vectors: torch.Tensor,
    pair_index: torch.LongTensor | None,
    group_index: torch.LongTensor | None,
    config,
    memory: NegativeMemory | None = None,
    text_keys: torch.LongTensor | None = None,
    remember: bool = False,
    text_languages: torch.LongTensor | None = None,
) -> torch.Tensor:
    """Eq. (10) summed over a batch: ``config.distance_mt_weight`` (0.5) * l_mt + beta * sum_i d_p(i) + lambda / N_s
    * sum_j sum_i hinge (eq. 7-9), plus ``align_loss_weight`` * the alignment loss; ``out.loss_mt`` alone without
    pairs or with both weights 0. The parts go to ``out`` (a ``TranslationOutput``).

    ``vectors`` are the encoded rows, ``pair_index`` [P, 2] the translation pairs among them and ``group_index`` [P]
    their groups (``unique_pairs``). Pairs of the same encoded rows (a-b and b-a in a multi-way group) count once. A
    batch without negatives (one pair, or one group) trains on the translation loss alone and sets
    ``skipped_pair_losses``.

    ``memory`` (``config.negative_memory_size`` > 0): the alignment loss also takes its entries as negatives, except
    those whose text or target text is a sentence of the pair's group (``text_keys`` [R]: a key of each row's text,
    the collator's ``text_key``); with ``remember`` (training) the batch's rows are written into it after the loss,
    with their languages (``text_languages`` [R], the collator's ``language_keys``). With
    ``config.negative_memory_same_language`` each direction keeps only the entries in the language of the sentence
    it must find: a -> b those in b's language, b -> a those in a's.
    """
    if pair_index is None or not (config.distance_beta > 0 or config.align_loss_weight > 0):
        return out.loss_mt
    pairs, groups = unique_pairs(pair_index, group_index)
    skip = bool((groups == groups[0]).all())
    out.skipped_pair_losses = torch.tensor(int(skip), device=vectors.device)
    mt_weight = config.distance_mt_weight if config.distance_beta > 0 else 1.0
    total = mt_weight * out.loss_mt  # eq. (10): 0.5 * l_mt
    if skip:
        return total
    p_a, p_b = vectors[pairs[:, 0]], vectors[pairs[:, 1]]
    if config.distance_beta > 0:
        num = len(pairs)
        dist = distance_constraint_loss(
            p_a,
            p_b,
            sample_negatives(num, config.distance_negatives, vectors.device, groups=groups),  # eq. (8): N_s per pair
            sample_negatives(num, config.distance_negatives, vectors.device, groups=groups),
            alpha=config.distance_alpha,
            beta=config.distance_beta,
            lam=config.distance_hinge_weight,
            distance=config.distance,
            eps=config.distance_eps,
            vnorm_grad=config.distance_vnorm_grad,
        )
        total = total + dist.total  # eq. (10): + beta * sum_i d_p(i) + lambda / N_s * sum_j sum_i hinge
        out.loss_distance = dist.total
        out.d_p, out.d_n, out.hinge, out.v_norm = (
            dist.d_p.detach().mean(),
            dist.d_n.detach().mean(),
            dist.hinge.detach().mean() / 2,
            dist.v_norm.detach(),
        )
    if memory is not None and (text_keys is None or text_languages is None):
        raise ValueError(
            "a negative memory needs the batch's text_keys and text_languages "
            "(TranslationCollator(with_text_keys=True))"
        )
    if config.align_loss_weight > 0:
        negatives = memory_mask = memory_mask_ba = None
        if memory is not None and len(memory):
            # each encoded row's group
            row_group = groups.new_zeros(len(vectors)).scatter_(0, pairs[:, 0], groups).scatter_(0, pairs[:, 1], groups)
            negatives, memory_mask = memory.vectors, memory.mask(text_keys, row_group, groups)
            if getattr(config, "negative_memory_same_language", False):
                memory_mask_ba = memory_mask | memory.other_language(text_languages[pairs[:, 0]])
                memory_mask = memory_mask | memory.other_language(text_languages[pairs[:, 1]])
        out.loss_align = align_loss(
            p_a, p_b, config.align_scale, groups, config.align_margin, negatives, memory_mask, memory_mask_ba
        ) / len(pairs)
        # a per-pair mean next to the per-token translation loss: scaled to this batch's share of the update
        total = total + config.align_loss_weight * out.loss_align * out.num_tokens
    if memory is not None and remember:
        rows = pairs.flatten().unique()
        # the target text each row was paired with (a row of several pairs: its last one)
        anchor = text_keys.clone().scatter_(0, pairs[:, 0], text_keys[pairs[:, 1]])
        memory.add(vectors[rows], text_keys[rows], anchor[rows], text_languages[rows])
    return total

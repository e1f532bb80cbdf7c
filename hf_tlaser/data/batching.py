"""Curriculum batching: deterministic, resumable, token-budget batch samplers over group datasets.

Both samplers plan an epoch as a list of micro-batches from ``(seed, epoch)`` alone:

* every *stream* (one per language pair) holds the rows it may draw from; a stream's rows are shuffled, cut into
  large chunks, sorted by length inside each chunk and packed greedily under ``max_tokens`` (padded size, rows x
  longest sentence, checked for the source side and the target side); its batches are then shuffled. A stream
  that runs out starts a new cycle with a new shuffle;
* each step draws its stream uniformly at random among the streams that have data;
* with ``world_size`` > 1 the global plan is cut to a multiple of ``world_size`` and rank r takes steps
  r, r + world_size, ...: disjoint, and the same number of batches on every rank.

``PairBatchSampler`` (pair mode, the paper's fairseq behaviour): a micro-batch is rows of one pair, so every
direction gets about 1/8 of the target tokens (11.4-13.9 % each, measured below). It yields lists of
``(row, src_lang, tgt_lang)``.

``MultiwayBatchSampler`` (multi-way mode, a different curriculum): a micro-batch is whole groups; every group is
assigned to the stream of its rarest curriculum pair (ties go to the pair listed first, so es-en has no stream of
its own: its groups all carry en-es), so each group appears once per stream cycle and the *streams* are drawn
uniformly. A micro-batch trains every curriculum direction its groups carry, so the target-token share of a
direction follows the groups' composition, not 1/8: directions carried by few groups (de-es, it-es) get less,
directions carried by many groups (de-en, fr-en, fr-es) more. Measured over one planned epoch of the default
training corpora (first 5000 lines of each file, 4000-token BPE, max_tokens=2000), per direction in percent:

==========  =====  =====  =====  =====  =====  =====  =====  =====
mode        de-en  de-es  en-es  es-en  fr-en  fr-es  it-en  it-es
==========  =====  =====  =====  =====  =====  =====  =====  =====
pair         11.8   12.2   13.7   11.4   12.2   12.7   12.1   13.9
multi-way    20.8    5.8   11.4    9.7   17.3   20.8   11.2    2.9
==========  =====  =====  =====  =====  =====  =====  =====  =====

Use pair mode for the paper's uniform curriculum; multi-way mode gives the distance loss pairs across all the
languages of a group. It yields lists of rows. Use the samplers as ``DataLoader(ParallelExamples(ds),
batch_sampler=sampler, collate_fn=TranslationCollator(...))``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence

import datasets
import numpy as np
import torch
from torch.utils.data import Sampler

from hf_tlaser.data.languages import DEFAULT_PAIRS, Pair, check_languages, language_columns

logger = logging.getLogger(__name__)


PACKINGS = ("length", "random")
"""How ``pack_chunk`` orders a chunk's rows before packing: ``length`` sorts them by length first (least padding;
every in-batch negative about as long as its positive), ``random`` packs them in their given order (more padding, so
fewer rows per micro-batch; negatives of any length, as the LDT / cNV authors' loaders)."""
COMPOSITIONS = (*PACKINGS, "cluster")
"""How a stream's rows are grouped into micro-batches: a ``PACKINGS`` order within chunks, or ``cluster``: the whole
stream ordered by cluster, then by length (``set_clusters``: rows whose pivot sentences are near one another in a
model's space share a cluster, so a micro-batch's pairs are each other's hard negatives)."""


def pack_chunk(
    rows: np.ndarray,
    src_len: np.ndarray,
    tgt_len: np.ndarray,
    src_w: np.ndarray,
    tgt_w: np.ndarray,
    max_tokens: int,
    max_sentences: int | None = None,
    composition: str = "length",
) -> list[list[int]]:
    """Pack one chunk of rows greedily into micro-batches: rows x longest sentence (source and target side, each
    row counted ``src_w``/``tgt_w`` times) stays under ``max_tokens``, at most ``max_sentences`` rows. ``composition``
    ``length`` sorts the rows by length first (stable); ``random`` keeps their order (shuffle them before). The
    arrays are aligned with ``rows``; returns lists of ``rows`` items."""
    if composition not in PACKINGS:
        raise ValueError(f"composition={composition!r}; expected one of {PACKINGS}")
    by_length = composition == "length"
    order = np.argsort(np.maximum(src_len, tgt_len), kind="stable") if by_length else np.arange(len(rows))
    stats = zip(
        rows[order].tolist(),
        src_len[order].tolist(),
        tgt_len[order].tolist(),
        src_w[order].tolist(),
        tgt_w[order].tolist(),
    )
    batches: list[list[int]] = []
    batch: list[int] = []
    src_w_sum = tgt_w_sum = src_max = tgt_max = 0
    for row, s_len, t_len, s_w, t_w in stats:
        n_src_w, n_tgt_w = src_w_sum + s_w, tgt_w_sum + t_w
        n_src_max, n_tgt_max = max(src_max, s_len), max(tgt_max, t_len)
        full = max_sentences is not None and len(batch) >= max_sentences
        if batch and (full or n_src_w * n_src_max > max_tokens or n_tgt_w * n_tgt_max > max_tokens):
            batches.append(batch)
            batch, n_src_w, n_tgt_w, n_src_max, n_tgt_max = [], s_w, t_w, s_len, t_len
        batch.append(row)
        src_w_sum, tgt_w_sum, src_max, tgt_max = n_src_w, n_tgt_w, n_src_max, n_tgt_max
    if batch:
        batches.append(batch)
    return batches


class _Stream:
    """Rows of one stream with, per row (indexed by dataset row), source/target lengths, row weights and (composition
    ``cluster``) clusters."""

    def __init__(
        self, rows: np.ndarray, src_len: np.ndarray, tgt_len: np.ndarray, src_w: np.ndarray, tgt_w: np.ndarray
    ) -> None:
        self.rows, self.src_len, self.tgt_len, self.src_w, self.tgt_w = rows, src_len, tgt_len, src_w, tgt_w
        self.cluster: np.ndarray | None = None

    def pack(
        self, rng: np.random.Generator, max_tokens: int, max_sentences: int | None, chunk_size: int, composition: str
    ) -> list[list[int]]:
        """One cycle: shuffle, (``length``: sort by length within chunks; ``cluster``: order the whole stream by
        cluster, then length,) pack greedily under the budget, shuffle batches."""
        perm = rng.permutation(self.rows)
        batches: list[list[int]] = []
        if composition == "cluster":
            # the shuffle breaks the ties: a cluster's rows of one length come in a new order every cycle
            perm = perm[np.lexsort((np.maximum(self.src_len[perm], self.tgt_len[perm]), self.cluster[perm]))]
            chunk_size, composition = len(perm), "random"
        for start in range(0, len(perm), chunk_size):
            chunk = perm[start : start + chunk_size]
            batches += pack_chunk(
                chunk,
                self.src_len[chunk],
                self.tgt_len[chunk],
                self.src_w[chunk],
                self.tgt_w[chunk],
                max_tokens,
                max_sentences,
                composition,
            )
        return [batches[i] for i in rng.permutation(len(batches))]


class _PlannedBatchSampler(Sampler[list]):
    """Shared planning of both samplers (see the module docstring)."""

    def __init__(
        self,
        streams: dict[Pair, _Stream],
        max_tokens: int,
        *,
        seed: int = 0,
        num_batches: int | None = None,
        max_sentences: int | None = None,
        chunk_size: int = 10_000,
        composition: str = "length",
        rank: int = 0,
        world_size: int = 1,
    ) -> None:
        if not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} not in [0, world_size={world_size})")
        self.streams = {pair: stream for pair, stream in streams.items() if len(stream.rows)}
        if not self.streams:
            raise ValueError("no language pair has data under this token budget")
        empty = [f"{a}-{b}" for (a, b), stream in streams.items() if not len(stream.rows)]
        if empty:
            logger.warning("pairs without data (not sampled): %s", ", ".join(empty))
        self.pairs = list(self.streams)
        self.max_tokens, self.max_sentences, self.chunk_size = max_tokens, max_sentences, chunk_size
        self.composition = composition
        self.seed, self.epoch, self.rank, self.world_size = seed, 0, rank, world_size
        if num_batches is None:  # one cycle of every stream, fixed from epoch 0 so that len() never changes
            # (composition cluster: the cycle as packed by length; its clusters come later, set_clusters)
            packing = "length" if composition == "cluster" else composition
            num_batches = sum(len(self._cycle(i, 0, 0, packing)) for i in range(len(self.pairs)))
        self.num_batches = num_batches // world_size * world_size
        if self.num_batches == 0:
            raise ValueError(f"num_batches={num_batches} gives no batch to each of {world_size} ranks")
        self._plan: tuple[int, list[tuple[Pair, list[int]]]] | None = None

    def _cycle(self, stream: int, epoch: int, cycle: int, composition: str | None = None) -> list[list[int]]:
        rng = np.random.default_rng([self.seed, epoch, stream, cycle])
        stream_rows = self.streams[self.pairs[stream]]
        return stream_rows.pack(
            rng, self.max_tokens, self.max_sentences, self.chunk_size, composition or self.composition
        )

    def set_clusters(self, clusters: Mapping[Pair, np.ndarray]) -> None:
        """Composition ``cluster``: each stream's cluster ids (``clusters[pair]`` aligned with the stream's rows,
        ``stream_rows``); a row of id -1 leaves the stream (it was not clustered). The plan is made again."""
        for pair, stream in self.streams.items():
            ids = np.asarray(clusters[pair])
            if ids.shape != stream.rows.shape:
                raise ValueError(f"{pair[0]}-{pair[1]}: {ids.shape[0]} cluster ids for {len(stream.rows)} rows")
            if not (ids >= 0).any():
                raise ValueError(f"{pair[0]}-{pair[1]}: no row has a cluster")
            stream.cluster = np.full(len(stream.src_len), -1, dtype=np.int64)
            stream.cluster[stream.rows] = ids
            stream.rows = stream.rows[ids >= 0]
        self._plan = None

    def stream_rows(self) -> dict[Pair, np.ndarray]:
        """The dataset rows of each stream (the rows its micro-batches draw from)."""
        return {pair: stream.rows for pair, stream in self.streams.items()}

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch whose plan is iterated (the Trainer/accelerate call this when present)."""
        self.epoch = epoch

    def plan(self) -> list[tuple[Pair, list[int]]]:
        """This rank's micro-batches of the current epoch as ``(stream pair, rows)``; cached per epoch."""
        if self._plan is None or self._plan[0] != self.epoch:
            if self.composition == "cluster" and any(s.cluster is None for s in self.streams.values()):
                raise ValueError("composition cluster: set_clusters() gives every stream its clusters first")
            choices = np.random.default_rng([self.seed, self.epoch]).integers(len(self.pairs), size=self.num_batches)
            queues: dict[int, list[list[int]]] = {}
            cycles = dict.fromkeys(range(len(self.pairs)), 0)
            steps = []
            for stream in choices.tolist():
                if not queues.get(stream):
                    queues[stream] = self._cycle(stream, self.epoch, cycles[stream])[::-1]
                    cycles[stream] += 1
                steps.append((self.pairs[stream], queues[stream].pop()))
            self._plan = (self.epoch, steps[self.rank :: self.world_size])
        return self._plan[1]

    def pair_counts(self) -> dict[Pair, int]:
        """Number of this rank's micro-batches drawn from each stream in the current epoch."""
        counts = dict.fromkeys(self.pairs, 0)
        for pair, _ in self.plan():
            counts[pair] += 1
        return counts

    def _items(self, pair: Pair, rows: list[int]) -> list:
        raise NotImplementedError

    def iter_from(self, step: int) -> Iterator[list]:
        """Iterate the current epoch's micro-batches starting at ``step`` (resume)."""
        for pair, rows in self.plan()[step:]:
            yield self._items(pair, rows)

    def __iter__(self) -> Iterator[list]:
        return self.iter_from(0)

    def __len__(self) -> int:
        return self.num_batches // self.world_size


class PairBatchSampler(_PlannedBatchSampler):
    """Pair mode: every micro-batch is rows of one (src, tgt) pair; yields ``[(row, src, tgt), ...]``."""

    def __init__(
        self,
        lengths: Mapping[str, np.ndarray],
        max_tokens: int,
        pairs: Sequence[Pair] = DEFAULT_PAIRS,
        *,
        seed: int = 0,
        num_batches: int | None = None,
        max_sentences: int | None = None,
        chunk_size: int = 10_000,
        composition: str = "length",
        rank: int = 0,
        world_size: int = 1,
    ) -> None:
        """``lengths``: ``sentence_lengths(dataset, tokenizer)``; ``num_batches`` per epoch (all ranks together),
        default one pass over every pair's rows."""
        check_languages({lang for pair in pairs for lang in pair}, list(lengths))
        ones = np.ones(len(next(iter(lengths.values()))), dtype=np.int64)
        streams = {}
        for a, b in pairs:
            src, tgt = lengths[a], lengths[b]
            fits = (src > 0) & (tgt > 0)
            too_long = fits & (np.maximum(src, tgt) > max_tokens)
            if too_long.any():
                logger.warning(
                    "%s-%s: %d rows longer than max_tokens=%d are never batched", a, b, int(too_long.sum()), max_tokens
                )
            streams[(a, b)] = _Stream(np.nonzero(fits & ~too_long)[0], src, tgt, ones, ones)
        super().__init__(
            streams,
            max_tokens,
            seed=seed,
            num_batches=num_batches,
            max_sentences=max_sentences,
            chunk_size=chunk_size,
            composition=composition,
            rank=rank,
            world_size=world_size,
        )

    def _items(self, pair: Pair, rows: list[int]) -> list[tuple[int, str, str]]:
        return [(row, *pair) for row in rows]


class MultiwayBatchSampler(_PlannedBatchSampler):
    """Multi-way mode: micro-batches of whole groups; yields lists of dataset rows.

    Budget per group: (sentences encoded) x longest and (translation directions) x longest, both summed over the
    batch and kept under ``max_tokens``; a sentence counts only if it takes part in a curriculum pair present in
    its group (exactly what ``TranslationCollator`` encodes).
    """

    def __init__(
        self,
        lengths: Mapping[str, np.ndarray],
        max_tokens: int,
        pairs: Sequence[Pair] = DEFAULT_PAIRS,
        *,
        seed: int = 0,
        num_batches: int | None = None,
        max_sentences: int | None = None,
        chunk_size: int = 10_000,
        composition: str = "length",
        rank: int = 0,
        world_size: int = 1,
    ) -> None:
        check_languages({lang for pair in pairs for lang in pair}, list(lengths))
        langs = list(lengths)
        n_rows = len(lengths[langs[0]])
        present = np.stack([lengths[lang] > 0 for lang in langs], axis=1)
        has_pair = np.stack([present[:, langs.index(a)] & present[:, langs.index(b)] for a, b in pairs], axis=1)
        used = np.zeros_like(present)
        for p, (a, b) in enumerate(pairs):
            used[:, langs.index(a)] |= has_pair[:, p]
            used[:, langs.index(b)] |= has_pair[:, p]
        n_sentences = used.sum(axis=1)
        n_directions = has_pair.sum(axis=1)
        longest = np.where(used, np.stack([lengths[lang] for lang in langs], axis=1), 0).max(axis=1, initial=0)
        too_long = (n_directions > 0) & (np.maximum(n_sentences, n_directions) * longest > max_tokens)
        if too_long.any():
            logger.warning("%d groups exceed max_tokens=%d alone: never batched", int(too_long.sum()), max_tokens)
        # each group goes to the stream of its rarest pair
        pair_rows = has_pair.sum(axis=0)
        rarity = np.where(has_pair, pair_rows[None, :], np.iinfo(np.int64).max)
        stream_of = np.where((n_directions > 0) & ~too_long, rarity.argmin(axis=1), -1)
        streams = {
            pair: _Stream(np.nonzero(stream_of == p)[0], longest, longest, n_sentences, n_directions)
            for p, pair in enumerate(pairs)
        }
        logger.info(
            "multi-way streams (groups per rarest pair): %s; %d of %d rows without a curriculum pair",
            {f"{a}-{b}": len(s.rows) for (a, b), s in streams.items()},
            int((n_directions == 0).sum()),
            n_rows,
        )
        super().__init__(
            streams,
            max_tokens,
            seed=seed,
            num_batches=num_batches,
            max_sentences=max_sentences,
            chunk_size=chunk_size,
            composition=composition,
            rank=rank,
            world_size=world_size,
        )

    def _items(self, pair: Pair, rows: list[int]) -> list[int]:
        return rows


class ParallelExamples(torch.utils.data.Dataset):
    """Map-style view of a group dataset for the samplers' items.

    ``ds[row]`` -> ``{lang: text or None}`` (multi-way mode);
    ``ds[(row, src, tgt)]`` -> ``{"src_lang", "tgt_lang", "src", "tgt"}`` (pair mode). ``__getitems__`` reads a
    whole micro-batch from Arrow at once.
    """

    def __init__(self, dataset: datasets.Dataset, languages: Sequence[str] | None = None) -> None:
        """``languages``: the columns read (default: every language column of ``dataset``)."""
        self.languages = language_columns(dataset.column_names, languages)
        self.dataset = dataset.select_columns(self.languages)

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, key: int | tuple[int, str, str]) -> dict[str, str | None]:
        return self.__getitems__([key])[0]

    def __getitems__(self, keys: list) -> list[dict[str, str | None]]:
        rows = [key[0] if isinstance(key, tuple) else int(key) for key in keys]
        data = self.dataset[rows]
        out = []
        for i, key in enumerate(keys):
            if isinstance(key, tuple):
                _, src, tgt = key
                out.append({"src_lang": src, "tgt_lang": tgt, "src": data[src][i], "tgt": data[tgt][i]})
            else:
                out.append({lang: data[lang][i] for lang in self.languages})
        return out

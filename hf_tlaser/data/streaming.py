"""``--streaming``: the pair curriculum over ``datasets.IterableDataset`` sources, with flat memory.

``StreamingPairBatches`` yields pair-mode micro-batches (the items ``TranslationCollator`` takes) forever, drawing
them as the in-memory ``PairBatchSampler`` does, chunk by chunk instead of from the whole corpus:

* one stream per curriculum pair reads, round robin, the sources that hold both of its languages (a group with
  de/en/es feeds de-en, de-es and en-es); under ``accelerate`` every source is first split between the ranks
  (``datasets.distributed.split_dataset_by_node``: whole shards, i.e. file sets, when their number is a multiple of
  the world size, else every world_size-th group);
* a stream reads ``buffer_size`` groups that hold its pair (the shuffle buffer), cleans them as ``clean_groups`` does
  (``clean_group`` on the whole group, subword lengths of the tokenizer), sorts and packs them under ``max_tokens``
  (``pack_chunk``, the in-memory packing) and serves the chunk's batches in a random order; a source that runs out
  starts a new cycle once every source of the stream has;
* each micro-batch draws its pair uniformly among the pairs that have data on this rank (a pair whose full cycle
  is empty here is dropped, with a warning).

Memory holds one chunk per pair, whatever the corpus size. The English pivot join (``join_on_english``) needs the
whole corpus and is not done: pairs between non-English languages come from multi-way groups only.

Resume: ``state(batches)`` is what a checkpoint stores per rank (the position of every source at the start of each
pair's current chunk, the batches already served from it, the pairs found empty). ``load_state`` re-reads those
chunks from the saved positions and skips what was served: the continued run draws exactly the micro-batches the
uninterrupted run would have, given the same sources (and Hub revision), flags, tokenizer and world size.
"""

from __future__ import annotations

import copy
import logging
from collections import Counter, deque
from collections.abc import Iterator, Sequence

import datasets
import numpy as np
import torch
from datasets.distributed import split_dataset_by_node
from transformers import PreTrainedTokenizerBase

from hf_tlaser.data.batching import pack_chunk
from hf_tlaser.data.cleaning import CleaningConfig, clean_group
from hf_tlaser.data.languages import Pair
from hf_tlaser.data.lengths import token_counts
from hf_tlaser.errors import UsageError

logger = logging.getLogger(__name__)

Item = dict[str, str]
"""A pair-mode item: ``{"src_lang", "tgt_lang", "src", "tgt"}``."""
HISTORY = 64
"""States kept for the last micro-batches (the loader runs at most one or two ahead of training)."""


class _PairStream:
    """The chunks of one curriculum pair on one rank (see the module docstring)."""

    FIELDS = ("cycle", "chunk", "served", "positions", "done", "next_source", "kept_in_cycle")

    def __init__(self, pair: Pair, sources: list[datasets.IterableDataset], owner: StreamingPairBatches, index: int):
        self.pair, self.sources, self.owner, self.index = pair, sources, owner, index
        self.counts: Counter = Counter()
        self._new_cycle(0)

    def _new_cycle(self, cycle: int) -> None:
        self.cycle, self.chunk, self.served, self.kept_in_cycle = cycle, 0, 0, 0
        self.positions: list[dict | None] = [None] * len(self.sources)  # where reading stopped, per source
        self.done = [False] * len(self.sources)
        self.next_source = 0
        self.queue: list[list[Item]] | None = None  # the current chunk's batches not served yet
        self._live: list[datasets.IterableDataset | None] | None = None
        self._start: dict | None = None

    def state(self) -> dict:
        """Where to resume this pair: the start of its current chunk and the batches already served from it."""
        if self.queue is not None:
            return {**self._start, "served": self.served}
        return {key: copy.copy(getattr(self, key)) for key in self.FIELDS}

    def load_state(self, state: dict) -> None:
        self._new_cycle(state["cycle"])
        for key in self.FIELDS:
            setattr(self, key, copy.copy(state[key]))

    def _read_chunk(self) -> list[dict]:
        """Up to ``buffer_size`` groups holding the pair, round robin over the sources, from where reading stopped
        (the saved positions after a resume)."""
        if self._live is None:
            self._live = []
            for source, position, done in zip(self.sources, self.positions, self.done):
                fresh = None if done else copy.deepcopy(source)
                if fresh is not None and position is not None:
                    fresh.load_state_dict(position)
                self._live.append(fresh)
            self._iters = [None if ds is None else iter(ds) for ds in self._live]
        a, b = self.pair
        rows: list[dict] = []
        pulled = set()
        while len(rows) < self.owner.buffer_size and not all(self.done):
            i = self.next_source
            self.next_source = (i + 1) % len(self.sources)
            if self.done[i]:
                continue
            row = next(self._iters[i], None)
            pulled.add(i)
            if row is None:
                self.done[i] = True
                continue
            self.counts["read"] += 1
            if row.get(a) and row.get(b):
                rows.append(row)
        for i in pulled:
            if not self.done[i]:
                self.positions[i] = self._live[i].state_dict()
        return rows

    def _pack(self, rows: list[dict]) -> list[list[Item]]:
        """Clean the groups (the whole-group rules of ``clean_groups``), then pack the pair's sentences."""
        owner, (a, b) = self.owner, self.pair
        langs = sorted({lang for row in rows for lang, text in row.items() if lang != "corpus" and text is not None})
        counts: dict[str, dict[int, int]] = {}
        for lang in langs:
            present = [i for i, row in enumerate(rows) if row.get(lang) is not None]
            counts[lang] = dict(zip(present, token_counts([rows[i][lang] for i in present], owner.tokenizer)))
        src, tgt, src_len, tgt_len = [], [], [], []
        for i, row in enumerate(rows):
            group = {lang: counts[lang][i] for lang in langs if i in counts[lang]}
            removed, reasons = clean_group(group, owner.cleaning)
            self.counts.update(f"removed_{reason}" for reason in reasons)
            if a in removed or b in removed:
                self.counts["dropped"] += 1
                continue
            s_len, t_len = group[a] + 2, group[b] + 2  # encoder format: STR_TAG ... </s>
            if max(s_len, t_len) > owner.max_tokens:
                self.counts["longer_than_max_tokens"] += 1
                continue
            src.append(row[a])
            tgt.append(row[b])
            src_len.append(s_len)
            tgt_len.append(t_len)
        self.counts["kept"] += len(src)
        self.kept_in_cycle += len(src)
        ones = np.ones(len(src), dtype=np.int64)
        rng = np.random.default_rng([owner.seed, owner.rank, self.index, self.cycle, self.chunk])
        rows = rng.permutation(len(src)) if owner.composition == "random" else np.arange(len(src))
        lengths = np.asarray(src_len, dtype=np.int64)[rows], np.asarray(tgt_len, dtype=np.int64)[rows]
        batches = pack_chunk(
            rows, *lengths, ones, ones, owner.max_tokens, owner.max_sentences, owner.composition
        )  # fmt: skip
        return [
            [{"src_lang": a, "tgt_lang": b, "src": src[i], "tgt": tgt[i]} for i in batches[j]]
            for j in rng.permutation(len(batches))
        ]

    def _end_chunk(self) -> bool:
        """Move past the current chunk; True when that ended a cycle without a single kept pair."""
        self.queue, self.served, self.chunk = None, 0, self.chunk + 1
        if not all(self.done):
            return False
        logger.info("stream %s-%s (rank %d), cycle %d: %s", *self.pair, self.owner.rank, self.cycle, dict(self.counts))
        empty = self.kept_in_cycle == 0
        self._new_cycle(self.cycle + 1)
        return empty

    def next_batch(self) -> list[Item] | None:
        """The next micro-batch of this pair; None when a whole cycle of its sources gave none (no data here)."""
        while self.queue is None:
            self._start = self.state()
            self.queue = self._pack(self._read_chunk())[self.served :]  # served > 0 only after a resume
            if not self.queue and self._end_chunk():
                return None
        batch = self.queue.pop(0)
        self.served += 1
        if not self.queue:
            self._end_chunk()
        return batch


class StreamingPairBatches(torch.utils.data.IterableDataset):
    """Pair-mode micro-batches from streamed sources (see the module docstring); yields lists of items for
    ``TranslationCollator``.

    ``sources``: ``(IterableDataset in the group schema, its languages)``
    (``hf_tlaser.data.source_datasets.stream_source``).
    ``cleaning`` and ``tokenizer`` clean each group as ``clean_groups`` does; ``max_tokens``, ``max_sentences`` and
    ``composition`` pack the micro-batches as ``PairBatchSampler``; ``buffer_size`` groups per pair are read,
    cleaned and packed at once.
    """

    def __init__(
        self,
        sources: Sequence[tuple[datasets.IterableDataset, Sequence[str]]],
        pairs: Sequence[Pair],
        tokenizer: PreTrainedTokenizerBase,
        max_tokens: int,
        *,
        cleaning: CleaningConfig | None = None,
        buffer_size: int = 10_000,
        max_sentences: int | None = None,
        composition: str = "length",
        seed: int = 0,
        rank: int = 0,
        world_size: int = 1,
    ) -> None:
        if not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} not in [0, world_size={world_size})")
        self.tokenizer, self.max_tokens, self.max_sentences = tokenizer, max_tokens, max_sentences
        self.composition = composition
        self.cleaning = cleaning or CleaningConfig()
        self.buffer_size, self.seed, self.rank, self.world_size = buffer_size, seed, rank, world_size
        split = [(split_dataset_by_node(ds, rank, world_size), set(langs)) for ds, langs in sources]
        self.streams: list[_PairStream] = []
        missing = []
        for index, pair in enumerate(pairs):
            mine = [ds for ds, langs in split if set(pair) <= langs]
            if mine:
                self.streams.append(_PairStream(tuple(pair), mine, self, index))
            else:
                missing.append("-".join(pair))
        if missing:
            logger.warning("pairs without data (not sampled): %s", ", ".join(missing))
        if not self.streams:
            raise ValueError("no language pair has data in the streamed sources")
        self.batches = 0
        self.empty: list[str] = []
        self.history: deque[tuple[int, dict]] = deque(maxlen=HISTORY)

    @property
    def pairs(self) -> list[Pair]:
        return [stream.pair for stream in self.streams]

    def _key(self, stream: _PairStream) -> str:
        return "-".join(stream.pair)

    def state(self, batches: int | None = None) -> dict:
        """The resume state before micro-batch ``batches`` (default: the next one this stream makes)."""
        if batches is None or batches == self.batches:
            return self._state()
        for index, state in self.history:
            if index == batches:
                return state
        raise ValueError(f"no stream state for micro-batch {batches} (kept: {[i for i, _ in self.history]})")

    def _state(self) -> dict:
        return {
            "batches": self.batches,
            "rank": self.rank,
            "world_size": self.world_size,
            "empty": list(self.empty),
            "pairs": {self._key(stream): stream.state() for stream in self.streams},
        }

    def load_state(self, state: dict) -> None:
        """Continue from ``state`` (``state()`` of the same rank); UsageError when it was made with another world
        size or rank."""
        if (state["rank"], state["world_size"]) != (self.rank, self.world_size):
            raise UsageError(
                f"the checkpoint's stream state is rank {state['rank']} of {state['world_size']} processes; resume "
                f"with {state['world_size']} processes (this is rank {self.rank} of {self.world_size})"
            )
        self.batches, self.empty = state["batches"], list(state["empty"])
        for stream in self.streams:
            if self._key(stream) in state["pairs"]:
                stream.load_state(state["pairs"][self._key(stream)])

    def next_batch(self) -> list[Item]:
        """The next micro-batch: a pair drawn uniformly among those with data on this rank, then its next batch."""
        self.history.append((self.batches, self._state()))
        rng = np.random.default_rng([self.seed, self.rank, self.batches])
        while True:
            active = [stream for stream in self.streams if self._key(stream) not in self.empty]
            if not active:
                raise UsageError(f"no training batches on rank {self.rank}: every streamed pair is empty here")
            stream = active[int(rng.integers(len(active)))]
            batch = stream.next_batch()
            if batch is not None:
                self.batches += 1
                return batch
            logger.warning("pair %s has no data on rank %d (not sampled)", self._key(stream), self.rank)
            self.empty.append(self._key(stream))

    def __iter__(self) -> Iterator[list[Item]]:
        while True:
            yield self.next_batch()


def stream_sentences(
    sources: Sequence[tuple[datasets.IterableDataset, Sequence[str]]], languages: Sequence[str], max_sentences: int
) -> Iterator[tuple[str, str]]:
    """``(language, sentence)`` from the start of the streamed sources, at most ``max_sentences`` non-empty ones per
    language of ``languages`` (the joint BPE's text); a source is read only while one of its languages needs more."""
    counts = Counter()
    for ds, langs in sources:
        wanted = [lang for lang in langs if lang in languages]
        for row in ds:
            if all(counts[lang] >= max_sentences for lang in wanted):
                break
            for lang in wanted:
                if row.get(lang) and counts[lang] < max_sentences:
                    counts[lang] += 1
                    yield lang, row[lang]

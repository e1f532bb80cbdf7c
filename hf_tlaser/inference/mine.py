"""``hf-tlaser mine``: parallel sentences from two monolingual corpora, at any size that fits on disk.

LASER's margin mining (``mine_bitexts.py``): every sentence's k nearest neighbours on the other side by cosine, each
candidate pair scored with the margin (:func:`hf_tlaser.evaluation.knn.margin_scores`), pairs chosen by a retrieval
mode (:func:`hf_tlaser.evaluation.mining.select_pairs`), each sentence used once, and the pairs above a threshold
written best first. What differs from the evaluation :func:`~hf_tlaser.evaluation.mining.mine` is the search, which
scales:

* the vectors stay memory-mapped on disk (``hf-tlaser embed`` outputs); queries are read and searched in blocks;
* below :data:`EXACT_MAX_ROWS` database rows the index is exact (``Flat``: inner product of unit vectors); above it
  a faiss index-factory string (``--index``; default :func:`default_index`: an inverted file of about
  ``4 sqrt(N)`` lists with product-quantised codes), trained on a random sample. An approximate index returns
  ``refine x k`` candidates whose exact cosines are recomputed from the vectors on disk, and the best k are kept;
* the database is cut into shards that fit ``--index-memory``; each shard's index is searched by every query block
  and the top-k lists are merged, so no N x M matrix and no index larger than the budget is ever held;
* faiss runs on all GPUs when faiss sees one (``faiss.get_num_gpus() > 0``), else on the CPU.

Identical lines are mined once (LASER's ``--unify``): the first occurrence's vector stands for all of them, and the
TSV has each source text and each target text at most once. Blank lines are not mined. A tab or a line-breaking
character inside a text (``\r``, U+2028, U+2029, U+0085, ...: :data:`~hf_tlaser.inference.lines.TSV_BREAKS`) is
written as a space, so every TSV row has three columns; the texts changed so are counted and logged.

Before any search (and before ``--model`` loads): the outputs' folder is tried for writing, ``OUTPUT.lock`` is
locked (one run per output), each embeddings file's recorded input is compared with ``--src``/``--tgt`` (their
SHA-256 where the sidecar has one, and always their line counts), the free space is checked against the TSV's
largest size, and the ``--index`` string is built on a sample (or refused, e.g. more inverted lists than rows). With
``--model``, the two embeddings files are written in ``OUTPUT.embeddings.tmp/`` beside the output (removed at the
end, and by the next run on the output when a killed run left it).
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import shutil
import sys
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import numpy as np

from hf_tlaser.commands import run_command
from hf_tlaser.data.readers import iter_lines
from hf_tlaser.errors import UsageError
from hf_tlaser.evaluation.knn import MARGINS, import_faiss, l2_normalize, margin_scores
from hf_tlaser.evaluation.mining import RETRIEVALS, select_pairs
from hf_tlaser.hardware import PRECISIONS
from hf_tlaser.inference import embed
from hf_tlaser.inference.guards import OutputLock, check_space, check_writable, write_failed
from hf_tlaser.inference.lines import text_digest, tsv_field
from hf_tlaser.inference.store import check_compatible, first_non_finite, read_embeddings

logger = logging.getLogger(__name__)

EXACT_MAX_ROWS = 50_000
"""Databases up to this many rows are searched exactly by default: measured, exact mining is faster than the
compressed index up to about 40,000 lines a side on a CPU (docs/embed_and_mine.md)."""
DEFAULT_THRESHOLDS = {"ratio": 1.04, "distance": 0.0, "absolute": 0.0}
"""``--threshold`` by margin: 1.04 is the ratio threshold LASER's WikiMatrix README recommends for most pairs."""


@dataclass
class Rows:
    """The unit-length float32 rows ``rows`` of a (memory-mapped) [N, d] array, read on demand."""

    array: np.ndarray
    rows: np.ndarray

    def __len__(self) -> int:
        return len(self.rows)

    @property
    def dim(self) -> int:
        return int(self.array.shape[1])

    def take(self, positions: np.ndarray) -> np.ndarray:
        """The normalised vectors at ``positions`` (indices into ``rows``), as a float32 [len, d] array."""
        return l2_normalize(np.asarray(self.array[self.rows[positions]], dtype=np.float32))

    def blocks(self, size: int, start: int = 0, stop: int | None = None) -> Iterator[tuple[int, np.ndarray]]:
        """``(offset, vectors)`` of consecutive blocks of at most ``size`` rows in ``[start, stop)``."""
        stop = len(self) if stop is None else stop
        for offset in range(start, stop, size):
            yield offset, self.take(np.arange(offset, min(offset + size, stop)))


@dataclass
class SearchPlan:
    """How the kNN search runs (``--index``, ``--nprobe``, ...); see the module docstring."""

    index: str = "auto"
    nprobe: int = 32
    refine: int = 4
    batch_size: int = 32768
    index_memory: float = 4e9
    train_size: int = 0
    device: str = "auto"
    seed: int = 0

    def spec(self, rows: int, dim: int) -> str:
        """The index-factory string for a database of ``rows`` vectors."""
        return default_index(rows, dim) if self.index == "auto" else self.index


def default_index(rows: int, dim: int) -> str:
    """``Flat`` (exact) up to :data:`EXACT_MAX_ROWS` rows; above, ``IVF{L},PQ{m}x4fs``: L, a power of two near
    ``4 sqrt(rows)``, inverted lists, and m half-byte fast-scan codes (m the largest even divisor of ``dim`` up to
    ``dim / 4``; 48 bytes a 384-d vector). 8-bit PQ trains two orders of magnitude slower on CPU (measured)."""
    if rows <= EXACT_MAX_ROWS:
        return "Flat"
    lists = 2 ** round(math.log2(4 * math.sqrt(rows)))
    width = max([m for m in range(2, dim // 4 + 1, 2) if dim % m == 0], default=0)
    return f"IVF{lists},PQ{width}x4fs" if width else f"IVF{lists},SQ8"


def require_faiss() -> ModuleType:
    """``faiss``, or ``UsageError`` saying how to install it."""
    faiss = import_faiss()
    if faiss is None:
        raise UsageError("hf-tlaser mine needs faiss: pip install faiss-cpu (or faiss-gpu)")
    return faiss


INDEX_HINT = "give a faiss index-factory string such as Flat or IVF4096,PQ48"


def faiss_reason(err: RuntimeError) -> str:
    """The failed condition of a faiss error (its last line after ``Error: ``)."""
    return str(err).strip().splitlines()[-1].split("Error: ", 1)[-1]


def make_index(spec: str, dim: int):
    """An empty faiss inner-product index from an index-factory string; ``UsageError`` when faiss refuses it."""
    faiss = require_faiss()
    try:
        return faiss.index_factory(dim, spec, faiss.METRIC_INNER_PRODUCT)
    except RuntimeError as err:
        raise UsageError(f"--index {spec!r}: faiss refuses it ({faiss_reason(err)}); {INDEX_HINT}") from None


TRIAL_ROWS = 8
"""Rows a trained (or training-free) index is built and searched with before the real work."""


def check_index(spec: str, rows: int, dim: int) -> None:
    """``UsageError`` unless the search can run ``spec`` on a database of ``rows`` vectors: faiss builds it, it has
    no more inverted lists than rows to train them on, it gives its code size (the shard size needs it), and, where
    it needs no training, it adds and searches ``TRIAL_ROWS`` random vectors."""
    faiss = require_faiss()
    index = make_index(spec, dim)
    ivf = faiss.try_extract_index_ivf(index)
    if ivf is not None and ivf.nlist > rows:
        lists = 2 ** max(0, round(math.log2(max(1.0, math.sqrt(rows)))))
        raise UsageError(
            f"--index {spec!r}: {ivf.nlist} inverted lists need at least as many rows to train on, the database has "
            f"{rows}; give fewer lists (e.g. IVF{lists}) or Flat"
        )
    try:
        index.sa_code_size()
        if index.is_trained:
            sample = l2_normalize(np.random.default_rng(0).normal(size=(TRIAL_ROWS, dim)).astype(np.float32))
            index.add(sample)
            index.search(sample[:1], 1)
    except RuntimeError as err:
        raise UsageError(
            f"--index {spec!r}: faiss cannot run it as the search does (add, search, code size: "
            f"{faiss_reason(err)}); {INDEX_HINT}"
        ) from None


def use_gpu(device: str) -> bool:
    """Whether to search on GPUs: ``auto`` when faiss sees one, ``gpu`` (``UsageError`` without one), ``cpu`` never."""
    gpus = require_faiss().get_num_gpus() if device != "cpu" else 0
    if device == "gpu" and gpus == 0:
        raise UsageError("--device gpu: faiss sees no GPU (install faiss-gpu, or give --device cpu)")
    return gpus > 0


def train(index, database: Rows, plan: SearchPlan) -> None:
    """Train ``index`` (when it needs it) on a random sample of ``database``: ``plan.train_size`` rows, by default
    64 per inverted list and at least 65536 (all rows when fewer)."""
    if index.is_trained:
        return
    ivf = require_faiss().try_extract_index_ivf(index)
    size = plan.train_size or max(64 * (ivf.nlist if ivf is not None else 0), 65536)
    size = min(size, len(database))
    sample = np.sort(np.random.default_rng(plan.seed).choice(len(database), size, replace=False))
    started = time.perf_counter()
    index.train(database.take(sample))
    logger.info("trained %d-row index on %d rows in %.1fs", len(database), size, time.perf_counter() - started)


def shard_rows(index, budget: float) -> int:
    """Database rows per shard so that one shard's index takes about ``budget`` bytes (codes and 8-byte ids)."""
    return max(1, int(budget // (index.sa_code_size() + 8)))


def merge_top_k(
    sims: np.ndarray, ids: np.ndarray, new_sims: np.ndarray, new_ids: np.ndarray, k: int
) -> tuple[np.ndarray, np.ndarray]:
    """The k best of two ``(sims, ids)`` lists per row (missing entries: id -1, lowest sims)."""
    all_sims, all_ids = np.concatenate([sims, new_sims], axis=1), np.concatenate([ids, new_ids], axis=1)
    order = np.argsort(-all_sims, axis=1, kind="stable")[:, :k]
    return np.take_along_axis(all_sims, order, axis=1), np.take_along_axis(all_ids, order, axis=1)


def exact_cosines(queries: np.ndarray, database: Rows, ids: np.ndarray) -> np.ndarray:
    """Cosines of each query with its candidate ``ids`` (-1: ``-inf``), from the vectors themselves."""
    found = ids >= 0
    vectors = database.take(np.where(found, ids, 0).ravel()).reshape(*ids.shape, database.dim)
    return np.where(found, np.einsum("qd,qkd->qk", queries, vectors), -np.inf).astype(np.float32)


def search(queries: Rows, database: Rows, k: int, plan: SearchPlan) -> tuple[np.ndarray, np.ndarray]:
    """The k nearest ``database`` rows of every query by cosine: ``(sims, ids)``, [len(queries), k], best first.

    Exact (``Flat``) or approximate (any other index-factory string; candidates re-scored exactly), database
    sharded to fit ``plan.index_memory``, queries searched in blocks of ``plan.batch_size``.
    """
    spec = plan.spec(len(database), database.dim)
    try:
        return _search(queries, database, k, plan, spec)
    except RuntimeError as err:  # what check_index could not try (an index that trains first)
        raise UsageError(f"--index {spec!r}: faiss failed with it ({faiss_reason(err)}); {INDEX_HINT}") from None


def _search(queries: Rows, database: Rows, k: int, plan: SearchPlan, spec: str) -> tuple[np.ndarray, np.ndarray]:
    faiss = require_faiss()
    trained = make_index(spec, database.dim)
    exact = spec == "Flat"
    k = min(k, len(database))
    wanted = k if exact else min(k * plan.refine, len(database))
    train(trained, database, plan)
    ivf = faiss.try_extract_index_ivf(trained)
    if ivf is not None:
        ivf.nprobe = plan.nprobe  # clones (and GPU copies) keep it
    gpu = use_gpu(plan.device)
    per_shard = shard_rows(trained, plan.index_memory)
    sims = np.full((len(queries), wanted), -np.inf, dtype=np.float32)
    ids = np.full((len(queries), wanted), -1, dtype=np.int64)
    for start in range(0, len(database), per_shard):
        stop = min(start + per_shard, len(database))
        index = faiss.clone_index(trained)
        if gpu:
            index = faiss.index_cpu_to_all_gpus(index)
        for _, block in database.blocks(plan.batch_size, start, stop):
            index.add(block)
        for offset, block in queries.blocks(plan.batch_size):
            block_sims, block_ids = index.search(block, min(wanted, stop - start))
            block_ids = np.where(block_ids >= 0, block_ids + start, -1)
            rows = slice(offset, offset + len(block))
            sims[rows], ids[rows] = merge_top_k(sims[rows], ids[rows], block_sims, block_ids, wanted)
        del index
        logger.info("searched %s database rows %d-%d with %d queries", spec, start, stop, len(queries))
    if not exact:
        for offset, block in queries.blocks(max(1, plan.batch_size // wanted)):
            rows = slice(offset, offset + len(block))
            rescored = exact_cosines(block, database, ids[rows])
            order = np.argsort(-rescored, axis=1, kind="stable")
            sims[rows] = np.take_along_axis(rescored, order, axis=1)
            ids[rows] = np.take_along_axis(ids[rows], order, axis=1)
    return sims[:, :k], ids[:, :k]


@dataclass
class Mined:
    """Pairs chosen by the retrieval mode, best first: ``scores``, and ``src``/``tgt`` positions in the mined rows.
    ``kept`` is how many of them (the first ones) pass the threshold."""

    scores: np.ndarray
    src: np.ndarray
    tgt: np.ndarray
    kept: int


def mine_vectors(
    src: Rows,
    tgt: Rows,
    *,
    k: int = 4,
    margin: str = "ratio",
    retrieval: str = "max",
    threshold: float | None = None,
    plan: SearchPlan | None = None,
) -> Mined:
    """Mine ``src`` against ``tgt``: kNN both ways, LASER's margin, the retrieval mode, each sentence used once."""
    plan = plan or SearchPlan()
    started = time.perf_counter()
    fwd_sim, fwd_ids = search(src, tgt, k, plan)
    bwd_sim, bwd_ids = search(tgt, src, k, plan)
    fwd, bwd = margin_scores(fwd_sim, fwd_ids, bwd_sim, bwd_ids, margin)
    scores, src_ids, tgt_ids = select_pairs(fwd, bwd, retrieval, one_to_one=True)
    kept = len(scores) if threshold is None else int(np.sum(scores > threshold))
    logger.info("mined %d pairs (%d above the threshold) in %.1fs", len(scores), kept, time.perf_counter() - started)
    return Mined(scores, src_ids, tgt_ids, kept)


def read_texts(path: Path, argument: str) -> list[str]:
    """The lines of a plain or gzipped UTF-8 file; ``UsageError`` when missing, empty, not UTF-8 (naming the line),
    or a damaged or mislabelled ``.gz``."""
    if not path.is_file():
        raise UsageError(f"{argument} {path}: no such file")
    if path.stat().st_size == 0:
        raise UsageError(f"{argument} {path}: the file is empty; give a text file with one sentence per line")
    try:
        texts = list(iter_lines(path))
    except UsageError as err:
        raise UsageError(f"{argument} {err}; convert it to UTF-8 (e.g. iconv -t UTF-8)") from None
    except (OSError, EOFError, zlib.error) as err:  # a truncated .gz, or plain text named .gz
        raise UsageError(f"{argument} {path}: unreadable ({err}); give plain or gzipped UTF-8 text") from None
    if not any(text.strip() for text in texts):
        raise UsageError(f"{argument} {path}: every line is blank; give a text file with one sentence per line")
    return texts


def unique_rows(texts: list[str]) -> np.ndarray:
    """Row numbers of the first occurrence of every distinct non-blank line, in file order."""
    first: dict[str, int] = {}
    for row, text in enumerate(texts):
        if text.strip():
            first.setdefault(text, row)
    return np.fromiter(first.values(), dtype=np.int64, count=len(first))


def histogram_title(margin: str, k: int, threshold: float | None, kept: int, total: int) -> str:
    """What a margin score means, for the histogram's title."""
    meaning = {
        "ratio": f"cos(x, y) / mean cosine of x's and y's {k} nearest neighbours;\n1 = no closer than the "
        "neighbours, higher = stands out more",
        "distance": f"cos(x, y) - mean cosine of x's and y's {k} nearest neighbours: 0 = no closer than the neighbours",
        "absolute": "cosine of the two sentences' embeddings",
    }[margin]
    cut = "no threshold" if threshold is None else f"{kept:,} of {total:,} pairs above {threshold:g} are written"
    return f"{margin} margin = {meaning}\n{cut}"


def plot_histogram(mined: Mined, path: Path, margin: str, k: int, threshold: float | None) -> None:
    """A histogram (PNG) of the mined pairs' scores, the threshold marked; written atomically."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 4.5))
    scores = np.asarray(mined.scores, dtype=np.float64)
    span = None
    if len(scores) and scores.max() - scores.min() < 1e-6:  # equal scores: numpy cannot cut 100 bins of float32 ulps
        span = (scores.min() - 1e-3, scores.max() + 1e-3)
    ax.hist(scores, bins=100, range=span, color="tab:blue")
    if threshold is not None:
        ax.axvline(threshold, color="tab:red", linestyle="--", label=f"threshold {threshold:g}")
        ax.legend()
    ax.set_xlabel(f"{margin} margin score of a mined pair")
    ax.set_ylabel("pairs")
    ax.set_yscale("log")
    ax.set_title(histogram_title(margin, k, threshold, mined.kept, len(mined.scores)), fontsize=9)
    fig.tight_layout()
    tmp = path.with_name(path.name + ".tmp.png")
    try:
        fig.savefig(tmp, dpi=110)
        os.replace(tmp, path)
    finally:
        plt.close(fig)
        tmp.unlink(missing_ok=True)


def write_pairs(mined: Mined, path: Path, src_texts: list[str], tgt_texts: list[str], src: Rows, tgt: Rows) -> int:
    """The TSV ``score<TAB>source<TAB>target``, best first, of the pairs above the threshold, written atomically
    (nothing is left behind when it fails); texts holding a tab or a line break have them as spaces
    (:func:`~hf_tlaser.inference.lines.tsv_field`). The number of texts so changed."""
    tmp = path.with_name(path.name + ".tmp")
    changed = 0
    try:
        with tmp.open("w", encoding="utf-8", newline="\n") as out:
            for score, i, j in zip(mined.scores[: mined.kept], mined.src[: mined.kept], mined.tgt[: mined.kept]):
                source, src_changed = tsv_field(src_texts[src.rows[i]])
                target, tgt_changed = tsv_field(tgt_texts[tgt.rows[j]])
                changed += src_changed + tgt_changed
                out.write(f"{score:.6f}\t{source}\t{target}\n")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    if changed:
        logger.warning("%d texts held tabs or line breaks, written as spaces in %s", changed, path)
    return changed


def check_outputs(output: Path, histogram: Path, overwrite: bool) -> None:
    """``UsageError`` when an output exists (without ``overwrite``), is a folder, or its folder does not exist or
    cannot be written (:func:`~hf_tlaser.inference.guards.check_writable`)."""
    if output.resolve() == histogram.resolve():
        raise UsageError(f"--histogram {histogram}: the same file as --output; give another path")
    for argument, path in (("--output", output), ("--histogram", histogram)):
        if path.exists() and not overwrite and not path.is_dir():
            raise UsageError(f"{argument} {path}: exists; choose another path or give --overwrite")
        check_writable(path, argument)


def check_input(texts_path: Path, meta: dict, side: str) -> None:
    """``UsageError`` when the embeddings' sidecar records an input whose SHA-256 (``input_sha256``) is not that of
    ``texts_path``'s text: the vectors of another text (an older sidecar without it: the line counts alone)."""
    recorded = meta.get("input_sha256")
    if recorded is None:
        return
    if text_digest(texts_path) != recorded:
        raise UsageError(
            f"--{side}-embeddings: embedded from {meta.get('input')} (sha256 {recorded[:12]}), not from --{side} "
            f"{texts_path} (another text of the same line count); embed this file (hf-tlaser embed --input "
            f"{texts_path})"
        )


def load_side(texts_path: Path, embeddings: list[str], side: str) -> tuple[list[str], np.ndarray, dict]:
    """Texts, vectors and sidecar of one side; ``UsageError`` when their line counts differ."""
    array, meta = read_embeddings(embeddings, f"--{side}-embeddings")
    texts = read_texts(texts_path, f"--{side}")
    if len(texts) != len(array):
        raise UsageError(
            f"--{side} {texts_path} has {len(texts)} lines but --{side}-embeddings has {len(array)} rows; give the "
            f"embeddings of this file (hf-tlaser embed --input {texts_path})"
        )
    check_input(texts_path, meta, side)
    bad = first_non_finite(array)
    if bad is not None:
        raise UsageError(
            f"--{side}-embeddings: the vector of line {bad + 1} of {texts_path} is not finite (NaN or Inf); embed "
            "the file again with a sound model"
        )
    return texts, array, meta


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hf-tlaser mine",
        description="Mine parallel sentences from two monolingual text files with LASER's margin score. Writes "
        "score<TAB>source<TAB>target, best first, and a histogram of the scores (see docs/embed_and_mine.md).",
    )
    inputs = parser.add_argument_group("inputs")
    inputs.add_argument("--src", type=Path, required=True, help="source text file, one sentence per line (or .gz)")
    inputs.add_argument("--tgt", type=Path, required=True, help="target text file, one sentence per line (or .gz)")
    inputs.add_argument("--model", help="model SPEC to embed --src and --tgt with (instead of --*-embeddings)")
    inputs.add_argument("--prompt", default="auto", help="--model's prompt, as hf-tlaser embed (default: auto)")
    inputs.add_argument(
        "--precision", choices=PRECISIONS, default="auto", help="--model's precision (default: %(default)s)"
    )
    inputs.add_argument(
        "--src-embeddings", nargs="+", help="hf-tlaser embed output(s) of --src (several: the --shard i/n files)"
    )
    inputs.add_argument("--tgt-embeddings", nargs="+", help="hf-tlaser embed output(s) of --tgt")
    outputs = parser.add_argument_group("outputs")
    outputs.add_argument("--output", type=Path, required=True, help="TSV of the mined pairs")
    outputs.add_argument("--histogram", type=Path, help="PNG histogram of the scores (default: OUTPUT stem + .png)")
    outputs.add_argument("--overwrite", action="store_true", help="replace existing outputs")
    scoring = parser.add_argument_group("scoring")
    scoring.add_argument("--margin", choices=tuple(MARGINS), default="ratio", help="margin (default: %(default)s)")
    scoring.add_argument(
        "--retrieval",
        choices=RETRIEVALS,
        default="max",
        help="fwd: best target per source; bwd: best source per target; intersect: best both ways; max: both "
        "directions' best by score; every mode uses each sentence once (default: %(default)s)",
    )
    scoring.add_argument("-k", "--neighbours", type=int, default=4, help="k of the margin (default: %(default)s)")
    scoring.add_argument(
        "--threshold",
        type=float,
        help="write pairs scoring above this (default: 1.04 for ratio, as LASER's WikiMatrix; 0 for the others)",
    )
    index = parser.add_argument_group("search")
    index.add_argument(
        "--index",
        default="auto",
        help=f"faiss index-factory string, e.g. Flat (exact), IVF4096,PQ48, OPQ64,IVF65536,PQ64; auto: Flat up to "
        f"{EXACT_MAX_ROWS:,} rows, else IVF(~4 sqrt N),PQ(dim/4)x4fs (default: %(default)s)",
    )
    index.add_argument("--nprobe", type=int, default=32, help="inverted lists visited per query (default: %(default)s)")
    index.add_argument(
        "--refine", type=int, default=4, help="approximate indexes: re-score refine x k candidates exactly (default: 4)"
    )
    index.add_argument(
        "--index-memory", type=float, default=4.0, help="GB one index shard may take (default: %(default)s)"
    )
    index.add_argument("--batch-size", type=int, default=32768, help="query rows per search (default: %(default)s)")
    index.add_argument("--train-size", type=int, default=0, help="index training sample (default: 0 = 64 per list)")
    index.add_argument("--device", choices=("auto", "cpu", "gpu"), default="auto", help="faiss device (default: auto)")
    index.add_argument("--threads", type=int, default=0, help="faiss CPU threads (default: 0 = all cores)")
    index.add_argument("--seed", type=int, default=0, help="seed of the training sample (default: %(default)s)")
    return parser


def check_args(args: argparse.Namespace) -> None:
    """Cheap checks of the arguments, before any file is read."""
    embeddings = (args.src_embeddings is not None, args.tgt_embeddings is not None)
    if args.model is None and not all(embeddings):
        raise UsageError("give --model SPEC, or both --src-embeddings and --tgt-embeddings")
    if args.model is not None and any(embeddings):
        raise UsageError("give either --model or --src-embeddings/--tgt-embeddings, not both")
    for flag, value in (("--neighbours", args.neighbours), ("--nprobe", args.nprobe), ("--refine", args.refine)):
        if value < 1:
            raise UsageError(f"{flag} {value}: must be at least 1")
    if args.threshold is not None and not math.isfinite(args.threshold):
        raise UsageError(f"--threshold {args.threshold}: give a finite score (e.g. 1.04 for the ratio margin)")
    if args.batch_size < 1 or args.index_memory <= 0 or args.train_size < 0:
        raise UsageError("--batch-size and --index-memory must be positive, --train-size at least 0")


def run(args: argparse.Namespace, embeddings: tuple[list[str], list[str]]) -> tuple[int, int, int]:
    """Mine with the embeddings files of both sides; ``(pairs written, pairs scored, texts whose tabs or line breaks
    were written as spaces)``."""
    src_texts, src_array, src_meta = load_side(args.src, embeddings[0], "src")
    tgt_texts, tgt_array, tgt_meta = load_side(args.tgt, embeddings[1], "tgt")
    check_compatible(src_meta, tgt_meta, "--src-embeddings/--tgt-embeddings")
    src, tgt = Rows(src_array, unique_rows(src_texts)), Rows(tgt_array, unique_rows(tgt_texts))
    plan = SearchPlan(
        index=args.index,
        nprobe=args.nprobe,
        refine=args.refine,
        batch_size=args.batch_size,
        index_memory=args.index_memory * 1e9,
        train_size=args.train_size,
        device=args.device,
        seed=args.seed,
    )
    for rows in (len(src), len(tgt)):  # refuse a bad --index before any search
        check_index(plan.spec(rows, src.dim), rows, src.dim)
    largest = sum(len(text.encode()) + 1 for text in src_texts) + sum(len(text.encode()) + 1 for text in tgt_texts)
    check_space(args.output.parent, largest + 12 * min(len(src), len(tgt)), f"--output {args.output}", "the TSV")
    threshold = DEFAULT_THRESHOLDS[args.margin] if args.threshold is None else args.threshold
    logger.info(
        "mining %d unique source lines (of %d) against %d unique target lines (of %d)",
        len(src),
        len(src_texts),
        len(tgt),
        len(tgt_texts),
    )
    mined = mine_vectors(
        src, tgt, k=args.neighbours, margin=args.margin, retrieval=args.retrieval, threshold=threshold, plan=plan
    )
    try:
        changed = write_pairs(mined, args.output, src_texts, tgt_texts, src, tgt)
        plot_histogram(mined, args.histogram, args.margin, args.neighbours, threshold)
    except OSError as err:
        raise write_failed(err, args.output, "--output") from None
    return mined.kept, len(mined.scores), changed


def embed_both(args: argparse.Namespace, folder: Path) -> tuple[list[str], list[str]]:
    """Embed ``--src`` and ``--tgt`` with ``--model`` into ``folder`` (``hf-tlaser embed``); the two paths."""
    paths = []
    for side, source in (("src", args.src), ("tgt", args.tgt)):
        read_texts(source, f"--{side}")  # its checks and messages, before the model loads
        output = folder / f"{side}.npy"
        embed_args = ["--model", args.model, "--input", str(source), "--output", str(output), "--dtype", "float16"]
        embed.run(
            embed.build_parser().parse_args([*embed_args, "--prompt", args.prompt, "--precision", args.precision])
        )
        paths.append([str(output)])
    return paths[0], paths[1]


def embeddings_folder(output: Path) -> Path:
    """``OUTPUT.embeddings.tmp``: where ``--model`` writes the two sides' embeddings, beside the output."""
    return output.with_name(output.name + ".embeddings.tmp")


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``hf-tlaser mine``: 0 on success, 2 with one line on stderr for a usage mistake."""
    args = build_parser().parse_args(argv)
    args.histogram = args.histogram or args.output.with_suffix(".png")

    def work() -> int:
        check_args(args)
        check_outputs(args.output, args.histogram, args.overwrite)
        faiss = require_faiss()
        if args.threads:
            faiss.omp_set_num_threads(args.threads)
        with OutputLock(args.output, "--output"):
            if args.model is None:
                kept, total, changed = run(args, (args.src_embeddings, args.tgt_embeddings))
            else:
                folder = embeddings_folder(args.output)
                shutil.rmtree(folder, ignore_errors=True)  # a killed run's (the lock says no run uses it)
                try:
                    folder.mkdir()
                    kept, total, changed = run(args, embed_both(args, folder))
                except OSError as err:
                    raise write_failed(err, folder, "--output") from None
                finally:
                    shutil.rmtree(folder, ignore_errors=True)
        replaced = f"; {changed} texts with tabs or line breaks written with spaces" if changed else ""
        print(
            f"hf-tlaser mine: {kept} pairs above the threshold (of {total}) -> {args.output}; "
            f"histogram {args.histogram}{replaced}"
        )
        return 0

    return run_command("hf-tlaser mine", work)


if __name__ == "__main__":
    sys.exit(main())

"""``hf-tlaser mine``: parallel sentences from two monolingual corpora, at any size that fits on disk.

The command around the bitext layer (:mod:`hf_tlaser.bitext`): each text file is read once (its lines and digest,
:func:`~hf_tlaser.bitext.texts.read_texts`), the vectors come from ``hf-tlaser embed`` outputs or are embedded from
those lines with ``--model`` (:func:`hf_tlaser.inference.embed.run`, the file not read again), and
:func:`~hf_tlaser.bitext.mining.mine_vectors` mines them: every sentence's k nearest neighbours on the other side by
cosine (:func:`~hf_tlaser.bitext.index.search`: exact up to 50,000 rows, a compressed faiss index above, sharded,
on GPU when faiss sees one), LASER's margin, a retrieval mode, each sentence used once, and the pairs above a
threshold written best first (:func:`~hf_tlaser.bitext.texts.write_tsv`) with a histogram of the scores.

Identical lines are mined once (LASER's ``--unify``): the first occurrence's vector stands for all of them, and the
TSV has each source text and each target text at most once. Blank lines are not mined. A tab or a line-breaking
character inside a text is written as a space, so every TSV row has three columns; the texts changed so are counted
and logged.

Before any search (and before ``--model`` loads): the outputs' folder is tried for writing, ``OUTPUT.lock`` is
locked (one run per output), each embeddings file's recorded input is compared with ``--src``/``--tgt`` (their
SHA-256 where the sidecar has one, and always their line counts), the free space is checked against the TSV's
largest size, and the ``--index`` string is built on a sample (or refused, e.g. more inverted lists than rows; with
``--model``, for the vector width its files state, before it loads). With ``--model``, the two embeddings files are
written in ``OUTPUT.embeddings.tmp/`` beside the output (removed at the end, and by the next run on the output when a
killed run left it).
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import shutil
import sys
from pathlib import Path

import numpy as np

from hf_tlaser.bitext.index import EXACT_MAX_ROWS, Rows, SearchPlan, check_index, require_faiss
from hf_tlaser.bitext.margin import MARGINS
from hf_tlaser.bitext.mining import Mined, mine_vectors
from hf_tlaser.bitext.select import DEFAULT_THRESHOLDS, RETRIEVALS, unique_rows
from hf_tlaser.bitext.texts import Texts, read_texts, write_tsv
from hf_tlaser.commands import run_command
from hf_tlaser.encoders import vector_width
from hf_tlaser.errors import UsageError
from hf_tlaser.guards import OutputLock, check_space, check_writable, write_failed
from hf_tlaser.hardware import PRECISIONS
from hf_tlaser.inference import embed
from hf_tlaser.inference.store import check_compatible, first_non_finite, read_embeddings

logger = logging.getLogger(__name__)


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
    """The TSV of the pairs above the threshold, best first (:func:`~hf_tlaser.bitext.texts.write_tsv`: atomic,
    tabs and line breaks as spaces); the number of texts whose tabs or line breaks were so written."""
    kept = slice(mined.kept)
    rows = zip(mined.scores[kept], src.rows[mined.src[kept]], tgt.rows[mined.tgt[kept]])
    return write_tsv(((score, src_texts[i], tgt_texts[j]) for score, i, j in rows), path)


def check_outputs(output: Path, histogram: Path, overwrite: bool) -> None:
    """``UsageError`` when an output exists (without ``overwrite``), is a folder, or its folder does not exist or
    cannot be written (:func:`~hf_tlaser.guards.check_writable`)."""
    if output.resolve() == histogram.resolve():
        raise UsageError(f"--histogram {histogram}: the same file as --output; give another path")
    for argument, path in (("--output", output), ("--histogram", histogram)):
        if path.exists() and not overwrite and not path.is_dir():
            raise UsageError(f"{argument} {path}: exists; choose another path or give --overwrite")
        check_writable(path, argument)


def check_input(texts_path: Path, texts: Texts, meta: dict, side: str) -> None:
    """``UsageError`` when the embeddings' sidecar records an input whose SHA-256 (``input_sha256``) is not that of
    ``texts``: the vectors of another text (an older sidecar without it: the line counts alone)."""
    recorded = meta.get("input_sha256")
    if recorded is not None and texts.sha256 != recorded:
        raise UsageError(
            f"--{side}-embeddings: embedded from {meta.get('input')} (sha256 {recorded[:12]}), not from --{side} "
            f"{texts_path} (another text of the same line count); embed this file (hf-tlaser embed --input "
            f"{texts_path})"
        )


def load_side(texts_path: Path, texts: Texts, embeddings: list[str], side: str) -> tuple[np.ndarray, dict]:
    """Vectors and sidecar of one side, checked against its texts; ``UsageError`` when their line counts differ."""
    array, meta = read_embeddings(embeddings, f"--{side}-embeddings")
    if len(texts.lines) != len(array):
        raise UsageError(
            f"--{side} {texts_path} has {len(texts.lines)} lines but --{side}-embeddings has {len(array)} rows; give "
            f"the embeddings of this file (hf-tlaser embed --input {texts_path})"
        )
    check_input(texts_path, texts, meta, side)
    bad = first_non_finite(array)
    if bad is not None:
        raise UsageError(
            f"--{side}-embeddings: the vector of line {bad + 1} of {texts_path} is not finite (NaN or Inf); embed "
            "the file again with a sound model"
        )
    return array, meta


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


def search_plan(args: argparse.Namespace) -> SearchPlan:
    """The kNN search the arguments ask for (``--index``, ``--nprobe``, ...)."""
    return SearchPlan(
        index=args.index,
        nprobe=args.nprobe,
        refine=args.refine,
        batch_size=args.batch_size,
        index_memory=args.index_memory * 1e9,
        train_size=args.train_size,
        device=args.device,
        seed=args.seed,
    )


def check_indexes(plan: SearchPlan, rows: tuple[int, int], dim: int) -> None:
    """``UsageError`` unless the search can run ``plan``'s index on databases of the two sides' unique rows
    (:func:`~hf_tlaser.bitext.index.check_index`)."""
    for count in rows:
        check_index(plan.spec(count, dim), count, dim)


def run(
    args: argparse.Namespace,
    texts: tuple[Texts, Texts],
    rows: tuple[np.ndarray, np.ndarray],
    embeddings: tuple[list[str], list[str]],
) -> tuple[int, int, int]:
    """Mine the texts of both sides (``rows``: the lines mined, ``unique_rows``) with their embeddings files;
    ``(pairs written, pairs scored, texts whose tabs or line breaks were written as spaces)``."""
    src_array, src_meta = load_side(args.src, texts[0], embeddings[0], "src")
    tgt_array, tgt_meta = load_side(args.tgt, texts[1], embeddings[1], "tgt")
    check_compatible(src_meta, tgt_meta, "--src-embeddings/--tgt-embeddings")
    src_texts, tgt_texts = texts[0].lines, texts[1].lines
    src, tgt = Rows(src_array, rows[0]), Rows(tgt_array, rows[1])
    plan = search_plan(args)
    check_indexes(plan, (len(src), len(tgt)), src.dim)  # a bad --index is refused before any search
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


def embed_both(args: argparse.Namespace, texts: tuple[Texts, Texts], folder: Path) -> tuple[list[str], list[str]]:
    """Embed the lines of ``--src`` and ``--tgt``, already read, with ``--model`` into ``folder`` (``hf-tlaser
    embed``'s :func:`~hf_tlaser.inference.embed.run`); the two paths."""
    paths = []
    for side, source, lines in (("src", args.src, texts[0]), ("tgt", args.tgt, texts[1])):
        output = folder / f"{side}.npy"
        job = embed.Job(
            model=args.model,
            input=str(source),
            output=str(output),
            prompt=args.prompt,
            precision=args.precision,
            dtype="float16",
            texts=lines,
        )
        embed.run(job)
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
            texts = read_texts(args.src, "--src"), read_texts(args.tgt, "--tgt")
            rows = unique_rows(texts[0].lines), unique_rows(texts[1].lines)
            width = None if args.model is None else vector_width(args.model)
            if width is not None:  # --model: a bad --index is refused before the model loads and embeds
                check_indexes(search_plan(args), (len(rows[0]), len(rows[1])), width)
            if args.model is None:
                kept, total, changed = run(args, texts, rows, (args.src_embeddings, args.tgt_embeddings))
            else:
                folder = embeddings_folder(args.output)
                shutil.rmtree(folder, ignore_errors=True)  # a killed run's (the lock says no run uses it)
                try:
                    folder.mkdir()
                    kept, total, changed = run(args, texts, rows, embed_both(args, texts, folder))
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

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

Filters (``--max-score``, ``--min-chars``/``--max-chars``, ``--max-length-ratio`` with ``--length-factors``, ``--lid``,
``--dedup-normalised``; :mod:`hf_tlaser.bitext.filters`) remove pairs above the threshold, each counted in the log and
the summary; with none the TSV is what it was without them. ``--thresholds FILE`` takes the threshold of the language
pair ``--src-lang``-``--tgt-lang`` from a file. Beside the TSV: ``OUTPUT.lines.tsv`` (score and 0-based line numbers of
both sides, one line per TSV line) and ``OUTPUT.summary.json`` (the counts of every step, the arguments, the inputs'
SHA-256).
"""

from __future__ import annotations

import argparse
import logging
import math
import shutil
import sys
from pathlib import Path

import numpy as np

from hf_tlaser.bitext.filters import (
    Filters,
    apply_filters,
    build_filters,
    check_languages,
    flores_length_factors,
    run_threshold,
)
from hf_tlaser.bitext.index import EXACT_MAX_ROWS, Rows, SearchPlan, check_index, require_faiss
from hf_tlaser.bitext.margin import MARGINS
from hf_tlaser.bitext.mining import Mined, mine_vectors
from hf_tlaser.bitext.select import RETRIEVALS, unique_rows
from hf_tlaser.bitext.texts import TextDigest, Texts, read_texts, write_lines, write_tsv
from hf_tlaser.commands import run_command
from hf_tlaser.data.paths import get_data_dir
from hf_tlaser.encoders import vector_width
from hf_tlaser.encoders.vectors import save_json
from hf_tlaser.errors import MissingDataError, UsageError
from hf_tlaser.guards import (
    OutputLock,
    check_space,
    check_writable,
    lock_path,
    refuse_outputs_over_inputs,
    write_failed,
)
from hf_tlaser.hardware import PRECISIONS
from hf_tlaser.inference import embed
from hf_tlaser.inference.histogram import plot_histogram
from hf_tlaser.inference.store import check_compatible, first_non_finite, not_finite, read_embeddings, sidecar_path

logger = logging.getLogger(__name__)


def kept_pairs(
    mined: Mined, src: Rows, tgt: Rows, keep: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Scores and line numbers (0-based, of the first occurrence) of the pairs above the threshold, best first; with
    ``keep``, a mask over them, those it marks."""
    above = slice(mined.kept)
    pairs = mined.scores[above], src.rows[mined.src[above]], tgt.rows[mined.tgt[above]]
    return pairs if keep is None else (pairs[0][keep], pairs[1][keep], pairs[2][keep])


def side_outputs(output: Path) -> tuple[Path, Path]:
    """``OUTPUT.lines.tsv`` and ``OUTPUT.summary.json`` (``OUTPUT`` without its suffix): the pairs' line numbers, and
    the counts, threshold, inputs and arguments of the run."""
    return output.with_suffix(".lines.tsv"), output.with_suffix(".summary.json")


def check_outputs(output: Path, histogram: Path, overwrite: bool, others: tuple[tuple[str, Path], ...] = ()) -> None:
    """``UsageError`` when an output (``others``: more ``(argument, path)``) exists (without ``overwrite``), is
    another's file or a folder, or its folder does not exist or cannot be written
    (:func:`~hf_tlaser.guards.check_writable`)."""
    outputs = (("--output", output), ("--histogram", histogram), *others)
    seen: dict[Path, str] = {}
    for argument, path in outputs:
        first = seen.setdefault(path.resolve(), argument)
        if first != argument:
            raise UsageError(f"{argument} {path}: the same file as {first}; give another path")
    for argument, path in outputs:
        if path.exists() and not overwrite and not path.is_dir():
            raise UsageError(f"{argument} {path}: exists; choose another path or give --overwrite")
        check_writable(path, argument)


def output_paths(args: argparse.Namespace) -> dict[str, Path]:
    """The files a run writes from its pairs: ``--output``, ``--histogram`` and the two :func:`side_outputs`."""
    lines, summary = side_outputs(args.output)
    return {
        "--output": args.output,
        "--histogram": args.histogram,
        "--output (lines)": lines,
        "--output (summary)": summary,
    }


def input_paths(args: argparse.Namespace) -> dict[str, list[Path]]:
    """The files a run reads: the texts, the embeddings files and their sidecars, ``--thresholds``, and ``--model``
    where it is a folder here."""
    inputs = {"--src": [args.src], "--tgt": [args.tgt]}
    for side in ("src", "tgt"):
        paths = [Path(path) for path in getattr(args, f"{side}_embeddings") or ()]
        inputs[f"--{side}-embeddings"] = [*paths, *map(sidecar_path, paths)]
    inputs["--thresholds"] = [] if args.thresholds is None else [args.thresholds]
    inputs["--model"] = [Path(args.model)] if args.model is not None and Path(args.model).exists() else []
    return inputs


def check_input(texts_path: Path, texts: TextDigest, meta: dict, side: str) -> None:
    """``UsageError`` when the embeddings' sidecar records an input whose SHA-256 (``input_sha256``) is not that of
    ``texts``: the vectors of another text (an older sidecar without it: the line counts alone)."""
    recorded = meta.get("input_sha256")
    if recorded is not None and texts.sha256 != recorded:
        raise UsageError(
            f"--{side}-embeddings: embedded from {meta.get('input')} (sha256 {recorded[:12]}), not from --{side} "
            f"{texts_path} (another text of the same line count); embed this file (hf-tlaser embed --input "
            f"{texts_path})"
        )


def load_side(
    texts_path: Path, texts: TextDigest, embeddings: list[str], side: str, check_finite: bool = True
) -> tuple[np.ndarray, dict]:
    """Vectors and sidecar of one side, checked against its texts; ``UsageError`` when their line counts differ, or
    (``check_finite``; a staged pipeline's ``populate`` tasks check their rows instead) a vector is not finite."""
    array, meta = read_embeddings(embeddings, f"--{side}-embeddings")
    if texts.lines != len(array):
        raise UsageError(
            f"--{side} {texts_path} has {texts.lines} lines but --{side}-embeddings has {len(array)} rows; give "
            f"the embeddings of this file (hf-tlaser embed --input {texts_path})"
        )
    check_input(texts_path, texts, meta, side)
    bad = first_non_finite(array) if check_finite else None
    if bad is not None:
        raise UsageError(not_finite(side, bad, texts_path))
    return array, meta


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hf-tlaser mine",
        description="Mine parallel sentences from two monolingual text files with LASER's margin score. Writes "
        "score<TAB>source<TAB>target, best first, a histogram of the scores, the pairs' line numbers "
        "(OUTPUT.lines.tsv) and the counts (OUTPUT.summary.json); see docs/embed_and_mine.md.",
    )
    parser.set_defaults(command=parser.prog)  # the summary's "command"
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


def add_filter_arguments(parser: argparse.ArgumentParser) -> None:
    """The filters' options (:func:`filters_from_args`), off by default."""
    group = parser.add_argument_group("filters of the pairs above the threshold, in this order (default: off)")
    group.add_argument("--max-score", type=float, help="drop pairs scoring above this (stopes: 1.25, ratio margin)")
    group.add_argument("--min-chars", type=int, default=0, help="drop pairs with a side of fewer characters")
    group.add_argument("--max-chars", type=int, help="drop pairs with a side of more characters")
    group.add_argument(
        "--max-length-ratio",
        type=float,
        help="drop pairs whose longer side has more times the shorter's characters (see --length-factors)",
    )
    group.add_argument(
        "--length-factors",
        choices=("none", "flores"),
        default="none",
        help="flores: scale each side's characters by its language's FLORES-200 length factor (stopes': English "
        "characters over the language's, zh 3.0), for --min/--max-chars and --max-length-ratio across scripts; needs "
        "--src-lang, --tgt-lang and flores-devtest in the data folder (default: none, characters as they are)",
    )
    group.add_argument(
        "--data-dir", help="corpora folder for --length-factors (default: $HF_TLASER_DATA, else ../shared/data)"
    )
    group.add_argument("--lid", action="store_true", help="keep pairs whose sides py3langid identifies as --*-lang")
    group.add_argument("--dedup-normalised", action="store_true", help="keep the best pair of each normalised text")
    group.add_argument("--src-lang", help="--src's language for --lid and --thresholds (ISO 639-1, e.g. de)")
    group.add_argument("--tgt-lang", help="--tgt's language (ISO 639-1, e.g. en)")
    group.add_argument(
        "--thresholds", type=Path, help='JSON/YAML file {"de-en": 1.06, "default": 1.04}: --threshold by language pair'
    )


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


def filters_from_args(args: argparse.Namespace) -> tuple[Filters, tuple[float, str]]:
    """The filters and the threshold (and where it comes from) that the arguments ask for, checked before the texts
    are read (:func:`~hf_tlaser.bitext.filters.build_filters`, :func:`~hf_tlaser.bitext.filters.run_threshold`)."""
    langs = args.src_lang, args.tgt_lang
    threshold = run_threshold(args.threshold, args.thresholds, args.margin, langs)
    limits = dict(min_chars=args.min_chars, max_chars=args.max_chars, max_length_ratio=args.max_length_ratio)
    factors = (1.0, 1.0)
    if args.length_factors == "flores":
        langs = check_languages(langs, "--length-factors flores")
        try:
            factors = flores_length_factors(get_data_dir(args.data_dir) / "flores-devtest", langs)
        except MissingDataError as err:
            raise UsageError(f"--length-factors flores: {err}") from None
        logger.info(
            "lengths scaled by FLORES-200 length factors: %s %.3f, %s %.3f",
            langs[0],
            factors[0],
            *langs[1:],
            factors[1],
        )
    filters = build_filters(
        args.max_score, **limits, languages=langs, lid=args.lid, dedup=args.dedup_normalised, length_factors=factors
    )
    return filters, threshold


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


def run_summary(
    args: argparse.Namespace,
    texts: tuple[TextDigest, TextDigest],
    unique: tuple[int, int],
    mined: Mined,
    removed: dict[str, int | None],
    threshold: tuple[float, str],
) -> dict:
    """``OUTPUT.summary.json`` of a run but the texts written with spaces: the counts of every step (``unique``:
    the unique lines of each side; ``removed``: by each filter, ``None`` where off), the threshold, the inputs'
    SHA-256, the arguments."""
    counts, inputs = {}, {}
    for side, text, count in zip(("src", "tgt"), texts, unique):
        counts.update({f"{side}_lines": text.lines, f"{side}_unique_lines": count})
        inputs[side] = {"path": str(getattr(args, side)), "sha256": text.sha256}
    written = mined.kept - sum(count or 0 for count in removed.values())
    counts.update(pairs_scored=len(mined.scores), above_threshold=mined.kept, removed=removed, written=written)
    return {
        "command": args.command,
        "counts": counts,
        "threshold": {"value": threshold[0], "from": threshold[1]},
        "inputs": inputs,
        "lines_file": "score, source line, target line: 0-based line numbers in --src and --tgt (an identical "
        "line's first occurrence), one line per line of the TSV",
        "arguments": {key: str(value) if isinstance(value, Path) else value for key, value in vars(args).items()},
    }


def run(
    args: argparse.Namespace,
    texts: tuple[Texts, Texts],
    rows: tuple[np.ndarray, np.ndarray],
    embeddings: tuple[list[str], list[str]],
    filters: tuple[Filters, tuple[float, str]],
) -> dict:
    """Mine the texts of both sides (``rows``: the lines mined, ``unique_rows``) with their embeddings files, filter
    the pairs above the threshold (``filters``: :func:`filters_from_args`) and write the outputs; the summary."""
    src_array, src_meta = load_side(args.src, texts[0].digest, embeddings[0], "src")
    tgt_array, tgt_meta = load_side(args.tgt, texts[1].digest, embeddings[1], "tgt")
    check_compatible(src_meta, tgt_meta, "--src-embeddings/--tgt-embeddings")
    src_texts, tgt_texts = texts[0].lines, texts[1].lines
    src, tgt = Rows(src_array, rows[0]), Rows(tgt_array, rows[1])
    plan = search_plan(args)
    check_indexes(plan, (len(src), len(tgt)), src.dim)  # a bad --index is refused before any search
    largest = sum(len(text.encode()) + 1 for text in src_texts) + sum(len(text.encode()) + 1 for text in tgt_texts)
    needed = largest + 40 * min(len(src), len(tgt))  # the TSV, and the lines file's scores and line numbers
    check_space(args.output.parent, needed, f"--output {args.output}", "the TSV")
    threshold = filters[1][0]
    counts = len(src), len(src_texts), len(tgt), len(tgt_texts)
    logger.info("mining %d unique source lines (of %d) against %d unique target lines (of %d)", *counts)
    mined = mine_vectors(
        src, tgt, k=args.neighbours, margin=args.margin, retrieval=args.retrieval, threshold=threshold, plan=plan
    )
    return write_outputs(args, texts, (src, tgt), mined, filters)


def write_outputs(
    args: argparse.Namespace,
    texts: tuple[Texts, Texts],
    sides: tuple[Rows, Rows],
    mined: Mined,
    filters: tuple[Filters, tuple[float, str]],
) -> dict:
    """Filter the pairs above the threshold and write the TSV, the lines file, the histogram and the summary; the
    summary."""
    (src_texts, tgt_texts), (src, tgt) = (texts[0].lines, texts[1].lines), sides
    _, src_lines, tgt_lines = kept_pairs(mined, src, tgt)
    pairs = mined.scores[: mined.kept], [src_texts[i] for i in src_lines], [tgt_texts[j] for j in tgt_lines]
    keep, removed = apply_filters(filters[0], *pairs)
    digests = texts[0].digest, texts[1].digest
    summary = run_summary(args, digests, (len(src.rows), len(tgt.rows)), mined, removed, filters[1])
    try:
        scores, src_lines, tgt_lines = kept_pairs(mined, src, tgt, keep)
        texts_rows = ((score, src_texts[i], tgt_texts[j]) for score, i, j in zip(scores, src_lines, tgt_lines))
        changed = write_tsv(texts_rows, args.output)  # atomic, tabs and line breaks as spaces
        write_lines(scores, src_lines, tgt_lines, side_outputs(args.output)[0])
        plot_histogram(mined, args.histogram, args.margin, args.neighbours, filters[1][0])
        summary["texts_written_with_spaces"] = changed
        save_json(side_outputs(args.output)[1], summary)
    except OSError as err:
        raise write_failed(err, args.output, "--output") from None
    return summary


def report(command: str, args: argparse.Namespace, summary: dict) -> None:
    """The closing line of a run: pairs above the threshold, kept by the filters, and the outputs."""
    counts, changed = summary["counts"], summary["texts_written_with_spaces"]
    removed = ", ".join(f"{name} {count}" for name, count in counts["removed"].items() if count is not None)
    filtered = f", {counts['written']} kept by the filters ({removed} removed)" if removed else ""
    replaced = f"; {changed} texts with tabs or line breaks written with spaces" if changed else ""
    print(
        f"{command}: {counts['above_threshold']} pairs above the threshold (of {counts['pairs_scored']})"
        f"{filtered} -> {args.output}; histogram {args.histogram}; line numbers and counts "
        f"{', '.join(map(str, side_outputs(args.output)))}{replaced}"
    )


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
    parser = build_parser()
    add_filter_arguments(parser)
    args = parser.parse_args(argv)
    args.histogram = args.histogram or args.output.with_suffix(".png")

    def work() -> int:
        check_args(args)
        outputs = {**output_paths(args), "--output (lock)": lock_path(args.output)}
        if args.model is not None:
            outputs["--output (embeddings)"] = embeddings_folder(args.output)
        refuse_outputs_over_inputs(outputs, input_paths(args))
        others = tuple(zip(("--output (lines)", "--output (summary)"), side_outputs(args.output)))
        check_outputs(args.output, args.histogram, args.overwrite, others)
        filters = filters_from_args(args)
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
                summary = run(args, texts, rows, (args.src_embeddings, args.tgt_embeddings), filters)
            else:
                folder = embeddings_folder(args.output)
                shutil.rmtree(folder, ignore_errors=True)  # a killed run's (the lock says no run uses it)
                try:
                    folder.mkdir()
                    summary = run(args, texts, rows, embed_both(args, texts, folder), filters)
                except OSError as err:
                    raise write_failed(err, folder, "--output") from None
                finally:
                    shutil.rmtree(folder, ignore_errors=True)
        report(args.command, args, summary)
        return 0

    return run_command("hf-tlaser mine", work)


if __name__ == "__main__":
    sys.exit(main())

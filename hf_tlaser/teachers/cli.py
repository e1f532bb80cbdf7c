"""``hf-tlaser teacher-vectors``: compute a teacher's vectors of a corpus once, into the teacher cache (and a
``vectors:`` file with --output), so that a long teacher pass runs where it is fast (a GPU) and training reuses it.

The texts are the sentences of the --languages (default: en, the pivot side that the teacher encodes in LASER3-style
distillation) of the --corpora, raw (before cleaning, which removes sentences but changes none), each distinct text
once, in corpus order: what ``teacher_texts`` returns for the same arguments.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from collections.abc import Iterable, Sequence

import numpy as np

from hf_tlaser.commands import print_summary, run_command
from hf_tlaser.data.corpora import load_corpus, resolve_corpora
from hf_tlaser.data.languages import parse_languages
from hf_tlaser.data.sources import SPEC_HELP as CORPUS_SPEC_HELP
from hf_tlaser.data.sources import Source
from hf_tlaser.encoders import SPEC_HELP, write_vectors
from hf_tlaser.errors import UsageError
from hf_tlaser.hardware import PRECISIONS
from hf_tlaser.model_folders import AUTO

from .cache import NO_CACHE, TeacherCache
from .targets import TRAIN_PROMPTS, Teacher, load_teacher

logger = logging.getLogger(__name__)


def teacher_texts(
    corpora: str | Iterable[str | Source],
    data_dir: str | os.PathLike | None = None,
    languages: Sequence[str] = ("en",),
    limit: int | None = None,
) -> list[str]:
    """The distinct non-empty sentences of ``languages`` in the corpora (registered names or specs), source by source
    and language by language in corpus order, at most ``limit``: the text list of ``hf-tlaser teacher-vectors``.
    ``UsageError`` when no corpus has any of ``languages``."""
    sources = resolve_corpora(corpora, data_dir)
    texts: dict[str, None] = {}
    used = False
    for source in sources:
        wanted = [lang for lang in languages if lang in source.languages]
        if not wanted:
            continue
        used = True
        dataset = load_corpus(source, data_dir, max_lines=limit)
        for lang in wanted:
            for batch in dataset.select_columns([lang]).iter(batch_size=10_000):
                texts.update((text, None) for text in batch[lang] if text)
                if limit is not None and len(texts) >= limit:
                    return list(texts)[:limit]
    if not used:
        names = ", ".join(source.spec for source in sources)
        raise UsageError(f"--languages {','.join(languages)}: none of the corpora {names} has text in them")
    return list(texts)


class _CachedRows:
    """Rows of ``texts`` from a filled cache, a slice at a time (``write_vectors`` reads it in chunks)."""

    def __init__(self, cache: TeacherCache, texts: list[str]) -> None:
        self.cache, self.texts = cache, texts
        self.shape = (len(texts), cache.teacher.dim)

    def __getitem__(self, rows: slice) -> np.ndarray:
        return self.cache.get(self.texts[rows])


def build_parser() -> argparse.ArgumentParser:
    """The ``hf-tlaser teacher-vectors`` argument parser."""
    parser = argparse.ArgumentParser(prog="hf-tlaser teacher-vectors", description=__doc__.split("\n\n")[0])
    parser.add_argument("--teacher", required=True, metavar="SPEC", help=f"the teacher: {SPEC_HELP}")
    parser.add_argument(
        "--corpora", required=True, nargs="+", metavar="SPEC", help=f"corpora, as hf-tlaser train: {CORPUS_SPEC_HELP}"
    )
    parser.add_argument(
        "--data-dir", help="folder of the registered corpora (default: $HF_TLASER_DATA, else ../shared/data)"
    )
    parser.add_argument(
        "--languages",
        default="en",
        metavar="LANGS",
        help="comma-separated languages whose sentences the teacher encodes (default: %(default)s)",
    )
    parser.add_argument(
        "--prompt",
        default=AUTO,
        metavar="NAME",
        help="sentence-transformers prompt: auto (the model's 'query' prompt when it has one: e5's for symmetric "
        "tasks, as hf-tlaser train --teacher and evaluate --reference use), none, or a prompt name (default: "
        "%(default)s)",
    )
    parser.add_argument(
        "--cache-dir",
        help="teacher-vector cache (default: $HF_TLASER_TEACHER_CACHE, else ~/.cache/hf_tlaser/teachers); none: no "
        "cache (with --output only)",
    )
    parser.add_argument("--batch-size", type=int, default=64, help="texts per teacher call (default: %(default)s)")
    parser.add_argument(
        "--chunk-size", type=int, default=2048, help="texts per cache shard: what a killed run loses at most"
    )
    parser.add_argument("--limit", type=int, metavar="N", help="the first N distinct texts only")
    parser.add_argument(
        "--output", metavar="PATH.npy", help="also write the vectors of the text list as a vectors: teacher file"
    )
    parser.add_argument(
        "--dtype", choices=["float16", "float32"], default="float16", help="stored precision (default: %(default)s)"
    )
    parser.add_argument(
        "--precision", choices=PRECISIONS, default="auto", help="teacher forward precision (default: %(default)s)"
    )
    return parser


def _check(args: argparse.Namespace) -> list[str]:
    """The checks that need no data and no model; the parsed --languages."""
    for flag, value in (("--batch-size", args.batch_size), ("--chunk-size", args.chunk_size), ("--limit", args.limit)):
        if value is not None and value < 1:
            raise UsageError(f"{flag} {value}: must be at least 1")
    if args.output and not args.output.endswith(".npy"):
        raise UsageError(f"--output {args.output}: give a path ending in .npy")
    if args.cache_dir == NO_CACHE and not args.output:
        raise UsageError("--cache-dir none keeps nothing: give --output, or a cache folder")
    try:
        return parse_languages(args.languages, "language")
    except ValueError as err:
        raise UsageError(f"--languages: {err}") from None


def run(args: argparse.Namespace) -> dict:
    """Check everything, load the teacher, read the texts, fill the cache and write --output; the run's numbers."""
    languages = _check(args)
    try:
        resolve_corpora(args.corpora, args.data_dir)
    except UsageError as err:
        raise UsageError(f"--corpora: {err}") from None
    teacher: Teacher = load_teacher(
        args.teacher,
        prompt_name=args.prompt,
        prefer=TRAIN_PROMPTS,
        precision=args.precision,
        batch_size=args.batch_size,
    )
    texts = teacher_texts(args.corpora, args.data_dir, languages, args.limit)
    start = time.perf_counter()
    summary = {"teacher": teacher.describe(), "texts": len(texts)}
    if args.cache_dir == NO_CACHE:
        rows = teacher.encode(texts, show_progress=True)
        summary.update(hits=0, computed=len(texts))
    else:
        cache = TeacherCache(args.cache_dir, teacher, dtype=args.dtype, chunk_size=args.chunk_size)
        stats = cache.fill(texts)
        rows = _CachedRows(cache, texts)
        summary.update(hits=stats.hits, computed=stats.computed, cache=str(cache.folder))
    seconds = time.perf_counter() - start
    summary.update(seconds=round(seconds, 2), texts_per_second=round(summary["computed"] / max(seconds, 1e-9), 1))
    if args.output:
        extra = dict(corpora=list(args.corpora), languages=languages, limit=args.limit)
        summary["output"] = str(write_vectors(args.output, texts, rows, teacher.to_dict(), args.dtype, **extra))
    return summary


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``hf-tlaser teacher-vectors``: 0 on success, 2 with one line on stderr for a usage mistake."""
    args = build_parser().parse_args(argv)
    return run_command("hf-tlaser teacher-vectors", lambda: print_summary(run(args)))


if __name__ == "__main__":
    sys.exit(main())

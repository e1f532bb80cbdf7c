"""Which e5 prompt for the family's symmetric use (issue 34, point 7): xsim error of the teacher on the dev sets
(FLORES devtest, UD-PUD; 5 languages, every direction) under each prompt, and the cross-prompt search (queries
encoded with one prompt, targets with the other: a student of one space judged against the other).

``python scripts/teacher_prompt.py [--teacher FOLDER] [--prompts query passage] [--data-dir DIR] [--cache-dir DIR]
[--precision auto] [--limit N]`` prints a markdown table: mean xsim error % over the 20 directions of each set, margins
``absolute`` and ``ratio``. Vectors go through the teacher cache (a rerun encodes nothing).
"""

from __future__ import annotations

import argparse
import itertools
import time

import numpy as np

from hf_tlaser.data.paths import get_data_dir
from hf_tlaser.evaluation.suite import embed_retrieval, read_retrieval_sets, score_retrieval
from hf_tlaser.hardware import PRECISIONS
from hf_tlaser.teachers.cache import TeacherCache
from hf_tlaser.teachers.targets import load_teacher

SETS = ("flores-devtest", "ud-pud")
LANGS = ("en", "de", "es", "fr", "it")
MARGINS = ("absolute", "ratio")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--teacher", help="teacher SPEC (default: DATA_DIR/multilingual-e5-small)")
    parser.add_argument("--prompts", nargs="+", default=["query", "passage"], help="prompt names to compare")
    parser.add_argument("--data-dir", help="shared data folder (default: $HF_TLASER_DATA, else ../shared/data)")
    parser.add_argument("--cache-dir", help="teacher cache (default: $HF_TLASER_TEACHER_CACHE, else ~/.cache/...)")
    parser.add_argument("--precision", choices=PRECISIONS, default="auto", help="teacher forward precision")
    parser.add_argument("--limit", type=int, help="the first N sentences of each set only (a quicker, rougher table)")
    args = parser.parse_args()
    data_dir = get_data_dir(args.data_dir)
    spec = args.teacher or str(data_dir / "multilingual-e5-small")
    texts = read_retrieval_sets(data_dir, SETS, LANGS)
    texts = {name: {lang: lines[: args.limit] for lang, lines in by_lang.items()} for name, by_lang in texts.items()}
    embs = {}
    for name in args.prompts:
        teacher = load_teacher(spec, prompt_name=name, precision=args.precision)
        start = time.perf_counter()
        embs[name] = embed_retrieval(TeacherCache(args.cache_dir, teacher, dtype="float32").embedder(), texts)
        print(f"{name}: prompt {teacher.prompt!r}, {time.perf_counter() - start:.0f} s", flush=True)
    rows = [(name, name) for name in args.prompts]
    rows += [(a, b) for a, b in itertools.permutations(args.prompts[:2], 2)]  # cross-prompt search
    header = " | ".join(f"{s} {m}" for s in SETS for m in MARGINS)
    sizes = ", ".join(f"{name} {len(next(iter(by_lang.values())))}" for name, by_lang in texts.items())
    print(f"\nteacher {spec} ({sizes} sentences); mean xsim error % over every direction of {', '.join(LANGS)}\n")
    print(f"| queries | targets | {header} |\n|---|---|" + "---:|" * (len(SETS) * len(MARGINS)))
    for queries, targets in rows:
        other = None if queries == targets else embs[targets]
        result = score_retrieval(embs[queries], MARGINS, targets=other)
        cells = [f"{np.nanmean(result.matrices[s][m][1]):.2f}" for s in SETS for m in MARGINS]
        print(f"| {queries} | {targets} | {' | '.join(cells)} |")


if __name__ == "__main__":
    main()

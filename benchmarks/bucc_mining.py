"""A mining benchmark in the style of BUCC 2018, built from sets we may tune on (NTREX-128, FLORES devtest).

``python -m benchmarks.bucc_mining --model NAME=SPEC ... [--tfidf] [--data-dir DIR] [--output results.json]``

BUCC 2018 hides gold translation pairs among sentences that have no translation on the other side, and asks for the
pairs. Here, for each language xx of ``LANGUAGES`` against English:

* **gold**: NTREX-128 sentences whose translation is kept on both sides (``GOLD_SHARE`` of them);
* **same-document distractors** (the hardest kind): the other NTREX sentences of the same documents, each kept on one
  side only, its counterpart removed (half on the xx side, half on the English side);
* **news of other years**: WMT newstest sentences that translate nothing on the other side: English from the 2008-2011
  multi-way sets, xx from its 2014-2020 xx-en sets (different documents, so no pair among them). These corpora are
  in the main job's training data: a model has seen the sentences, never a counterpart of them here.

NTREX's documents are split in two (alternating documents): the ``sample`` split chooses the margin threshold that
maximises F1, which is then applied to the ``test`` split, as BUCC does with its sample and test sets. Mining is
LASER's: ratio margin with k = 4 neighbours both ways, ``max`` retrieval (each sentence used once), as
``hf-tlaser mine`` does. FLORES devtest (en de es fr it, no documents) gives a second test of de and fr, split in two
halves by line.

Rows: any model SPEC (``load_teacher``: an hf_tlaser folder, a sentence-transformers folder with its ``query: ``
prompt) and ``--tfidf`` (character n-gram TF-IDF, fit on the texts being compared).
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from hf_tlaser.bitext.filters import Filters, apply_filters, build_filters, flores_length_factors
from hf_tlaser.bitext.mining import mine
from hf_tlaser.errors import UsageError
from hf_tlaser.evaluation.lexical import tfidf_char_embed
from hf_tlaser.evaluation.readers import corpus_folder, read_flores_devtest, read_ntrex128

logger = logging.getLogger("benchmarks.bucc_mining")

LANGUAGES = ("cs", "de", "fr", "ru", "zh")
FLORES_LANGUAGES = ("de", "fr")
GOLD_SHARE = 0.5
"""Share of a split's NTREX sentences kept on both sides; the rest is split between the two sides as distractors."""
EN_NEWS = ("news-test2008.en", "newstest2009.en", "newstest2010.en", "newstest2011.en")
"""English news distractors (wmt-newstest-multiway): years whose xx sides are not used below."""
XX_NEWS = {
    "cs": ("wmt-newstest-more", ("newstest2014.cs-en.cs", "newstest2015.cs-en.cs", "newstest2016.cs-en.cs")),
    "de": ("wmt-newstest-bilingual", ("newstest2014.de-en.de", "newstest2015.de-en.de", "newstest2016.de-en.de")),
    "fr": ("wmt-newstest-bilingual", ("newstest2014.fr-en.fr", "newsdiscusstest2015.fr-en.fr")),
    "ru": ("wmt-newstest-more", ("newstest2014.ru-en.ru", "newstest2015.ru-en.ru", "newstest2016.ru-en.ru")),
    "zh": ("wmt-newstest-more", ("newstest2017.zh-en.zh", "newstest2018.zh-en.zh")),
}
"""xx news distractors: 2014-2020 xx-en sets, none of them a translation of an English distractor."""
LASER_BUCC_TEST_F1 = {"de": 96.2, "fr": 93.1, "ru": 92.3, "zh": 92.7}
"""LASER's published BUCC 2018 test F1 (Artetxe & Schwenk 2019, Table 2): context only, not the same data."""

Embed = Callable[[Sequence[str]], np.ndarray]


@dataclass
class MiningTask:
    """One language pair of one split: the two sides' texts and the gold pairs ``(src index, tgt index)``."""

    name: str
    src: list[str]
    tgt: list[str]
    gold: set[tuple[int, int]]


def read_lines(path: Path) -> list[str]:
    """Stripped non-empty lines of a UTF-8 file."""
    with path.open(encoding="utf-8") as f:
        return [line.strip() for line in f if line.strip()]


def ntrex_documents(data_dir: str | None) -> list[str]:
    """The document id of each NTREX-128 line."""
    return read_lines(corpus_folder(data_dir, "ntrex128") / "DOCUMENT_IDS.tsv")


def news_distractors(data_dir: str | None, lang: str, count: int, seed: int, exclude: set[str]) -> list[str]:
    """``count`` distinct news sentences of ``lang`` from other years, none in ``exclude`` (seeded sample)."""
    if lang == "en":
        folder, names = corpus_folder(data_dir, "wmt-newstest-multiway"), EN_NEWS
    else:
        corpus, names = XX_NEWS[lang]
        folder = corpus_folder(data_dir, corpus)
    pool = sorted({line for name in names for line in read_lines(folder / name)} - exclude)
    rng = np.random.default_rng(seed)
    return [pool[i] for i in sorted(rng.choice(len(pool), size=min(count, len(pool)), replace=False))]


def hide_pairs(
    name: str,
    xx: list[str],
    en: list[str],
    ids: Sequence[int],
    xx_news: list[str],
    en_news: list[str],
    seed: int,
) -> MiningTask:
    """Gold pairs among distractors: ``GOLD_SHARE`` of ``ids`` kept on both sides, the rest on one side only (half
    each), plus the news of other years; each side shuffled, exact duplicate texts kept once."""
    rng = np.random.default_rng(seed)
    order = [int(i) for i in rng.permutation(np.asarray(ids))]
    n_gold = int(round(GOLD_SHARE * len(order)))
    gold, rest = order[:n_gold], order[n_gold:]
    xx_only, en_only = rest[: len(rest) // 2], rest[len(rest) // 2 :]
    src_items = [(xx[i], i) for i in gold + xx_only] + [(t, None) for t in xx_news]
    tgt_items = [(en[i], i) for i in gold + en_only] + [(t, None) for t in en_news]
    src_items = [src_items[i] for i in rng.permutation(len(src_items))]
    tgt_items = [tgt_items[i] for i in rng.permutation(len(tgt_items))]
    src, src_of = dedup(src_items)
    tgt, tgt_of = dedup(tgt_items)
    pairs = {(src_of[i], tgt_of[i]) for i in gold if i in src_of and i in tgt_of}
    return MiningTask(name, src, tgt, pairs)


def dedup(items: list[tuple[str, int | None]]) -> tuple[list[str], dict[int, int]]:
    """Texts with exact duplicates kept once (first occurrence), and {sentence id: its row}."""
    rows: dict[str, int] = {}
    row_of: dict[int, int] = {}
    for text, sid in items:
        if text not in rows:
            rows[text] = len(rows)
        if sid is not None:
            row_of[sid] = rows[text]
    return list(rows), row_of


def unique_ids(xx: list[str], en: list[str], ids: Sequence[int]) -> list[int]:
    """``ids`` whose xx and English texts each occur once in the set: a repeated line would otherwise pair a
    one-side distractor with a gold sentence's counterpart."""
    xx_count, en_count = Counter(xx), Counter(en)
    return [i for i in ids if xx_count[xx[i]] == 1 and en_count[en[i]] == 1]


def ntrex_tasks(data_dir: str | None, langs: Sequence[str], distractors: int, seed: int) -> dict[str, list[MiningTask]]:
    """``{"sample": [...], "test": [...]}``: one task per language and split (alternate NTREX documents)."""
    texts = read_ntrex128(data_dir, ["en", *langs])
    docs = ntrex_documents(data_dir)
    if len(docs) != len(texts["en"]):
        raise UsageError(f"ntrex128/DOCUMENT_IDS.tsv has {len(docs)} lines for {len(texts['en'])} sentences")
    order = list(dict.fromkeys(docs))
    split_of = {doc: ("sample", "test")[n % 2] for n, doc in enumerate(order)}
    ntrex_all = {t for lang_texts in texts.values() for t in lang_texts}
    tasks: dict[str, list[MiningTask]] = {"sample": [], "test": []}
    for s, split in enumerate(tasks):
        ids = [i for i, doc in enumerate(docs) if split_of[doc] == split]
        en_news = news_distractors(data_dir, "en", distractors, seed + 10 * s, ntrex_all)
        for lang in langs:
            xx_news = news_distractors(data_dir, lang, distractors, seed + 10 * s + 1, ntrex_all)
            name = f"ntrex {split} {lang}-en"
            kept = unique_ids(texts[lang], texts["en"], ids)
            tasks[split].append(hide_pairs(name, texts[lang], texts["en"], kept, xx_news, en_news, seed + s))
    return tasks


def flores_tasks(
    data_dir: str | None, langs: Sequence[str], distractors: int, seed: int
) -> dict[str, list[MiningTask]]:
    """FLORES devtest (no documents): first half of the lines ``sample``, second half ``test``."""
    texts = read_flores_devtest(data_dir, ["en", *langs])
    n = len(texts["en"])
    exclude = {t for lang_texts in texts.values() for t in lang_texts}
    tasks: dict[str, list[MiningTask]] = {"sample": [], "test": []}
    for s, (split, ids) in enumerate((("sample", range(n // 2)), ("test", range(n // 2, n)))):
        en_news = news_distractors(data_dir, "en", distractors // 2, seed + 100 + 10 * s, exclude)
        for lang in langs:
            xx_news = news_distractors(data_dir, lang, distractors // 2, seed + 101 + 10 * s, exclude)
            name = f"flores {split} {lang}-en"
            kept = unique_ids(texts[lang], texts["en"], ids)
            tasks[split].append(hide_pairs(name, texts[lang], texts["en"], kept, xx_news, en_news, seed + s))
    return tasks


def precision_recall_f1(
    pairs: list[tuple[float, int, int]], gold: set[tuple[int, int]], threshold: float
) -> dict[str, float]:
    """P, R, F1 (%) of the mined pairs scoring >= ``threshold`` against ``gold``."""
    kept = [(i, j) for score, i, j in pairs if score >= threshold]
    correct = sum(pair in gold for pair in kept)
    precision = correct / len(kept) if kept else 0.0
    recall = correct / len(gold) if gold else 0.0
    f1 = 2 * precision * recall / (precision + recall) if correct else 0.0
    return {"precision": 100 * precision, "recall": 100 * recall, "f1": 100 * f1}


def best_threshold(pairs: list[tuple[float, int, int]], gold: set[tuple[int, int]]) -> float:
    """The score threshold that maximises F1 on ``pairs`` (sorted best first): BUCC's choice on its sample set."""
    if not pairs:
        return float("inf")
    correct = np.cumsum([(i, j) in gold for _, i, j in pairs])
    precision = correct / np.arange(1, len(pairs) + 1)
    recall = correct / max(len(gold), 1)
    f1 = np.where(correct > 0, 2 * precision * recall / np.maximum(precision + recall, 1e-12), 0.0)
    return float(pairs[int(np.argmax(f1))][0])


def mine_task(task: MiningTask, embed: Embed | None, k: int, sparse_tfidf: bool) -> list[tuple[float, int, int]]:
    """Mine one task with ``embed`` (None: TF-IDF fit on the task's texts)."""
    if embed is None:
        fit = task.src + task.tgt
        src = tfidf_char_embed(task.src, fit_texts=fit, svd_dim=None, sparse=sparse_tfidf)
        tgt = tfidf_char_embed(task.tgt, fit_texts=fit, svd_dim=None, sparse=sparse_tfidf)
    else:
        src, tgt = embed(task.src), embed(task.tgt)
    return mine(src, tgt, k=k, retrieval="max", margin="ratio")


@functools.cache
def pair_filters(lang: str, data_dir: str | None = None) -> Filters:
    """``--filters``: ``hf-tlaser mine``'s filters that apply to clean news (language identification of both sides,
    a length ratio of 2 in English-equivalent characters: stopes' FLORES length factors, near-duplicates); the score
    cap is left out (e5's margins stay under stopes' 1.25)."""
    factors = flores_length_factors(corpus_folder(data_dir, "flores-devtest"), (lang, "en"))
    return build_filters(max_length_ratio=2.0, languages=(lang, "en"), lid=True, dedup=True, length_factors=factors)


def filtered(task: MiningTask, pairs: list[tuple[float, int, int]], filters: Filters) -> list[tuple[float, int, int]]:
    """The mined ``pairs`` that ``filters`` keep (all of them, before a threshold is chosen)."""
    scores = np.array([score for score, _, _ in pairs])
    keep, _ = apply_filters(filters, scores, [task.src[i] for _, i, _ in pairs], [task.tgt[j] for _, _, j in pairs])
    return [pair for pair, kept in zip(pairs, keep.tolist()) if kept]


def remembered(embed: Embed) -> Embed:
    """``embed`` that computes the vectors of one list of texts once (a row with and without ``--filters``)."""
    seen: dict[tuple[str, ...], np.ndarray] = {}

    def again(texts: Sequence[str]) -> np.ndarray:
        key = tuple(texts)
        if key not in seen:
            seen[key] = embed(texts)
        return seen[key]

    return again


def evaluate(
    tasks: dict[str, list[MiningTask]],
    embed: Embed | None,
    k: int = 4,
    filters: Callable[[str], Filters] | None = None,
) -> dict[str, dict[str, float]]:
    """Per language pair: the threshold chosen on ``sample`` and P/R/F1 on ``test`` (and on ``sample`` itself);
    ``filters``: the language's filters (:func:`pair_filters`) remove mined pairs first, in both splits."""
    results = {}
    for sample, test in zip(tasks["sample"], tasks["test"]):
        pair = test.name.split()[-1]
        mined_sample = mine_task(sample, embed, k, sparse_tfidf=True)
        mined_test = mine_task(test, embed, k, sparse_tfidf=True)
        if filters is not None:
            lang = pair.split("-")[0]
            mined_sample, mined_test = (
                filtered(t, m, filters(lang)) for t, m in ((sample, mined_sample), (test, mined_test))
            )
        threshold = best_threshold(mined_sample, sample.gold)
        results[pair] = {
            "threshold": threshold,
            **precision_recall_f1(mined_test, test.gold, threshold),
            "sample_f1": precision_recall_f1(mined_sample, sample.gold, threshold)["f1"],
            "oracle_test_f1": precision_recall_f1(mined_test, test.gold, best_threshold(mined_test, test.gold))["f1"],
            "gold": len(test.gold),
            "src": len(test.src),
            "tgt": len(test.tgt),
        }
    return results


def model_embedder(spec: str, precision: str) -> Embed:
    """``load_teacher``'s encoder of a model SPEC, with the prompt of symmetric tasks (e5: ``query: ``)."""
    from hf_tlaser.model_folders import EVAL_PROMPTS
    from hf_tlaser.teachers.targets import load_teacher

    teacher = load_teacher(spec, prefer=EVAL_PROMPTS, precision=precision, argument="--model")
    return teacher.encode


def table(results: dict[str, dict[str, dict[str, dict[str, float]]]], benchmark: str, langs: Sequence[str]) -> str:
    """Markdown: one row per model, F1 / P / R on the test split per language, and the mean F1."""
    head = "| model | " + " | ".join(f"{x}-en F1 (P / R)" for x in langs) + " | mean F1 |"
    lines = [head, "|" + "---|" * (len(langs) + 2)]
    for name, by_bench in results.items():
        cells, f1s = [], []
        for lang in langs:
            r = by_bench[benchmark][f"{lang}-en"]
            cells.append(f"{r['f1']:.1f} ({r['precision']:.1f} / {r['recall']:.1f})")
            f1s.append(r["f1"])
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {np.mean(f1s):.1f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bucc_mining", description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", action="append", default=[], metavar="NAME=SPEC", help="a row: name and SPEC")
    parser.add_argument("--tfidf", action="store_true", help="add the character TF-IDF row")
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--distractors", type=int, default=2000, help="news distractors per side and NTREX split")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--precision", default="auto")
    parser.add_argument(
        "--filters", action="store_true", help="add each model's row with hf-tlaser mine's filters (pair_filters)"
    )
    parser.add_argument("--output", type=Path, default=None, help="JSON of every number")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        rows = [item.split("=", 1) for item in args.model]
        if any(len(row) != 2 or not all(row) for row in rows):
            raise UsageError("--model: expected NAME=SPEC, e.g. --model e5=../shared/data/multilingual-e5-small")
        if not rows and not args.tfidf:
            raise UsageError("give at least one --model NAME=SPEC or --tfidf")
        benchmarks = {
            "ntrex": ntrex_tasks(args.data_dir, LANGUAGES, args.distractors, args.seed),
            "flores": flores_tasks(args.data_dir, FLORES_LANGUAGES, args.distractors, args.seed),
        }
        embedders: list[tuple[str, Embed | None]] = [(n, model_embedder(s, args.precision)) for n, s in rows]
    except UsageError as err:
        print(f"bucc_mining: {err}", file=sys.stderr)
        return 2
    if args.tfidf:
        embedders.append(("tfidf-char", None))
    for tasks in benchmarks.values():
        for task in tasks["test"]:
            logger.info("%s: %d x %d sentences, %d gold pairs", task.name, len(task.src), len(task.tgt), len(task.gold))
    results: dict = {}
    for name, embed in embedders:
        start = time.perf_counter()
        embed = None if embed is None else remembered(embed)
        results[name] = {bench: evaluate(tasks, embed) for bench, tasks in benchmarks.items()}
        if args.filters:
            filters = functools.partial(pair_filters, data_dir=args.data_dir)
            with_filters = {bench: evaluate(tasks, embed, filters=filters) for bench, tasks in benchmarks.items()}
            results[f"{name} + filters"] = with_filters
        logger.info("%s: %.0f s", name, time.perf_counter() - start)
    print("NTREX-128 (threshold chosen on the sample split, F1 / precision / recall % on the test split):\n")
    print(table(results, "ntrex", LANGUAGES))
    print("\nFLORES devtest:\n")
    print(table(results, "flores", FLORES_LANGUAGES))
    laser = ", ".join(f"{lang} {f1}" for lang, f1 in LASER_BUCC_TEST_F1.items())
    print(f"\nContext, not the same data: LASER's published BUCC 2018 test F1 ({laser}).")
    if args.output:
        args.output.write_text(json.dumps(results, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())

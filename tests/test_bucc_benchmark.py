"""The BUCC-style mining benchmark (benchmarks/bucc_mining.py): gold pairs hidden among distractors of two kinds,
split by document, threshold chosen on one split and scored on the other."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.bucc_mining import (
    best_threshold,
    evaluate,
    filtered,
    mine_task,
    ntrex_documents,
    ntrex_tasks,
    precision_recall_f1,
    remembered,
)
from hf_tlaser.bitext.filters import Filters
from hf_tlaser.evaluation.readers import read_ntrex128


@pytest.fixture(scope="module")
def tasks(data_dir):
    return ntrex_tasks(data_dir, ["de", "zh"], distractors=40, seed=0)


def test_gold_pairs_are_translations_and_distractors_have_none(tasks, data_dir):
    ntrex = read_ntrex128(data_dir, ["en", "de", "zh"])
    docs = ntrex_documents(data_dir)
    line_of = {lang: {text: i for i, text in enumerate(texts)} for lang, texts in ntrex.items()}
    for split in ("sample", "test"):
        for task, lang in zip(tasks[split], ("de", "zh")):
            assert task.name == f"ntrex {split} {lang}-en"
            for i, j in task.gold:  # the two rows are the same NTREX line
                assert line_of[lang][task.src[i]] == line_of["en"][task.tgt[j]]
            src_lines = {line_of[lang][t] for t in task.src if t in line_of[lang]}
            tgt_lines = {line_of["en"][t] for t in task.tgt if t in line_of["en"]}
            # same-document distractors: NTREX lines on one side only, about a quarter each
            only_src, only_tgt, both = src_lines - tgt_lines, tgt_lines - src_lines, src_lines & tgt_lines
            assert len(both) == len(task.gold)
            assert abs(len(only_src) - len(only_tgt)) <= 1 and len(only_src) > 0.4 * len(both)
            # news of other years: the rest, none of them an NTREX sentence, 40 a side
            assert len(task.src) - len(src_lines) == 40 and len(task.tgt) - len(tgt_lines) == 40
            assert len(set(task.src)) == len(task.src) and len(set(task.tgt)) == len(task.tgt)
    # the two splits hold different documents
    split_docs = {
        split: {docs[line_of["en"][t]] for task in tasks[split] for t in task.tgt if t in line_of["en"]}
        for split in ("sample", "test")
    }
    assert split_docs["sample"] and split_docs["test"] and not split_docs["sample"] & split_docs["test"]


def test_scores_by_hand():
    gold = {(0, 0), (1, 1), (2, 2)}
    pairs = [(0.9, 0, 0), (0.8, 1, 5), (0.7, 1, 1), (0.2, 3, 3)]
    # >= 0.7: 2 of 3 kept are right, 2 of 3 gold found
    assert precision_recall_f1(pairs, gold, 0.7) == pytest.approx(
        {"precision": 200 / 3, "recall": 200 / 3, "f1": 200 / 3}
    )
    assert precision_recall_f1(pairs, gold, 1.0) == {"precision": 0.0, "recall": 0.0, "f1": 0.0}
    # F1 by cut: 0.9 -> 0.5, 0.8 -> 0.4, 0.7 -> 0.667, 0.2 -> 0.571
    assert best_threshold(pairs, gold) == 0.7


def test_threshold_comes_from_the_sample_split(tasks):
    """An embedder that knows the gold of both splits: the sample's threshold is applied to the test split."""
    texts = {t for split in tasks.values() for task in split for t in (*task.src, *task.tgt)}
    rng = np.random.default_rng(0)
    vectors = {t: rng.normal(size=16) for t in texts}
    for split in tasks.values():  # gold pairs get one vector (plus noise): perfect mining
        for task in split:
            for i, j in task.gold:
                vectors[task.src[i]] = vectors[task.tgt[j]] + 0.01 * rng.normal(size=16)

    results = evaluate(
        {"sample": tasks["sample"][:1], "test": tasks["test"][:1]}, lambda b: np.stack([vectors[t] for t in b])
    )
    result = results["de-en"]
    assert result["f1"] > 95 and result["sample_f1"] > 95
    assert result["gold"] == len(tasks["test"][0].gold)
    assert np.isfinite(result["threshold"]) and result["threshold"] > 1.0  # a margin ratio above 1 separates them


def test_filters_remove_mined_pairs_before_the_threshold_is_chosen(tasks):
    """``--filters``: the filters see every mined pair of both splits; a cap under every score leaves none."""
    texts = {t for split in tasks.values() for task in split for t in (*task.src, *task.tgt)}
    rng = np.random.default_rng(1)
    vectors = {t: rng.normal(size=16) for t in texts}
    embed = remembered(lambda batch: np.stack([vectors[t] for t in batch]))
    one = {"sample": tasks["sample"][:1], "test": tasks["test"][:1]}
    plain = evaluate(one, embed)["de-en"]
    assert evaluate(one, embed, filters=lambda lang: Filters())["de-en"] == plain  # no filter on: the same
    capped = evaluate(one, embed, filters=lambda lang: Filters(max_score=-1.0))["de-en"]
    assert capped["f1"] == capped["oracle_test_f1"] == 0.0 and capped["gold"] == plain["gold"]
    mined = mine_task(tasks["test"][0], embed, 4, sparse_tfidf=True)
    short = filtered(tasks["test"][0], mined, Filters(max_chars=60))
    assert 0 < len(short) < len(mined)
    assert all(len(tasks["test"][0].src[i]) <= 60 and len(tasks["test"][0].tgt[j]) <= 60 for _, i, j in short)

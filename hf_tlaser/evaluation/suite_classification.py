"""The classification suites (SIB-200, UMSAB, MLDoc): read (:func:`read_classification`), embedded once
(:func:`embed_classification`) and scored by zero-shot transfer (:func:`evaluate_classification`), with the
majority-class rate."""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np

from hf_tlaser.errors import UsageError

from .classifier import ClassifierConfig, Split, TransferResult, zero_shot_transfer
from .embedding import Embed, embed_texts, split_rows
from .readers import CLASSIFICATION_LANGS, CLASSIFICATION_SETS, LANGS, ClassificationData, corpus_folder, read_mldoc
from .user_sets import is_spec, read_classification_spec

DOCUMENT_SETS = ("mldoc",)
"""Classification sets whose texts are documents (embedded with the embedder's ``embed_documents``)."""


def read_classification(
    dataset: str, data_dir: str | os.PathLike | None = None, langs: Sequence[str] = LANGS
) -> ClassificationData:
    """``sib200`` / ``umsab`` from the data folder, ``mldoc`` from ``<data_dir>/mldoc`` (not shipped), or a user
    dataset spec (``hf:...``, ``read_classification_spec``); each over its languages of ``langs``."""
    if is_spec(dataset):
        return read_classification_spec(dataset, langs)
    if dataset not in CLASSIFICATION_LANGS:
        raise UsageError(
            f"unknown dataset {dataset!r}; valid: {', '.join([*CLASSIFICATION_SETS, 'mldoc'])}, or a user dataset "
            "hf:FOLDER_OR_ID[:text=COL][:label=COL][:language=COL]"
        )
    here = [lang for lang in langs if lang in CLASSIFICATION_LANGS[dataset]]
    if not here:
        raise UsageError(f"{dataset} has {', '.join(CLASSIFICATION_LANGS[dataset])}: none of {', '.join(langs)}")
    if dataset == "mldoc":
        return read_mldoc(corpus_folder(data_dir, "mldoc"), here)
    return CLASSIFICATION_SETS[dataset](data_dir, here)


def embed_classification(
    embed: Embed, data: ClassificationData, documents: bool = False
) -> tuple[dict[str, dict[str, Split]], list[str]]:
    """Embed every split of every language in one ``embed`` call; labels become indices into the returned names."""
    names = sorted({label for splits in data.values() for s in splits.values() for label in s.labels})
    index = {name: i for i, name in enumerate(names)}
    splits = [(lang, split, part) for lang, by_split in data.items() for split, part in by_split.items()]
    emb = embed_texts(
        embed,
        [t for _, _, part in splits for t in part.texts],
        documents,
        [lang for lang, _, part in splits for _ in part.texts],
    )
    embedded: dict[str, dict[str, Split]] = {}
    for (lang, split, part), x in zip(splits, split_rows(emb, [len(part) for _, _, part in splits])):
        embedded.setdefault(lang, {})[split] = (x, np.array([index[label] for label in part.labels]))
    return embedded, names


def majority_rate(data: dict[str, dict[str, Split]]) -> float:
    """Accuracy (%) of always answering the most frequent train label, averaged over (train, test) languages."""
    rates = [
        100.0 * np.mean(test["test"][1] == np.bincount(train["train"][1]).argmax())
        for train in data.values()
        for test in data.values()
    ]
    return float(np.mean(rates))


def evaluate_classification(
    embed: Embed,
    data_dir: str | os.PathLike | None = None,
    dataset: str = "sib200",
    langs: Sequence[str] = LANGS,
    train_langs: Sequence[str] | None = None,
    seeds: Sequence[int] = (0, 1, 2, 3, 4),
    config: ClassifierConfig | None = None,
) -> TransferResult:
    """Zero-shot transfer matrix (MLDoc protocol) on ``sib200``, ``umsab`` or ``mldoc``."""
    data = read_classification(dataset, data_dir, langs)
    embedded, names = embed_classification(embed, data, dataset in DOCUMENT_SETS)
    return zero_shot_transfer(embedded, train_langs, seeds=seeds, config=config, label_names=names)

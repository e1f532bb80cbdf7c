"""What the corpus loaders drop is counted in the log: file sets without two requested languages, lines cut by
``--max-lines``; TICO-19 is evaluation-only."""

from __future__ import annotations

import logging

from hf_tlaser.data import DEFAULT_TRAIN_CORPORA, EVALUATION_CORPORA, REGISTRY, load_corpora
from hf_tlaser.data.readers import count_lines


def test_tico19_is_evaluation_only():
    assert "tico19-test" not in DEFAULT_TRAIN_CORPORA
    assert REGISTRY["tico19-test"].evaluation and "tico19-test" in EVALUATION_CORPORA


def test_skipped_file_sets_are_counted(tmp_path, caplog):
    folder = tmp_path / "wmt-newstest-bilingual"
    folder.mkdir()
    for name, text in {
        "nt.de-en.de": "hallo welt\n",
        "nt.de-en.en": "hello world\n",
        "nt.pt-en.pt": "olá mundo\n",
        "nt.pt-en.en": "hello world\n",
        "nt2.fr-en.fr": "bonjour\n",
        "nt2.fr-en.en": "hello\n",
    }.items():
        (folder / name).write_text(text)
    with caplog.at_level(logging.INFO, logger="hf_tlaser.data"):
        ds = load_corpora(["wmt-newstest-bilingual"], tmp_path, languages=("de", "en"), join_english=False)
    assert len(ds) == 1
    assert (
        "wmt-newstest-bilingual: skipped 2 file set(s) without two of the languages ['de', 'en']: "
        "wmt-newstest-bilingual/nt.pt-en (en/pt), wmt-newstest-bilingual/nt2.fr-en (en/fr)" in caplog.text
    )


def test_max_lines_cut_is_counted(data_dir, caplog):
    folder = data_dir / "wmt-newstest-multiway"
    sets = ("news-test2008", "newssyscomb2009", "newstest2009", "newstest2010", "newstest2011", "newstest2013")
    total = sum(count_lines(folder / f"{name}.de") for name in sets)
    with caplog.at_level(logging.INFO, logger="hf_tlaser.data"):
        load_corpora(["wmt-newstest-multiway"], data_dir, languages=("de", "en"), max_lines=100)
    assert (
        f"wmt-newstest-multiway: --max-lines 100 cut {total - 600} of {total} lines (6 of 6 file sets)" in caplog.text
    )

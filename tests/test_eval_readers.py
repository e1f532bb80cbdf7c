"""Readers parse the real shared corpora with exact counts; MLDoc from a temporary file."""

from __future__ import annotations

from collections import Counter

import pytest

from hf_tlaser.encoding import laser_mldoc_cleanup
from hf_tlaser.evaluation.readers import (
    read_flores_devtest,
    read_mldoc,
    read_mldoc_file,
    read_ntrex128,
    read_sib200,
    read_tico19,
    read_ud_pud,
    read_umsab,
)

LANGS = ["en", "de", "es", "fr", "it"]


def test_sib200(data_dir):
    data = read_sib200(data_dir)
    assert list(data) == LANGS
    for lang in LANGS:
        assert {s: len(v) for s, v in data[lang].items()} == {"train": 701, "dev": 99, "test": 204}
        for split in ("train", "dev", "test"):
            assert data[lang][split].labels == data["en"][split].labels  # parallel: same label sequence
    assert len(set(data["en"]["train"].labels)) == 7
    assert Counter(data["en"]["train"].labels)["science/technology"] == 176
    assert data["en"]["train"].texts[0].startswith("Turkey is encircled by seas on three sides")


def test_umsab(data_dir):
    data = read_umsab(data_dir, ["en", "it"])
    for lang in ("en", "it"):
        assert {s: len(v) for s, v in data[lang].items()} == {"train": 1839, "dev": 324, "test": 870}
        assert Counter(data[lang]["train"].labels) == {"negative": 613, "neutral": 613, "positive": 613}
    assert "\u2019" in data["en"]["train"].texts[0] and "\\u2019" not in data["en"]["train"].texts[0]
    raw = read_umsab(data_dir, ["en"], unescape=False)
    assert "\\u2019" in raw["en"]["train"].texts[0]


@pytest.mark.parametrize(
    ("reader", "size", "langs"),
    [
        (read_ntrex128, 1997, LANGS),
        (read_flores_devtest, 1012, LANGS),
        (read_tico19, 2100, ["en", "es", "fr"]),
        (read_ud_pud, 1000, LANGS),
    ],
)
def test_multiway_sets(data_dir, reader, size, langs):
    data = reader(data_dir)
    assert list(data) == langs
    assert all(len(lines) == size for lines in data.values())
    assert not any(line.endswith("\r") for lines in data.values() for line in lines)


def test_ntrex_crlf_and_unknown_language(data_dir):
    assert read_ntrex128(data_dir, ["de"])["de"][0].startswith("Mitglieder der Nationalversammlung")
    with pytest.raises(ValueError, match="unknown language.*'de'.*available: en, es, fr"):
        read_tico19(data_dir, ["de"])
    with pytest.raises(ValueError, match="unknown language.*'pt'"):
        read_sib200(data_dir, ["pt"])


def test_mldoc(tmp_path):
    (tmp_path / "english.train.1000").write_text("C\tcorporate news\nMCAT\tmarkets\tfell\n", encoding="utf-8")
    (tmp_path / "english.dev").write_text("E\teconomy\n", encoding="utf-8")
    (tmp_path / "english.test").write_text("G\tgovernment\r\n", encoding="utf-8")
    data = read_mldoc(tmp_path, ["en"])
    assert data["en"]["train"].labels == ["CCAT", "MCAT"]
    assert data["en"]["train"].texts == ["corporate news", "markets\tfell"]
    assert data["en"]["test"].texts == ["government"] and data["en"]["dev"].labels == ["ECAT"]
    (tmp_path / "bad").write_text("X\tnope\n", encoding="utf-8")
    with pytest.raises(ValueError, match="bad:1"):
        read_mldoc_file(tmp_path / "bad")


def test_laser_mldoc_cleanup():
    """The three sed substitutions of LASER's tasks/mldoc/mldoc.sh, applied everywhere in a document."""
    text = "Acme Co . and Foo Inc . said (c) Reuters Limited 1997.(C) Reuters Limited 1996. Bar Co . Inc ."
    assert laser_mldoc_cleanup(text) == "Acme Co. and Foo Inc. said  Bar Co. Inc ."  # ' Inc . ' needs a space after
    assert laser_mldoc_cleanup("(c) Reuters Limited 2001.") == "(c) Reuters Limited 2001."  # 199x only

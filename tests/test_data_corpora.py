"""Readers, cleaning, registry and pivot join on small slices of the real corpora (counts checked with shell tools)."""

from __future__ import annotations

import gzip
import logging

import datasets
import pytest

from hf_tlaser.data import (
    DEFAULT_TRAIN_CORPORA,
    EVALUATION_CORPORA,
    REGISTRY,
    CleaningConfig,
    DataFormatError,
    clean_groups,
    from_hf_dataset,
    get_data_dir,
    iter_lines,
    join_on_english,
    load_corpora,
    load_corpus,
    parse_pairs,
    read_aligned,
    read_moses,
)


@pytest.fixture(scope="module")
def data_dir():
    try:
        return get_data_dir()
    except FileNotFoundError:
        pytest.skip("shared corpora not available")


def test_iter_lines_splits_on_newline_only(tmp_path):
    path = tmp_path / "x.gz"
    with gzip.open(path, "wb") as handle:
        handle.write("a\u0085b\r\n\r\nc".encode())
    assert list(iter_lines(path)) == ["a\u0085b", "", "c"]


def test_nel_inside_line_keeps_alignment(data_dir):
    # newstest2009.de line 1436 has U+0085 inside the line (grep -n $'\xc2\x85'); splitlines() would shift the rest
    folder = data_dir / "wmt-newstest-multiway"
    ds = read_moses(folder / "newstest2009", ("de", "en"), "nt09")
    assert len(ds) == 2525
    en = (folder / "newstest2009.en").read_text(encoding="utf-8").split("\n")
    assert "von hier\u0085oder so" in ds[1435]["de"]
    assert ds[1435]["en"] == en[1435].strip() and ds[2524]["en"] == en[2524].strip()


def test_europarl_gz_slice_and_cleaning_counts(data_dir, caplog):
    # paste <(zcat ...it.gz | head -2000) <(zcat ...en.gz | head -2000) | awk: 6 empty side, 1 > 250 tokens,
    # 99 with length ratio > 1.5, 1894 kept
    ds = read_moses(data_dir / "europarl-v2-it-en" / "europarl.it-en", ("it", "en"), "ep", max_lines=2000)
    assert len(ds) == 2000 and ds[0]["de"] is None and ds[0]["corpus"] == "ep"
    assert sum(text == "" for text in ds["it"]) == 1 and sum(text == "" for text in ds["en"]) == 5
    with caplog.at_level(logging.INFO, logger="hf_tlaser.data.cleaning"):
        cleaned, report = clean_groups(ds, CleaningConfig(max_tokens=250, max_length_ratio=1.5))
    assert (report.total, report.kept) == (2000, 1894) and len(cleaned) == 1894
    assert report.dropped == {"empty": 6, "too_long": 1, "length_ratio": 99, "one_language": 0}
    assert "kept 1894 of 2000" in caplog.text
    assert all(it and en for it, en in zip(cleaned["it"], cleaned["en"]))


def test_multiway_cleaning_removes_only_the_outlier():
    ds = datasets.Dataset.from_list(
        [
            {"de": "a b c", "en": "a b c", "es": "a b c d e f g h", "fr": "", "it": None, "corpus": "t"},
            {"de": "a", "en": "a b c", "es": None, "fr": None, "it": None, "corpus": "t"},
        ]
    )
    cleaned, report = clean_groups(ds, CleaningConfig(max_tokens=5))
    assert cleaned[0] == {"de": "a b c", "en": "a b c", "es": None, "fr": None, "it": None, "corpus": "t"}
    assert report.removed_sentences == {"empty": 1, "too_long": 1, "length_ratio": 1}
    assert report.dropped["length_ratio"] == 1 and report.kept == 1


def test_misaligned_files_error_names_both(tmp_path):
    (tmp_path / "a.de").write_text("1\n2\n3\n")
    (tmp_path / "a.en").write_text("1\n2\n")
    with pytest.raises(DataFormatError, match=r"a\.de has 3 lines.*a\.en has 2 lines"):
        read_moses(tmp_path / "a", ("de", "en"), "bad")


def test_undecodable_bytes_error_names_file_and_line(tmp_path):
    (tmp_path / "b.de").write_bytes(b"gut\nsch\xf6n\n")
    (tmp_path / "b.en").write_text("good\nnice\n")
    with pytest.raises(DataFormatError, match=r"b\.de:2: not valid UTF-8"):
        read_aligned({"de": tmp_path / "b.de", "en": tmp_path / "b.en"}, "bad")


def test_language_codes_and_unknown_names():
    # codes are data: any ISO 639-1/3 code (with a script) parses; a list of known codes still restricts them
    assert parse_pairs("de-xx, zh-Hans-en, zho_hans-EN") == [("de", "xx"), ("zh_Hans", "en"), ("zho_Hans", "en")]
    with pytest.raises(ValueError, match="unknown language in pair 'de-xx' 'xx'; known languages: de, en, es, fr, it"):
        parse_pairs("de-en,de-xx", languages=("de", "en", "es", "fr", "it"))
    with pytest.raises(ValueError, match="bad language pair 'english-de': bad language code 'english'"):
        parse_pairs("english-de")
    with pytest.raises(ValueError, match=r"none of the corpora \['multi30k'\] has two of the languages \['en', 'cs'\]"):
        load_corpora(["multi30k"], languages=("en", "cs"))
    with pytest.raises(ValueError, match="unknown corpus 'europarl'; known corpora: wmt-newstest-multiway"):
        load_corpus("europarl")
    assert parse_pairs("de-en, en-es") == [("de", "en"), ("en", "es")]


def test_xed_skips_danish_rows(data_dir, caplog):
    # awk -F'\t' '$1 ~ /^en\//' pairs-de.txt | wc -l -> 3995 (of 8128; 4133 start with da/), 1061 of them in the
    # xed-dev films (held out: tests/test_xed_dev.py)
    with caplog.at_level(logging.INFO, logger="hf_tlaser.data"):
        ds = load_corpus("xed", data_dir, languages=("de", "en"))
    assert len(ds) == 3995 - 1061
    assert "skipped 4133 of 8128" in caplog.text
    assert set(ds["corpus"]) == {"xed/pairs-de"}


def test_registry_and_default_mix(data_dir):
    assert set(EVALUATION_CORPORA) == {"ntrex128", "ud-pud", "flores-devtest", "tico19-test"}
    assert not set(EVALUATION_CORPORA) & set(DEFAULT_TRAIN_CORPORA)
    assert set(DEFAULT_TRAIN_CORPORA) <= set(REGISTRY)
    ntrex = load_corpus("ntrex128", data_dir, max_lines=50)  # CRLF files
    assert len(ntrex) == 50 and not any("\r" in ntrex[0][lang] for lang in ("de", "en", "es", "fr", "it"))
    tico = load_corpus("tico19-test", data_dir, languages=("en", "es"), max_lines=10)
    assert len(tico) == 10 and tico.column_names == ["en", "es", "corpus"]


def test_pivot_join_newstest2014(data_dir):
    # 1503 distinct whitespace-normalised English sentences shared by newstest2014.de-en.en and .fr-en.en
    ds = load_corpus("wmt-newstest-bilingual", data_dir)
    nt14 = ds.filter(lambda corpus: corpus.startswith("wmt-newstest-bilingual/newstest2014"), input_columns="corpus")
    joined = join_on_english(nt14)
    three_way = joined.filter(lambda de, fr: de is not None and fr is not None, input_columns=["de", "fr"])
    assert len(three_way) == 1503 and len(joined) == 6006 - 2 * 1503 + 1503


def test_load_corpora_small_mix(data_dir):
    ds = load_corpora(["wmt-newstest-multiway", "stsb-multi-mt"], data_dir, max_lines=100)
    # 6 newstest sets x 100 lines + 100 STSb rows x 2 sentences, minus cleaning
    assert 0.8 * 800 < len(ds) <= 800
    assert ds.column_names == ["de", "en", "es", "fr", "it", "corpus"]


def test_from_hf_dataset_local_files(tmp_path):
    (tmp_path / "d.jsonl").write_text(
        '{"translation": {"de": "Hallo", "en": "Hello"}}\n{"translation": {"de": "Ja ", "en": "Yes"}}\n'
    )
    ds = from_hf_dataset("json", "local", data_files=str(tmp_path / "d.jsonl"))
    assert ds[1] == {"de": "Ja", "en": "Yes", "corpus": "local"}  # the dataset's own languages
    five = from_hf_dataset("json", "local", data_files=str(tmp_path / "d.jsonl"), languages=["de", "en", "es"])
    assert five[1] == {"de": "Ja", "en": "Yes", "es": None, "corpus": "local"}
    cols = datasets.Dataset.from_dict({"src": ["uno"], "tgt": ["one"]})
    assert from_hf_dataset(cols, "c", columns={"it": "src", "en": "tgt"})[0]["it"] == "uno"


def test_a_streamed_dataset_without_features_is_read_by_its_first_row():
    """A generator's ``IterableDataset`` declares no features (``column_names`` is None): its first row tells the
    columns, a ``translation`` dict's fields included, through public ``datasets`` APIs only."""
    from hf_tlaser.data.readers import from_hf_dataset

    def rows():
        yield {"translation": {"de": "Hallo Welt", "fr": "Bonjour"}, "score": 0.5}
        yield {"translation": {"de": "Guten Tag", "fr": "Bonjour"}, "score": 0.7}

    stream = datasets.IterableDataset.from_generator(rows)
    assert stream.column_names is None
    groups = list(from_hf_dataset(stream, "toy"))
    assert groups == [
        {"de": "Hallo Welt", "fr": "Bonjour", "corpus": "toy"},
        {"de": "Guten Tag", "fr": "Bonjour", "corpus": "toy"},
    ]

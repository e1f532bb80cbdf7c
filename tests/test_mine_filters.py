"""``hf-tlaser mine``'s filters (``hf_tlaser.bitext.filters``): each mask by hand, language identification on real
sentences, the threshold file, the command end to end with each filter (counts in the summary, line numbers in the
lines file), the TSV unchanged without filters, graph indexes refused, py3langid missing."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import numpy as np
import pytest

from hf_tlaser.bitext.filters import (
    FILTERS,
    PER_PAIR,
    Filters,
    apply_filters,
    build_filters,
    dedup_keys_mask,
    dedup_mask,
    flores_length_factors,
    length_mask,
    lid_language,
    lid_mask,
    load_identifier,
    normalise,
    normalised_keys,
    pair_threshold,
    ratio_mask,
    read_thresholds,
    score_mask,
)
from hf_tlaser.bitext.index import Rows
from hf_tlaser.bitext.mining import mine_vectors
from hf_tlaser.data.corpora import flores_file
from hf_tlaser.errors import UsageError
from hf_tlaser.inference import mine
from tests.test_mine import mine_args, parallel_corpus, read_tsv, write_embeddings

faiss = pytest.importorskip("faiss")
faiss.omp_set_num_threads(1)

NTREX = "ntrex128/newstest2019-{}.txt"


def ntrex(data_dir, name: str) -> list[str]:
    return (data_dir / NTREX.format(name)).read_text(encoding="utf-8").split("\n")[:-1]


# --- the masks by hand ---------------------------------------------------------------------------------------------


def test_normalise_drops_case_punctuation_symbols_digits_and_spacing():
    assert normalise("Hello,  World 2!") == "hello world"
    assert normalise("„Straße“ – 3 €\u00a0x") == "strasse x"
    assert normalise("L’été 2020") == normalise("l'ÉTÉ") == "lété"


def test_score_length_and_ratio_masks():
    assert score_mask(np.array([1.3, 1.25, 1.1]), 1.25).tolist() == [False, True, True]
    src, tgt = ["abcd", "ab", "abcdefgh", "abc"], ["abcd", "abcdef", "abc", "abc"]
    assert length_mask(src, tgt, min_chars=3).tolist() == [True, False, True, True]
    assert length_mask(src, tgt, max_chars=4).tolist() == [True, False, False, True]
    assert length_mask(src, tgt, 3, 6).tolist() == [True, False, False, True]
    # longer over shorter: 1, 3, 2.67, 1
    assert ratio_mask(src, tgt, 2.5).tolist() == [True, False, False, True]
    assert ratio_mask(src, tgt, 3).tolist() == [True, True, True, True]
    assert ratio_mask([""], ["ab"], 2).tolist() == [True]  # an empty side counts as one character
    # length factors (English-equivalent characters): the source's count times 3, the target's as it is
    assert ratio_mask(["ab", "abcd"], ["abcdef", "abcdef"], 1.5, (3.0, 1.0)).tolist() == [True, False]  # 6/6, 12/6
    assert length_mask(["ab", "abcd"], ["abcdef", "abcdef"], 7, factors=(3.0, 1.0)).tolist() == [False, False]
    assert length_mask(["ab", "abc"], ["abcdefg", "abcdefg"], 7, factors=(3.5, 1.0)).tolist() == [True, True]


def test_flores_length_factors_are_english_characters_over_the_language(data_dir):
    folder = Path(data_dir) / "flores-devtest"
    zh, en = flores_length_factors(folder, ("zh", "en"))
    chars = {code: len(flores_file(folder, code).read_text(encoding="utf-8")) for code in ("zh", "en", "de")}
    assert en == 1.0 and zh == chars["en"] / chars["zh"] and 2.5 < zh < 3.5  # Chinese: a third of the characters
    assert flores_length_factors(folder, ("deu", "en"))[0] == chars["en"] / chars["de"] < 1


def test_dedup_keeps_the_best_scored_pair_of_each_normalised_text():
    scores = np.array([1.10, 1.30, 1.20, 1.15, 1.05])
    src = ["Guten Tag!", "guten tag", "Wie geht's?", "Danke.", "danke"]
    tgt = ["Good day.", "Good day", "How are you?", "Thanks.", "Thank you."]
    # 0 and 1: the same normalised pair, 1 scores higher; 4: its source is 3's, which scores higher
    assert dedup_mask(scores, src, tgt).tolist() == [False, True, True, True, False]
    assert dedup_mask(scores, src, tgt, per_side=False).tolist() == [False, True, True, True, True]
    # the same normalised target for two sources: the better pair stays
    assert dedup_mask(np.array([1.0, 2.0]), ["a", "b"], ["x!", "X"]).tolist() == [False, True]


def test_apply_filters_counts_each_filter_on_what_the_earlier_ones_kept():
    scores = np.array([1.4, 1.2, 1.1, 1.05])
    src, tgt = ["aaaa", "aaaa!", "b", "cccc"], ["xxxx", "xxxx", "yyyy", "zzzzzzzzzzzz"]
    filters = Filters(max_score=1.3, min_chars=2, max_length_ratio=2.0, dedup=True)
    keep, removed = apply_filters(filters, scores, src, tgt)
    # 0: above the cap; 2: a 1-character side; 3: 12 / 4 = 3 > 2; 1 then has no duplicate left
    assert keep.tolist() == [False, True, False, False]
    assert removed == {"max_score": 1, "length": 1, "length_ratio": 1, "lid": None, "dedup": 0}
    assert tuple(removed) == FILTERS
    keep, removed = apply_filters(Filters(), scores, src, tgt)
    assert keep.all() and set(removed.values()) == {None}
    # a staged pipeline: the filters that judge a pair alone on slices, then deduplication on what they kept
    parts = [apply_filters(filters, scores[a:b], src[a:b], tgt[a:b], names=PER_PAIR) for a, b in ((0, 1), (1, 4))]
    assert [tuple(part[1]) for part in parts] == [PER_PAIR] * 2 and [part[1]["length"] for part in parts] == [0, 1]
    judged = np.concatenate([part[0] for part in parts])
    assert judged.tolist() == [False, True, False, False]
    # ... then near-duplicates from the normalised keys of what they kept (the dedup stage)
    alive = np.flatnonzero(judged)
    shared = ["aaaa", "aaaa!", "aaaa?", "cccc"]  # 1 and 2: one normalised text, and 0 judged out before
    src_keys, tgt_keys = normalised_keys(shared, tgt)
    judged[[2, 3]] = True
    alive = np.flatnonzero(judged)
    kept = dedup_keys_mask(scores[alive], src_keys[alive], tgt_keys[alive])
    assert alive[kept].tolist() == [1, 3]  # 2 shares 1's normalised source; 0's (judged out) does not count
    assert dedup_keys_mask(scores, src_keys, tgt_keys).tolist() == [True, False, False, True]


def reference_dedup(scores, src, tgt, per_side=True):
    """Near-duplicate removal as sets of normalised strings (what ``dedup_keys_mask`` does with keys and ranks)."""
    keep, seen = np.zeros(len(scores), dtype=bool), set()
    for position in np.argsort(-np.asarray(scores), kind="stable").tolist():
        a, b = normalise(src[position]), normalise(tgt[position])
        keys = [("pair", a, b)] + ([("src", a), ("tgt", b)] if per_side else [])
        if not seen.intersection(keys):
            keep[position] = True
            seen.update(keys)
    return keep


@pytest.mark.parametrize("per_side", [True, False])
def test_dedup_by_keys_is_dedup_by_normalised_strings(per_side):
    rng = np.random.default_rng(7)
    words = ["Tag", "tag!", "Nacht", "nacht.", "Haus", "1 Haus", "Baum", "", "?", "Weg", "weg", "See", "Berg"]
    src = [" ".join(rng.choice(words, size=rng.integers(1, 4))) for _ in range(400)]
    tgt = [" ".join(rng.choice(words, size=rng.integers(1, 4))) for _ in range(400)]
    scores = rng.choice([1.0, 1.1, 1.2, 1.3], size=400)  # many ties: the first of equal scores wins
    expected = reference_dedup(scores, src, tgt, per_side)
    assert 50 < expected.sum() < 390
    assert dedup_mask(scores, src, tgt, per_side=per_side).tolist() == expected.tolist()


def test_filter_settings_round_trip_through_json():
    pytest.importorskip("py3langid")
    filters = build_filters(
        1.25, min_chars=2, max_length_ratio=2.0, languages=("deu", "en"), lid=True, dedup=True, length_factors=(0.9, 1)
    )
    settings = json.loads(json.dumps(filters.settings()))
    assert (
        settings["languages"] == ["de", "en"] and "identify" not in settings and settings["length_factors"] == [0.9, 1]
    )
    again = Filters.from_settings(settings)
    assert again.settings() == filters.settings() and again.identify("Das ist ein Haus.") == "de"
    assert again.active(PER_PAIR) and not Filters(dedup=True).active(PER_PAIR) and Filters(dedup=True).active()


def test_lid_on_real_sentences_with_a_third_language(data_dir):
    pytest.importorskip("py3langid")
    de, en, fr = (ntrex(data_dir, name)[:4] for name in ("ref.deu", "src.eng", "ref.fra"))
    identify, labels = load_identifier()
    src = [de[0], de[1], fr[2], de[3], en[0]]
    tgt = [en[0], fr[1], en[2], en[3], de[0]]
    # a French target, a French source, the sides swapped: removed
    assert lid_mask(src, tgt, "de", "en", identify).tolist() == [True, False, False, True, False]
    assert lid_language("zh_Hans", labels, "--tgt-lang") == lid_language("zho", labels, "--tgt-lang") == "zh"
    assert lid_language("DEU", labels, "--src-lang") == "de"
    with pytest.raises(UsageError, match=r"^--src-lang xx: py3langid does not identify 'xx'"):
        lid_language("xx", labels, "--src-lang")


# --- the threshold file --------------------------------------------------------------------------------------------


def test_thresholds_file_json_and_yaml(tmp_path):
    path = tmp_path / "t.json"
    path.write_text('{"de-en": 1.06, "fr-en": 1.05, "default": 1.04}', encoding="utf-8")
    thresholds = read_thresholds(path)
    assert pair_threshold(thresholds, "de", "en", path) == 1.06
    assert pair_threshold(thresholds, "en", "fr", path) == 1.05  # the reverse pair's
    assert pair_threshold(thresholds, "it", "en", path) == 1.04  # the default
    yaml_path = tmp_path / "t.yaml"
    yaml_path.write_text("zh_Hans-en: 1.1\n", encoding="utf-8")
    assert pair_threshold(read_thresholds(yaml_path), "zh-Hans", "en", yaml_path) == 1.1
    with pytest.raises(UsageError, match=r"no threshold for de-en \(the file has zh_Hans-en\); add it or a 'default'"):
        pair_threshold(read_thresholds(yaml_path), "de", "en", yaml_path)


@pytest.mark.parametrize(
    "text, message",
    [
        ('{"de-xx": 1.1}', "de-xx: unknown language 'xx'"),
        ('{"german to english": 1.1}', "bad language pair 'german to english'"),
        ('{"de-de": 1.1}', "two different languages"),
        ('{"de-en": 1.1, "DE-en": 1.2}', "the language pair DE-en is given twice"),
        ('{"de-en": "high"}', "de-en: 'high' is not a finite number"),
        ('["de-en"]', "expected a mapping of language pairs"),
        ('{"de-en": 1.1', "unreadable"),
    ],
)
def test_bad_thresholds_file(tmp_path, text, message):
    path = tmp_path / "t.json"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(UsageError, match=re.escape(message)) as err:
        read_thresholds(path)
    assert str(err.value).startswith(f"--thresholds {path}: ") and "\n" not in str(err.value)


# --- the command ---------------------------------------------------------------------------------------------------


@pytest.fixture
def real_corpus(tmp_path, data_dir):
    """The synthetic vectors of tests/test_mine.py's corpus (source i translates target gold[i], i < 30) with real
    NTREX sentences as their texts, and planted noise: pair 0's target is French, pair 1's target is 3 characters,
    pair 2's source is 700 characters (also a length ratio > 3), pair 4 is pair 3 lowercased without punctuation."""
    src_vectors, tgt_vectors, gold = parallel_corpus(30, 20, 16, seed=4, noise=0.1)
    de, en, fr = (ntrex(data_dir, name) for name in ("ref.deu", "src.eng", "ref.fra"))
    src = de[:30] + de[100:120]
    tgt = [""] * 50
    for i, j in enumerate(gold):
        tgt[j] = en[i]
    unmatched = iter(en[100:120])
    tgt = [text or next(unmatched) for text in tgt]
    tgt[gold[0]] = fr[0]
    tgt[gold[1]] = "Ja!"
    src[2] = " ".join([de[2]] * 6)
    strip = lambda text: re.sub(r"[^\w\s]", "", text).lower()  # noqa: E731
    src[4], tgt[gold[4]] = strip(de[3]), strip(en[3])
    (tmp_path / "src.txt").write_text("\n".join(src) + "\n", encoding="utf-8")
    (tmp_path / "tgt.txt").write_text("\n".join(tgt) + "\n", encoding="utf-8")
    write_embeddings(tmp_path / "src.npy", src_vectors)
    write_embeddings(tmp_path / "tgt.npy", tgt_vectors)
    return tmp_path, src, tgt, gold


def outputs(folder) -> dict:
    """The summary, and the lines file checked against the TSV: each line's numbers name the TSV line's texts."""
    summary = json.loads((folder / "mined.summary.json").read_text(encoding="utf-8"))
    lines = (folder / "mined.lines.tsv").read_text(encoding="utf-8").split("\n")
    assert lines[-1] == ""
    src = (folder / "src.txt").read_text(encoding="utf-8").split("\n")
    tgt = (folder / "tgt.txt").read_text(encoding="utf-8").split("\n")
    pairs = read_tsv(folder / "mined.tsv")
    assert len(lines) - 1 == len(pairs) == summary["counts"]["written"]
    for line, (score, source, target) in zip(lines, pairs):
        line_score, i, j = line.split("\t")
        assert (float(line_score), src[int(i)], tgt[int(j)]) == (score, source, target)
    return summary


def test_each_filter_removes_what_the_planted_noise_says(real_corpus):
    folder, src, tgt, gold = real_corpus
    pytest.importorskip("py3langid")
    assert mine.main(mine_args(folder)) == 0
    everything = read_tsv(folder / "mined.tsv")
    pairs = {(s, t) for _, s, t in everything}
    planted = [(src[i], tgt[gold[i]]) for i in range(5)]
    assert set(planted) <= pairs  # every planted pair is mined above the threshold
    summary = outputs(folder)
    assert summary["counts"]["removed"] == dict.fromkeys(FILTERS)
    assert summary["counts"]["written"] == summary["counts"]["above_threshold"] == len(everything)
    cap = everything[5][0]
    score = {(s, t): c for c, s, t in everything}
    langs = ["--src-lang", "de", "--tgt-lang", "en"]
    ratio = {(s, t) for s, t in pairs if max(len(s), len(t)) > 3 * min(len(s), len(t))}
    cases = {
        "max_score": (["--max-score", str(cap)], {(s, t) for _, s, t in everything[:5]}),
        "length": (["--min-chars", "5", "--max-chars", "600"], {planted[1], planted[2]}),
        "length_ratio": (["--max-length-ratio", "3"], ratio),
        "lid": (["--lid", *langs], {planted[0], planted[1]}),  # French, and "Ja!" is German
        "dedup": (["--dedup-normalised"], {min(planted[3:5], key=score.get)}),
    }
    assert planted[2] in cases["length_ratio"][1] and planted[1] in cases["length_ratio"][1]
    for name, (flags, removed) in cases.items():
        assert mine.main(mine_args(folder, *flags, "--overwrite")) == 0
        summary = outputs(folder)
        assert summary["counts"]["removed"] == {**dict.fromkeys(FILTERS), name: len(removed)}, name
        assert {(s, t) for _, s, t in read_tsv(folder / "mined.tsv")} == pairs - removed, name
    every = [flag for flags, _ in cases.values() for flag in flags]
    assert mine.main(mine_args(folder, *every, "--overwrite")) == 0
    summary = outputs(folder)
    assert summary["counts"]["written"] == len(everything) - sum(summary["counts"]["removed"].values())
    assert summary["inputs"]["src"]["sha256"] == mine.read_texts(folder / "src.txt", "--src").sha256
    assert summary["arguments"]["lid"] is True and summary["threshold"]["from"] == "the ratio margin's default"


def test_thresholds_file_sets_the_run_threshold(real_corpus, capsys):
    folder, *_ = real_corpus
    assert mine.main(mine_args(folder)) == 0
    everything = read_tsv(folder / "mined.tsv")
    cut = everything[len(everything) // 2][0]
    config = folder / "thresholds.json"
    config.write_text(json.dumps({"en-de": cut, "default": 0.5}), encoding="utf-8")
    args = mine_args(folder, "--thresholds", str(config), "--src-lang", "de", "--tgt-lang", "en", "--overwrite")
    assert mine.main(args) == 0
    summary = outputs(folder)
    assert summary["threshold"]["value"] == cut and summary["threshold"]["from"].endswith("(de-en)")
    assert read_tsv(folder / "mined.tsv") == [pair for pair in everything if pair[0] > cut]
    assert summary["counts"]["above_threshold"] == len([pair for pair in everything if pair[0] > cut])
    config.write_text(json.dumps({"fr-en": 1.1}), encoding="utf-8")
    before = (folder / "mined.tsv").read_bytes()
    assert mine.main(args) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"hf-tlaser mine: error: --thresholds {config}: no threshold for de-en") and "\n" not in err
    assert (folder / "mined.tsv").read_bytes() == before


def test_without_filters_the_tsv_is_what_mining_writes(corpus):
    """The TSV without filter options is byte for byte what ``mine_vectors`` mines, formatted as before the filters;
    filters that remove nothing leave it so."""
    folder, _ = corpus
    assert mine.main(mine_args(folder)) == 0
    src_texts = (folder / "src.txt").read_text(encoding="utf-8").split("\n")
    tgt_texts = (folder / "tgt.txt").read_text(encoding="utf-8").split("\n")
    src, tgt = (np.load(folder / f"{side}.npy") for side in ("src", "tgt"))
    mined = mine_vectors(Rows(src, np.arange(len(src))), Rows(tgt, np.arange(len(tgt))), threshold=1.04)
    rows = zip(mined.scores[: mined.kept], mined.src[: mined.kept], mined.tgt[: mined.kept])
    expected = "".join(f"{score:.6f}\t{src_texts[i]}\t{tgt_texts[j]}\n" for score, i, j in rows)
    assert (folder / "mined.tsv").read_text(encoding="utf-8") == expected
    before = (folder / "mined.tsv").read_bytes()
    loose = ["--max-score", "1e9", "--max-chars", "100000", "--max-length-ratio", "1000"]  # texts differ in digits only
    assert mine.main(mine_args(folder, *loose, "--overwrite")) == 0
    assert (folder / "mined.tsv").read_bytes() == before
    assert outputs(folder)["counts"]["removed"] == {**dict.fromkeys(FILTERS, 0), "lid": None, "dedup": None}


@pytest.fixture
def corpus(tmp_path):
    """tests/test_mine.py's corpus: synthetic texts, source i translates target gold[i] (i < 30)."""
    src, tgt, gold = parallel_corpus(30, 20, 16, seed=4, noise=0.1)
    (tmp_path / "src.txt").write_text("\n".join(f"source {i} ünï" for i in range(50)) + "\n", encoding="utf-8")
    (tmp_path / "tgt.txt").write_text("\n".join(f"target {j}" for j in range(50)) + "\n", encoding="utf-8")
    write_embeddings(tmp_path / "src.npy", src)
    write_embeddings(tmp_path / "tgt.npy", tgt)
    return tmp_path, gold


def test_lines_file_gives_first_occurrences_of_repeated_lines(corpus):
    """Blank lines are not mined and identical lines are mined once: the lines file names the first occurrence."""
    folder, _ = corpus
    for side in ("src", "tgt"):
        texts = (folder / f"{side}.txt").read_text(encoding="utf-8").split("\n")[:-1]
        vectors = np.load(folder / f"{side}.npy").astype(np.float32)
        (folder / f"{side}.txt").write_text("\n".join(["", *texts, texts[0]]) + "\n", encoding="utf-8")
        write_embeddings(folder / f"{side}.npy", np.concatenate([vectors[:1], vectors, vectors[::-1]])[:52])
    assert mine.main(mine_args(folder, "--threshold", "0")) == 0
    outputs(folder)
    lines = [line.split("\t") for line in (folder / "mined.lines.tsv").read_text(encoding="utf-8").splitlines()]
    sources, targets = {int(i) for _, i, _ in lines}, {int(j) for _, _, j in lines}
    assert 1 in sources and 1 in targets and not {0, 51} & (sources | targets)


def written(folder) -> list[str]:
    return sorted(path.name for path in folder.iterdir() if path.suffix not in (".txt", ".npy", ".json", ".lock"))


@pytest.mark.parametrize("index", ["HNSW32", "PCA8,HNSW32", "NSG32", "HNSW32_PQ4"])
def test_graph_indexes_are_refused_in_one_line(corpus, capsys, index):
    folder, _ = corpus
    assert mine.main(mine_args(folder, "--index", index)) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"hf-tlaser mine: error: --index {index!r}: graph indexes (") and "\n" not in err
    assert "not supported" in err and "IVF4096,PQ48" in err
    assert written(folder) == [] and not (folder / "mined.summary.json").exists()


def test_missing_py3langid_names_the_extra_before_any_text_is_read(corpus, capsys, monkeypatch):
    folder, _ = corpus
    monkeypatch.setitem(sys.modules, "py3langid", None)
    monkeypatch.setitem(sys.modules, "py3langid.langid", None)

    def no_reading(*args):
        raise AssertionError("the texts were read before py3langid was found missing")

    monkeypatch.setattr(mine, "read_texts", no_reading)
    assert mine.main(mine_args(folder, "--lid", "--src-lang", "de", "--tgt-lang", "en")) == 2
    err = capsys.readouterr().err.strip()
    assert (
        err == "hf-tlaser mine: error: --lid needs py3langid, which is not installed: pip install 'hf_tlaser[mining]'"
    )
    assert written(folder) == []


def corrupt_lines_file(folder):
    (folder / "mined.lines.tsv").write_text("keep me\n", encoding="utf-8")
    return ["--max-score", "2"], "--output (lines)", "exists; choose another path or give --overwrite"


def corrupt_summary_file(folder):
    (folder / "mined.summary.json").write_text("keep me\n", encoding="utf-8")
    return [], "--output (summary)", "exists; choose another path or give --overwrite"


def no_languages(folder):
    return ["--lid", "--src-lang", "de"], "--lid", "give the languages of both sides, --src-lang and --tgt-lang"


def bad_language(folder):
    return ["--lid", "--src-lang", "german", "--tgt-lang", "en"], "--src-lang german", "bad language code"


def unknown_language(folder):
    pytest.importorskip("py3langid")
    return ["--lid", "--src-lang", "de", "--tgt-lang", "xx"], "--tgt-lang xx", "py3langid does not identify 'xx'"


def both_thresholds(folder):
    (folder / "t.json").write_text('{"de-en": 1.1}', encoding="utf-8")
    flags = ["--threshold", "1", "--thresholds", str(folder / "t.json"), "--src-lang", "de", "--tgt-lang", "en"]
    return flags, "give --threshold or --thresholds, not both", ""


def unknown_pair(folder):
    (folder / "t.json").write_text('{"de-qq": 1.1}', encoding="utf-8")
    flags = ["--thresholds", str(folder / "t.json"), "--src-lang", "de", "--tgt-lang", "en"]
    return flags, "--thresholds", "de-qq: unknown language 'qq'"


def bad_limits(folder):
    return ["--min-chars", "10", "--max-chars", "5"], "--min-chars 10, --max-chars 5", "give 0 <= min <= max"


def bad_ratio(folder):
    return ["--max-length-ratio", "0.5"], "--max-length-ratio 0.5", "at least 1"


def bad_cap(folder):
    return ["--max-score", "nan"], "--max-score nan", "give a finite score"


def factors_without_languages(folder):
    return ["--length-factors", "flores", "--tgt-lang", "en"], "--length-factors flores", "give the languages of both"


def factors_without_flores(folder):
    flags = ["--length-factors", "flores", "--src-lang", "tlh", "--tgt-lang", "en", "--max-length-ratio", "2"]
    return flags, "--length-factors flores: flores-devtest: no file for 'tlh'", "give an ISO 639-1 code"


@pytest.mark.parametrize(
    "corrupt",
    [
        corrupt_lines_file,
        corrupt_summary_file,
        no_languages,
        bad_language,
        unknown_language,
        both_thresholds,
        unknown_pair,
        bad_limits,
        bad_ratio,
        bad_cap,
        factors_without_languages,
        factors_without_flores,
    ],
)
def test_bad_filter_input_one_line_exit_2_nothing_written(corpus, capsys, corrupt):
    folder, _ = corpus
    flags, argument, message = corrupt(folder)
    before = {path.name: path.read_bytes() for path in folder.iterdir()}
    assert mine.main(mine_args(folder, *flags)) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith(f"hf-tlaser mine: error: {argument}") and message in err
    assert {path.name: path.read_bytes() for path in folder.iterdir() if path.suffix != ".lock"} == {
        name: data for name, data in before.items() if not name.endswith(".lock")
    }


def test_length_factors_keep_chinese_translations_that_raw_characters_remove(data_dir):
    """The BUCC-style benchmark's finding: a ratio of 2 in characters removes most true zh-en pairs; in
    English-equivalent characters (FLORES factors) it keeps them."""
    folder = Path(data_dir) / "flores-devtest"
    zh, en = (flores_file(folder, code).read_text(encoding="utf-8").splitlines()[:100] for code in ("zh", "en"))
    scores = np.ones(len(zh))
    raw, _ = apply_filters(build_filters(max_length_ratio=2.0), scores, zh, en)
    factors = flores_length_factors(folder, ("zh", "en"))
    scaled, removed = apply_filters(build_filters(max_length_ratio=2.0, length_factors=factors), scores, zh, en)
    assert raw.sum() < 20 and scaled.sum() >= 95 and removed["length_ratio"] == 100 - scaled.sum()

"""Any language, any corpus: language codes as data, the curriculum for any pivots, the corpus spec syntax, every
kind of spec training through ``hf-tlaser train --corpora`` (a Hub dataset through the local test server in a fresh
process), the ten NTREX-128 languages trained and evaluated, and the clear errors."""

from __future__ import annotations

import functools
import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import datasets
import pytest
from hub_server import HubServer
from test_eval_reports import toy_embed

import hf_tlaser
from hf_tlaser import save_tokenizer
from hf_tlaser.data import (
    DEFAULT_PAIRS,
    CleaningConfig,
    curriculum_pairs,
    decoder_languages,
    load_corpora,
    load_corpus,
    normalize_language,
    parse_spec,
    resolve_corpora,
)
from hf_tlaser.data.corpora import NTREX_LANGUAGES
from hf_tlaser.data.readers import iter_lines
from hf_tlaser.errors import MissingDataError, UsageError
from hf_tlaser.evaluation import cli as eval_cli
from hf_tlaser.evaluation.suite import lexical_reference
from hf_tlaser.tokenization import TOKEN_REPORT
from hf_tlaser.training.cli import main

TINY = ["hidden_size=32", "num_hidden_layers=1", "num_attention_heads=4", "intermediate_size=64"]
TINY += ["decoder_attention_heads=4", "decoder_ffn_dim=64"]


def train_argv(out: Path, corpora: str | None, *extra: str) -> list[str]:
    args = [
        "--model", "ctlaser", "--preset", "tiny", "--max-lines", "40", "--output-dir", str(out), "--max-tokens", "600",
        "--update-tokens", "600", "--max-steps", "1", "--precision", "fp32",
    ]  # fmt: skip
    corpus = [] if corpora is None else ["--corpora", corpora]
    return args + corpus + [f"--set={item}" for item in TINY] + list(extra)


def one_error_line(capsys, rc: int) -> str:
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback" not in err, err
    return err.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory, tokenizer) -> Path:
    folder = tmp_path_factory.mktemp("tok")
    save_tokenizer(tokenizer, folder)
    return folder


@pytest.fixture(scope="module")
def user_data(tmp_path_factory, data_dir) -> Path:
    """Real sentences in every layout a user may have: a Moses folder (cs-en, a language outside the paper's five),
    a file pair, a TSV with a header, a folder of jsonl files with a ``translation`` column, a save_to_disk folder."""
    root = tmp_path_factory.mktemp("user")
    more, multi = data_dir / "wmt-newstest-more", data_dir / "wmt-newstest-multiway"
    head = lambda path: list(itertools.islice(iter_lines(path), 60))  # noqa: E731
    cs, cs_en = head(more / "newstest2013.cs-en.cs"), head(more / "newstest2013.cs-en.en")
    de, en, es = (head(multi / f"newstest2010.{lang}") for lang in ("de", "en", "es"))
    (root / "moses").mkdir()
    (root / "moses" / "news.cs-en.cs").write_text("\n".join(cs) + "\n")
    (root / "moses" / "news.cs-en.en").write_text("\n".join(cs_en) + "\n")
    (root / "moses" / "README.md").write_text("notes\n")  # "md" is no ISO 639-1 code: not a language
    (root / "moses" / "extra.fr").write_text("une ligne\n")  # one language: left out
    (root / "pair.de").write_text("\n".join(de) + "\n")
    (root / "pair.es").write_text("\n".join(es) + "\n")
    (root / "pairs.tsv").write_text("en\tes\tsource\n" + "".join(f"{a}\t{b}\tnews\n" for a, b in zip(en, es)))
    (root / "jsonl").mkdir()
    rows = [{"translation": {"de": a, "en": b}} for a, b in zip(de, en)]
    (root / "jsonl" / "train.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    datasets.Dataset.from_dict({"src": de, "tgt": es}).save_to_disk(str(root / "saved"))
    return root


# ---------------------------------------------------------------------------------------------------- languages


def test_language_codes_are_normalised_one_way():
    assert [normalize_language(c) for c in ("DE", "deu", "zh-hans", "ZHO_HANS", " pt ")] == [
        "de",
        "deu",
        "zh_Hans",
        "zho_Hans",
        "pt",
    ]
    for bad in ("english", "zh-CN", "d", "corpus"):
        with pytest.raises(ValueError, match="bad language code"):
            normalize_language(bad)


def test_curriculum_for_a_custom_pivot_set():
    assert list(DEFAULT_PAIRS) == [
        ("de", "en"), ("de", "es"), ("en", "es"), ("es", "en"), ("fr", "en"), ("fr", "es"), ("it", "en"), ("it", "es"),
    ]  # fmt: skip
    pairs = curriculum_pairs(["de", "en", "fr", "pt", "zh_Hans"], pivots=("fr", "pt"))
    assert pairs == [
        ("de", "fr"), ("de", "pt"), ("en", "fr"), ("en", "pt"), ("fr", "pt"), ("pt", "fr"), ("zh_Hans", "fr"),
        ("zh_Hans", "pt"),
    ]  # fmt: skip
    assert curriculum_pairs(["cs", "en"], pivots=("en",)) == [("cs", "en")]
    assert decoder_languages(pairs) == ["fr", "pt"]  # the decoder's table: the pivots
    assert decoder_languages(pairs, with_sources=True) == ["de", "en", "fr", "pt", "zh_Hans"]


# ---------------------------------------------------------------------------------------------------- specs


def test_spec_syntax(user_data):
    moses = parse_spec(f"moses:{user_data / 'moses'}")
    assert [part.languages for part in moses.parts] == [("cs", "en")] and moses.left_out == ["extra"]
    prefix = parse_spec(f"moses:{user_data / 'pair'}")
    assert prefix.languages == ["de", "es"]
    files = parse_spec(f"files:de={user_data / 'pair.de'}:es={user_data / 'pair.es'}")
    assert files.parts[0].files == {"de": str(user_data / "pair.de"), "es": str(user_data / "pair.es")}
    header = parse_spec(f"tsv:{user_data / 'pairs.tsv'}")
    assert (header.parts[0].columns, header.parts[0].skip_lines) == ({"en": 0, "es": 1}, 1)
    named = parse_spec(f"tsv:{user_data / 'pairs.tsv'}:de=source:en=en")
    assert named.parts[0].columns == {"de": 2, "en": 0}
    indices = parse_spec(f"tsv:{user_data / 'pairs.tsv'}:en=0:es=1")
    assert (indices.parts[0].columns, indices.parts[0].skip_lines) == ({"en": 0, "es": 1}, 0)
    hub = parse_spec("hf:wmt/wmt14:config=de-en:split=validation:de=translation.de:en=translation.en")
    part = hub.parts[0]
    assert (part.location, part.config, part.split, part.columns) == (
        "wmt/wmt14",
        "de-en",
        "validation",
        {"de": "translation.de", "en": "translation.en"},
    )
    assert [s.spec for s in resolve_corpora(f"wmt-newstest-multiway,moses:{user_data / 'moses'}")] == [
        "wmt-newstest-multiway",
        f"moses:{user_data / 'moses'}",
    ]


@pytest.mark.parametrize(
    ("spec", "error", "message"),
    [
        ("csv:x.csv", UsageError, "not a registered corpus and not KIND:WHERE with KIND one of moses, files, tsv, hf"),
        ("europarl", UsageError, "unknown corpus 'europarl'; known corpora:"),
        ("hf:", UsageError, "nothing after hf:"),
        ("hf:x:de=a", UsageError, "map two or more languages"),
        ("hf:x:split", UsageError, "option 'split' is not KEY=VALUE"),
        ("files:de=a.de:de=b.de", UsageError, "language 'de' given twice"),
        ("files:english=a:de=b", UsageError, "unknown option 'english' (expected a language code)"),
        ("files:de=/nowhere/a.de:en=/nowhere/a.en", MissingDataError, "corpus file /nowhere/a.de does not exist"),
        ("hf:./nowhere", MissingDataError, "hf:./nowhere: no such folder"),
    ],
)
def test_malformed_specs(spec, error, message):
    with pytest.raises(error) as info:
        resolve_corpora(spec)
    assert message in str(info.value)


def test_hf_columns_and_languages(user_data):
    ds = load_corpus(f"hf:{user_data / 'jsonl'}", max_lines=5)
    assert ds.column_names == ["de", "en", "corpus"] and len(ds) == 5
    saved = load_corpus(f"hf:{user_data / 'saved'}:de=src:es=tgt")
    assert saved.column_names == ["de", "es", "corpus"] and saved[0]["corpus"] == f"hf:{user_data / 'saved'}"
    with pytest.raises(UsageError, match="found the languages \\[\\] in the columns \\['src', 'tgt'\\]"):
        resolve_corpora(f"hf:{user_data / 'saved'}")[0].languages  # noqa: B018


@pytest.mark.parametrize(
    ("kind", "spec", "languages"),
    [
        ("moses", "moses:{root}/moses", ["cs", "en"]),
        ("files", "files:de={root}/pair.de:es={root}/pair.es", ["de", "es"]),
        ("tsv", "tsv:{root}/pairs.tsv", ["en", "es"]),
        ("hf-folder", "hf:{root}/jsonl", ["de", "en"]),
        ("hf-saved", "hf:{root}/saved:de=src:es=tgt", ["de", "es"]),
    ],
)
def test_each_kind_of_corpus_trains(kind, spec, languages, user_data, tokenizer_dir, tmp_path):
    spec = spec.format(root=user_data)
    pivot = languages[1]
    rc = main(train_argv(tmp_path / "run", spec, "--pivots", pivot, "--tokenizer", str(tokenizer_dir)))
    assert rc == 0
    record = json.loads((tmp_path / "run" / "hf_tlaser_train.json").read_text())
    assert record["data"]["corpora"] == [spec] and record["data"]["languages"] == languages
    assert record["data"]["pairs"] == [f"{languages[0]}-{pivot}"]
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert config["languages"] == [pivot] and config["training_languages"] == languages
    assert json.loads((tmp_path / "run" / "trainer_state.json").read_text())["global_step"] == 1


def test_config_file_takes_a_list_of_specs(user_data, tokenizer_dir, tmp_path):
    config = tmp_path / "run.yaml"
    config.write_text(
        f"corpora:\n  - moses:{user_data / 'moses'}\n  - hf:{user_data / 'jsonl'}\npivots: en\n"
        f"tokenizer: {tokenizer_dir}\n"
    )
    assert main(train_argv(tmp_path / "run", None, "--config", str(config))) == 0
    record = json.loads((tmp_path / "run" / "hf_tlaser_train.json").read_text())
    assert record["data"]["languages"] == ["cs", "de", "en"] and record["data"]["pairs"] == ["cs-en", "de-en"]


def test_hub_dataset_trains_in_a_fresh_process(user_data, tokenizer_dir, tmp_path):
    """A script-free dataset repo on the local Hub test server, read by the real ``datasets.load_dataset`` path."""
    with HubServer() as hub:
        env = {**os.environ, "HF_ENDPOINT": hub.url, "HF_HOME": str(tmp_path / "hf"), "HF_HUB_DISABLE_TELEMETRY": "1"}
        upload = (
            "import os\nfrom huggingface_hub import HfApi\n"
            "api = HfApi(endpoint=os.environ['HF_ENDPOINT'], token='test')\n"
            "api.create_repo('user/bitext', repo_type='dataset')\n"
            f"api.upload_folder(folder_path={str(user_data / 'jsonl')!r}, path_in_repo='data', repo_id='user/bitext', "
            "repo_type='dataset')\n"
        )
        done = subprocess.run([sys.executable, "-c", upload], env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr[-2000:]
        argv = train_argv(tmp_path / "run", "hf:user/bitext:split=train", "--pivots", "en")
        cmd = [sys.executable, "-m", "hf_tlaser.training.cli", *argv, "--tokenizer", str(tokenizer_dir)]
        run = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
        assert run.returncode == 0, run.stderr[-3000:]
        downloads = [path for method, path in hub.requests if method == "GET" and "/resolve/" in path]
        assert any(
            path.startswith("/datasets/user/bitext/") and path.endswith("/data/train.jsonl") for path in downloads
        )
    record = json.loads((tmp_path / "run" / "hf_tlaser_train.json").read_text())
    assert record["data"]["languages"] == ["de", "en"] and record["data"]["pairs"] == ["de-en"]


# ---------------------------------------------------------------------------------------------------- ten languages


def test_ten_ntrex_languages_train_and_evaluate(tmp_path, monkeypatch, capsys):
    """The paper's five + cs ru zh tr fi from the shared corpora: one joint BPE over Latin, Cyrillic and Han, a
    curriculum toward en/es, and ``evaluate --retrieval-sets ntrex128`` over all ten trained languages."""
    out = tmp_path / "ten"
    corpora = "wmt-newstest-multiway,wmt-newstest-more"
    assert main(train_argv(out, corpora, "--max-lines", "15", "--vocab-size", "1500")) == 0
    record = json.loads((out / "hf_tlaser_train.json").read_text())
    assert record["data"]["languages"] == sorted(NTREX_LANGUAGES)
    assert len(record["data"]["pairs"]) == 18 and "zh-en" in record["data"]["pairs"]  # 8 sources x 2 pivots + 2
    report = json.loads((out / TOKEN_REPORT).read_text())["languages"]
    assert sorted(report) == sorted(NTREX_LANGUAGES)
    assert abs(sum(row["token_share"] for row in report.values()) - 1) < 0.01
    assert report["zh"]["byte_fallback_share"] == 0 and report["ru"]["unk_share"] == 0  # every script covered

    embedded = functools.cache(lambda texts: toy_embed(list(texts)))  # the model and its random init: same texts
    monkeypatch.setattr(hf_tlaser, "encode", lambda model, tokenizer, texts, **kwargs: embedded(tuple(texts)).copy())
    monkeypatch.setattr(eval_cli, "lexical_reference", functools.partial(lexical_reference, svd_dim=16))
    argv = [str(out), "--suite", "retrieval", "--retrieval-sets", "ntrex128", "--precision", "fp32"]
    assert eval_cli.main(argv) == 0
    results = json.loads((out / "eval" / "results.json").read_text())
    langs = results["retrieval"]["matrices"]["ntrex128"]["ratio"]["langs"]
    assert sorted(langs) == sorted(NTREX_LANGUAGES) and results["retrieval"]["sizes"] == {"ntrex128": 1997}
    assert set(results["references"]) == {"random init", "tfidf-char"}
    assert len(results["retrieval"]["mining"]["ntrex128"]) == 45  # every pair of the ten
    assert "| zh → en |" in (out / "eval" / "report.md").read_text()
    capsys.readouterr()


# ---------------------------------------------------------------------------------------------------- errors


def test_clear_errors_for_languages_and_pivots(user_data, tmp_path, capsys):
    moses = f"moses:{user_data / 'moses'}"
    line = one_error_line(capsys, main(train_argv(tmp_path / "a", moses)))  # default pivots en,es
    assert line == (
        f"hf-tlaser train: error: --pivots en,es: 'es' is not in the data (the corpora {moses} have cs, en); "
        "choose pivots among them, or give --pairs"
    )
    line = one_error_line(capsys, main(train_argv(tmp_path / "b", moses, "--pairs", "pt-en")))
    assert f"--pairs pt-en: no corpus has 'pt' text (the corpora {moses} have cs, en); add a corpus with pt" in line
    line = one_error_line(capsys, main(train_argv(tmp_path / "c", moses, "--pivots", "en,english")))
    assert "--pivots: bad language code 'english'" in line
    argv = train_argv(tmp_path / "d", "wmt-newstest-multiway", "--streaming", "--batching", "multiway")
    line = one_error_line(capsys, main(argv))
    assert "--streaming trains with --batching pair" in line
    assert not any(p.exists() for p in (tmp_path / "a", tmp_path / "b", tmp_path / "c", tmp_path / "d"))


def test_pivot_join_adds_bitext_languages_to_multiway_groups(data_dir):
    # the English side of the cs-en sets of 2008-2011 and 2013 is the multi-way sets' English, line for line
    keep_all = CleaningConfig(max_tokens=10**6, max_length_ratio=1e9)
    langs = ["cs", "de", "en", "es"]
    ds = load_corpora(["wmt-newstest-multiway", "wmt-newstest-more"], data_dir, langs, cleaning=keep_all, max_lines=40)
    both = ds.filter(lambda cs, es: bool(cs and es), input_columns=["cs", "es"])
    assert len(both) == 6 * 40  # every line of the six sets gained its Czech sentence
    assert all("+wmt-newstest-more/" in corpus for corpus in both["corpus"])
    alone = ds.filter(lambda cs, de: bool(cs and not de), input_columns=["cs", "de"])
    assert len(alone) == 40 * 11 - len(both) and len(ds) == 40 * 11  # the other cs-en sets (2014-2018) stay bitexts

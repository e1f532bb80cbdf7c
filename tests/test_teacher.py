"""Teachers (hf_tlaser.teachers): every SPEC kind loads (a tiny sentence-transformers model built here, a tiny
T-LASER folder, a ``vectors:`` file); bad specs are one-line usage errors; the vector cache counts hits and misses
across runs and recovers from a killed run or a truncated shard; ``hf-tlaser teacher-vectors`` fills it and writes a
``vectors:`` file that loads against its corpus."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from sentence_transformers import SentenceTransformer

import hf_tlaser
from hf_tlaser.cli import main as hf_tlaser_main
from hf_tlaser.encoders.identity import ENV_VAR, folder_fingerprint
from hf_tlaser.encoders.vectors import write_vectors
from hf_tlaser.errors import UsageError
from hf_tlaser.model_folders import EVAL_PROMPTS
from hf_tlaser.teachers import cache as cache_module
from hf_tlaser.teachers import cli as teachers_cli
from hf_tlaser.teachers.cache import TeacherCache
from hf_tlaser.teachers.cli import teacher_texts
from hf_tlaser.teachers.targets import TRAIN_PROMPTS, load_teacher
from tests.tiny_models import make_st_model


@pytest.fixture(autouse=True)
def cache_env(tmp_path, monkeypatch):
    """The default cache root (and its file-digest memo) in the test's folder, never the user's."""
    monkeypatch.setenv(ENV_VAR, str(tmp_path / "default-cache"))


@pytest.fixture(scope="module")
def texts(newstest_lines) -> list[str]:
    return newstest_lines["en"][:12]


def test_sentence_transformers_teacher_uses_its_prompt(st_folder, texts):
    teacher = load_teacher(str(st_folder), device="cpu", precision="fp32")
    assert (teacher.kind, teacher.dim, teacher.languages) == ("sentence-transformers", 16, ["de", "en"])
    assert (teacher.prompt_name, teacher.prompt) == ("query", "query: ")  # e5's for symmetric tasks, as evaluation's
    model = SentenceTransformer(str(st_folder), device="cpu")
    got = teacher.encode(texts[:4])
    assert got.dtype == np.float32 and got.shape == (4, 16)
    np.testing.assert_allclose(got, model.encode(texts[:4], prompt="query: "), atol=1e-5)
    assert not np.allclose(got, model.encode(texts[:4]), atol=1e-3)  # the prompt changes the vectors
    assert TRAIN_PROMPTS == EVAL_PROMPTS  # distilled in the space it is judged in (docs/training.md)
    passage = load_teacher(str(st_folder), prompt_name="passage", device="cpu")
    assert passage.prompt == "passage: " and load_teacher(str(st_folder), prompt_name="none").prompt is None
    with pytest.raises(UsageError, match=r"--teacher .*no prompt named 'title'; its prompts: query \('query: '\)"):
        load_teacher(str(st_folder), prompt_name="title")
    assert teacher.encode([]).shape == (0, 16)


def test_fingerprint_follows_content_not_path(st_folder, tmp_path, tokenizer):
    fingerprint = folder_fingerprint(st_folder)
    assert len(fingerprint) == 64 and fingerprint == load_teacher(str(st_folder)).fingerprint
    copy = shutil.copytree(st_folder, tmp_path / "copy")
    (copy / "README.md").write_text("another card")
    assert folder_fingerprint(copy) == fingerprint  # a copy elsewhere (other dates, other card) is the same teacher
    retrained = make_st_model(tmp_path / "retrained", tokenizer, seed=1)
    assert folder_fingerprint(retrained) != fingerprint
    prompts = json.loads((copy / "config_sentence_transformers.json").read_text())
    prompts["prompts"]["query"] = "query : "
    (copy / "config_sentence_transformers.json").write_text(json.dumps(prompts))
    assert folder_fingerprint(copy) != fingerprint


def test_hf_tlaser_teacher_encodes_with_hf_tlaser(tlaser_folder, texts):
    teacher = load_teacher(str(tlaser_folder), device="cpu", precision="fp32")
    assert (teacher.kind, teacher.dim, teacher.languages, teacher.prompt) == ("hf_tlaser", 32, ["de", "en"], None)
    assert teacher.name == "cT-LASER model"  # model name and folder name
    model, tok = hf_tlaser.load_model(tlaser_folder, backend="torch")
    expected = hf_tlaser.encode(model, tok, texts[:5], truncation=True, autocast_dtype=None, device="cpu")
    np.testing.assert_allclose(teacher.encode(texts[:5]), expected, atol=1e-5)


def test_vectors_teacher_checks_its_corpus(st_folder, tmp_path, texts):
    teacher = load_teacher(str(st_folder), device="cpu")
    vectors = teacher.encode(texts)
    path = write_vectors(tmp_path / "v.npy", texts, vectors, teacher.to_dict(), dtype="float32")
    loaded = load_teacher(f"vectors:{path}", texts=texts)
    assert (loaded.kind, loaded.dim, loaded.fingerprint, loaded.prompt) == (
        "vectors",
        16,
        teacher.fingerprint,
        "query: ",
    )
    np.testing.assert_array_equal(loaded.encode(texts[::-1][:5]), vectors[::-1][:5])  # looked up by text
    with pytest.raises(UsageError, match=r"--teacher vectors:.* holds 12 rows but the corpus gives 11 texts"):
        load_teacher(f"vectors:{path}", texts=texts[:11])
    with pytest.raises(UsageError, match="its texts differ from the corpus's"):
        load_teacher(f"vectors:{path}", texts=[*texts[:11], "another sentence"])
    with pytest.raises(UsageError, match="texts differ"):
        loaded.check_texts(texts[::-1])  # the same texts in another order
    with pytest.raises(UsageError, match="1 of 2 texts are not in it"):
        loaded.encode([texts[0], "not there"])
    (tmp_path / "v.keys.npy").write_bytes((tmp_path / "v.keys.npy").read_bytes()[:100])
    with pytest.raises(UsageError, match="--teacher vectors:.*(unreadable|do not agree)"):
        load_teacher(f"vectors:{path}")


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        ("missing", "no such folder; give a sentence-transformers model folder or Hub id"),
        ("empty", "is not a model folder (no config.json or modules.json)"),
        ("broken", "cannot load it as a sentence-transformers model"),
        ("vectors", "does not exist; write it with hf-tlaser teacher-vectors --output"),
    ],
)
def test_unloadable_teacher_is_one_line(case, expected, tmp_path, capsys, data_dir, monkeypatch):
    spec = str(tmp_path / "teacher")
    if case in ("empty", "broken"):
        (tmp_path / "teacher").mkdir()
    if case == "broken":
        (tmp_path / "teacher" / "config.json").write_text(json.dumps({"model_type": "bert", "hidden_size": 8}))
    if case == "vectors":
        spec = f"vectors:{tmp_path / 'nothing.npy'}"
    monkeypatch.setattr(teachers_cli, "teacher_texts", lambda *args: pytest.fail("text was read"))
    argv = ["teacher-vectors", "--teacher", spec, "--corpora", "ntrex128", "--data-dir", str(data_dir)]
    assert hf_tlaser_main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("hf-tlaser teacher-vectors: error: --teacher ") and expected in err[-1], err
    assert not any("Traceback" in line for line in err)


class CountingTeacher:
    """A teacher that counts the texts it encodes."""

    def __init__(self, teacher):
        self.teacher, self.encoded = teacher, []

    def __getattr__(self, name):
        return getattr(self.teacher, name)

    def encode(self, texts, **kwargs):
        self.encoded += list(texts)
        return self.teacher.encode(texts, **kwargs)


@pytest.fixture()
def teacher(st_folder):
    return CountingTeacher(load_teacher(str(st_folder), device="cpu"))


def test_cache_counts_hits_and_misses_across_runs(teacher, tmp_path, texts):
    first = TeacherCache(tmp_path, teacher, chunk_size=4, show_progress=False)
    got = first.get(texts[:6])
    assert (first.last.hits, first.last.misses, first.last.computed) == (0, 6, 6)
    np.testing.assert_allclose(got, teacher.teacher.encode(texts[:6]), atol=2e-3)  # stored as float16
    assert len(list(first.shards.glob("*.keys.npy"))) == 2 and json.loads((first.folder / "meta.json").read_text())
    teacher.encoded.clear()
    second = TeacherCache(tmp_path, teacher, chunk_size=4, show_progress=False)  # a later run
    asked = [texts[9], *texts[:8], texts[9]]
    got = second.get(asked)
    assert (second.last.hits, second.last.misses, second.last.computed) == (6, 4, 3)
    new = [texts[6], texts[7], texts[9]]
    assert sorted(teacher.encoded) == sorted(new)  # each new text once
    np.testing.assert_allclose(got, teacher.teacher.encode(asked), atol=2e-3)  # input order
    assert first.get(new).shape == (3, 16) and (first.last.hits, first.last.computed) == (3, 0)  # read the other's


def test_killed_run_and_truncated_shard_recover(teacher, tmp_path, texts, monkeypatch, caplog):
    save = cache_module.save_npy
    written = []

    def killed_on_second_commit(path, array):
        if path.name.endswith(".keys.npy") and written:
            raise KeyboardInterrupt  # killed after the rows of the second chunk, before its keys
        save(path, array)
        written.append(path.name) if path.name.endswith(".keys.npy") else None

    monkeypatch.setattr(cache_module, "save_npy", killed_on_second_commit)
    with pytest.raises(KeyboardInterrupt):
        TeacherCache(tmp_path, teacher, chunk_size=4, show_progress=False).get(texts[:8])
    monkeypatch.setattr(cache_module, "save_npy", save)
    rerun = TeacherCache(tmp_path, teacher, chunk_size=4, show_progress=False)
    got = rerun.get(texts[:8])
    assert (rerun.last.hits, rerun.last.computed) == (4, 4)  # the committed chunk counts, the rest is recomputed
    np.testing.assert_allclose(got, teacher.teacher.encode(texts[:8]), atol=2e-3)

    shard = sorted(rerun.shards.glob("*.vec.npy"))[0]
    shard.write_bytes(shard.read_bytes()[:150])  # a committed shard cut short (full disk, broken copy)
    after = TeacherCache(tmp_path, teacher, chunk_size=4, show_progress=False)
    got = after.get(texts[:8])
    assert after.last.computed == 4 and "unreadable" in caplog.text
    np.testing.assert_allclose(got, teacher.teacher.encode(texts[:8]), atol=2e-3)
    assert list(after.shards.glob("*.corrupt"))


def test_teacher_vectors_command_fills_cache_and_writes_vectors(st_folder, tmp_path, newstest_lines, capsys):
    for lang in ("de", "en"):
        (tmp_path / f"c.{lang}").write_text("\n".join(newstest_lines[lang][:30]) + "\n")
    corpus = f"files:de={tmp_path / 'c.de'}:en={tmp_path / 'c.en'}"
    argv = ["teacher-vectors", "--teacher", str(st_folder), "--corpora", corpus, "--limit", "20"]
    argv += ["--cache-dir", str(tmp_path / "cache"), "--output", str(tmp_path / "out" / "v.npy")]
    assert hf_tlaser_main(argv) == 0
    out = capsys.readouterr().out
    assert "texts: 20" in out and "hits: 0" in out and "computed: 20" in out
    corpus_texts = teacher_texts(corpus, languages=["en"], limit=20)
    assert corpus_texts == list(dict.fromkeys(newstest_lines["en"][:30]))[:20]
    vectors = load_teacher(f"vectors:{tmp_path / 'out' / 'v.npy'}", texts=corpus_texts)
    assert vectors.prompt == "query: " and vectors.meta["corpora"] == [corpus]
    expected = load_teacher(str(st_folder), device="cpu").encode(corpus_texts)
    np.testing.assert_allclose(vectors.encode(corpus_texts), expected, atol=2e-3)
    assert hf_tlaser_main(argv) == 0
    assert "hits: 20" in capsys.readouterr().out  # the second run computes nothing

"""Behaviour that the mutation run of issue 34 (``scripts/mutation.py``, docs/testing.md) found unpinned in the core
modules: the teacher cache's folder layout, its lookup past the last key and its longest-first order; an empty
encode; the ``vectors:`` file's errors; a Hub id's snapshot; the warm start's pooling check, special tokens and
ignored sizes; a multi-way group's pivot and the distillation collator's group. No model weights: a teacher that
computes vectors from the text, and backbone folders of a config and a tokenizer only."""

from __future__ import annotations

import hashlib
import json
import logging

import numpy as np
import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast, XLMRobertaConfig

from hf_tlaser import TLaserConfig, TLaserForTranslation
from hf_tlaser.encoders.vectors import KEY_DTYPE, text_keys, write_vectors
from hf_tlaser.errors import UsageError
from hf_tlaser.model_folders import model_folder
from hf_tlaser.models.ldt.modeling_ldt import xtr_labels
from hf_tlaser.teachers.cache import TeacherCache
from hf_tlaser.teachers.targets import Teacher, load_teacher
from hf_tlaser.training.distill import DistillCollator, pivot_of_group
from hf_tlaser.training.trainer import DISTILL_INPUTS
from hf_tlaser.training.warm import backbone_overrides, check_backbone, sentence_transformers_parts

WORDS = ["hello", "world", "again", "test"]


class TextTeacher(Teacher):
    """A teacher whose vector of a text is computed from its characters; records every batch it encodes."""

    def __init__(self, name: str = "text teacher", prompt: str | None = None, prompt_name: str | None = None):
        super().__init__(
            "text", name, "text", "0123456789abcdef" * 3, 4, prompt=prompt, prompt_name=prompt_name, batch_size=2
        )
        self.batches: list[list[str]] = []

    def _encode(self, texts: list[str], batch_size: int, show_progress: bool) -> np.ndarray:
        self.batches.append(list(texts))
        return np.array([[len(t), sum(map(ord, t)) % 97, t.count(" "), 1] for t in texts], dtype=np.float32)


# ------------------------------------------------------------------------------------------------ losses


def test_logged_hinge_is_the_mean_hinge_of_one_direction(tokenizer, tiny_tlaser_kwargs):
    """Two pairs, one negative each (the other pair) and a margin no distance reaches: every hinge is
    ``alpha - (d_n - d_p)``, and both directions see the same two negative distances, so the logged mean of one
    direction is ``alpha + d_p - d_n``."""
    torch.manual_seed(0)
    config = TLaserConfig(**tiny_tlaser_kwargs, distance_beta=0.25, distance_negatives=1, distance_alpha=100.0)
    model = TLaserForTranslation(config)
    src, tgt = (
        tokenizer(["das ist gut", "die börse fällt"], padding=True, return_tensors="pt"),
        tokenizer(["this is good", "stocks fall"], padding=True, return_tensors="pt"),
    )
    labels = tgt["input_ids"][:, 1:].masked_fill(tgt["attention_mask"][:, 1:] == 0, -100)
    out = model(
        src["input_ids"],
        src["attention_mask"],
        labels=labels,
        tgt_lang="en",
        tgt_input_ids=tgt["input_ids"],
        tgt_attention_mask=tgt["attention_mask"],
    )
    assert out.skipped_pair_losses.item() == 0
    torch.testing.assert_close(out.hinge, 100.0 + out.d_p - out.d_n)


def test_ldt_labels_are_built_on_the_device_of_the_token_ids():
    """On the meta device, which fails any mix with a CPU tensor as CUDA would."""
    ids, keep = torch.tensor([[3, 4, 4]], device="meta"), torch.ones(1, 3, dtype=torch.bool, device="meta")
    assert xtr_labels(ids, keep, 8).device.type == "meta"


# ------------------------------------------------------------------------------------------------ teachers


def test_cache_folder_is_named_as_documented(tmp_path):
    """``<teacher name>-<fingerprint[:16]>/<prompt name or none>-<sha1(prompt)[:8]>``: a name that slugs to nothing
    is ``teacher``, no prompt hashes the empty text."""
    plain = TeacherCache(tmp_path, TextTeacher(name="???"), show_progress=False)
    assert plain.folder == tmp_path / "teacher-0123456789abcdef" / f"none-{hashlib.sha1(b'').hexdigest()[:8]}"
    prompted = TeacherCache(tmp_path, TextTeacher("my teacher", "query: ", "query"), show_progress=False)
    expected = f"query-{hashlib.sha1(b'query: ').hexdigest()[:8]}"
    assert prompted.folder == tmp_path / "my_teacher-0123456789abcdef" / expected


def test_cache_encodes_the_misses_longest_first_and_looks_up_past_its_last_key(tmp_path):
    teacher = TextTeacher()
    texts = ["a", "a much longer text", "mid text", "bb", "a"]
    cache = TeacherCache(tmp_path, teacher, chunk_size=16, show_progress=False)
    got = cache.get(texts)
    asked = [text for batch in teacher.batches for text in batch]
    assert asked == ["a much longer text", "mid text", "bb", "a"]  # distinct, longest first, in batches of 2
    np.testing.assert_allclose(got, teacher.encode(texts))
    below, above = np.array([b"\x00" * 20], dtype=KEY_DTYPE), np.array([b"\xff" * 20], dtype=KEY_DTYPE)
    where = cache.lookup(np.concatenate([below, above, text_keys(["bb"])]))
    assert (where[:2] == -1).all() and (where[2] >= 0).all()


class RacingTeacher(TextTeacher):
    """While it encodes its first batch, another writer of the same cache folder stores those texts."""

    def __init__(self, root):
        super().__init__()
        self.root, self.racing = root, True

    def _encode(self, texts: list[str], batch_size: int, show_progress: bool) -> np.ndarray:
        if self.racing:
            self.racing = False
            TeacherCache(self.root, TextTeacher(), show_progress=False).get(texts)
        return super()._encode(texts, batch_size, show_progress)


def test_texts_another_writer_stored_meanwhile_are_counted_once_and_logged(tmp_path, caplog):
    cache = TeacherCache(tmp_path, RacingTeacher(tmp_path), chunk_size=16, show_progress=False)
    with caplog.at_level(logging.WARNING, logger="hf_tlaser.teachers.cache"):
        got = cache.get(["aa", "b"])
    assert ": 2 texts were also computed by another process at the same time (stored once)" in caplog.text
    assert cache.last.computed == 2 and len(list(cache.shards.glob("*.keys.npy"))) == 1
    np.testing.assert_allclose(got, TextTeacher().encode(["aa", "b"]))


def test_encoding_no_text_gives_an_empty_matrix_of_the_teachers_width():
    assert TextTeacher().encode([]).shape == (0, 4)


def test_vectors_file_errors_say_how_to_recompute_it(tmp_path):
    path = write_vectors(tmp_path / "v.npy", ["a", "b"], np.ones((2, 4), dtype=np.float32))
    teacher = load_teacher(f"vectors:{path}")
    hint = "recompute it with hf-tlaser teacher-vectors --output for this corpus"
    with pytest.raises(UsageError, match=f"holds 2 rows but the corpus gives 1 texts; {hint}"):
        teacher.check_texts(["a"])
    with pytest.raises(UsageError, match=f"its texts differ from the corpus's .*; {hint}"):
        teacher.check_texts(["a", "c"])
    empty = load_teacher(f"vectors:{write_vectors(tmp_path / 'e.npy', [], np.zeros((0, 4), dtype=np.float32))}")
    with pytest.raises(UsageError, match="1 of 1 texts are not in it"):
        empty.encode(["x"])


def test_a_hub_id_is_its_snapshot_at_the_asked_revision(tmp_path, monkeypatch):
    import huggingface_hub

    snapshot = tmp_path / "snapshots" / "0123abcd"
    snapshot.mkdir(parents=True)
    asked = {}

    def snapshot_download(repo_id, revision=None, **kwargs):
        asked.update(repo_id=repo_id, revision=revision, **kwargs)
        return str(snapshot)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    assert model_folder("org/model@v1", "--teacher") == (snapshot, "hub:org/model@0123abcd")
    assert asked["repo_id"] == "org/model" and asked["revision"] == "v1" and "*.onnx" in asked["ignore_patterns"]
    assert model_folder("org/model", "--teacher", revision="r2")[1] == "hub:org/model@0123abcd"
    assert asked["revision"] == "r2"


# ------------------------------------------------------------------------------------------------ warm start


def st_folder(folder, pooling: dict):
    """A sentence-transformers folder of modules.json and a Pooling config only."""
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
    ]
    (folder / "1_Pooling").mkdir(parents=True)
    (folder / "modules.json").write_text(json.dumps(modules))
    (folder / "1_Pooling" / "config.json").write_text(json.dumps({"word_embedding_dimension": 16, **pooling}))
    return folder


@pytest.mark.parametrize(
    "pooling, expected",
    [
        ({"pooling_mode": "mean"}, "mean"),
        ({"pooling_mode": "cls"}, "cls"),
        ({"pooling_mode": "max"}, None),
        ({"pooling_mode_cls_token": True, "pooling_mode_mean_tokens": False}, "cls"),
        ({"pooling_mode_cls_token": True, "pooling_mode_mean_tokens": True}, None),
    ],
)
def test_only_a_cls_or_mean_pooling_is_taken(pooling, expected, tmp_path):
    folder = st_folder(tmp_path / "st", pooling)
    if expected is None:
        with pytest.raises(UsageError, match="is not one the members reproduce"):
            check_backbone(str(folder), "tlaser", None)
    else:
        assert sentence_transformers_parts(folder, "--init-from")[1] == expected
        with pytest.raises(UsageError, match=f"no config.json in {folder}; give a Hugging Face encoder folder"):
            check_backbone(str(folder), "tlaser", None)  # a Transformer module without its config


@pytest.fixture()
def eos_backbone_dir(tmp_path):
    """A backbone of a config and a word-level tokenizer whose eos (``</s>``) and sep (``<sep>``) differ."""
    specials = ["<s>", "<pad>", "</s>", "<unk>", "<sep>"]
    backend = Tokenizer(models.WordLevel({w: i for i, w in enumerate(specials + WORDS)}, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    names = dict(cls_token="<s>", bos_token="<s>", eos_token="</s>", sep_token="<sep>", pad_token="<pad>")
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="<unk>", model_max_length=64, **names)
    tokenizer.save_pretrained(tmp_path / "backbone")
    config = XLMRobertaConfig(
        vocab_size=len(tokenizer), hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32
    )
    config.save_pretrained(tmp_path / "backbone")
    return tmp_path / "backbone"


def test_a_tokenizer_with_its_own_eos_keeps_it(eos_backbone_dir):
    tokenizer = check_backbone(str(eos_backbone_dir), "tlaser", None).tokenizer
    assert tokenizer.eos_token == "</s>"
    assert tokenizer.convert_ids_to_tokens(tokenizer("hello world")["input_ids"]) == ["<s>", "hello", "world", "</s>"]


def test_sizes_the_backbone_decides_are_ignored_with_a_warning_naming_them(eos_backbone_dir, caplog):
    backbone = check_backbone(str(eos_backbone_dir), "tlaser", None)
    with caplog.at_level(logging.WARNING, logger="hf_tlaser.train"):
        values = backbone_overrides(backbone, "backbone", {"hidden_size": 8, "num_hidden_layers": 9, "dropout": 0.3})
    assert "the backbone decides hidden_size, num_hidden_layers" in caplog.text
    assert (values["hidden_size"], values["num_hidden_layers"], values["dropout"]) == (16, 1, 0.3)
    assert values["pooling"] == "cls"  # no pooling of its own: the member's cls


# ------------------------------------------------------------------------------------------------ distillation


def test_a_groups_pivot_is_its_curriculum_pivot_then_its_first_target():
    assert pivot_of_group({"en": "x", "de": "y"}, [("en", "de")], ["en"]) == "en"
    assert pivot_of_group({"de": "y", "fr": "z"}, [("en", "de"), ("en", "fr")], ["en"]) == "de"
    assert pivot_of_group({"en": None, "de": None}, [("en", "de")], ["en"]) is None


def test_collator_pulls_every_sentence_of_a_group_to_its_pivot(tokenizer):
    matrix = np.eye(3, dtype=np.float32)
    collator = DistillCollator(
        lambda examples: {}, tokenizer, matrix, {"a": 0, "b": 1, "c": 2}, [("de", "en"), ("fr", "en")], ["en"]
    )
    example = {"de": "b", "en": "a", "fr": "c"}
    assert collator.sentences([example]) == (["b", "a", "c"], ["a", "a", "a"])
    pairs = [dict(src="a", tgt="b", src_lang="en", tgt_lang="de"), dict(src="c", tgt="a", src_lang="de", tgt_lang="en")]
    assert collator.sentences(pairs) == (["a", "b", "c", "a"], ["a"] * 4)  # both sides to the pivot side, src or tgt
    batch = collator([example])
    assert batch[DISTILL_INPUTS[2]].tolist() == [[1.0, 0.0, 0.0]] * 3 and batch[DISTILL_INPUTS[0]].shape[0] == 3


# ------------------------------------------------- issue 50's run of the core modules (30 mutants each, seed 34)


def test_a_vectors_file_names_its_rows_width_and_teacher(tmp_path):
    path = write_vectors(tmp_path / "v.npy", ["a", "b", "c"], np.ones((3, 4), dtype=np.float32))
    teacher = load_teacher(f"vectors:{path}")
    assert teacher.describe().startswith(f"vectors {path} (3 rows, 4 dimensions) of ")
    digest = teacher.meta["texts_sha1"]
    with pytest.raises(UsageError, match=rf"\(texts hash {digest[:12]} vs [0-9a-f]{{12}}\)"):
        teacher.check_texts(["a", "b", "x"])


def test_truncated_vectors_files_are_named_with_the_width_the_sidecar_records(tmp_path):
    path = write_vectors(tmp_path / "v.npy", ["a", "b"], np.ones((2, 4), dtype=np.float32))
    np.save(path, np.ones((1, 4), dtype=np.float32))
    with pytest.raises(UsageError, match=r"sidecar 2 rows x 4\): truncated or mixed files"):
        load_teacher(f"vectors:{path}")


def test_the_digest_memo_is_written_where_its_folders_do_not_exist_yet(tmp_path, monkeypatch):
    from hf_tlaser.encoders import identity as loading
    from hf_tlaser.encoders.identity import folder_fingerprint

    monkeypatch.setattr(loading, "RACY_SECONDS", 0)  # a file written just now is memoised too

    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    memo = tmp_path / "a" / "b" / "memo.json"
    assert folder_fingerprint(folder, memo=memo) == folder_fingerprint(folder, memo=None)
    assert memo.is_file()


def test_a_loaded_model_keeps_its_identity_and_batch_size(tlaser_folder):
    teacher = load_teacher(str(tlaser_folder), batch_size=7, device="cpu")
    assert teacher.identity == str(tlaser_folder.resolve()) and teacher.batch_size == 7


def test_an_unreadable_cache_record_is_said_and_written_again(tmp_path, caplog):
    first = TeacherCache(tmp_path, TextTeacher(), show_progress=False)
    first.get(["a"])
    (first.folder / "meta.json").write_text("{not json")
    with caplog.at_level(logging.WARNING, logger="hf_tlaser.teachers.cache"):
        again = TeacherCache(tmp_path, TextTeacher(), show_progress=False)
        again.get(["a"])
    assert f"teacher cache: {first.folder / 'meta.json'} is unreadable (" in caplog.text
    assert "); written again" in caplog.text
    assert json.loads((again.folder / "meta.json").read_text())["dim"] == 4


def test_the_cache_progress_bar_names_the_teacher(tmp_path, capsys):
    TeacherCache(tmp_path, TextTeacher(name="bar teacher"), show_progress=True).get(["one", "two"])
    assert "teacher bar teacher" in capsys.readouterr().err


def test_the_teacher_missing_training_languages_is_warned_of(caplog):
    from hf_tlaser.training.distill import warn_languages

    teacher = TextTeacher()
    teacher.spec, teacher.languages = "my-teacher", ["en", "de-DE"]
    with caplog.at_level(logging.WARNING):
        warn_languages(teacher, ["en", "de", "is"])
    said = [record.getMessage() for record in caplog.records]
    assert said == ["--teacher my-teacher: its model card does not list the training languages ['is']"]


def test_the_pivot_texts_of_a_corpus_are_its_distinct_non_empty_texts_of_those_languages():
    from types import SimpleNamespace

    from hf_tlaser.training.distill import corpus_pivot_texts

    columns = {"en": ["b", "a", None, "b", ""], "de": ["x", "y", "z", "w", "v"], "fr": ["f"] * 5}
    dataset = SimpleNamespace(languages=["en", "de", "fr"], dataset=columns)
    assert corpus_pivot_texts(dataset, ["en", "es", "fr"]) == ["a", "b", "f"]


def test_the_teacher_matrix_is_logged_and_late_texts_are_float32_and_counted(tmp_path, caplog):
    from hf_tlaser.training.distill import planned_pivot_texts, teacher_matrix

    class Float64Teacher(TextTeacher):
        def _encode(self, texts, batch_size, show_progress):
            return super()._encode(texts, batch_size, show_progress).astype(np.float64)

    teacher = Float64Teacher()
    teacher.spec = "t64"
    with caplog.at_level(logging.DEBUG):
        matrix, row_of = teacher_matrix(teacher, str(tmp_path), ["a", "bb"])
        collator = DistillCollator(None, None, matrix, row_of, [("de", "en")], ["en"], teacher)
        collator.add_missing(["ccc", "a"])
    said = [record.getMessage() for record in caplog.records]
    assert "teacher t64: the vectors of 2 pivot texts (cached ones are read, not computed)" in said
    assert "teacher t64: 1 pivot texts computed during training so far" in said
    assert collator.matrix.dtype == torch.float32 and collator.matrix.shape == (3, 4)
    assert planned_pivot_texts(None, None, 5, [("de", "en")], ["en"]) is None  # no sampler: every text may be read


def test_unk_rates_count_the_texts_pieces_only(caplog):
    from hf_tlaser.training.warm import unk_rates

    vocab = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3, "hello": 4}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    from tokenizers.processors import TemplateProcessing

    backend.post_processor = TemplateProcessing(single="<s> $A </s>", special_tokens=[("<s>", 0), ("</s>", 2)])
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, bos_token="<s>", eos_token="</s>", unk_token="<unk>", pad_token="<pad>"
    )
    assert unk_rates(tokenizer, {"xx": ["zzz"], "en": ["hello zzz"], "none": []}) == {"xx": 1.0, "en": 0.5}


def test_a_backbone_without_pooling_says_so():
    from pathlib import Path
    from types import SimpleNamespace

    from hf_tlaser.training.warm import Backbone

    config = SimpleNamespace(num_hidden_layers=2, hidden_size=8, model_type="bert")
    backbone = Backbone("x", Path("x"), "x", config, [0] * 10, pooling=None, prompt=None)
    assert backbone.describe() == "bert x (8 wide, 2 layers, 10 pieces, no pooling of its own, no prompt)"


def test_a_cache_of_another_dtype_is_named_in_the_warning(tmp_path, caplog):
    TeacherCache(tmp_path, TextTeacher(), show_progress=False).get(["a"])
    with caplog.at_level(logging.WARNING):
        other = TeacherCache(tmp_path, TextTeacher(), dtype="float32", show_progress=False)
        other.get(["a"])
    said = [record.getMessage() for record in caplog.records]
    expected = (
        f"teacher cache {other.folder} stores float16 vectors (asked: float32); give another cache folder for float32"
    )
    assert expected in said


def test_the_alignment_loss_of_a_batch_masks_the_other_translations_of_a_group():
    """Two pairs of one multi-way group (0-1, 0-2) and one of another: the group's other translation is neither a
    positive nor a negative of a pair (eq. 5 with ``groups``)."""
    from types import SimpleNamespace

    from hf_tlaser.models.common.losses import align_loss, distance_constrained_loss, unique_pairs

    torch.manual_seed(0)
    vectors = torch.randn(5, 8)
    pair_index, group_index = torch.tensor([[0, 1], [0, 2], [3, 4]]), torch.tensor([0, 0, 1])
    config = SimpleNamespace(distance_beta=0.0, align_loss_weight=1.0, align_scale=20.0, align_margin=0.0)
    out = SimpleNamespace(loss_mt=torch.tensor(0.0), num_tokens=1)
    distance_constrained_loss(out, vectors, pair_index, group_index, config)
    pairs, groups = unique_pairs(pair_index, group_index)
    p_a, p_b = vectors[pairs[:, 0]], vectors[pairs[:, 1]]
    expected = align_loss(p_a, p_b, 20.0, groups) / len(pairs)
    assert torch.allclose(out.loss_align, expected)
    assert not torch.allclose(out.loss_align, align_loss(p_a, p_b, 20.0) / len(pairs))


def test_the_teacher_vectors_go_to_the_cache_folder_asked_for(tmp_path):
    from types import SimpleNamespace

    from hf_tlaser.training.distill import Distillation

    teacher = TextTeacher()
    teacher.spec = "t"
    spec = SimpleNamespace(teacher="t", teacher_cache=str(tmp_path / "asked"), distill_weight=1.0)
    dataset = SimpleNamespace(languages=["de", "en"], dataset={"de": ["a", "b"], "en": ["one", "two"]})
    plan = SimpleNamespace(pairs=[("de", "en")], pivots=["en"])
    built = SimpleNamespace(data=plan, dataset=dataset, sampler=None, micro_batches=None, collator=None, tokenizer=None)
    collator = Distillation(teacher, spec).attach(built)
    assert sorted(collator.row_of) == ["one", "two"]
    assert [path.name for path in (tmp_path / "asked").iterdir()] == ["text_teacher-0123456789abcdef"]

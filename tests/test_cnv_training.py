"""cNV training: the Marian-style tokenizer, the NMT pair (stock ``MarianMTModel`` folders), the cNV collator's
batch contract, ``hf-tlaser train --model cnv`` end to end (frozen NMT weights, loss parts, resume reuses stage 1)
and its exit-2 errors."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from ddp_launch import launch_ddp
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, BertConfig, MarianMTModel, set_seed

from hf_tlaser.data.collator import CNVCollator, Seq2SeqCollator
from hf_tlaser.models.cnv import CNVModel
from hf_tlaser.tokenization import save_tokenizer, train_tokenizer
from hf_tlaser.training import cnv as cnv_training
from hf_tlaser.training.cli import main
from hf_tlaser.training.nmt_pair import (
    fairseq_init_,
    label_smoothed_nll,
    make_nmt_config,
    train_nmt_pair,
    translate,
)
from hf_tlaser.training.presets import NMTPreset, Recipe
from tests.tiny_models import NMT_TINY, check_ddp_ranks

CNV_TINY = ["shared_hidden_size=32", "num_negatives=3"]


@pytest.fixture(scope="module")
def en_de_texts(newstest_lines) -> list[str]:
    return newstest_lines["en"] + newstest_lines["de"]


@pytest.fixture(scope="module")
def marian_tokenizer(en_de_texts):
    return train_tokenizer(texts=en_de_texts, vocab_size=300, style="marian", show_progress=False)


@pytest.fixture(scope="module")
def nmt_pair(tmp_path_factory) -> tuple[Path, Path]:
    """en->de and de->en trained for 12 updates on newstest (tiny widths)."""
    nmt = NMTPreset(
        dict(NMT_TINY),
        Recipe(max_tokens=600, update_tokens=600, learning_rate=3e-3, warmup_updates=2, weight_decay=0.0),
        steps=12,
    )
    out = tmp_path_factory.mktemp("nmt")
    return train_nmt_pair(
        ("en", "de"),
        out,
        nmt,
        corpora=["wmt-newstest-multiway"],
        max_lines=300,
        vocab_size=300,
        logging_steps=1,
    )


def cnv_args(out: Path, *extra: str) -> list[str]:
    args = [
        "--model", "cnv", "--preset", "tiny", "--pairs", "en-de", "--corpora", "wmt-newstest-multiway",
        "--max-lines", "300", "--vocab-size", "300", "--output-dir", str(out), "--max-tokens", "600",
        "--update-tokens", "600", "--learning-rate", "3e-3", "--warmup-updates", "2", "--logging-steps", "1",
        "--save-steps", "1000", "--precision", "fp32", "--seed", "3",
    ]  # fmt: skip
    return args + [f"--set={item}" for item in CNV_TINY] + list(extra)


NMT_SET = [f"--set=nmt.{key}={value}" for key, value in NMT_TINY.items()]


def exit_2_line(capsys, rc: int) -> str:
    err = capsys.readouterr().err
    assert rc == 2, err
    assert "Traceback" not in err
    return [line for line in err.splitlines() if line.strip()][-1]


def test_marian_style_tokenizer_encodes_text_then_eos(marian_tokenizer, tmp_path):
    tok = marian_tokenizer
    assert tok.convert_ids_to_tokens([0, 1, 2, 3]) == ["<pad>", "<unk>", "</s>", "<0x00>"]
    assert "STR_TAG" not in tok.get_vocab() and tok.cls_token is None
    ids = tok("Die Prager Börse")["input_ids"]
    assert ids[-1] == tok.eos_token_id and tok.eos_token_id not in ids[:-1] and len(ids) > 2
    assert tok(text_target="Die Prager Börse")["input_ids"] == ids
    assert tok("")["input_ids"] == [tok.eos_token_id]
    save_tokenizer(tok, tmp_path)
    loaded = AutoTokenizer.from_pretrained(tmp_path)
    assert loaded("Die Prager Börse")["input_ids"] == ids
    assert loaded.decode(ids, skip_special_tokens=True) == "die prager börse"


def test_label_smoothed_loss_matches_torch():
    torch.manual_seed(0)
    logits, labels = torch.randn(2, 5, 11), torch.randint(0, 11, (2, 5))
    labels[1, 3:] = -100
    smoothed, nll, tokens = label_smoothed_nll(logits, labels, 0.1)
    flat = logits.flatten(0, 1), labels.flatten()
    assert tokens == 8
    torch.testing.assert_close(nll, F.cross_entropy(*flat, ignore_index=-100, reduction="sum"))
    expected = F.cross_entropy(*flat, ignore_index=-100, reduction="sum", label_smoothing=0.1)
    torch.testing.assert_close(smoothed, expected)


def test_fairseq_init_is_scale_aware(marian_tokenizer):
    torch.manual_seed(0)
    config = make_nmt_config(marian_tokenizer, **{**NMT_TINY, "d_model": 64})
    model = fairseq_init_(MarianMTModel(config))
    embedding = model.get_input_embeddings().weight
    assert embedding[config.pad_token_id].abs().sum() == 0
    assert embedding[3:].std().item() == pytest.approx(64**-0.5, rel=0.1)  # stock Marian: 0.02
    assert model.lm_head.weight.data_ptr() == embedding.data_ptr() and config.scale_embedding
    fc1 = model.model.encoder.layers[0].fc1.weight
    assert fc1.abs().max().item() == pytest.approx(math.sqrt(6 / (64 + 64)), rel=0.05)  # xavier-uniform bound


def read_trainer_losses(folder: Path, key: str = "loss_mt_per_token") -> dict[int, float]:
    """``{step: value}`` of ``key`` in a saved run's ``trainer_state.json``."""
    history = json.loads((folder / "trainer_state.json").read_text())["log_history"]
    return {entry["step"]: entry[key] for entry in history if key in entry}


def test_nmt_pair_trains_and_saves_hub_style_folders(nmt_pair):
    for folder, src, text in zip(nmt_pair, ("en", "de"), ("the house is small .", "das haus ist klein .")):
        assert folder.name == f"nmt-{src}-{'de' if src == 'en' else 'en'}"
        assert not list(folder.glob("checkpoint-*"))
        model = AutoModelForSeq2SeqLM.from_pretrained(folder)
        tok = AutoTokenizer.from_pretrained(folder)
        assert type(model) is MarianMTModel and model.config.decoder_start_token_id == tok.pad_token_id
        assert model.generation_config.bad_words_ids == [[tok.pad_token_id]]
        assert isinstance(translate(model, tok, text, max_length=8), str)
        losses = read_trainer_losses(folder)
        assert sorted(losses) == list(range(1, 13))
        first, last = sum(losses[s] for s in (1, 2)) / 2, sum(losses[s] for s in (11, 12)) / 2
        assert last < first - 0.3, (first, last)


def test_seq2seq_collator_gives_marian_targets(marian_tokenizer):
    batch = Seq2SeqCollator(marian_tokenizer)(
        [{"src_lang": "en", "tgt_lang": "de", "src": "a day", "tgt": "ein langer tag"}] * 2
    )
    target = marian_tokenizer(text_target="ein langer tag")["input_ids"]
    assert batch["labels"].tolist() == [target, target]
    assert batch["input_ids"][0].tolist() == marian_tokenizer("a day")["input_ids"]


def test_cnv_collator_tokenizes_each_side_with_its_models_tokenizer(en_de_texts):
    tok_ab = train_tokenizer(texts=en_de_texts, vocab_size=300, style="marian", show_progress=False)
    tok_ba = train_tokenizer(texts=en_de_texts, vocab_size=200, lowercase=False, style="marian", show_progress=False)
    items = [
        {"src_lang": "en", "tgt_lang": "de", "src": "The stock market fell", "tgt": "Die Börse fiel"},
        {"src_lang": "de", "tgt_lang": "en", "src": "Ein Tag", "tgt": "A day"},  # the other direction: same roles
    ]
    batch = CNVCollator(tok_ab, tok_ba, ["en", "de"])(items)
    assert set(batch) == {"input_ids_a", "attention_mask_a", "input_ids_b", "attention_mask_b", "labels"}
    en, de = ["The stock market fell", "A day"], ["Die Börse fiel", "Ein Tag"]

    def unpadded(ids, mask):
        return [row[: int(m.sum())].tolist() for row, m in zip(ids, mask)]

    assert unpadded(batch["input_ids_a"], batch["attention_mask_a"]) == tok_ab(en)["input_ids"]
    assert unpadded(batch["input_ids_b"], batch["attention_mask_b"]) == tok_ba(de)["input_ids"]
    labels = batch["labels"]
    assert labels.shape[0] == 4
    expected = tok_ab(text_target=de)["input_ids"] + tok_ba(text_target=en)["input_ids"]
    assert [row[row != -100].tolist() for row in labels] == expected
    assert all(row[row != -100][-1] == 2 for row in labels)  # every target ends with </s>
    with pytest.raises(ValueError, match="en-es"):
        CNVCollator(tok_ab, tok_ba, ["en", "de"])([{"src_lang": "en", "tgt_lang": "es", "src": "a", "tgt": "b"}])


def test_train_cnv_end_to_end_keeps_the_nmt_pair_frozen(tmp_path):
    out = tmp_path / "cnv"
    assert main(cnv_args(out, "--nmt-steps", "2", "--max-steps", "4", *NMT_SET)) == 0
    record = json.loads((out / "hf_tlaser_train.json").read_text())
    assert {name: entry["updates"] for name, entry in record["nmt"].items()} == {"nmt-en-de": 2, "nmt-de-en": 2}
    assert {"nmt-en-de", "nmt-de-en", "tokenizer_en", "tokenizer_de", "model.safetensors"} <= set(record["outputs"])
    history = json.loads((out / "trainer_state.json").read_text())["log_history"]
    logged = [entry for entry in history if "loss_mt_per_token" in entry]
    assert [entry["step"] for entry in logged] == [1, 2, 3, 4]
    for key in ("loss_mt_per_token", "loss_distance_per_token", "d_p", "d_n", "mean_cosine"):
        assert all(math.isfinite(entry[key]) for entry in logged), key

    model = CNVModel.from_pretrained(out)
    assert type(model.get_tokenizer("de")).__name__ and (out / "tokenizer_de" / "tokenizer.json").is_file()
    for lang, folder in (("en", "nmt-en-de"), ("de", "nmt-de-en")):
        before = AutoModelForSeq2SeqLM.from_pretrained(out / folder).state_dict()
        after = model.nmt[lang].state_dict()
        assert before.keys() == after.keys()
        for name, tensor in before.items():
            assert torch.equal(tensor, after[name]), (lang, name)
    set_seed(3)  # the run's seed: the shared layers start as they did there
    untrained = CNVModel.from_nmt_pair(out / "nmt-en-de", out / "nmt-de-en", ("en", "de"), **_cnv_kwargs())
    trained = dict(model.named_parameters())
    shared = {name: p for name, p in untrained.named_parameters() if not name.startswith("nmt_")}
    assert shared and all(p.requires_grad for p in shared.values())
    changed = [name for name, p in shared.items() if not torch.equal(p, trained[name])]
    assert "gru.weight_ih_l0" in changed and len(changed) >= len(shared) // 2, changed
    vectors = model.encode(["Das Haus ist klein.", "Ein Tag."], lang="de")
    assert vectors.shape == (2, model.config.embedding_size)


def _cnv_kwargs() -> dict:
    return {key: int(value) for key, value in (item.split("=") for item in CNV_TINY)}


def test_resume_reuses_a_finished_nmt_pair(tmp_path, monkeypatch):
    """A run killed after stage 1 continues with --resume auto: the NMT models are reused, not retrained."""
    out = tmp_path / "cnv"

    def killed(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(cnv_training.CNVModel, "from_nmt_pair", killed)
    with pytest.raises(KeyboardInterrupt):
        main(cnv_args(out, "--nmt-steps", "1", "--max-steps", "2", *NMT_SET))
    monkeypatch.undo()
    weights = (out / "nmt-en-de" / "model.safetensors").read_bytes()

    def retrained(*args, **kwargs):
        raise AssertionError("stage 1 trained again")

    monkeypatch.setattr(cnv_training, "train_nmt", retrained)
    assert main(cnv_args(out, "--nmt-steps", "1", "--max-steps", "2", "--resume", "auto", *NMT_SET)) == 0
    assert (out / "nmt-en-de" / "model.safetensors").read_bytes() == weights
    assert (out / "model.safetensors").is_file()


def test_cnv_trains_under_two_process_ddp(tmp_path, nmt_pair):
    """``accelerate launch`` with 2 CPU processes: each rank trains on its own micro-batches, the shared layers stay
    identical across ranks and the frozen NMT pair is unchanged."""
    out = tmp_path / "ddp"
    pair = ",".join(str(folder) for folder in nmt_pair)
    check_ddp_ranks(launch_ddp(out, cnv_args(out, "--nmt-pair", pair, "--max-steps", "3")))
    trained = CNVModel.from_pretrained(out)
    for lang, folder in zip(("en", "de"), nmt_pair):
        original = AutoModelForSeq2SeqLM.from_pretrained(folder).state_dict()
        assert all(torch.equal(original[k], v) for k, v in trained.nmt[lang].state_dict().items())


def test_existing_nmt_pair_trains_stage_2_only(tmp_path, nmt_pair, monkeypatch, capsys):
    monkeypatch.setattr(cnv_training, "train_nmt", lambda *a, **k: pytest.fail("stage 1 trained"))
    out = tmp_path / "cnv"
    pair = ",".join(str(folder) for folder in nmt_pair)
    assert main(cnv_args(out, "--nmt-pair", pair, "--max-steps", "2", "--set", "distance_beta=0")) == 0
    assert not (out / "nmt-en-de").exists()
    model = CNVModel.from_pretrained(out)
    assert model.config.distance_beta == 0.0  # NV
    assert main(cnv_args(out, "--nmt-pair", pair, "--max-steps", "2")) == 2  # the output-dir guard
    assert "already holds a run" in exit_2_line(capsys, 2)


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--pairs", "en-de,de-en"], "--model cnv takes one language pair"),
        (["--nmt-pair", "{tmp}/missing,{tmp}/missing2"], "missing: no such folder"),
        (["--nmt-pair", "{tmp}/tok,{tmp}/tok"], "no config.json there"),
        (["--nmt-pair", "{tmp}/bert,{tmp}/bert"], "a bert model, not a seq2seq translation model"),
        (["--nmt-pair", "only-one"], "expected A_TO_B,B_TO_A"),
        (["--nmt-steps", "0"], "--nmt-steps 0: must be at least 1"),
        (["--set", "nmt.no_such_key=1"], "unknown --set key 'no_such_key'"),
        (["--set", "languages=[en,fr]"], "set by --pairs and the NMT pair"),
        (
            ["--batching", "multiway"],
            "--batching multiway is an option of --model tlaser, ctlaser, laser1, laser6, claser6, not of --model cnv",
        ),
    ],
)
def test_cnv_usage_errors_exit_2_before_any_data(tmp_path, capsys, marian_tokenizer, extra, message):
    save_tokenizer(marian_tokenizer, tmp_path / "tok")
    BertConfig(vocab_size=8, hidden_size=8, num_hidden_layers=1, num_attention_heads=1).save_pretrained(
        tmp_path / "bert"
    )
    save_tokenizer(marian_tokenizer, tmp_path / "bert")
    extra = [item.replace("{tmp}", str(tmp_path)) for item in extra]
    rc = main(cnv_args(tmp_path / "out", *extra))
    line = exit_2_line(capsys, rc)
    assert line.startswith("hf-tlaser train: error: ") and message in line, line
    assert not (tmp_path / "out").exists()


def test_nmt_flags_belong_to_cnv(tmp_path, capsys):
    rc = main(["--model", "ctlaser", "--output-dir", str(tmp_path / "out"), "--nmt-steps", "3"])
    assert "--nmt-steps is an option of --model cnv" in exit_2_line(capsys, rc)

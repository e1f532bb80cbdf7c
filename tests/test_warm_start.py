"""``hf-tlaser train --init-from``: a tiny random XLM-R backbone built here (no downloads) as a Hugging Face folder
and as a sentence-transformers folder with a prompt; the prompt in the saved tokenizer, the loss against a hand
computation, the frozen warm-up, the restricted / tied / sampled decoder vocabulary, a training run with resume, the
saved folder in transformers, sentence-transformers and ``pipeline`` in a fresh process, and each bad input."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from transformers import AutoModel, PreTrainedTokenizerFast

from hf_tlaser.hub.model_card import render_model_card
from hf_tlaser.models.common.losses import sample_negatives
from hf_tlaser.models.ldt import LDTConfig, LDTForAlignment
from hf_tlaser.models.tlaser import TLaserConfig, TLaserForTranslation
from hf_tlaser.training.cli import main
from hf_tlaser.training.joint import target_vocabulary
from hf_tlaser.training.trainer import FreezeEncoderCallback
from hf_tlaser.training.warm import check_backbone, unk_rates, with_prompt
from tests.fresh_process import auto_model_vectors, fresh_vectors

DECODER = dict(decoder_attention_heads=2, decoder_ffn_dim=64, dropout=0.0)
TEXTS = ["Das ist ein Test.", "This is a test.", "Hello world, again!", "Kuka on tuo mies?"]


def warm_config(backbone, **kwargs) -> TLaserConfig:
    tok = backbone.tokenizer
    ids = dict(pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id, cls_token_id=tok.cls_token_id)
    ids.update(unk_token_id=tok.unk_token_id, decoder_start_token_id=tok.eos_token_id)
    return TLaserConfig(
        vocab_size=len(tok), hidden_size=32, backbone=backbone.config.to_dict(), languages=["en", "es"],
        max_position_embeddings=64, **{"distance_beta": 0.0, **DECODER, **ids, **kwargs},
    )  # fmt: skip


def toy_batch(tokenizer, n: int = 3) -> dict:
    src = tokenizer(TEXTS[:n], padding=True, return_tensors="pt")
    tgt = tokenizer(TEXTS[1 : n + 1], add_special_tokens=False)["input_ids"]
    labels = torch.full((n, max(map(len, tgt)) + 1), -100)
    for i, ids in enumerate(tgt):
        labels[i, : len(ids) + 1] = torch.tensor(ids + [tokenizer.eos_token_id])
    return dict(
        input_ids=src.input_ids, attention_mask=src.attention_mask, labels=labels, tgt_lang=torch.zeros(n).long()
    )


def test_prompt_is_in_the_saved_tokenizer_and_not_in_the_targets(st_dir, backbone_dir, tmp_path):
    backbone = check_backbone(str(st_dir), "ctlaser", None)
    assert backbone.prompt == "query: " and backbone.pooling == "mean"
    plain = check_backbone(str(backbone_dir), "ctlaser", None).tokenizer
    for text in TEXTS:
        assert backbone.tokenizer(text)["input_ids"] == plain("query: " + text)["input_ids"]
        assert (
            backbone.tokenizer(text, add_special_tokens=False)["input_ids"]
            == plain(text, add_special_tokens=False)["input_ids"]
        )
    backbone.tokenizer.save_pretrained(tmp_path)
    reloaded = PreTrainedTokenizerFast.from_pretrained(tmp_path)
    assert reloaded(TEXTS[0])["input_ids"] == plain("query: " + TEXTS[0])["input_ids"]
    assert with_prompt(plain, None)(TEXTS[0])["input_ids"] == plain(TEXTS[0])["input_ids"]


def test_loss_with_a_backbone_equals_the_hand_computation(backbone_dir):
    """cT-LASER's loss, eq. (7)-(10) with the alignment term: 0.5 l_mt + beta sum_i d_p(i) + lambda / N_s sum hinge,
    plus weight x the pairs' mean InfoNCE x the target tokens, all over the target tokens."""
    beta, alpha, negatives, align_weight, scale = 0.25, 0.02, 4, 0.5, 20.0  # alpha: some hinges active, some not
    backbone = check_backbone(str(backbone_dir), "tlaser", None)
    torch.manual_seed(1)
    config = warm_config(
        backbone, pooling="mean", label_smoothing=0.0, distance_beta=beta, distance_alpha=alpha,
        distance_negatives=negatives, align_loss_weight=align_weight, align_scale=scale,
    )  # fmt: skip
    model = TLaserForTranslation(config).eval()
    backbone.load_into(model.encoder)
    batch = toy_batch(backbone.tokenizer)
    targets = backbone.tokenizer(TEXTS[1:4], padding=True, return_tensors="pt")
    batch.update(tgt_input_ids=targets.input_ids, tgt_attention_mask=targets.attention_mask)
    torch.manual_seed(5)
    loss = model(**batch).loss
    torch.manual_seed(5)  # the forward's two draws of in-batch negatives, a -> b then b -> a
    neg_ab, neg_ba = sample_negatives(3, negatives), sample_negatives(3, negatives)

    pretrained = AutoModel.from_pretrained(backbone_dir).eval()

    def mean_vectors(ids, mask):
        hidden = pretrained(input_ids=ids, attention_mask=mask).last_hidden_state
        return (hidden * mask[..., None]).sum(1) / mask.sum(1, keepdim=True)

    with torch.no_grad():
        p_a = mean_vectors(batch["input_ids"], batch["attention_mask"])
        p_b = mean_vectors(targets.input_ids, targets.attention_mask)
        start = torch.full((3, 1), model.config.decoder_start_token_id)
        decoder_input = torch.cat([start, batch["labels"][:, :-1]], dim=1)
        decoder_input = decoder_input.masked_fill(decoder_input.eq(-100), model.config.pad_token_id)
        logits, _ = model.decoder_step(decoder_input, p_a, batch["tgt_lang"])
    l_mt = F.cross_entropy(logits.flatten(0, 1), batch["labels"].flatten(), ignore_index=-100, reduction="sum")
    tokens = batch["labels"].ne(-100).sum()
    v_norm = (p_a.mean(0).norm() + p_b.mean(0).norm()) / 2  # eq. (7)-(8): distances over the mean vectors' norm

    def d(x, y):
        return (x - y).norm() / (v_norm + 1e-6)

    d_p = [d(p_a[i], p_b[i]) for i in range(3)]
    hinge_ab = sum(F.relu(alpha - (d(p_a[i], p_b[neg_ab[k, i]]) - d_p[i])) for k in range(negatives) for i in range(3))
    hinge_ba = sum(F.relu(alpha - (d(p_b[i], p_a[neg_ba[k, i]]) - d_p[i])) for k in range(negatives) for i in range(3))
    hinge = hinge_ab + hinge_ba  # eq. (9), both directions
    distance = beta * sum(d_p) + beta / 2 / negatives * hinge  # eq. (10), lambda = beta / 2
    cosines = scale * F.normalize(p_a, dim=-1) @ F.normalize(p_b, dim=-1).T
    align = F.cross_entropy(cosines, torch.arange(3)) + F.cross_entropy(cosines.T, torch.arange(3))
    expected = (0.5 * l_mt + distance + align_weight * align * tokens) / tokens
    # every term weighs in the comparison: both hinge directions, some of their terms active and some not
    active = [alpha - (d(p_a[i], p_b[neg_ab[k, i]]) - d_p[i]) > 0 for k in range(negatives) for i in range(3)]
    assert min(hinge_ab, hinge_ba, abs(hinge_ab - hinge_ba), align) > 0.01 and any(active) and not all(active)
    assert torch.allclose(loss, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("tie", [False, True])
def test_no_gradient_reaches_a_frozen_encoder(backbone_dir, tie):
    backbone = check_backbone(str(backbone_dir), "ctlaser", None)
    config = warm_config(backbone, distance_beta=0.25, align_loss_weight=1.0, tie_decoder_to_encoder=tie)
    model = TLaserForTranslation(config)
    batch = toy_batch(backbone.tokenizer)
    batch["tgt_input_ids"], batch["tgt_attention_mask"] = batch["input_ids"].flip(0), batch["attention_mask"].flip(0)
    callback = FreezeEncoderCallback(2)
    for step, frozen in ((0, True), (1, True), (2, False)):
        model.zero_grad(set_to_none=True)
        state = type("State", (), {"global_step": step})()
        callback.on_step_begin(None, state, None, model=model)
        model(**batch).loss.backward()
        grads = {name: p.grad for name, p in model.encoder.named_parameters()}
        if frozen:  # tied: the decoder's token table is the backbone's, frozen with it
            assert [name for name, grad in grads.items() if grad is not None] == []
        else:
            assert [name for name, grad in grads.items() if grad is None or not grad.any()] == []
        assert model.decoder.layers[0].ffn.fc1.weight.grad is not None
    callback.freeze(model, True)
    callback.on_train_end(None, None, None, model=model)
    assert not model.encoder.frozen and all(p.requires_grad for p in model.parameters())


@pytest.mark.parametrize("tie", [False, True])
def test_restricted_decoder_vocabulary_maps_labels_and_generations(backbone_dir, tie):
    backbone = check_backbone(str(backbone_dir), "ctlaser", None)
    tok = backbone.tokenizer
    vocabulary = target_vocabulary(tok, TEXTS[1:3])
    assert vocabulary[: tok.unk_token_id + 1].tolist() == list(range(tok.unk_token_id + 1))  # specials keep ids
    assert tok.mask_token_id not in vocabulary.tolist()
    torch.manual_seed(0)
    config = warm_config(backbone, decoder_vocab_size=len(vocabulary), tie_decoder_to_encoder=tie)
    model = TLaserForTranslation(config, vocabulary).eval()
    assert model.lm_head is None if tie else model.lm_head.weight.shape[0] == len(vocabulary)
    batch = toy_batch(tok)
    rows = model.to_decoder_vocab(batch["labels"])
    kept = batch["labels"].ne(-100)
    assert torch.equal(model.from_decoder_vocab(rows[kept]), torch.where(
        torch.isin(batch["labels"][kept], vocabulary), batch["labels"][kept], tok.unk_token_id
    ))  # fmt: skip
    assert model(**batch).logits.shape[-1] == len(vocabulary)
    generated = model.generate(batch["input_ids"], batch["attention_mask"], tgt_lang="en", max_new_tokens=5)
    assert set(generated.flatten().tolist()) <= set(vocabulary.tolist())


@pytest.mark.parametrize("restricted", [False, True])
def test_sampled_softmax_keeps_each_label_score_and_equals_the_full_softmax_when_it_covers_it(backbone_dir, restricted):
    backbone = check_backbone(str(backbone_dir), "ctlaser", None)
    tok = backbone.tokenizer
    vocabulary = target_vocabulary(tok, TEXTS)
    torch.manual_seed(0)
    size = dict(decoder_vocab_size=len(vocabulary)) if restricted else {}
    draws = 2 if restricted else 7  # the batch's labels use 29 of the 34 restricted rows
    model = TLaserForTranslation(
        warm_config(backbone, sampled_softmax=draws, **size), vocabulary if restricted else None
    )
    model.train()
    batch = toy_batch(tok)
    with torch.no_grad():
        vectors = model.encode_sentences(batch["input_ids"], batch["attention_mask"])
        labels = model.to_decoder_vocab(batch["labels"])
        decoder_input = model.shift_right(labels)
        full = model.decode_logits(decoder_input, vectors, batch["tgt_lang"])
        sampled, renumbered = model.training_logits(decoder_input, vectors, batch["tgt_lang"], labels)
    kept = labels.ne(-100)
    assert full.shape[-1] == (len(vocabulary) if restricted else len(tok))
    assert len(labels[kept].unique()) <= sampled.shape[-1] <= len(labels[kept].unique()) + draws < full.shape[-1]
    assert torch.equal(renumbered.eq(-100), ~kept)
    # the sampled scores are a product with fewer output rows than the full softmax's: another CPU's kernel (AVX2
    # against AVX512) may round it differently in the last bit, so "the same score" is equal to float32 rounding
    same = dict(rtol=1e-5, atol=1e-6)
    own = sampled.gather(-1, renumbered.clamp(min=0)[..., None])[kept]  # each label's score, by value
    torch.testing.assert_close(own, full.gather(-1, labels.clamp(min=0)[..., None])[kept], **same)
    for column in sampled.flatten(0, 1).T:  # every scored row is a row of the full softmax
        assert torch.isclose(full.flatten(0, 1), column[:, None], **same).all(0).any()

    inputs = dict(sentence_embeddings=vectors, labels=batch["labels"], tgt_lang=batch["tgt_lang"])
    model.config.sampled_softmax = 100 * full.shape[-1]  # draws that miss a row: probability < 1e-40
    covered = model(**inputs)
    model.config.sampled_softmax = 0
    assert covered.logits.shape == full.shape and torch.allclose(covered.loss, model(**inputs).loss, rtol=1e-6)
    assert model.eval()(**batch).logits.shape[-1] == full.shape[-1]


def test_ldt_on_a_backbone_ties_its_generative_output_to_the_backbone(backbone_dir):
    backbone = check_backbone(str(backbone_dir), "ldt", None)
    tok = backbone.tokenizer
    config = LDTConfig(
        vocab_size=len(tok), hidden_size=32, num_attention_heads=2, backbone=backbone.config.to_dict(),
        pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id, cls_token_id=tok.cls_token_id,
        unk_token_id=tok.unk_token_id, mask_token_id=tok.mask_token_id, max_position_embeddings=64,
    )  # fmt: skip
    model = LDTForAlignment(config)
    assert model.get_input_embeddings() is model.encoder.backbone.get_input_embeddings()
    batch = toy_batch(tok)
    batch["tgt_input_ids"], batch["tgt_attention_mask"] = batch["input_ids"].flip(0), batch["attention_mask"].flip(0)
    out = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], labels=batch["labels"],
                tgt_input_ids=batch["tgt_input_ids"], tgt_attention_mask=batch["tgt_attention_mask"])  # fmt: skip
    out.loss.backward()
    assert model.get_input_embeddings().weight.grad is not None


def test_unknown_pieces_are_reported_per_language(backbone_dir, caplog):
    tok = check_backbone(str(backbone_dir), "ctlaser", None).tokenizer
    with caplog.at_level(logging.WARNING, logger="hf_tlaser.train"):
        rates = unk_rates(tok, {"en": ["This is a test."], "ja": ["これはテストです。"]})
    assert rates["en"] < 0.05 < rates["ja"]
    assert "ja pieces to <unk>" in caplog.text and "en pieces" not in caplog.text


def train_args(out: Path, spec: Path, *extra: str) -> list[str]:
    return [
        "--model", "ctlaser", "--preset", "tiny", "--corpora", "wmt-newstest-multiway", "--pairs", "de-en,en-es",
        "--max-lines", "80", "--output-dir", str(out), "--max-tokens", "400", "--update-tokens", "400",
        "--logging-steps", "1", "--precision", "fp32", "--init-from", str(spec), "--set=decoder_attention_heads=2",
        "--set=decoder_ffn_dim=64", *extra,
    ]  # fmt: skip


@pytest.fixture(scope="module")
def warm_run(st_dir, tmp_path_factory) -> Path:
    """A cT-LASER trained on the sentence-transformers backbone: 2 updates (the first frozen), resumed to 3."""
    out = tmp_path_factory.mktemp("warm") / "run"
    assert main(train_args(out, st_dir, "--max-steps", "2", "--save-steps", "1", "--freeze-encoder-steps", "1")) == 0
    assert main(train_args(out, st_dir, "--max-steps", "3", "--resume", "auto", "--freeze-encoder-steps", "1")) == 0
    return out


def test_training_run_records_the_backbone_and_resumes(warm_run):
    config = json.loads((warm_run / "config.json").read_text())
    assert config["backbone"]["model_type"] == "xlm-roberta" and config["pooling"] == "mean"
    assert config["hidden_size"] == 32 and 0 < config["decoder_vocab_size"] < config["vocab_size"]
    assert json.loads((warm_run / "trainer_state.json").read_text())["global_step"] == 3
    card = render_model_card(warm_run)
    assert "pretrained xlm-roberta encoder" in card and "mean of the final outputs" in card


def test_saved_folder_loads_everywhere_in_a_fresh_process(warm_run, tmp_path):
    from hf_tlaser.models.tlaser import TLaserModel

    out = warm_run
    tokenizer = PreTrainedTokenizerFast.from_pretrained(out)
    expected = TLaserModel.from_pretrained(out).encode(TEXTS, tokenizer)
    auto = auto_model_vectors(out, TEXTS, tmp_path)
    st = fresh_vectors(
        f"""
        import json
        from sentence_transformers import SentenceTransformer
        print(json.dumps(SentenceTransformer({str(out)!r}, trust_remote_code=True).encode({TEXTS!r}).tolist()))
        """,
        tmp_path,
    )
    pipe = fresh_vectors(
        f"""
        import json, numpy as np
        from transformers import pipeline
        extract = pipeline("feature-extraction", model={str(out)!r}, trust_remote_code=True)
        print(json.dumps([np.mean(extract(text)[0], axis=0).tolist() for text in {TEXTS!r}]))
        """,
        tmp_path,
    )
    for vectors in (auto, st, pipe):
        np.testing.assert_allclose(vectors, expected, atol=1e-4)
    decoded = fresh_vectors(
        f"""
        import json, torch
        from transformers import AutoModelForSeq2SeqLM
        model = AutoModelForSeq2SeqLM.from_pretrained({str(out)!r}, trust_remote_code=True)
        ids = model.generate(vectors=torch.tensor({expected.tolist()!r}), tgt_lang="en", max_new_tokens=4)
        print(json.dumps(ids.tolist()))
        """,
        tmp_path,
    )
    assert decoded.shape[0] == len(TEXTS) and set(decoded.flatten().astype(int)) <= set(range(len(tokenizer)))


def test_push_publishes_a_warm_start_folder(warm_run, tmp_path, monkeypatch):
    import os
    import subprocess
    import sys

    from hub_server import HubServer

    from hf_tlaser.hub import cli as push_cli

    monkeypatch.setenv("HF_TOKEN", "dummy-token")
    expected = PreTrainedTokenizerFast.from_pretrained(warm_run)
    with HubServer() as hub:
        assert push_cli.main([str(warm_run), "tester/warm", "--endpoint", hub.url]) == 0
        files = hub.repos["tester/warm"].commits[hub.repos["tester/warm"].branches["main"]]
        assert {"model.safetensors", "losses.py", "modules.json", "tokenizer.json"} <= set(files)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGING")) and k != "PYTHONPATH"}
        env.update(HF_ENDPOINT=hub.url, HF_HOME=str(tmp_path), HF_TOKEN="dummy-token")
        script = (
            "import sys, json\nsys.modules['hf_tlaser'] = None\n"
            "from sentence_transformers import SentenceTransformer\n"
            f"print('RESULT ' + json.dumps(SentenceTransformer('tester/warm', trust_remote_code=True)"
            f".encode({TEXTS!r}).tolist()))"
        )
        done = subprocess.run([sys.executable, "-c", script], env=env, cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    from hf_tlaser.models.tlaser import TLaserModel

    vectors = np.array(json.loads(done.stdout.split("RESULT ", 1)[1]))
    np.testing.assert_allclose(vectors, TLaserModel.from_pretrained(warm_run).encode(TEXTS, expected), atol=1e-4)


@pytest.mark.parametrize(
    "make, extra, expected",
    [
        (None, [], "no such folder"),
        ("gpt2", [], "decoder-only language model (gpt2)"),
        ("t5", [], "sequence-to-sequence model (t5)"),
        ("bert-decoder", [], "configured as a decoder (is_decoder=True)"),
        ("roberta-causal", [], "configured as a decoder (architecture RobertaForCausalLM)"),
        ("st", ["--tokenizer", "x"], "drop --tokenizer x"),
        ("st", ["--model", "laser6"], "--init-from is an option of --model tlaser, ctlaser, ldt"),
    ],
)
def test_bad_init_from(tmp_path, capsys, st_dir, make, extra, expected):
    from transformers import BertConfig, GPT2Config, RobertaConfig, T5Config

    spec = tmp_path / "missing"
    if make == "st":
        spec = st_dir
    elif make is not None:
        spec = tmp_path / make
        config = {
            "gpt2": lambda: GPT2Config(n_layer=1, n_embd=8, n_head=2),
            "t5": lambda: T5Config(num_layers=1, d_model=8),
            "bert-decoder": lambda: BertConfig(
                num_hidden_layers=1, hidden_size=8, num_attention_heads=2, is_decoder=True
            ),
            "roberta-causal": lambda: RobertaConfig(num_hidden_layers=1, architectures=["RobertaForCausalLM"]),
        }[make]()
        config.save_pretrained(spec)
    args = train_args(tmp_path / "out", spec, *extra)
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert expected in err and len(err.splitlines()) == 1
    assert not (tmp_path / "out").exists()


def test_a_tokenizer_without_a_fast_version_is_refused(tmp_path, capsys, backbone_dir, monkeypatch):
    from hf_tlaser.training import warm

    class Slow:
        is_fast = False

    monkeypatch.setattr(warm.AutoTokenizer, "from_pretrained", lambda *a, **k: Slow())
    assert main(train_args(tmp_path / "out", backbone_dir)) == 2
    assert "no fast version" in capsys.readouterr().err


def test_chrf_matches_a_hand_computation():
    from hf_tlaser.evaluation.chrf import chrf

    assert chrf(["abc"], ["abc"]) == pytest.approx(100.0)
    assert chrf(["xyz"], ["abc"]) == 0.0
    # "ab" vs "abc": unigrams P 2/2 R 2/3, bigrams P 1/1 R 1/2; trigrams only in the reference: orders 1-2 count
    precision, recall = (1 + 1) / 2, (2 / 3 + 1 / 2) / 2
    assert chrf(["a b"], ["abc"]) == pytest.approx(100 * 5 * precision * recall / (4 * precision + recall))


def test_warm_start_recipe_defaults_and_flags():
    from hf_tlaser.training.presets import WARM_ENCODER_LR, WARM_FREEZE_UPDATES, WARM_RECIPE, get_preset
    from hf_tlaser.training.resolve import decide
    from hf_tlaser.training.spec import RunSpec

    def schedule(resolved) -> tuple:
        return resolved.freeze_encoder_steps, resolved.encoder_lr

    preset = get_preset("ctlaser", "tiny")
    scratch = decide(RunSpec(output_dir="x"))
    assert scratch.recipe == preset.recipe and schedule(scratch) == (0, None)
    assert (scratch.pooling, scratch.decoder_vocab) == (None, "full")
    warm = decide(RunSpec(output_dir="x", init_from="e5"))
    assert all(getattr(warm.recipe, key) == value for key, value in WARM_RECIPE.items())
    assert schedule(warm) == (WARM_FREEZE_UPDATES, WARM_ENCODER_LR)
    assert (warm.pooling, warm.decoder_vocab) == ("backbone", "targets")
    mine = decide(RunSpec(output_dir="x", init_from="e5", max_tokens=2000, freeze_encoder_steps=0, encoder_lr=1e-4))
    assert mine.recipe.max_tokens == 2000 and schedule(mine) == (0, 1e-4)


def test_pooling_backbone_needs_init_from(tmp_path, capsys):
    args = ["--model", "ctlaser", "--output-dir", str(tmp_path / "out"), "--pooling", "backbone"]
    assert main(args) == 2
    assert "--pooling backbone: only with --init-from" in capsys.readouterr().err

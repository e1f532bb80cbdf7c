"""LDT encoder and training model with tiny configs: paper defaults, mean pooling, the forward's losses against the
loss functions, masking, ablation switches, degenerate batches, init, saving, fresh-process remote code and
sentence-transformers."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from transformers import AutoModel

from hf_tlaser import LDTConfig, LDTForAlignment, LDTModel, save_tokenizer
from hf_tlaser.models.ldt import (
    alignment_loss,
    similarity_loss,
    smlm_loss,
    ugt_labels,
    xmlm_loss,
    xtr_labels,
)
from tests.fresh_process import auto_model_vectors
from tests.tiny_models import PAD, SOURCES, STR_TAG, TARGETS, TINY_CONFIG, encoder_batch, pair_batch

TEXTS = ["Die Prager Börse stürzt.", "", "El parlamento europeo aprobó la ley."]


def tiny_config(**overrides) -> LDTConfig:
    values = dict(hidden_size=32, num_attention_heads=4, intermediate_size=64, attention_dropout=0.0)
    return LDTConfig(**{**TINY_CONFIG, **values, **overrides})


def test_paper_defaults_and_parameter_count():
    cfg = LDTConfig()
    assert (cfg.num_hidden_layers, cfg.num_attention_heads, cfg.hidden_size, cfg.intermediate_size) == (2, 8, 512, 1024)
    assert (cfg.dropout, cfg.generative_task, cfg.vocab_size) == (0.1, "ugt", 50000)
    assert (cfg.generative_loss_weight, cfg.align_loss_weight, cfg.sim_loss_weight) == (1.0, 2.0, 2.0)  # eq. (7)
    assert cfg.languages == ["de", "en", "es", "fr", "it"] and cfg.masking_token_id == cfg.unk_token_id
    with torch.device("meta"):
        params = sum(p.numel() for p in LDTForAlignment(cfg).parameters())
    assert abs(params / 1e6 - 30) < 0.5, params  # Table 1: 30M


@pytest.mark.parametrize(
    "kwargs, field",
    [
        (dict(hidden_size=30, num_attention_heads=4), "hidden_size"),
        (dict(generative_task="mass"), "generative_task"),
        (dict(mlm_probability=0.0), "mlm_probability"),
        (dict(generative_loss_weight=0.0, align_loss_weight=0.0, sim_loss_weight=0.0), "loss weights"),
        (dict(align_loss_weight=-1.0), "loss weights"),
        (dict(languages=["en", "en"]), "languages"),
    ],
)
def test_broken_configs_raise(kwargs, field):
    with pytest.raises(ValueError, match=field):
        LDTConfig(**kwargs)


def test_mean_pooling_ignores_padding():
    torch.manual_seed(0)
    model = LDTModel(tiny_config()).eval()
    alone_ids, alone_mask = encoder_batch([[10, 11]])
    ids, mask = encoder_batch([[10, 11], [12, 13, 14, 15, 16, 17]])
    garbage = ids.clone()
    garbage[0, alone_ids.shape[1] :] = 50  # pad positions hold other tokens: the mask alone must decide
    with torch.no_grad():
        alone, batched, with_garbage = model(alone_ids, alone_mask), model(ids, mask), model(garbage, mask)
    assert batched.pooler_output.shape == (2, 32) and batched.last_hidden_state.shape == (2, ids.shape[1], 32)
    torch.testing.assert_close(batched.pooler_output[0], alone.pooler_output[0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(with_garbage.pooler_output, batched.pooler_output)
    # the vector is the mean over the non-pad positions, STR_TAG and </s> included
    torch.testing.assert_close(alone.pooler_output[0], alone.last_hidden_state[0].mean(0))
    assert not torch.allclose(batched.pooler_output[0], batched.last_hidden_state[0].mean(0))


def test_forward_matches_the_loss_functions():
    torch.manual_seed(0)
    model = LDTForAlignment(tiny_config())
    batch = pair_batch()
    masked_a = torch.zeros_like(batch["input_ids"], dtype=torch.bool)
    masked_b = torch.zeros_like(batch["tgt_input_ids"], dtype=torch.bool)
    masked_a[0, 2] = True  # token 11 of the first source
    masked_b[2, 1] = True  # token 36 of the third target; the second pair has no masked token
    out = model(**batch, masked_positions=masked_a, tgt_masked_positions=masked_b)

    # the masked inputs are what the encoder saw
    mask_id = model.config.masking_token_id
    u = model.encoder(batch["input_ids"].masked_fill(masked_a, mask_id), batch["attention_mask"]).pooler_output
    v = model.encoder(batch["tgt_input_ids"].masked_fill(masked_b, mask_id), batch["tgt_attention_mask"]).pooler_output
    torch.testing.assert_close(out.sentence_embedding, u, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out.tgt_sentence_embedding, v, atol=1e-5, rtol=1e-5)

    log_p_a, log_p_b = model.vocabulary_log_probs(u), model.vocabulary_log_probs(v)
    text_a, text_b = (batch["input_ids"] > STR_TAG), (batch["tgt_input_ids"] > STR_TAG)
    q_a = xtr_labels(batch["tgt_input_ids"], text_b, 100)  # the source side reconstructs the target's tokens
    q_b = xtr_labels(batch["input_ids"], text_a, 100)
    target_a, target_b = torch.tensor([11, -100, -100]), torch.tensor([-100, -100, 36])
    ugt = xmlm_loss(log_p_a, log_p_b, ugt_labels(q_a, target_a), ugt_labels(q_b, target_b))
    torch.testing.assert_close(out.loss_generative, ugt, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out.loss_xtr, xmlm_loss(log_p_a, log_p_b, q_a, q_b), atol=1e-5, rtol=1e-5)
    lp_masked = torch.stack([log_p_a[0], log_p_a[1], log_p_b[2]])
    lp_translation = torch.stack([log_p_b[0], log_p_b[1], log_p_a[2]])
    expected_smlm = smlm_loss(lp_masked, lp_translation, torch.tensor([11, -100, 36]))
    torch.testing.assert_close(out.loss_smlm, expected_smlm, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out.loss_align, alignment_loss(u, v), atol=1e-4, rtol=1e-5)
    torch.testing.assert_close(out.loss_sim, similarity_loss(u, v), atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(out.loss, ugt + 2 * out.loss_align + 2 * out.loss_sim, atol=1e-4, rtol=1e-5)  # eq. (7)

    # the Trainer's normaliser: this batch's share of the update's target tokens (labels = target tokens + </s>)
    assert out.num_tokens.item() == 4 + 1 + 2 + 1 + 3 + 1
    labels = torch.full((3, 5), -100)
    labels[:, :2] = 7
    masks = dict(masked_positions=masked_a, tgt_masked_positions=masked_b)
    scaled = model(**batch, **masks, labels=labels, num_items_in_batch=24)
    assert scaled.num_tokens.item() == 6
    torch.testing.assert_close(scaled.loss, out.loss * 6 / 24)


def test_masking_is_drawn_in_training_only():
    torch.manual_seed(0)
    model = LDTForAlignment(tiny_config())
    batch = pair_batch()
    model.eval()
    out = model(**batch)  # no mask: UGT labels are eq. (3)'s, so the generative loss is XTR
    assert out.loss_generative.item() == pytest.approx(out.loss_xtr.item(), rel=1e-6)
    assert out.loss_smlm.item() == 0.0
    model.train()
    outs = [model(**batch) for _ in range(4)]
    assert all(o.loss_smlm > 0 and o.loss_generative.item() != pytest.approx(o.loss_xtr.item()) for o in outs)
    assert len({round(o.loss_smlm.item(), 5) for o in outs}) > 1  # a new draw each forward


@pytest.mark.parametrize(
    "task, present",
    [
        ("ugt", {"loss_smlm", "loss_xtr"}),
        ("xtr", {"loss_xtr"}),
        ("smlm", {"loss_smlm"}),
        ("mlm", {"loss_mlm"}),
        ("mlm_xtr", {"loss_mlm", "loss_xtr"}),
    ],
)
def test_generative_task_switch(task, present):
    """Table 6: each generative task computes its own parts, and its term of eq. (7) is the right one."""
    torch.manual_seed(0)
    model = LDTForAlignment(tiny_config(generative_task=task, mlm_probability=0.5, align_loss_weight=0.0))
    out = model.train()(**pair_batch())
    parts = {name for name in ("loss_smlm", "loss_xtr", "loss_mlm") if getattr(out, name) is not None}
    assert parts == present
    expected = {"xtr": out.loss_xtr, "smlm": out.loss_smlm, "mlm": out.loss_mlm}.get(task)
    if task == "mlm_xtr":
        expected = out.loss_mlm + out.loss_xtr
    if expected is not None:
        torch.testing.assert_close(out.loss_generative, expected)
    torch.testing.assert_close(out.loss, out.loss_generative + 2 * out.loss_sim)
    out.loss.backward()
    assert model.encoder.embed_tokens.weight.grad.abs().sum() > 0


@pytest.mark.parametrize(
    "weights, present",
    [((1.0, 0.0, 0.0), set()), ((1.0, 2.0, 0.0), {"loss_align"}), ((0.0, 2.0, 2.0), {"loss_align", "loss_sim"})],
)
def test_contrastive_switches(weights, present):
    """Table 7: "UGT", "+ align", and the contrastive losses alone."""
    torch.manual_seed(0)
    cfg = tiny_config(generative_loss_weight=weights[0], align_loss_weight=weights[1], sim_loss_weight=weights[2])
    out = LDTForAlignment(cfg)(**pair_batch())
    assert {name for name in ("loss_align", "loss_sim") if getattr(out, name) is not None} == present
    assert (out.loss_generative is None) == (weights[0] == 0)
    parts = [w * p for w, p in zip(weights, (out.loss_generative, out.loss_align, out.loss_sim)) if p is not None]
    torch.testing.assert_close(out.loss, sum(parts))


def test_degenerate_batches():
    torch.manual_seed(0)
    model = LDTForAlignment(tiny_config()).train()
    one = model(**pair_batch(SOURCES[:1], TARGETS[:1]))  # a batch of one pair: no negative
    assert one.loss_align.item() == 0.0 and one.loss_sim.item() == 0.0 and torch.isfinite(one.loss)
    one.loss.backward()
    same = model(**pair_batch(SOURCES, SOURCES))  # every pair identical on both sides
    assert torch.isfinite(same.loss) and same.loss_align > 0
    model.eval()
    same = model(**pair_batch(SOURCES, SOURCES))
    assert same.loss_sim.item() == 0.0  # identical vectors: identical similarity rows
    model.train()
    # an empty sentence (STR_TAG </s>) has no maskable token: its translation takes the mask; an empty pair none
    out = model(**pair_batch([[], [], [10]], [[20, 21], [], [22]]))
    assert torch.isfinite(out.loss)
    # a sentence whose only text token is masked
    batch = pair_batch([[10]], [[20]])
    masked = torch.tensor([[False, True, False]])
    out = model(**batch, masked_positions=masked)
    assert torch.isfinite(out.loss) and out.loss_smlm > 0


def test_bad_masks_and_batches():
    model = LDTForAlignment(tiny_config())
    batch = pair_batch()
    two = torch.zeros_like(batch["input_ids"], dtype=torch.bool)
    two[0, 1] = two[0, 2] = True
    with pytest.raises(ValueError, match="at most one token per pair"):
        model(**batch, masked_positions=two)
    LDTForAlignment(tiny_config(generative_task="mlm"))(**batch, masked_positions=two)  # MLM masks many
    tag = torch.zeros_like(batch["input_ids"], dtype=torch.bool)
    tag[0, 0] = True
    with pytest.raises(ValueError, match="only text tokens"):
        model(**batch, masked_positions=tag)
    with pytest.raises(ValueError, match="multi-way"):
        model(**batch, pair_index=torch.tensor([[0, 1]]))
    with pytest.raises(ValueError, match="3 sentences in input_ids but 2"):
        model(**{**batch, "tgt_input_ids": batch["tgt_input_ids"][:2]})
    # the collator's other keys are accepted and ignored; without targets the forward gives the vectors only
    out = model(**batch, tgt_lang=torch.tensor([1, 1, 1]), group_index=torch.arange(3), src_lang=torch.zeros(3))
    assert torch.isfinite(out.loss)
    alone = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
    assert alone.loss is None and alone.sentence_embedding.shape == (3, 32)


@torch.no_grad()
def test_init_is_scale_aware():
    torch.manual_seed(0)
    cfg = tiny_config(vocab_size=4000, hidden_size=192, intermediate_size=384)
    model = LDTForAlignment(cfg)
    d, ffn = 192, 384
    layer = model.encoder.layers[0]
    observed = {
        "embed": model.encoder.embed_tokens.weight[1:].std().item(),
        "qkv": layer.self_attn.qkv.weight.std().item(),
        "fc1": layer.fc1.weight.std().item(),
    }
    # embeddings N(0, d^-0.5); xavier-uniform std sqrt(2 / (fan_in + fan_out)): the fused q/k/v at fairseq's
    # per-projection gain 1/sqrt(2)
    expected = {"embed": d**-0.5, "qkv": 2**-0.5 * math.sqrt(2 / (2 * d)), "fc1": math.sqrt(2 / (d + ffn))}
    for name, value in observed.items():
        assert value == pytest.approx(expected[name], rel=0.05), name
    assert model.encoder.embed_tokens.weight[PAD].abs().max() == 0
    assert model.head.bias.abs().max() == 0 and layer.fc1.bias.abs().max() == 0


def test_save_load_round_trip_and_auto_model(tmp_path):
    torch.manual_seed(0)
    model = LDTForAlignment(tiny_config()).eval()
    model.save_pretrained(tmp_path)
    names = {p.name for p in tmp_path.iterdir()}
    assert {"model.safetensors", "modeling_ldt.py", "configuration_ldt.py", "backbone.py", "positions.py"} <= names
    assert "pytorch_model.bin" not in names
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["auto_map"]["AutoModel"] == "modeling_ldt.LDTModel" and config["model_type"] == "ldt"
    assert json.loads((tmp_path / "1_Pooling" / "config.json").read_text())["pooling_mode_mean_tokens"]
    loaded = LDTForAlignment.from_pretrained(tmp_path).eval()
    assert loaded.state_dict().keys() == model.state_dict().keys()
    for name, tensor in loaded.state_dict().items():
        assert torch.equal(tensor, model.state_dict()[name]), name
    torch.testing.assert_close(loaded.encoder.embed_positions.weight, model.encoder.embed_positions.weight)
    encoder = AutoModel.from_pretrained(tmp_path).eval()
    assert isinstance(encoder, LDTModel)
    ids, mask = encoder_batch(SOURCES)
    assert torch.equal(encoder(ids, mask).pooler_output, model.encoder(ids, mask).pooler_output)


@pytest.fixture(scope="module")
def ldt_dir(tmp_path_factory, tokenizer):
    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("ldt") / "model"
    LDTForAlignment(tiny_config(vocab_size=len(tokenizer), max_position_embeddings=128)).save_pretrained(folder)
    save_tokenizer(tokenizer, folder)
    return folder


def test_fresh_process_trust_remote_code(ldt_dir, tokenizer, tmp_path):
    expected = AutoModel.from_pretrained(ldt_dir).encode(TEXTS, tokenizer)
    check = 'assert type(model).__name__ == "LDTModel" and "hf_tlaser" not in type(model).__module__, type(model)'
    got = auto_model_vectors(ldt_dir, TEXTS, tmp_path, route="encode", check=check)
    np.testing.assert_allclose(got, expected, atol=1e-6)


def test_sentence_transformers_matches_encode(ldt_dir, tokenizer):
    from sentence_transformers import SentenceTransformer

    expected = AutoModel.from_pretrained(ldt_dir).encode(TEXTS, tokenizer)
    got = SentenceTransformer(str(ldt_dir), trust_remote_code=True, device="cpu").encode(TEXTS)
    np.testing.assert_allclose(got, expected, atol=1e-5)

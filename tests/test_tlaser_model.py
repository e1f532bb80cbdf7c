"""T-LASER encoder/decoder: paper defaults, padding invariance, the pooled-only fast path, gradients, saving,
fresh-process remote-code loading, decoding from an embedding, and bad input."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from transformers import AutoConfig, AutoModel

from hf_tlaser import TLaserConfig, TLaserForTranslation, TLaserModel, save_tokenizer
from tests.fresh_process import auto_model_vectors


def batch(tokenizer, texts):
    enc = tokenizer(texts, padding=True, return_tensors="pt")
    return enc["input_ids"], enc["attention_mask"]


def labels_for(tokenizer, texts):
    rows = [tokenizer(t, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id] for t in texts]
    width = max(map(len, rows))
    return torch.tensor([r + [-100] * (width - len(r)) for r in rows])


def parallel_forward(model, tokenizer):
    """Forward on three de->en pairs with the targets encoded too; returns the output and both id batches."""
    src, tgt = ["das ist gut", "die börse fällt", "ein neuer tag"], ["this is good", "stocks fall", "a new day"]
    ids, mask = batch(tokenizer, src)
    tgt_ids, tgt_mask = batch(tokenizer, tgt)
    labels = labels_for(tokenizer, tgt)
    out = model(ids, mask, labels=labels, tgt_lang="en", tgt_input_ids=tgt_ids, tgt_attention_mask=tgt_mask)
    return out, ids, tgt_ids


def test_paper_defaults_and_parameter_count():
    cfg = TLaserConfig()
    assert (cfg.vocab_size, cfg.hidden_size, cfg.num_hidden_layers, cfg.num_attention_heads) == (50000, 1024, 6, 16)
    assert (cfg.intermediate_size, cfg.dropout, cfg.decoder_layers, cfg.lang_embed_dim) == (4096, 0.3, 1, 32)
    assert cfg.languages == ["de", "en", "es", "fr", "it"] and cfg.decoder_lang_mode == "memory"
    assert (cfg.distance_beta, cfg.distance_hinge_weight, cfg.distance_alpha, cfg.distance_negatives) == (
        0.25,
        0.125,
        0.5,
        20,
    )
    assert cfg.max_position_embeddings >= 2048
    with torch.device("meta"):
        model = TLaserForTranslation(cfg)
    params = sum(p.numel() for p in model.parameters())
    assert abs(params / 1e6 - 246) < 2.5, params  # Table 1: 246M


@pytest.mark.parametrize(
    "kwargs, field",
    [
        (dict(hidden_size=30, num_attention_heads=4), "hidden_size"),
        (dict(decoder_lang_mode="prefix"), "decoder_lang_mode"),
        (dict(distance="cosine"), "distance"),
        (dict(languages=["en", "en"]), "languages"),
        (dict(distance_beta=-0.5), "distance_beta=-0.5 must be >= 0"),
        (dict(align_loss_weight=-1.0), "align_loss_weight=-1.0 must be >= 0"),
        (dict(distance_alpha=-1.0), "distance_alpha=-1.0 must be >= 0"),
        (dict(distance_lambda=-1.0), "distance_lambda=-1.0 must be >= 0 or None"),
        (dict(label_smoothing=1.0), r"label_smoothing=1.0 must be in \[0, 1\)"),
        (dict(distance_negatives=0), "distance_negatives=0 must be a positive integer"),
    ],
)
def test_broken_configs_raise(kwargs, field):
    with pytest.raises(ValueError, match=field):
        TLaserConfig(**kwargs)


def test_auto_classes_registered(tiny_tlaser_kwargs):
    cfg = TLaserConfig(**tiny_tlaser_kwargs)
    assert isinstance(AutoModel.from_config(cfg), TLaserModel)
    assert AutoConfig.for_model("tlaser").__class__ is TLaserConfig


def test_padding_invariance_and_pooled_fast_path(tokenizer, tiny_tlaser_kwargs):
    torch.manual_seed(0)
    model = TLaserModel(TLaserConfig(**tiny_tlaser_kwargs)).eval()
    short = "the european parliament"
    alone_ids, alone_mask = batch(tokenizer, [short])
    ids, mask = batch(tokenizer, [short, "a much longer sentence about the prague stock exchange and its losses"])
    assert ids.shape[1] > alone_ids.shape[1]
    alone = model(alone_ids, alone_mask).pooler_output
    padded = model(ids, mask)
    torch.testing.assert_close(padded.pooler_output[0], alone[0], atol=1e-5, rtol=1e-5)
    fast = model(ids, mask, pooled_only=True)
    assert fast.last_hidden_state.shape[1] == 1
    torch.testing.assert_close(fast.pooler_output, padded.pooler_output, atol=1e-5, rtol=1e-5)
    # the embedding is the final-LayerNorm output at the STR_TAG position
    assert ids[0, 0].item() == tokenizer.cls_token_id
    torch.testing.assert_close(padded.last_hidden_state[:, 0], padded.pooler_output)


def test_gradients_reach_str_tag_and_both_loss_sides(tokenizer, tiny_tlaser_kwargs):
    torch.manual_seed(0)
    model = TLaserForTranslation(TLaserConfig(**tiny_tlaser_kwargs, distance_beta=0.25, distance_negatives=3))
    out, ids, tgt_ids = parallel_forward(model, tokenizer)
    assert torch.isfinite(out.loss) and out.loss_mt > 0 and out.loss_distance is not None
    assert out.d_p.ndim == 0 and out.hinge.ndim == 0 and out.v_norm > 0
    torch.testing.assert_close(out.loss, (0.5 * out.loss_mt + out.loss_distance) / out.num_tokens)
    str_tag = tokenizer.cls_token_id
    for part in (out.loss_mt, out.loss_distance):
        model.zero_grad()
        part.backward(retain_graph=True)
        grad = model.encoder.embed_tokens.weight.grad
        assert grad is not None and grad[str_tag].abs().sum() > 0
    # target-side tokens are encoded only for the distance loss, so only it sends them gradient
    model.zero_grad()
    out.loss_distance.backward(retain_graph=True)
    tgt_only = set(tgt_ids.flatten().tolist()) - set(ids.flatten().tolist())
    assert any(model.encoder.embed_tokens.weight.grad[t].abs().sum() > 0 for t in tgt_only)
    assert model.lm_head.weight.grad is None or model.lm_head.weight.grad.abs().sum() == 0


def test_input_lang_mode_builds_and_runs(tokenizer, tiny_tlaser_kwargs):
    model = TLaserForTranslation(TLaserConfig(**tiny_tlaser_kwargs, decoder_lang_mode="input"))
    assert model.decoder.layers[0].encoder_attn.k_proj.in_features == tiny_tlaser_kwargs["hidden_size"]
    memory = TLaserForTranslation(TLaserConfig(**tiny_tlaser_kwargs))
    assert memory.decoder.layers[0].encoder_attn.k_proj.in_features == tiny_tlaser_kwargs["hidden_size"] + 32
    ids, mask = batch(tokenizer, ["hallo welt"])
    out = model(ids, mask, labels=labels_for(tokenizer, ["hello world"]), tgt_lang=["es"])
    assert torch.isfinite(out.loss)


def test_bad_input(tokenizer, tiny_tlaser_kwargs):
    model = TLaserForTranslation(TLaserConfig(**tiny_tlaser_kwargs))
    ids, mask = batch(tokenizer, ["hallo welt"])
    with pytest.raises(ValueError, match=r"unknown tgt_lang \['xx'\].*'de', 'en', 'es', 'fr', 'it'"):
        model(ids, mask, labels=labels_for(tokenizer, ["hello"]), tgt_lang="xx")
    long_text = " ".join(["parliament"] * 200)
    with pytest.raises(ValueError, match="max_position_embeddings=128"):
        model.encoder.encode([long_text], tokenizer)
    truncated = model.encoder.encode([long_text], tokenizer, truncation=True)
    assert truncated.shape == (1, 32)
    empty = model.encoder.encode([""], tokenizer)
    str_tag_eos = model.encoder(torch.tensor([[tokenizer.cls_token_id, tokenizer.eos_token_id]])).pooler_output
    # encode's last layer computes position 0 only (pooled_only), this forward every position: other matmul shapes,
    # so fp32 rounding apart (final-LayerNorm outputs of order 1); the tolerance of the fast-path test above
    np.testing.assert_allclose(empty[0], str_tag_eos[0].detach().numpy(), atol=1e-5)


def test_save_load_round_trip_and_auto_model(tmp_path, tokenizer, tiny_tlaser_kwargs):
    torch.manual_seed(0)
    model = TLaserForTranslation(TLaserConfig(**tiny_tlaser_kwargs)).eval()
    model.save_pretrained(tmp_path)
    assert (tmp_path / "model.safetensors").exists() and not (tmp_path / "pytorch_model.bin").exists()
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["auto_map"]["AutoModel"] == "modeling_tlaser.TLaserModel"
    assert {"modeling_tlaser.py", "configuration_tlaser.py", "losses.py", "translation.py", "remote_code.py"} <= {
        p.name for p in tmp_path.iterdir()
    }
    loaded = TLaserForTranslation.from_pretrained(tmp_path).eval()
    for (name, a), (_, b) in zip(model.state_dict().items(), loaded.state_dict().items()):
        assert torch.equal(a, b), name
    torch.testing.assert_close(loaded.decoder.embed_positions.weight, model.decoder.embed_positions.weight)
    ids, mask = batch(tokenizer, ["die börse", "el parlamento europeo"])
    encoder = AutoModel.from_pretrained(tmp_path).eval()
    assert isinstance(encoder, TLaserModel)
    assert torch.equal(encoder(ids, mask).pooler_output, model.encoder(ids, mask).pooler_output)


@pytest.mark.parametrize("distance_beta", [0.0, 0.25], ids=["tlaser", "ctlaser"])
def test_fresh_process_trust_remote_code(tmp_path, tokenizer, tiny_tlaser_kwargs, distance_beta):
    """T-LASER and cT-LASER (the same classes, with the distance constraint on) load and embed without hf_tlaser."""
    torch.manual_seed(0)
    model = TLaserForTranslation(TLaserConfig(**tiny_tlaser_kwargs, distance_beta=distance_beta)).eval()
    folder = tmp_path / "ckpt"
    model.save_pretrained(folder)
    save_tokenizer(tokenizer, folder)
    texts = ["Die Prager Börse stürzt.", "", "El parlamento europeo aprobó la ley."]
    expected = model.encoder.encode(texts, tokenizer)
    check = 'assert type(model).__name__ == "TLaserModel" and "hf_tlaser" not in type(model).__module__, type(model)'
    got = auto_model_vectors(folder, texts, tmp_path, route="encode", check=check)
    np.testing.assert_allclose(got, expected, atol=1e-6)


def test_overfit_and_decode_from_embedding(tokenizer, tiny_tlaser_kwargs):
    torch.manual_seed(0)
    kwargs = {**tiny_tlaser_kwargs, "hidden_size": 64, "intermediate_size": 128, "decoder_ffn_dim": 128}
    model = TLaserForTranslation(TLaserConfig(**kwargs, label_smoothing=0.0))
    src = ["die börse fällt", "das parlament tagt", "ein neuer tag beginnt", "wir danken ihnen"]
    tgt = ["stocks fall", "parliament meets", "a new day begins", "we thank you"]
    ids, mask = batch(tokenizer, src)
    labels = labels_for(tokenizer, tgt)
    optim = torch.optim.Adam(model.parameters(), lr=3e-3)
    for _ in range(150):
        optim.zero_grad()
        loss = model(ids, mask, labels=labels, tgt_lang="en").loss
        loss.backward()
        optim.step()
    assert loss.item() < 0.05
    vectors = model.encoder.encode(src, tokenizer, convert_to_tensor=True)
    for beams in (1, 3):
        out = model.generate(sentence_embeddings=vectors, tgt_lang="en", num_beams=beams, max_new_tokens=12)
        decoded = tokenizer.batch_decode(out, skip_special_tokens=True)
        assert [d.strip() for d in decoded] == tgt, (beams, decoded)


def test_align_loss_option_is_a_per_pair_mean(tokenizer, tiny_tlaser_kwargs):
    torch.manual_seed(0)
    model = TLaserForTranslation(TLaserConfig(**tiny_tlaser_kwargs, distance_beta=0.0, align_loss_weight=2.0))
    out, ids, tgt_ids = parallel_forward(model, tokenizer)
    assert out.loss_distance is None and out.loss_align is not None
    torch.testing.assert_close(out.loss, out.loss_mt / out.num_tokens + 2.0 * out.loss_align)
    assert 0 < out.loss_align < 2 * math.log(3) + 1  # two cross entropies over 3 candidates, per pair


@pytest.mark.parametrize("style", ["bert", "fairseq"])
def test_init_statistics_per_style(style):
    """bert: every weight N(0, 0.02). fairseq: xavier-uniform linears (q/k/v gain 1/sqrt(2)), embeddings and the
    output projection N(0, d^-0.5); at d=192 the fairseq init spreads the STR_TAG vectors where bert's does not."""
    torch.manual_seed(0)
    d, ffn, vocab = 192, 768, 4000
    config = TLaserConfig(
        vocab_size=vocab,
        hidden_size=d,
        num_hidden_layers=3,
        num_attention_heads=4,
        intermediate_size=ffn,
        decoder_attention_heads=4,
        decoder_ffn_dim=ffn,
        init_style=style,
    )
    model = TLaserForTranslation(config).eval()
    layer = model.encoder.layers[0]
    xavier = {  # std of xavier_uniform = gain * sqrt(2 / (fan_in + fan_out))
        "q": 2**-0.5 * math.sqrt(2 / (2 * d)),
        "fc1": math.sqrt(2 / (d + ffn)),
        "cross_k": math.sqrt(2 / (d + config.lang_embed_dim + d)),  # different key width: gain 1 (fairseq)
    }
    observed = {
        "q": layer.self_attn.q_proj.weight.std().item(),
        "fc1": layer.ffn.fc1.weight.std().item(),
        "cross_k": model.decoder.layers[0].encoder_attn.k_proj.weight.std().item(),
        "embed": model.encoder.embed_tokens.weight[1:].std().item(),
        "lm_head": model.lm_head.weight.std().item(),
    }
    expected = {**xavier, "embed": d**-0.5, "lm_head": d**-0.5} if style == "fairseq" else dict.fromkeys(observed, 0.02)
    for name, value in observed.items():
        assert value == pytest.approx(expected[name], rel=0.05), name
    assert model.encoder.embed_tokens.weight[config.pad_token_id].abs().max() == 0
    assert layer.self_attn.q_proj.bias.abs().max() == 0

    ids = torch.randint(4, vocab, (64, 12))
    ids[:, 0], ids[:, -1] = config.cls_token_id, config.eos_token_id
    with torch.no_grad():
        vectors = model.encoder(ids, pooled_only=True).pooler_output
    centred = vectors - vectors.mean(0)
    # the shared component: raw cosine near 1 (bert) or clearly below (fairseq); centred, the vectors differ
    raw = torch.nn.functional.cosine_similarity(vectors[:, None], vectors[None], dim=-1)
    off_diagonal = raw[~torch.eye(len(raw), dtype=torch.bool)].mean().item()
    assert (off_diagonal > 0.99) if style == "bert" else (off_diagonal < 0.97)
    spread = (centred.norm(dim=-1).mean() / vectors.norm(dim=-1).mean()).item()
    assert (spread > 0.15) if style == "fairseq" else (spread < 0.06)


@pytest.mark.parametrize("model", ["tlaser", "ctlaser"])
def test_presets_keep_the_paper_one_flag_away(model):
    """``tiny`` is the measured CPU recipe (fairseq init, no dropout, alignment loss); ``paper`` keeps the authors'."""
    from hf_tlaser.training.presets import get_preset

    tiny, paper = get_preset(model, "tiny").make_config(8000), get_preset(model, "paper").make_config(8000)
    assert (tiny.dropout, tiny.init_style, tiny.align_loss_weight, tiny.hidden_size) == (0.0, "fairseq", 1.0, 192)
    assert (paper.dropout, paper.init_style, paper.align_loss_weight, paper.hidden_size) == (0.3, "bert", 0.0, 1024)

"""cNV: the distance cost of eq. 7-9, the self-attentive summary of eq. 1-2, the frozen NMT pair, saving and loading."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import AutoModel, MarianConfig, MarianMTModel

from hf_tlaser.models.cnv import CNVConfig, CNVModel, SelfAttentiveSummary, cnv_distance_loss
from hf_tlaser.models.common import rnn
from tests.tiny_models import NMT_TINY

EN = ["The stock market fell sharply.", "Parliament met on Tuesday.", "A new day begins.", "We thank you."]
DE = ["Die Börse fiel stark.", "Das Parlament tagte am Dienstag.", "Ein neuer Tag beginnt.", "Wir danken Ihnen."]


def marian(tokenizer, seed: int) -> MarianMTModel:
    torch.manual_seed(seed)
    config = MarianConfig(
        vocab_size=len(tokenizer),
        **NMT_TINY,
        max_position_embeddings=128,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        decoder_start_token_id=tokenizer.pad_token_id,
    )
    return MarianMTModel(config)


@pytest.fixture()
def pair(tokenizer):
    return marian(tokenizer, 1), marian(tokenizer, 2)


def tiny_cnv(tokenizer, pair, **kwargs) -> CNVModel:
    torch.manual_seed(0)
    options = dict(shared_hidden_size=16, num_summary_heads=2, num_negatives=3) | kwargs
    return CNVModel.from_nmt_pair(*pair, ["en", "de"], tokenizers={"en": tokenizer, "de": tokenizer}, **options)


def batch(tokenizer, en: list[str], de: list[str]) -> dict[str, torch.Tensor]:
    """The batch contract: each side through its encoder's tokenizer; labels = de targets, then en targets."""
    side_a, side_b = tokenizer(en, padding=True, return_tensors="pt"), tokenizer(de, padding=True, return_tensors="pt")
    labels = tokenizer(de + en, padding=True, return_tensors="pt")
    return dict(
        input_ids_a=side_a["input_ids"],
        attention_mask_a=side_a["attention_mask"],
        input_ids_b=side_b["input_ids"],
        attention_mask_b=side_b["attention_mask"],
        labels=labels["input_ids"].masked_fill(labels["attention_mask"].eq(0), -100),
    )


def test_distance_cost_matches_hand_computed_values():
    p_a = torch.tensor([[0.0, 0.0], [1.0, 0.0]])
    p_b = torch.tensor([[0.0, 1.0], [1.0, 0.0]])
    negatives = torch.tensor([[1, 0]])  # the negative of pair 0 is b_1, of pair 1 is b_0
    out = cnv_distance_loss(p_a, p_b, negatives, alpha=2.0, squared=True)
    # v_norm = (0 + 1 + 1 + 1) / 4; d_p = (1, 0); d_n = (1, 2); k = (0, -2); l_d = relu(2 + 2k / 2.5)
    assert out.v_norm.item() == pytest.approx(0.75)
    torch.testing.assert_close(out.d_p, torch.tensor([1.0, 0.0]))
    torch.testing.assert_close(out.d_n, torch.tensor([[1.0, 2.0]]))
    torch.testing.assert_close(out.hinge, torch.tensor([[2.0, 0.4]]))
    assert out.total.item() == pytest.approx(2.4)
    plain = cnv_distance_loss(p_a, p_b, negatives, alpha=2.0)  # the default, plain norms: d_n = (1, sqrt 2)
    torch.testing.assert_close(plain.hinge, torch.tensor([[2.0, 2 - 2 * math.sqrt(2) / 2.5]]))


def test_distance_cost_of_identical_pairs_and_matrices():
    torch.manual_seed(0)
    p = torch.randn(3, 2, 4)  # context matrices [B, r, d_h]: Frobenius norms
    negatives = torch.tensor([[1, 2, 0], [2, 0, 1]])
    out = cnv_distance_loss(p, p.clone(), negatives, alpha=8.0, squared=True)
    assert torch.all(out.d_p == 0)
    v_norm = p.flatten(1).norm(dim=-1).mean()
    d_n = ((p.unsqueeze(0) - p[negatives]) ** 2).sum((-1, -2))
    torch.testing.assert_close(out.hinge, torch.relu(8.0 - 8.0 * d_n / (2 * v_norm + 1)))
    far = cnv_distance_loss(p * 100, p * 100, negatives, alpha=8.0, squared=True)  # squared: inflating P escapes
    assert far.total.item() == 0.0


def test_self_attentive_summary_follows_eq_1_2():
    torch.manual_seed(0)
    layer = SelfAttentiveSummary(hidden_size=4, num_heads=3)
    z = torch.randn(2, 5, 4)
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]])
    got = layer(z, mask)
    assert got.shape == (2, 3, 4)
    for b, length in enumerate(mask.sum(1).tolist()):
        for m in range(3):
            rows = slice(m * 4, (m + 1) * 4)
            q = z[b, :length] @ layer.query.weight[rows].T + layer.query.bias[rows]
            k = z[b, :length] @ layer.key.weight[rows].T + layer.key.bias[rows]
            v = z[b, :length] @ layer.value.weight[rows].T + layer.value.bias[rows]
            g = torch.softmax((q * k).sum(-1) / 2.0, dim=0)  # eq. (1), sqrt(d_h) = 2
            torch.testing.assert_close(got[b, m], g @ v)  # eq. (2)
    z_padded = z.clone()
    z_padded[1, 3:] = 100.0  # padding never reaches P
    torch.testing.assert_close(layer(z_padded, mask)[1], got[1])


def test_from_nmt_pair_copies_and_freezes_the_nmt_models(tokenizer, pair):
    model = tiny_cnv(tokenizer, pair)
    for lang, nmt in zip(["en", "de"], pair):
        for (name, mine), theirs in zip(model.nmt[lang].state_dict().items(), nmt.state_dict().values()):
            assert torch.equal(mine, theirs), name
    assert not any(p.requires_grad for nmt in model.nmt.values() for p in nmt.parameters())
    trainable = {name.split(".")[0] for name, p in model.named_parameters() if p.requires_grad}
    assert trainable == {"gru", "summary", "memory"}
    model.train()
    assert all(not nmt.training for nmt in model.nmt.values()) and model.gru.training
    before = {k: v.clone() for k, v in model.state_dict().items() if k.startswith("nmt")}
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    for _ in range(3):
        optimizer.zero_grad()
        model(**batch(tokenizer, EN, DE)).loss.backward()
        optimizer.step()
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items() if k.startswith("nmt"))


def test_loss_is_eq_9_and_learns(tokenizer, pair):
    model = tiny_cnv(tokenizer, pair, distance_beta=0.5)
    inputs = batch(tokenizer, EN, DE)
    out = model(**inputs)
    tokens = int((inputs["labels"] != -100).sum())
    assert out.num_tokens.item() == tokens and out.skipped_pair_losses.item() == 0
    assert out.loss.item() == pytest.approx((0.5 * out.loss_mt + out.loss_distance).item() / tokens, rel=1e-5)
    assert out.d_p is not None and out.d_n.item() > 0 and out.centered_cosine is not None
    nv = tiny_cnv(tokenizer, pair, distance_beta=0.0)  # NV: the translation losses alone, distances still logged
    nv_out = nv(**inputs)
    assert nv_out.loss.item() == pytest.approx(nv_out.loss_mt.item() / tokens, rel=1e-5)
    assert nv_out.loss_distance.item() == 0.0 and nv_out.d_p is not None


def overfit_nmt(model: MarianMTModel, tokenizer, src: list[str], tgt: list[str]) -> MarianMTModel:
    """A few Adam steps of plain NMT on ``src`` -> ``tgt``: a decoder that needs its encoder's information."""
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    inputs = tokenizer(src, padding=True, return_tensors="pt")
    labels = tokenizer(tgt, padding=True, return_tensors="pt")
    labels = labels["input_ids"].masked_fill(labels["attention_mask"].eq(0), -100)
    for _ in range(60):
        optimizer.zero_grad()
        model(**inputs, labels=labels).loss.backward()
        optimizer.step()
    return model


def test_shared_layers_learn_through_the_frozen_decoders(tokenizer):
    nmt_pair = (
        overfit_nmt(marian(tokenizer, 1), tokenizer, EN, DE),
        overfit_nmt(marian(tokenizer, 2), tokenizer, DE, EN),
    )
    model = tiny_cnv(tokenizer, nmt_pair, distance_beta=0.5)
    inputs = batch(tokenizer, EN, DE)
    optimizer = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    losses = []
    for _ in range(40):
        optimizer.zero_grad()
        out = model(**inputs)
        out.loss.backward()
        optimizer.step()
        losses.append(out.loss_mt.item() / out.num_tokens.item())
    assert losses[-1] < 0.3 * losses[0]  # the decoders read each sentence through P alone


def test_batch_of_one_trains_on_translation_only(tokenizer, pair):
    model = tiny_cnv(tokenizer, pair)
    inputs = batch(tokenizer, EN[:1], DE[:1])
    out = model(**inputs)
    assert out.skipped_pair_losses.item() == 1 and out.loss_distance is None and out.d_p is None
    assert out.loss.item() == pytest.approx(0.5 * out.loss_mt.item() / int((inputs["labels"] != -100).sum()))
    out.loss.backward()
    assert model.gru.weight_ih_l0.grad is not None


def test_config_choices(tokenizer, pair):
    assert CNVConfig(shared_hidden_size=1024).alpha == pytest.approx(64.0)  # the paper's 2 sqrt(d_h)
    assert CNVConfig(shared_hidden_size=16, num_summary_heads=3).embedding_size == 48  # eq. 5
    assert CNVConfig(shared_hidden_size=16, sentence_vector="sum").embedding_size == 16  # eq. 3
    for bad in (dict(languages=["en"]), dict(languages=["en", "en"]), dict(sentence_vector="max")):
        with pytest.raises(ValueError):
            CNVConfig(**bad)
    with pytest.raises(ValueError, match="from_nmt_pair"):
        CNVModel(CNVConfig())
    summed = tiny_cnv(tokenizer, pair, sentence_vector="sum", gru_bidirectional=True)
    assert summed.encode(EN, lang="en").shape == (4, 16)


def test_encode_uses_each_languages_encoder(tokenizer, pair):
    model = tiny_cnv(tokenizer, pair)
    en, de = model.encode(EN, lang="en"), model.encode(EN, lang="de")
    assert en.shape == de.shape == (4, 32) and not np.allclose(en, de)
    one = model.encode(EN[0], lang="en")
    np.testing.assert_allclose(one, en[0], atol=1e-5)
    assert model.encode([], lang="de").shape == (0, 32)
    with pytest.raises(ValueError, match=r"lang='fr'.*\['en', 'de'\]"):
        model.encode(EN, lang="fr")
    with torch.no_grad():
        inputs = batch(tokenizer, EN, DE)
        direct = model.embed(inputs["input_ids_b"], inputs["attention_mask_b"], "de")
    np.testing.assert_allclose(model.encode(DE, lang="de"), direct.numpy(), atol=1e-5)


def test_saved_model_embeds_both_languages_in_a_fresh_process(tmp_path, tokenizer, pair):
    model = tiny_cnv(tokenizer, pair).eval()
    folder = tmp_path / "cnv"
    model.save_pretrained(folder)
    assert (folder / "tokenizer_en" / "tokenizer.json").is_file() and (folder / "tokenizer_de").is_dir()
    assert (folder / "rnn.py").read_bytes() == Path(rnn.__file__).read_bytes()
    reloaded = AutoModel.from_pretrained(folder)  # hf_tlaser's own registration
    for key, value in model.state_dict().items():  # tied embeddings of both NMT models come back too
        assert torch.equal(reloaded.state_dict()[key], value), key
    expected = {"en": model.encode(EN, lang="en").tolist(), "de": model.encode(DE, lang="de").tolist()}
    script = textwrap.dedent(
        f"""
        import sys, json
        sys.modules["hf_tlaser"] = None  # the package must not be importable
        from transformers import AutoModel
        model = AutoModel.from_pretrained({str(folder)!r}, trust_remote_code=True)
        assert type(model).__name__ == "CNVModel" and "hf_tlaser" not in type(model).__module__
        out = {{"en": model.encode({EN!r}, lang="en").tolist(), "de": model.encode({DE!r}, lang="de").tolist()}}
        try:
            model.encode(["Bonjour"], lang="fr")
        except ValueError as err:
            out["error"] = str(err)
        print(json.dumps(out))
        """
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(HF_HUB_OFFLINE="1", HF_HOME=str(tmp_path / "hf_home"))
    proc = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    for lang in ("en", "de"):
        np.testing.assert_allclose(np.array(got[lang]), np.array(expected[lang]), atol=1e-5)
    assert "lang='fr'" in got["error"] and "['en', 'de']" in got["error"]


def test_combined_vectors_add_the_translations_vector(tokenizer, pair):
    """eq. 4 / 6: the vector of the input plus that of its NMT translation, read by the other language's encoder."""
    model = tiny_cnv(tokenizer, pair, combine_translation=True).eval()
    got = model.encode(EN[:2], lang="en", sort_by_length=False)
    inputs = tokenizer(EN[:2], padding=True, return_tensors="pt")
    with torch.no_grad():
        limit = 2 * inputs["input_ids"].shape[1] + 10  # a random NMT model decodes to the length limit
        generated = model.nmt["en"].generate(**inputs, num_beams=1, do_sample=False, max_new_tokens=limit)
        texts = tokenizer.batch_decode(generated, skip_special_tokens=True)
        translated = tokenizer(texts, padding=True, truncation=True, max_length=limit)
        own = model.embed(inputs["input_ids"], inputs["attention_mask"], "en")
        other = model.embed(torch.tensor(translated["input_ids"]), torch.tensor(translated["attention_mask"]), "de")
    assert not np.allclose(got, own.numpy(), atol=1e-3)
    np.testing.assert_allclose(got, (own + other).numpy(), atol=1e-4)

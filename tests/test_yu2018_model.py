"""Yu et al. 2018 (LSTM seq2seq with similarity loss) with tiny configs: losses against hand-computed values,
pooling, incremental decoding, save/load, trust_remote_code in a fresh process and sentence-transformers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from hf_tlaser import save_tokenizer
from hf_tlaser.data import TranslationCollator
from hf_tlaser.models.yu2018 import Yu2018Config, Yu2018ForTranslation, Yu2018Model
from tests import tiny_models
from tests.tiny_models import EOS, PAD, SOURCES, TARGETS, TINY_CONFIG, encoder_batch, label_batch

LANGS = ["de", "en", "es", "fr", "it"]
pytestmark = pytest.mark.usefixtures("one_thread")


def tiny_config(**overrides) -> Yu2018Config:
    values = dict(embed_dim=16, encoder_hidden_size=8, hidden_size=12, self_attention_dim=6, decoder_hidden_size=20)
    return Yu2018Config(**{**TINY_CONFIG, **values, **overrides})


def pair_batch(sources=SOURCES, targets=TARGETS) -> dict:
    return dict(tiny_models.pair_batch(sources, targets), labels=label_batch(targets), tgt_lang="en", src_lang="de")


def test_config_defaults_and_validation():
    cfg = Yu2018Config()
    assert (cfg.vocab_size, cfg.embed_dim, cfg.encoder_hidden_size, cfg.hidden_size) == (85000, 512, 512, 1024)
    assert (cfg.decoder_hidden_size, cfg.pooling, cfg.encoder_l2_weight) == (1024, "mean", 0.0)
    assert cfg.similarity_weight > 0
    with pytest.raises(ValueError, match="pooling"):
        Yu2018Config(pooling="cls")
    with pytest.raises(ValueError, match="hidden_size"):
        Yu2018Config(hidden_size=0)
    with pytest.raises(ValueError, match="similarity_weight"):
        Yu2018Config(similarity_weight=-1.0)


def test_mean_pooling_ignores_padding():
    torch.manual_seed(0)
    model = Yu2018Model(tiny_config()).eval()
    short, long = [10, 11], [12, 13, 14, 15, 16, 17]
    alone_ids, alone_mask = encoder_batch([short])
    ids, mask = encoder_batch([short, long])
    garbage = ids.clone()
    garbage[0, alone_ids.shape[1] :] = 50  # padding positions hold other ids: the mask alone decides
    with torch.no_grad():
        alone, batched, with_garbage = model(alone_ids, alone_mask), model(ids, mask), model(garbage, mask)
    assert batched.pooler_output.shape == (2, 12) and batched.last_hidden_state.shape == (2, ids.shape[1], 12)
    torch.testing.assert_close(batched.pooler_output[0], alone.pooler_output[0], atol=1e-6, rtol=0)
    torch.testing.assert_close(with_garbage.pooler_output, batched.pooler_output, atol=0, rtol=0)
    assert bool((batched.last_hidden_state[0, alone_ids.shape[1] :] == 0).all())
    # h(s) is the mean over the 4 positions STR_TAG 10 11 </s> (sec. 2.2)
    torch.testing.assert_close(alone.pooler_output[0], alone.last_hidden_state[0].sum(0) / 4)


@torch.no_grad()
def test_pooling_options():
    ids, mask = encoder_batch([[10, 11], [12, 13, 14, 15, 16]])
    torch.manual_seed(0)
    mean = Yu2018Model(tiny_config()).eval()
    states = mean(ids, mask).last_hidden_state
    for pooling in ("max", "self_attention"):
        model = Yu2018Model(tiny_config(pooling=pooling)).eval()
        model.load_state_dict(mean.state_dict(), strict=False)  # same LSTMs, so the same top states
        out = model(ids, mask)
        torch.testing.assert_close(out.last_hidden_state, states)
        if pooling == "max":
            torch.testing.assert_close(out.pooler_output[0], states[0, :4].amax(0))
            torch.testing.assert_close(out.pooler_output[1], states[1].amax(0))
            continue
        # w_2 = 0: every position scores the same, so self-attention is the mean over the tokens
        model.attention.w2.weight.zero_()
        torch.testing.assert_close(model(ids, mask).pooler_output, mean(ids, mask).pooler_output)
        # a score that favours one position: the vector moves to that position's state, padding never counts
        model.attention.w1.weight.copy_(torch.eye(6, 12) * 50)
        model.attention.w2.weight.fill_(1.0)
        pooled = model(ids, mask).pooler_output
        scores = torch.tanh(states[0, :4] @ model.attention.w1.weight.T).sum(-1)
        torch.testing.assert_close(pooled[0], (scores.softmax(0)[:, None] * states[0, :4]).sum(0))


def stub_encoder(model: Yu2018ForTranslation, vectors: torch.Tensor) -> None:
    """Make the encoder return ``vectors`` (one row per encoded sentence) whatever the input."""
    model.encoder.forward = lambda input_ids, attention_mask=None, **kw: SimpleNamespace(pooler_output=vectors)


def test_similarity_loss_hand_computed():
    """L_sim = ||h(s) - h(t)||^2 (sec. 2.2) on 2-dim vectors: pairs (1, 2)-(1, 0) and (0, 0)-(3, 4) give 4 and 25."""
    model = Yu2018ForTranslation(tiny_config(hidden_size=2, similarity_weight=0.5))
    vectors = torch.tensor([[1.0, 2.0], [0.0, 0.0], [1.0, 0.0], [3.0, 4.0]])
    stub_encoder(model, vectors)
    out = model(**pair_batch(SOURCES[:2], TARGETS[:2]))
    assert out.loss_sim.item() == pytest.approx(14.5)
    # each pair's alpha * L_sim counts once per target token of the pair: 5 and 3 tokens
    assert out.num_tokens.item() == 8
    expected = (out.loss_mt.item() + 0.5 * (4 * 5 + 25 * 3)) / 8
    assert out.loss.item() == pytest.approx(expected, rel=1e-6)


def test_identical_pairs_and_a_batch_of_one():
    torch.manual_seed(0)
    model = Yu2018ForTranslation(tiny_config())
    out = model(**pair_batch(SOURCES, SOURCES))
    assert out.loss_sim.item() == 0.0
    torch.testing.assert_close(out.loss * out.num_tokens, out.loss_mt)
    one = model(**pair_batch(SOURCES[:1], TARGETS[:1]))
    assert torch.isfinite(one.loss) and one.loss_sim.item() > 0
    assert one.centered_cosine is None  # needs two pairs
    one.loss.backward()
    assert model.encoder.lstm.weight_hh_l0.grad.abs().sum() > 0


def test_both_directions_in_the_translation_loss():
    """loss_mt = CE(s->t) + CE(t->s), written out: the reverse labels are the sources without STR_TAG, decoded from
    h(t) into the source language."""
    torch.manual_seed(0)
    model = Yu2018ForTranslation(tiny_config(similarity_weight=0.0)).eval()
    batch = pair_batch()
    out = model(**batch)
    src = model.encoder(batch["input_ids"], batch["attention_mask"]).pooler_output
    tgt = model.encoder(batch["tgt_input_ids"], batch["tgt_attention_mask"]).pooler_output
    forward_labels = batch["labels"]
    reverse_labels = label_batch(SOURCES)  # 10 11 12 </s>, 13 14 </s> -100, ...
    en, de = torch.tensor([1, 1, 1]), torch.tensor([0, 0, 0])

    def ce(labels, vectors, lang):
        logits = model.decode_logits(model.shift_right(labels), vectors, lang)
        return F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=-100, reduction="sum")

    expected = ce(forward_labels, src, en) + ce(reverse_labels, tgt, de)
    torch.testing.assert_close(out.loss_mt, expected, atol=1e-4, rtol=1e-5)
    # the normaliser is the s->t target tokens (the Trainer's count): about the sum of the two per-token means
    assert out.num_tokens.item() == int(forward_labels.ne(-100).sum()) == 12
    torch.testing.assert_close(out.loss, expected / 12, atol=1e-5, rtol=1e-5)
    # without the targets in encoder format only s->t is trained
    only = model(input_ids=batch["input_ids"], labels=forward_labels, tgt_lang="en")
    torch.testing.assert_close(only.loss_mt, ce(forward_labels, src, en), atol=1e-4, rtol=1e-5)
    assert only.loss_sim is None


def test_target_language_token_replaces_the_start_token():
    torch.manual_seed(0)
    model = Yu2018ForTranslation(tiny_config()).eval()
    vectors = torch.randn(1, 12)
    prefix = torch.tensor([[EOS, 40, 41]])
    with torch.no_grad():
        en, es = (
            model.decode_logits(prefix, vectors, torch.tensor([1])),
            model.decode_logits(prefix, vectors, torch.tensor([2])),
        )
        assert not torch.allclose(en[:, 0], es[:, 0])  # the first step already knows the language
        other_start = model.decode_logits(torch.tensor([[PAD, 40, 41]]), vectors, torch.tensor([1]))
    torch.testing.assert_close(other_start, en)  # the start token's own embedding is never read


def test_loss_is_split_invariant(tokenizer):
    """sum / N over the whole update, similarity and L2 terms included: two micro-batches with num_items_in_batch = N
    give the gradient of the full batch."""
    torch.manual_seed(0)
    model = Yu2018ForTranslation(tiny_config(vocab_size=len(tokenizer), similarity_weight=3.0, encoder_l2_weight=0.01))
    collate = TranslationCollator(tokenizer, LANGS, with_target_encoding=True, with_source_language=True)
    items = [
        {"src_lang": "de", "tgt_lang": "en", "src": s, "tgt": t}
        for s, t in [("die börse fällt", "stocks fall"), ("ein tag", "a day"), ("wir danken", "we thank you")]
    ]
    full = collate(items)
    assert full["src_lang"].tolist() == [0, 0, 0] and full["tgt_lang"].tolist() == [1, 1, 1]
    total = int((full["labels"] != -100).sum())
    out = model(**full)
    assert out.loss_encoder_l2 is not None and out.loss_encoder_l2.item() > 0
    out.loss.backward()
    expected = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    for part in (items[:1], items[1:]):
        model(**collate(part), num_items_in_batch=total).loss.backward()
    for a, b in zip(expected, (p.grad for p in model.parameters())):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)


def test_encoder_l2_penalty():
    torch.manual_seed(0)
    model = Yu2018ForTranslation(tiny_config(similarity_weight=0.0, encoder_l2_weight=0.1))
    enc = model.encoder
    by_hand = sum(
        float(w.detach().pow(2).sum())
        for w in (enc.bilstm.weight_ih_l0, enc.bilstm.weight_hh_l0, enc.bilstm.weight_ih_l0_reverse)
        + (enc.bilstm.weight_hh_l0_reverse, enc.lstm.weight_ih_l0, enc.lstm.weight_hh_l0)
    )
    assert enc.l2_penalty().item() == pytest.approx(by_hand, rel=1e-6)
    out = model(**pair_batch())
    torch.testing.assert_close(out.loss * out.num_tokens, out.loss_mt + 0.1 * out.loss_encoder_l2 * out.num_tokens)


@torch.no_grad()
def test_decoder_step_matches_decode_logits():
    torch.manual_seed(0)
    model = Yu2018ForTranslation(tiny_config(decoder_layers=2)).eval()
    vectors, langs = torch.randn(3, 12), torch.tensor([1, 2, 4])
    prefix = torch.tensor([[EOS, 40, 41, 42, 43], [EOS, 44, 45, 46, 47], [EOS, 48, 49, 50, 51]])
    full = model.decode_logits(prefix, vectors, langs)
    steps, cache = [], None
    for start, stop in ((0, 2), (2, 3), (3, 5)):
        logits, cache = model.decoder_step(prefix[:, start:stop], vectors, langs, cache)
        steps.append(logits)
        assert set(cache) == {"h", "c"} and cache["h"].shape == (3, 2, 20)  # batch first
    torch.testing.assert_close(torch.cat(steps, 1), full, atol=1e-5, rtol=0)
    # beam search reorders the cache rows: row 0 continued from row 2's state is row 2's continuation
    first, cache = model.decoder_step(prefix[:, :3], vectors, langs, None)
    moved = {k: v.index_select(0, torch.tensor([2, 1, 0])) for k, v in cache.items()}
    nxt, _ = model.decoder_step(prefix[[2, 1, 0], 3:4], vectors[[2, 1, 0]], langs[[2, 1, 0]], moved)
    torch.testing.assert_close(nxt[0], full[2, 3:4], atol=1e-5, rtol=0)


def test_bad_inputs():
    model = Yu2018ForTranslation(tiny_config())
    batch = pair_batch()
    with pytest.raises(ValueError, match="src_lang"):
        model(**{**batch, "src_lang": None})
    with pytest.raises(ValueError, match="pair batches only"):
        model(**batch, pair_index=torch.tensor([[0, 1]]))
    with pytest.raises(ValueError, match="unknown tgt_lang"):
        model(**{**batch, "tgt_lang": "xx"})
    ids, mask = encoder_batch(SOURCES)
    with pytest.raises(ValueError, match="right-padded"):
        model.encoder(ids, mask.flip(1))


@torch.no_grad()
def test_fairseq_uniform_init():
    torch.manual_seed(0)
    model = Yu2018ForTranslation(tiny_config(vocab_size=2000, pooling="self_attention"))
    weights = torch.cat([p.flatten() for p in model.parameters()])
    assert float(weights.abs().max()) <= 0.1
    assert abs(float(weights.std()) - 0.2 / 12**0.5) < 0.002  # the std of uniform(-0.1, 0.1)
    for table in (model.encoder.embed_tokens, model.decoder.embed_tokens):
        assert bool((table.weight[PAD] == 0).all())
    assert float(model.encoder.attention.w1.weight.abs().max()) > 0.09


def run_fresh(script: str, cwd) -> subprocess.CompletedProcess:
    """Run ``script`` in a new interpreter that cannot import hf_tlaser."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(HF_MODULES_CACHE=str(cwd / "hf_modules"), HF_HUB_OFFLINE="1", TRANSFORMERS_VERBOSITY="error")
    header = 'import sys\nsys.modules["hf_tlaser"] = None  # the saved code must not need the package\n'
    return subprocess.run(
        [sys.executable, "-c", header + textwrap.dedent(script)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_save_load_round_trip_and_remote_code(tmp_path):
    torch.manual_seed(0)
    model = Yu2018ForTranslation(tiny_config()).eval()
    ckpt = tmp_path / "ckpt"
    model.save_pretrained(ckpt)
    files = {p.name for p in ckpt.iterdir()}
    assert {"model.safetensors", "modeling_yu2018.py", "configuration_yu2018.py", "rnn.py", "translation.py"} <= files
    config = json.loads((ckpt / "config.json").read_text())
    assert config["auto_map"]["AutoModel"] == "modeling_yu2018.Yu2018Model"
    assert config["auto_map"]["AutoModelForSeq2SeqLM"] == "modeling_yu2018.Yu2018ForTranslation"

    loaded = Yu2018ForTranslation.from_pretrained(ckpt).eval()
    reference = model.state_dict()
    assert loaded.state_dict().keys() == reference.keys()
    for name, tensor in loaded.state_dict().items():
        assert torch.equal(tensor, reference[name]), name

    ids, mask = encoder_batch(SOURCES)
    np.save(tmp_path / "ids.npy", ids.numpy())
    with torch.no_grad():
        pooled = model.encoder(ids, mask).pooler_output.numpy()
        logits = model.decode_logits(
            model.shift_right(label_batch(TARGETS)), torch.from_numpy(pooled), torch.tensor([1, 1, 1])
        )
    np.save(tmp_path / "labels.npy", label_batch(TARGETS).numpy())
    result = run_fresh(
        """
        import numpy as np, torch
        from transformers import AutoModel, AutoModelForSeq2SeqLM
        encoder = AutoModel.from_pretrained("ckpt", trust_remote_code=True).eval()
        assert type(encoder).__name__ == "Yu2018Model", type(encoder)
        model = AutoModelForSeq2SeqLM.from_pretrained("ckpt", trust_remote_code=True).eval()
        assert type(model).__name__ == "Yu2018ForTranslation", type(model)
        ids = torch.from_numpy(np.load("ids.npy"))
        labels = torch.from_numpy(np.load("labels.npy"))
        with torch.no_grad():
            pooled = encoder(ids, ids.ne(0).long()).pooler_output
            np.save("pooled.npy", pooled.numpy())
            logits = model.decode_logits(model.shift_right(labels), pooled, torch.tensor([1, 1, 1]))
            np.save("logits.npy", logits.numpy())
        """,
        tmp_path,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    np.testing.assert_array_equal(np.load(tmp_path / "pooled.npy"), pooled)
    np.testing.assert_allclose(np.load(tmp_path / "logits.npy"), logits.numpy(), atol=1e-6)


TEXTS = ["Hello world.", "A much longer sentence about the markets, the economy and the weather.", ""]


@pytest.mark.parametrize("pooling", ["mean", "max"])
def test_sentence_transformers_gives_the_same_vectors(tmp_path, tokenizer, pooling):
    from sentence_transformers import SentenceTransformer

    torch.manual_seed(0)
    model = Yu2018ForTranslation(tiny_config(vocab_size=len(tokenizer), pooling=pooling, max_position_embeddings=128))
    model.save_pretrained(tmp_path)
    save_tokenizer(tokenizer, tmp_path)
    layout = json.loads((tmp_path / "1_Pooling" / "config.json").read_text())
    assert layout[f"pooling_mode_{pooling}_tokens"] and layout["word_embedding_dimension"] == 12
    expected = model.encoder.encode(TEXTS, tokenizer)
    got = SentenceTransformer(str(tmp_path), trust_remote_code=True, device="cpu").encode(TEXTS)
    np.testing.assert_allclose(got, expected, atol=1e-5)


def test_self_attention_pooling_writes_no_sentence_transformers_files(tmp_path):
    Yu2018Model(tiny_config(pooling="self_attention")).save_pretrained(tmp_path)
    assert (tmp_path / "config.json").is_file() and not (tmp_path / "modules.json").exists()
    assert not (tmp_path / "1_Pooling").exists()

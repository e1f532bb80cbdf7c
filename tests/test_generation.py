"""Decoding from sentence vectors through transformers' GenerationMixin with the decoder cache, for every
translation family: the cached ``decoder_step`` against ``decode_logits``, greedy / beam / sampling against
reference loops without cache, the output format, modes and precision, and remote-code loading."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import textwrap
import warnings

import pytest
import torch

from hf_tlaser.models.laser import LaserConfig, LaserForTranslation
from hf_tlaser.models.tlaser import TLaserConfig, TLaserForTranslation
from hf_tlaser.models.yu2018 import Yu2018Config, Yu2018ForTranslation

PAD, EOS, START, STR_TAG = 0, 2, 2, 3
VOCAB, BATCH, STEPS = 24, 6, 10
COMMON = dict(vocab_size=VOCAB, dropout=0.0, max_position_embeddings=80)
# one line per translation family: model class, config class, tiny sizes
FAMILIES = {
    "tlaser": (
        TLaserForTranslation,
        TLaserConfig,
        dict(
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=4,
            intermediate_size=64,
            decoder_ffn_dim=64,
            init_style="fairseq",  # bert's N(0, 0.02) leaves a random decoder nearly blind to the vector
        ),
    ),
    "laser": (LaserForTranslation, LaserConfig, dict(embed_dim=16, lstm_hidden_size=8, decoder_hidden_size=32)),
    "yu2018": (
        Yu2018ForTranslation,
        Yu2018Config,
        dict(embed_dim=16, encoder_hidden_size=8, hidden_size=16, decoder_hidden_size=32, self_attention_dim=8),
    ),
}


def build(family: str, **overrides) -> torch.nn.Module:
    model_class, config_class, sizes = FAMILIES[family]
    torch.manual_seed(0)
    return model_class(config_class(**{**COMMON, **sizes, **overrides})).eval()


def shared_module(name: str):
    """The shared module ``name`` of hf_tlaser/models/common/, which the family's model file imports."""
    return importlib.import_module(f"hf_tlaser.models.common.{name}")


@pytest.fixture(params=sorted(FAMILIES))
def family(request) -> str:
    return request.param


@pytest.fixture
def model(family):
    return build(family)


def inputs(model) -> tuple[torch.Tensor, torch.LongTensor]:
    """Sentence vectors (scaled up so that random decoders tell them apart) and one target language per row."""
    generator = torch.Generator().manual_seed(1)
    vectors = 3 * torch.randn(BATCH, model.config.hidden_size, generator=generator)
    return vectors, torch.arange(BATCH) % len(model.config.languages)


def reference_greedy(model, vectors, langs, max_new_tokens: int = STEPS) -> torch.LongTensor:
    """Greedy decoding without cache: argmax of ``decode_logits`` over the whole prefix at every step."""
    seqs = torch.full((len(vectors), 1), START)
    done = torch.zeros(len(vectors), dtype=torch.bool)
    with torch.no_grad():
        for _ in range(max_new_tokens):
            token = model.decode_logits(seqs, vectors, langs)[:, -1].argmax(-1).masked_fill(done, PAD)
            seqs = torch.cat([seqs, token[:, None]], dim=1)
            done |= token.eq(EOS)
            if bool(done.all()):
                break
    return seqs[:, 1:]


def sequence_logprob(model, vectors, langs, tokens) -> torch.Tensor:
    """Log-probability of each row of ``tokens`` (up to and including its first ``</s>``)."""
    prefix = torch.cat([torch.full((len(tokens), 1), START), tokens[:, :-1]], dim=1)
    with torch.no_grad():
        logp = model.decode_logits(prefix, vectors, langs).float().log_softmax(-1)
    token_logp = logp.gather(-1, tokens[..., None]).squeeze(-1)
    is_eos = tokens.eq(EOS).long()
    counted = is_eos.cumsum(1) - is_eos == 0  # positions up to the first eos
    return (token_logp * counted).sum(1)


def test_decoder_step_matches_decode_logits(model):
    vectors, langs = inputs(model)
    ids = torch.cat([torch.full((BATCH, 1), START), torch.randint(4, VOCAB, (BATCH, 8))], dim=1)
    with torch.no_grad():
        full = model.decode_logits(ids, vectors, langs)
        pieces, cache = [], None
        for start, end in ((0, 3), (3, 4), (4, 5), (5, 7), (7, 9)):  # a prefill, single tokens, chunks of two
            logits, cache = model.decoder_step(ids[:, start:end], vectors, langs, cache)
            pieces.append(logits)
    assert all(isinstance(t, torch.Tensor) and t.shape[0] == BATCH for t in cache.values())
    torch.testing.assert_close(torch.cat(pieces, dim=1), full, atol=1e-5, rtol=0)


def test_greedy_with_cache_matches_reference_loop(model):
    vectors, langs = inputs(model)
    expected = reference_greedy(model, vectors, langs)  # T-LASER and LASER end some rows early: padding compared
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning about lengths, caches or generation flags
        got = model.generate(vectors=vectors, tgt_lang=langs, max_new_tokens=STEPS)
    assert torch.equal(got, expected), (got, expected)
    # the old keyword and language codes
    codes = [model.config.languages[i] for i in langs]
    assert torch.equal(model.generate(sentence_embeddings=vectors, tgt_lang=codes, max_new_tokens=STEPS), expected)


def test_beam_search(model):
    vectors, langs = inputs(model)
    greedy = model.generate(vectors=vectors, tgt_lang=langs, max_new_tokens=STEPS)
    assert torch.equal(model.generate(vectors=vectors, tgt_lang=langs, max_new_tokens=STEPS, num_beams=1), greedy)
    options = dict(vectors=vectors, tgt_lang=langs, max_new_tokens=STEPS, num_beams=4, length_penalty=0.0)
    beam = model.generate(**options)
    # the cache follows the beams: the same search without cache re-decodes every prefix
    assert torch.equal(model.generate(**options, use_cache=False), beam)
    # a beam may prune greedy's path (4 beams do on one row here), so the score check uses a beam as wide as the
    # vocabulary: every first token survives the first step
    wide = model.generate(**{**options, "num_beams": VOCAB})
    wide_logp = sequence_logprob(model, vectors, langs, wide)
    greedy_logp = sequence_logprob(model, vectors, langs, greedy)
    assert bool((wide_logp >= greedy_logp - 1e-5).all()), (wide_logp, greedy_logp)
    assert bool((wide_logp > greedy_logp + 1e-3).any())  # the search found something greedy missed
    two = model.generate(**options, num_return_sequences=2)
    assert two.shape[0] == 2 * BATCH and torch.equal(two[::2, : beam.shape[1]], beam)
    # best first: generate ranked them with the cache, the scores here are recomputed without it, so as above they
    # agree within fp32 rounding (kernels round differently per CPU class), not bit for bit
    best, runner_up = (sequence_logprob(model, vectors, langs, two[i::2]) for i in (0, 1))
    assert bool((best >= runner_up - 1e-5).all()), (best, runner_up)


def test_sampling(model):
    vectors, langs = inputs(model)
    options = dict(vectors=vectors, tgt_lang=langs, max_new_tokens=STEPS, do_sample=True)
    torch.manual_seed(7)
    first = model.generate(**options, top_p=0.9, temperature=1.5, num_return_sequences=3)
    torch.manual_seed(7)
    again = model.generate(**options, top_p=0.9, temperature=1.5, num_return_sequences=3)
    assert torch.equal(first, again) and first.shape[0] == 3 * BATCH
    torch.manual_seed(8)
    assert not torch.equal(model.generate(**options, top_p=0.9, temperature=1.5, num_return_sequences=3), first)
    greedy = model.generate(vectors=vectors, tgt_lang=langs, max_new_tokens=STEPS)
    assert torch.equal(model.generate(**options, top_k=1), greedy)


def test_generate_from_input_ids_encodes_first(model):
    rows = [[STR_TAG, *range(5, 5 + n), EOS] for n in (3, 6, 1, 4, 2, 5)]
    width = max(map(len, rows))
    ids = torch.tensor([r + [PAD] * (width - len(r)) for r in rows])
    mask = ids.ne(PAD).long()
    _, langs = inputs(model)
    with torch.no_grad():
        vectors = model.encode_sentences(ids, mask)
    expected = model.generate(vectors=vectors, tgt_lang=langs, max_new_tokens=STEPS, num_beams=3)
    assert torch.equal(model.generate(ids, mask, tgt_lang=langs, max_new_tokens=STEPS, num_beams=3), expected)


def test_bad_arguments(model):
    vectors, _ = inputs(model)
    with pytest.raises(ValueError, match=r"unknown tgt_lang \['xx'\]"):
        model.generate(vectors=vectors, tgt_lang="xx")
    with pytest.raises(ValueError, match="index out of range"):
        model.generate(vectors=vectors, tgt_lang=len(model.config.languages))
    with pytest.raises(ValueError, match="either vectors"):
        model.generate(tgt_lang="en")
    with pytest.raises(ValueError, match="not both"):
        model.generate(vectors=vectors, sentence_embeddings=vectors, tgt_lang="en")
    shared = shared_module("translation")
    with pytest.raises(ValueError, match="cache or its alias past_key_values"):
        model.generate(
            vectors=vectors, tgt_lang="en", cache=shared.TranslationCache(), past_key_values=shared.TranslationCache()
        )


@pytest.mark.parametrize("name", ["cache", "past_key_values"])
def test_user_cache_under_either_name(model, name):
    """A cache the caller passes (as ``cache``, the name since transformers 5.24, or ``past_key_values``, the name
    before) is the one filled, whichever name the installed GenerationMixin uses."""
    vectors, langs = inputs(model)
    shared = shared_module("translation")
    cache = shared.TranslationCache()
    ids = model.generate(vectors=vectors, tgt_lang=langs, max_new_tokens=STEPS, **{name: cache})
    assert torch.equal(ids, reference_greedy(model, vectors, langs))
    assert cache.get_seq_length() == ids.shape[1] and cache.state is not None


def test_output_format_and_default_length(model):
    vectors, langs = inputs(model)
    out = model.generate(
        vectors=vectors, tgt_lang=langs, max_new_tokens=STEPS, return_dict_in_generate=True, output_scores=True
    )
    assert torch.equal(out.sequences, reference_greedy(model, vectors, langs))
    assert len(out.scores) == out.sequences.shape[1]  # one score per returned token: no start token
    shared = shared_module("translation")
    cache = getattr(out, shared.CACHE_NAME)  # GenerationMixin's output field: ``cache`` (>= 5.24) or past_key_values
    assert isinstance(cache, shared.TranslationCache)
    assert cache.get_seq_length() == out.sequences.shape[1]
    full = model.generate(vectors=vectors[:2], tgt_lang="en", suppress_tokens=[EOS])
    assert full.shape == (2, shared.DEFAULT_MAX_NEW_TOKENS) and not full.eq(EOS).any()


def test_generation_config_and_mode(family):
    model = build(family, dropout=0.3)
    assert model.can_generate()
    config = model.generation_config
    assert (config.eos_token_id, config.pad_token_id, config.decoder_start_token_id) == (EOS, PAD, START)
    vectors, langs = inputs(model)
    expected = model.generate(vectors=vectors, tgt_lang=langs, max_new_tokens=STEPS)
    model.train()
    got = model.generate(vectors=vectors.requires_grad_(), tgt_lang=langs, max_new_tokens=STEPS)
    assert model.training  # restored
    assert torch.equal(got, expected)  # dropout was off during generate


@pytest.mark.parametrize("lacks_rnn", [False, True])
def test_bf16_autocast(family, lacks_rnn, monkeypatch):
    if lacks_rnn:  # the fp32 LSTM fallback of CPUs without native bf16, on every CPU
        monkeypatch.setattr(shared_module("rnn"), "cpu_autocast_lacks_rnn", lambda: True)
    model = build(family)
    vectors, langs = inputs(model)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        greedy = model.generate(vectors=vectors, tgt_lang=langs, max_new_tokens=6)
        beam = model.generate(vectors=vectors, tgt_lang=langs, max_new_tokens=6, num_beams=3)
    for out in (greedy, beam):
        assert out.shape[0] == BATCH and out.dtype == torch.long and bool(((out >= 0) & (out < VOCAB)).all())


def test_fresh_process_trust_remote_code_generates(family, tmp_path):
    model = build(family)
    vectors, langs = inputs(model)
    expected = model.generate(vectors=vectors, tgt_lang=langs, max_new_tokens=STEPS, num_beams=3)
    model.save_pretrained(tmp_path / "ckpt")
    torch.save({"vectors": vectors, "langs": langs}, tmp_path / "inputs.pt")
    script = textwrap.dedent(
        f"""
        import json, sys
        sys.modules["hf_tlaser"] = None  # the package must not be importable
        import torch
        from transformers import AutoModelForSeq2SeqLM
        model = AutoModelForSeq2SeqLM.from_pretrained("ckpt", trust_remote_code=True)
        assert "hf_tlaser" not in type(model).__module__ and model.can_generate()
        data = torch.load("inputs.pt")
        out = model.generate(vectors=data["vectors"], tgt_lang=data["langs"], max_new_tokens={STEPS}, num_beams=3)
        print(json.dumps(out.tolist()))
        """
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(HF_MODULES_CACHE=str(tmp_path / "hf_modules"), HF_HUB_OFFLINE="1", TRANSFORMERS_VERBOSITY="error")
    proc = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == expected.tolist()

"""The quality levers of the alignment loss (issue 53): LaBSE's additive margin, and the cross-batch memory of
negatives (XBM): what the memory holds (size, order, no gradient), which of its entries are left out (the same text,
a translation through a shared target), the loss it adds (hand-computed), and that a resumed run gets it back."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader

from hf_tlaser import TLaserConfig, TLaserForTranslation
from hf_tlaser.data import MultiwayBatchSampler, ParallelExamples, TranslationCollator, load_corpora, sentence_lengths
from hf_tlaser.data.collator import language_keys, text_key, text_keys
from hf_tlaser.models.common.losses import NegativeMemory, align_loss
from hf_tlaser.training.trainer import MEMORY_STATE, NegativeMemoryCallback

torch.manual_seed(0)
P_A, P_B = torch.randn(3, 8), torch.randn(3, 8)


def hand_loss(p_a, p_b, scale=20.0, margin=0.0, memory=None, mask=None, mask_ba=None) -> float:
    """Both directions' cross entropy, written out: -log softmax of the positive among the batch (and memory)."""
    a, b = F.normalize(p_a, dim=-1), F.normalize(p_b, dim=-1)
    total = 0.0
    for i in range(len(a)):
        for x, y, masked in ((a, b, mask), (b, a, mask if mask_ba is None else mask_ba)):
            logits = [scale * (float(x[i] @ y[j]) - (margin if j == i else 0.0)) for j in range(len(a))]
            if memory is not None:
                unit = F.normalize(memory, dim=-1)
                logits += [scale * float(x[i] @ unit[n]) for n in range(len(memory)) if not bool(masked[i, n])]
            total += float(torch.logsumexp(torch.tensor(logits), 0)) - logits[i]
    return total


def test_margin_is_taken_from_the_positive_in_both_directions():
    assert align_loss(P_A, P_B, margin=0.3).item() == pytest.approx(hand_loss(P_A, P_B, margin=0.3), rel=1e-5)
    assert align_loss(P_A, P_B).item() == pytest.approx(hand_loss(P_A, P_B), rel=1e-5)
    assert align_loss(P_A, P_B, margin=0.3) > align_loss(P_A, P_B)  # a harder task: a higher loss


def test_memory_entries_are_extra_negatives_except_the_masked():
    memory = torch.randn(5, 8)
    mask = torch.zeros(3, 5, dtype=torch.bool)
    mask[0, 1] = mask[2, 4] = True
    got = align_loss(P_A, P_B, memory=F.normalize(memory, dim=-1), memory_mask=mask).item()
    assert got == pytest.approx(hand_loss(P_A, P_B, memory=memory, mask=mask), rel=1e-5)
    assert got > align_loss(P_A, P_B).item()
    everything_masked = align_loss(P_A, P_B, memory=memory, memory_mask=torch.ones(3, 5, dtype=torch.bool))
    torch.testing.assert_close(everything_masked, align_loss(P_A, P_B))


def test_each_direction_takes_its_own_memory_mask():
    memory = torch.randn(4, 8)
    mask_ab = torch.tensor([[True, True, False, False]] * 3)  # a -> b: entries 2, 3 (say, in b's language)
    mask_ba = ~mask_ab  # b -> a: entries 0, 1
    got = align_loss(P_A, P_B, memory=F.normalize(memory, dim=-1), memory_mask=mask_ab, memory_mask_ba=mask_ba)
    assert got.item() == pytest.approx(hand_loss(P_A, P_B, memory=memory, mask=mask_ab, mask_ba=mask_ba), rel=1e-5)
    assert got.item() != pytest.approx(hand_loss(P_A, P_B, memory=memory, mask=mask_ab), rel=1e-3)


def test_memory_holds_the_last_entries_normalised_and_without_gradient():
    memory = NegativeMemory(5)
    assert len(memory) == 0
    vectors = torch.randn(3, 4, requires_grad=True)
    keys = torch.tensor([11, 12, 13])
    memory.add(vectors * 2, keys, keys + 100, keys + 200)
    assert len(memory) == 3 and not memory.vectors.requires_grad
    torch.testing.assert_close(memory.vectors, F.normalize(vectors.detach(), dim=-1))
    assert memory.keys.tolist() == [[11, 111, 211], [12, 112, 212], [13, 113, 213]]
    more = torch.randn(4, 4)
    zeros = torch.zeros(4, dtype=torch.long)
    memory.add(more, torch.tensor([21, 22, 23, 24]), zeros, zeros)  # fills 2 slots, then overwrites 2
    assert len(memory) == 5 and int(memory.position) == 2
    assert memory.keys[:, 0].tolist() == [23, 24, 13, 21, 22]  # the oldest (11, 12) are gone
    torch.testing.assert_close(memory.vectors[:2], F.normalize(more[2:], dim=-1))
    zeros = torch.zeros(7, dtype=torch.long)
    memory.add(torch.randn(7, 4), torch.arange(30, 37), zeros, zeros)  # more than it holds
    assert memory.keys[:, 0].tolist() == [35, 36, 32, 33, 34] and int(memory.position) == 2  # the last 5, in turn
    with pytest.raises(ValueError, match="at least 1"):
        NegativeMemory(0)


def test_mask_leaves_out_the_same_text_and_translations_through_a_shared_target():
    memory = NegativeMemory(4)
    # entries: (own text, its pair's target text): an English sentence, a German one translated into that English
    # sentence, two unrelated ones
    # (language keys 8 and 9 are also text keys of the rows: a language is never taken for a text)
    memory.add(torch.randn(4, 3), torch.tensor([7, 8, 9, 10]), torch.tensor([7, 7, 5, 6]), torch.tensor([2, 3, 2, 2]))
    rows = torch.tensor([1, 7, 2, 3])  # group 0: a French sentence and English 7; group 1: two others
    mask = memory.mask(rows, row_group=torch.tensor([0, 0, 1, 1]), pair_group=torch.tensor([0, 1]))
    assert mask.tolist() == [[True, True, False, False], [False, False, False, False]]
    other = memory.other_language(torch.tensor([2, 3]))
    assert other.tolist() == [[False, True, False, False], [True, False, True, True]]


def test_collator_keys_every_encoded_row(tokenizer, data_dir):
    assert text_key("Hallo.") == text_key("Hallo.") != text_key("Hallo!") and text_key("") > 0
    examples = [{"src": "Guten Tag.", "tgt": "Good day.", "src_lang": "de", "tgt_lang": "en"}] * 2
    collator = TranslationCollator(tokenizer, with_target_encoding=True, with_text_keys=True)
    assert collator(examples)["text_keys"].tolist() == text_keys(["Guten Tag."] * 2 + ["Good day."] * 2).tolist()
    assert collator(examples)["text_languages"].tolist() == language_keys(["de", "de", "en", "en"]).tolist()
    sources_only = TranslationCollator(tokenizer, with_text_keys=True)(examples)["text_languages"]
    assert sources_only.tolist() == language_keys(["de", "de"]).tolist()
    assert language_keys(["de"]).tolist() != text_keys(["de"]).tolist() and int(language_keys(["en"])[0]) > 0
    plain = TranslationCollator(tokenizer, with_target_encoding=True)(examples)
    assert not {"text_keys", "text_languages"} & set(plain)
    corpus = load_corpora(["wmt-newstest-multiway"], data_dir, max_lines=40)
    sampler = MultiwayBatchSampler(sentence_lengths(corpus, tokenizer), 600, seed=0, num_batches=1)
    collate = TranslationCollator(tokenizer, with_text_keys=True)
    batch = next(iter(DataLoader(ParallelExamples(corpus), batch_sampler=sampler, collate_fn=collate)))
    assert batch["text_keys"].shape == batch["input_ids"].shape[:1]
    # one key per distinct sentence: rows are equal exactly where their tokens are
    same_tokens = (batch["input_ids"][:, None] == batch["input_ids"][None]).all(-1)
    assert torch.equal(batch["text_keys"][:, None] == batch["text_keys"][None], same_tokens)
    assert len(set(batch["text_keys"].tolist())) > 2
    # each row's language: the language whose text it is
    texts = {text_key(ex[lang]): lang for ex in (corpus[i] for i in range(len(corpus))) for lang in ex if ex.get(lang)}
    assert batch["text_languages"].tolist() == language_keys([texts[k] for k in batch["text_keys"].tolist()]).tolist()
    assert len(set(batch["text_languages"].tolist())) > 1


def batch_of(tokenizer, sources, targets, pair=("de", "en")):
    examples = [{"src": s, "tgt": t, "src_lang": pair[0], "tgt_lang": pair[1]} for s, t in zip(sources, targets)]
    return TranslationCollator(tokenizer, with_target_encoding=True, with_text_keys=True)(examples)


TRANSLATE_KEYS = ("input_ids", "attention_mask", "labels", "tgt_lang", "tgt_input_ids", "tgt_attention_mask")


def without_memory_keys(batch: dict) -> dict:
    return {k: v for k, v in batch.items() if k not in ("text_keys", "text_languages")}


def test_model_fills_the_memory_in_training_only(tokenizer, tiny_tlaser_kwargs):
    torch.manual_seed(0)
    kwargs = {**tiny_tlaser_kwargs, "align_loss_weight": 1.0, "distance_beta": 0.0}
    plain = TLaserForTranslation(TLaserConfig(**kwargs)).train()
    model = TLaserForTranslation(TLaserConfig(**kwargs, negative_memory_size=6)).train()
    model.load_state_dict(plain.state_dict())
    first = batch_of(tokenizer, ["Ein Haus.", "Eine Katze.", "Ein Hund."], ["A house.", "A cat.", "A dog."])
    # an empty memory adds nothing: the first batch's loss is the plain model's
    out = model(**first)
    torch.testing.assert_close(out.loss, plain(**without_memory_keys(first)).loss)
    assert len(model.negative_memory) == 6  # 3 sources and 3 targets
    assert model.negative_memory.keys[:, 0].tolist() == first["text_keys"].tolist()
    assert model.negative_memory.keys[:, 2].tolist() == first["text_languages"].tolist()
    second = batch_of(tokenizer, ["Ein Baum.", "Ein Hund."], ["A tree.", "A dog."])
    before = model.negative_memory.vectors.clone()
    model.eval()
    with torch.no_grad():
        evaluated = model(**second)
    torch.testing.assert_close(model.negative_memory.vectors, before)  # evaluation writes nothing
    model.train()
    plain.train()
    assert evaluated.loss_align > plain(**without_memory_keys(second)).loss_align
    model(**second).loss.backward()  # fp32: the product with the full memory is saved for the backward pass
    assert int(model.negative_memory.position) == 4  # 4 new rows, over the oldest
    third = model(**first)
    third.loss.backward()  # the memory overwritten after this forward must not break its backward
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
    with pytest.raises(ValueError, match="text_keys"):
        model(**without_memory_keys(second))
    with pytest.raises(ValueError, match="text_languages"):
        model(**{k: v for k, v in second.items() if k != "text_languages"})
    with pytest.raises(ValueError, match="align_loss_weight"):
        TLaserConfig(**tiny_tlaser_kwargs, negative_memory_size=4, align_loss_weight=0.0)
    with pytest.raises(ValueError, match="negative_memory_size > 0"):
        TLaserConfig(**tiny_tlaser_kwargs, negative_memory_same_language=True)


@pytest.mark.parametrize("same_language", [False, True])
def test_same_language_memory_keeps_only_the_language_each_direction_must_find(
    tokenizer, tiny_tlaser_kwargs, same_language
):
    torch.manual_seed(0)
    kwargs = {**tiny_tlaser_kwargs, "align_loss_weight": 1.0, "distance_beta": 0.0}
    config = TLaserConfig(**kwargs, negative_memory_size=8, negative_memory_same_language=same_language)
    model = TLaserForTranslation(config).train()
    model(**batch_of(tokenizer, ["Ein Haus.", "Eine Katze.", "Ein Hund."], ["A house.", "A cat.", "A dog."]))
    # the memory: entries 0-2 German, 3-5 English
    model.eval()
    spanish = batch_of(tokenizer, ["Un arbre.", "Une porte."], ["Un árbol.", "Una puerta."], ("fr", "es"))
    english = batch_of(tokenizer, ["Une maison.", "Un chien."], ["A tree.", "A door."], ("fr", "en"))
    keep_english = torch.tensor([[True] * 3 + [False] * 3] * 2)
    nothing = torch.ones(2, 6, dtype=torch.bool)
    # a -> b finds b among b's language; b -> a finds French, which the memory lacks
    for batch, mask_ab in ((spanish, nothing), (english, keep_english)):
        with torch.no_grad():
            got = model(**batch).loss_align
            _, vectors, pairs = model.translate(**{k: v for k, v in batch.items() if k in TRANSLATE_KEYS})
        mask_ba = nothing if same_language else torch.zeros(2, 6, dtype=torch.bool)
        mask_ab = mask_ab if same_language else mask_ba
        memory = model.negative_memory.vectors
        want = hand_loss(vectors[pairs[:, 0]], vectors[pairs[:, 1]], memory=memory, mask=mask_ab, mask_ba=mask_ba)
        assert got.item() == pytest.approx(want / 2, rel=1e-4)


def test_checkpoint_keeps_the_memory_for_the_resumed_run(tmp_path):
    model = SimpleNamespace(config=SimpleNamespace(negative_memory_size=4), device=torch.device("cpu"))
    model.negative_memory = NegativeMemory(4)
    keys = torch.tensor([1, 2, 3])
    model.negative_memory.add(torch.randn(3, 5), keys, keys + 3, torch.tensor([7] * 3))
    args = SimpleNamespace(output_dir=str(tmp_path), process_index=0)
    NegativeMemoryCallback(None).on_save(args, SimpleNamespace(global_step=7), None, model=model)
    saved = tmp_path / "checkpoint-7" / MEMORY_STATE.format(rank=0)
    assert saved.is_file()
    resumed = SimpleNamespace(config=model.config, device=torch.device("cpu"))
    NegativeMemoryCallback(tmp_path / "checkpoint-7").on_train_begin(args, None, None, model=resumed)
    for name, value in model.negative_memory.state().items():
        torch.testing.assert_close(resumed.negative_memory.state()[name], value)
    # a checkpoint of the memory before it kept languages: its entries get language 0, which no language has
    older = {**model.negative_memory.state(), "keys": model.negative_memory.keys[:, :2]}
    resumed.negative_memory.load_state(older)
    assert resumed.negative_memory.keys.tolist() == [[1, 4, 0], [2, 5, 0], [3, 6, 0]]
    assert resumed.negative_memory.other_language(language_keys(["de", "en"])).all()


def test_model_card_names_the_levers():
    from hf_tlaser.hub.cards import translation_objective

    plain = translation_objective({"align_loss_weight": 1.0})
    assert "alignment loss (weight 1.0, per pair)" in plain and "margin" not in plain and "memory" not in plain
    levers = translation_objective({"align_loss_weight": 1.0, "align_margin": 0.3, "negative_memory_size": 4096})
    assert "additive margin 0.3" in levers and "4096 negatives of earlier batches" in levers
    assert "language it must find" not in levers
    same = translation_objective(
        {"align_loss_weight": 1.0, "negative_memory_size": 8, "negative_memory_same_language": True}
    )
    assert "(each direction: those in the language it must find)" in same

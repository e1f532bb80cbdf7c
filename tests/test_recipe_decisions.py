"""The four recipe decisions of docs/training.md ("Recipe decisions"), each pinned: LDT's step schedule, the batch
composition of the contrastive members, cNV's plain-norm distance cost, and Yu 2018's L_sim without dropout."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn
from transformers import TrainingArguments

from hf_tlaser.data import PairBatchSampler, resolve_corpora
from hf_tlaser.data.batching import PACKINGS
from hf_tlaser.data.source_datasets import stream_source
from hf_tlaser.data.streaming import StreamingPairBatches
from hf_tlaser.errors import UsageError
from hf_tlaser.models.cnv import CNVConfig, cnv_distance_loss
from hf_tlaser.models.yu2018 import Yu2018Config, Yu2018ForTranslation
from hf_tlaser.training import LaserTrainer, RunSpec, get_preset
from hf_tlaser.training.resolve import decide
from hf_tlaser.training.trainer import step_schedule

# --- 1. LDT: the paper's schedule (Mao et al. 2021, sec. 4.1) ----------------------------------------------------


def lrs(schedule: torch.optim.lr_scheduler.LRScheduler, updates: int) -> list[float]:
    out = []
    for _ in range(updates):
        out.append(schedule.get_last_lr()[0])
        schedule.optimizer.step()
        schedule.step()
    return out


def test_step_schedule_warms_up_holds_then_divides_by_ten():
    optimizer = torch.optim.Adam([nn.Parameter(torch.zeros(1))], lr=1e-3)
    lr = lrs(step_schedule(optimizer, warmup_updates=2000, warmup_init_lr=0.0, step_at=3000), 3001)
    assert lr[1000] == pytest.approx(5e-4)
    assert lr[2000] == lr[2999] == pytest.approx(1e-3)  # held, where inverse-sqrt would be at 8.2e-4
    assert lr[3000] == pytest.approx(1e-4)


def test_ldt_presets_schedule():
    paper = get_preset("ldt", "paper").recipe
    assert (paper.lr_schedule, paper.lr_step_epochs, paper.warmup_updates) == ("step", 3.0, 2000)
    assert get_preset("ldt", "tiny").recipe.lr_schedule == "step"
    assert get_preset("ctlaser", "paper").recipe.lr_schedule == "inverse_sqrt"  # fairseq's, T-LASER's footnote 6


def test_trainer_steps_down_after_the_recipe_epochs(tmp_path):
    """100 micro-batches per epoch, 2 per update: 50 updates an epoch, so 3 epochs step down at update 150."""
    args = TrainingArguments(
        output_dir=str(tmp_path), warmup_steps=10, gradient_accumulation_steps=2, learning_rate=1e-3,
        use_cpu=True, report_to="none",
    )  # fmt: skip
    sampler = [[i] for i in range(100)]
    trainer = LaserTrainer(
        model=nn.Linear(2, 2), args=args, batch_sampler=sampler, lr_schedule="step", lr_step_epochs=3.0
    )
    trainer.create_optimizer()
    lr = lrs(trainer.create_scheduler(1000), 151)
    assert lr[149] == pytest.approx(1e-3) and lr[150] == pytest.approx(1e-4)


def test_step_schedule_is_refused_with_streaming():
    with pytest.raises(UsageError, match="--lr-schedule step counts epochs"):
        decide(RunSpec(output_dir="x", model="ldt", streaming=True))
    spec = RunSpec(output_dir="x", model="ldt", streaming=True, lr_schedule="inverse_sqrt")
    assert decide(spec).recipe.lr_schedule == "inverse_sqrt"
    with pytest.raises(UsageError, match="--batch-composition sorted: expected one of"):
        decide(RunSpec(output_dir="x", batch_composition="sorted"))


# --- 2. batch composition of the in-batch negatives --------------------------------------------------------------


def length_spread(composition: str) -> tuple[float, float]:
    """(mean within-batch spread max - min of the longer side, mean rows per micro-batch) over one epoch."""
    rng = np.random.default_rng(0)
    n = 4000
    lengths = {"de": rng.integers(3, 41, n), "en": rng.integers(3, 41, n)}
    sampler = PairBatchSampler(lengths, 1000, [("de", "en")], seed=1, composition=composition)
    longer = np.maximum(lengths["de"], lengths["en"])
    batches = [[row for row, *_ in batch] for batch in sampler]
    return float(np.mean([np.ptp(longer[b]) for b in batches])), float(np.mean([len(b) for b in batches]))


def test_batch_length_spread_under_each_composition():
    sorted_spread, sorted_rows = length_spread("length")
    random_spread, random_rows = length_spread("random")
    assert sorted_spread <= 1.0  # neighbours in length: every negative as long as its positive
    assert random_spread >= 25.0  # lengths 3..40: negatives of any length
    assert random_rows < 0.75 * sorted_rows  # the padding cost: fewer pairs under the same token budget


def test_streamed_batches_follow_the_composition(data_dir, tokenizer):
    """--streaming packs its chunks the same way: the same pairs, sorted neighbours or any lengths."""
    (source,) = resolve_corpora(["wmt-newstest-multiway"], data_dir)
    spreads, pairs = {}, {}
    for composition in PACKINGS:
        stream = StreamingPairBatches(
            stream_source(source, 120), [("de", "en")], tokenizer, 600, buffer_size=5000, composition=composition
        )
        batches = []
        while stream.streams[0].cycle == 0:
            batches.append(stream.streams[0].next_batch())
        lengths = [[len(tokenizer(item["src"])["input_ids"]) for item in batch] for batch in batches]
        spreads[composition] = np.mean([max(b) - min(b) for b in lengths])
        pairs[composition] = sorted((item["src"], item["tgt"]) for batch in batches for item in batch)
    assert pairs["length"] == pairs["random"]
    assert spreads["random"] > 3 * spreads["length"]


@pytest.mark.parametrize("model", ["ldt", "ctlaser"])
def test_contrastive_presets_composition(model):
    assert get_preset(model, "tiny").recipe.batch_composition == "length"


# --- 3. cNV: the hinge of eq. 7 with plain norms cannot be switched off by scaling P ------------------------------


@pytest.mark.parametrize("scale", [0.1, 1.0, 10.0, 1000.0])
def test_cnv_distance_term_stays_positive_when_p_is_scaled(scale):
    """Pairs a little closer than their negatives: with plain norms the term is the same at every scale of P (up to
    the +1 of eq. 7's normaliser); squared norms switch it off once P is inflated, with nothing aligned more."""
    torch.manual_seed(0)
    p_a = torch.randn(8, 4, 16)
    p_b = p_a + 2 * torch.randn(8, 4, 16)
    negatives = torch.stack([torch.roll(torch.arange(8), k) for k in (1, 2, 3)])
    alpha = 2 * 16**0.5
    plain = cnv_distance_loss(p_a * scale, p_b * scale, negatives, alpha).total.item()
    reference = cnv_distance_loss(p_a * 1000, p_b * 1000, negatives, alpha).total.item()
    assert reference > 0 and plain == pytest.approx(reference, rel=0.05 if scale >= 1 else 0.5)
    squared = [cnv_distance_loss(p_a * s, p_b * s, negatives, alpha, squared=True).total.item() for s in (0.1, 10)]
    assert squared[0] > 0 and squared[1] == 0.0


def test_cnv_default_is_the_plain_norm():
    assert CNVConfig().distance_squared is False


# --- 4. Yu 2018: L_sim without the dropout floor -----------------------------------------------------------------


def yu_batch(sources: list[list[int]], targets: list[list[int]]) -> dict:
    def encoder(rows):
        rows = [[3, *r, 2] for r in rows]
        width = max(map(len, rows))
        ids = torch.tensor([r + [0] * (width - len(r)) for r in rows])
        return ids, ids.ne(0).long()

    ids, mask = encoder(sources)
    tgt_ids, tgt_mask = encoder(targets)
    width = max(len(t) for t in targets) + 1
    labels = torch.tensor([[*t, 2] + [-100] * (width - len(t) - 1) for t in targets])
    return dict(
        input_ids=ids, attention_mask=mask, tgt_input_ids=tgt_ids, tgt_attention_mask=tgt_mask, labels=labels,
        tgt_lang="en", src_lang="de",
    )  # fmt: skip


def tiny_yu(**overrides) -> Yu2018ForTranslation:
    torch.manual_seed(0)
    config = Yu2018Config(
        vocab_size=60, embed_dim=16, encoder_hidden_size=8, hidden_size=12, decoder_hidden_size=20, dropout=0.3,
        **overrides,
    )  # fmt: skip
    return Yu2018ForTranslation(config).train()


SENTENCES = [[10, 11, 12], [13, 14], [15, 16, 17, 18]]


def test_yu_similarity_loss_of_identical_inputs_is_zero_in_train_mode():
    model = tiny_yu()
    assert model.config.similarity_dropout is False
    out = model(**yu_batch(SENTENCES, SENTENCES))
    assert out.loss_sim.item() == 0.0
    out.loss.backward()  # the translation losses still train through the dropped-out pass
    assert model.encoder.lstm.weight_hh_l0.grad.abs().sum() > 0


def test_yu_similarity_loss_with_dropout_has_a_floor():
    model = tiny_yu(similarity_dropout=True)
    out = model(**yu_batch(SENTENCES, SENTENCES))
    assert out.loss_sim.item() > 0.0


def test_yu_similarity_loss_is_the_dropout_free_distance():
    model = tiny_yu()
    batch = yu_batch(SENTENCES, [[20, 21], [22, 23, 24], [25]])
    out = model(**batch)
    with torch.no_grad():
        clean = model.eval()
        h_s = clean.encoder(batch["input_ids"], batch["attention_mask"]).pooler_output
        h_t = clean.encoder(batch["tgt_input_ids"], batch["tgt_attention_mask"]).pooler_output
    torch.testing.assert_close(out.loss_sim, (h_s - h_t).pow(2).sum(-1).mean(), atol=1e-6, rtol=1e-5)

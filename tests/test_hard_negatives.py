"""Hard negatives (issue 53, item 2): ``--batch-composition cluster`` packs the rows whose pivot sentences are near in a
model's space into the same micro-batches; pairs that share a sentence are never each other's negatives."""

from __future__ import annotations

import logging
import re
import subprocess
import sys

import numpy as np
import pytest
import torch

from hf_tlaser.data import PairBatchSampler, TranslationCollator
from hf_tlaser.data.collator import merge_shared_texts
from hf_tlaser.models.common.losses import align_loss, sample_negatives
from hf_tlaser.training.cli import main
from hf_tlaser.training.hard_negatives import cluster_rows, in_batch_cosine, pool_rows
from tests.test_distill import distill_args
from tests.tiny_models import make_st_model

N = 240


def sampler_of(composition: str, seed: int = 0) -> PairBatchSampler:
    rng = np.random.default_rng(0)
    lengths = {"de": rng.integers(3, 20, N), "en": rng.integers(3, 20, N)}
    return PairBatchSampler(lengths, 120, [("de", "en")], seed=seed, composition=composition)


def test_cluster_composition_packs_each_cluster_together_and_draws_every_clustered_row_once():
    sampler = sampler_of("cluster")
    with pytest.raises(ValueError, match="set_clusters"):
        sampler.plan()
    (rows,) = sampler.stream_rows().values()
    clusters = (rows // 40).astype(np.int64)  # six clusters of 40 rows
    clusters[rows % 40 == 0] = -1  # six rows left out of the pool
    sampler.set_clusters({("de", "en"): clusters})
    cycle = sampler._cycle(0, 0, 0)
    drawn = sorted(row for batch in cycle for row in batch)
    assert drawn == sorted(rows[clusters >= 0].tolist())  # every clustered row once, no row of id -1
    spans = [len({row // 40 for row in batch}) for batch in cycle]
    assert max(spans) <= 2 and np.mean(spans) < 1.5  # a micro-batch holds one cluster, or the end of one and the next
    plain = sampler_of("length")._cycle(0, 0, 0)
    assert np.mean([len({row // 40 for row in batch}) for batch in plain]) > 3  # by length: rows of every cluster
    assert sampler_of("cluster", seed=1).num_batches == sampler_of("length", seed=1).num_batches
    with pytest.raises(ValueError, match="cluster ids for"):
        sampler.set_clusters({("de", "en"): clusters[:-1]})
    with pytest.raises(ValueError, match="no row has a cluster"):
        sampler_of("cluster").set_clusters({("de", "en"): np.full(N, -1)})


def test_cluster_rows_finds_separated_groups_and_is_the_same_for_a_seed():
    rng = np.random.default_rng(0)
    centres = np.eye(16)[:4] * 10
    vectors = np.concatenate([centre + rng.normal(size=(30, 16)) for centre in centres])
    ids = cluster_rows(vectors, size=30, seed=5)
    assert len(set(ids.tolist())) == 4
    for group in range(4):  # each blob is one cluster
        assert len(set(ids[group * 30 : (group + 1) * 30].tolist())) == 1
    assert np.array_equal(ids, cluster_rows(vectors, size=30, seed=5))
    assert not cluster_rows(vectors[:50], size=30, seed=5).any()  # fewer than two clusters' rows: one cluster


def test_pool_rows_is_a_fixed_sample_in_order():
    rows = np.arange(100, 200)
    pool = pool_rows(rows, 10, seed=3)
    assert len(pool) == 10 and np.all(np.diff(pool) > 0) and set(pool) <= set(rows)
    assert np.array_equal(pool, pool_rows(rows, 10, seed=3)) and not np.array_equal(pool, pool_rows(rows, 10, 4))
    assert pool_rows(rows, None, seed=3) is rows and pool_rows(rows, 500, seed=3) is rows


def test_in_batch_cosine_is_the_mean_over_distinct_rows():
    a = np.array([[1.0, 0.0], [0.0, 2.0], [3.0, 3.0]])
    pairs = [(0, 1, 0.0), (0, 2, 2**-0.5), (1, 2, 2**-0.5)]
    want = (2 * sum(c for _, _, c in pairs) + 2 * 1.0) / (6 + 2)  # the second batch: two equal directions
    assert in_batch_cosine([a, np.array([[1.0, 1.0], [2.0, 2.0]])]) == pytest.approx(want)


def test_pairs_that_share_a_sentence_share_a_group(tokenizer):
    assert merge_shared_texts(range(5), [("a", "x"), ("b", "y"), ("c", "x"), ("d", "b"), ("e", "z")]) == [0, 1, 0, 1, 4]
    assert merge_shared_texts([0, 0, 1, 1, 2], [("a", "x"), ("a", "y"), ("b", "q"), ("c", "y"), ("d", "e")]) == [
        0, 0, 0, 0, 2,
    ]  # fmt: skip
    # a chain of shared texts joins three pairs, whatever order they come in
    assert merge_shared_texts(range(3), [("a", "b"), ("c", "d"), ("b", "c")]) == [0, 0, 0]
    examples = [
        {"src": src, "tgt": tgt, "src_lang": "de", "tgt_lang": "en"}
        for src, tgt in [("Danke.", "Thank you."), ("Ein Haus.", "A house."), ("Vielen Dank.", "Thank you.")]
    ]
    batch = TranslationCollator(tokenizer, with_target_encoding=True)(examples)
    assert batch["group_index"].tolist() == [0, 1, 0]
    # the two "Thank you." pairs are not each other's negatives
    torch.manual_seed(0)
    p_b = torch.randn(3, 8)
    p_b[2] = p_b[0]  # the same English sentence, the same vector
    p_a = p_b + 0.01 * torch.randn(3, 8)  # a model that has learnt the pairs
    groups = batch["group_index"]
    # counted as negatives, a copy of the positive costs each of the two pairs about log 2 in each direction
    assert align_loss(p_a, p_b) - align_loss(p_a, p_b, groups=groups) > 2 * np.log(2) - 1e-4
    negatives = sample_negatives(3, 50, groups=groups)
    assert not ((negatives[:, 0] == 2).any() or (negatives[:, 2] == 0).any())


@pytest.fixture(scope="module")
def cluster_model(tmp_path_factory, tokenizer):
    return make_st_model(tmp_path_factory.mktemp("cluster16"), tokenizer)


def test_a_run_with_hard_negative_batches_logs_how_near_they_are(tmp_path, tokenizer_dir, cluster_model, caplog):
    caplog.set_level(logging.INFO)
    out = tmp_path / "run"
    extra = ["--batch-composition", "cluster", "--cluster-model", str(cluster_model), "--cluster-size", "4"]
    args = distill_args(out, tokenizer_dir, "ctlaser", *extra, "--teacher-cache", str(tmp_path / "cache"))
    assert main(args) == 0
    (line,) = [r.getMessage() for r in caplog.records if r.getMessage().startswith("hard negatives:")]
    clustered, drawn = map(float, re.findall(r"micro-batch (-?[\d.]+) .* streams: (-?[\d.]+)", line)[0])
    assert clustered > drawn + 0.05, line  # the clusters' micro-batches are nearer than random ones
    assert (tmp_path / "cache").is_dir() and (out / "model.safetensors").is_file()
    assert "hard-negative batches" in " ".join(r.getMessage() for r in caplog.records)
    # a second run reads the cached vectors and plans the same micro-batches
    caplog.clear()
    assert main([str(tmp_path / "again") if arg == str(out) else arg for arg in args]) == 0
    (again,) = [r.getMessage() for r in caplog.records if r.getMessage().startswith("hard negatives:")]
    assert re.sub(r"\d+ s\b", "", again) == re.sub(r"\d+ s\b", "", line)
    assert any("hits" in r.getMessage() and " 0 misses" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--batch-composition", "cluster"], "--cluster-model SPEC"),
        (["--cluster-model", "x"], "only with --batch-composition cluster"),
        (["--batch-composition", "cluster", "--cluster-model", "x", "--cluster-size", "1"], "at least 2 rows"),
        (["--batch-composition", "cluster", "--cluster-model", "x", "--cluster-pool", "8"], "at least --cluster-size"),
        (["--batch-composition", "cluster", "--cluster-model", "x", "--streaming"], "not with --streaming"),
        (["--batch-composition", "cluster", "--cluster-model", "/nonexistent/model"], "--cluster-model"),
    ],
)
def test_mistakes_get_one_line_before_any_data_is_read(tmp_path, tokenizer_dir, extra, message, capsys):
    assert main(distill_args(tmp_path / "run", tokenizer_dir, "ctlaser", *extra)) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert not (tmp_path / "run" / "model.safetensors").exists()


def test_cnv_refuses_the_cluster_composition(tmp_path, capsys):
    args = ["--model", "cnv", "--output-dir", str(tmp_path / "run"), "--batch-composition", "cluster"]
    assert main(args) == 2
    assert "--batch-composition cluster is an option of --model" in capsys.readouterr().err  # before any file


def test_a_plain_run_imports_the_training_path_without_faiss():
    """faiss is the cluster composition's own need: the GPU machine's image lacks it, and a plain run must still start
    there (a module-level import stopped all six runs of one GPU call, 2026-11-28)."""
    code = "import sys; sys.modules['faiss'] = None; import hf_tlaser.training.cli, hf_tlaser.training.hard_negatives"
    subprocess.run([sys.executable, "-c", code], check=True)

"""xsim / P@1 / mining / kNN backends / local evaluate modules."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from hf_tlaser.bitext.knn import faiss_available, knn
from hf_tlaser.bitext.mining import mine
from hf_tlaser.evaluation.metrics import load_metric
from hf_tlaser.evaluation.retrieval import precision_at_1, xsim, xsim_both, xsim_matrix

S3 = 1 / np.sqrt(3)
# Sources are the unit axes; target 0 is a hub (equally close to every source), target 1 is a poor
# translation of source 1 that is less similar to it than the hub is.
HUB_SRC = np.eye(3, dtype=np.float32)
HUB_TGT = np.array([[S3, S3, S3], [0, 0.5, -np.sqrt(0.75)], [0, 0, 1]], dtype=np.float32)
# k=2 neighbourhood means: sources (x -> y) and targets (y -> x), from the cosine table
FWD_MEAN = np.array([S3 / 2, (S3 + 0.5) / 2, (1 + S3) / 2])
BWD_MEAN = np.array([S3, (0.5 + 0) / 2, (1 + 0) / 2])


@pytest.mark.parametrize(("margin", "expected"), [("absolute", 100 / 3), ("distance", 0.0), ("ratio", 0.0)])
def test_xsim_hub_margins(margin, expected):
    assert xsim(HUB_SRC, HUB_TGT, margin=margin, k=2) == pytest.approx(expected)


def test_xsim_torch_input_and_normalisation():
    src = torch.from_numpy(HUB_SRC) * 5  # scale must not matter
    assert xsim(src, HUB_TGT * 3, margin="ratio", k=2) == 0.0
    assert xsim(src, HUB_TGT, margin="absolute", k=2) == pytest.approx(100 / 3)


def _noisy_pair(n=40, dim=16, noise=0.1, seed=0):
    rng = np.random.default_rng(seed)
    src = rng.normal(size=(n, dim)).astype(np.float32)
    return src, (src + noise * rng.normal(size=(n, dim))).astype(np.float32)


def test_xsim_both_and_matrix():
    src, tgt = _noisy_pair()
    assert xsim_both(src, tgt) == (0.0, 0.0)
    shuffled = tgt.copy()
    shuffled[[0, 1]] = shuffled[[1, 0]]
    langs, matrix = xsim_matrix({"en": src, "de": tgt, "fr": shuffled}, margin="absolute")
    assert langs == ["en", "de", "fr"]
    assert np.isnan(np.diag(matrix)).all()
    assert matrix[0, 1] == 0.0 and matrix[0, 2] == pytest.approx(5.0) and matrix[2, 1] == pytest.approx(5.0)


def test_precision_at_1_distractors():
    src, tgt = _noisy_pair(n=20)
    assert precision_at_1(src, tgt) == 100.0
    # exact copies of three sources are better matches than their noisy translations
    assert precision_at_1(src, tgt, distractors=src[:3]) == pytest.approx(85.0)
    assert precision_at_1(src, tgt, distractors=-src) == 100.0


def test_bad_inputs():
    with pytest.raises(ValueError, match="valid: absolute, distance, ratio"):
        xsim(HUB_SRC, HUB_TGT, margin="cosine")
    with pytest.raises(ValueError, match="tgt_emb has dimension 2"):
        xsim(HUB_SRC, HUB_TGT[:, :2])
    with pytest.raises(ValueError, match="src_emb has 3 rows but tgt_emb has 2"):
        xsim(HUB_SRC, HUB_TGT[:2])
    with pytest.raises(ValueError, match="distractors has dimension 2"):
        precision_at_1(HUB_SRC, HUB_TGT, distractors=np.ones((2, 2)))
    with pytest.raises(ValueError, match="valid: fwd, bwd, max, intersect"):
        mine(HUB_SRC, HUB_TGT, retrieval="both")


def test_mine_hub_scores():
    pairs = mine(HUB_SRC, HUB_TGT, k=2, retrieval="fwd", margin="ratio")
    cos = {(0, 0): S3, (1, 1): 0.5, (2, 2): 1.0}
    expected = sorted(((c / ((FWD_MEAN[i] + BWD_MEAN[j]) / 2), i, j) for (i, j), c in cos.items()), key=lambda p: -p[0])
    assert [(i, j) for _, i, j in pairs] == [(i, j) for _, i, j in expected]
    assert np.allclose([s for s, _, _ in pairs], [s for s, _, _ in expected], atol=1e-5)
    hub_score = next(s for s, i, j in pairs if (i, j) == (0, 0))
    assert hub_score == pytest.approx(4 / 3, abs=1e-5)  # S3 / ((S3/2 + S3) / 2)


def _mining_example():
    src = np.eye(4, dtype=np.float32)[:3]
    tgt = np.array([[1, 0.1, 0, 0], [0, 1, 0, 0], [0.2, 0, 1, 0], [0.3, 0.2, 0.1, 0.9]], dtype=np.float32)
    return src, tgt


def test_mine_retrieval_modes(tmp_path):
    src, tgt = _mining_example()
    ids = {r: [(i, j) for _, i, j in mine(src, tgt, k=2, retrieval=r)] for r in ("fwd", "bwd", "intersect", "max")}
    assert sorted(ids["fwd"]) == [(0, 0), (1, 1), (2, 2)]
    assert sorted(ids["bwd"]) == [(0, 0), (0, 3), (1, 1), (2, 2)]  # the extra target picks source 0
    assert sorted(ids["intersect"]) == [(0, 0), (1, 1), (2, 2)]
    assert sorted(ids["max"]) == [(0, 0), (1, 1), (2, 2)]  # source 0 is used once, by its best pair
    bwd = mine(src, tgt, k=2, retrieval="bwd")
    weakest = bwd[-1][0]
    assert (bwd[-1][1], bwd[-1][2]) == (0, 3)
    kept = mine(src, tgt, k=2, retrieval="bwd", threshold=weakest)
    assert len(kept) == 3 and all(s > weakest for s, _, _ in kept)
    out = tmp_path / "mined.tsv"
    pairs = mine(src, tgt, ["a", "b", "c"], ["A", "B", "C", "D"], k=2, output=out)
    lines = out.read_text(encoding="utf-8").split("\n")
    assert lines[-1] == "" and len(lines) == 4
    assert [line.split("\t")[1:] for line in lines[:-1]] == [["abc"[i], "ABCD"[j]] for _, i, j in pairs]
    assert float(lines[0].split("\t")[0]) == pytest.approx(pairs[0][0], abs=1e-6)


@pytest.mark.skipif(not faiss_available(), reason="faiss not installed")
def test_faiss_and_torch_knn_agree():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(200, 32)).astype(np.float32)
    y = rng.normal(size=(300, 32)).astype(np.float32)
    sims_f, ids_f = knn(x, y, 5, backend="faiss")
    sims_t, ids_t = knn(x, y, 5, backend="torch", batch_size=64)
    assert (ids_f == ids_t).all()
    assert np.allclose(sims_f, sims_t, atol=1e-4)
    src, tgt = _noisy_pair(n=100, noise=0.8, seed=2)
    for margin in ("absolute", "ratio"):
        assert xsim(src, tgt, margin, backend="faiss") == xsim(src, tgt, margin, backend="torch")
    mined_f = mine(src, tgt, backend="faiss")
    mined_t = mine(src, tgt, backend="torch")
    assert [p[1:] for p in mined_f] == [p[1:] for p in mined_t]
    assert np.allclose([p[0] for p in mined_f], [p[0] for p in mined_t], atol=1e-5)


def test_evaluate_modules_offline(monkeypatch):
    import evaluate

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(evaluate.config, "HF_EVALUATE_OFFLINE", True, raising=False)
    monkeypatch.setattr(evaluate.config, "HF_HUB_OFFLINE", True, raising=False)
    metric = load_metric("xsim")
    for margin, errors in (("absolute", 1), ("ratio", 0)):
        result = metric.compute(predictions=HUB_SRC.tolist(), references=HUB_TGT.tolist(), margin=margin, k=2)
        assert result == {"xsim": pytest.approx(xsim(HUB_SRC, HUB_TGT, margin, k=2)), "errors": errors, "n": 3}
    accuracy = load_metric("accuracy")
    assert accuracy.compute(predictions=[0, 1, 2, 2], references=[0, 1, 1, 2]) == {"accuracy": 0.75}
    with pytest.raises(ValueError, match="valid: xsim, accuracy"):
        load_metric("bleu")


def test_sparse_embeddings_match_dense():
    """TF-IDF vectors stay sparse: kNN, xsim and mining give the dense answers."""
    from scipy import sparse

    src, tgt = _noisy_pair(n=60, noise=0.9, seed=3)
    src[src < 0.5] = 0.0  # mostly zeros, like TF-IDF
    tgt[tgt < 0.5] = 0.0
    dense = knn(src, tgt, 4, backend="torch")
    sparse_result = knn(sparse.csr_matrix(src), sparse.csr_matrix(tgt), 4, batch_size=7)
    assert (dense[1] == sparse_result[1]).all() and np.allclose(dense[0], sparse_result[0], atol=1e-5)
    for margin in ("absolute", "ratio"):
        assert xsim(sparse.csr_matrix(src), sparse.csr_matrix(tgt), margin) == xsim(src, tgt, margin)
    langs, matrix = xsim_matrix({"en": sparse.csr_matrix(src), "de": sparse.csr_matrix(tgt)}, margin="ratio")
    assert matrix[0, 1] == xsim(src, tgt, "ratio")


def test_neighbour_lists_and_scores_equal_the_per_pair_search():
    """``score_retrieval`` computes each kNN list once (one sparse product per pair): bit for bit the lists, xsim and
    mining F1 of searching every pair on its own, for TF-IDF rows (sorted), rows in no order and dense rows."""
    from hf_tlaser.bitext.knn import NeighbourLists, _one_product, l2_normalize
    from hf_tlaser.evaluation.lexical import tfidf_char_embed
    from hf_tlaser.evaluation.mining import mining_f1
    from hf_tlaser.evaluation.suite import score_retrieval

    words = ["house", "haus", "maison", "casa", "dom", "talo", "ev", "fang"]
    rng = np.random.default_rng(0)
    texts = {lang: [" ".join(rng.choice(words, 5)) + f" {lang}{i}" for i in range(30)] for lang in ("a", "b", "c")}
    emb = tfidf_char_embed([t for lines in texts.values() for t in lines], sparse=True)
    sets = {lang: emb[30 * i : 30 * (i + 1)] for i, lang in enumerate(texts)}
    shuffled = sets["c"].copy()  # the same vectors, each row's entries in a random order
    for start, stop in zip(shuffled.indptr[:-1], shuffled.indptr[1:]):
        order = start + rng.permutation(stop - start)
        shuffled.indices[start:stop], shuffled.data[start:stop] = shuffled.indices[order], shuffled.data[order]
    shuffled.has_sorted_indices = False
    cases = {"tfidf": sets, "no order": {**sets, "c": shuffled}, "dense": {k: v.toarray() for k, v in sets.items()}}
    assert _one_product(l2_normalize(sets["a"]), l2_normalize(sets["b"]), 4096)
    assert not _one_product(l2_normalize(sets["a"]), l2_normalize(shuffled), 4096)
    for name, by_lang in cases.items():
        lists = NeighbourLists(by_lang, k=4, backend="torch")
        result = score_retrieval({"set": by_lang}, backend="torch")
        for i, a in enumerate(by_lang):
            for j, b in enumerate(by_lang):
                if a != b:
                    sims, ids = knn(l2_normalize(by_lang[a]), l2_normalize(by_lang[b]), 4, backend="torch")
                    assert np.array_equal(lists(a, b)[0], sims) and np.array_equal(lists(a, b)[1], ids), (name, a, b)
                    for margin in ("absolute", "ratio"):
                        expected = xsim(by_lang[a], by_lang[b], margin, backend="torch")
                        assert result.matrices["set"][margin][1][i, j] == expected, (name, a, b, margin)
                    if i < j:
                        expected = mining_f1(by_lang[a], by_lang[b], backend="torch")
                        assert result.mining["set"][f"{a}-{b}"] == expected, (name, a, b)


def test_ratio_margin_without_any_shared_feature_is_not_nan():
    """Sparse lexical vectors of two scripts share nothing: every cosine and every k-NN mean is 0. The ratio margin
    must score such rows 0 (a miss), not 0/0 = NaN, which argmax would take as the best candidate."""
    from hf_tlaser.bitext.margin import margin_candidates

    src = np.eye(6, 12, dtype=np.float32)  # rows use features 0-5
    tgt = np.eye(6, 12, k=6, dtype=np.float32)  # rows use features 6-11: no overlap at all
    with np.errstate(all="raise"):
        fwd, bwd = margin_candidates(src, tgt, k=3, margin="ratio", backend="torch")
    assert np.all(np.isfinite(fwd.scores)) and np.all(np.isfinite(bwd.scores))
    assert np.all(fwd.scores == 0)
    assert xsim(src, tgt, margin="ratio", k=3) == xsim(src, tgt, margin="absolute", k=3)

"""``hf-tlaser mine``: margin scores by hand, retrieval modes, exact vs compressed index, sharded search, duplicates,
threshold, TSV and histogram outputs, and every bad input (one line, exit 2, nothing written)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from hf_tlaser.bitext.index import Rows, SearchPlan, default_index, search
from hf_tlaser.bitext.margin import Candidates
from hf_tlaser.bitext.mining import mine_vectors
from hf_tlaser.bitext.select import (
    PAIR_DTYPE,
    best_first,
    direction_pairs,
    merged_one_to_one,
    select_pairs,
    unique_rows,
)
from hf_tlaser.inference.mine import main
from hf_tlaser.inference.store import StackedRows, write_sidecar

faiss = pytest.importorskip("faiss")
faiss.omp_set_num_threads(1)  # OpenMP threads spin badly on a CPU shared with other jobs


def rows(array: np.ndarray) -> Rows:
    return Rows(np.asarray(array, dtype=np.float32), np.arange(len(array)))


def write_embeddings(path, array: np.ndarray, fingerprint: str = "model-a", lines: int | None = None) -> str:
    """An ``hf-tlaser embed``-style output: ``.npy`` plus its sidecar."""
    array = np.asarray(array, dtype=np.float16)
    np.save(path, array)
    count, dim = array.shape
    meta = dict(model="tiny", fingerprint=fingerprint, dim=dim, count=count, dtype="float16", normalized=False)
    meta.update(input="x.txt", input_lines=lines or count, lines=count, start=0, stop=count, shard=None)
    meta.update(truncated=0, empty=0, prompt=None, precision="fp32", documents=None, hf_tlaser_version="0")
    write_sidecar(path, meta)
    return str(path)


def parallel_corpus(pairs: int, extra: int, dim: int, seed: int = 0, noise: float = 0.3):
    """Source and target vectors where source i translates target ``gold[i]`` (i < pairs); ``extra`` unmatched rows
    on each side. Meanings come from a mixture of 16 topics, as sentence embeddings cluster."""
    rng = np.random.default_rng(seed)
    topics = rng.normal(size=(16, dim))

    def meanings(n: int) -> np.ndarray:
        return topics[rng.integers(16, size=n)] + rng.normal(size=(n, dim))

    meaning = meanings(pairs)
    src = np.concatenate([meaning + noise * rng.normal(size=meaning.shape), meanings(extra)])
    tgt_rows = np.concatenate([meaning + noise * rng.normal(size=meaning.shape), meanings(extra)])
    order = rng.permutation(len(tgt_rows))
    gold = np.argsort(order)[:pairs]  # source i's translation is at target row gold[i]
    return src.astype(np.float32), tgt_rows[order].astype(np.float32), gold


# --- scoring -------------------------------------------------------------------------------------------------------


def hand_margins(x: np.ndarray, y: np.ndarray, k: int, margin: str) -> np.ndarray:
    """LASER's mine_bitexts.py by hand: full cosine matrix, k-NN means both ways, margin of every (x, y)."""
    x = x / np.linalg.norm(x, axis=1, keepdims=True)
    y = y / np.linalg.norm(y, axis=1, keepdims=True)
    cos = x @ y.T
    x_avg = np.sort(cos, axis=1)[:, ::-1][:, :k].mean(axis=1)  # mean of x's k nearest y's
    y_avg = np.sort(cos.T, axis=1)[:, ::-1][:, :k].mean(axis=1)
    avg = (x_avg[:, None] + y_avg[None, :]) / 2
    return {"ratio": cos / avg, "distance": cos - avg, "absolute": cos}[margin]


@pytest.mark.parametrize("margin", ["ratio", "distance", "absolute"])
@pytest.mark.parametrize("index", ["Flat", "IVF2,Flat"])
def test_margin_scores_equal_hand_computation(margin, index):
    x = np.array([[1.0, 0.1, 0.0], [0.2, 1.0, 0.1], [0.0, 0.3, 1.0], [0.5, 0.5, 0.1]])
    y = np.array([[0.9, 0.0, 0.2], [0.1, 1.0, 0.0], [0.1, 0.2, 0.8]])
    expected = hand_margins(x, y, 2, margin)
    plan = SearchPlan(index=index, nprobe=2, train_size=3)
    mined = mine_vectors(rows(x), rows(y), k=2, margin=margin, retrieval="fwd", plan=plan)
    assert len(mined.scores) == 3  # source 3's best target is taken by a better pair
    for score, i, j in zip(mined.scores, mined.src, mined.tgt):
        assert j == np.argmax(expected[i])
        assert score == pytest.approx(expected[i, j], abs=1e-5)
    assert list(mined.scores) == sorted(mined.scores, reverse=True)
    if margin == "ratio":  # by hand: cos(x0, y0) = 0.9713; x0's 2-NN mean (0.9713 + 0.1980) / 2 = 0.5847, y0's
        # (0.9713 + 0.7138) / 2 = 0.8426 (x3 is y0's second neighbour); 0.9713 / ((0.5847 + 0.8426) / 2) = 1.3611
        assert mined.scores[list(mined.src).index(0)] == pytest.approx(1.3611, abs=1e-3)


def test_retrieval_modes_use_each_sentence_once():
    src = np.eye(4, dtype=np.float32)[:3]
    tgt = np.array([[1, 0.1, 0, 0], [0, 1, 0, 0], [0.2, 0, 1, 0], [0.3, 0.2, 0.1, 0.9]], dtype=np.float32)
    pairs = {}
    for mode in ("fwd", "bwd", "intersect", "max"):
        mined = mine_vectors(rows(src), rows(tgt), k=2, retrieval=mode)
        pairs[mode] = sorted(zip(mined.src.tolist(), mined.tgt.tolist()))
    assert pairs["fwd"] == pairs["intersect"] == pairs["max"] == [(0, 0), (1, 1), (2, 2)]
    # bwd: target 3's best source is source 0, already taken by the better (0, 0): dropped, unlike the evaluation mine
    assert pairs["bwd"] == [(0, 0), (1, 1), (2, 2)]
    intersect = mine_vectors(rows(src[[0, 1]]), rows(tgt[[0, 3]]), k=1, retrieval="intersect")
    assert sorted(zip(intersect.src.tolist(), intersect.tgt.tolist())) == [(0, 0)]  # 1 -> 3 is not mutual


def test_threshold_keeps_pairs_above_it():
    src, tgt, _ = parallel_corpus(40, 40, 16)
    everything = mine_vectors(rows(src), rows(tgt))
    cut = float(np.median(everything.scores))
    mined = mine_vectors(rows(src), rows(tgt), threshold=cut)
    assert mined.kept == int(np.sum(everything.scores > cut)) and 0 < mined.kept < len(mined.scores)
    assert (mined.scores[: mined.kept] > cut).all() and (mined.scores[mined.kept :] <= cut).all()


def test_runs_merged_by_score_take_the_pairs_of_one_sorted_list():
    """A staged pipeline's query shards, each sorted alone (ties: many equal scores, and missing candidates at
    -inf), merged and taken one to one give the pairs and order of ``select_pairs`` over all of them."""
    rng = np.random.default_rng(0)
    n_src, n_tgt = 300, 260
    fwd = Candidates(rng.integers(0, n_tgt, (n_src, 3)), np.round(rng.random((n_src, 3)), 1).astype(np.float32))
    bwd = Candidates(rng.integers(0, n_src, (n_tgt, 3)), np.round(rng.random((n_tgt, 3)), 1).astype(np.float32))
    fwd.scores[::7] = -np.inf
    expected = select_pairs(fwd, bwd, "max")
    runs = []
    for direction, candidates, cuts in (("fwd", fwd, [0, 1, 120, 300]), ("bwd", bwd, [0, 200, 260])):
        best, score = candidates.best()
        for start, stop in zip(cuts[:-1], cuts[1:]):
            scores, src, tgt = best_first(direction_pairs(best[start:stop], score[start:stop], direction, start))
            run = np.empty(len(scores), dtype=PAIR_DTYPE)
            run["score"], run["src"], run["tgt"] = scores, src, tgt
            runs.append(run)
    got = merged_one_to_one(runs, (n_src, n_tgt), block=16)
    for column, want in zip(got, expected):
        np.testing.assert_array_equal(column, want)
    assert len(np.unique(expected[0])) < len(expected[0]) / 4  # ties decided by the runs' order
    assert np.isfinite(got[0]).all() and len(got[0]) > 200  # a candidate that was not found is never a pair
    assert [len(column) for column in merged_one_to_one([], (3, 3))] == [0, 0, 0]


def test_shard_files_read_as_one_array_without_joining():
    parts = [np.arange(12, dtype=np.float16).reshape(4, 3), np.arange(12, 18, dtype=np.float16).reshape(2, 3)]
    stacked, joined = StackedRows(parts), np.concatenate(parts)
    assert stacked.shape == (6, 3) and len(stacked) == 6 and stacked.dtype == np.float16
    for key in (np.array([5, 0, 3, 4, 4]), slice(2, 6), slice(None, None, -2), 4, -1, np.array([], dtype=np.int64)):
        np.testing.assert_array_equal(stacked[key], joined[key])
    np.testing.assert_array_equal(np.asarray(stacked), joined)
    with pytest.raises(IndexError):
        stacked[np.array([6])]


# --- search --------------------------------------------------------------------------------------------------------


def test_compressed_index_finds_the_exact_pairs():
    """IVF + fast-scan PQ (32 half-byte codes, 16 bytes a vector against 256 for float32) searching 4 of 32 lists,
    with exact re-scoring of 4 x k candidates, finds >= 98 % of the pairs exact search mines above the threshold
    (measured: 99.9 %), every gold pair, and <= 5 % other pairs (measured: 1.8 %)."""
    src, tgt, gold = parallel_corpus(1500, 1500, 64, seed=1)
    exact = mine_vectors(rows(src), rows(tgt), threshold=1.04, plan=SearchPlan(index="Flat"))
    compressed = mine_vectors(rows(src), rows(tgt), threshold=1.04, plan=SearchPlan(index="IVF32,PQ32x4fs", nprobe=4))
    exact_pairs = set(zip(exact.src[: exact.kept].tolist(), exact.tgt[: exact.kept].tolist()))
    found = set(zip(compressed.src[: compressed.kept].tolist(), compressed.tgt[: compressed.kept].tolist()))
    assert len(exact_pairs) > 1500
    assert len(exact_pairs & found) / len(exact_pairs) >= 0.98
    assert len(found - exact_pairs) / len(found) <= 0.05
    assert set(enumerate(gold.tolist())) <= found


def test_sharded_blocked_search_equals_one_index():
    rng = np.random.default_rng(3)
    queries, database = rows(rng.normal(size=(300, 8))), rows(rng.normal(size=(500, 8)))
    whole = search(queries, database, 5, SearchPlan(index="Flat"))
    # 8-dim float codes + ids = 40 bytes a row: 4000 bytes is 100 rows a shard, 5 shards; 64-query blocks
    sharded = search(queries, database, 5, SearchPlan(index="Flat", index_memory=4000, batch_size=64))
    assert (whole[1] == sharded[1]).all()
    assert np.allclose(whole[0], sharded[0], atol=1e-6)
    cos = queries.take(np.arange(300)) @ database.take(np.arange(500)).T
    assert (whole[1] == np.argsort(-cos, axis=1)[:, :5]).all()


def test_default_index_is_exact_below_the_threshold():
    assert default_index(50_000, 384) == "Flat"
    assert default_index(50_001, 384) == "IVF1024,PQ96x4fs"
    assert default_index(1_000_000, 384) == "IVF4096,PQ96x4fs"


def test_unique_rows_keeps_first_occurrences_and_skips_blank_lines():
    assert unique_rows(["a", "b", "a", " ", "", "c", "b"]).tolist() == [0, 1, 5]


# --- the command ---------------------------------------------------------------------------------------------------


@pytest.fixture
def corpus(tmp_path):
    """Texts and embeddings files of a small synthetic corpus: source i translates target gold[i] (i < 30)."""
    src, tgt, gold = parallel_corpus(30, 20, 16, seed=4, noise=0.1)
    src_texts = [f"source {i} ünï" for i in range(len(src))]
    tgt_texts = [f"target {j}" for j in range(len(tgt))]
    (tmp_path / "src.txt").write_text("\n".join(src_texts) + "\n", encoding="utf-8")
    (tmp_path / "tgt.txt").write_text("\n".join(tgt_texts) + "\n", encoding="utf-8")
    write_embeddings(tmp_path / "src.npy", src)
    write_embeddings(tmp_path / "tgt.npy", tgt)
    return tmp_path, gold


def mine_args(folder, *extra: str) -> list[str]:
    return [
        "--src", str(folder / "src.txt"), "--tgt", str(folder / "tgt.txt"),
        "--src-embeddings", str(folder / "src.npy"), "--tgt-embeddings", str(folder / "tgt.npy"),
        "--output", str(folder / "mined.tsv"), "--threads", "1", *extra,
    ]  # fmt: skip


def read_tsv(path) -> list[tuple[float, str, str]]:
    lines = path.read_text(encoding="utf-8").split("\n")
    assert lines[-1] == ""
    rows = [line.split("\t") for line in lines[:-1]]
    assert all(len(row) == 3 for row in rows)
    return [(float(score), src, tgt) for score, src, tgt in rows]


def test_mine_with_embeddings_end_to_end(corpus, capsys):
    folder, gold = corpus
    assert main(mine_args(folder)) == 0
    pairs = read_tsv(folder / "mined.tsv")
    scores = [score for score, _, _ in pairs]
    assert scores == sorted(scores, reverse=True) and min(scores) > 1.04
    expected = {(f"source {i} ünï", f"target {j}") for i, j in enumerate(gold)}
    assert expected <= {(src, tgt) for _, src, tgt in pairs}  # every translation is mined
    assert {(src, tgt) for _, src, tgt in pairs[:24]} <= expected  # and the best pairs are translations
    png = (folder / "mined.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"{len(pairs)} pairs above the threshold" in capsys.readouterr().out
    assert not list(folder.glob("*.tmp*"))


def test_mine_threshold_option(corpus):
    folder, _ = corpus
    assert main(mine_args(folder, "--threshold", "0")) == 0
    everything = read_tsv(folder / "mined.tsv")
    cut = everything[len(everything) // 2][0]
    assert main(mine_args(folder, "--threshold", str(cut), "--overwrite")) == 0
    kept = read_tsv(folder / "mined.tsv")
    assert kept == [pair for pair in everything if pair[0] > cut] and 0 < len(kept) < len(everything)


def test_repeated_lines_are_mined_once(corpus):
    folder, _ = corpus
    src_texts = (folder / "src.txt").read_text(encoding="utf-8").split("\n")[:-1]
    tgt_texts = (folder / "tgt.txt").read_text(encoding="utf-8").split("\n")[:-1]
    src = np.load(folder / "src.npy").astype(np.float32)
    tgt = np.load(folder / "tgt.npy").astype(np.float32)
    # every line twice (the copy with another vector), plus blank lines: each text still appears at most once
    src_texts, tgt_texts = src_texts * 2 + ["", "  "], tgt_texts * 2 + [""]
    src = np.concatenate([src, src[::-1], src[:2]])
    tgt = np.concatenate([tgt, tgt[::-1], tgt[:1]])
    (folder / "src.txt").write_text("\n".join(src_texts) + "\n", encoding="utf-8")
    (folder / "tgt.txt").write_text("\n".join(tgt_texts) + "\n", encoding="utf-8")
    write_embeddings(folder / "src.npy", src)
    write_embeddings(folder / "tgt.npy", tgt)
    assert main(mine_args(folder, "--threshold", "0")) == 0
    pairs = read_tsv(folder / "mined.tsv")
    sources, targets = [s for _, s, _ in pairs], [t for _, _, t in pairs]
    assert len(set(sources)) == len(sources) and len(set(targets)) == len(targets)
    assert "" not in sources and "  " not in sources and "" not in targets
    assert len(pairs) >= 30


def test_bad_index_string(corpus, capsys):
    folder, _ = corpus
    assert main(mine_args(folder, "--index", "IVF16,Nonsense")) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("hf-tlaser mine: error: --index 'IVF16,Nonsense': faiss refuses it") and "\n" not in err
    assert not (folder / "mined.tsv").exists()


def corrupt_missing(folder):
    (folder / "src.txt").unlink()
    return "--src", "no such file"


def corrupt_empty(folder):
    (folder / "tgt.txt").write_bytes(b"")
    return "--tgt", "empty"


def corrupt_encoding(folder):
    lines = (folder / "src.txt").read_bytes().split(b"\n")
    lines[6] = b"caf\xe9"
    (folder / "src.txt").write_bytes(b"\n".join(lines))
    return "--src", ":7: not valid UTF-8"


def corrupt_model(folder):
    write_embeddings(folder / "tgt.npy", np.load(folder / "tgt.npy"), fingerprint="model-b")
    return "--src-embeddings/--tgt-embeddings", "different models"


def corrupt_width(folder):
    write_embeddings(folder / "tgt.npy", np.load(folder / "tgt.npy")[:, :8])
    return "--src-embeddings/--tgt-embeddings", "different models"


def corrupt_count(folder):
    write_embeddings(folder / "src.npy", np.load(folder / "src.npy")[:-3])
    return "--src", "has 50 lines but --src-embeddings has 47 rows"


def corrupt_output(folder):
    (folder / "mined.tsv").write_text("keep me\n", encoding="utf-8")
    return "--output", "exists; choose another path or give --overwrite"


def corrupt_sidecar(folder):
    (folder / "src.npy.json").unlink()
    return "--src-embeddings", "no sidecar"


@pytest.mark.parametrize(
    "corrupt",
    [
        corrupt_missing,
        corrupt_empty,
        corrupt_encoding,
        corrupt_model,
        corrupt_width,
        corrupt_count,
        corrupt_output,
        corrupt_sidecar,
    ],
)
def test_bad_input_one_line_exit_2_nothing_written(corpus, capsys, corrupt):
    folder, _ = corpus
    argument, message = corrupt(folder)
    before = (folder / "mined.tsv").read_text(encoding="utf-8") if (folder / "mined.tsv").exists() else None
    assert main(mine_args(folder)) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith(f"hf-tlaser mine: error: {argument}") and message in err
    after = (folder / "mined.tsv").read_text(encoding="utf-8") if (folder / "mined.tsv").exists() else None
    assert after == before and not (folder / "mined.png").exists()


def test_arguments_need_model_or_both_embeddings(corpus, capsys):
    folder, _ = corpus
    args = mine_args(folder)
    assert main(args[: args.index("--tgt-embeddings")] + args[args.index("--output") :]) == 2
    assert "give --model SPEC, or both --src-embeddings and --tgt-embeddings" in capsys.readouterr().err
    meta = json.loads((folder / "src.npy.json").read_text(encoding="utf-8"))
    assert meta["count"] == 50  # the fixture is what the other tests think it is


def test_mine_with_a_model_equals_embed_then_mine(tmp_path, newstest_lines, tokenizer, tiny_tlaser_kwargs):
    """``hf-tlaser mine --model`` (a tiny random T-LASER) writes what ``embed`` twice then ``mine
    --src-embeddings/--tgt-embeddings`` writes."""
    import torch

    from hf_tlaser import TLaserConfig, TLaserForTranslation, save_tokenizer
    from hf_tlaser.cli import main as hf_tlaser_main

    torch.manual_seed(0)
    model = tmp_path / "model"
    TLaserForTranslation(TLaserConfig(**tiny_tlaser_kwargs, training_languages=["de", "en"])).save_pretrained(model)
    save_tokenizer(tokenizer, model)
    for lang in ("de", "en"):
        (tmp_path / f"{lang}.txt").write_text("\n".join(newstest_lines[lang][:30]) + "\n", encoding="utf-8")
    texts = ["--src", str(tmp_path / "de.txt"), "--tgt", str(tmp_path / "en.txt"), "--threshold", "0"]
    common = ["mine", *texts, "--precision", "fp32", "--threads", "1"]
    assert hf_tlaser_main([*common, "--model", str(model), "--output", str(tmp_path / "direct.tsv")]) == 0
    for lang in ("de", "en"):
        embed = ["embed", "--model", str(model), "--input", str(tmp_path / f"{lang}.txt"), "--precision", "fp32"]
        assert hf_tlaser_main([*embed, "--output", str(tmp_path / f"{lang}.npy"), "--dtype", "float16"]) == 0
    files = ["--src-embeddings", str(tmp_path / "de.npy"), "--tgt-embeddings", str(tmp_path / "en.npy")]
    assert hf_tlaser_main([*common, *files, "--output", str(tmp_path / "two_steps.tsv")]) == 0
    direct = read_tsv(tmp_path / "direct.tsv")
    # the claim is the equality of the two routes; how many of the 30 lines a random model mines at threshold 0
    # depends on float rounding, which differs between CPU classes (19 on AVX2 only, 20 with AVX512)
    assert direct and direct == read_tsv(tmp_path / "two_steps.tsv")
    assert {src for _, src, _ in direct} <= set(newstest_lines["de"][:30])
    assert (tmp_path / "direct.png").is_file()


def test_write_bitexts_goes_through_the_one_tsv_writer(tmp_path):
    """``hf_tlaser.evaluation.write_bitexts`` wrote a text's tab or line break as is, breaking its row; it now writes
    through ``write_tsv`` as ``hf-tlaser mine`` does: three columns a row, indices where no texts are given."""
    from hf_tlaser.bitext.mining import write_bitexts

    path = write_bitexts([(1.25, 0, 1), (1.0, 1, 0)], tmp_path / "new" / "pairs.tsv", ["a\tb", "c"], ["x", "y\u2028z"])
    assert path.read_text(encoding="utf-8") == "1.250000\ta b\ty z\n1.000000\tc\tx\n"
    assert write_bitexts([(0.5, 2, 3)], tmp_path / "ids.tsv").read_text(encoding="utf-8") == "0.500000\t2\t3\n"
    assert sorted(p.name for p in (tmp_path / "new").iterdir()) == ["pairs.tsv"]

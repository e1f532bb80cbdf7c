"""Plots are valid PNGs; markdown report; the model-agnostic suite runner with a toy embedder."""

from __future__ import annotations

import json
import zlib

import numpy as np
import pytest

from hf_tlaser.evaluation import (
    ClassifierConfig,
    evaluate_retrieval,
    markdown_table,
    plot_embeddings,
    plot_heatmap,
    plot_training_curves,
    run_suite,
    write_report,
)

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def assert_png(path):
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE and data[12:16] == b"IHDR" and data[-8:-4] == b"IEND"
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert width > 100 and height > 100


def toy_embed(texts: list[str]) -> np.ndarray:
    """Deterministic hashed character-trigram bag (crc32 buckets), L2-normalised."""
    out = np.zeros((len(texts), 64), dtype=np.float32)
    for row, text in enumerate(texts):
        text = f"  {text.lower()} "
        for i in range(len(text) - 2):
            out[row, zlib.crc32(text[i : i + 3].encode()) % 64] += 1
    return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-9)


def test_plots(tmp_path):
    plot_heatmap(np.array([[90.0, np.nan], [70.5, 80.0]]), ["en", "de"], ["en", "de"], tmp_path / "h.png", "t")
    assert_png(tmp_path / "h.png")
    with pytest.raises(ValueError, match="shape"):
        plot_heatmap(np.zeros((2, 3)), ["en", "de"], ["en", "de"], tmp_path / "bad.png")
    rng = np.random.default_rng(0)
    emb = rng.normal(size=(40, 8))
    langs, classes = ["en", "de"] * 20, ["a"] * 20 + ["b"] * 20
    for method in ("pca", "tsne"):
        plot_embeddings(emb, langs, tmp_path / f"{method}.png", classes, method=method)
        assert_png(tmp_path / f"{method}.png")
    with pytest.raises(ValueError, match="valid: tsne, pca"):
        plot_embeddings(emb, langs, tmp_path / "x.png", method="umap")


def test_training_curves(tmp_path):
    history = [{"step": s, "loss": 5 / s, "loss_mt": 4 / s, "loss_dp": 1 / s, "learning_rate": 1e-3} for s in (1, 2, 3)]
    history += [{"step": 3, "eval_loss": 1.5, "eval_runtime": 2.0}, {"step": 3, "train_runtime": 9.0}]
    path = tmp_path / "trainer_state.json"
    path.write_text(json.dumps({"log_history": history}))
    assert_png(plot_training_curves(path, tmp_path / "curves.png"))
    with pytest.raises(ValueError, match="no loss"):
        plot_training_curves({"log_history": [{"step": 1, "learning_rate": 0.1}]}, tmp_path / "none.png")


def test_markdown_report(tmp_path):
    table = markdown_table(["set", "xsim"], [["ntrex128", 1.234], ["ud-pud", 0.5]])
    assert table.split("\n") == ["| set | xsim |", "|---|---|", "| ntrex128 | 1.23 |", "| ud-pud | 0.50 |"]
    image = tmp_path / "plots" / "h.png"
    image.parent.mkdir()
    image.write_bytes(PNG_SIGNATURE)
    report = write_report(tmp_path / "report.md", "Title", [("Table", table), ("Plot", image)])
    text = report.read_text()
    assert text.startswith("# Title\n") and "## Table\n\n| set | xsim |" in text and "![Plot](plots/h.png)" in text


def test_evaluate_retrieval_toy(data_dir):
    result = evaluate_retrieval(toy_embed, data_dir, sets=("ud-pud", "tico19-test"), langs=("en", "de", "fr"))
    assert result.sizes == {"ud-pud": 1000, "tico19-test": 2100}
    langs, matrix = result.matrices["tico19-test"]["ratio"]
    assert langs == ["en", "fr"] and matrix.shape == (2, 2)  # TICO-19 has no German
    assert 0 < result.average("ud-pud", "absolute") < 100
    assert "**ud-pud** (1000 sentences)" in result.to_markdown()
    with pytest.raises(ValueError, match="unknown retrieval set"):
        evaluate_retrieval(toy_embed, data_dir, sets=("xnli",))


def test_run_suite(tmp_path, data_dir):
    results = run_suite(
        toy_embed,
        tmp_path,
        suites=("retrieval", "sib200"),
        data_dir=data_dir,
        langs=("en", "de"),
        seeds=(0,),
        config=ClassifierConfig(epochs=3),
        retrieval_sets=("ud-pud",),
        projection="pca",
    )
    assert set(results) == {"retrieval", "sib200"}
    assert np.array(results["sib200"]["mean"]).shape == (2, 2)
    assert json.loads((tmp_path / "results.json").read_text()) == json.loads(json.dumps(results))
    report = (tmp_path / "report.md").read_text()
    assert "sib200 zero-shot transfer accuracy" in report and "![sib200 transfer matrix](transfer_sib200.png)" in report
    for name in ("transfer_sib200.png", "embeddings_sib200.png", "xsim_ud-pud_ratio.png"):
        assert_png(tmp_path / name)
    with pytest.raises(ValueError, match="unknown suite"):
        run_suite(toy_embed, tmp_path, suites=("glue",))

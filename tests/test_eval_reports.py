"""Plots are valid PNGs on fixed scales with legends off the data; markdown report; the model-agnostic suite runner
with a toy embedder and reference rows (tfidf-char, majority class) on real data slices."""

from __future__ import annotations

import json
import zlib

import numpy as np
import pytest

from hf_tlaser.evaluation import plots as plots_module
from hf_tlaser.evaluation.classifier import ClassifierConfig
from hf_tlaser.evaluation.plots import plot_embeddings, plot_heatmap, plot_training_curves
from hf_tlaser.evaluation.report import markdown_table, write_report
from hf_tlaser.evaluation.suite import Reference, lexical_reference, run_suite
from hf_tlaser.evaluation.suite_classification import evaluate_classification
from hf_tlaser.evaluation.suite_retrieval import evaluate_retrieval

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


def small_suite(tmp_path, data_dir, **kwargs) -> dict:
    """``run_suite`` of ``toy_embed`` on en/de ud-pud retrieval and SIB-200, one seed, 3 classifier epochs."""
    return run_suite(
        toy_embed,
        tmp_path,
        suites=("retrieval", "sib200"),
        data_dir=data_dir,
        langs=("en", "de"),
        seeds=(0,),
        config=ClassifierConfig(epochs=3),
        retrieval_sets=("ud-pud",),
        **kwargs,
    )


def test_run_suite(tmp_path, data_dir):
    results = small_suite(tmp_path, data_dir, projection="pca")
    assert set(results) == {"evaluated", "retrieval", "sib200"}  # no references asked for
    assert np.array(results["sib200"]["mean"]).shape == (2, 2)
    assert json.loads((tmp_path / "results.json").read_text()) == json.loads(json.dumps(results))
    report = (tmp_path / "report.md").read_text()
    assert "sib200: zero-shot transfer accuracy % (model)" in report
    assert "![sib200 transfer matrix](transfer_sib200.png)" in report
    for name in ("transfer_sib200.png", "embeddings_sib200.png", "xsim_ud-pud_ratio.png"):
        assert_png(tmp_path / name)
    with pytest.raises(ValueError, match="unknown suite"):
        run_suite(toy_embed, tmp_path, suites=("glue",))


@pytest.fixture()
def figures(monkeypatch):
    """The matplotlib figures the plot functions save (closed afterwards)."""
    saved = []

    def keep(fig, path):
        saved.append(fig)
        return path

    monkeypatch.setattr(plots_module, "_save", keep)
    yield saved
    for fig in saved:
        plots_module.plt.close(fig)


def _outside(legend, ax) -> bool:
    legend.figure.canvas.draw()
    return legend.get_window_extent().x0 >= ax.get_window_extent().x1


def test_heatmaps_use_a_fixed_scale_and_mark_the_majority(tmp_path, figures):
    class Transfer:
        mean = np.array([[41.0, 38.0], [39.0, 44.0]])
        train_langs = test_langs = ["en", "de"]

    plots_module.plot_transfer_matrix(Transfer(), tmp_path / "t.png", majority=25.1)
    plot_heatmap(np.array([[np.nan, 3.0], [5.0, np.nan]]), ["en", "de"], ["en", "de"], tmp_path / "x.png")
    for fig in figures:
        assert fig.axes[0].images[0].get_clim() == (0.0, 100.0)
    transfer_ax, colorbar_ax = figures[0].axes[:2]
    assert "majority class: 25.1%" in transfer_ax.get_title()
    labels = {t.get_text(): t.get_color() for t in colorbar_ax.get_yticklabels()}
    assert labels["majority 25.1"] == "red" and "20" not in labels  # 20 would overlap the mark


def test_legends_sit_outside_the_axes(tmp_path, figures):
    rng = np.random.default_rng(0)
    plot_embeddings(rng.normal(size=(40, 8)), ["en", "de"] * 20, tmp_path / "e.png", ["a"] * 20 + ["b"] * 20, "pca")
    history = [{"step": s, "loss": 5 / s, "mean_cosine": 0.9, "centered_cosine": 0.1, "d_p": 0.4} for s in (1, 2)]
    plot_training_curves({"log_history": history}, tmp_path / "c.png")
    axes = [ax for fig in figures for ax in fig.axes]
    assert len(axes) == 4 and all(_outside(ax.get_legend(), ax) for ax in axes)
    collapse = axes[3]
    assert "collapse" in collapse.get_title()
    assert {line.get_label() for line in collapse.get_lines()} == {"mean_cosine", "centered_cosine", "d_p"}


def test_embedders_see_each_dataset_once(data_dir):
    calls = []

    def counting(texts):
        calls.append(len(texts))
        return toy_embed(texts)

    evaluate_retrieval(counting, data_dir, sets=("ud-pud", "tico19-test"), langs=("en", "de", "fr"))
    assert calls == [3000, 4200]  # TICO-19 has no German
    evaluate_classification(
        counting, data_dir, "sib200", langs=("en", "it"), seeds=(0,), config=ClassifierConfig(epochs=1)
    )
    assert calls[2:] == [2 * (701 + 99 + 204)]


def test_documents_go_to_embed_documents(tmp_path):
    class DocumentEmbed:
        def __call__(self, texts):
            raise AssertionError("documents must not be embedded as sentences")

        def embed_documents(self, texts):
            return toy_embed(texts)

    (tmp_path / "mldoc").mkdir()
    for split, n in (("train.1000", 12), ("dev", 4), ("test", 4)):
        lines = [f"{'CEGM'[i % 4]}\tdocument {i} about {'CEGM'[i % 4]} topics" for i in range(n)]
        (tmp_path / "mldoc" / f"english.{split}").write_text("\n".join(lines) + "\n", encoding="utf-8")
    result = evaluate_classification(
        DocumentEmbed(), tmp_path, "mldoc", langs=("en",), seeds=(0,), config=ClassifierConfig(epochs=2)
    )
    assert result.mean.shape == (1, 1)


def test_run_suite_reports_reference_rows(tmp_path, data_dir):
    def shifted(texts):  # a second, worse embedder standing in for the random-init row
        return toy_embed([t[::-1] for t in texts])

    references = {
        "reversed": Reference("reversed (reference)", "characters reversed", lambda suite: shifted),
        "tfidf-char": lexical_reference(svd_dim=16),
    }
    results = small_suite(
        tmp_path,
        data_dir,
        projection=None,
        references=references,
        about={"label": "toy", "model": "toy", "updates": 12},
    )
    assert list(results["references"]) == ["reversed", "tfidf-char"]
    lexical = results["references"]["tfidf-char"]
    toy_error = np.nanmean(np.array(results["retrieval"]["matrices"]["ud-pud"]["ratio"]["xsim"], dtype=float))
    lexical_error = np.nanmean(np.array(lexical["retrieval"]["matrices"]["ud-pud"]["ratio"]["xsim"], dtype=float))
    assert lexical_error < toy_error  # 64 hashed buckets lose to the full n-gram space
    assert np.array(lexical["sib200"]["mean"]).shape == (2, 2)
    majority = results["sib200"]["majority_class"]
    assert majority == pytest.approx(100 * 51 / 204)  # science/technology: 51 of 204 test sentences
    report = (tmp_path / "report.md").read_text()
    table = report.split("## Results\n\n")[1].split("\n\n")[0].splitlines()
    langs = results["retrieval"]["matrices"]["ud-pud"]["absolute"]["langs"]
    assert len(langs) >= 2 and f"| ud-pud xsim % (absolute, {len(langs) * (len(langs) - 1)} directions) |" in table[0]
    assert [row.split(" | ")[0] for row in table[2:]] == [
        "| toy",
        "| reversed (reference)",
        "| tfidf-char (lexical reference)",
        "| majority class (reference)",
    ]
    assert table[-1].endswith(f"| - | - | {majority:.2f} | {majority:.2f} | {majority:.2f} |")
    assert "| optimizer updates | 12 |" in report and "lexical baseline, not a model" in report
    pairs = report.split("## ud-pud: xsim error % per language pair (absolute margin)")[1]
    assert "| pair | toy | reversed (reference) | tfidf-char (lexical reference) |" in pairs
    assert "| en → de |" in pairs and "| de → en |" in pairs


def test_english_table_shows_each_language_to_and_from_english_per_row():
    from hf_tlaser.evaluation.report import english_table

    matrix = {"langs": ["de", "en", "fi"], "xsim": [[None, 1.0, 9.0], [2.0, None, 4.0], [9.0, 3.0, None]]}
    other = {"langs": ["de", "en", "fi"], "xsim": [[None, 5.0, 9.0], [6.0, None, 8.0], [9.0, 7.0, None]]}
    results = {
        "evaluated": {"label": "model"},
        "retrieval": {"matrices": {"set": {"absolute": matrix}}},
        "references": {"ref": {"label": "ref", "retrieval": {"matrices": {"set": {"absolute": other}}}}},
    }
    lines = english_table(results, "set").splitlines()
    assert lines[0] == "| set (absolute): xx → en / en → xx | model | ref |"
    assert lines[2:] == ["| de ↔ en | 1.00 / 2.00 | 5.00 / 6.00 |", "| fi ↔ en | 3.00 / 4.00 | 7.00 / 8.00 |"]
    no_english = {
        "evaluated": {},
        "retrieval": {"matrices": {"set": {"absolute": {"langs": ["de", "fi"], "xsim": []}}}},
    }
    assert english_table(no_english, "set") is None

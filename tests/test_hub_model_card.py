"""Model card: valid YAML metadata from any subset of config / training record / trainer state / results; the latest
evaluation (MODEL_DIR/eval/results.json) with its reference rows; generated cards are regenerated, others kept."""

from __future__ import annotations

import json

import pytest
import yaml
from huggingface_hub import ModelCard

from hf_tlaser import TLaserConfig
from hf_tlaser.data.corpora import REGISTRY
from hf_tlaser.hub import render_model_card, write_model_card
from hf_tlaser.hub.model_card import CORPUS_TERMS, GENERATED_MARKER

RESULTS = {
    "retrieval": {
        "k": 4,
        "sizes": {"ntrex128": 1997},
        "matrices": {
            "ntrex128": {
                "absolute": {"langs": ["de", "en"], "xsim": [[None, 10.0], [20.0, None]]},
                "ratio": {"langs": ["de", "en"], "xsim": [[None, 5.0], [7.0, None]]},
            }
        },
    },
    "sib200": {"summary": {"cross": [61.5, 1.5], "same": [70.0, 1.0], "all": [63.2, 1.2]}},
}


@pytest.fixture()
def model_dir(tmp_path):
    TLaserConfig(vocab_size=300, hidden_size=32, num_attention_heads=4, decoder_attention_heads=4).save_pretrained(
        tmp_path
    )
    return tmp_path


def metadata(card: str) -> dict:
    header = yaml.safe_load(card.split("---\n")[1])
    assert ModelCard(card).data.to_dict()["pipeline_tag"] == "sentence-similarity"
    return header


def test_card_without_training_or_results(model_dir):
    card = render_model_card(model_dir)
    meta = metadata(card)
    assert meta["library_name"] == "transformers"
    assert meta["license"] == "apache-2.0"
    assert meta["language"] == ["de", "en", "es", "fr", "it"]
    assert {"sentence-transformers", "feature-extraction", "t-laser"} <= set(meta["tags"])
    assert "model-index" not in meta
    assert "Not evaluated yet" in card
    assert "$" not in card  # every placeholder filled


def test_card_with_training_and_results(model_dir):
    train = {
        "args": {"corpora": "wmt-newstest-multiway,multi30k", "pairs": "de-en", "seed": 1},
        "recipe": {"learning_rate": 0.001},
        "preset": "ctlaser-tiny",
    }
    (model_dir / "hf_tlaser_train.json").write_text(json.dumps(train))
    (model_dir / "trainer_state.json").write_text(json.dumps({"global_step": 40, "log_history": [{"loss": 5.25}]}))
    (model_dir / "results.json").write_text(json.dumps(RESULTS))
    card = render_model_card(model_dir, repo_id="someone/ct-laser-tiny")
    meta = metadata(card)
    assert meta["datasets"] == ["wmt-newstest-multiway", "multi30k"]
    results = meta["model-index"][0]["results"]
    xsim = {m["name"]: m["value"] for r in results if r["dataset"]["type"] == "ntrex128" for m in r["metrics"]}
    assert xsim == {"average xsim error % (absolute margin)": 15.0, "average xsim error % (ratio margin)": 6.0}
    accuracy = [m["value"] for r in results if r["dataset"]["type"] == "sib200" for m in r["metrics"]]
    assert accuracy == [61.5, 70.0, 63.2]
    assert "non-commercial" in card and "someone/ct-laser-tiny" in card and "61.50 ± 1.50" in card
    assert "| precision | fp32 (training flags; no precision record) |" in card  # older runs: from --bf16/--fp16

    assert "| batch composition |" not in card  # not recorded: no row

    readme = write_model_card(model_dir)
    readme.write_text("hand-written card")
    assert write_model_card(model_dir).read_text() == "hand-written card"  # kept unless overwrite


def test_card_shows_latest_evaluation_with_references(model_dir):
    train = {"preset": "ctlaser-tiny", "precision": {"precision": "bf16", "reason": "auto: CPU reports AVX512"}}
    (model_dir / "hf_tlaser_train.json").write_text(json.dumps(train))
    (model_dir / "results.json").write_text(json.dumps({"sib200": {"summary": {"cross": [11.0, 0.0]}}}))
    latest = {
        **RESULTS,
        "evaluated": {"path": "/home/me/runs/ct", "model": "cT-LASER", "label": "cT-LASER", "updates": 500},
        "references": {
            "tfidf-char": {
                "label": "tfidf-char (lexical reference)",
                "about": "a lexical baseline, not a model",
                "sib200": {"summary": {"cross": [30.0, 0.5], "same": [50.0, 0.5], "all": [34.0, 0.5]}},
            }
        },
    }
    latest["sib200"] = {**latest["sib200"], "majority_class": 25.0}
    (model_dir / "eval").mkdir()
    (model_dir / "eval" / "results.json").write_text(json.dumps(latest))  # what `hf-tlaser evaluate` writes
    card = render_model_card(model_dir)
    accuracy = [m["value"] for r in metadata(card)["model-index"][0]["results"] for m in r["metrics"]]
    assert 61.5 in accuracy and 11.0 not in accuracy and 30.0 not in accuracy  # the model's, newest file
    assert "Not evaluated yet" not in card
    assert "| tfidf-char (lexical reference) | - | - | 30.00 ± 0.50 | 50.00 ± 0.50 | 34.00 ± 0.50 |" in card
    assert "| majority class (reference) | - | - | 25.00 | 25.00 | 25.00 |" in card
    assert "| optimizer updates | 500 |" in card and "/home/me" not in card  # no local paths on the Hub
    assert "| precision | bf16 (auto: CPU reports AVX512) |" in card


def test_generated_card_is_regenerated(model_dir):
    card = write_model_card(model_dir)
    assert GENERATED_MARKER in card.read_text() and "Not evaluated yet" in card.read_text()
    (model_dir / "eval").mkdir()
    (model_dir / "eval" / "results.json").write_text(json.dumps(RESULTS))
    assert "61.50 ± 1.50" in write_model_card(model_dir).read_text()


def test_every_registered_corpus_states_its_terms():
    """A card lists each training corpus with its terms (from its PROVENANCE.md): none may fall back to 'see its
    provenance'."""
    assert sorted(set(REGISTRY) - set(CORPUS_TERMS)) == []


@pytest.mark.parametrize(
    ("recipe", "args", "row"),
    [
        ({"batch_composition": "length"}, {}, "| batch composition | length |"),
        (
            {"batch_composition": "cluster"},
            {"init_from": "data/multilingual-e5-small", "cluster_size": 64, "cluster_pool": 2000},
            "| batch composition | cluster: hard negatives in the batch (2,000 rows of each stream embedded by "
            "multilingual-e5-small, clusters of ~64 rows) |",
        ),
        (
            {"batch_composition": "cluster"},
            {"init_from": "e5", "cluster_model": "/m/labse", "cluster_size": 32},
            "| batch composition | cluster: hard negatives in the batch (every row of each stream embedded by labse, "
            "clusters of ~32 rows) |",
        ),
    ],
)
def test_card_states_the_batch_composition(model_dir, recipe, args, row):
    (model_dir / "hf_tlaser_train.json").write_text(json.dumps({"args": args, "recipe": recipe}))
    assert row in render_model_card(model_dir)

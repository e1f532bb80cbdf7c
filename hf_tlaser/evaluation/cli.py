"""``hf-tlaser evaluate MODEL_DIR --suite retrieval sib200 ...``: LASER's protocols on a saved model, written as a
markdown report, ``results.json`` and PNG plots."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

import numpy as np
import torch
from transformers import AutoModel, AutoTokenizer

import hf_tlaser
from hf_tlaser.evaluation.classifier import ClassifierConfig
from hf_tlaser.evaluation.suite import RETRIEVAL_SETS, SUITES, run_suite

logger = logging.getLogger("hf_tlaser.evaluate")


def load_encoder(model_dir: str | Path, random_init: bool = False) -> tuple[torch.nn.Module, object]:
    """The encoder and tokenizer of a saved model folder (``random_init``: same architecture, fresh weights)."""
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModel.from_pretrained(model_dir)
    if random_init:
        torch.manual_seed(0)
        model = type(model)(model.config)
    return model.eval(), tokenizer


def summarize(results: dict) -> str:
    """One line per suite: mean xsim error per retrieval set, cross/same/all accuracy per classification set."""
    lines = []
    for suite, result in results.items():
        if suite == "retrieval":
            for name, by_margin in result["matrices"].items():
                errors = {
                    margin: float(np.nanmean(np.asarray(m["xsim"], dtype=float))) for margin, m in by_margin.items()
                }
                lines.append(f"{name}: mean xsim error " + ", ".join(f"{m} {e:.1f}%" for m, e in errors.items()))
        else:
            summary = result["summary"]
            lines.append(
                f"{suite}: "
                + ", ".join(f"{k} {v[0]:.1f}±{v[1]:.1f}" for k, v in summary.items() if k in ("cross", "same", "all"))
            )
    return "\n".join(lines)


def evaluate_model(
    model_dir: str | Path,
    suites: list[str],
    output_dir: str | Path | None = None,
    *,
    data_dir: str | None = None,
    seeds: tuple[int, ...] = (0, 1, 2, 3, 4),
    epochs: int = 500,
    projection: str | None = "tsne",
    retrieval_sets: tuple[str, ...] = tuple(RETRIEVAL_SETS),
    random_init: bool = False,
    max_tokens: int = 16000,
    bf16: bool = False,
) -> dict:
    """Encode with the model of ``model_dir`` and run ``suites``; returns the results dict (also on disk)."""
    model, tokenizer = load_encoder(model_dir, random_init)
    dtype = torch.bfloat16 if bf16 else None

    def embed(texts: list[str]) -> np.ndarray:
        return hf_tlaser.encode(model, tokenizer, texts, max_tokens=max_tokens, truncation=True, autocast_dtype=dtype)

    state = Path(model_dir) / "trainer_state.json"
    out = Path(output_dir) if output_dir else Path(model_dir) / ("eval_random_init" if random_init else "eval")
    title = f"{Path(model_dir).name}{' (random init)' if random_init else ''}: evaluation"
    return run_suite(
        embed,
        out,
        suites=suites,
        data_dir=data_dir,
        seeds=seeds,
        config=ClassifierConfig(epochs=epochs),
        retrieval_sets=retrieval_sets,
        projection=projection,
        trainer_state=state if state.exists() and not random_init else None,
        title=title,
    )


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``hf-tlaser evaluate``."""
    parser = argparse.ArgumentParser(prog="hf-tlaser evaluate", description=__doc__.split("\n")[0])
    parser.add_argument("model_dir")
    parser.add_argument("--suite", nargs="+", choices=SUITES, default=["retrieval", "sib200"])
    parser.add_argument("--retrieval-sets", nargs="+", choices=list(RETRIEVAL_SETS), default=list(RETRIEVAL_SETS))
    parser.add_argument("--output-dir", default=None, help="default: MODEL_DIR/eval")
    parser.add_argument("--data-dir", default=None, help="corpora folder (default: $HF_TLASER_DATA or ../shared/data)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4], help="classifier seeds")
    parser.add_argument("--epochs", type=int, default=500, help="classifier epochs (LASER: 500)")
    parser.add_argument("--projection", choices=["tsne", "pca", "none"], default="tsne")
    parser.add_argument("--random-init", action="store_true", help="evaluate the same architecture untrained")
    parser.add_argument("--bf16", action="store_true", help="bf16 autocast while encoding")
    args = parser.parse_args(argv)
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
    results = evaluate_model(
        args.model_dir,
        args.suite,
        args.output_dir,
        data_dir=args.data_dir,
        seeds=tuple(args.seeds),
        epochs=args.epochs,
        projection=None if args.projection == "none" else args.projection,
        retrieval_sets=tuple(args.retrieval_sets),
        random_init=args.random_init,
        bf16=args.bf16,
    )
    print(summarize(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())

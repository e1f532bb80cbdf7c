"""``hf-tlaser evaluate MODEL_DIR``: LASER's evaluation protocols on a saved model.

Writes a markdown report, ``results.json`` and PNG plots to MODEL_DIR/eval. A bilingual cNV model is evaluated on
its two languages, each embedded through its own encoder and tokenizer. The model's scores sit in one table
with reference rows computed on the same sentences with the same protocol: the same architecture at random init,
the ``tfidf-char`` lexical baseline and, for classification, the majority class.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from transformers import AutoModel, AutoTokenizer

import hf_tlaser
from hf_tlaser.data.languages import parse_languages
from hf_tlaser.encoding import model_languages
from hf_tlaser.errors import UsageError
from hf_tlaser.evaluation.classifier import CLASSIFIERS, ClassifierConfig
from hf_tlaser.evaluation.lexical import NAME as LEXICAL_NAME
from hf_tlaser.evaluation.provenance import check_model_folder, describe_model
from hf_tlaser.evaluation.readers import LANGS, is_spec, laser_mldoc_cleanup
from hf_tlaser.evaluation.report import about_table, summary_table
from hf_tlaser.evaluation.suite import (
    EVALUATION_LANGS,
    RETRIEVAL_SETS,
    SUITES,
    Reference,
    evaluation_languages,
    lexical_reference,
    retrieval_sets_for,
    run_suite,
)
from hf_tlaser.hardware import PRECISIONS, default_device, resolve_precision

RANDOM_INIT = "random init"
DOCUMENT_WORDS = 750
"""T-LASER embeds a document whole, cut to its first 750 words (Li & Mak 2020)."""


def load_encoder(model_dir: str | Path, random_init: bool = False) -> tuple[torch.nn.Module, object]:
    """The encoder and tokenizer of a saved model folder (``random_init``: same architecture, fresh weights).

    A cNV folder gives the model and None: its per-language tokenizers come with it (``model.get_tokenizer``); at
    random init every weight is fresh, the NMT encoders' too, and the saved tokenizers are kept.
    """
    model = AutoModel.from_pretrained(model_dir)
    languages = model_languages(model)
    tokenizer = AutoTokenizer.from_pretrained(model_dir) if languages is None else None
    if random_init:
        torch.manual_seed(0)
        fresh = type(model)(model.config)
        if languages is not None:
            fresh.tokenizers.update({lang: model.get_tokenizer(lang) for lang in languages})
        model = fresh
    return model.eval(), tokenizer


@dataclass
class EncoderEmbed:
    """An ``Embed`` for a loaded hf_tlaser encoder.

    Sentences are embedded as they are (inputs over the model's length limit are truncated). Documents (MLDoc) are
    embedded whole: T-LASER's cut to their first 750 words, LASER's after the clean-up of LASER's ``mldoc.sh``.
    A model with one encoder per language (cNV) is ``per_language``: it takes the language of each text and embeds
    every language through its own encoder (``tokenizer`` None: the model's own per-language tokenizers).
    """

    model: torch.nn.Module
    tokenizer: object
    device: torch.device
    autocast_dtype: torch.dtype | None = None
    max_tokens: int = 16000

    @property
    def per_language(self) -> bool:
        """Whether the model needs the language of each text (one encoder per language)."""
        return model_languages(self.model) is not None

    def _encode(self, texts: list[str], langs: list[str] | None = None, **options) -> np.ndarray:
        def run(batch: list[str], **lang) -> np.ndarray:
            return hf_tlaser.encode(
                self.model,
                self.tokenizer,
                batch,
                max_tokens=self.max_tokens,
                truncation=True,
                autocast_dtype=self.autocast_dtype,
                device=self.device,
                **lang,
                **options,
            )

        if langs is None:
            return run(texts)
        rows = {lang: [i for i, text_lang in enumerate(langs) if text_lang == lang] for lang in dict.fromkeys(langs)}
        parts = {lang: run([texts[i] for i in where], lang=lang) for lang, where in rows.items()}
        if not parts:
            return run([], lang=model_languages(self.model)[0])
        out = np.empty((len(texts), next(iter(parts.values())).shape[1]), dtype=np.float32)
        for lang, where in rows.items():
            out[where] = parts[lang]
        return out

    def __call__(self, texts: list[str], langs: list[str] | None = None) -> np.ndarray:
        return self._encode(texts, langs)

    def embed_documents(self, texts: list[str], langs: list[str] | None = None) -> np.ndarray:
        """Whole-document vectors (see the class docstring)."""
        if self.model.config.model_type == "laser":
            cleaned = [laser_mldoc_cleanup(t) for t in texts]
            return self._encode(cleaned, langs, documents=True, document_mode="whole", max_words=None)
        return self._encode(texts, langs, documents=True, document_mode="whole", max_words=DOCUMENT_WORDS)


def summarize(results: dict) -> str:
    """What was evaluated and the one results table (model, random init, lexical baseline, majority class), as
    markdown: what ``hf-tlaser evaluate`` prints."""
    return "\n\n".join([about_table(results.get("evaluated") or {}), summary_table(results)])


def evaluate_model(
    model_dir: str | Path,
    suites: list[str],
    output_dir: str | Path | None = None,
    *,
    data_dir: str | None = None,
    seeds: tuple[int, ...] = (0, 1, 2, 3, 4),
    epochs: int = 500,
    classifier: str = "mlp",
    projection: str | None = "tsne",
    retrieval_sets: tuple[str, ...] | None = None,
    random_init: bool = False,
    references: bool = True,
    max_tokens: int = 16000,
    precision: str = "auto",
    languages: Sequence[str] | None = None,
) -> dict:
    """Encode with the model of ``model_dir`` and run ``suites``; returns the results dict (also on disk).

    ``references`` adds the random-init architecture (unless ``random_init``: then it is the evaluated row) and the
    ``tfidf-char`` lexical baseline as rows of the same tables. ``precision`` (auto/fp32/bf16/fp16) is resolved for
    the default device (CUDA, MPS or CPU) and recorded in the results. ``retrieval_sets``: None runs every set with
    two of the evaluated languages; a set may also be a corpus spec of aligned text (``files:de=a:en=b``, ``hf:...``).
    ``suites`` may hold user classification datasets (``hf:...``, see ``read_classification_spec``). ``languages``:
    the evaluated languages (default: the paper's five and every language the model was trained on, recorded in its
    config as ``training_languages``); every set is evaluated on the ones it has.

    A bilingual cNV model is evaluated on its own two languages only (``UsageError`` unless both are evaluation
    languages; a named retrieval set without both is one too), each text through the encoder of its language;
    classification ``cross`` is then train on one language, test on the other. Its random-init row has every weight
    fresh, the NMT pair's included, so it measures the architecture, not the pretrained translation models.
    """
    config = check_model_folder(model_dir)
    model_langs = model_languages(config)
    if languages is not None:
        langs = list(languages)
    elif model_langs is not None:
        langs = evaluation_languages(model_langs)
    else:
        trained = config.get("training_languages") or []  # recorded by hf-tlaser train (older models: none)
        langs = [*LANGS, *(lang for lang in trained if lang not in LANGS)]
    retrieval_sets = retrieval_sets_for(langs, retrieval_sets) if "retrieval" in suites else ()
    device = default_device()
    choice = resolve_precision(precision, device)

    def embedder(untrained: bool) -> EncoderEmbed:
        model, tokenizer = load_encoder(model_dir, untrained)
        return EncoderEmbed(model, tokenizer, device, choice.autocast_dtype, max_tokens)

    about = describe_model(model_dir)
    about.update(
        label=f"{about['model']} ({RANDOM_INIT})" if random_init else about["model"],
        weights=RANDOM_INIT if random_init else "trained",
        precision=choice.to_dict(),
        device=str(device),
        classifier="LASER's MLDoc MLP" if classifier == "mlp" else "linear SVM (LinearSVC, C=1)",
    )
    if model_langs is not None:
        left_out = [lang for lang in EVALUATION_LANGS if lang not in langs]
        about["evaluation_languages"] = f"{', '.join(langs)} (the model's; not {', '.join(left_out)})"
    else:
        about["evaluation_languages"] = ", ".join(langs)
    rows: dict[str, Reference] = {}
    if references and not random_init:
        untrained = embedder(True)
        random_about = "the same architecture with untrained (random) weights, encoded the same way"
        if model_langs is not None:
            random_about += " (every weight random, the NMT encoders' too: not the pretrained NMT pair)"
        rows[RANDOM_INIT] = Reference(f"{RANDOM_INIT} (reference)", random_about, lambda suite: untrained)
    if references:
        rows[LEXICAL_NAME] = lexical_reference()
    state = Path(model_dir) / "trainer_state.json"
    out = Path(output_dir) if output_dir else Path(model_dir) / ("eval_random_init" if random_init else "eval")
    return run_suite(
        embedder(random_init),
        out,
        suites=suites,
        data_dir=data_dir,
        seeds=seeds,
        config=ClassifierConfig(kind=classifier, epochs=epochs),
        retrieval_sets=retrieval_sets,
        langs=langs,
        projection=projection,
        trainer_state=state if state.exists() and not random_init else None,
        title=f"{Path(model_dir).name}: evaluation",
        references=rows,
        about=about,
    )


def _suite(value: str) -> str:
    """A ``--suite`` value: a registered suite or a user classification dataset spec."""
    if value in SUITES or is_spec(value):
        return value
    choices = ", ".join(repr(suite) for suite in SUITES)
    raise argparse.ArgumentTypeError(f"invalid choice: {value!r} (choose from {choices}); or hf:FOLDER_OR_ID")


def _languages(value: str) -> list[str]:
    try:
        return parse_languages(value, "language")
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def build_parser() -> argparse.ArgumentParser:
    """The ``hf-tlaser evaluate`` argument parser."""
    parser = argparse.ArgumentParser(
        prog="hf-tlaser evaluate", description=__doc__.split("\n", 1)[1].strip().replace("``", "")
    )
    parser.add_argument("model_dir", help="folder written by hf-tlaser train (config.json, weights, tokenizer)")
    parser.add_argument(
        "--suite",
        nargs="+",
        type=_suite,
        default=["retrieval", "sib200"],
        metavar="SUITE",
        help=f"what to run, one or more of: {', '.join(SUITES)}, or a classification dataset of yours "
        "hf:FOLDER_OR_ID[:config=NAME][:text=COL][:label=COL][:language=COL] (train, dev and test splits; a folder "
        "per language code or a language column) (default: retrieval sib200)",
    )
    parser.add_argument(
        "--retrieval-sets",
        nargs="+",
        metavar="SET",
        help=f"xsim, P@1 and mining sets, one or more of: {', '.join(RETRIEVAL_SETS)}, or aligned text of yours as a "
        "corpus spec (files:de=PATH:en=PATH, moses:FOLDER, tsv:PATH, hf:ID_OR_FOLDER, as hf-tlaser train --corpora) "
        "(default: every registered set with two of the evaluated languages)",
    )
    parser.add_argument(
        "--languages",
        type=_languages,
        metavar="LANGS",
        help="evaluated languages, comma-separated codes (default: the paper's five and every language the model was "
        "trained on, from its config); each set uses the ones it has",
    )
    parser.add_argument("--output-dir", help="where to write (default: MODEL_DIR/eval)")
    parser.add_argument("--data-dir", help="corpora folder (default: $HF_TLASER_DATA, else ../shared/data)")
    parser.add_argument(
        "--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4], help="classifier seeds (default: 0 1 2 3 4)"
    )
    parser.add_argument("--epochs", type=int, default=500, help="classifier epochs (default: %(default)s, as LASER)")
    parser.add_argument(
        "--classifier",
        choices=CLASSIFIERS,
        default="mlp",
        help="mlp: LASER's MLDoc MLP; linear-svm: a linear SVM, the NV/cNV papers' protocol (default: %(default)s)",
    )
    parser.add_argument(
        "--projection",
        choices=["tsne", "pca", "none"],
        default="tsne",
        help="2-D plot of the test embeddings: tsne, pca or none (default: %(default)s)",
    )
    parser.add_argument(
        "--random-init",
        action="store_true",
        help="evaluate only the same architecture untrained, into MODEL_DIR/eval_random_init",
    )
    parser.add_argument(
        "--no-references", action="store_true", help="leave out the random-init and tfidf-char reference rows"
    )
    parser.add_argument(
        "--precision",
        choices=PRECISIONS,
        default="auto",
        help=f"encoding precision, one of: {', '.join(PRECISIONS)}; auto picks what is fast on this hardware "
        "(default: %(default)s)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``hf-tlaser evaluate``: 0 on success, 2 with one line on stderr for a usage mistake."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
    try:
        results = evaluate_model(
            args.model_dir,
            args.suite,
            args.output_dir,
            data_dir=args.data_dir,
            seeds=tuple(args.seeds),
            epochs=args.epochs,
            classifier=args.classifier,
            projection=None if args.projection == "none" else args.projection,
            retrieval_sets=tuple(args.retrieval_sets) if args.retrieval_sets else None,
            random_init=args.random_init,
            references=not args.no_references,
            precision=args.precision,
            languages=args.languages,
        )
    except UsageError as error:
        print(f"hf-tlaser evaluate: error: {error}", file=sys.stderr)
        return 2
    print(summarize(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())

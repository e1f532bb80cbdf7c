"""``hf-tlaser evaluate MODEL_DIR``: LASER's evaluation protocols on a saved model.

Writes a markdown report, ``results.json`` and PNG plots to MODEL_DIR/eval. A bilingual cNV model is evaluated on
its two languages, each embedded through its own encoder and tokenizer. The model's scores sit in one table
with reference rows computed on the same sentences with the same protocol: the same architecture at random init,
the ``tfidf-char`` lexical baseline and, for classification, the majority class; ``--reference`` adds rows of
other models (sentence-transformers models, hf_tlaser folders) and, where a reference's vectors have the model's
width, a cross-model row: the model's queries searched among the reference's targets (a distilled student's
shared space).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from hf_tlaser.backend.runtime import BACKENDS
from hf_tlaser.commands import run_command
from hf_tlaser.data.languages import normalize_language
from hf_tlaser.encoders import HfTlaserEncoder, load
from hf_tlaser.encoding import DOCUMENT_WORDS, model_languages
from hf_tlaser.evaluation.classifier import CLASSIFIERS, ClassifierConfig
from hf_tlaser.evaluation.lexical import NAME as LEXICAL_NAME
from hf_tlaser.evaluation.provenance import describe_model
from hf_tlaser.evaluation.readers import LANGS, LANGUAGE_LISTS
from hf_tlaser.evaluation.report import MANY_LANGUAGES, about_table, english_summary, english_table, summary_table
from hf_tlaser.evaluation.suite import (
    DIRECTIONS,
    EVALUATION_LANGS,
    FULL_MATRIX_LANGUAGES,
    RETRIEVAL_SETS,
    SUITES,
    Reference,
    evaluation_languages,
    lexical_reference,
    retrieval_sets_for,
    run_suite,
)
from hf_tlaser.evaluation.user_sets import is_spec
from hf_tlaser.guards import refuse_outputs_over_inputs
from hf_tlaser.hardware import PRECISIONS, default_device, resolve_precision
from hf_tlaser.model_folders import AUTO, EVAL_PROMPTS, check_model_folder
from hf_tlaser.teachers.cache import NO_CACHE, TeacherCache
from hf_tlaser.teachers.targets import load_teacher

__all__ = ["DOCUMENT_WORDS", "evaluate_model", "main", "reference_rows", "summarize"]
RANDOM_INIT = "random init"


def reference_rows(
    specs: Sequence[str],
    *,
    prompt_name: str | None = AUTO,
    cache_dir: str | os.PathLike | None = None,
    device=None,
    precision: str = "auto",
) -> dict[str, Reference]:
    """``--reference`` SPECs (``hf_tlaser.teachers.load_teacher``: sentence-transformers folder or Hub id, hf_tlaser
    folder) loaded as reference rows, each with a cross-model row where the widths match; ``UsageError`` naming
    ``--reference`` for one that cannot be loaded. ``prompt_name`` ``auto``: the model's ``query`` prompt (e5's
    for symmetric tasks) when it has one. Vectors go through the teacher cache (``cache_dir``; ``none``: no cache).
    """
    rows: dict[str, Reference] = {}
    for spec in specs:
        teacher = load_teacher(
            spec,
            prompt_name=prompt_name,
            prefer=EVAL_PROMPTS,
            device=device,
            precision=precision,
            argument="--reference",
        )
        name = teacher.name if teacher.name not in rows else f"{teacher.name} ({len(rows) + 1})"
        embed = teacher if cache_dir == NO_CACHE else TeacherCache(cache_dir, teacher).embedder()
        about = f"{teacher.describe()}; fingerprint {teacher.fingerprint[:12]}"
        rows[name] = Reference(f"{name} (reference)", about, lambda suite, embed=embed: embed, cross=True)
    return rows


def summarize(results: dict) -> str:
    """What was evaluated, the one results table (model, random init, lexical baseline, majority class) and, for
    each retrieval set with English, its error to and from English per language (over more than ``MANY_LANGUAGES``
    languages: the mean, the worst five and how many languages are worse than each reference row), as markdown: what
    ``hf-tlaser evaluate`` prints."""
    sets = ((results.get("retrieval") or {}).get("matrices")) or {}
    per_language = []
    for name, by_margin in sets.items():
        langs = (by_margin.get("absolute") or next(iter(by_margin.values()), {})).get("langs") or []
        many = len(langs) - 1 > MANY_LANGUAGES
        table = english_summary(results, name) if many else english_table(results, name)
        if table is not None:
            per_language.append(table)
    return "\n\n".join([about_table(results.get("evaluated") or {}), summary_table(results), *per_language])


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
    reference_specs: Sequence[str] = (),
    reference_prompt: str | None = AUTO,
    cache_dir: str | os.PathLike | None = None,
    backend: str = "torch",
    directions: str = "auto",
) -> dict:
    """Encode with the model of ``model_dir`` and run ``suites``; returns the results dict (also on disk).

    ``references`` adds the random-init architecture (unless ``random_init``: then it is the evaluated row) and the
    ``tfidf-char`` lexical baseline as rows of the same tables. ``precision`` (auto/fp32/bf16/fp16) is resolved for
    the default device (CUDA, MPS or CPU) and recorded in the results. ``retrieval_sets``: None runs every set with
    two of the evaluated languages; a set may also be a corpus spec of aligned text (``files:de=a:en=b``, ``hf:...``).
    ``suites`` may hold user classification datasets (``hf:...``, see ``read_classification_spec``). ``languages``:
    the evaluated languages (default: the paper's five and every language the model was trained on, recorded in its
    config as ``training_languages``); every set is evaluated on the ones it has (flores-devtest: every language with
    a FLORES-200 file, by ISO 639-1 code or FLORES code such as ``swh_Latn``). ``directions`` (``auto``, ``all``,
    ``english``): the xsim directions of multi-way sets (auto: every pair up to ten languages, to and from English
    beyond); xed-dev (en-X pairs) is scored to and from English.

    A bilingual cNV model is evaluated on its own two languages only (``UsageError`` unless both are evaluation
    languages; a named retrieval set without both is one too), each text through the encoder of its language;
    classification ``cross`` is then train on one language, test on the other. Its random-init row has every weight
    fresh, the NMT pair's included, so it measures the architecture, not the pretrained translation models.

    ``reference_specs`` add rows of other models (:func:`reference_rows`, loaded before any data is read, through
    the teacher cache ``cache_dir``), with ``reference_prompt``, and a cross-model row for each of the model's width.

    ``output_dir`` (default: MODEL_DIR/eval) is never the model folder or a ``--reference`` folder, nor a folder that
    holds one (``UsageError``).

    ``backend`` runs the model's exported files (``hf_tlaser.backend``: onnx, onnx-int8, openvino, openvino-int8;
    auto: ``choose_backend``) instead of torch, to measure what a backend costs; the random-init row stays in torch.
    """
    references_read = {f"--reference {spec}": spec for spec in reference_specs if Path(spec).expanduser().exists()}
    refuse_outputs_over_inputs({"--output-dir": output_dir}, {"MODEL_DIR": model_dir, **references_read})
    config = check_model_folder(model_dir)
    device = default_device()
    choice = resolve_precision(precision, device)

    def embedder(untrained: bool) -> HfTlaserEncoder:
        return load(
            str(model_dir),
            device=device,
            precision=precision,
            argument="MODEL_DIR",
            backend="torch" if untrained else backend,
            random_init=untrained,
            per_language=True,
            max_tokens=max_tokens,
        )

    model_langs = model_languages(config)
    if languages is not None:
        langs = list(languages)
    elif model_langs is not None:
        langs = evaluation_languages(model_langs)
    else:
        trained = config.get("training_languages") or []  # recorded by hf-tlaser train (older models: none)
        langs = [*LANGS, *(lang for lang in trained if lang not in LANGS)]
    retrieval_sets = retrieval_sets_for(langs, retrieval_sets) if "retrieval" in suites else ()
    extra_rows = reference_rows(
        reference_specs, prompt_name=reference_prompt, cache_dir=cache_dir, device=device, precision=precision
    )
    evaluated = embedder(random_init)
    about = describe_model(model_dir)
    about.update(
        label=f"{about['model']} ({RANDOM_INIT})" if random_init else about["model"],
        weights=RANDOM_INIT if random_init else "trained",
        precision=choice.to_dict(),
        device=str(device),
        backend=evaluated.backend,
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
    rows.update(extra_rows)
    state = Path(model_dir) / "trainer_state.json"
    out = Path(output_dir) if output_dir else Path(model_dir) / ("eval_random_init" if random_init else "eval")
    return run_suite(
        evaluated,
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
        directions=directions,
    )


def _suite(value: str) -> str:
    """A ``--suite`` value: a registered suite or a user classification dataset spec."""
    if value in SUITES or is_spec(value):
        return value
    choices = ", ".join(repr(suite) for suite in SUITES)
    raise argparse.ArgumentTypeError(f"invalid choice: {value!r} (choose from {choices}); or hf:FOLDER_OR_ID")


def expand_languages(value: str) -> list[str]:
    """``--languages``: comma-separated codes and names of ``LANGUAGE_LISTS`` (``e5``, ``ten``), expanded in order;
    a code that a list and another item share is kept once (where it first comes). ValueError on a bad code, a code
    given twice by hand, or nothing."""
    out: list[str] = []
    by_hand: list[str] = []
    for item in (part.strip() for part in value.split(",") if part.strip()):
        if item in LANGUAGE_LISTS:
            codes = list(LANGUAGE_LISTS[item])
        else:
            code = normalize_language(item)
            if code in by_hand:
                raise ValueError(f"language {code!r} given twice")
            by_hand.append(code)
            codes = [code]
        out += [lang for lang in codes if lang not in out]
    if not out:
        raise ValueError("no language given")
    return out


def _languages(value: str) -> list[str]:
    try:
        return expand_languages(value)
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
        help="evaluated languages, comma-separated codes or named lists: "
        f"{', '.join(LANGUAGE_LISTS)} (e5: the 93 languages of multilingual-e5-small's model card; ten: NTREX-128's); "
        "flores-devtest takes every language with a FLORES-200 file, as an ISO 639-1 code (sw) or a FLORES-200 code "
        "(swh_Latn) (default: the paper's five and every language the model was trained on, from its config); each "
        "set uses the ones it has",
    )
    parser.add_argument(
        "--directions",
        choices=DIRECTIONS,
        default="auto",
        help="xsim directions of the multi-way retrieval sets: all ordered language pairs, or english (to and from "
        f"English only, one search per direction); auto: all up to {FULL_MATRIX_LANGUAGES} languages, english beyond; "
        "over many languages the printed summary gives the mean, the worst five languages and how many are worse "
        "than each reference row. xed-dev (en-X pairs) is always scored to and from English (default: %(default)s)",
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
        "--backend",
        choices=("auto", *BACKENDS),
        default="torch",
        help="run the model on the files hf-tlaser export wrote into its folder (ONNX Runtime, OpenVINO) instead of "
        "torch, to measure what the backend costs; auto: the folder's measured choice (default: %(default)s)",
    )
    parser.add_argument(
        "--no-references", action="store_true", help="leave out the random-init and tfidf-char reference rows"
    )
    parser.add_argument(
        "--reference",
        action="append",
        default=[],
        metavar="SPEC",
        help="another model as a row of the same tables and plots, repeatable: a sentence-transformers model folder "
        "or Hub id (ID or ID@REVISION), or an hf_tlaser model folder; where its vectors have the model's width, also a "
        "cross-model row (the model's queries searched among the reference's targets: xx -> en shows a distilled "
        "student's shared space)",
    )
    parser.add_argument(
        "--reference-prompt",
        default=AUTO,
        metavar="NAME",
        help="prompt of the --reference sentence-transformers models: auto (their 'query' prompt, e5's for "
        "symmetric tasks, when they have one), none, or a prompt name (default: %(default)s)",
    )
    parser.add_argument(
        "--cache-dir",
        help="teacher-vector cache of the --reference models, reused by later runs: a folder, or none (default: "
        "$HF_TLASER_TEACHER_CACHE, else ~/.cache/hf_tlaser/teachers)",
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

    def work() -> int:
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
            reference_specs=args.reference,
            reference_prompt=args.reference_prompt,
            cache_dir=args.cache_dir,
            backend=args.backend,
            directions=args.directions,
        )
        print(summarize(results))
        return 0

    return run_command("hf-tlaser evaluate", work)


if __name__ == "__main__":
    sys.exit(main())

"""``hf-tlaser add-language MODEL --language X --language-pairs SPEC --output-dir OUT``: a language that a trained
model lacks joins its shared space, LASER3-style (Heffernan et al. 2022: a student taught on the new language's
parallel text to land where the teacher puts the English side).

It is one ``hf-tlaser train`` run whose data and start the recipe decides:

- ``--init-from MODEL``: the encoder continues from the model's (an hf_tlaser member trained with ``--init-from``);
  the translation decoder starts fresh, as in any warm start;
- ``--teacher MODEL``: the model itself, frozen, is its own teacher: every sentence of a batch is pulled towards the
  teacher's vector of its English side (``training/distill.py``), ``--distill-weight`` ``DISTILL_WEIGHT`` by default
  (the MSE of unit-length vectors is ~1e-3, so weight 1 leaves the term without effect; docs/results.md, "Adding a
  language");
- the member's own losses on the new pairs (``--language-pairs``, columns X and en) and on replayed pairs of
  languages it has (``--replay`` corpora, ``--replay-pairs``): the curriculum takes its pairs in turn, so X-en gets
  one update in ``1 + len(replay pairs)``.

Every other ``hf-tlaser train`` flag passes through (``--max-steps``, ``--teacher-cache``, ``--seed`` ...). The
folder also gets ``ADD_LANGUAGE_RECORD`` (the language, the start and the data), which the model card reads.
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import sys
from pathlib import Path

from hf_tlaser.commands import run_command
from hf_tlaser.data import Pair, corpus_languages, resolve_corpora
from hf_tlaser.data.languages import normalize_language, parse_pairs
from hf_tlaser.errors import UsageError
from hf_tlaser.guards import refuse_outputs_over_inputs
from hf_tlaser.model_folders import ADD_LANGUAGE_RECORD, model_folder, read_json
from hf_tlaser.training.cli import build_parser, parse_namespace, train
from hf_tlaser.training.presets import BACKBONE_MEMBERS
from hf_tlaser.training.run import read_record
from hf_tlaser.training.spec import RunSpec

logger = logging.getLogger("hf_tlaser.train")

DISTILL_WEIGHT = 500.0
"""The recipe's ``--distill-weight`` (chosen on FLORES-200 devtest is<->en, docs/results.md, "Adding a language")."""
UPDATES = 150
"""The recipe's ``--max-steps``."""
REPLAY, REPLAY_PAIRS = "multi30k", "de-en,fr-en"
"""The recipe's replay: corpora and pairs of languages every model of the ten has."""
DECIDED = {
    "--init-from": "MODEL",
    "--teacher": "MODEL (the model is its own teacher)",
    "--corpora": "--language-pairs and --replay",
    "--pairs": "--language and --replay-pairs",
}
"""``hf-tlaser train`` flags the recipe sets itself, with what sets them here."""


def build_add_parser() -> argparse.ArgumentParser:
    """``hf-tlaser train``'s parser with the recipe's arguments and defaults (``--max-steps``, ``--distill-weight``);
    the flags it decides are left out of the help."""
    parser = build_parser()
    parser.prog = "hf-tlaser add-language"
    parser.description = (
        "Add a language to a trained model, LASER3-style: the model is its own frozen teacher, its own losses train on "
        "the new pairs, and pairs of languages it has are replayed (docs/training.md, 'Adding a language'). Every "
        "other hf-tlaser train flag passes through."
    )
    parser.add_argument("start", metavar="MODEL", help="the trained model folder (or Hub id) the language joins")
    parser.add_argument(
        "--language", required=True, help="the added language's code (e.g. is), or several, comma-separated (is,kab)"
    )
    parser.add_argument(
        "--language-pairs",
        required=True,
        help="corpus specs of the new languages' pairs with English, comma-separated (tsv:PATH ...)",
    )
    parser.add_argument("--replay", default=REPLAY, help="corpora of the replayed pairs ('' for none)")
    parser.add_argument("--replay-pairs", default=REPLAY_PAIRS, help="pairs replayed from --replay ('' for none)")
    parser.add_argument(
        "--again",
        action="store_true",
        help="add a language MODEL was already trained on (its training_languages), with a warning",
    )
    parser.set_defaults(max_steps=UPDATES, distill_weight=DISTILL_WEIGHT, model=None)
    # the flags the recipe decides are refused (add_language_spec), not offered; argparse has no public way to change
    # the help of an action already added, nor a public list of them
    for action in parser._actions:
        if set(action.option_strings) & set(DECIDED):
            action.help = argparse.SUPPRESS
        elif "--model" in action.option_strings:
            action.help = "the start's family (default: the one its hf_tlaser_train.json names)"
    return parser


def start_family(folder: Path, where: str) -> str:
    """The ``--model`` of a trained member folder (its ``hf_tlaser_train.json``); UsageError for a folder that is no
    warm-started member."""
    model = ((read_record(folder) or {}).get("args") or {}).get("model")
    if model not in BACKBONE_MEMBERS:
        raise UsageError(
            f"{where}: not an hf_tlaser {'/'.join(BACKBONE_MEMBERS)} model trained by hf-tlaser train --init-from "
            f"(its hf_tlaser_train.json names {model!r}); give such a folder, or --model"
        )
    return model


def check_data(new: str, replay: str, pairs: list[Pair], added: int, data_dir: str | None) -> None:
    """UsageError, naming add-language's own flags, for a corpus spec of ``--language-pairs`` or ``--replay`` that is
    malformed or missing, or that lacks a language of its pairs (``pairs``: the ``added`` new languages' with English
    first, then the replayed ones); no text is read."""
    needed = {
        "--language-pairs": {lang for pair in pairs[:added] for lang in pair},
        "--replay": {lang for pair in pairs[added:] for lang in pair},
    }
    for flag, corpora in (("--language-pairs", new), ("--replay", replay)):
        if not corpora:
            continue
        try:
            available = corpus_languages(resolve_corpora(corpora, data_dir))
        except UsageError as err:
            raise UsageError(f"{flag}: {err}") from None
        missing = sorted(needed[flag] - set(available))
        if missing:
            what = "--language and English" if flag == "--language-pairs" else "--replay-pairs"
            raise UsageError(
                f"{flag} {corpora}: no {', '.join(missing)} text (it has {', '.join(available)}), which {what} need"
            )


def trained_languages(folder: Path) -> list[str]:
    """The languages a model folder was trained on (its config's ``training_languages``)."""
    return list((read_json(folder / "config.json") or {}).get("training_languages") or [])


def add_language_spec(argv: list[str]) -> tuple[RunSpec, dict]:
    """The run of an ``add-language`` command line and its record; UsageError (before any model or data is read)
    for a flag the recipe decides, a bad language code or pairs, a start folder that is not a trained member, a
    language the start was trained on (unless ``--again``), an ``--output-dir`` that is or holds the start, or a
    corpus without the languages of its pairs."""
    given = {arg.split("=", 1)[0] for arg in argv if arg.startswith("--")}
    for flag, instead in DECIDED.items():
        if flag in given:
            raise UsageError(f"{flag}: add-language decides it; give {instead} instead")
    args = vars(parse_namespace(build_add_parser(), argv))
    start, language, new, replay, replayed, again = (
        args.pop(name) for name in ("start", "language", "language_pairs", "replay", "replay_pairs", "again")
    )
    try:
        languages = [normalize_language(code) for code in language.split(",")]
    except ValueError as err:
        raise UsageError(f"--language: {err}") from None
    if "en" in languages:
        raise UsageError("--language en: the pivot; give the code of another language (e.g. is, et, el)")
    if len(set(languages)) < len(languages):
        raise UsageError(f"--language {language}: a language is named twice")
    pairs = [*(f"{code}-en" for code in languages), *filter(None, replayed.split(","))]
    try:
        parsed = parse_pairs(",".join(pairs))
    except ValueError as err:
        raise UsageError(f"--replay-pairs {replayed!r}: {err}") from None
    if replayed and not replay:
        raise UsageError(f"--replay-pairs {replayed}: give the corpora they come from with --replay")
    folder = model_folder(start, f"MODEL {start}")[0]
    model = args.pop("model") or start_family(folder, f"MODEL {start}")
    known = trained_languages(folder)
    repeated = ",".join(code for code in languages if code in known)
    if repeated:
        if not again:
            raise UsageError(
                f"--language {repeated}: MODEL {start} was trained on {repeated} already (its training languages: "
                f"{', '.join(known)}); give another language, or --again to train it on more {repeated} text"
            )
        logger.warning("--again: MODEL %s was trained on %s already; it is trained on more of it", start, repeated)
    refuse_outputs_over_inputs({"--output-dir": args["output_dir"]}, {"MODEL": folder})
    check_data(new, replay, parsed, len(languages), args["data_dir"])
    corpora = ",".join(filter(None, (new, replay)))
    decided = dict(model=model, init_from=start, teacher=start, corpora=corpora, pairs=",".join(pairs))
    spec = RunSpec(**{**args, **decided})
    record = {
        "language": ",".join(languages),
        "start": start,
        "language_pairs": new,
        "replay": replay,
        "replay_pairs": replayed,
    }
    return spec, record


def own_flags(message: str, record: dict) -> str:
    """A message of ``hf-tlaser train`` in add-language's flags: ``--corpora C`` as the ``--language-pairs`` and
    ``--replay`` that decided it, ``--pairs P`` as ``--language`` and ``--replay-pairs``."""
    corpora = [f"--language-pairs {record['language_pairs']}"]
    pairs = [f"--language {record['language']}"]
    if record["replay"]:
        corpora.append(f"--replay {record['replay']}")
    if record["replay_pairs"]:
        pairs.append(f"--replay-pairs {record['replay_pairs']}")
    message = re.sub(r"--corpora( \S+)?", lambda _: " ".join(corpora), message)
    return re.sub(r"--pairs( [^\s:;]+)?", lambda _: " ".join(pairs), message)


def add_language(spec: RunSpec, record: dict) -> Path:
    """Train the run and write ``ADD_LANGUAGE_RECORD`` into its folder (the main process's job); returns the
    folder. A mistake found in training is reported in add-language's own flags (``own_flags``)."""
    try:
        trainer = train(spec)
    except UsageError as err:
        raise UsageError(own_flags(str(err), record)) from None
    out = Path(trainer.args.output_dir)
    if trainer.is_world_process_zero():
        (out / ADD_LANGUAGE_RECORD).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    return out


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``hf-tlaser add-language``."""

    def work() -> int:
        spec, record = add_language_spec(list(sys.argv[1:] if argv is None else argv))
        out = add_language(spec, record)
        print(f"added {record['language']} to {record['start']}: saved model and tokenizer to {out}")
        return 0

    return run_command("hf-tlaser add-language", work)


if __name__ == "__main__":
    sys.exit(main())

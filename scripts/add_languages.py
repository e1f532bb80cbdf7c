"""Languages the start barely knows, added LASER3-style (issue 70 item 5): the Tatoeba Challenge pairs of
``tatoeba-challenge-lowres/`` split into training and dev pairs, ``hf-tlaser add-language`` on them, and the table of
errors before and after (the dev splits, FLORES-200 devtest where it has the language, the ten main languages on
NTREX-128 and the FLORES-200 sample over e5's languages for a model that carries every added language).

    python scripts/add_languages.py splits --output runs/lowres             # the dev and training splits
    python scripts/add_languages.py curve --start runs/demo --language kab  # 200, 1,000 and all pairs of one language
    python scripts/add_languages.py multi --start runs/demo                 # every language at once
    python scripts/add_languages.py table --output runs/lowres              # the table of every model evaluated so far

The splits: each file's pairs in a fixed shuffled order (seeded by the language's code); the first
``max(25, min(500, n // 10))`` are its dev split, never trained on; the rest its training pairs, of which the first 200
and 1,000 make the curve's smaller sets. Every model is evaluated once, into ``OUTPUT/eval/NAME``; a finished run or
evaluation is kept as it is when the command is run again. Arguments after ``--`` go to ``hf-tlaser add-language``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
from pathlib import Path

LANGUAGES = ("kab", "lat", "tuk", "yid", "uig", "tat", "kzj", "oci", "pam", "tzl")
"""The ten files of ``tatoeba-challenge-lowres/``, largest first."""
FLORES = {
    "kab": "kab_Latn",
    "tuk": "tuk_Latn",
    "uig": "uig_Arab",
    "tat": "tat_Cyrl",
    "yid": "ydd_Hebr",
    "oci": "oci_Latn",
}
"""The added languages that FLORES-200 has, and its codes for them."""
CURVE = (200, 1000, None)
"""The curve's training pairs (None: all)."""
DEV_MIN, DEV_MAX, DEV_SHARE = 25, 500, 10
"""A dev split holds n // DEV_SHARE pairs, at least DEV_MIN and at most DEV_MAX."""


def hf_tlaser(*args: str) -> None:
    """Run an ``hf-tlaser`` command; stop with its exit code when it fails."""
    print("$ hf-tlaser " + " ".join(args), flush=True)
    code = subprocess.call(["hf-tlaser", *args])
    if code:
        sys.exit(code)


def read_pairs(path: Path, language: str) -> list[str]:
    """The rows of a TSV whose header is ``en<TAB>LANGUAGE``."""
    lines = path.read_text(encoding="utf-8").split("\n")
    if lines[0] != f"en\t{language}":
        sys.exit(f"{path}: its header is {lines[0]!r}, expected 'en<TAB>{language}'")
    return [line for line in lines[1:] if line]


def write_pairs(path: Path, language: str, rows: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{row}\n" for row in [f"en\t{language}", *rows]), encoding="utf-8")


def split_path(output: Path, part: str, language: str) -> Path:
    return output / "splits" / part / f"en-{language}.tsv"


def spec(path: Path, language: str) -> str:
    """The corpus spec of a split (its header's columns named: three-letter codes are never guessed)."""
    return f"tsv:{path}:en=en:{language}={language}"


def splits(output: Path, data_dir: Path) -> None:
    """Write every language's dev split, its training pairs and the curve's smaller sets."""
    for language in LANGUAGES:
        rows = read_pairs(data_dir / "tatoeba-challenge-lowres" / f"en-{language}.tsv", language)
        random.Random(language).shuffle(rows)
        dev = max(DEV_MIN, min(DEV_MAX, len(rows) // DEV_SHARE))
        write_pairs(split_path(output, "dev", language), language, rows[:dev])
        write_pairs(split_path(output, "train", language), language, rows[dev:])
        for size in CURVE:
            if size is not None and size < len(rows) - dev:
                write_pairs(split_path(output, f"train-{size}", language), language, rows[dev : dev + size])
        print(f"{language}: {len(rows)} pairs, {dev} dev, {len(rows) - dev} training")


def evaluate(output: Path, model: str, name: str, languages: list[str], main_languages: bool) -> Path:
    """Evaluate ``model`` on the dev splits of ``languages`` and FLORES-200 where it has them (and, with
    ``main_languages``, NTREX-128 and the FLORES-200 sample over e5's languages) into ``OUTPUT/eval/NAME``."""
    folder = output / "eval" / name
    if (folder / "dev" / "results.json").is_file():
        return folder
    dev = [spec(split_path(output, "dev", language), language) for language in languages]
    flores = ["en", *(FLORES[language] for language in languages if language in FLORES)]
    common = ["--suite", "retrieval", "--no-references", "--projection", "none", "--directions", "english"]
    hf_tlaser("evaluate", model, *common, "--retrieval-sets", *dev, "--languages", ",".join(["en", *languages]),
              "--output-dir", str(folder / "dev"))  # fmt: skip
    if len(flores) > 1:
        hf_tlaser("evaluate", model, *common, "--retrieval-sets", "flores-devtest", "--languages", ",".join(flores),
                  "--output-dir", str(folder / "flores"))  # fmt: skip
    if main_languages:
        hf_tlaser("evaluate", model, *common[:-2], "--retrieval-sets", "ntrex128", "flores-sample", "--languages",
                  "e5", "--output-dir", str(folder / "main"))  # fmt: skip
    return folder


def add(output: Path, start: str, languages: list[str], part: str, name: str, extra: list[str]) -> Path:
    """``hf-tlaser add-language`` of ``languages`` (their ``part`` split) to ``start`` into ``OUTPUT/NAME``."""
    out = output / name
    if not (out / "model.safetensors").is_file():
        pairs = ",".join(spec(split_path(output, part, language), language) for language in languages)
        hf_tlaser("add-language", start, "--language", ",".join(languages), "--language-pairs", pairs,
                  "--output-dir", str(out), "--seed", "1", *extra)  # fmt: skip
    return out


def english_errors(results: Path) -> dict[str, tuple[float, float]]:
    """``{language: (X -> en, en -> X)}`` xsim error % of every retrieval set in a ``results.json``."""
    retrieval = json.loads(results.read_text(encoding="utf-8")).get("retrieval") or {}
    errors = {}
    for by_margin in (retrieval.get("matrices") or {}).values():
        matrix = next(iter(by_margin.values()))
        langs, cells = matrix["langs"], matrix["xsim"]
        pivot = langs.index("en")
        for i, lang in enumerate(langs):
            if i != pivot and cells[i][pivot] is not None:
                errors[lang] = (float(cells[i][pivot]), float(cells[pivot][i]))
    return errors


def table(output: Path) -> str:
    """The markdown table of every model evaluated under ``OUTPUT/eval``: per language, the dev split's and
    FLORES-200's errors (mean of both directions)."""
    lines = ["| model | " + " | ".join(LANGUAGES) + " |", "|---|" + "---|" * len(LANGUAGES)]
    flores_codes = {code: language for language, code in FLORES.items()}
    for folder in sorted((output / "eval").iterdir()):
        dev = english_errors(folder / "dev" / "results.json") if (folder / "dev" / "results.json").is_file() else {}
        flores_file = folder / "flores" / "results.json"
        flores = (
            {flores_codes.get(k, k): v for k, v in english_errors(flores_file).items()} if flores_file.is_file() else {}
        )
        cells = []
        for language in LANGUAGES:
            parts = [f"{sum(dev[language]) / 2:.1f}" if language in dev else "-"]
            if language in flores:
                parts.append(f"({sum(flores[language]) / 2:.1f})")
            cells.append(" ".join(parts))
        lines.append(f"| {folder.name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    split = argv.index("--") if "--" in argv else len(argv)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("step", choices=("splits", "curve", "multi", "table"))
    parser.add_argument("--output", type=Path, default=Path("runs/lowres"))
    parser.add_argument("--data-dir", type=Path, default=Path(os.environ.get("HF_TLASER_DATA", "../shared/data")))
    parser.add_argument("--start", default="runs/demo", help="the model the languages join (the main job's)")
    parser.add_argument("--language", default="kab", choices=LANGUAGES, help="the curve's language")
    args = parser.parse_args(argv[:split])
    extra = argv[split + 1 :]
    if args.step in ("curve", "multi"):  # the start's NTREX-128 and FLORES-200 sample: the main job's evaluation
        evaluate(args.output, args.start, "start", list(LANGUAGES), False)
    if args.step == "splits":
        splits(args.output, args.data_dir)
    elif args.step == "curve":
        for size in CURVE:
            part = "train" if size is None else f"train-{size}"
            if not split_path(args.output, part, args.language).is_file():
                continue
            name = f"add-{args.language}-{size or 'all'}"
            evaluate(args.output, str(add(args.output, args.start, [args.language], part, name, extra)), name,
                     [args.language], False)  # fmt: skip
    elif args.step == "multi":
        name = "add-all-ten"
        evaluate(args.output, str(add(args.output, args.start, list(LANGUAGES), "train", name, extra)), name,
                 list(LANGUAGES), True)  # fmt: skip
    if (args.output / "eval").is_dir():
        print(table(args.output))
    return 0


if __name__ == "__main__":
    sys.exit(main())

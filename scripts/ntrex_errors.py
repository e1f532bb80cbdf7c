"""What the remaining NTREX-128 errors are (issue 53, item 6): embed NTREX-128 with a model (and a judge model), find
every xx -> en error of the evaluation's protocol (absolute margin, k = 4: the retrieved English sentence is not the
reference), and sort each error into one class by rules that read the texts:

- ``duplicate``: the retrieved English sentence says the same as the reference (character similarity >= 0.8 after
  lower-casing, or one contains the other): NTREX repeats near-identical sentences;
- ``numbers/names``: they differ only in numbers or capitalised words (the rest of their words agree, Jaccard >= 0.5);
- ``reference``: the judge model also prefers the retrieved sentence to the reference for this source (a
  misaligned or loose reference, or a second translation of the same source);
- ``failure``: the rest, a real retrieval error.

Writes ``errors.tsv`` (language, class, source, reference, retrieved) and ``summary.json`` (counts per language and
class) into --output, and prints the table. The first --sample errors of each language go into the TSV (all are
counted).

    python scripts/ntrex_errors.py runs/demo --judge ../shared/data/multilingual-e5-small --output runs/ntrex-errors
"""

from __future__ import annotations

import argparse
import difflib
import json
import re
from pathlib import Path

import numpy as np

from hf_tlaser.bitext.knn import l2_normalize
from hf_tlaser.bitext.margin import margin_candidates
from hf_tlaser.evaluation.readers import read_ntrex128
from hf_tlaser.teachers.targets import load_teacher

CLASSES = ("duplicate", "numbers/names", "reference", "failure")
WORD = re.compile(r"\w+", re.UNICODE)


def retrieved(src: np.ndarray, tgt: np.ndarray) -> np.ndarray:
    """The evaluation's retrieval: index of the English row each source row retrieves (absolute margin, k = 4)."""
    forward, _ = margin_candidates(l2_normalize(src), l2_normalize(tgt), k=4, margin="absolute")
    return forward.best()[0]


def classify(reference: str, found: str, judge_prefers_found: bool) -> str:
    """One of ``CLASSES`` for an error whose reference is ``reference`` and whose retrieved sentence is ``found``."""
    a, b = reference.lower().strip(), found.lower().strip()
    if a in b or b in a or difflib.SequenceMatcher(None, a, b).ratio() >= 0.8:
        return "duplicate"
    words_a, words_b = set(WORD.findall(reference)), set(WORD.findall(found))
    differing = words_a ^ words_b
    shared = len(words_a & words_b) / max(len(words_a | words_b), 1)
    if shared >= 0.5 and all(w[0].isdigit() or w[0].isupper() for w in differing):
        return "numbers/names"
    return "reference" if judge_prefers_found else "failure"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model")
    parser.add_argument("--judge", required=True, help="a second model (sentence-transformers or hf_tlaser folder)")
    parser.add_argument("--output", type=Path, required=True)
    parser.add_argument("--languages", default="de,fr,es,it,cs,ru,zh,tr,fi")
    parser.add_argument("--sample", type=int, default=50, help="errors per language written to errors.tsv")
    args = parser.parse_args()
    langs = args.languages.split(",")
    texts = read_ntrex128(langs=[*langs, "en"])
    vectors = {}
    for name in (args.model, args.judge):
        encoder = load_teacher(name)
        vectors[name] = {lang: np.asarray(encoder.encode(texts[lang])) for lang in texts}
    args.output.mkdir(parents=True, exist_ok=True)
    counts: dict[str, dict[str, int]] = {}
    rows = []
    for lang in langs:
        found = retrieved(vectors[args.model][lang], vectors[args.model]["en"])
        src, en = l2_normalize(vectors[args.judge][lang]), l2_normalize(vectors[args.judge]["en"])
        errors = np.nonzero(found != np.arange(len(found)))[0]
        counts[lang] = dict.fromkeys(CLASSES, 0)
        for n, i in enumerate(errors):
            prefers = float(src[i] @ en[found[i]]) > float(src[i] @ en[i])
            kind = classify(texts["en"][i], texts["en"][found[i]], prefers)
            counts[lang][kind] += 1
            if n < args.sample:
                rows.append("\t".join([lang, kind, texts[lang][i], texts["en"][i], texts["en"][found[i]]]))
    (args.output / "errors.tsv").write_text(
        "language\tclass\tsource\treference\tretrieved\n" + "\n".join(rows) + "\n", encoding="utf-8"
    )
    (args.output / "summary.json").write_text(json.dumps(counts, indent=2) + "\n", encoding="utf-8")
    total = {kind: sum(c[kind] for c in counts.values()) for kind in CLASSES}
    print("| language | errors | " + " | ".join(CLASSES) + " |")
    print("|---" * (len(CLASSES) + 2) + "|")
    for lang, c in [*counts.items(), ("all", total)]:
        print(f"| {lang} | {sum(c.values())} | " + " | ".join(str(c[kind]) for kind in CLASSES) + " |")


if __name__ == "__main__":
    main()

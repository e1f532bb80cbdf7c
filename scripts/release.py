"""The release recipe: the main job's warm start from multilingual-e5-small, trained for ``--updates`` updates (the
main job stops at 400), evaluated on the reported test set and the dev sets with the start, TF-IDF and random init as
reference rows, with a model card ready for ``hf-tlaser push``.

    python scripts/release.py --output runs/release          # scripts/release.sh: set-up first, then this
    hf-tlaser push runs/release my-org/ct-laser-e5-small

A run that was cut short continues from its last checkpoint when started again with the same ``--output``
(``--resume auto``, the same data order); a finished one is kept as it is. Arguments after ``--`` go to
``hf-tlaser train`` (the tests' tiny runs). The recipe and its measured learning curve: docs/results.md, "Release".

How long it takes, all of it (data, 2,000 updates, the evaluation, the card): 8.1 minutes on one H100 and 80.6
minutes on a 2-core CPU with native bf16 (``scripts/release.sh`` from a fresh clone, set-up included), measured; about
3.5 hours on a 2-core AVX2-only CPU (fp32), estimated from the 5.2 s per update measured there plus the evaluation.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

CORPORA = "wmt-newstest-multiway,europarl-v2-it-en,multi30k,wmt-newstest-bilingual,stsb-multi-mt,wmt-newstest-more"
"""The main job's corpora: the paper's and the cs/ru/zh/tr/fi <-> en news pairs."""
UPDATES = 2000
RETRIEVAL_SETS = ("ntrex128", "flores-devtest", "ud-pud", "tico19-test")
"""The reported test set (NTREX-128, 90 directions) and the dev sets the recipe was chosen on."""


def finished(output: Path, updates: int) -> bool:
    """Whether ``output`` holds a run that reached ``updates``."""
    state = output / "trainer_state.json"
    return state.is_file() and json.loads(state.read_text(encoding="utf-8")).get("global_step", 0) >= updates


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    split = argv.index("--") if "--" in argv else len(argv)
    data_dir = os.environ.get("HF_TLASER_DATA", "../shared/data")
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--output", type=Path, default=Path("runs/release"))
    parser.add_argument("--data-dir", default=data_dir)
    parser.add_argument("--init", help="the pretrained start (default: DATA_DIR/multilingual-e5-small)")
    parser.add_argument("--updates", type=int, default=UPDATES)
    parser.add_argument("--corpora", default=CORPORA)
    parser.add_argument("--retrieval-sets", nargs="+", default=list(RETRIEVAL_SETS))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="SIB-200 classifier seeds")
    parser.add_argument("--epochs", type=int, default=500, help="SIB-200 classifier epochs (LASER's 500)")
    args = parser.parse_args(argv[:split])
    extra = argv[split + 1 :]
    from hf_tlaser.cli import main as hf_tlaser
    from hf_tlaser.hub.model_card import write_model_card

    init = args.init or str(Path(args.data_dir) / "multilingual-e5-small")
    started = time.perf_counter()
    if not finished(args.output, args.updates):
        resume = ["--resume", "auto"] if any(args.output.glob("checkpoint-*")) else []
        train = ["train", "--model", "ctlaser", "--init-from", init, "--corpora", args.corpora, "--seed", "1"]
        train += ["--data-dir", args.data_dir, "--output-dir", str(args.output), "--max-steps", str(args.updates)]
        train += ["--save-steps", "250", "--save-total-limit", "2", *resume, *extra]
        code = hf_tlaser(train)
        if code:
            return code
    evaluate = ["evaluate", str(args.output), "--suite", "retrieval", "sib200", "--data-dir", args.data_dir]
    evaluate += ["--retrieval-sets", *args.retrieval_sets, "--seeds", *map(str, args.seeds), "--reference", init]
    evaluate += ["--epochs", str(args.epochs)]
    code = hf_tlaser([*evaluate, "--projection", "none"])
    if code:
        return code
    card = write_model_card(args.output)
    minutes = (time.perf_counter() - started) / 60
    print(
        f"release: {args.output} ({minutes:.1f} min), model card {card}; publish with: hf-tlaser push {args.output} ID"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

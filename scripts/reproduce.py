"""Small-scale reproduction of the T-LASER paper's Table 4 (Table 6: ``--bilingual``), the whole family
(``--family``) and NV vs cNV (``--cnv``).

Trains ``tlaser``, ``ctlaser``, ``laser6`` and ``claser6`` (``--family``: also ``laser1``, ``yu2018`` and ``ldt``;
``--bilingual``: T-LASER vs cT-LASER on en-es/es-en only; ``--cnv``: ``nv`` and ``cnv`` on en-de, where ``nv`` is
``--model cnv`` with ``distance_beta=0``) on the same data (one joint BPE) for the same number of updates with the
same seed, evaluates each next to the same architecture at random init, the tfidf-char lexical baseline and the
majority class (SIB-200 zero-shot transfer with LASER's classifier protocol, NTREX-128 retrieval; a cNV model on its
own two languages), and writes one markdown table with parameters, pairs seen, CPU-minutes and tokens/s beside the
scores. ``--budget-minutes`` is only a safety stop per model.

    python scripts/reproduce.py --updates 800 [--preset tiny] [--family | --bilingual | --cnv]
        [--models M ...] [--precision auto|fp32|bf16|fp16] [--output runs/reproduce]

``--precision`` goes to training and evaluation alike; ``auto`` picks what is fast on this hardware (bf16 only on
CUDA or a CPU with native bf16, else fp16 on CUDA or fp32).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from hf_tlaser.evaluation.cli import evaluate_model
from hf_tlaser.evaluation.lexical import NAME as LEXICAL_NAME
from hf_tlaser.evaluation.readers import LANGS
from hf_tlaser.evaluation.report import markdown_table
from hf_tlaser.hardware import PRECISIONS, cpu_capability, cpu_model, resolve_precision
from hf_tlaser.training.cli import parse_args, train
from hf_tlaser.training.presets import MODELS


@dataclass(frozen=True)
class Setting:
    """Which models train on which pairs; ``languages`` are the ones they are evaluated on."""

    title: str
    models: tuple[str, ...]
    pairs: str
    languages: tuple[str, ...] = LANGS


SETTINGS = {
    "table4": Setting(
        "8 pairs (Table 4 setting)",
        ("tlaser", "ctlaser", "laser6", "claser6"),
        "de-en,de-es,en-es,es-en,fr-en,fr-es,it-en,it-es",
    ),
    "family": Setting(
        "the LASER family on the 8 pairs (Table 4 setting)",
        ("tlaser", "ctlaser", "laser1", "laser6", "claser6", "yu2018", "ldt"),
        "de-en,de-es,en-es,es-en,fr-en,fr-es,it-en,it-es",
    ),
    "bilingual": Setting("bilingual en-es/es-en (Table 6 setting)", ("tlaser", "ctlaser"), "en-es,es-en"),
    "cnv": Setting("NV vs cNV on en-de (the cNV paper's comparison)", ("nv", "cnv"), "en-de", ("en", "de")),
}
MODEL_ARGS = {"nv": ["--model", "cnv", "--set", "distance_beta=0"]}
"""`hf-tlaser train` flags of the models that are a setting of another (default: ``--model NAME``)."""
PER_LANGUAGE = ("cnv", "nv")
"""Models with their own tokenizer per language (from their NMT pair), so no joint BPE is shared with them."""


def mean_xsim(result: dict, name: str = "ntrex128", margin: str = "ratio") -> float:
    matrix = np.asarray(result["retrieval"]["matrices"][name][margin]["xsim"], dtype=float)
    return float(np.nanmean(matrix))


def _without_option(argv: list[str], flag: str) -> list[str]:
    """``argv`` without ``flag VALUE`` / ``flag=VALUE``."""
    out, skip = [], False
    for item in argv:
        if skip:
            skip = False
        elif item == flag:
            skip = True
        elif not item.startswith(f"{flag}="):
            out.append(item)
    return out


def _nmt_pair_of(out: Path, setting: Setting) -> tuple[Path, Path] | None:
    """The NMT pair (a->b, b->a folders) that an earlier per-language model of this run trained, if any."""
    a, b = setting.pairs.split(",")[0].split("-")
    for model in setting.models:
        pair = (out / model / f"nmt-{a}-{b}", out / model / f"nmt-{b}-{a}")
        if model in PER_LANGUAGE and all((folder / "config.json").is_file() for folder in pair):
            return pair
    return None


def run(args: argparse.Namespace) -> None:
    out = Path(args.output)
    setting = SETTINGS[args.setting]
    bpe_models = [m for m in setting.models if m not in PER_LANGUAGE]
    models = args.models or list(setting.models)
    precision = resolve_precision(args.precision)  # warns once, up front, where the choice will be slow
    out.mkdir(parents=True, exist_ok=True)
    saved = out / "results.json"
    records = json.loads(saved.read_text()) if saved.exists() else {}  # earlier models of the same run
    tokenizer = next((out / m for m in bpe_models if (out / m / "tokenizer.json").exists()), None)
    nmt = _nmt_pair_of(out, setting)  # NV and cNV start from one NMT pair: the only difference is beta
    for model in models:
        folder = out / model
        train_args = [
            *MODEL_ARGS.get(model, ["--model", model]), "--preset", args.preset, "--pairs", setting.pairs,
            "--output-dir", str(folder),
            "--max-steps", str(args.updates), "--max-minutes", str(args.budget_minutes), "--seed", str(args.seed),
            "--save-steps", "1000000", "--logging-steps", "20", "--precision", args.precision, *args.train_args,
        ]  # fmt: skip
        shares_bpe = model not in PER_LANGUAGE
        if shares_bpe and tokenizer is not None and tokenizer != folder:  # one joint BPE for all models, as the paper
            train_args += ["--tokenizer", str(tokenizer)]
        if model in PER_LANGUAGE and nmt is not None:  # the pair is trained: its --nmt-steps no longer applies
            train_args = _without_option(train_args, "--nmt-steps") + ["--nmt-pair", ",".join(map(str, nmt))]
        start = time.monotonic()
        trainer = train(parse_args(train_args))
        minutes = (time.monotonic() - start) / 60
        tokenizer = tokenizer or (folder if shares_bpe else None)
        nmt = nmt or _nmt_pair_of(out, setting)
        history = [e for e in trainer.state.log_history if "tokens_per_second" in e]
        result = evaluate_model(  # one call: the model, then the random-init and tfidf-char reference rows
            folder,
            ["retrieval", "sib200"],
            folder / "eval",
            seeds=tuple(range(args.seeds)),
            retrieval_sets=("ntrex128",),
            precision=args.precision,
        )
        for init, entry in {"trained": result, **result["references"]}.items():
            key = f"reference/{init}" if init == LEXICAL_NAME else f"{model}/{init}"
            records[key] = scores(entry)
        records[f"{model}/trained"].update(
            updates=trainer.state.global_step,
            pairs=sum(e.get("pairs", 0) for e in history),
            minutes=minutes,
            cpu_minutes=minutes * torch.get_num_threads(),
            tokens_per_second=float(np.median([e["tokens_per_second"] for e in history[1:]] or [0.0])),
            parameters=parameter_counts(trainer.model),
        )
        records["reference/majority class"] = {"sib200": {"cross": [result["sib200"]["majority_class"], 0.0]}}
        saved.write_text(json.dumps(records, indent=2))
    n = len(setting.languages)
    text = (
        f"## Reproduction: {setting.title}, preset `{args.preset}`, {args.updates} updates per model, "
        f"seed {args.seed}\n\n"
        f"Command: `python scripts/reproduce.py {' '.join(args.argv)}`\n\n"
        f"Machine: {cpu_model()} ({cpu_capability() or platform.machine()}), {torch.get_num_threads()} threads, "
        f"torch {torch.__version__}; precision {precision.precision} ({precision.reason}).\n\n"
        f"NTREX-128: mean xsim error % over the {n * (n - 1)} language directions ({', '.join(setting.languages)}), "
        "cosine (absolute) and margin (ratio) scoring. SIB-200: zero-shot transfer accuracy %, LASER's MLDoc "
        f"classifier protocol, mean ± std over {args.seeds} classifier seeds (cross = train on one language, test on "
        f"the {n - 1} other(s); same = diagonal). Parameters: the whole training model / the sentence encoder. "
        "CPU-minutes: wall minutes of training x threads.\n\n"
        f"{results_table(records)}\n"
    )
    (out / "results.md").write_text(text)
    print(text)


def scores(entry: dict) -> dict:
    """NTREX-128 mean xsim errors and the SIB-200 summary of one evaluated row."""
    return {
        "sib200": entry["sib200"]["summary"],
        "ntrex_xsim_absolute": mean_xsim(entry, margin="absolute"),
        "ntrex_xsim_ratio": mean_xsim(entry),
    }


def parameter_counts(model: torch.nn.Module) -> tuple[int, int]:
    """Parameters of the training model and of its sentence encoder (the model itself when it has no decoder)."""
    encoder = getattr(model, "encoder", model)
    return sum(p.numel() for p in model.parameters()), sum(p.numel() for p in encoder.parameters())


def results_table(records: dict) -> str:
    """One markdown table: every model trained and at random init, then the lexical baseline and majority class."""

    def cell(value: float | None, digits: int = 1) -> str:
        return "-" if value is None else f"{value:.{digits}f}"

    def accuracy(record: dict, key: str) -> str:
        value = record["sib200"].get(key)
        return "-" if value is None else f"{value[0]:.1f} ± {value[1]:.1f}"

    rows = []
    references = [key for key in records if key.startswith("reference/")]
    for key in [*(key for key in records if key not in references), *references]:
        record = records[key]
        model, init = key.split("/")
        label = init if model == "reference" else f"{model} ({init})"
        params = record.get("parameters")
        rows.append(
            [
                label,
                f"{params[0] / 1e6:.1f} / {params[1] / 1e6:.1f}" if params else "-",
                record.get("updates", "-"),
                f"{record['pairs']:,}" if record.get("pairs") else "-",
                cell(record.get("cpu_minutes")),
                cell(record.get("tokens_per_second"), 0),
                cell(record.get("ntrex_xsim_absolute")),
                cell(record.get("ntrex_xsim_ratio")),
                *(accuracy(record, k) for k in ("cross", "same", "all")),
            ]
        )
    headers = ["model", "params M", "updates", "pairs seen", "CPU-min", "target tok/s", "NTREX err % (abs)"]
    headers += ["(ratio)", "SIB-200 cross %", "same %", "all %"]
    return markdown_table(headers, rows)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--updates", type=int, default=800, help="optimizer updates per model")
    parser.add_argument("--budget-minutes", type=float, default=60.0, help="safety stop per model (wall-clock)")
    parser.add_argument("--preset", default="tiny", choices=["tiny", "small"])
    which = parser.add_mutually_exclusive_group()
    which.add_argument(
        "--bilingual",
        dest="setting",
        action="store_const",
        const="bilingual",
        help="Table 6: en-es/es-en only, T-LASER vs cT-LASER",
    )
    which.add_argument(
        "--family",
        dest="setting",
        action="store_const",
        const="family",
        help="every family member of the 8-pair setting: T-LASER, cT-LASER, LASER_1, LASER_6, cLASER_6, Yu 2018, LDT",
    )
    which.add_argument(
        "--cnv", dest="setting", action="store_const", const="cnv", help="NV vs cNV on en-de (the cNV paper)"
    )
    parser.set_defaults(setting="table4")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--seeds", type=int, default=3, help="classifier seeds")
    parser.add_argument("--precision", choices=PRECISIONS, default="auto", help="training and evaluation precision")
    parser.add_argument("--bf16", dest="precision", action="store_const", const="bf16", help="same as --precision bf16")
    parser.add_argument("--output", default="runs/reproduce")
    parser.add_argument(
        "--models",
        nargs="+",
        default=None,
        choices=[*MODELS, *MODEL_ARGS],
        help="train only these (results of others are kept)",
    )
    parser.add_argument("train_args", nargs=argparse.REMAINDER, help="extra `hf-tlaser train` flags after --")
    args = parser.parse_args(argv)
    args.train_args = [a for a in args.train_args if a != "--"]
    args.argv = sys.argv[1:] if argv is None else argv
    run(args)


if __name__ == "__main__":
    main()

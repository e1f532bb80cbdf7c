"""Model card (``README.md``) of a trained hf_tlaser folder, filled from ``config.json``, ``hf_tlaser_train.json``,
``trainer_state.json``, ``tokenizer.json`` and an optional evaluation ``results.json``; every part may be missing."""

from __future__ import annotations

import json
import math
import os
import struct
from pathlib import Path
from string import Template

from huggingface_hub import EvalResult, ModelCardData

from hf_tlaser import __version__

from .st_layout import embedding_dim, pooling_mode, read_model_config

TEMPLATE = Path(__file__).with_name("model_card_template.md")
LANGUAGE_NAMES = {"de": "German", "en": "English", "es": "Spanish", "fr": "French", "it": "Italian"}
RESEARCH_ONLY = "research use (no explicit licence)"
# terms of the corpora in shared/data, from their PROVENANCE.md files
CORPUS_TERMS = {
    "wmt-newstest-multiway": f"WMT news test sets 2008-2013: {RESEARCH_ONLY}",
    "wmt-newstest-bilingual": f"WMT news test sets 2014-2018: {RESEARCH_ONLY}",
    "europarl-v2-it-en": "Europarl: no known copyright restrictions (European Parliament proceedings)",
    "multi30k": "Multi30k (Flickr30K captions): **non-commercial research and educational use only**",
    "stsb-multi-mt": "STS benchmark + DeepL translations: scores CC BY-SA 4.0, texts under their sources' licences",
    "tico19-test": "TICO-19: CC0",
    "xed": "XED / OpenSubtitles pairs: CC BY 4.0",
    "ntrex128": "NTREX-128: CC BY-SA 4.0",
    "ud-pud": "Parallel UD treebanks: CC BY-SA 3.0",
    "flores-devtest": "FLORES-200: CC BY-SA 4.0",
}
NON_COMMERCIAL = {"multi30k"}
SUMMARY_KEYS = ("cross", "same", "all")
CLASSIFICATION_NAMES = {
    "sib200": "SIB-200 topic classification",
    "umsab": "UMSAB tweet sentiment",
    "mldoc": "MLDoc document classification",
}


def _read_json(path: Path) -> dict | None:
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def _table(header: list[str], rows: list[list[object]]) -> str:
    def cell(value: object) -> str:
        return f"{value:.2f}" if isinstance(value, float) else str(value)

    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def _format_mean_std(value: tuple[float, float | None] | None) -> str:
    if value is None:
        return "-"
    return f"{value[0]:.2f}" + (f" ± {value[1]:.2f}" if value[1] is not None else "")


def _mean_std(value: object) -> tuple[float, float | None] | None:
    """A summary entry as (mean, std): ``[mean, std]`` from the evaluation suite, or a bare number."""
    if isinstance(value, (int, float)):
        return float(value), None
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, (int, float)) for v in value):
        return float(value[0]), float(value[1]) if len(value) > 1 else None
    return None


def retrieval_averages(results: dict) -> list[tuple[str, str, float, list[str], list[list[float | None]]]]:
    """(set, margin, mean xsim error %, languages, matrix) per retrieval set and margin of ``results.json``."""
    out = []
    matrices = (results.get("retrieval") or {}).get("matrices") or {}
    for name, by_margin in matrices.items():
        for margin, entry in (by_margin or {}).items():
            matrix = entry.get("xsim") or []
            values = [v for row in matrix for v in row if isinstance(v, (int, float)) and not math.isnan(v)]
            if values:
                out.append((name, margin, sum(values) / len(values), entry.get("langs") or [], matrix))
    return out


def classification_summaries(results: dict) -> dict[str, dict[str, tuple[float, float | None]]]:
    """``{set: {"cross"|"same"|"all": (mean accuracy %, std)}}`` of the classification suites in ``results.json``
    (top-level entries with a ``summary``, or entries of a ``classification`` dict)."""
    candidates = {k: v for k, v in results.items() if k != "retrieval" and isinstance(v, dict)}
    candidates.update(results.get("classification") or {})
    out = {}
    for name, entry in candidates.items():
        summary = entry.get("summary", entry) if isinstance(entry, dict) else {}
        parsed = {key: _mean_std(summary.get(key)) for key in SUMMARY_KEYS}
        parsed = {key: value for key, value in parsed.items() if value is not None}
        if parsed:
            out[name] = parsed
    return out


def _eval_results(results: dict) -> list[EvalResult]:
    """model-index entries: average xsim error per retrieval set and margin, accuracies per classification set."""
    entries = [
        EvalResult(
            task_type="sentence-similarity",
            task_name="Cross-lingual sentence retrieval (xsim)",
            dataset_type=name,
            dataset_name=name,
            metric_type="xsim_error",
            metric_name=f"average xsim error % ({margin} margin)",
            metric_value=round(avg, 2),
        )
        for name, margin, avg, _, _ in retrieval_averages(results)
    ]
    for name, summary in classification_summaries(results).items():
        entries += [
            EvalResult(
                task_type="text-classification",
                task_name="Zero-shot cross-lingual transfer",
                dataset_type=name,
                dataset_name=CLASSIFICATION_NAMES.get(name, name),
                metric_type="accuracy",
                metric_name=f"{key} accuracy %",
                metric_value=round(mean, 2),
            )
            for key, (mean, _) in summary.items()
        ]
    return entries


def _checkpoint_parameters(model_dir: Path) -> tuple[int, int] | None:
    """(encoder parameters, all parameters) from the safetensors header, without loading any tensor."""
    path = model_dir / "model.safetensors"
    if not path.is_file():
        return None
    with path.open("rb") as handle:
        header = json.loads(handle.read(struct.unpack("<Q", handle.read(8))[0]))
    sizes = {key: math.prod(info["shape"]) for key, info in header.items() if key != "__metadata__"}
    encoder = sum(n for key, n in sizes.items() if key.startswith("encoder."))
    return encoder or sum(sizes.values()), sum(sizes.values())


def _corpora(train: dict | None) -> list[str]:
    """Training corpus names recorded by ``hf-tlaser train`` (its comma-separated ``--corpora``)."""
    return [c for c in str(((train or {}).get("args") or {}).get("corpora") or "").split(",") if c]


def _lowercases(model_dir: Path) -> bool:
    tokenizer = _read_json(model_dir / "tokenizer.json") or {}
    return '"Lowercase"' in json.dumps(tokenizer.get("normalizer"))


def _model_name(config: dict) -> str:
    constrained = float(config.get("distance_beta") or 0) > 0
    if config["model_type"] == "tlaser":
        return "cT-LASER" if constrained else "T-LASER"
    return f"{'cLASER' if constrained else 'LASER'}-{config.get('num_layers', 1)}"


def _details(config: dict, model_dir: Path) -> str:
    dim = embedding_dim(config)
    if config["model_type"] == "tlaser":
        architecture = (
            f"pre-LN transformer encoder: {config['num_hidden_layers']} layers, hidden size {dim}, "
            f"{config['num_attention_heads']} heads, FFN {config['intermediate_size']}"
        )
        vector = f"{dim}-dim final encoder output at the STR_TAG position (CLS pooling)"
    else:
        architecture = (
            f"BiLSTM encoder: {config.get('num_layers', 1)} layer(s), {config['lstm_hidden_size']} units per "
            f"direction, {config.get('embed_dim')}-dim token embeddings"
        )
        vector = f"{dim}-dim max over the BiLSTM outputs of all tokens (max pooling)"
    beta = float(config.get("distance_beta") or 0)
    objective = "multilingual translation through a decoder that sees only the sentence vector"
    if beta > 0:
        objective += f", plus the cT-LASER distance constraint (beta={beta}, alpha={config.get('distance_alpha')})"
    align = float(config.get("align_loss_weight") or 0)
    if align > 0:
        objective += f", plus an in-batch contrastive alignment loss (weight {align}, per pair)"
    rows = [
        ["Architecture", architecture],
        ["Sentence vector", vector],
        ["Training objective", objective],
        [
            "Vocabulary",
            f"joint BPE, {config['vocab_size']} tokens" + (", lowercased" if _lowercases(model_dir) else ""),
        ],
        ["Maximum input length", f"{config.get('max_position_embeddings')} tokens (incl. STR_TAG and </s>)"],
        ["Languages", ", ".join(config.get("languages") or [])],
    ]
    counts = _checkpoint_parameters(model_dir)
    if counts:
        rows.append(["Parameters", f"{counts[0] / 1e6:.1f}M in the encoder ({counts[1] / 1e6:.1f}M with the decoder)"])
    return _table(["", ""], rows)


def _training(train: dict | None, state: dict | None) -> str:
    if not train:
        return "Training details were not recorded with this checkpoint (no `hf_tlaser_train.json`)."
    args, recipe = train.get("args") or {}, train.get("recipe") or {}
    corpora = _corpora(train)
    parts = []
    if corpora:
        parts.append("Parallel corpora:\n")
        parts.append(_table(["corpus", "terms"], [[c, CORPUS_TERMS.get(c, "see its provenance")] for c in corpora]))
        parts.append("")
    rows = [
        ["preset", train.get("preset")],
        ["language pairs (curriculum)", args.get("pairs")],
        ["optimizer updates", (state or {}).get("global_step", args.get("max_steps"))],
        ["learning rate (inverse sqrt)", recipe.get("learning_rate")],
        ["warm-up updates", recipe.get("warmup_updates")],
        ["tokens per update", recipe.get("update_tokens")],
        ["tokens per micro-batch", recipe.get("max_tokens")],
        ["batching", recipe.get("batching")],
        ["precision", "bf16 autocast" if args.get("bf16") else "fp16" if args.get("fp16") else "fp32"],
        ["seed", args.get("seed")],
    ]
    history = (state or {}).get("log_history") or []
    losses = [entry["loss"] for entry in history if "loss" in entry]
    if losses:
        rows.append(["final training loss", round(float(losses[-1]), 4)])
    runtime = next((entry["train_runtime"] for entry in reversed(history) if "train_runtime" in entry), None)
    if runtime is not None:
        rows.append(["training time", f"{float(runtime) / 60:.1f} min"])
    parts.append(_table(["setting", "value"], [[k, v] for k, v in rows if v is not None]))
    return "\n".join(parts)


def _evaluation(results: dict | None) -> str:
    if not results:
        return "Not evaluated yet: no `results.json` was found next to the model (`hf-tlaser evaluate` writes one)."
    parts = []
    retrieval = retrieval_averages(results)
    if retrieval:
        parts.append("Cross-lingual retrieval, xsim error % (lower is better), averaged over language pairs:\n")
        sizes = (results.get("retrieval") or {}).get("sizes") or {}
        parts.append(
            _table(
                ["set", "sentences", "margin", "avg xsim error %"],
                [[n, sizes.get(n, "?"), m, a] for n, m, a, _, _ in retrieval],
            )
        )
        for name, margin, _, langs, matrix in retrieval:
            if margin != retrieval[0][1]:
                continue
            rows = [[lang, *("-" if v is None else float(v) for v in row)] for lang, row in zip(langs, matrix)]
            parts += ["", f"{name}, {margin} margin (row: query language, column: searched language):\n"]
            parts.append(_table(["query \\ target", *langs], rows))
        parts.append("")
    classification = classification_summaries(results)
    if classification:
        parts.append("Zero-shot cross-lingual classification accuracy % (classifier trained on one language):\n")
        rows = [
            [CLASSIFICATION_NAMES.get(name, name), *(_format_mean_std(summary.get(key)) for key in SUMMARY_KEYS)]
            for name, summary in classification.items()
        ]
        parts.append(_table(["set", "cross-lingual", "same language", "all"], rows))
    return "\n".join(parts) or "`results.json` holds no retrieval or classification results."


def _limitations(config: dict, train: dict | None) -> str:
    languages = ", ".join(config.get("languages") or [])
    items = [
        f"Trained on {languages} only; vectors of other languages are not aligned.",
        f"Inputs are limited to {config.get('max_position_embeddings')} tokens: `hf_tlaser.encode` raises on longer "
        "inputs unless `truncation=True`, sentence-transformers truncates at `max_seq_length`.",
        "The training text is news, parliament proceedings, image captions and short web text; other domains "
        "may embed less well.",
    ]
    preset = str((train or {}).get("preset") or "")
    if preset and not preset.endswith("-paper"):
        items.append(f"This is a small-scale (`{preset}`) CPU reproduction, far from the paper's model and data size.")
    restricted = [c for c in _corpora(train) if c in NON_COMMERCIAL]
    if restricted:
        items.append(
            f"**Data licences:** the training data include {', '.join(restricted)}, licensed for non-commercial "
            "research and educational use only, and WMT test sets distributed for research. The apache-2.0 licence "
            "covers the code; check the data terms (table above) before any commercial use of the weights."
        )
    else:
        items.append("**Data licences:** check the terms of the training corpora (table above) before commercial use.")
    return "\n".join(f"- {item}" for item in items)


def load_results(model_dir: str | os.PathLike, results: str | os.PathLike | dict | None = None) -> dict | None:
    """Evaluation results: ``results`` (a dict or a ``results.json`` path), else ``MODEL_DIR/results.json``."""
    if isinstance(results, dict):
        return results
    return _read_json(Path(results) if results is not None else Path(model_dir) / "results.json")


def render_model_card(
    model_dir: str | os.PathLike,
    repo_id: str | None = None,
    results: str | os.PathLike | dict | None = None,
) -> str:
    """Markdown model card (YAML metadata + sections) for a saved hf_tlaser model folder."""
    folder = Path(model_dir)
    config = read_model_config(folder)
    mode = pooling_mode(config)
    train = _read_json(folder / "hf_tlaser_train.json")
    state = _read_json(folder / "trainer_state.json")
    evaluation = load_results(folder, results)
    repo_id = repo_id or f"your-username/{folder.resolve().name}"
    name = _model_name(config)
    languages = list(config.get("languages") or [])
    corpora = _corpora(train)
    tags = ["sentence-transformers", "feature-extraction", "sentence-similarity", "t-laser", "multilingual"]
    if config["model_type"] == "laser":
        tags.append("laser")
    metadata = ModelCardData(
        language=languages,
        license="apache-2.0",
        library_name="transformers",
        pipeline_tag="sentence-similarity",
        tags=tags,
        datasets=corpora or None,
    )
    eval_results = _eval_results(evaluation or {})
    if eval_results:  # model-index: name + results
        metadata.model_name, metadata.eval_results = repo_id.split("/")[-1], eval_results
    summary = (
        f"A {name} multilingual sentence encoder (Li & Mak 2020, *Transformer based Multilingual document Embedding "
        f"model*) trained with hf_tlaser: one {embedding_dim(config)}-dim "
        f"vector per sentence or document for {', '.join(LANGUAGE_NAMES.get(x, x) for x in languages)}."
    )
    pooling_code = (
        "the STR_TAG vector, = output.last_hidden_state[:, 0]"
        if mode == "cls"
        else "max over the BiLSTM outputs of the non-pad tokens"
    )
    return Template(TEMPLATE.read_text(encoding="utf-8")).substitute(
        metadata=metadata.to_yaml(),
        title=f"{name}: {repo_id.split('/')[-1]}",
        summary=summary,
        details=_details(config, folder),
        language_names=", ".join(LANGUAGE_NAMES.get(x, x) for x in languages),
        repo_id=repo_id,
        pooling_code=pooling_code,
        training=_training(train, state),
        evaluation=_evaluation(evaluation),
        limitations=_limitations(config, train),
        version=__version__,
    )


def write_model_card(
    model_dir: str | os.PathLike,
    repo_id: str | None = None,
    results: str | os.PathLike | dict | None = None,
    overwrite: bool = False,
) -> Path:
    """Write ``README.md`` into the folder (kept as it is when present, unless ``overwrite``); return its path."""
    path = Path(model_dir) / "README.md"
    if overwrite or not path.is_file():
        path.write_text(render_model_card(model_dir, repo_id, results), encoding="utf-8")
    return path

"""sentence-transformers layout for a saved hf_tlaser model folder.

The files use the module names and config keys that sentence-transformers has read since 2.x (``sentence_transformers.
models.Transformer`` / ``Pooling`` / ``Normalize``, ``pooling_mode_*`` booleans); 6.x maps them onto its new modules.
sentence-transformers never lets a folder switch on remote code by itself: load with
``SentenceTransformer(path, trust_remote_code=True)``, which it forwards to ``AutoConfig``, ``AutoModel`` and
``AutoTokenizer``.
"""

from __future__ import annotations

import json
import os
from importlib import metadata
from pathlib import Path

# model_type -> (pooling mode, why). T-LASER's sentence vector is the final encoder output at STR_TAG (position 0);
# LASER's is the max over the non-pad BiLSTM outputs, and LaserModel's last_hidden_state is exactly those outputs
# (zeros at padding, which Pooling masks out), so sentence-transformers' max pooling reproduces it.
POOLING = {"tlaser": "cls", "laser": "max"}
_LEGACY_POOLING_KEYS = {
    "cls": "pooling_mode_cls_token",
    "mean": "pooling_mode_mean_tokens",
    "max": "pooling_mode_max_tokens",
    "mean_sqrt_len": "pooling_mode_mean_sqrt_len_tokens",
    "weightedmean": "pooling_mode_weightedmean_tokens",
    "lasttoken": "pooling_mode_lasttoken",
}


def read_model_config(model_dir: str | os.PathLike) -> dict:
    """The folder's ``config.json`` as a dict (read as JSON: no model code runs)."""
    path = Path(model_dir) / "config.json"
    if not path.is_file():
        raise FileNotFoundError(f"{model_dir} has no config.json; is it a save_pretrained model folder?")
    return json.loads(path.read_text(encoding="utf-8"))


def embedding_dim(config: dict) -> int:
    """Sentence-vector size: ``hidden_size`` (LASER configs derive it as 2 * lstm_hidden_size)."""
    if "hidden_size" in config:
        return int(config["hidden_size"])
    return 2 * int(config["lstm_hidden_size"])


def pooling_mode(config: dict) -> str:
    """sentence-transformers pooling mode that reproduces the model's ``pooler_output``."""
    model_type = config.get("model_type")
    if model_type not in POOLING:
        raise ValueError(f"model_type={model_type!r} is not an hf_tlaser model; expected one of {sorted(POOLING)}")
    return POOLING[model_type]


def _versions() -> dict[str, str]:
    found = {}
    for key, dist in (
        ("sentence_transformers", "sentence-transformers"),
        ("transformers", "transformers"),
        ("pytorch", "torch"),
    ):
        try:
            found[key] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return found


def _write_json(path: Path, value: object) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value, indent=2) + "\n", encoding="utf-8")
    return path


def add_sentence_transformers_files(
    model_dir: str | os.PathLike,
    normalize: bool = False,
    max_seq_length: int | None = None,
) -> list[Path]:
    """Write ``modules.json``, ``sentence_bert_config.json``, ``1_Pooling/config.json`` and
    ``config_sentence_transformers.json`` into a saved model folder; return the written paths.

    Pooling is CLS (STR_TAG) for T-LASER and max for LASER. ``normalize`` appends a ``Normalize`` module (unit
    vectors). ``max_seq_length`` (default: ``max_position_embeddings``) is where sentence-transformers truncates.
    Re-running overwrites these files, so switching ``normalize`` off removes the module.
    """
    folder = Path(model_dir)
    config = read_model_config(folder)
    mode = pooling_mode(config)
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
    ]
    if normalize:
        modules.append({"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"})
    pooling = {"word_embedding_dimension": embedding_dim(config)}
    pooling.update({key: name == mode for name, key in _LEGACY_POOLING_KEYS.items()})
    pooling["include_prompt"] = True
    length = max_seq_length or int(config.get("max_position_embeddings", 512))
    return [
        _write_json(folder / "modules.json", modules),
        _write_json(folder / "sentence_bert_config.json", {"max_seq_length": length, "do_lower_case": False}),
        _write_json(folder / "1_Pooling" / "config.json", pooling),
        _write_json(
            folder / "config_sentence_transformers.json",
            {
                "__version__": _versions(),
                "model_type": "SentenceTransformer",
                "prompts": {},
                "default_prompt_name": None,
                "similarity_fn_name": "cosine",
            },
        ),
    ]


def has_sentence_transformers_files(model_dir: str | os.PathLike) -> bool:
    """Whether the folder already has a sentence-transformers layout (``modules.json``)."""
    return (Path(model_dir) / "modules.json").is_file()

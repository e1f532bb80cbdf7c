"""The sentence-transformers folder format of an hf_tlaser model, written and read in one place: what every
``save_pretrained`` adds to the saved folder (``add_sentence_transformers_files``: ``modules.json``,
``sentence_bert_config.json``, ``1_Pooling/config.json``, ``config_sentence_transformers.json`` and a folder per
carried Dense) so that ``SentenceTransformer(folder, trust_remote_code=True)`` computes the model's sentence vector,
and what a warm start reads of a sentence-transformers folder (``read_sentence_transformers_folder``: its transformer
folder, pooling, prompts and the Dense and Normalize modules after pooling). The pooling and the carried modules'
computation are :mod:`.pooling`'s.

Saved ``trust_remote_code`` folders carry this module next to ``remote_code``, which imports it. sentence-transformers
never lets a folder switch on remote code by itself: load with ``SentenceTransformer(path, trust_remote_code=True)``,
which it forwards to ``AutoConfig``, ``AutoModel`` and ``AutoTokenizer``.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from .pooling import DEFAULT_ACTIVATION, SENTENCE_MODULES, pooling_mode, token_dim, torch_activation

_LEGACY_POOLING_KEYS = {
    "cls": "pooling_mode_cls_token",
    "mean": "pooling_mode_mean_tokens",
    "max": "pooling_mode_max_tokens",
    "mean_sqrt_len": "pooling_mode_mean_sqrt_len_tokens",
    "weightedmean": "pooling_mode_weightedmean_tokens",
    "lasttoken": "pooling_mode_lasttoken",
}
"""A pooling mode -> its ``pooling_mode_*`` boolean in a ``Pooling`` config (the keys read since 2.x)."""
_NORMALIZE_MODULE = "sentence_transformers.models.Normalize"
_DENSE_MODULE = "sentence_transformers.models.Dense"


def read_model_config(model_dir: str | os.PathLike) -> dict:
    """The folder's ``config.json`` as a dict (read as JSON: no model code runs)."""
    path = Path(model_dir) / "config.json"
    if not path.is_file():
        raise FileNotFoundError(f"{model_dir} has no config.json; is it a save_pretrained model folder?")
    return json.loads(path.read_text(encoding="utf-8"))


def read_json(path: Path) -> dict | list | None:
    """A JSON file's content; None where the file does not exist."""
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def has_sentence_transformers_files(model_dir: str | os.PathLike) -> bool:
    """Whether the folder already has a sentence-transformers layout (``modules.json``)."""
    return (Path(model_dir) / "modules.json").is_file()


# ---------------------------------------------------------------------------- writing a sentence-transformers folder


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
    normalize: bool | None = None,
    max_seq_length: int | None = None,
) -> list[Path]:
    """Write ``modules.json``, ``sentence_bert_config.json``, ``1_Pooling/config.json`` and
    ``config_sentence_transformers.json`` into a saved model folder; return the written paths.

    Every ``save_pretrained`` of the hf_tlaser models calls this, so ``SentenceTransformer(folder,
    trust_remote_code=True)`` pools like ``encode``: CLS (STR_TAG) for T-LASER, max for LASER. The files use the
    module names and config keys sentence-transformers has read since 2.x (``models.Transformer`` / ``Pooling`` /
    ``Normalize``, ``pooling_mode_*`` booleans). ``pipeline("feature-extraction", model=folder,
    trust_remote_code=True)`` loads the same encoder and returns its per-token final-layer outputs: the sentence
    vector is position 0 for T-LASER and the max over the tokens for LASER.

    The modules a backbone carried after pooling (``config.sentence_modules``: Dense, Normalize) follow the pooling in
    their order, each Dense in its own folder (``config.json`` and ``model.safetensors`` with the model's weights of
    it), so sentence-transformers computes the model's ``pooler_output``.

    ``normalize`` appends a ``Normalize`` module (unit vectors; not after a carried one); None keeps the folder's
    current choice (none for a new folder), True/False rewrite it. ``max_seq_length`` (default:
    ``max_position_embeddings``) is where sentence-transformers truncates.
    """
    folder = Path(model_dir)
    config = read_model_config(folder)
    mode = pooling_mode(config)
    if mode is None:  # sentence-transformers cannot pool like this model: no layout
        return []
    carried = config.get("sentence_modules") or []
    if normalize is None:  # a Normalize after the carried modules is the user's
        modules_path = folder / "modules.json"
        old = json.loads(modules_path.read_text(encoding="utf-8")) if modules_path.is_file() else []
        normalize = len(old) > 2 + len(carried) and old[-1].get("type") == _NORMALIZE_MODULE
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
    ]
    kinds = [module["type"] for module in carried]
    if normalize and kinds[-1:] != ["Normalize"]:
        kinds.append("Normalize")
    for idx, kind in enumerate(kinds, start=len(modules)):
        module_type = _DENSE_MODULE if kind == "Dense" else _NORMALIZE_MODULE
        modules.append({"idx": idx, "name": str(idx), "path": f"{idx}_{kind}", "type": module_type})
    pooling = {"word_embedding_dimension": token_dim(config)}
    pooling.update({key: name == mode for name, key in _LEGACY_POOLING_KEYS.items()})
    pooling["include_prompt"] = True
    length = max_seq_length or int(config.get("max_position_embeddings", 512))
    return [
        *write_dense_folders(folder, carried, modules[2:]),
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


HEAD_WEIGHT = re.compile(r"(?:^|\.)sentence_head\.(\d+)\.(linear\.(?:weight|bias))$")
"""A carried Dense's weight in a saved model (``encoder.`` in front in a translation checkpoint)."""


def saved_head_weights(folder: Path) -> dict[int, dict[str, torch.Tensor]]:
    """The carried Dense weights of a saved model folder (``model.safetensors`` or its shards), by module index:
    ``{0: {"linear.weight": ..., "linear.bias": ...}}``."""
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        files = sorted(set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    found: dict[int, dict[str, torch.Tensor]] = {}
    for name in files:
        if not (folder / name).is_file():
            raise FileNotFoundError(f"{folder} has no {name}: the carried Dense weights are read from it")
        with safe_open(str(folder / name), framework="pt") as weights:
            for key in weights.keys():  # noqa: SIM118 - safe_open is not a mapping
                match = HEAD_WEIGHT.search(key)
                if match:
                    found.setdefault(int(match.group(1)), {})[match.group(2)] = weights.get_tensor(key).contiguous()
    return found


def write_dense_folders(folder: Path, carried: list[dict], entries: list[dict]) -> list[Path]:
    """Write each carried Dense as sentence-transformers saves one (``config.json``, ``model.safetensors`` with
    ``linear.weight`` / ``linear.bias``) into its folder of ``entries`` (the modules.json entries after pooling,
    in the order of ``carried``); return the written paths."""
    dense = [(i, module) for i, module in enumerate(carried) if module["type"] == "Dense"]
    if not dense:
        return []
    weights = saved_head_weights(folder)
    written = []
    for i, module in dense:
        target = folder / entries[i]["path"]
        if set(weights.get(i, {})) != {"linear.weight"} | ({"linear.bias"} if module.get("bias", True) else set()):
            raise ValueError(f"{folder}: the saved weights lack sentence_head.{i} (a Dense of sentence_modules)")
        settings = {key: module[key] for key in ("in_features", "out_features") if key in module}
        settings["bias"] = module.get("bias", True)
        settings["activation_function"] = module.get("activation_function") or DEFAULT_ACTIVATION
        written.append(_write_json(target / "config.json", settings))
        save_file(weights[i], str(target / "model.safetensors"), metadata={"format": "pt"})
        written.append(target / "model.safetensors")
    return written


# ---------------------------------------------------------------------------- reading a sentence-transformers folder


class FolderFormatError(ValueError):
    """A sentence-transformers folder whose modules a member cannot reproduce; the message says which and why."""


ST_VECTOR = "sentence_embedding"
"""The sentence-transformers feature that the carried modules read and write."""
ST_POOLING_KEYS = {key: mode for mode, key in _LEGACY_POOLING_KEYS.items()}
"""The ``pooling_mode_*`` booleans of sentence-transformers' ``Pooling`` config before 6.x -> the mode."""


@dataclass
class CarriedModules:
    """The modules after pooling of a sentence-transformers folder (Dense, Normalize) that the member carries: their
    ``config.sentence_modules`` entries, in order, and their weights (the state dict of the encoder's
    ``sentence_head``)."""

    entries: list[dict] = field(default_factory=list)
    weights: dict[str, torch.Tensor] = field(default_factory=dict)


def read_st_pooling(folder: Path) -> str:
    """The pooling (``cls`` or ``mean``) of a sentence-transformers ``Pooling`` folder; FolderFormatError for
    another."""
    settings = read_json(folder / "config.json") or {}
    if isinstance(settings.get("pooling_mode"), str):  # sentence-transformers >= 6: "pooling_mode": "mean"
        modes = [settings["pooling_mode"] if settings["pooling_mode"] in ("cls", "mean") else None]
    else:  # the pooling_mode_* booleans of earlier releases
        modes = [ST_POOLING_KEYS.get(key) for key, on in settings.items() if key.startswith("pooling_mode") and on]
    if len(modes) != 1 or modes[0] not in ("cls", "mean"):
        raise FolderFormatError(f"its pooling {settings} is not one the members reproduce (cls or mean)")
    return modes[0]


def read_carried_module(kind: str, folder: Path, index: int) -> tuple[dict, dict[str, torch.Tensor]]:
    """The ``config.sentence_modules`` entry of a sentence-transformers module after pooling, and its weights under
    their name in the encoder's ``sentence_head`` (``{index}.linear.weight``); FolderFormatError (one line, naming the
    module) for one that the member cannot compute as sentence-transformers does (FolderFormatError)."""
    name = f"its {kind} module ({folder.name or 'the folder itself'})"
    if kind not in SENTENCE_MODULES:
        raise FolderFormatError(
            f"{name} after pooling cannot be carried into the member (only {' and '.join(SENTENCE_MODULES)} "
            "can); start from a folder without it"
        )
    settings = read_json(folder / "config.json") or {}
    ends = {settings.get("module_input_name") or ST_VECTOR, settings.get("module_output_name") or ST_VECTOR}
    if ends != {ST_VECTOR} or settings.get("use_residual"):
        raise FolderFormatError(
            f"{name} is not a plain {kind} of the sentence vector ({settings}); it cannot be carried"
        )
    if kind == "Normalize":
        return {"type": "Normalize"}, {}
    activation = settings.get("activation_function") or DEFAULT_ACTIVATION
    try:
        torch_activation(activation)
    except ValueError:
        raise FolderFormatError(
            f"{name} uses the activation {activation!r}; only torch.nn classes are carried"
        ) from None
    if (folder / "model.safetensors").is_file():
        weights = load_file(folder / "model.safetensors")
    elif (folder / "pytorch_model.bin").is_file():
        weights = torch.load(folder / "pytorch_model.bin", map_location="cpu", weights_only=True)
    else:
        raise FolderFormatError(f"{name} has no model.safetensors or pytorch_model.bin")
    entry = {
        "type": "Dense",
        "in_features": int(settings["in_features"]),
        "out_features": int(settings["out_features"]),
        "bias": bool(settings.get("bias", True)),
        "activation_function": activation,
    }
    shapes = {"linear.weight": (entry["out_features"], entry["in_features"])}
    if entry["bias"]:
        shapes["linear.bias"] = (entry["out_features"],)
    if {key: tuple(value.shape) for key, value in weights.items()} != shapes:
        raise FolderFormatError(f"{name} holds weights {sorted(weights)} that do not match its config.json")
    return entry, {f"{index}.{key}": value for key, value in weights.items()}


def read_sentence_transformers_folder(folder: Path) -> tuple[Path, str | None, dict, str | None, CarriedModules]:
    """``(transformer folder, pooling, prompts, default prompt name, carried modules)`` of a sentence-transformers
    folder; the folder itself, None, {}, None and no modules for a plain Hugging Face one. FolderFormatError for a
    first module other than Transformer, a pooling the members cannot reproduce (cls or mean), or after it a module
    other than Dense and Normalize (which ``read_carried_module`` reads)."""
    modules = read_json(folder / "modules.json")
    if not modules:
        return folder, None, {}, None, CarriedModules()
    kinds = [module["type"].rsplit(".", 1)[-1] for module in modules]
    if kinds[0] != "Transformer":
        raise FolderFormatError("its modules.json does not start with a Transformer module to start from")
    pooling = None
    if kinds[1:2] == ["Pooling"]:
        pooling = read_st_pooling(folder / modules[1]["path"])
    carried = CarriedModules()
    for kind, module in zip(kinds[1 + (pooling is not None) :], modules[1 + (pooling is not None) :]):
        if pooling is None:
            raise FolderFormatError(f"its {kind} module follows the Transformer without a Pooling module")
        entry, weights = read_carried_module(kind, folder / module.get("path", ""), len(carried.entries))
        carried.entries.append(entry)
        carried.weights.update(weights)
    st_config = read_json(folder / "config_sentence_transformers.json") or {}
    transformer = folder / modules[0].get("path", "")
    return transformer, pooling, st_config.get("prompts") or {}, st_config.get("default_prompt_name"), carried

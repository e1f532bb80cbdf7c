"""How a family pools its final states into the sentence vector, and the sentence-transformers modules a backbone
carried after pooling (Dense, Normalize), computed as sentence-transformers computes them. The folder format that
lets ``SentenceTransformer(folder, trust_remote_code=True)`` compute the same vector is :mod:`.st_folder`'s."""

from __future__ import annotations

import importlib
import inspect

import torch
import torch.nn.functional as F

SAVED_WITHOUT_POOLING = {"laser": "max", "ldt": "mean"}
"""The pooling of folders saved before their config named it (LASER's max, LDT's mean); every other hf_tlaser
config names its ``pooling``. LASER's sentence vector is the max over the non-pad BiLSTM outputs, and LaserModel's
last_hidden_state is exactly those outputs (zeros at padding, which Pooling masks out), so sentence-transformers' max
pooling reproduces it; T-LASER's ``cls`` is the final encoder output at STR_TAG (position 0)."""
ST_POOLINGS = ("cls", "mean", "max")
"""The poolings sentence-transformers' ``Pooling`` computes as the models do."""
SENTENCE_MODULES = ("Dense", "Normalize")
"""sentence-transformers modules after pooling that a model can carry (``config.sentence_modules``)."""
DEFAULT_ACTIVATION = "torch.nn.modules.activation.Tanh"
"""sentence-transformers' ``Dense`` activation when its config names none."""


def token_dim(config: dict) -> int:
    """Width of the final hidden states that sentence-transformers pools: ``teacher_dim`` with a projection head,
    else ``hidden_size`` (LASER configs derive it as 2 * lstm_hidden_size)."""
    if config.get("teacher_dim"):
        return int(config["teacher_dim"])
    if "hidden_size" in config:
        return int(config["hidden_size"])
    return 2 * int(config["lstm_hidden_size"])


def head_output_dim(modules: list[dict] | None, width: int) -> int:
    """Width of a pooled vector of ``width`` after the carried modules ``modules`` (``config.sentence_modules``):
    the last Dense's output, else ``width``."""
    dense = [int(module["out_features"]) for module in modules or () if module["type"] == "Dense"]
    return dense[-1] if dense else width


def embedding_dim(config: dict) -> int:
    """Sentence-vector size: the pooled width (``token_dim``) after the carried Dense modules, if any."""
    return head_output_dim(config.get("sentence_modules"), token_dim(config))


def pooling_mode(config: dict) -> str | None:
    """sentence-transformers pooling mode that reproduces the model's ``pooler_output``: the config's ``pooling``
    (``SAVED_WITHOUT_POOLING`` for an older folder); None where sentence-transformers has none (a Yu 2018 model with
    ``pooling="self_attention"``). ValueError for a config without one (another library's model)."""
    mode = config.get("pooling") or SAVED_WITHOUT_POOLING.get(config.get("model_type"))
    if mode is None:
        raise ValueError(
            f"model_type={config.get('model_type')!r} is not an hf_tlaser model (its config names no pooling)"
        )
    return mode if mode in ST_POOLINGS else None


def pool_hidden(hidden: torch.Tensor, attention_mask: torch.Tensor, mode: str) -> torch.Tensor:
    """The sentence vectors [B, d] of final states [B, S, d]: position 0 (``"cls"``: STR_TAG, a backbone's ``<s>``)
    or the mean over the non-pad positions (``"mean"``, special tokens included, as sentence-transformers)."""
    if mode == "cls":
        return hidden[:, 0]
    weights = attention_mask[..., None].to(hidden.dtype)
    return (hidden * weights).sum(1) / weights.sum(1).clamp(min=1)


def torch_activation(path: str) -> torch.nn.Module:
    """The activation that a sentence-transformers ``Dense`` config names by import path (``torch.nn.modules.
    activation.Tanh``, ``torch.nn.modules.linear.Identity``); ValueError for anything but a ``torch.nn`` module class
    (no other code is imported)."""
    module, _, name = path.rpartition(".")
    found = None
    if module == "torch.nn" or module.startswith("torch.nn."):
        try:
            found = getattr(importlib.import_module(module), name, None)
        except ImportError:
            found = None
    if not (inspect.isclass(found) and issubclass(found, torch.nn.Module)):
        raise ValueError(f"activation_function {path!r} is not a torch.nn module class")
    return found()


class CarriedDense(torch.nn.Module):
    """sentence-transformers' ``Dense`` on the sentence vector, ``activation(linear(x))``, with its weight names
    (``linear.weight``, ``linear.bias``)."""

    def __init__(
        self, in_features: int, out_features: int, bias: bool = True, activation_function: str = DEFAULT_ACTIVATION
    ):
        super().__init__()
        self.linear = torch.nn.Linear(in_features, out_features, bias=bias)
        self.activation = torch_activation(activation_function)

    def forward(self, vectors: torch.Tensor) -> torch.Tensor:
        return self.activation(self.linear(vectors))


class CarriedNormalize(torch.nn.Module):
    """sentence-transformers' ``Normalize``: unit L2 norm."""

    def forward(self, vectors: torch.Tensor) -> torch.Tensor:
        return F.normalize(vectors, p=2, dim=-1)


def sentence_head(config) -> torch.nn.Sequential | None:
    """The sentence-transformers modules after pooling that a backbone carried (``config.sentence_modules``, each
    ``{"type": "Dense", "in_features", "out_features", "bias", "activation_function"}`` or ``{"type": "Normalize"}``),
    in their order, applied to the pooled vector as sentence-transformers applies them; None without any. ValueError
    for another type or a Dense whose input is not the width before it (``hidden_size`` first)."""
    modules = getattr(config, "sentence_modules", None)
    if not modules:
        return None
    layers, width = [], config.hidden_size
    for module in modules:
        if module.get("type") not in SENTENCE_MODULES:
            raise ValueError(f"sentence_modules: {module.get('type')!r} is not one of {SENTENCE_MODULES}")
        if module["type"] == "Normalize":
            layers.append(CarriedNormalize())
            continue
        if module["in_features"] != width:
            raise ValueError(
                f"sentence_modules: a Dense reads {module['in_features']} features of a {width}-dim vector"
            )
        activation = module.get("activation_function") or DEFAULT_ACTIVATION
        layers.append(CarriedDense(width, module["out_features"], module.get("bias", True), activation))
        width = module["out_features"]
    return torch.nn.Sequential(*layers)


def describe_modules(modules: list[dict] | None) -> str:
    """The carried modules in words: ``Dense 768->768 (Tanh) and Normalize``; "" without any."""
    return " and ".join(
        f"Dense {m['in_features']}->{m['out_features']} ({m['activation_function'].rsplit('.', 1)[-1]})"
        if m["type"] == "Dense"
        else m["type"]
        for m in modules or ()
    )


def head_vectors(head: torch.nn.Sequential | None, pooled: torch.Tensor, unit: bool = True) -> torch.Tensor:
    """The pooled vectors through the carried modules (``sentence_head``); unchanged without any. ``unit=False``
    leaves out a trailing ``Normalize``: the decoder and the training losses read the vector before it (a scale that
    the cosine-based losses ignore), so a member trains on e5 exactly as on its encoder without the module, while the
    published embedding equals the start's."""
    if head is None:
        return pooled
    if not unit and isinstance(head[-1], CarriedNormalize):
        head = head[:-1]
    return head(pooled)

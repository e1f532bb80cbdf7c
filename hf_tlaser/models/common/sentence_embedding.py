"""Model code shared by every family (T-LASER / cT-LASER, LASER, Yu 2018, LDT, cNV): the cT-LASER
distance-constraint loss (Li & Mak 2020, eq. 7-10), the optional in-batch alignment loss, token-budget ``encode``,
the sentence-transformers layout written by every ``save_pretrained``, and decoding from sentence vectors through
transformers' ``GenerationMixin`` with a decoder cache.

This is the one copy. Each family folder has a ``sentence_embedding.py`` that makes itself an alias of this module,
so that its ``modeling_*.py`` imports ``from .sentence_embedding import ...``: the relative import that transformers
follows when it saves a ``trust_remote_code`` folder and loads it again. Saving copies that alias into the folder;
``SharedCodeMixin.save_pretrained`` then writes this file in its place (``save_shared_code``), so a saved folder is
self-contained and loads where hf_tlaser is not installed. This file therefore imports only torch, transformers and
the standard library, and no other file of the package.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import json
import os
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors import safe_open
from safetensors.torch import save_file
from transformers import AutoConfig, AutoModel, GenerationConfig, GenerationMixin, PreTrainedModel
from transformers.cache_utils import Cache
from transformers.utils import ModelOutput, logging

logger = logging.get_logger(__name__)


@dataclass
class DistanceLossOutput:
    """Parts of the distance-constraint loss for one batch of parallel pairs.

    Attributes:
        total: beta * sum_i d_p(i) + lambda / N_s * sum_j sum_i (hinge_ab + hinge_ba), a scalar (eq. 10 without the
            translation term).
        d_p: normalised distance of each parallel pair, shape [B] (eq. 7).
        d_n: normalised distance of each a->b negative, shape [N_s, B] (eq. 8).
        hinge: hinge_ab + hinge_ba for each negative, shape [N_s, B] (eq. 9).
        v_norm: the normaliser, mean L2 norm of the two batch-mean vectors.
    """

    total: torch.Tensor
    d_p: torch.Tensor
    d_n: torch.Tensor
    hinge: torch.Tensor
    v_norm: torch.Tensor


def unique_pairs(
    pair_index: torch.LongTensor, group_index: torch.LongTensor | None = None
) -> tuple[torch.LongTensor, torch.LongTensor]:
    """Pairs of encoded rows with repeats removed (a-b and b-a of a multi-way group are one pair of vectors), and
    the group of each: ``(pairs [P', 2], groups [P'])``. ``group_index`` defaults to every pair its own group.

    Rows come out sorted (smaller row first, pairs in lexicographic order), so pair-mode batches keep their order.
    """
    if group_index is None:
        group_index = torch.arange(len(pair_index), device=pair_index.device)
    if group_index.shape != pair_index.shape[:1]:
        raise ValueError(
            f"group_index {tuple(group_index.shape)} needs one entry per pair of {tuple(pair_index.shape)}"
        )
    pairs, inverse = pair_index.sort(dim=1).values.unique(dim=0, return_inverse=True)
    return pairs, group_index.new_empty(len(pairs)).scatter_(0, inverse, group_index)


def sample_negatives(
    batch_size: int,
    num_negatives: int,
    device: torch.device | None = None,
    generator: torch.Generator | None = None,
    groups: torch.Tensor | None = None,
) -> torch.Tensor:
    """Draw ``num_negatives`` in-batch negative indices for every row: LongTensor[N_s, B].

    A row's candidates are the rows of other groups (``groups``: LongTensor[B], the group of each pair; default:
    every row its own group, so a row excludes only itself). In a multi-way batch the other translations of the
    same group are not negatives. Sampling is uniform among the candidates, with replacement, as in the authors'
    code (which could also pick the positive). With all groups distinct this is the pair-mode draw, identical for
    the same RNG state. A row has no candidate only when the whole batch is one group; that raises ValueError.
    """
    rows = torch.arange(batch_size, device=device)
    groups = rows if groups is None else groups.to(rows.device)
    candidate = groups[None, :] != groups[:, None]  # [B, B]: column j is a candidate negative of row i
    counts = candidate.sum(1)
    if batch_size == 0 or not bool(counts.all()):
        raise ValueError(f"in-batch negatives need pairs from at least 2 groups; got {batch_size} pair(s) of 1 group")
    if bool((counts == batch_size - 1).all()):  # every other row is a candidate: the pair-mode draw
        draw = torch.randint(0, batch_size - 1, (num_negatives, batch_size), device=device, generator=generator)
    else:
        uniform = torch.rand((num_negatives, batch_size), device=device, generator=generator)
        draw = torch.minimum((uniform * counts).long(), counts - 1)
    # the draw-th candidate of each row (for distinct groups: draw + (draw >= row))
    position = candidate.long().cumsum(1)
    return torch.searchsorted(position, draw.T.contiguous() + 1).T


def distance_constraint_loss(
    p_a: torch.Tensor,
    p_b: torch.Tensor,
    neg_ab: torch.Tensor,
    neg_ba: torch.Tensor,
    *,
    alpha: float = 0.5,
    beta: float = 0.25,
    lam: float = 0.125,
    distance: str = "l2",
    eps: float = 1e-6,
    vnorm_grad: bool = True,
) -> DistanceLossOutput:
    """cT-LASER distance constraint between parallel sentence vectors ``p_a[i]`` and ``p_b[i]``.

    Args:
        p_a, p_b: sentence vectors [B, d]; row i of each is a translation pair.
        neg_ab: LongTensor[N_s, B] of indices into ``p_b``: negatives of ``p_a[i]``.
        neg_ba: LongTensor[N_s, B] of indices into ``p_a``: negatives of ``p_b[i]``.
        alpha: hinge margin. beta: weight of d_p. lam: weight of the averaged hinge terms.
        distance: "l2" (authors' code, plain norm) or "squared_l2" (paper text, eq. 7-8).
        eps: added to v_norm. vnorm_grad: False detaches v_norm from the graph.
    """
    if distance not in ("l2", "squared_l2"):
        raise ValueError(f"distance={distance!r}; expected 'l2' or 'squared_l2'")
    if p_a.shape != p_b.shape or p_a.dim() != 2:
        raise ValueError(f"p_a {tuple(p_a.shape)} and p_b {tuple(p_b.shape)} must both be [B, d]")
    p_a, p_b = p_a.float(), p_b.float()
    v_norm = (p_a.mean(0).norm() + p_b.mean(0).norm()) / 2
    if not vnorm_grad:
        v_norm = v_norm.detach()
    scale = v_norm + eps

    def dist(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        diff = x - y
        sq = (diff * diff).sum(-1)
        # identical sentences (names, numbers) give sq = 0, where sqrt has an infinite gradient
        return (sq if distance == "squared_l2" else sq.clamp_min(1e-12).sqrt()) / scale

    d_p = dist(p_a, p_b)  # eq. (7)
    d_n_ab = dist(p_a.unsqueeze(0), p_b[neg_ab])  # eq. (8), [N_s, B]
    d_n_ba = dist(p_b.unsqueeze(0), p_a[neg_ba])
    hinge = F.relu(alpha - (d_n_ab - d_p)) + F.relu(alpha - (d_n_ba - d_p))  # eq. (9), both directions
    total = beta * d_p.sum() + lam / neg_ab.shape[0] * hinge.sum()  # eq. (10) without 0.5 * l_mt
    return DistanceLossOutput(total=total, d_p=d_p, d_n=d_n_ab, hinge=hinge, v_norm=v_norm)


def align_loss(
    p_a: torch.Tensor, p_b: torch.Tensor, scale: float = 20.0, groups: torch.Tensor | None = None
) -> torch.Tensor:
    """In-batch alignment loss (Lightweight Dual Transformer, eq. 5), summed over the batch.

    Cross entropy of each pair against the other sentences of the batch, in both directions, on cosine similarity
    times ``scale`` (the paper uses raw inner products; cosine keeps the scale of the vectors free). ``groups``
    (LongTensor[B]): other pairs of the same group (multi-way translations of one another) are masked out, neither
    positives nor negatives.
    """
    logits = scale * F.normalize(p_a.float(), dim=-1) @ F.normalize(p_b.float(), dim=-1).T
    target = torch.arange(logits.shape[0], device=logits.device)
    if groups is not None:
        same_group = (groups[:, None] == groups[None, :]) & (target[:, None] != target[None, :])
        logits = logits.masked_fill(same_group, float("-inf"))
    return F.cross_entropy(logits, target, reduction="sum") + F.cross_entropy(logits.T, target, reduction="sum")


@torch.no_grad()
def mean_pairwise_cosine(vectors: torch.Tensor) -> torch.Tensor:
    """Mean cosine between distinct rows: near 1 means the vectors have collapsed onto one direction."""
    n = vectors.shape[0]
    if n < 2:
        return vectors.new_zeros(())
    unit = F.normalize(vectors.float(), dim=-1)
    total = unit.sum(0)
    return ((total @ total) - n) / (n * (n - 1))


@torch.no_grad()
def centered_pair_cosine(vectors: torch.Tensor, pair_index: torch.LongTensor) -> torch.Tensor | None:
    """Mean cosine between the two sides of each translation pair after removing the batch mean vector.

    The raw mean cosine is dominated by the component every sentence shares (a large common offset reads as
    collapse). Without it, translations of each other still point the same way (toward 1) only if the vectors carry
    what is specific to the sentence; collapsed vectors leave noise (near 0). (The mean cosine between all centred
    vectors would say nothing: it is about -1 / (n - 1) whatever the vectors.) None for fewer than 2 pairs.
    """
    if len(pair_index) < 2:
        return None
    centred = vectors.float() - vectors.float().mean(0)
    return F.cosine_similarity(centred[pair_index[:, 0]], centred[pair_index[:, 1]], dim=-1).mean()


# model_type -> sentence-transformers pooling mode. T-LASER's sentence vector is the final encoder output at STR_TAG
# (position 0); LASER's is the max over the non-pad BiLSTM outputs, and LaserModel's last_hidden_state is exactly
# those outputs (zeros at padding, which Pooling masks out), so sentence-transformers' max pooling reproduces it.
POOLING = {"tlaser": "cls", "laser": "max", "yu2018": "mean", "ldt": "mean"}
_LEGACY_POOLING_KEYS = {
    "cls": "pooling_mode_cls_token",
    "mean": "pooling_mode_mean_tokens",
    "max": "pooling_mode_max_tokens",
    "mean_sqrt_len": "pooling_mode_mean_sqrt_len_tokens",
    "weightedmean": "pooling_mode_weightedmean_tokens",
    "lasttoken": "pooling_mode_lasttoken",
}
_NORMALIZE_MODULE = "sentence_transformers.models.Normalize"
_DENSE_MODULE = "sentence_transformers.models.Dense"
SENTENCE_MODULES = ("Dense", "Normalize")
"""sentence-transformers modules after pooling that a model can carry (``config.sentence_modules``)."""
DEFAULT_ACTIVATION = "torch.nn.modules.activation.Tanh"
"""sentence-transformers' ``Dense`` activation when its config names none."""


def read_model_config(model_dir: str | os.PathLike) -> dict:
    """The folder's ``config.json`` as a dict (read as JSON: no model code runs)."""
    path = Path(model_dir) / "config.json"
    if not path.is_file():
        raise FileNotFoundError(f"{model_dir} has no config.json; is it a save_pretrained model folder?")
    return json.loads(path.read_text(encoding="utf-8"))


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
    """sentence-transformers pooling mode that reproduces the model's ``pooler_output``; None where it has none (a
    Yu 2018 model with ``pooling="self_attention"``)."""
    model_type = config.get("model_type")
    if model_type not in POOLING:
        raise ValueError(f"model_type={model_type!r} is not an hf_tlaser model; expected one of {sorted(POOLING)}")
    if model_type == "yu2018":  # pools as its config says
        return {"mean": "mean", "max": "max"}.get(config.get("pooling", "mean"))
    return config.get("pooling") or POOLING[model_type]  # T-LASER: "cls" (the paper) or "mean"


def projection_head(config) -> torch.nn.Linear | None:
    """The projection head of an encoder distilled from a wider or narrower teacher: ``hidden_size`` ->
    ``config.teacher_dim``; None without one."""
    dim = getattr(config, "teacher_dim", None)
    return None if dim is None else torch.nn.Linear(config.hidden_size, dim)


def project_hidden(head: torch.nn.Linear | None, hidden: torch.Tensor, project: bool = True) -> torch.Tensor:
    """Every final hidden state through the projection head (before pooling: for CLS and mean pooling the same as
    projecting the pooled vector); unchanged without a head or with ``project=False``."""
    return hidden if head is None or not project else head(hidden)


def backbone_config(config):
    """The pretrained encoder's config nested in ``config.backbone`` (a ``to_dict()`` with its ``model_type``), or
    None for a model with its own encoder layers."""
    values = dict(getattr(config, "backbone", None) or {})
    if not values:
        return None
    return AutoConfig.for_model(values.pop("model_type"), **values)


def build_backbone(config) -> PreTrainedModel | None:
    """The pretrained encoder of ``config.backbone`` (``hf-tlaser train --init-from``), built from its config
    without weights (``from_pretrained`` or the training run load them) and without a pooler: the member pools. None
    without a backbone."""
    nested = backbone_config(config)
    if nested is None:
        return None
    try:
        return AutoModel.from_config(nested, add_pooling_layer=False)
    except TypeError:  # an encoder class without a pooler option
        return AutoModel.from_config(nested)


def backbone_states(
    backbone: PreTrainedModel, input_ids: torch.LongTensor, attention_mask: torch.Tensor, output_hidden_states: bool
) -> tuple[torch.Tensor, tuple[torch.Tensor, ...] | None]:
    """The backbone's final hidden states [B, S, d] (and with ``output_hidden_states`` the embeddings' and every
    layer's output)."""
    out = backbone(
        input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=output_hidden_states, return_dict=True
    )
    return out.last_hidden_state, out.hidden_states if output_hidden_states else None


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


def repeated_prompt_message(prompt: str) -> str:
    """The warning for inputs that carry the built-in prompt a second time."""
    return (
        f"the input starts with the prompt {prompt!r}, which this model's tokenizer already adds to every text, so "
        "the model reads it twice: do not pass it again (no prompt= / prompt_name= in sentence-transformers, no "
        "prefix in the texts)"
    )


def warn_repeated_prompt(model: torch.nn.Module, input_ids: torch.LongTensor) -> None:
    """Warn once per model (``model.prompt_warned``) when a row of ``input_ids`` reads ``cls``, the built-in prompt
    (``config.prompt_ids``) and the prompt again: a user who passed the prompt that the tokenizer already adds. One
    comparison per batch, in eval mode only (training inputs are the collator's)."""
    prompt = getattr(model.config, "prompt_ids", None)
    if not prompt or model.training or getattr(model, "prompt_warned", False):
        return
    twice = torch.tensor(list(prompt) * 2, device=input_ids.device)
    if input_ids.shape[1] < 1 + len(twice) or not bool(input_ids[:, 1 : 1 + len(twice)].eq(twice).all(1).any()):
        return
    model.prompt_warned = True
    logger.warning(repeated_prompt_message(model.config.prompt or str(prompt)))


def has_sentence_transformers_files(model_dir: str | os.PathLike) -> bool:
    """Whether the folder already has a sentence-transformers layout (``modules.json``)."""
    return (Path(model_dir) / "modules.json").is_file()


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


def cpu_autocast_lacks_rnn() -> bool:
    """True under CPU autocast to a dtype this CPU's oneDNN has no RNN kernel for (bf16 without native bf16, fp16
    without AVX512-FP16/AMX-FP16): there ``nn.LSTM`` / ``nn.GRU`` raise "could not create a primitive descriptor"."""
    if not torch.is_autocast_enabled("cpu"):
        return False
    dtype = torch.get_autocast_dtype("cpu")
    check = {torch.bfloat16: "_is_mkldnn_bf16_supported", torch.float16: "_is_mkldnn_fp16_supported"}.get(dtype)
    if check is None:
        return False
    try:
        supported = getattr(torch.ops.mkldnn, check)()
    except (AttributeError, RuntimeError):  # a torch build without oneDNN: stay on the safe side
        return True
    return not (supported and cpu_rnn_runs_in(dtype))


@functools.cache
def cpu_rnn_runs_in(dtype: torch.dtype) -> bool:
    """Whether a tiny ``nn.LSTM`` runs on this CPU under autocast to ``dtype``: oneDNN may report the dtype as
    supported and still lack its RNN primitive (fp16 on a Xeon with AVX512-FP16 and AMX): the kernel is tried once."""
    try:  # with gradients (even when called under inference mode): the training primitive is the one that may lack
        with torch.inference_mode(False), torch.enable_grad():
            lstm = torch.nn.LSTM(2, 2, batch_first=True)
            with torch.autocast("cpu", dtype=dtype):
                output, _ = lstm(torch.zeros(1, 1, 2))
            output.float().sum().backward()
    except RuntimeError:
        return False
    return True


def run_rnn(rnn: torch.nn.RNNBase, inputs, state=None):
    """``rnn(inputs, state)`` (LSTM or GRU), in fp32 with autocast off where the CPU cannot run it in the autocast
    dtype.

    ``inputs`` is a tensor or a ``PackedSequence``; the outputs are then fp32 (the ops after the RNN autocast
    again). On CUDA and on CPUs with native bf16 the RNN runs under autocast as usual.
    """
    if inputs.data.device.type != "cpu" or not cpu_autocast_lacks_rnn():
        return rnn(inputs, state)
    if state is not None:
        state = tuple(s.float() for s in state) if isinstance(state, tuple) else state.float()
    with torch.autocast("cpu", enabled=False):
        return rnn(inputs.float(), state)


def right_padded_lengths(
    input_ids: torch.LongTensor, attention_mask: torch.Tensor | None, config, name: str
) -> tuple[torch.Tensor, torch.Tensor]:
    """The mask (default: ids != pad) and lengths of right-padded inputs for a packed RNN encoder; ValueError for an
    input longer than ``config.max_position_embeddings``, an empty row or padding that is not on the right."""
    seq_len = input_ids.shape[1]
    limit = config.max_position_embeddings
    if seq_len > limit:
        raise ValueError(
            f"input of {seq_len} tokens exceeds max_position_embeddings={limit}; truncate it "
            "(tokenizer(..., truncation=True, max_length=...)) or raise max_position_embeddings"
        )
    mask = (input_ids.ne(config.pad_token_id) if attention_mask is None else attention_mask).bool()
    lengths = mask.sum(1)
    if bool((lengths == 0).any()):
        raise ValueError("every row needs at least one non-pad token (STR_TAG ... </s>)")
    if not torch.equal(mask, torch.arange(seq_len, device=mask.device)[None] < lengths[:, None]):
        raise ValueError(f"{name} expects right-padded inputs: attention_mask must be 1...1 0...0 per row")
    return mask, lengths


def encode_texts(
    model: torch.nn.Module,
    pooled: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    tokenizer,
    texts: str | list[str],
    *,
    limit: int,
    dim: int,
    max_tokens: int = 16000,
    batch_size: int = 512,
    normalize: bool = False,
    convert_to_tensor: bool = False,
    truncation: bool = False,
    max_length: int | None = None,
    autocast_dtype: torch.dtype | None = None,
    sort_by_length: bool = True,
    show_progress: bool | None = None,
):
    """The ``encode`` of every hf_tlaser model: ``texts`` -> float32 numpy [N, dim] in input order (a tensor with
    ``convert_to_tensor``); a single ``str`` gives one vector [dim], an empty list [0, dim].

    ``pooled(input_ids, attention_mask) -> [b, dim]`` runs in eval mode (``model``'s mode is restored) under
    autocast to ``autocast_dtype`` (None: off) on right-padded batches, longest first, of rows x padded length
    <= ``max_tokens`` (at most ``batch_size`` rows). Inputs over ``limit`` tokens (the model's
    ``max_position_embeddings``) raise ValueError unless ``truncation``.
    """
    single = isinstance(texts, str)
    texts = [texts] if single else list(texts)
    encoded = tokenizer(texts, truncation=truncation, max_length=max_length or limit)["input_ids"] if texts else []
    too_long = [i for i, ids in enumerate(encoded) if len(ids) > limit]
    if too_long:
        raise ValueError(
            f"{len(too_long)} input(s) exceed max_position_embeddings={limit} tokens (first: text #{too_long[0]}"
            f" with {len(encoded[too_long[0]])} tokens); pass truncation=True to cut them"
        )
    order = sorted(range(len(encoded)), key=lambda i: -len(encoded[i])) if sort_by_length else range(len(encoded))
    batches, current, width = [], [], 0
    for i in order:
        new_width = max(width, len(encoded[i]))
        if current and (new_width * (len(current) + 1) > max_tokens or len(current) >= batch_size):
            batches.append(current)
            current, new_width = [], len(encoded[i])
        current.append(i)
        width = new_width
    if current:
        batches.append(current)
    device = next(model.parameters()).device
    pad_id = tokenizer.pad_token_id
    out = torch.empty(len(encoded), dim, dtype=torch.float32)
    was_training = model.training
    model.eval()
    progress = logging.tqdm(
        batches, desc="encode", unit="batch", disable=not (len(batches) > 4 if show_progress is None else show_progress)
    )
    with torch.inference_mode():
        for batch in progress:
            ids = torch.full((len(batch), max(len(encoded[i]) for i in batch)), pad_id, dtype=torch.long)
            for row, i in enumerate(batch):
                ids[row, : len(encoded[i])] = torch.tensor(encoded[i])
            ids = ids.to(device)
            with torch.autocast(device.type, dtype=autocast_dtype, enabled=autocast_dtype is not None):
                out[torch.tensor(batch)] = pooled(ids, ids.ne(pad_id).long()).float().cpu()
    model.train(was_training)
    if normalize:
        out = F.normalize(out, dim=-1)
    if single:
        out = out[0]
    return out if convert_to_tensor else out.numpy()


PUSH_KWARGS = ("repo_id", "commit_message", "commit_description", "private", "revision", "create_pr", "tags")
"""``save_pretrained(..., push_to_hub=True)`` arguments that ``SharedCodeMixin`` hands to ``push_to_hub``."""


def save_shared_code(save_directory: str | os.PathLike) -> Path | None:
    """Write this module's source into a saved model folder, over the family's alias file of the same name that
    transformers copied there (it copies the files a model file imports relatively, as they are); return the path.

    The folder's ``from .sentence_embedding import ...`` then finds the real code. A folder without model code (no
    such file: the model was saved without ``trust_remote_code`` support) is left alone and gives None.
    """
    source = Path(__file__)
    target = Path(save_directory) / source.name
    if not target.is_file():
        return None
    if not target.samefile(source):
        shutil.copyfile(source, target)
    return target


class SharedCodeMixin:
    """First base of every family's ``PreTrainedModel``: ``save_pretrained`` leaves a self-contained
    ``trust_remote_code`` folder (``save_shared_code``).

    ``push_to_hub=True`` uploads through ``push_to_hub``, which saves the whole folder again before it uploads:
    transformers' own upload runs at the end of ``PreTrainedModel.save_pretrained``, before this module (and the
    sentence-transformers files of the classes that add them) is written.
    """

    def save_pretrained(self, save_directory: str | os.PathLike, *args, push_to_hub: bool = False, **kwargs) -> None:
        hub_kwargs = {name: kwargs.pop(name) for name in PUSH_KWARGS if name in kwargs} if push_to_hub else {}
        super().save_pretrained(save_directory, *args, **kwargs)
        if not kwargs.get("is_main_process", True):
            return
        save_shared_code(save_directory)
        if push_to_hub:
            repo_id = hub_kwargs.pop("repo_id", Path(save_directory).name)
            self.push_to_hub(repo_id, token=kwargs.get("token"), **hub_kwargs)


class SentenceEncoderMixin:
    """``encode`` for encoder models whose forward returns ``pooler_output`` as the sentence vector, and a
    ``save_pretrained`` that also writes the sentence-transformers layout.

    ``frozen`` (set by ``hf-tlaser train --freeze-encoder-steps``): the forward computes no gradient, so none
    reaches the encoder's weights and its backward costs nothing. ``prompt_warned``: this model has warned that its
    input repeats the built-in prompt (``warn_repeated_prompt``)."""

    frozen: bool = False
    prompt_warned: bool = False

    def save_pretrained(self, save_directory: str | os.PathLike, *args, **kwargs) -> None:
        """Save, then add the sentence-transformers files (see ``add_sentence_transformers_files``)."""
        super().save_pretrained(save_directory, *args, **kwargs)
        if kwargs.get("is_main_process", True):
            add_sentence_transformers_files(save_directory, normalize=None)

    def encode(
        self,
        texts: str | list[str],
        tokenizer,
        *,
        max_tokens: int = 16000,
        batch_size: int = 512,
        normalize: bool = False,
        convert_to_tensor: bool = False,
        truncation: bool = False,
        max_length: int | None = None,
        autocast_dtype: torch.dtype | None = None,
        sort_by_length: bool = True,
        show_progress: bool | None = None,
    ):
        """Embed ``texts``; returns a float32 numpy array [N, d] in input order (a tensor if ``convert_to_tensor``).

        A single ``str`` is one text and gives one vector [d] (as sentence-transformers); an empty list gives [0, d].
        Sentences are sorted by length and grouped so that rows x padded length stays under ``max_tokens``
        (at most ``batch_size`` rows); the last encoder layer only computes the pooled position. An empty string
        embeds ``STR_TAG </s>``. Inputs longer than ``max_position_embeddings`` raise unless ``truncation=True``.
        """

        def pooled(ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
            return self(input_ids=ids, attention_mask=mask, pooled_only=True).pooler_output

        return encode_texts(
            self,
            pooled,
            tokenizer,
            texts,
            limit=self.config.max_position_embeddings,
            dim=head_output_dim(
                getattr(self.config, "sentence_modules", None),
                getattr(self.config, "teacher_dim", None) or self.config.hidden_size,
            ),
            max_tokens=max_tokens,
            batch_size=batch_size,
            normalize=normalize,
            convert_to_tensor=convert_to_tensor,
            truncation=truncation,
            max_length=max_length,
            autocast_dtype=autocast_dtype,
            sort_by_length=sort_by_length,
            show_progress=show_progress,
        )


@dataclass
class TranslationOutput(ModelOutput):
    """Output of the T-LASER and LASER translation models.

    Attributes:
        loss: total loss divided by the number of target tokens (or by ``num_items_in_batch`` when given).
        logits: decoder scores [T, L, vocab].
        sentence_embedding: sentence vectors of the translation sources [T, d].
        loss_mt: label-smoothed translation cross entropy, summed over target tokens.
        loss_distance: distance-constraint loss (eq. 10 without the translation term), summed over pairs.
        loss_align: in-batch alignment loss, mean over pairs.
        d_p, d_n, hinge: batch means of the normalised positive / negative distances and of the hinge terms.
        v_norm: the distance normaliser. mean_cosine: mean cosine between distinct encoded sentences.
        centered_cosine: mean cosine of the translation pairs after removing the batch mean
            (``centered_pair_cosine``); None without pairs in the batch.
        skipped_pair_losses: 1 when the distance and alignment terms were skipped because the batch has no
            negative (one pair, or one multi-way group), else 0; None when no pair loss applies.
        num_tokens: number of target tokens in this batch.
        cache: the decoder cache after this step (``generate``); None without one.
    """

    loss: torch.Tensor | None = None
    logits: torch.Tensor | None = None
    sentence_embedding: torch.Tensor | None = None
    loss_mt: torch.Tensor | None = None
    loss_distance: torch.Tensor | None = None
    loss_align: torch.Tensor | None = None
    d_p: torch.Tensor | None = None
    d_n: torch.Tensor | None = None
    hinge: torch.Tensor | None = None
    v_norm: torch.Tensor | None = None
    mean_cosine: torch.Tensor | None = None
    centered_cosine: torch.Tensor | None = None
    skipped_pair_losses: torch.Tensor | None = None
    num_tokens: torch.Tensor | None = None
    cache: TranslationCache | None = None


class TranslationCache(Cache):
    """The decoder cache of a translation model during ``generate``: the ``state`` dict that ``decoder_step``
    returns (every tensor batch first), and how many decoder tokens it has seen.

    Each family keeps what its decoder needs (T-LASER: self-attention keys/values per layer; LASER: the LSTM
    (h, c)), so the cache holds a dict instead of transformers' per-layer key/value lists; it is a ``Cache``
    because that is what GenerationMixin passes around, asks for ``get_seq_length`` and, in beam search, tells to
    ``reorder_cache``.
    """

    def __init__(self) -> None:
        super().__init__(layers=[])
        self.state: dict[str, torch.Tensor] | None = None
        self.seq_length = 0

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.seq_length

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        """Keep the rows of the beams that go on (beam search)."""
        if self.state is not None:
            self.state = {name: t.index_select(0, beam_idx.to(t.device)) for name, t in self.state.items()}


def generation_cache_name() -> str:
    """The keyword under which ``GenerationMixin`` keeps the cache in its model kwargs and hands it to
    ``prepare_inputs_for_generation``: ``cache`` since transformers 5.24, ``past_key_values`` before. Read from the
    installed ``GenerationMixin``'s own signature, so that both contracts work without naming a version."""
    params = inspect.signature(GenerationMixin.prepare_inputs_for_generation).parameters
    return "cache" if "cache" in params else "past_key_values"


CACHE_NAME = generation_cache_name()
CACHE_ALIASES = ("cache", "past_key_values")
DEFAULT_MAX_NEW_TOKENS = 64
"""``generate``'s length limit when neither the call nor the generation config sets one of ``LENGTH_LIMITS`` (a
value equal to transformers' own default, ``max_length=20`` in 4.x and None in 5.x, counts as unset)."""
LENGTH_LIMITS = ("max_new_tokens", "max_length")
LIBRARY_GENERATION_DEFAULTS = GenerationConfig()
"""transformers' own generation defaults, against which a config's ``LENGTH_LIMITS`` count as set."""


class TranslationMixin(GenerationMixin):
    """Loss, language handling and decoding shared by the translation models (T-LASER, LASER, ...).

    Subclasses provide ``self.encoder`` (returning ``pooler_output``), a config with the distance-loss fields and
    ``decoder_step(decoder_input_ids, sentence_embedding, tgt_lang, cache=None) -> (logits, cache)``: logits
    [B, n, V] after each of the n NEW tokens ``decoder_input_ids`` [B, n] (the whole prefix, from
    ``decoder_start_token_id``, when ``cache`` is None), for the vectors [B, d] and language indices [B]; the cache
    is a dict of tensors with the batch on dim 0. ``decode_logits`` and ``generate`` (through transformers'
    ``GenerationMixin``: greedy, beam search, sampling) are built on it.
    """

    # forward takes ``num_items_in_batch``: the Trainer then passes the token count of the whole update and leaves
    # the gradient-accumulation scaling to the loss normalisation
    accepts_loss_kwargs = True
    # the cache cannot be cropped, so GenerationMixin refuses assisted decoding (which would roll it back)
    _is_stateful = True

    @classmethod
    def can_generate(cls) -> bool:
        """True: transformers only looks for ``GenerationMixin`` among a class's direct bases."""
        return True

    def lang_ids(self, tgt_lang, batch_size: int, device: torch.device) -> torch.LongTensor:
        """Target languages as indices into ``config.languages``; accepts codes, lists of codes or index tensors."""
        known = self.config.languages
        if isinstance(tgt_lang, str):
            tgt_lang = [tgt_lang] * batch_size
        if isinstance(tgt_lang, (list, tuple)) and tgt_lang and isinstance(tgt_lang[0], str):
            unknown = sorted({code for code in tgt_lang if code not in known})
            if unknown:
                raise ValueError(f"unknown tgt_lang {unknown}; this model knows {known}")
            tgt_lang = [known.index(code) for code in tgt_lang]
        ids = torch.as_tensor(tgt_lang, dtype=torch.long, device=device).reshape(-1)
        if ids.numel() == 1 and batch_size > 1:
            ids = ids.expand(batch_size)
        if ids.numel() != batch_size:
            raise ValueError(f"tgt_lang has {ids.numel()} entries for a batch of {batch_size}")
        if bool(((ids < 0) | (ids >= len(known))).any()):
            raise ValueError(f"tgt_lang index out of range; this model knows {known} (indices 0..{len(known) - 1})")
        return ids

    def shift_right(self, labels: torch.LongTensor) -> torch.LongTensor:
        """Decoder inputs: ``decoder_start_token_id`` followed by the labels minus their last position."""
        shifted = labels.new_full(labels.shape, self.config.pad_token_id)
        shifted[:, 0] = self.config.decoder_start_token_id
        shifted[:, 1:] = labels[:, :-1]
        return shifted.masked_fill(shifted.eq(-100), self.config.pad_token_id)

    def save_pretrained(self, save_directory: str | os.PathLike, *args, **kwargs) -> None:
        """Save, and map ``AutoModel`` to the encoder class so that ``AutoModel.from_pretrained`` of a translation
        checkpoint gives the embedding model; then add the sentence-transformers files for that encoder."""
        encoder_cls = type(self.encoder)
        auto_map = dict(getattr(self.config, "auto_map", None) or {})
        auto_map["AutoModel"] = f"{encoder_cls.__module__.rsplit('.', 1)[-1]}.{encoder_cls.__name__}"
        self.config.auto_map = auto_map
        super().save_pretrained(save_directory, *args, **kwargs)
        if kwargs.get("is_main_process", True):
            add_sentence_transformers_files(save_directory, normalize=None)

    def to_decoder_vocab(self, ids: torch.LongTensor) -> torch.LongTensor:
        """Tokenizer ids -> rows of a restricted decoder vocabulary (``decoder_vocab_ids``; -100 stays, a piece
        outside it becomes ``<unk>``); unchanged without a restriction."""
        table = getattr(self, "decoder_vocab_ids", None)
        if table is None:
            return ids
        rows = torch.searchsorted(table, ids.clamp(min=0)).clamp(max=len(table) - 1)  # the table is sorted
        rows = torch.where(table[rows].eq(ids), rows, self.config.unk_token_id)  # special ids keep their rows
        return torch.where(ids.eq(-100), ids, rows)

    def from_decoder_vocab(self, rows: torch.LongTensor) -> torch.LongTensor:
        """Rows of a restricted decoder vocabulary -> tokenizer ids (``decoder_vocab_ids``); unchanged without."""
        table = getattr(self, "decoder_vocab_ids", None)
        return rows if table is None else table[rows]

    @property
    def needs_target_encoding(self) -> bool:
        """Whether training batches must also carry the targets in encoder format (a loss on translation pairs)."""
        return self.config.distance_beta > 0 or self.config.align_loss_weight > 0

    def encode_sentences(self, input_ids: torch.LongTensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
        """The vectors the decoder reads: the encoder's sentence vectors (after the modules a backbone carried,
        ``config.sentence_modules``), before any projection head (``config.teacher_dim``)."""
        encoded = self.encoder(input_ids=input_ids, attention_mask=attention_mask, pooled_only=True, project=False)
        return encoded.pooler_output

    def decode_logits(
        self,
        decoder_input_ids: torch.LongTensor,
        sentence_embedding: torch.Tensor,
        tgt_lang: torch.LongTensor,
    ) -> torch.Tensor:
        """Scores [T, L, vocab] of the next token after every prefix of ``decoder_input_ids`` [T, L] (training)."""
        return self.decoder_step(decoder_input_ids, sentence_embedding, tgt_lang)[0]

    def training_logits(
        self,
        decoder_input_ids: torch.LongTensor,
        sentence_embedding: torch.Tensor,
        tgt_lang: torch.LongTensor,
        labels: torch.LongTensor,
    ) -> tuple[torch.Tensor, torch.LongTensor]:
        """Scores and labels of the training loss: ``decode_logits`` over the whole decoder vocabulary; a family
        with a sampled softmax scores fewer rows and renumbers the labels to them."""
        return self.decode_logits(decoder_input_ids, sentence_embedding, tgt_lang), labels

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        tgt_lang=None,
        decoder_input_ids: torch.LongTensor | None = None,
        tgt_input_ids: torch.LongTensor | None = None,
        tgt_attention_mask: torch.Tensor | None = None,
        src_index: torch.LongTensor | None = None,
        pair_index: torch.LongTensor | None = None,
        group_index: torch.LongTensor | None = None,
        num_items_in_batch: int | torch.Tensor | None = None,
        sentence_embeddings: torch.Tensor | None = None,
        cache: TranslationCache | None = None,
        return_dict: bool | None = None,
    ) -> TranslationOutput | tuple:
        """Translation loss (+ cT-LASER distance loss) for a batch; decoder scores for ``generate``.

        Args:
            input_ids, attention_mask: sentences to encode [N, S] (encoder format ``STR_TAG ... </s>``).
            labels: target tokens followed by ``</s>``, padded with -100, [T, L] (tokenizer ids).
            tgt_lang: target language of each label row (codes or indices into ``config.languages``).
            decoder_input_ids: default: ``labels`` shifted right behind ``decoder_start_token_id``. Rows of the
                decoder's vocabulary, which are tokenizer ids unless ``config.decoder_vocab_size`` restricts it
                (``to_decoder_vocab``); the logits are over the same rows.
            tgt_input_ids, tgt_attention_mask: the targets in encoder format [T, S']; encoded in the same encoder
                call as the sources and paired with them for the distance loss.
            src_index: row of ``input_ids`` that is the source of each label row (multi-way batches; default
                ``arange(T)``).
            pair_index: LongTensor[P, 2] of rows of the encoded batch that are translations of each other.
            group_index: LongTensor[P], the group (multi-way: source group) of each pair; pairs of one group are
                never negatives of each other (default: every pair its own group).
            num_items_in_batch: normaliser of the loss (target tokens of the whole update); default: this batch's.
            sentence_embeddings: precomputed source vectors [T, d] instead of ``input_ids`` (no encoder call; the
                other encoder-side arguments are then unused).
            cache: a ``TranslationCache`` (``generate``): ``decoder_input_ids`` are then only the tokens it has not
                seen, and it is updated in place with ``decoder_step`` and returned as ``cache``.
            return_dict: False returns a tuple (default: ``config.return_dict``).
        """
        if (input_ids is None) == (sentence_embeddings is None):
            raise ValueError("forward needs either input_ids to encode or precomputed sentence_embeddings")
        return_dict = self.config.return_dict if return_dict is None else return_dict
        if sentence_embeddings is None:
            num_src = input_ids.shape[0]
            if tgt_input_ids is not None:
                if pair_index is not None:
                    raise ValueError("pass either tgt_input_ids (pair batches) or pair_index (multi-way), not both")
                input_ids, attention_mask = stack_padded(
                    (input_ids, attention_mask),
                    (tgt_input_ids, tgt_attention_mask),
                    pad_id=self.config.pad_token_id,
                )
                rows = torch.arange(num_src, device=input_ids.device)
                pair_index = torch.stack([rows, rows + num_src], dim=1)
            vectors = self.encode_sentences(input_ids, attention_mask)
            src_vectors = vectors[:num_src] if src_index is None else vectors[src_index]
        else:
            vectors = src_vectors = sentence_embeddings
        out = TranslationOutput(sentence_embedding=src_vectors)
        if labels is not None:
            labels = self.to_decoder_vocab(labels)
        if labels is not None or decoder_input_ids is not None:
            tgt_lang = self.lang_ids(tgt_lang, src_vectors.shape[0], src_vectors.device)
            if decoder_input_ids is None:
                decoder_input_ids = self.shift_right(labels)
            if cache is None and labels is not None and self.training:
                out.logits, labels = self.training_logits(decoder_input_ids, src_vectors, tgt_lang, labels)
            elif cache is None:
                out.logits = self.decode_logits(decoder_input_ids, src_vectors, tgt_lang)
            else:
                out.logits, cache.state = self.decoder_step(decoder_input_ids, src_vectors, tgt_lang, cache.state)
                cache.seq_length += decoder_input_ids.shape[1]
                out.cache = cache
        if labels is not None:
            out.loss_mt = F.cross_entropy(
                out.logits.flatten(0, 1).float(),
                labels.flatten(),
                ignore_index=-100,
                label_smoothing=self.config.label_smoothing,
                reduction="sum",
            )
            out.num_tokens = labels.ne(-100).sum()
            total = out.loss_mt
            if pair_index is not None and (self.config.distance_beta > 0 or self.config.align_loss_weight > 0):
                total = self._pair_losses(vectors, pair_index, group_index, out)
            out.mean_cosine = mean_pairwise_cosine(vectors.detach())
            if pair_index is not None:
                out.centered_cosine = centered_pair_cosine(vectors.detach(), pair_index)
            normaliser = num_items_in_batch if num_items_in_batch is not None else out.num_tokens.clamp(min=1)
            out.loss = total / normaliser
        return out if return_dict else out.to_tuple()

    def _pair_losses(
        self,
        vectors: torch.Tensor,
        pair_index: torch.LongTensor,
        group_index: torch.LongTensor | None,
        out: TranslationOutput,
    ) -> torch.Tensor:
        """Add the distance (eq. 7-10) and alignment losses of the pairs to ``out``; return the total sum.

        Pairs of the same encoded rows (a-b and b-a in a multi-way group) count once. A batch without negatives
        (one pair, or one group) trains on the translation loss alone and sets ``skipped_pair_losses``.
        """
        cfg = self.config
        pairs, groups = unique_pairs(pair_index, group_index)
        skip = bool((groups == groups[0]).all())
        out.skipped_pair_losses = torch.tensor(int(skip), device=vectors.device)
        mt_weight = cfg.distance_mt_weight if cfg.distance_beta > 0 else 1.0
        total = mt_weight * out.loss_mt  # eq. (10): 0.5 * l_mt
        if skip:
            return total
        p_a, p_b = vectors[pairs[:, 0]], vectors[pairs[:, 1]]
        if cfg.distance_beta > 0:
            num = len(pairs)
            dist = distance_constraint_loss(
                p_a,
                p_b,
                sample_negatives(num, cfg.distance_negatives, vectors.device, groups=groups),
                sample_negatives(num, cfg.distance_negatives, vectors.device, groups=groups),
                alpha=cfg.distance_alpha,
                beta=cfg.distance_beta,
                lam=cfg.distance_hinge_weight,
                distance=cfg.distance,
                eps=cfg.distance_eps,
                vnorm_grad=cfg.distance_vnorm_grad,
            )
            total = total + dist.total  # eq. (10)
            out.loss_distance = dist.total
            out.d_p, out.d_n, out.hinge, out.v_norm = (
                dist.d_p.detach().mean(),
                dist.d_n.detach().mean(),
                dist.hinge.detach().mean() / 2,
                dist.v_norm.detach(),
            )
        if cfg.align_loss_weight > 0:
            out.loss_align = align_loss(p_a, p_b, cfg.align_scale, groups) / len(pairs)
            # a per-pair mean next to the per-token translation loss: scaled to this batch's share of the update
            total = total + cfg.align_loss_weight * out.loss_align * out.num_tokens
        return total

    def prepare_inputs_for_generation(
        self,
        input_ids: torch.LongTensor,
        cache: TranslationCache | None = None,
        sentence_embeddings: torch.Tensor | None = None,
        tgt_lang: torch.LongTensor | None = None,
        use_cache: bool | None = True,
        past_key_values: TranslationCache | None = None,
        **kwargs,
    ) -> dict:
        """GenerationMixin hook: ``forward`` inputs for the next step, i.e. the decoder tokens the cache has not
        seen (the whole prefix without a cache), the sentence vectors and the target languages. The cache arrives as
        ``cache`` (transformers >= 5.24) or ``past_key_values`` (earlier releases; see ``generation_cache_name``).
        GenerationMixin's other bookkeeping (``next_sequence_length``, masks, ...) is not needed: the cache counts
        its tokens."""
        cache = cache if cache is not None else past_key_values
        cache = cache if use_cache is not False else None
        seen = cache.get_seq_length() if cache is not None else 0
        return {
            "decoder_input_ids": input_ids[:, seen:],
            "sentence_embeddings": sentence_embeddings,
            "tgt_lang": tgt_lang,
            "cache": cache,
        }

    @torch.no_grad()
    def generate(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        *,
        vectors: torch.Tensor | None = None,
        sentence_embeddings: torch.Tensor | None = None,
        tgt_lang,
        **generation_kwargs,
    ) -> torch.LongTensor | ModelOutput:
        """Decode sentence vectors (``vectors``, alias ``sentence_embeddings``; or encoded from ``input_ids``,
        ``attention_mask``) into ``tgt_lang`` (a code, codes or indices per row) with ``GenerationMixin.generate``.

        ``generation_kwargs`` go to ``GenerationMixin.generate``: greedy by default, ``num_beams``,
        ``length_penalty``, ``early_stopping``, ``do_sample``, ``top_k``, ``top_p``, ``temperature``,
        ``num_return_sequences``, ``max_new_tokens`` (default 64 unless the generation config sets a length),
        ``min_new_tokens``, ``use_cache`` (default True: the decoder state is cached, each step decodes one token),
        ``cache`` (alias ``past_key_values``: a ``TranslationCache`` to fill), ``return_dict_in_generate`` ...
        The model runs in eval mode (its mode is restored) without gradients.

        Returns token ids [B * num_return_sequences, L] WITHOUT the start token, each row ending with ``</s>``
        (unless cut by the length limit) and right-padded with pad; with ``return_dict_in_generate=True``,
        GenerationMixin's output whose ``sequences`` are in that format.
        """
        if sentence_embeddings is not None:
            if vectors is not None:
                raise ValueError("pass vectors or its alias sentence_embeddings, not both")
            vectors = sentence_embeddings
        if (vectors is None) == (input_ids is None):
            raise ValueError("generate needs either vectors (sentence embeddings) or input_ids to encode")
        config = generation_kwargs.get("generation_config") or self.generation_config
        if all(
            generation_kwargs.get(key) is None and getattr(config, key) == getattr(LIBRARY_GENERATION_DEFAULTS, key)
            for key in LENGTH_LIMITS
        ):
            generation_kwargs["max_new_tokens"] = DEFAULT_MAX_NEW_TOKENS
        given = [generation_kwargs.pop(name) for name in CACHE_ALIASES if generation_kwargs.get(name) is not None]
        if len(given) > 1:
            raise ValueError("pass cache or its alias past_key_values, not both")
        if given or generation_kwargs.get("use_cache", config.use_cache) is not False:
            generation_kwargs[CACHE_NAME] = given[0] if given else TranslationCache()
        was_training = self.training
        self.eval()
        try:
            if vectors is None:
                vectors = self.encode_sentences(input_ids, attention_mask)
            batch = vectors.shape[0]
            langs = self.lang_ids(tgt_lang, batch, vectors.device)
            start = torch.full((batch, 1), self.config.decoder_start_token_id, dtype=torch.long, device=vectors.device)
            out = super().generate(start, sentence_embeddings=vectors, tgt_lang=langs, **generation_kwargs)
        finally:
            self.train(was_training)
        sequences = out.sequences if isinstance(out, ModelOutput) else out
        tokens = self.from_decoder_vocab(
            _generated_tokens(sequences, self.config.eos_token_id, self.config.pad_token_id)
        )
        if isinstance(out, ModelOutput):
            out.sequences = tokens
            return out
        return tokens


def stack_padded(*parts: tuple[torch.Tensor, torch.Tensor | None], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Concatenate right-padded id batches of different widths along the batch axis."""
    width = max(ids.shape[1] for ids, _ in parts)
    ids = torch.cat([F.pad(i, (0, width - i.shape[1]), value=pad_id) for i, _ in parts])
    masks = [m if m is not None else i.ne(pad_id) for i, m in parts]
    mask = torch.cat([F.pad(m.long(), (0, width - m.shape[1]), value=0) for m in masks])
    return ids, mask


def _generated_tokens(sequences: torch.LongTensor, eos_token_id: int, pad_token_id: int) -> torch.LongTensor:
    """GenerationMixin's sequences without the start token, with pad after each row's first eos (beam search fills
    finished rows with eos when ``pad_token_id`` is 0)."""
    tokens = sequences[:, 1:]
    is_eos = tokens.eq(eos_token_id).long()
    return tokens.masked_fill(is_eos.cumsum(1) - is_eos > 0, pad_token_id)

"""A student of a pretrained encoder (``hf-tlaser train --init-from``): some of its layers (``--init-layers``:
:func:`student_layers`, :func:`keep_layers`), its bottom layers frozen (``--freeze-layers``: :func:`freeze_bottom`),
and the backbone weights inside a saved member that starts another (:func:`member_backbone_weights`)."""

from __future__ import annotations

import re
from pathlib import Path

import torch
from safetensors.torch import load_file

from hf_tlaser.errors import UsageError

LAYER_KEY = re.compile(r"(^|\.)(layers?)\.(\d+)\.")
"""A weight of one encoder layer: ``encoder.layer.7.attention...`` (BERT, XLM-R), ``layers.7.`` (others)."""


def student_layers(value: str, depth: int, where: str = "--init-layers") -> tuple[int, ...]:
    """``--init-layers`` of a ``depth``-layer model: ``N`` -> N layers spread evenly from the first
    (``round(i * depth / N)``: 0,2,4,6,8,10 of 12), ``I,J,...`` -> those; UsageError for anything else."""
    text = value.strip()
    try:
        if "," not in text:
            count = int(text)
            if not 1 <= count <= depth:
                raise ValueError(f"{count} layers of a {depth}-layer model")
            return tuple(round(i * depth / count) for i in range(count))
        layers = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError as err:
        raise UsageError(f"{where} {value!r}: give N or ascending 0-based layer numbers ({err})") from None
    if list(layers) != sorted(set(layers)) or layers[0] < 0 or layers[-1] >= depth:
        raise UsageError(f"{where} {value!r}: give ascending, distinct layer numbers from 0 to {depth - 1}")
    return layers


def freeze_bottom(encoder: torch.nn.Module, count: int) -> int:
    """Stop the gradient of ``encoder``'s embeddings and of its layers below ``count`` (``--freeze-layers``); the
    number of parameters frozen. Before the optimizer is built, so that it holds no state for them."""
    frozen = 0
    for name, parameter in encoder.named_parameters():
        match = LAYER_KEY.search(name)
        if (match is None and ".embeddings." in f".{name}") or (match is not None and int(match.group(3)) < count):
            parameter.requires_grad_(False)
            frozen += parameter.numel()
    return frozen


def keep_layers(state: dict[str, torch.Tensor], layers: tuple[int, ...]) -> dict[str, torch.Tensor]:
    """The pretrained weights with only ``layers``, renumbered 0, 1, ... in that order (the other weights as they
    are); RuntimeError where no weight names a layer."""
    position = {layer: i for i, layer in enumerate(layers)}
    kept, found = {}, False
    for key, value in state.items():
        match = LAYER_KEY.search(key)
        if match is None:
            kept[key] = value
            continue
        found = True
        layer = int(match.group(3))
        if layer in position:
            start, end = match.span(3)
            kept[key[:start] + str(position[layer]) + key[end:]] = value
    if not found:
        raise RuntimeError("--init-layers: no weight of the pretrained model names a layer (layer.N. / layers.N.)")
    return kept


def member_backbone_weights(folder: Path) -> dict[str, torch.Tensor]:
    """The pretrained encoder's weights inside a saved hf_tlaser member (``encoder.backbone.*`` / ``backbone.*``),
    named as the backbone names them."""
    state = {}
    for path in sorted(folder.glob("*.safetensors")):
        for key, value in load_file(path).items():
            if "backbone." in key:
                state[key.split("backbone.", 1)[1]] = value
    return state

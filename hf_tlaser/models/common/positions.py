"""Fixed sinusoidal position embeddings (Vaswani et al. 2017; fairseq's layout), shared by T-LASER and LDT."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


def sinusoidal_table(num_positions: int, dim: int) -> torch.Tensor:
    """Sinusoidal position table [num_positions, dim] (sin in the first half, cos in the second, as fairseq)."""
    half = dim // 2
    freq = torch.exp(torch.arange(half, dtype=torch.float32) * -(math.log(10000.0) / max(half - 1, 1)))
    angles = torch.arange(num_positions, dtype=torch.float32)[:, None] * freq[None]
    return F.pad(torch.cat([angles.sin(), angles.cos()], dim=1), (0, dim - 2 * half))


class SinusoidalPositions(nn.Module):
    """Fixed sinusoidal position embeddings: a buffer that is not saved. ``reset_table`` recomputes it; each family's
    ``_init_weights`` calls it, since transformers may build the model on the meta device, where the buffer has no
    values."""

    def __init__(self, num_positions: int, dim: int):
        super().__init__()
        self.register_buffer("weight", sinusoidal_table(num_positions, dim), persistent=False)

    def reset_table(self) -> None:
        """Write the table into the buffer again (in place)."""
        self.weight.copy_(sinusoidal_table(*self.weight.shape))

    def forward(self, seq_len: int) -> torch.Tensor:
        if seq_len > self.weight.shape[0]:
            raise ValueError(
                f"input of {seq_len} tokens exceeds max_position_embeddings={self.weight.shape[0]}; truncate it "
                "(tokenizer(..., truncation=True, max_length=...)) or raise max_position_embeddings"
            )
        return self.weight[:seq_len]

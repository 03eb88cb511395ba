"""Visual memory: keys and values built once per image from the target's projected visual tokens.

`k_i = W_K LN(v_i)`, `u_i = W_U LN(v_i)` plus a validity mask. The memory is shared by every
decoding iteration and every tree node of a request; it never enters the drafter's or the
target's KV cache. Knows nothing about how entries are selected (see `retrieval`).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn


@dataclass
class VisualMemory:
    keys: torch.Tensor      # [N, d_r]  retrieval keys
    values: torch.Tensor    # [N, D]    readout values in the drafter's hidden space
    valid: torch.Tensor     # [N] bool  False for padding / non-image entries
    grid: tuple[int, int] | None = None   # (rows, cols) of image patches, when the entries form a grid
    # inference-only products of these entries with a retriever's weights (fovea.retrieval), built
    # on first use per request: the memory is fixed for the whole request
    cache: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def size(self) -> int:
        return int(self.valid.sum())


class MemoryEncoder(nn.Module):
    def __init__(self, memory_dim: int, hidden_size: int, key_dim: int):
        super().__init__()
        self.norm = nn.LayerNorm(memory_dim)
        self.w_k = nn.Linear(memory_dim, key_dim, bias=False)
        self.w_u = nn.Linear(memory_dim, hidden_size, bias=False)

    def forward(self, visual_tokens: torch.Tensor, valid: torch.Tensor | None = None,
                grid: tuple[int, int] | None = None) -> VisualMemory:
        """visual_tokens [N, D_mem] (or [B, N, D_mem] for training) -> VisualMemory."""
        v = self.norm(visual_tokens)
        if valid is None:
            valid = torch.ones(visual_tokens.shape[:-1], dtype=torch.bool, device=visual_tokens.device)
        return VisualMemory(keys=self.w_k(v), values=self.w_u(v), valid=valid, grid=grid)

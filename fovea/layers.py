"""A minimal Llama-style decoder block with explicit positions, masks and KV tensors.

Used by the drafter only (the target is a transformers model). Every call takes the positions,
the attention mask and the past keys/values as arguments and returns the new keys/values; there
is no hidden state on the module, so tree drafting and training reuse the same code.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        var = x.float().pow(2).mean(-1, keepdim=True)
        return (x.float() * torch.rsqrt(var + self.eps)).to(x.dtype) * self.weight


def inverse_frequencies(head_dim: int, theta: float) -> torch.Tensor:
    return 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)


def rotary(positions: torch.Tensor, inv: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """positions [B, T], inverse frequencies [Dh/2] -> cos, sin [B, 1, T, Dh] (half-rotation convention)."""
    ang = positions.float()[..., None] * inv                       # [B, T, Dh/2]
    ang = torch.cat([ang, ang], dim=-1)[:, None]
    return ang.cos(), ang.sin()


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    rot = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos.to(x.dtype) + rot * sin.to(x.dtype)


class DecoderBlock(nn.Module):
    def __init__(self, hidden: int, heads: int, kv_heads: int, intermediate: int, theta: float, eps: float):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, hidden // heads
        self.register_buffer("inv_freq", inverse_frequencies(self.head_dim, theta), persistent=False)
        self.in_norm = RMSNorm(hidden, eps)
        self.q = nn.Linear(hidden, heads * self.head_dim, bias=False)
        self.kv = nn.Linear(hidden, 2 * kv_heads * self.head_dim, bias=False)
        self.o = nn.Linear(heads * self.head_dim, hidden, bias=False)
        self.post_norm = RMSNorm(hidden, eps)
        self.gate_up = nn.Linear(hidden, 2 * intermediate, bias=False)
        self.down = nn.Linear(intermediate, hidden, bias=False)

    def forward(self, x: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor,
                past: tuple[torch.Tensor, torch.Tensor] | None = None):
        """x [B, T, D]; positions [B, T]; mask [B or 1, 1, T, S+T] bool (True = attend) over
        [past; new] keys; past keys/values [B, H_kv, S, Dh]. Returns (y [B, T, D], (k_new, v_new))."""
        b, t, _ = x.shape
        h = self.in_norm(x)
        q = self.q(h).view(b, t, self.heads, self.head_dim).transpose(1, 2)
        k, v = self.kv(h).view(b, t, 2, self.kv_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        cos, sin = rotary(positions, self.inv_freq)
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        k_all, v_all = (k, v) if past is None else (torch.cat([past[0], k], 2), torch.cat([past[1], v], 2))
        attn = F.scaled_dot_product_attention(q, k_all, v_all, attn_mask=mask,
                                              enable_gqa=self.heads != self.kv_heads)
        x = x + self.o(attn.transpose(1, 2).reshape(b, t, -1))
        gate, up = self.gate_up(self.post_norm(x)).chunk(2, dim=-1)
        return x + self.down(F.silu(gate) * up), (k, v)

"""A minimal Llama-style decoder block with explicit rotary tables, masks and KV tensors.

Used by the drafter only (the target is a transformers model). Every call takes the rotary
cos/sin of its positions, the attention mask and either the past keys/values (training: the new
ones are concatenated and returned) or a preallocated `KVBuffer` plus the slot to write at
(decoding, gpt-fast style: no concatenation, the cache never grows per call). There is no hidden
state on the module, so tree drafting and training reuse the same code.
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
        # one fused op: x / sqrt(mean(x^2) + eps) * weight
        return F.rms_norm(x, self.weight.shape, self.weight, self.eps)


class KVBuffer:
    """Preallocated keys and values of one layer, [1, H_kv, capacity, Dh] each. A call writes its
    T new entries at slots at..at+T-1 and attends over slots 0..at+T-1; slots past that are stale
    and never read, so dropping entries is just writing over them later."""

    def __init__(self, kv_heads: int, head_dim: int, capacity: int, dtype, device):
        self.keys = torch.zeros(1, kv_heads, capacity, head_dim, dtype=dtype, device=device)
        self.values = torch.zeros_like(self.keys)

    @property
    def capacity(self) -> int:
        return self.keys.shape[2]

    def write(self, at: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """k, v [1, H_kv, T, Dh] -> views of keys and values [1, H_kv, at+T, Dh]."""
        end = at + k.shape[2]
        if end > self.capacity:        # rare: double the buffer (one copy), then carry on in place
            grow = max(end, 2 * self.capacity) - self.capacity
            pad = self.keys.new_zeros(*self.keys.shape[:2], grow, self.keys.shape[3])
            self.keys, self.values = torch.cat([self.keys, pad], 2), torch.cat([self.values, pad], 2)
        self.keys[:, :, at:end] = k
        self.values[:, :, at:end] = v
        return self.keys[:, :, :end], self.values[:, :, :end]


def inverse_frequencies(head_dim: int, theta: float) -> torch.Tensor:
    return 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)


def rotary(positions: torch.Tensor, inv: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """positions [B, T], inverse frequencies [Dh/2] -> cos, sin [B, 1, T, Dh] (half-rotation convention)."""
    ang = positions.float()[..., None] * inv                       # [B, T, Dh/2]
    ang = torch.cat([ang, ang], dim=-1)[:, None]
    return ang.cos(), ang.sin()


def rotary_table(max_positions: int, inv: torch.Tensor) -> torch.Tensor:
    """cos and sin of every position, [2, max_positions, Dh]: decoding looks rows up instead of
    recomputing them per call (the same float ops as `rotary`, so the same numbers)."""
    cos, sin = rotary(torch.arange(max_positions, device=inv.device)[None], inv)
    return torch.stack([cos[0, 0], sin[0, 0]])


def concat_cached(owner: nn.Module, name: str, *params: torch.Tensor) -> torch.Tensor:
    """torch.cat(params) along dim 0, detached, cached on `owner` and rebuilt whenever a parameter
    changed (data pointer, version counter or device): fused inference weights (one matmul where
    training has two) that never go stale after an optimiser step or a `.to()`."""
    key = tuple((p.data_ptr(), p._version, p.device) for p in params)
    cached = owner.__dict__.get("_concat_" + name)
    if cached is None or cached[0] != key:
        cached = (key, torch.cat([p.detach() for p in params]))
        owner.__dict__["_concat_" + name] = cached
    return cached[1]


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

    def forward(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor], mask: torch.Tensor,
                past: tuple[torch.Tensor, torch.Tensor] | None = None,
                buffer: KVBuffer | None = None, at: int = 0):
        """x [B, T, D]; rope: cos, sin [B or 1, 1, T, Dh]; mask [B or 1, 1, T, S+T] bool (True =
        attend) over [past; new] keys. Either past keys/values [B, H_kv, S, Dh] (concatenated) or a
        buffer whose slots 0..at-1 are the past (written in place, S = at). Returns
        (y [B, T, D], (k_new, v_new))."""
        b, t, _ = x.shape
        q, k, v = self._qkv(self.in_norm(x), rope)
        if buffer is not None:
            k_all, v_all = buffer.write(at, k, v)
        else:
            k_all, v_all = (k, v) if past is None else (torch.cat([past[0], k], 2), torch.cat([past[1], v], 2))
        attn = F.scaled_dot_product_attention(q, k_all, v_all, attn_mask=mask,
                                              enable_gqa=self.heads != self.kv_heads)
        x = x + self.o(attn.transpose(1, 2).reshape(b, t, -1))
        gate, up = self.gate_up(self.post_norm(x)).chunk(2, dim=-1)
        return x + self.down(F.silu(gate) * up), (k, v)

    def _qkv(self, h: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor]):
        """h [B, T, D] -> rotated q [B, H, T, Dh], rotated k and v [B, H_kv, T, Dh]. At inference q and
        kv are one matmul (fused weights) and q, k rotate together: fewer ops per draft level."""
        b, t, _ = h.shape
        if torch.is_grad_enabled():
            qkv = torch.cat([self.q(h), self.kv(h)], -1)
        else:
            qkv = F.linear(h, concat_cached(self, "qkv", self.q.weight, self.kv.weight))
        qkv = qkv.view(b, t, self.heads + 2 * self.kv_heads, self.head_dim)   # heads: [q | k | v]
        n_rot = self.heads + self.kv_heads
        cos, sin = (c.transpose(1, 2) for c in rope)                          # [B, T, 1, Dh]
        qk = apply_rotary(qkv[:, :, :n_rot], cos, sin).transpose(1, 2)        # [B, H + H_kv, T, Dh]
        return qk[:, :self.heads], qk[:, self.heads:], qkv[:, :, n_rot:].transpose(1, 2)

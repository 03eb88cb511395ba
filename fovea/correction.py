"""Gated residual correction of a draft hidden state, just before the LM head.

    c = f([h; r]),  g = sigmoid(g([h; r])) (a scalar),  h_hat = RMSNorm(h + g * c),  logits = W_LM h_hat
f and g are two biased linear layers with a SiLU between (hidden width 512 in the paper). Only the
LM-head input changes: the token, its position, the state passed to child nodes and every KV
cache stay as they were. Knows nothing about how r was retrieved.
"""
from __future__ import annotations

import torch
from torch import nn

from fovea.layers import concat_cached


class GatedCorrection(nn.Module):
    def __init__(self, hidden_size: int, width: int = 512):
        super().__init__()
        self.f = nn.Sequential(nn.Linear(2 * hidden_size, width), nn.SiLU(), nn.Linear(width, hidden_size))
        self.g = nn.Sequential(nn.Linear(2 * hidden_size, width), nn.SiLU(), nn.Linear(width, 1))
        nn.init.zeros_(self.f[2].weight)      # start as the identity: an untrained corrector changes nothing
        nn.init.zeros_(self.f[2].bias)
        nn.init.constant_(self.g[2].bias, -2.0)

    def forward(self, h: torch.Tensor, r: torch.Tensor, use_gate: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
        """h, r [..., D] -> (h + g*c [..., D], g [...]); use_gate=False fixes g = 1 (the "no gate" ablation)."""
        x = torch.cat([h, r], dim=-1)
        if self.training or torch.is_grad_enabled() or not use_gate:
            c = self.f(x)
            g = torch.sigmoid(self.g(x)).squeeze(-1) if use_gate else torch.ones(h.shape[:-1], device=h.device)
        else:   # inference: both first layers in one matmul (same numbers up to float summation order)
            w, b = self._fused_first_layer()
            a = torch.nn.functional.silu(torch.nn.functional.linear(x, w, b))
            width = self.f[0].out_features
            c = self.f[2](a[..., :width])
            g = torch.sigmoid(self.g[2](a[..., width:])).squeeze(-1)
        return h + g.unsqueeze(-1) * c, g

    def _fused_first_layer(self) -> tuple[torch.Tensor, torch.Tensor]:
        """[f0; g0] weights and biases (cached until a parameter changes)."""
        return (concat_cached(self, "w", self.f[0].weight, self.g[0].weight),
                concat_cached(self, "b", self.f[0].bias, self.g[0].bias))

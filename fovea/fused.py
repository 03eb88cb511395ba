"""Decode-time retrieval and correction in one pass: `Retriever` then `GatedCorrection`, folded.

On a small drafter the correction is bound by per-op overhead and weight traffic, not arithmetic:
on 2 CPU cores a corrected level cost about as much as a drafter block. The decode loop (no
autograd, one tree depth per call) therefore takes this path, which computes the same numbers as
the two modules (up to float summation order) in fewer ops:

- scores: s = LN(h) A + (E A)[d], with A = W_Q^T K^T / sqrt(d_r) built once per request
  (`Retriever._score_tables`);
- selection: the paper's rule read off the sorted probabilities directly. Entry j of the
  descending order is kept while the mass before it is below rho (entry 0 always), or when
  j < K_min; the candidate width is min(K_max, |V|). That keeps exactly the first
  K = min(|V|, K_max, max(K_min, K_raw)) entries, as `cumulative_mass_k` does;
- the readout folded into the corrector's first layer: [W_f0; W_g0] [h; r] + b = W_h h +
  sum_i alpha_i (W_r u_i + b), since the alphas sum to 1; the rows W_r u_i + b are built once
  per request;
- the second layers of f and g as one block matrix: [c | gate logit] in one product.

The selected indices, K and the readout r are computed only when read (the trace reads them,
benchmarks do not). Only correctors no wider than the drafter take this path (`usable`): the fold
costs one [N, D] x [D, 2w] product per request, which a 512-wide corrector does not earn back.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from fovea.config import RetrievalConfig
from fovea.correction import GatedCorrection
from fovea.memory import VisualMemory
from fovea.retrieval import FAST_MODES, Retriever


class FusedRetrieved:
    """`retrieval.Retrieved`'s fields for the fused path: the selected indices (-1 past K), K and the
    readout r are derived from the sorted order and the keep mask when read. Its width is
    min(K_max, |V|) (the general path pads to K_max)."""

    def __init__(self, order: torch.Tensor, keep: torch.Tensor, weights: torch.Tensor, values: torch.Tensor):
        self.order, self.keep, self.weights, self._values = order, keep, weights, values
        self.rows: torch.Tensor | None = None

    @property
    def indices(self) -> torch.Tensor:
        return self.order.masked_fill(~self.keep, -1)

    @property
    def k(self) -> torch.Tensor:
        return self.keep.sum(-1)

    @property
    def readout(self) -> torch.Tensor:
        return torch.bmm(self.weights.unsqueeze(1), self._values[self.order]).squeeze(1)


def usable(retriever: Retriever, corrector: GatedCorrection, memory: VisualMemory | None, cfg: RetrievalConfig,
           use_gate: bool) -> bool:
    """Whether `fused_correct` serves this call: inference, one memory, a fused mode, the gate on, and a
    corrector no wider than the hidden size. Folding the readout costs one [N, D] x [D, 2w] product per
    request; for a wide corrector (the paper's 512 on a 256-wide drafter) that outweighs what it saves
    per level (2026-12-05 profile: +0.3 ms on the first corrected level of each request), so those keep
    the two modules."""
    return (memory is not None and use_gate and cfg.mode in FAST_MODES and not torch.is_grad_enabled()
            and memory.keys.dim() == 2 and corrector.f[0].out_features <= corrector.f[2].out_features)


def _tables(retriever: Retriever, corrector: GatedCorrection, memory: VisualMemory, cfg: RetrievalConfig):
    """Per request and per weights (cached on the memory): score tables, the folded first layer, the
    block second layer and the K_min mask."""
    f0, g0, f2, g2 = corrector.f[0], corrector.g[0], corrector.f[2], corrector.g[2]
    params = (retriever.w_q.weight, retriever.depth_embedding.weight, f0.weight, f0.bias, g0.weight, g0.bias,
              f2.weight, f2.bias, g2.weight, g2.bias)
    key = ("fused", id(retriever), id(corrector), cfg.mode, cfg.k_min, cfg.k_max, cfg.fixed_k,
           tuple((p.data_ptr(), p._version) for p in params))
    got = memory.cache.get(key)
    if got is None:
        a, bias, n_valid = retriever._score_tables(memory, cfg.mode)
        d, width = f2.out_features, f0.out_features
        w1, b1 = corrector._fused_first_layer()                                  # [2w, 2D]: acts on [h; r]
        w_h = w1[:, :d].T.contiguous()                                          # [D, 2w]
        rows = (memory.values @ w1[:, d:].T + b1).contiguous()                  # [N, 2w]: W_r u_i + b
        w2 = torch.zeros(2 * width, d + 1, dtype=w1.dtype, device=w1.device)
        w2[:width, :d] = f2.weight.detach().T
        w2[width:, d] = g2.weight.detach()[0]
        b2 = torch.cat([f2.bias, g2.bias]).detach()
        cap = min(n_valid, cfg.fixed_k if cfg.mode == "fixed" else cfg.k_max)
        floor = torch.arange(cap, device=a.device) < (cap if cfg.mode == "fixed" else cfg.k_min)
        got = memory.cache[key] = (a, bias, w_h, rows, w2, b2, cap, floor)
    return got


def fused_correct(retriever: Retriever, corrector: GatedCorrection, h: torch.Tensor, depth: int,
                  memory: VisualMemory, cfg: RetrievalConfig) -> tuple[torch.Tensor, FusedRetrieved, torch.Tensor]:
    """h [S, D] draft states at tree depth `depth` -> (h + g c [S, D], retrieval, gate g [S])."""
    a, bias, w_h, rows, w2, b2, cap, floor = _tables(retriever, corrector, memory, cfg)
    norm = retriever.norm
    x = F.layer_norm(h, norm.normalized_shape, norm.weight, norm.bias, norm.eps)
    probs = torch.softmax(torch.addmm(bias[min(depth, bias.shape[0] - 1)], x, a), dim=-1)
    p_sorted, order = probs.topk(cap, dim=-1, sorted=True)
    if cfg.mode == "fixed":
        keep = floor.expand_as(p_sorted)
    else:   # the mass before entry j still short of rho (entry 0 always), or j < K_min
        short = p_sorted.cumsum(-1) < cfg.rho - 1e-6
        keep = F.pad(short[:, :-1], (1, 0), value=True) | floor
    w = p_sorted * keep
    w = w / w.sum(-1, keepdim=True)
    first = torch.bmm(w.unsqueeze(1), rows[order]).squeeze(1)                   # sum_i alpha_i (W_r u_i + b)
    out = torch.addmm(b2, F.silu(torch.addmm(first, h, w_h)), w2)               # [S, D + 1]: c | gate logit
    gate = torch.sigmoid(out[:, -1])
    return torch.addcmul(h, gate.unsqueeze(-1), out[:, :-1]), FusedRetrieved(order, keep, w, memory.values), gate

"""State-conditioned retrieval from the visual memory, and the paper's control modes.

For a draft state h at tree depth d:
    q = W_Q(LN(h) + E_dep[d])                 (state_only: no E_dep; query_agnostic: a learned q)
    s_i = q . k_i / sqrt(d_r),  p = softmax(s) over valid keys
    sort p descending;  K_raw = min{k : sum_{j<=k} p_(j) >= rho}
    K = min(|V|, K_max, max(K_min, K_raw));  alpha = p_sel / sum(p_sel);  r = sum alpha_i u_i
Knows nothing about the correction that consumes r, nor about the draft tree.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from fovea.config import RetrievalConfig
from fovea.memory import VisualMemory


@dataclass
class Retrieved:
    readout: torch.Tensor   # [S, D]   r for each of S draft states
    indices: torch.Tensor   # [S, W] selected entries, sorted by weight; -1 pads each row past its K
    weights: torch.Tensor   # [S, W] alpha (0 on pads); W = the rule's candidate width (e.g. K_max)
    k: torch.Tensor         # [S] entries selected per state
    rows: torch.Tensor | None = None   # which of the head's states these S are (correction.trigger); None: all


def cumulative_mass_k(probs_sorted: torch.Tensor, n_valid: torch.Tensor, rho: float,
                      k_min: int, k_max: int) -> torch.Tensor:
    """K per row from descending-sorted probabilities [S, N] (invalid entries sorted last with p = 0).

    K_raw is the smallest k whose prefix mass reaches rho; then clamp to [K_min, K_max] and to the
    number of valid entries. A small tolerance keeps rho = 1.0 from overshooting on round-off.
    """
    cum = probs_sorted.cumsum(-1)
    k_raw = (cum < rho - 1e-6).sum(-1) + 1                       # first index reaching rho, 1-based
    k = k_raw.clamp(min=k_min).clamp(max=k_max)
    return torch.minimum(k, n_valid)


def selection_weights(p_sorted: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Descending-sorted probabilities [S, W] and K per row -> (keep [S, W]: the first K of each row,
    alpha [S, W]: the kept probabilities renormalised over the selected set, 0 on pads)."""
    keep = torch.arange(p_sorted.shape[1], device=k.device)[None, :] < k[:, None]
    w = p_sorted * keep
    return keep, w / w.sum(-1, keepdim=True).clamp_min(1e-12)


class Retriever(nn.Module):
    def __init__(self, hidden_size: int, key_dim: int, max_depth: int):
        super().__init__()
        self.norm = nn.LayerNorm(hidden_size)
        self.depth_embedding = nn.Embedding(max_depth + 1, hidden_size)
        nn.init.zeros_(self.depth_embedding.weight)
        self.w_q = nn.Linear(hidden_size, key_dim, bias=False)
        self.agnostic_query = nn.Parameter(torch.zeros(key_dim))   # for the query-agnostic control
        self.key_dim = key_dim

    def scores(self, h: torch.Tensor, depth: torch.Tensor, memory: VisualMemory, mode: str) -> torch.Tensor:
        """h [S, D], depth [S] -> masked scores [S, N] (-inf on invalid entries)."""
        if mode == "query_agnostic":
            q = self.agnostic_query.expand(h.shape[0], -1)
        else:
            x = self.norm(h)
            if mode != "state_only":
                x = x + self.depth_embedding(depth.clamp(max=self.depth_embedding.num_embeddings - 1))
            q = self.w_q(x)                                           # [S, d_r]
        s = q @ memory.keys.transpose(-1, -2) / math.sqrt(self.key_dim)  # [S, N]
        return s.masked_fill(~memory.valid, float("-inf"))

    def forward(self, h: torch.Tensor, depth: torch.Tensor | int, memory: VisualMemory, cfg: RetrievalConfig,
                generator: torch.Generator | None = None) -> Retrieved:
        if cfg.mode in FAST_MODES and not torch.is_grad_enabled() and memory.keys.dim() == 2:
            return self._fast(h, depth, memory, cfg)
        if isinstance(depth, int):
            depth = torch.full((h.shape[0],), depth, dtype=torch.long, device=h.device)
        s = self.scores(h, depth, memory, cfg.mode)
        probs = torch.softmax(s, dim=-1)                              # [S, N]
        n_valid = memory.valid.sum().expand(h.shape[0])
        n = s.shape[-1]
        if cfg.mode == "random":
            noise = torch.rand(s.shape, generator=generator).to(s.device).masked_fill(~memory.valid, -1.0)
            order = noise.argsort(-1, descending=True)
            probs = memory.valid.float().expand_as(s)                 # uniform over the sampled set
        elif cfg.mode == "static":
            order = static_order(memory).expand(h.shape[0], -1)
            probs = memory.valid.float().expand_as(s)
        elif cfg.mode == "dense":
            order = probs.argsort(-1, descending=True)
        else:   # only the best k_max (or fixed_k) entries can ever be selected: a partial sort suffices
            cap = min(n, cfg.fixed_k if cfg.mode == "fixed" else cfg.k_max)
            order = probs.topk(cap, dim=-1, sorted=True).indices
        p_sorted = probs.gather(-1, order)
        if cfg.mode == "dense":
            k = n_valid.clone()
        elif cfg.mode in ("fixed", "random", "static"):
            k = torch.minimum(torch.full_like(n_valid, cfg.fixed_k), n_valid)
        else:
            k = cumulative_mass_k(p_sorted, n_valid, cfg.rho, cfg.k_min, cfg.k_max)
        # rows keep their full candidate width (no host sync for max K); pads carry weight 0
        keep, w = selection_weights(p_sorted, k)
        idx = order
        # r = sum_i alpha_i u_i as one [S, N] @ [N, D] product (pads carry weight 0)
        dense_w = torch.zeros(h.shape[0], n, dtype=w.dtype, device=w.device).scatter(1, idx, w)
        readout = dense_w @ memory.values
        return Retrieved(readout=readout, indices=idx.masked_fill(~keep, -1), weights=w, k=k)

    def _fast(self, h: torch.Tensor, depth: torch.Tensor | int, memory: VisualMemory, cfg: RetrievalConfig) -> Retrieved:
        """The decode loop's retrieval (cumulative or fixed K, no autograd) in about half the ops of
        `forward`'s general path, with the same selection rule. The query and key projections fold
        into one [D, N] product per memory: s = (LN(h) + E[d]) W_Q^T K^T / sqrt(d_r)
        = LN(h) A + (E A)[d], with A and E A (invalid entries at -inf) built once per request."""
        a, bias, n_valid = self._score_tables(memory, cfg.mode)
        x = torch.nn.functional.layer_norm(h, self.norm.normalized_shape, self.norm.weight, self.norm.bias,
                                           self.norm.eps)
        row = bias[min(depth, bias.shape[0] - 1)] if isinstance(depth, int) else \
            bias[depth.clamp(max=bias.shape[0] - 1)]
        probs = torch.softmax(torch.addmm(row, x, a) if row.dim() == 1 else row + x @ a, dim=-1)
        cap = min(a.shape[1], cfg.fixed_k if cfg.mode == "fixed" else cfg.k_max)
        p_sorted, order = probs.topk(cap, dim=-1, sorted=True)
        if cfg.mode == "fixed":
            k = torch.full((h.shape[0],), min(cfg.fixed_k, n_valid), dtype=torch.long, device=h.device)
        else:   # cumulative_mass_k with the clamps folded into one (K_max and |V| are host ints here)
            k = ((p_sorted.cumsum(-1) < cfg.rho - 1e-6).sum(-1) + 1).clamp(min=cfg.k_min, max=min(cfg.k_max, n_valid))
        keep, w = selection_weights(p_sorted, k)
        readout = torch.bmm(w.unsqueeze(1), memory.values[order]).squeeze(1)
        return Retrieved(readout=readout, indices=order.masked_fill(~keep, -1), weights=w, k=k)

    def _score_tables(self, memory: VisualMemory, mode: str) -> tuple[torch.Tensor, torch.Tensor, int]:
        """(A [D, N], per-depth score offsets [depths, N] with -inf on invalid entries, |V|), cached on
        the memory for this retriever's current weights."""
        key = ("scores", id(self), mode, self.w_q.weight._version, self.depth_embedding.weight._version)
        got = memory.cache.get(key)
        if got is None:
            a = self.w_q.weight.T @ memory.keys.T / math.sqrt(self.key_dim)             # [D, N]
            depth_rows = self.depth_embedding.weight if mode != "state_only" else \
                self.depth_embedding.weight[:1] * 0
            bias = (depth_rows @ a).masked_fill(~memory.valid, float("-inf"))          # [depths, N]
            got = memory.cache[key] = (a, bias, int(memory.valid.sum()))
        return got


# the modes whose decode-time retrieval takes the folded path (Retriever._fast, and fovea.fused with the correction)
FAST_MODES = ("cumulative", "fixed", "state_only")


def static_order(memory: VisualMemory) -> torch.Tensor:
    """One fixed ranking per image (by value norm), shared by every draft state: the static control."""
    score = memory.values.norm(dim=-1).masked_fill(~memory.valid, float("-inf"))
    return score.argsort(descending=True)[None, :]

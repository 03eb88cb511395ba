"""Acceptance rules: which draft-tree path the target keeps, and the bonus token after it.

Greedy: walk from the root, at each node move to the child whose token equals the target's
argmax there; stop when none does. The bonus token is the target's argmax at the last node.
The output equals greedy autoregressive decoding token for token.

Sampling (multi-draft speculative sampling with point-mass proposals): at a node with target
distribution p and children c_1..c_k (in draft-score order), each child is a deterministic
proposal. Accept c_j with probability p(c_j); on rejection set p(c_j) = 0 and renormalise
(the residual norm(max(p - delta_cj, 0))), then try c_{j+1}. If every child is rejected the bonus
is sampled from the residual. Each step is a valid rejection-sampling step, so the emitted token
is distributed exactly as p (Leviathan et al. 2023; SpecInfer 2024).
Knows nothing about models: inputs are token lists and probability tensors.
"""
from __future__ import annotations

import torch

from fovea.tree import children_of


def accept_greedy(tokens: list[int], parents: list[int], target_argmax: list[int]) -> tuple[list[int], int]:
    """-> (accepted node indices root excluded, bonus token)."""
    kids = children_of(parents)
    path, node = [], 0
    while True:
        nxt = next((c for c in kids[node] if tokens[c] == target_argmax[node]), None)
        if nxt is None:
            return path, target_argmax[node]
        path.append(nxt)
        node = nxt


def accept_sampling(tokens: list[int], parents: list[int], target_probs: torch.Tensor,
                    generator: torch.Generator | None = None) -> tuple[list[int], int]:
    """target_probs [N+1, V] (temperature / top-p already applied) -> (accepted nodes, bonus token)."""
    kids = children_of(parents)
    path, node = [], 0
    while True:
        p = target_probs[node].clone()
        moved = False
        for c in kids[node]:           # children are stored in draft-score order
            t = tokens[c]
            if torch.rand((), generator=generator).item() < p[t].item():
                path.append(c)
                node, moved = c, True
                break
            p[t] = 0.0
            total = p.sum()
            if total <= 0:
                break
            p = p / total
        if not moved:
            return path, int(torch.multinomial(p, 1, generator=generator).item())


def process_logits(logits: torch.Tensor, temperature: float, top_p: float) -> torch.Tensor:
    """logits [..., V] -> probabilities after temperature and nucleus (top-p) filtering."""
    probs = torch.softmax(logits / temperature, dim=-1)
    if top_p >= 1.0:
        return probs
    sorted_p, order = probs.sort(-1, descending=True)
    cum = sorted_p.cumsum(-1)
    drop = cum - sorted_p > top_p                      # keep the smallest prefix reaching top_p
    sorted_p = sorted_p.masked_fill(drop, 0.0)
    out = torch.zeros_like(probs).scatter(-1, order, sorted_p)
    return out / out.sum(-1, keepdim=True)

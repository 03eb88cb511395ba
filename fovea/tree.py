"""Draft-tree buffers: the one place that knows ancestry. Pure tensor functions from parents to
the ancestor matrix, and from it to everything else the decode loop and its readers need: the
verification mask, node depths, root-to-leaf paths, a node's path, a pruned and renumbered tree
(Medusa's "buffers" idea, kept as tensors so the draft loop never leaves torch).

Node 0 is the root (the last committed token); every other node's parent precedes it, so a
node's ancestors are known the moment it is added. `anc[i, j]` is True when j is i or an
ancestor of i; it is the tree attention mask, and row i's count minus one is i's depth.
Knows nothing about models.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class TreeBuffers:
    mask: torch.Tensor              # [N+1, N+1] bool: node i may attend node j (j is i or an ancestor)
    depths: torch.Tensor            # [N+1] long: position offset of each node (root 0)
    retrieve_indices: torch.Tensor  # [L, max_depth+1] long: node indices of each root-to-leaf path, -1 padded


def new_ancestors(capacity: int, device=None) -> torch.Tensor:
    """An empty ancestor matrix [capacity, capacity] bool holding only the root (node 0)."""
    anc = torch.zeros(capacity, capacity, dtype=torch.bool, device=device)
    anc[0, 0] = True
    return anc


def add_nodes(anc: torch.Tensor, first: int, parents: torch.Tensor) -> None:
    """Add nodes first..first+n-1 with parents [n] (each < first) in place: a node's row is its
    parent's row plus itself. Two tensor ops, no host sync, whatever the tree's width."""
    n = parents.shape[0]
    anc[first:first + n] = anc.index_select(0, parents)
    anc[first:first + n].diagonal(first).fill_(True)


def ancestors_of(parents: list[int]) -> torch.Tensor:
    """Parent list (root -1 first, parents before children) -> ancestor matrix [N+1, N+1] bool."""
    n = len(parents)
    if n == 0 or parents[0] != -1:
        raise ValueError("node 0 must be the root (parent -1)")
    for i, p in enumerate(parents[1:], start=1):
        if not 0 <= p < i:
            raise ValueError(f"parent of node {i} must precede it, got {p}")
    anc = new_ancestors(n)
    for i in range(1, n):              # node by node: a later node may hang under an earlier one
        add_nodes(anc, i, torch.tensor([parents[i]]))
    return anc


def depths_of(anc: torch.Tensor) -> torch.Tensor:
    """[N+1, N+1] ancestor matrix -> depth of each node [N+1] long (root 0)."""
    return anc.sum(1) - 1


def path_to(anc: torch.Tensor, node: int) -> list[int]:
    """Root-to-node path [root, ..., node] (ancestors precede their descendants in index order)."""
    return anc[node].nonzero().flatten().tolist()


def leaf_paths(anc: torch.Tensor) -> torch.Tensor:
    """Root-to-leaf node indices [L, max_depth+1], -1 padded; a leaf is nobody's strict ancestor."""
    strict = anc & ~torch.eye(anc.shape[0], dtype=torch.bool, device=anc.device)
    leaves = (~strict.any(0)).nonzero().flatten().tolist()
    paths = [path_to(anc, leaf) for leaf in leaves]
    width = max(len(p) for p in paths)
    return torch.tensor([p + [-1] * (width - len(p)) for p in paths])


def build_tree_buffers(parents: list[int]) -> TreeBuffers:
    anc = ancestors_of(parents)
    return TreeBuffers(mask=anc, depths=depths_of(anc), retrieve_indices=leaf_paths(anc))


def prune(anc: torch.Tensor, scores: torch.Tensor, depths: torch.Tensor, budget: int) -> torch.Tensor:
    """Keep the `budget` best-scoring non-root nodes plus their ancestors (the tree stays closed),
    ordered root first, then by depth, then by score. anc [M, M], scores / depths [M]
    -> kept node indices [N+1] (one host sync: the kept count)."""
    best = scores[1:].topk(min(budget, scores.shape[0] - 1)).indices + 1       # [budget]
    kept = anc.index_select(0, best).any(0)                                     # closure; root included
    kept[0] = True
    nodes = kept.nonzero().flatten()
    nodes = nodes[torch.sort(-scores[nodes], stable=True).indices]              # score, high first
    return nodes[torch.sort(depths[nodes], stable=True).indices]                # then depth, root first


def renumber(anc: torch.Tensor, parents: torch.Tensor, order: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The subtree on nodes `order` [N+1] (root first, parents before children) renumbered 0..N:
    -> (ancestor matrix [N+1, N+1] = its verification mask, parents [N+1] with the root's -1)."""
    new_id = torch.full((anc.shape[0],), -1, dtype=torch.long, device=order.device)
    new_id[order] = torch.arange(order.shape[0], device=order.device)
    par = new_id[parents[order].clamp_min(0)]
    par[0] = -1
    return anc[order][:, order], par


def children_of(parents: list[int]) -> list[list[int]]:
    kids: list[list[int]] = [[] for _ in parents]
    for i, p in enumerate(parents[1:], start=1):
        kids[p].append(i)
    return kids

"""Draft-tree buffers: pure functions from a parent list to the tensors the target and the
acceptance rule need (Medusa's "buffers" idea).

Node 0 is the root (the last committed token); every other node's parent precedes it.
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


def build_tree_buffers(parents: list[int]) -> TreeBuffers:
    n = len(parents)
    if n == 0 or parents[0] != -1:
        raise ValueError("node 0 must be the root (parent -1)")
    ancestors: list[list[int]] = [[0]]          # ancestors-or-self of each node, root first
    for i in range(1, n):
        p = parents[i]
        if not 0 <= p < i:
            raise ValueError(f"parent of node {i} must precede it, got {p}")
        ancestors.append(ancestors[p] + [i])
    mask = torch.zeros(n, n, dtype=torch.bool)
    rows = torch.tensor([i for i, a in enumerate(ancestors) for _ in a])
    cols = torch.tensor([j for a in ancestors for j in a])
    mask[rows, cols] = True
    depths = torch.tensor([len(a) - 1 for a in ancestors])
    has_child = set(parents[1:])
    leaves = [i for i in range(n) if i not in has_child]
    width = max(len(a) for a in ancestors)
    paths = torch.tensor([ancestors[leaf] + [-1] * (width - len(ancestors[leaf])) for leaf in leaves])
    return TreeBuffers(mask=mask, depths=depths, retrieve_indices=paths)


def children_of(parents: list[int]) -> list[list[int]]:
    kids: list[list[int]] = [[] for _ in parents]
    for i, p in enumerate(parents[1:], start=1):
        kids[p].append(i)
    return kids

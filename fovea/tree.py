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
    mask = torch.zeros(n, n, dtype=torch.bool)
    depths = torch.zeros(n, dtype=torch.long)
    for i in range(n):
        p = parents[i]
        if i > 0 and not 0 <= p < i:
            raise ValueError(f"parent of node {i} must precede it, got {p}")
        mask[i, i] = True
        if i > 0:
            mask[i] |= mask[p]
            depths[i] = depths[p] + 1
    has_child = set(parents[1:])
    leaves = [i for i in range(n) if i not in has_child]
    width = int(depths.max()) + 1
    paths = torch.full((len(leaves), width), -1, dtype=torch.long)
    for row, leaf in enumerate(leaves):
        path = mask[leaf].nonzero().flatten()        # ancestors sorted by index == sorted by depth
        paths[row, : path.numel()] = path
    return TreeBuffers(mask=mask, depths=depths, retrieve_indices=paths)


def children_of(parents: list[int]) -> list[list[int]]:
    kids: list[list[int]] = [[] for _ in parents]
    for i, p in enumerate(parents[1:], start=1):
        kids[p].append(i)
    return kids

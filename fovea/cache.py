"""KV-cache surgery shared by the target adapters: keep an accepted subset of the newest entries.

Works on transformers `Cache` objects whose layers expose `.keys` / `.values` [B, H_kv, S, Dh]
(DynamicCache in transformers 5). Knows nothing about trees.
"""
from __future__ import annotations

import torch


def compact_tail(cache, n_appended: int, keep: torch.Tensor) -> None:
    """Drop the last `n_appended` entries of every layer except rows `keep` (relative indices,
    ascending), which move up to follow the committed prefix in order."""
    for layer in cache.layers:
        prefix = layer.keys.shape[2] - n_appended
        if keep.numel() == n_appended and bool((keep == torch.arange(n_appended)).all()):
            continue
        idx = (keep + prefix).to(layer.keys.device)        # layers may sit on different GPUs
        layer.keys = torch.cat([layer.keys[:, :, :prefix], layer.keys.index_select(2, idx)], dim=2)
        layer.values = torch.cat([layer.values[:, :, :prefix], layer.values.index_select(2, idx)], dim=2)

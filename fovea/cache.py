"""KV-cache surgery shared by the target adapters: keep an accepted subset of the newest entries.

Works on transformers `Cache` objects whose layers expose `.keys` / `.values` [B, H_kv, S, Dh]
(DynamicCache in transformers 5). Knows nothing about trees.
"""
from __future__ import annotations

import torch


def compact_tail(cache, n_appended: int, keep: torch.Tensor) -> None:
    """Drop the last `n_appended` entries of every layer except rows `keep` (relative indices,
    ascending), which move up to follow the committed prefix in order. The kept rows are copied
    in place and the layer becomes a view of its first prefix + len(keep) entries: only the kept
    rows move (the next append re-allocates the layer anyway)."""
    k = int(keep.numel())
    identity = k <= n_appended and bool((keep == torch.arange(k)).all())
    for layer in cache.layers:
        prefix = layer.keys.shape[2] - n_appended
        if not identity:
            idx = (keep + prefix).to(layer.keys.device)        # layers may sit on different GPUs
            layer.keys[:, :, prefix:prefix + k] = layer.keys.index_select(2, idx)
            layer.values[:, :, prefix:prefix + k] = layer.values.index_select(2, idx)
        if k < n_appended:
            layer.keys = layer.keys[:, :, :prefix + k]
            layer.values = layer.values[:, :, :prefix + k]

"""KV caches for the target adapters, and the surgery that keeps an accepted subset of the newest entries.

`StackedCache` is a transformers `Cache` whose layers are views into ONE preallocated buffer
[L, 2, B, H_kv, capacity, Dh] (gpt-fast style): a forward writes its new keys and values in place
instead of concatenating a new tensor per layer, and committing an accepted tree path is one
gather-and-write over all layers at once, so neither grows with the decoder's depth in op count.
`compact_tail` is the per-layer fallback for any other transformers cache (DynamicCache, or layers
spread over several devices). Knows nothing about trees.
"""
from __future__ import annotations

import torch
from transformers.cache_utils import Cache, DynamicLayer


class KVStore:
    """The stacked buffer behind a `StackedCache`: `kv` [L, 2, B, H_kv, capacity, Dh] plus the number
    of valid entries (all layers hold the same count between forwards). Allocated at the first write
    (shapes, dtype and device come from the keys) with `headroom` free slots after it, and doubled
    when a later write would pass the end."""

    def __init__(self, num_layers: int, headroom: int = 512):
        self.num_layers, self.headroom = num_layers, headroom
        self.kv: torch.Tensor | None = None
        self.lengths = [0] * num_layers

    def write(self, layer: int, keys: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """keys, values [B, H_kv, T, Dh] appended after the layer's valid entries -> views of all of
        them [B, H_kv, S + T, Dh]."""
        start = self.lengths[layer]
        end = start + keys.shape[2]
        if self.kv is None:
            b, h, _, d = keys.shape
            self.kv = keys.new_zeros(self.num_layers, 2, b, h, end + self.headroom, d)
        elif end > self.kv.shape[4]:       # rare: double once for every layer, then carry on in place
            pad = self.kv.new_zeros(*self.kv.shape[:4], max(end, 2 * self.kv.shape[4]) - self.kv.shape[4],
                                    self.kv.shape[5])
            self.kv = torch.cat([self.kv, pad], 4)
        self.kv[layer, 0, :, :, start:end] = keys
        self.kv[layer, 1, :, :, start:end] = values
        self.lengths[layer] = end
        return self.kv[layer, 0, :, :, :end], self.kv[layer, 1, :, :, :end]

    def keep_tail(self, n_appended: int, keep: torch.Tensor) -> None:
        """Of the last `n_appended` entries, keep rows `keep` (relative, ascending) right after the
        prefix, across every layer in one gather and one write."""
        length = self.lengths[0]
        prefix, k = length - n_appended, int(keep.numel())
        if not _in_place(keep, n_appended):
            idx = (keep + prefix).to(self.kv.device)
            self.kv[:, :, :, :, prefix:prefix + k] = self.kv.index_select(4, idx)
        self.lengths = [prefix + k] * self.num_layers


class StackedLayer(DynamicLayer):
    """One layer's view of a `KVStore`: `keys` / `values` [B, H_kv, S, Dh] are slices of the shared
    buffer, so code that reads `cache.layers[i].keys` works unchanged."""

    def __init__(self, store: KVStore, index: int):
        super().__init__()
        self.store, self.index = store, index

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        self.keys, self.values = self.store.write(self.index, key_states, value_states)
        return self.keys, self.values

    def refresh(self) -> None:
        """Re-point the views after the store was compacted or grown."""
        end = self.store.lengths[self.index]
        self.keys = self.store.kv[self.index, 0, :, :, :end]
        self.values = self.store.kv[self.index, 1, :, :, :end]

    def crop(self, tokens_to_remove: int) -> None:
        if tokens_to_remove > 0:
            raise ValueError("crop takes a negative count of tokens to remove")
        if tokens_to_remove and self.is_initialized:
            self.store.lengths[self.index] += tokens_to_remove
            self.refresh()


class StackedCache(Cache):
    """A `Cache` of `num_layers` `StackedLayer`s over one `KVStore` (full-attention decoders on one
    device; `stacked_cache_for` says when it applies)."""

    def __init__(self, num_layers: int, headroom: int = 512):
        self.store = KVStore(num_layers, headroom)
        super().__init__(layers=[StackedLayer(self.store, i) for i in range(num_layers)])

    def keep_tail(self, n_appended: int, keep: torch.Tensor) -> None:
        self.store.keep_tail(n_appended, keep)
        for layer in self.layers:
            layer.refresh()


def stacked_cache_for(model, text_config) -> Cache:
    """A `StackedCache` when every decoder layer is full attention and the model sits on one device
    (the bundled target, single-GPU real backbones); otherwise transformers' own DynamicCache."""
    from transformers import DynamicCache

    layer_types = getattr(text_config, "layer_types", None) or ["full_attention"]
    one_device = len({p.device for p in model.parameters()}) == 1
    if set(layer_types) == {"full_attention"} and one_device:
        return StackedCache(text_config.num_hidden_layers)
    return DynamicCache(config=text_config)


def compact_tail(cache, n_appended: int, keep: torch.Tensor) -> None:
    """Drop the last `n_appended` entries of every layer except rows `keep` (relative indices,
    ascending), which move up to follow the committed prefix in order. A `StackedCache` does it in
    one operation over all layers; other caches layer by layer (the kept rows copied in place and
    the layer becoming a view of its first prefix + len(keep) entries)."""
    if isinstance(cache, StackedCache):
        cache.keep_tail(n_appended, keep)
        return
    k = int(keep.numel())
    identity = _in_place(keep, n_appended)
    for layer in cache.layers:
        prefix = layer.keys.shape[2] - n_appended
        if not identity:
            idx = (keep + prefix).to(layer.keys.device)        # layers may sit on different GPUs
            layer.keys[:, :, prefix:prefix + k] = layer.keys.index_select(2, idx)
            layer.values[:, :, prefix:prefix + k] = layer.values.index_select(2, idx)
        if k < n_appended:
            layer.keys = layer.keys[:, :, :prefix + k]
            layer.values = layer.values[:, :, :prefix + k]


def _in_place(keep: torch.Tensor, n_appended: int) -> bool:
    """Whether the kept rows are already the first len(keep) appended ones (nothing moves)."""
    k = int(keep.numel())
    return k <= n_appended and bool((keep == torch.arange(k)).all())

"""The stacked KV cache: one buffer for every layer, written in place, compacted in one operation.
It must hold exactly what transformers' DynamicCache holds after the same appends and commits."""
import torch
from transformers import DynamicCache

from fovea.cache import StackedCache, compact_tail


def _append(cache, layers: int, n: int, gen: torch.Generator) -> list:
    new = [(torch.randn(1, 2, n, 4, generator=gen), torch.randn(1, 2, n, 4, generator=gen)) for _ in range(layers)]
    for i, (k, v) in enumerate(new):
        cache.update(k, v, i)
    return new


def test_stacked_cache_matches_dynamic_cache_through_appends_and_commits():
    layers = 3
    stacked, dynamic = StackedCache(layers, headroom=4), DynamicCache()
    gen_a, gen_b = torch.Generator().manual_seed(0), torch.Generator().manual_seed(0)
    plan = [(7, None), (5, torch.tensor([0, 2, 3])), (6, torch.tensor([1])), (9, torch.tensor([0, 1, 2])),
            (4, torch.tensor([0, 3]))]          # 7 + 5 + ... passes the 7 + 4 slots allocated first: it grows
    for n, keep in plan:
        _append(stacked, layers, n, gen_a)
        _append(dynamic, layers, n, gen_b)
        if keep is not None:
            compact_tail(stacked, n, keep)
            compact_tail(dynamic, n, keep)
        for s, d in zip(stacked.layers, dynamic.layers):
            assert torch.equal(s.keys, d.keys) and torch.equal(s.values, d.values)
        assert stacked.get_seq_length() == dynamic.get_seq_length()


def test_stacked_cache_commit_is_one_buffer_for_all_layers():
    cache = StackedCache(4, headroom=16)
    _append(cache, 4, 5, torch.Generator().manual_seed(1))
    buffer = cache.store.kv
    cache.keep_tail(5, torch.tensor([0, 4]))
    assert cache.store.kv is buffer                      # compacted in place, no per-layer tensors
    assert all(layer.keys.data_ptr() == buffer[i, 0].data_ptr() for i, layer in enumerate(cache.layers))
    assert cache.store.lengths == [2] * 4


def test_bundled_target_prefills_into_a_stacked_cache(tiny_pipeline):
    from fovea.data import make_sample

    target = tiny_pipeline.target
    s = make_sample(0, family="scene")
    state, _ = target.prefill(target.prepare(s.image, s.question))
    assert isinstance(state.cache, StackedCache)
    assert state.cache.get_seq_length() == state.length

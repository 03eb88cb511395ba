"""The target adapter: tree verification equals sequential decoding; cache compaction equals a
fresh prefill of the accepted sequence."""
import copy

import torch

from fovea.target import Prompt
from fovea.tree import build_tree_buffers

PARENTS = [-1, 0, 0, 1, 1, 2, 3]      # 7 nodes, three root-to-leaf paths


def prompt_of(pipe, seed=0):
    img, q = pipe.random_example("scene", seed)
    return pipe.target.prepare(img, q)


def test_tree_verification_logits_equal_sequential_decoding_on_each_branch(tiny_pipeline):
    target = tiny_pipeline.target
    prompt = prompt_of(tiny_pipeline)
    state, _ = target.prefill(prompt)
    g = torch.Generator().manual_seed(1)
    tokens = torch.randint(10, target.vocab_size, (len(PARENTS),), generator=g)
    buffers = build_tree_buffers(PARENTS)
    tree_state = copy.deepcopy(state)
    tree_out = target.forward(tree_state, tokens, buffers.depths, buffers.mask)
    worst = 0.0
    for path in buffers.retrieve_indices.tolist():
        path = [n for n in path if n >= 0]
        seq_state = copy.deepcopy(state)
        for n in path:                          # one token at a time, causal
            out = target.forward(seq_state, tokens[n:n + 1], torch.zeros(1, dtype=torch.long), None)
            target.commit(seq_state, 1, torch.tensor([0]))
            worst = max(worst, (out.logits[0] - tree_out.logits[n]).abs().max().item())
            assert torch.allclose(out.hidden[0], tree_out.hidden[n], atol=1e-4)
    assert worst < 1e-4


def test_cache_compaction_equals_fresh_prefill_of_accepted_sequence(tiny_pipeline):
    target = tiny_pipeline.target
    prompt = prompt_of(tiny_pipeline, seed=3)
    state, _ = target.prefill(prompt)
    tokens = torch.tensor([11, 12, 13, 14, 15, 16, 17])
    buffers = build_tree_buffers(PARENTS)
    target.forward(state, tokens, buffers.depths, buffers.mask)
    accepted = [1, 3, 6]                        # root -> 1 -> 3 -> 6
    target.commit(state, len(PARENTS), torch.tensor([0] + accepted))
    kept = tokens[[0] + accepted]
    assert state.length == prompt.input_ids.shape[1] + 4
    nxt = torch.tensor([21])
    after = target.forward(state, nxt, torch.zeros(1, dtype=torch.long), None)
    fresh_ids = torch.cat([prompt.input_ids[0], kept, nxt])[None]
    fresh_state, fresh = target.prefill(Prompt(input_ids=fresh_ids, model_inputs=prompt.model_inputs))
    assert (after.logits[0] - fresh.logits[-1]).abs().max().item() < 1e-4
    for layer, ref in zip(state.cache.layers, fresh_state.cache.layers):
        assert torch.allclose(layer.keys, ref.keys, atol=1e-4)
        assert torch.allclose(layer.values, ref.values, atol=1e-4)

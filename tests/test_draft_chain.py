"""The chain fast path (`fovea.draft._draft_chain`) drafts exactly the tree the general level loop
drafts with one candidate a level: tokens, parents, depths, scores, mask and the retrieval trace."""
import pytest
import torch

from fovea import draft
from fovea.config import FoveaConfig
from test_retrieval import tiny_drafter


def _trees(cfg, trace):
    d = tiny_drafter()
    torch.manual_seed(1)
    with torch.inference_mode():
        mem = d.encode_memory(torch.randn(6, 24))
    state = draft.extend(d, None, torch.randint(0, 50, (7,)), torch.randn(7, 32), capacity=64)
    args = (d, state, 3, mem, cfg, trace, None, draft.NO_CLOCK)
    with torch.inference_mode():
        return draft._draft_chain(*args), draft._draft_levels(*args), draft.draft_tree(d, state, 3, mem, cfg, trace)


@pytest.mark.parametrize("stop", [0.0, 0.4, 0.9])
@pytest.mark.parametrize("propagate", [False, True])
@pytest.mark.parametrize("trace", [False, True])
def test_chain_path_equals_the_general_path(stop, propagate, trace):
    cfg = FoveaConfig().replace(tree=dict(depth=6, top_k=1, total_tokens=6, stop_below=stop),
                                correction=dict(max_depth=2, propagate=propagate))
    chain, general, public = _trees(cfg, trace)
    for tree in (general, public):
        assert tree.tokens == chain.tokens and tree.parents == chain.parents and tree.depths == chain.depths
        assert torch.equal(tree.score_values, chain.score_values) and torch.equal(tree.mask, chain.mask)
    assert chain.parents == list(range(-1, len(chain.tokens) - 1))
    if trace:
        assert sorted(chain.retrieval._convert()) == sorted(general.retrieval._convert())
        for node, got in general.retrieval._convert().items():
            mine = chain.retrieval[node]
            assert (mine.indices, mine.weights, mine.k, mine.gate) == (got.indices, got.weights, got.k, got.gate)


def test_stop_rule_shortens_the_chain_and_budget_prunes_it():
    cfg = FoveaConfig().replace(tree=dict(depth=6, top_k=1, total_tokens=6, stop_below=0.0))
    full, _, _ = _trees(cfg, False)
    assert len(full.tokens) == 7
    short, general, _ = _trees(cfg.replace(tree=dict(total_tokens=3)), False)
    assert short.tokens == full.tokens[:4] and general.tokens == short.tokens


def test_chain_flag_takes_the_chain_path_whatever_top_k(monkeypatch):
    seen = []
    real = draft._draft_chain
    monkeypatch.setattr(draft, "_draft_chain", lambda *a: seen.append(1) or real(*a))
    cfg = FoveaConfig().replace(tree=dict(depth=3, top_k=4, total_tokens=3, chain=True, stop_below=0.0))
    d = tiny_drafter()
    state = draft.extend(d, None, torch.randint(0, 50, (7,)), torch.randn(7, 32))
    tree = draft.draft_tree(d, state, 3, None, cfg, trace=False)
    assert seen == [1] and tree.parents == [-1, 0, 1, 2]

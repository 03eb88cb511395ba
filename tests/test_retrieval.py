"""Cumulative-mass K, retrieval modes and the gated correction."""
import pytest
import torch

from fovea.config import CorrectionConfig, DrafterConfig, RetrievalConfig
from fovea.drafter import Drafter
from fovea.memory import VisualMemory
from fovea.retrieval import Retriever, cumulative_mass_k


def k_of(p, n_valid, rho, k_min, k_max):
    return int(cumulative_mass_k(torch.tensor([p]), torch.tensor([n_valid]), rho, k_min, k_max)[0])


@pytest.mark.parametrize("p,n_valid,rho,k_min,k_max,expected", [
    ([0.5, 0.3, 0.1, 0.1], 4, 0.8, 1, 4, 2),     # 0.5 + 0.3 reaches rho exactly
    ([0.5, 0.3, 0.1, 0.1], 4, 0.81, 1, 4, 3),
    ([0.5, 0.3, 0.1, 0.1], 4, 0.8, 3, 4, 3),     # K_min clamp
    ([0.5, 0.3, 0.1, 0.1], 4, 0.95, 1, 2, 2),    # K_max clamp
    ([0.9, 0.05, 0.05, 0.0], 4, 0.5, 1, 4, 1),
    ([0.6, 0.4, 0.0, 0.0], 2, 0.99, 3, 4, 2),    # only 2 valid keys: K_min cannot exceed |V|
    ([0.7, 0.3, 0.0, 0.0], 2, 1.0, 1, 4, 2),     # rho = 1 stops at the last valid key
])
def test_cumulative_mass_k_hand_computed(p, n_valid, rho, k_min, k_max, expected):
    assert k_of(p, n_valid, rho, k_min, k_max) == expected


def make_memory(n=10, d=16, invalid=(7, 8, 9)):
    g = torch.Generator().manual_seed(0)
    valid = torch.ones(n, dtype=torch.bool)
    valid[list(invalid)] = False
    return VisualMemory(keys=torch.randn(n, 8, generator=g), values=torch.randn(n, d, generator=g), valid=valid)


@pytest.mark.parametrize("mode", ["cumulative", "fixed", "dense", "random", "static", "query_agnostic", "state_only"])
def test_retrieval_modes_select_only_valid_entries_with_normalised_weights(mode):
    torch.manual_seed(0)
    r = Retriever(16, 8, max_depth=4)
    torch.nn.init.normal_(r.agnostic_query)
    mem = make_memory()
    cfg = RetrievalConfig(mode=mode, rho=0.8, k_min=2, k_max=5, fixed_k=4)
    got = r(torch.randn(3, 16), torch.tensor([0, 1, 2]), mem, cfg)
    for row in range(3):
        k = int(got.k[row])
        idx = got.indices[row, :k]
        assert (idx >= 0).all() and mem.valid[idx].all()
        assert torch.isclose(got.weights[row, :k].sum(), torch.tensor(1.0))
        assert (got.weights[row, k:] == 0).all()
        expected_k = {"dense": 7, "fixed": 4, "random": 4, "static": 4}.get(mode)
        assert k == expected_k if expected_k else 2 <= k <= 5
        readout = (got.weights[row, :k, None] * mem.values[idx]).sum(0)
        assert torch.allclose(got.readout[row], readout, atol=1e-6)


def test_static_mode_uses_the_same_entries_for_every_state():
    r = Retriever(16, 8, max_depth=4)
    got = r(torch.randn(4, 16), torch.tensor([0, 1, 0, 1]), make_memory(), RetrievalConfig(mode="static"))
    assert all(torch.equal(got.indices[0], got.indices[i]) for i in range(4))


def test_depth_embedding_changes_the_query_only_when_used():
    r = Retriever(16, 8, max_depth=4)
    torch.nn.init.normal_(r.depth_embedding.weight)
    h, mem = torch.randn(1, 16).expand(2, -1), make_memory()
    full = r.scores(h, torch.tensor([0, 1]), mem, "cumulative")
    state_only = r.scores(h, torch.tensor([0, 1]), mem, "state_only")
    assert not torch.allclose(full[0], full[1])
    assert torch.equal(state_only[0], state_only[1])


def tiny_drafter():
    torch.manual_seed(0)
    cfg = DrafterConfig(hidden_size=32, num_heads=4, num_kv_heads=2, intermediate_size=64, vocab_size=50,
                        memory_dim=24)
    d = Drafter(cfg, CorrectionConfig(hidden=32)).eval()
    d.embed_weight, d.lm_head_weight = torch.randn(50, 32), torch.randn(50, 32)
    for p in d.corrector.f.parameters():
        torch.nn.init.normal_(p)               # make the correction non-trivial
    return d


def test_gate_zero_gives_exactly_the_uncorrected_logits():
    d = tiny_drafter()
    mem = d.encode_memory(torch.randn(6, 24))
    h, depth = torch.randn(3, 32), torch.tensor([0, 0, 1])
    off = CorrectionConfig(enabled=False)
    plain, got, _ = d.head(h, depth, mem, off, RetrievalConfig())
    assert got is None
    on, _, _ = d.head(h, depth, mem, CorrectionConfig(), RetrievalConfig())
    assert not torch.allclose(on, plain)       # the correction does change logits when open...
    torch.nn.init.constant_(d.corrector.g[2].bias, -1e4)   # ...and sigmoid(-1e4) == 0 exactly
    shut, _, gate = d.head(h, depth, mem, CorrectionConfig(), RetrievalConfig())
    assert (gate == 0).all()
    assert torch.equal(shut, plain)


def test_correction_only_at_depth_up_to_the_limit():
    d = tiny_drafter()
    mem = d.encode_memory(torch.randn(6, 24))
    h = torch.randn(3, 32)
    on, got, gate = d.head(h, torch.tensor([0, 1, 2]), mem, CorrectionConfig(max_depth=1), RetrievalConfig())
    plain, _, _ = d.head(h, torch.tensor([0, 1, 2]), mem, CorrectionConfig(enabled=False), RetrievalConfig())
    assert got.k.shape[0] == 2 and gate.shape[0] == 2
    assert torch.equal(on[2], plain[2]) and not torch.allclose(on[0], plain[0])


def test_head_with_state_returns_the_corrected_lm_head_input():
    d = tiny_drafter()
    mem = d.encode_memory(torch.randn(6, 24))
    h = torch.randn(3, 32)
    logits, got, gate, pre = d.head_with_state(h, torch.tensor([0, 1, 2]), mem, CorrectionConfig(max_depth=1),
                                               RetrievalConfig())
    corrected, _ = d.corrector(h[:2], got.readout, True)
    assert torch.allclose(pre[:2], corrected) and torch.equal(pre[2], h[2])
    assert torch.allclose(logits, d.logits(pre))


def test_propagate_feeds_children_the_corrected_state(monkeypatch):
    import fovea.draft as draft

    d = tiny_drafter()
    with torch.inference_mode():
        mem = d.encode_memory(torch.randn(6, 24))
    state = draft.extend(d, None, torch.randint(0, 50, (5,)), torch.randn(5, 32))
    seen = {}
    real = draft._expand

    def spy(drafter, state, tok, anc, expanded, feats, level, clock):
        seen.setdefault(level, feats.clone())
        return real(drafter, state, tok, anc, expanded, feats, level, clock)

    monkeypatch.setattr(draft, "_expand", spy)
    from fovea.config import FoveaConfig

    cfg = FoveaConfig().replace(tree=dict(depth=3, top_k=2, total_tokens=6))
    draft.draft_tree(d, state, 1, mem, cfg, trace=False)
    plain = seen.pop(1)
    draft.draft_tree(d, state, 1, mem, cfg.replace(correction=dict(propagate=True)), trace=False)
    with torch.inference_mode():
        root_pre = d.head_with_state(state.root_h[None], 0, mem, cfg.correction, cfg.retrieval)[3]
    assert torch.allclose(seen[1], root_pre.expand_as(seen[1]))
    assert torch.allclose(plain, state.root_h[None].expand_as(plain))


@pytest.mark.parametrize("mode", ["cumulative", "fixed", "state_only"])
@pytest.mark.parametrize("depth", [0, 1, 5, "rows"])
def test_the_decode_path_selects_and_reads_out_what_the_general_path_does(mode, depth):
    d = tiny_drafter()
    torch.nn.init.normal_(d.retriever.depth_embedding.weight)
    valid = torch.ones(40, dtype=torch.bool)
    valid[-3:] = False
    cfg = RetrievalConfig(mode=mode, rho=0.6, k_min=2, k_max=12, fixed_k=5)
    h = torch.randn(4, 32)
    dep = torch.tensor([0, 1, 2, 9]) if depth == "rows" else depth
    with torch.no_grad():
        mem = d.memory_encoder(torch.randn(40, 24) * 3, valid)
        fast = d.retriever(h, dep, mem, cfg)
        assert mem.cache                                            # the folded tables were built and kept
        again = d.retriever(h, dep, mem, cfg)
    with torch.enable_grad():                                           # the general (training) path
        slow = d.retriever(h, dep, mem, cfg)
    assert torch.equal(fast.k, slow.k) and torch.equal(fast.indices, slow.indices)
    assert torch.allclose(fast.weights, slow.weights, atol=1e-5)
    assert torch.allclose(fast.readout, slow.readout.detach(), atol=1e-4)
    assert torch.equal(again.readout, fast.readout)
    assert (fast.indices[fast.indices >= 0] < 37).all()              # never an invalid entry



@pytest.mark.parametrize("mode,rho,n_valid", [("cumulative", 0.6, 37), ("cumulative", 1.0, 37),
                                              ("cumulative", 0.8, 7), ("fixed", 0.8, 37), ("state_only", 0.5, 37)])
@pytest.mark.parametrize("depth", [0, 1, 5])
@pytest.mark.parametrize("width", [32, 16])
def test_fused_decode_correction_matches_retrieval_then_correction(mode, rho, n_valid, depth, width):
    """fovea.fused (the decode loop's path) against Retriever + GatedCorrection run separately."""
    from fovea import fused

    d = Drafter(DrafterConfig(hidden_size=32, num_heads=4, num_kv_heads=2, intermediate_size=64, vocab_size=50,
                              memory_dim=24), CorrectionConfig(hidden=width), key_dim=16)
    torch.nn.init.normal_(d.retriever.depth_embedding.weight)
    for p in d.corrector.parameters():                                   # a trained-looking corrector
        torch.nn.init.normal_(p, std=0.2)
    valid = torch.zeros(40, dtype=torch.bool)
    valid[:n_valid] = True
    cfg = RetrievalConfig(mode=mode, rho=rho, k_min=2, k_max=12, fixed_k=5)
    h = torch.randn(3, 32)
    with torch.no_grad():
        mem = d.memory_encoder(torch.randn(40, 24) * 3, valid)
        assert fused.usable(d.retriever, d.corrector, mem, cfg, use_gate=True)
        pre, got, gate = fused.fused_correct(d.retriever, d.corrector, h, depth, mem, cfg)
        via_drafter = d.correct(h, depth, mem, CorrectionConfig(max_depth=8, hidden=width), cfg)[0]
    with torch.enable_grad():                                            # the general (training) path
        ref = d.retriever(h, depth, mem, cfg)
        ref_pre, ref_gate = d.corrector(h, ref.readout, True)
    width_k = got.indices.shape[1]                  # min(K_max, |V|): the general path pads to K_max
    assert torch.equal(got.k, ref.k) and torch.equal(got.indices, ref.indices[:, :width_k])
    assert (ref.indices[:, width_k:] == -1).all() and (got.k <= n_valid).all() and (got.indices < n_valid).all()
    assert torch.allclose(got.weights, ref.weights[:, :width_k], atol=1e-6)
    assert torch.allclose(got.readout, ref.readout.detach(), atol=1e-5)
    assert torch.allclose(gate, ref_gate.detach(), atol=1e-5)
    assert torch.allclose(pre, ref_pre.detach(), atol=1e-5)
    assert torch.equal(via_drafter, pre)                                 # Drafter.correct takes the fused path
    assert not fused.usable(d.retriever, d.corrector, mem, RetrievalConfig(mode="dense"), use_gate=True)
    assert not fused.usable(d.retriever, d.corrector, mem, cfg, use_gate=False)
    wide = Drafter(d.cfg, CorrectionConfig(hidden=64), key_dim=16).eval()     # wider than the 32-wide drafter
    assert not fused.usable(wide.retriever, wide.corrector, mem, cfg, use_gate=True)

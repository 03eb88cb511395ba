"""PRR focus locality: the log-sum-exp merge / repair reproduces the direct readout exactly, and
the predictor and its overlap / hit-rate statistics match hand-made cases."""
import itertools

import pytest
import torch

from fovea.config import LocalityConfig, RetrievalConfig
from fovea.locality import (Partial, direct_readout, drop, finish, focus_locality, holt_update, merge,
                            overlap_and_hit_rate, partial_readout, predict_selection, repair, summarize_locality,
                            trace_links)
from fovea.memory import VisualMemory
from fovea.retrieval import Retriever
from fovea.trace import NodeRetrieval

TOL = dict(rtol=1e-12, atol=1e-12)


def problem(seed=0, s=3, n=64, d=16, scale=3.0):
    g = torch.Generator().manual_seed(seed)
    logits = scale * torch.randn(s, n, generator=g, dtype=torch.float64)
    values = torch.randn(n, d, generator=g, dtype=torch.float64)
    return logits, values, g


def padded(rows: list[list[int]]) -> torch.Tensor:
    width = max((len(r) for r in rows), default=0)
    return torch.tensor([r + [-1] * (width - len(r)) for r in rows], dtype=torch.long).reshape(len(rows), width)


def reference(logits, values, rows):
    """softmax over each row's set, times its values: the readout written out, no partials."""
    return torch.stack([torch.softmax(logits[i, r], -1) @ values[r] if r else torch.zeros(values.shape[1],
                        dtype=values.dtype) for i, r in enumerate(rows)])


def random_parts(g, n, n_parts, rows):
    """Each row's selected set (random size) split into n_parts disjoint parts (some empty)."""
    parts = [[] for _ in range(n_parts)]
    sets = []
    for _ in range(rows):
        chosen = torch.randperm(n, generator=g)[: int(torch.randint(1, n, (1,), generator=g))].tolist()
        sets.append(chosen)
        owner = torch.randint(0, n_parts, (len(chosen),), generator=g).tolist()
        for p in range(n_parts):
            parts[p].append([i for i, o in zip(chosen, owner) if o == p])
    return sets, [padded(p) for p in parts]


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("n_parts", [2, 3, 5])
def test_merged_partials_equal_the_direct_readout_for_random_splits(seed, n_parts):
    logits, values, g = problem(seed)
    sets, parts = random_parts(g, logits.shape[1], n_parts, logits.shape[0])
    merged = partial_readout(logits, parts[0], values)
    for part in parts[1:]:
        merged = merge(merged, partial_readout(logits, part, values))
    direct = direct_readout(logits, padded(sets), values)
    assert torch.allclose(finish(merged), direct, **TOL)
    assert torch.allclose(direct, reference(logits, values, sets), **TOL)


def test_merge_gives_the_same_readout_in_any_order_and_grouping():
    logits, values, g = problem(1)
    sets, parts = random_parts(g, logits.shape[1], 4, logits.shape[0])
    partials = [partial_readout(logits, p, values) for p in parts]
    want = reference(logits, values, sets)
    for order in itertools.permutations(range(4)):
        left = partials[order[0]]
        for i in order[1:]:
            left = merge(left, partials[i])
        assert torch.allclose(finish(left), want, **TOL)
        paired = merge(merge(partials[order[0]], partials[order[1]]), merge(partials[order[2]], partials[order[3]]))
        assert torch.allclose(finish(paired), want, **TOL)


def test_empty_partials_are_the_identity_of_merge_and_read_out_as_zero():
    logits, values, _ = problem(2)
    rows = [[3, 5, 7], [0], [10, 11]]
    full = partial_readout(logits, padded(rows), values)
    no_columns = partial_readout(logits, torch.empty(3, 0, dtype=torch.long), values)
    all_pads = partial_readout(logits, torch.full((3, 4), -1), values)
    for empty in (no_columns, all_pads):
        assert torch.isinf(empty.m).all() and (empty.l == 0).all() and (empty.acc == 0).all()
        assert torch.allclose(finish(merge(empty, full)), finish(full), **TOL)
        assert torch.allclose(finish(merge(full, empty)), finish(full), **TOL)
        assert torch.allclose(finish(drop(full, empty)), finish(full), **TOL)
        assert (finish(merge(empty, empty)) == 0).all() and not finish(empty).isnan().any()
    some_empty = padded([[3, 5], [], [11]])            # a row with nothing in this part
    got = merge(partial_readout(logits, some_empty, values), partial_readout(logits, padded([[7], [0], [10]]), values))
    assert torch.allclose(finish(got), finish(full), **TOL)


def top_sets(logits, ks):
    return [logits[i].argsort(descending=True)[:k].tolist() for i, k in enumerate(ks)]


@pytest.mark.parametrize("seed", range(6))
def test_repair_reproduces_the_direct_readout_over_the_true_set(seed):
    logits, values, g = problem(seed, s=4, scale=4.0)
    n = logits.shape[1]
    true = top_sets(logits, torch.randint(1, 33, (4,), generator=g).tolist())
    pred = [list(set(t[: len(t) // 2]) | set(torch.randperm(n, generator=g)[:20].tolist())) for t in true]
    pred[0] = []                                           # nothing predicted: all missed
    pred[1] = list(true[1])                                # perfect prediction
    pred[2] = [i for i in range(n) if i not in true[2]][:25]   # disjoint: all wrong, all missed
    spec = partial_readout(logits, padded(pred), values)
    got = finish(repair(spec, logits, values, padded(pred), padded(true)))
    assert torch.allclose(got, reference(logits, values, true), **TOL)


def test_repair_is_exact_for_arbitrary_sets_and_recomputes_when_nearly_all_mass_is_dropped():
    logits, values, g = problem(7, s=3, scale=1.0)
    true = [[1, 2, 3], [40, 41], [5]]
    pred = [[1, 2, 9, 10], [0, 1, 2, 3], [5, 6]]
    logits[1, [0, 1, 2, 3]] = 60.0                         # the dropped part holds ~all the mass
    spec = partial_readout(logits, padded(pred), values)
    got = finish(repair(spec, logits, values, padded(pred), padded(true)))
    assert torch.allclose(got, reference(logits, values, true), **TOL)


def test_repair_matches_the_retriever_readout():
    torch.manual_seed(0)
    retriever = Retriever(32, 16, max_depth=4)
    mem = VisualMemory(keys=torch.randn(64, 16), values=torch.randn(64, 32), valid=torch.ones(64, dtype=torch.bool))
    h, depth = torch.randn(5, 32), torch.zeros(5, dtype=torch.long)
    got = retriever(h, depth, mem, RetrievalConfig())
    logits = retriever.scores(h, depth, mem, "cumulative")
    pred = padded([list(range(10)), list(range(20, 50)), [], list(range(64)), [1, 2]])
    spec = partial_readout(logits, pred, mem.values)
    readout = finish(repair(spec, logits, mem.values, pred, got.indices))
    assert torch.allclose(readout, got.readout, rtol=1e-5, atol=1e-6)


def test_overlap_and_hit_rate_on_hand_made_cases():
    assert overlap_and_hit_rate({1, 2, 3}, [2, 3, 4, 5], [0.4, 0.3, 0.2, 0.1]) == pytest.approx((0.5, 0.7))
    assert overlap_and_hit_rate({4, 5}, [2, 3, 4, 5], [0.4, 0.3, 0.2, 0.1]) == pytest.approx((0.5, 0.3))
    assert overlap_and_hit_rate(set(), [7], [1.0]) == (0.0, 0.0)
    assert overlap_and_hit_rate({1, 2, 3, 7}, [7], [1.0]) == (1.0, 1.0)   # wrong extras cost repair, not overlap
    assert overlap_and_hit_rate({1}, [], []) == (1.0, 1.0)


def test_holt_state_follows_the_documented_formulas():
    cfg = LocalityConfig(alpha=0.5, beta=0.25)
    s0 = holt_update(None, torch.tensor([1.0, 0.0]), cfg)
    assert s0.level.tolist() == [1.0, 0.0] and s0.trend.tolist() == [0.0, 0.0]
    s1 = holt_update(s0, torch.tensor([0.0, 1.0]), cfg)
    assert s1.level.tolist() == [0.5, 0.5]                  # 0.5 * x + 0.5 * (L + B)
    assert s1.trend.tolist() == [-0.125, 0.125]             # 0.25 * (L1 - L0) + 0.75 * B0
    s2 = holt_update(s1, torch.tensor([0.0, 1.0]), cfg)
    assert s2.level.tolist() == pytest.approx([0.1875, 0.8125])   # 0.5 * (0.5 - 0.125), 0.5 + 0.5 * 0.625
    assert s2.trend.tolist() == pytest.approx([-0.171875, 0.171875])


def test_predictor_mixes_the_parent_selection_and_the_forecast():
    mass = torch.tensor([0.0, 0.6, 0.4, 0.0, 0.0])
    state = holt_update(None, torch.tensor([0.0, 0.0, 0.3, 0.5, 0.2]), LocalityConfig())   # forecast = level
    assert predict_selection(mass, state, 2, LocalityConfig(gamma=1.0)).tolist() == [1, 2]
    assert predict_selection(mass, state, 2, LocalityConfig(gamma=0.0)).tolist() == [3, 2]
    assert predict_selection(mass, state, 2, LocalityConfig(gamma=0.5)).tolist() == [2, 1]   # z = 0, .3, .35, .25, .1
    assert predict_selection(mass, state, 2, LocalityConfig(gamma=0.5, budget=2.0)).tolist() == [2, 1, 3, 4]
    # entries with no evidence (z = 0) are never predicted, whatever the budget
    assert predict_selection(mass, state, 2, LocalityConfig(gamma=1.0, budget=3.0)).tolist() == [1, 2]


def test_focus_locality_per_step_on_a_hand_made_chain_and_tree():
    steps = [([0, 1], [0.7, 0.3]), ([1, 2], [0.5, 0.5]), NodeRetrieval([2, 3, 4], [0.5, 0.3, 0.2], k=3, gate=1.0)]
    chain = focus_locality(steps, cfg=LocalityConfig(gamma=1.0))
    assert chain[0].overlap is None and chain[0].predicted == () and chain[0].parent == -1
    assert chain[1].predicted == (0, 1) and chain[1].overlap == 0.5 and chain[1].hit_rate == 0.5
    assert (chain[1].missed, chain[1].wrong) == (1, 1)
    assert chain[2].predicted == (1, 2) and chain[2].overlap == pytest.approx(1 / 3) and chain[2].hit_rate == 0.5
    tree = focus_locality(steps, parents=[-1, 0, 0], cfg=LocalityConfig(gamma=1.0))
    assert tree[2].predicted == (0, 1) and tree[2].overlap == 0.0 and tree[2].missed == 3
    summary = summarize_locality(chain)
    assert summary["n_predicted"] == 2 and summary["overlap"] == pytest.approx((0.5 + 1 / 3) / 2)
    assert summary["hit_rate"] == pytest.approx(0.5) and summary["missed"] == 1.5
    with pytest.raises(ValueError, match="parents"):
        focus_locality(steps, parents=[-1, 2, 0])


@pytest.mark.parametrize("bad", [dict(alpha=0.0), dict(beta=1.5), dict(gamma=-0.1), dict(budget=0.0)])
def test_locality_config_rejects_out_of_range_values(bad):
    with pytest.raises(ValueError):
        LocalityConfig(**bad)


def test_partial_is_float64_clean_for_large_logits():
    logits, values, _ = problem(3, scale=300.0)            # exp would overflow without the max shift
    rows = [list(range(0, 64, 3)), list(range(5)), [63]]
    got = direct_readout(logits, padded(rows), values)
    assert torch.isfinite(got).all() and torch.allclose(got, reference(logits, values, rows), **TOL)
    assert isinstance(partial_readout(logits, padded(rows), values), Partial)


def test_trace_links_builds_the_committed_chain_and_the_tree_links_of_rounds():
    from types import SimpleNamespace

    def retrieved(nodes):           # node -> a one-entry record reading entry `node`
        return {n: NodeRetrieval([n], [1.0], k=1, gate=1.0) for n in nodes}

    rounds = [SimpleNamespace(parents=[-1, 0, 0, 1], accepted=[1, 3], retrieval=retrieved([0, 1, 2])),
              SimpleNamespace(parents=[-1, 0, 1], accepted=[1], retrieval=retrieved([0, 1])),
              SimpleNamespace(parents=[-1, 0], accepted=[], retrieval={})]       # e.g. correction off
    steps, parents = trace_links(rounds)
    assert parents == [-1, 0, 1, 2] and [s.indices for s in steps] == [[0], [1], [0], [1]]
    steps, parents = trace_links(rounds, tree=True)
    assert parents == [-1, 0, 0, 1, 3] and len(steps) == 5
    assert len(focus_locality(steps, parents)) == 5


def test_locality_measurement_runs_small_and_its_repair_is_exact():
    from types import SimpleNamespace

    from fovea.analysis.locality import readout_timing, render_markdown, trace_locality

    row = readout_timing(32, hidden=8, key_dim=8, steps=6, repeats=2)
    assert set(row["us"]) == {"select", "dense", "direct", "predict", "speculate", "repair"}
    assert row["max_abs_diff_repair_vs_dense"] < 1e-5 and row["locality"]["n_predicted"] == 5
    rounds = [SimpleNamespace(parents=[-1, 0], accepted=[1],
                              retrieval={0: NodeRetrieval([0, 1], [0.5, 0.5], 2, 1.0),
                                         1: NodeRetrieval([1, 2], [0.5, 0.5], 2, 1.0)})]
    traces = trace_locality([SimpleNamespace(rounds=rounds)], LocalityConfig(gamma=1.0))
    assert traces["path"]["overlap"] == 0.5 and traces["tree"]["n_predicted"] == 1
    meta = dict(machine="cpu", torch="x", threads=1, hidden=8, key_dim=8, repeats=2, steps=6, corr=0.9, scale=2.0)
    assert "| 32 |" in render_markdown({"meta": meta, "timing": [row]})

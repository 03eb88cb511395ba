"""Tree buffers and acceptance rules against hand-written cases."""
import pytest
import torch

from fovea.tree import (add_nodes, ancestors_of, build_tree_buffers, depths_of, leaf_paths, new_ancestors, path_to,
                        prune, renumber)
from fovea.verify import accept_greedy, accept_sampling, process_logits

T, F = True, False


def test_tree_buffers_match_hand_written_six_node_tree():
    #        0
    #      1   2
    #     3 4   5
    b = build_tree_buffers([-1, 0, 0, 1, 1, 2])
    expected = torch.tensor([
        [T, F, F, F, F, F],
        [T, T, F, F, F, F],
        [T, F, T, F, F, F],
        [T, T, F, T, F, F],
        [T, T, F, F, T, F],
        [T, F, T, F, F, T]])
    assert torch.equal(b.mask, expected)
    assert b.depths.tolist() == [0, 1, 1, 2, 2, 2]
    assert b.retrieve_indices.tolist() == [[0, 1, 3], [0, 1, 4], [0, 2, 5]]


def test_tree_buffers_chain_is_causal():
    b = build_tree_buffers([-1, 0, 1, 2])
    assert torch.equal(b.mask, torch.tril(torch.ones(4, 4, dtype=torch.bool)))
    assert b.depths.tolist() == [0, 1, 2, 3]
    assert b.retrieve_indices.tolist() == [[0, 1, 2, 3]]


def test_tree_buffers_unbalanced_five_nodes_pads_short_paths():
    #    0
    #  1   3
    #  2
    #  4 (child of 2)
    b = build_tree_buffers([-1, 0, 1, 0, 2])
    expected = torch.tensor([
        [T, F, F, F, F],
        [T, T, F, F, F],
        [T, T, T, F, F],
        [T, F, F, T, F],
        [T, T, T, F, T]])
    assert torch.equal(b.mask, expected)
    assert b.depths.tolist() == [0, 1, 2, 1, 3]
    assert b.retrieve_indices.tolist() == [[0, 3, -1, -1], [0, 1, 2, 4]]


@pytest.mark.parametrize("parents", [[0, 0], [-1, 2, 0], [-1, 0, 5]])
def test_tree_buffers_reject_malformed_parent_lists(parents):
    with pytest.raises(ValueError):
        build_tree_buffers(parents)


def test_accept_greedy_follows_matching_children_and_returns_bonus():
    tokens = [100, 5, 6, 7, 8, 9]
    parents = [-1, 0, 0, 1, 1, 2]
    argmax = [6, 0, 9, 0, 0, 42]             # root -> 6 (node 2), node 2 -> 9 (node 5), node 5 -> 42
    assert accept_greedy(tokens, parents, argmax) == ([2, 5], 42)
    assert accept_greedy(tokens, parents, [1, 0, 0, 0, 0, 0]) == ([], 1)


def test_process_logits_top_p_keeps_smallest_nucleus():
    logits = torch.log(torch.tensor([0.5, 0.3, 0.15, 0.05]))
    p = process_logits(logits, 1.0, 0.7)
    assert torch.allclose(p, torch.tensor([0.5 / 0.8, 0.3 / 0.8, 0.0, 0.0]))


def test_speculative_sampling_preserves_target_distribution():
    """Emitted (t1, t2) must follow p0(t1) p_node(t2 | t1) exactly; total variation < 0.02."""
    g = torch.Generator().manual_seed(0)
    v = 6
    p0 = torch.tensor([0.05, 0.35, 0.2, 0.1, 0.25, 0.05])
    p1 = torch.tensor([0.1, 0.1, 0.1, 0.4, 0.2, 0.1])   # at node 1 (token 1)
    p2 = torch.tensor([0.3, 0.0, 0.3, 0.1, 0.2, 0.1])   # at node 2 (token 2), a leaf
    tokens, parents = [9, 1, 2, 3, 4], [-1, 0, 0, 1, 1]
    probs = torch.stack([p0, p1, p2, torch.full((v,), 1 / v), torch.full((v,), 1 / v)])
    n = 30000
    first = torch.zeros(v)
    second = {1: torch.zeros(v), 2: torch.zeros(v)}
    for _ in range(n):
        path, bonus = accept_sampling(tokens, parents, probs, g)
        emitted = [tokens[i] for i in path] + [bonus]
        first[emitted[0]] += 1
        if len(emitted) > 1 and emitted[0] in second:
            second[emitted[0]][emitted[1]] += 1
    assert 0.5 * (first / n - p0).abs().sum() < 0.02
    assert 0.5 * (second[1] / second[1].sum() - p1).abs().sum() < 0.03
    assert 0.5 * (second[2] / second[2].sum() - p2).abs().sum() < 0.03


# ---- the tensor buffers the draft loop uses (one ancestry implementation) ----------------------
def test_add_nodes_builds_the_ancestor_matrix_level_by_level():
    #        0
    #      1   2          level 1: parents [0, 0]
    #     3 4   5         level 2: parents [1, 1, 2]
    anc = new_ancestors(6)
    add_nodes(anc, 1, torch.tensor([0, 0]))
    add_nodes(anc, 3, torch.tensor([1, 1, 2]))
    assert torch.equal(anc, build_tree_buffers([-1, 0, 0, 1, 1, 2]).mask)
    assert depths_of(anc).tolist() == [0, 1, 1, 2, 2, 2]
    assert path_to(anc, 4) == [0, 1, 4] and path_to(anc, 0) == [0]


def test_ancestors_of_matches_a_hand_matrix_and_leaf_paths():
    anc = ancestors_of([-1, 0, 1, 0, 2])
    assert torch.equal(anc, torch.tensor([
        [T, F, F, F, F],
        [T, T, F, F, F],
        [T, T, T, F, F],
        [T, F, F, T, F],
        [T, T, T, F, T]]))
    assert leaf_paths(anc).tolist() == [[0, 3, -1, -1], [0, 1, 2, 4]]


def test_prune_keeps_the_best_nodes_closed_under_ancestors_ordered_by_depth_then_score():
    #        0
    #      1   2           scores: 1:-1.0  2:-0.2  3:-0.1 (under 1)  4:-3.0 (under 2)
    #     3     4
    anc = ancestors_of([-1, 0, 0, 1, 2])
    scores = torch.tensor([0.0, -1.0, -0.2, -0.1, -3.0])
    depths = depths_of(anc)
    # budget 2: the best are 3 and 2; 3 drags in its parent 1 -> {0, 1, 2, 3}; depth 1 ordered 2 then 1
    order = prune(anc, scores, depths, 2)
    assert order.tolist() == [0, 2, 1, 3]
    mask, parents = renumber(anc, torch.tensor([-1, 0, 0, 1, 2]), order)
    assert parents.tolist() == [-1, 0, 0, 2]             # old node 3 (now 3) hangs under old 1 (now 2)
    assert torch.equal(mask, torch.tensor([
        [T, F, F, F],
        [T, T, F, F],
        [T, F, T, F],
        [T, F, T, T]]))
    assert torch.equal(mask, build_tree_buffers(parents.tolist()).mask)
    assert prune(anc, scores, depths, 10).tolist() == [0, 2, 1, 3, 4]   # budget above the tree: all kept

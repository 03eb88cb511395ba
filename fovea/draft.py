"""Dynamic draft-tree construction (EAGLE-2 style) with the FOVEA drafter.

Level by level: the `top_k` best frontier nodes (by cumulative draft log-prob) are run through
the drafter in one batched step, each proposes its `top_k` best children; after `depth` levels
all proposed nodes are globally reranked and the best `total_tokens` (closed under ancestors)
form the tree the target verifies. Tree entries of the drafter's KV cache are discarded after
the round. Knows nothing about acceptance.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from fovea.config import FoveaConfig
from fovea.drafter import Drafter
from fovea.memory import VisualMemory
from fovea.trace import NodeRetrieval


@dataclass
class DraftState:
    """The drafter's committed KV cache: one entry per (feature, next token) pair, `length` long."""
    past: list                      # per layer (keys, values) [1, H_kv, length, Dh]
    length: int                     # cached pairs
    root_h: torch.Tensor            # [D] draft state of the current root (predicts depth-1 tokens)
    next_pos: int = -1              # position of the next pair; == length unless pairs were skipped

    def __post_init__(self) -> None:
        if self.next_pos < 0:
            self.next_pos = self.length


@dataclass
class DraftTree:
    tokens: list[int]               # [N+1], node 0 = root
    parents: list[int]
    depths: list[int]
    scores: list[float]
    retrieval: dict[int, NodeRetrieval] = field(default_factory=dict)


def context_pairs(input_ids: torch.Tensor, image_token_id: int | None) -> torch.Tensor:
    """input_ids [..., T+1] (prompt + first answer token, or training rows) -> bool [..., T]: the
    (feature i, token i+1) pairs a text-context drafter caches, i.e. those with neither side an
    image placeholder. Decoding's prefill and the training mask both use it."""
    if image_token_id is None:
        return torch.ones_like(input_ids[..., 1:], dtype=torch.bool)
    text = input_ids != image_token_id
    return text[..., :-1] & text[..., 1:]


def extend(drafter: Drafter, state: DraftState | None, tokens: torch.Tensor, features: torch.Tensor,
           keep: torch.Tensor | None = None) -> DraftState:
    """Append committed pairs: features [T, D] of target positions p..p+T-1 with the tokens [T] that
    follow them. The last output is the new root's draft state. keep [T] bool (prefill of a
    text-context drafter): cache only those pairs, at their original positions; the last pair
    must be kept (it yields the root state)."""
    start = 0 if state is None else state.length
    first_pos = 0 if state is None else state.next_pos
    t = tokens.shape[0]
    positions = torch.arange(first_pos, first_pos + t)
    if keep is not None:
        if not bool(keep[-1]):
            raise ValueError("the last committed pair must be kept: it gives the root's draft state")
        tokens, features, positions = tokens[keep], features[keep], positions[keep]
    n = tokens.shape[0]
    mask = torch.ones(n, start + n, dtype=torch.bool)
    mask[:, start:] = torch.tril(mask[:, start:])
    h, new_kv = drafter.step(tokens[None], features[None], positions[None], mask[None, None],
                             None if state is None else state.past)
    past = new_kv if state is None else [(torch.cat([pk, k], 2), torch.cat([pv, v], 2))
                                         for (pk, pv), (k, v) in zip(state.past, new_kv)]
    return DraftState(past=past, length=start + n, root_h=h[0, -1], next_pos=first_pos + t)


def _record(got, gate, rows: list[int], out: dict) -> None:
    if got is None:
        return
    for j, node in enumerate(rows):
        k = int(got.k[j])
        out[node] = NodeRetrieval(indices=got.indices[j, :k].tolist(), weights=got.weights[j, :k].tolist(),
                                  k=k, gate=float(gate[j]))


@torch.no_grad()
def draft_tree(drafter: Drafter, state: DraftState, root_token: int, memory: VisualMemory | None,
               cfg: FoveaConfig, trace: bool = True, generator: torch.Generator | None = None) -> DraftTree:
    k_top = 1 if cfg.tree.chain else cfg.tree.top_k
    # all proposed nodes: token, parent, depth, score (node 0 = root)
    tok, par, dep, sco = [root_token], [-1], [0], [0.0]
    retrieval: dict[int, NodeRetrieval] = {}
    hs = {0: state.root_h}          # draft state of every node run through the drafter
    tree_kv: list = []              # per layer (k, v): committed cache + expanded tree nodes
    kv_nodes: list[int] = []        # node index of each tree-KV slot, in order
    frontier = [0]
    for level in range(1, cfg.tree.depth + 1):
        h = torch.stack([hs[n] for n in frontier])                       # [F, D]
        depth = torch.tensor([dep[n] for n in frontier])
        logits, got, gate = drafter.head(h, depth, memory, cfg.correction, cfg.retrieval, generator)
        if trace:
            _record(got, gate, frontier, retrieval)
        logp = torch.log_softmax(logits, -1)
        top_lp, top_tok = logp.topk(k_top, dim=-1)                        # [F, k]
        cand = []
        for node, lps, toks in zip(frontier, top_lp.tolist(), top_tok.tolist()):
            for lp, t in zip(lps, toks):
                tok.append(t)
                par.append(node)
                dep.append(level)
                sco.append(sco[node] + lp)
                cand.append(len(tok) - 1)
        if level == cfg.tree.depth:
            break
        frontier = sorted(cand, key=lambda n: -sco[n])[:k_top]
        _expand(drafter, state, frontier, tok, par, dep, hs, tree_kv, kv_nodes)
    return _select(tok, par, dep, sco, retrieval, cfg.tree.total_tokens)


def _expand(drafter, state, frontier, tok, par, dep, hs, tree_kv, kv_nodes) -> None:
    """Run the frontier nodes (inputs: own token, parent's draft state) in one drafter step.
    tree_kv holds, per layer, the committed cache with every earlier tree level appended."""
    tokens = torch.tensor([tok[n] for n in frontier])[None]
    feats = torch.stack([hs[par[n]] for n in frontier])[None]
    positions = torch.tensor([state.next_pos - 1 + dep[n] for n in frontier])[None]
    # mask over [committed | earlier tree slots | these nodes]: ancestors and self only
    rows = []
    for i, n in enumerate(frontier):
        anc, a = set(), par[n]
        while a > 0:
            anc.add(a)
            a = par[a]
        rows.append([s in anc for s in kv_nodes] + [j == i for j in range(len(frontier))])
    mask = torch.cat([torch.ones(len(frontier), state.length, dtype=torch.bool), torch.tensor(rows)], 1)
    past = tree_kv if tree_kv else state.past
    h, new_kv = drafter.step(tokens, feats, positions, mask[None, None], past)
    tree_kv[:] = [(torch.cat([pk, k], 2), torch.cat([pv, v], 2)) for (pk, pv), (k, v) in zip(past, new_kv)]
    kv_nodes.extend(frontier)
    for i, n in enumerate(frontier):
        hs[n] = h[0, i]


def _select(tok, par, dep, sco, retrieval, budget: int) -> DraftTree:
    """Keep the `budget` best-scoring nodes plus their ancestors; renumber with parents first."""
    ranked = sorted(range(1, len(tok)), key=lambda n: (-sco[n], n))[:budget]
    keep = set(ranked)
    for n in ranked:
        a = par[n]
        while a > 0 and a not in keep:
            keep.add(a)
            a = par[a]
    order = [0] + sorted(keep, key=lambda n: (dep[n], -sco[n], n))
    new_id = {old: i for i, old in enumerate(order)}
    return DraftTree(tokens=[tok[n] for n in order], parents=[-1] + [new_id[par[n]] for n in order[1:]],
                     depths=[dep[n] for n in order], scores=[sco[n] for n in order],
                     retrieval={new_id[n]: r for n, r in retrieval.items() if n in new_id})

"""Dynamic draft-tree construction (EAGLE-2 style) with the FOVEA drafter, as tensor bookkeeping.

Level by level: the `top_k` best frontier nodes (by cumulative draft log-prob) are run through
the drafter in one batched step, each proposes its `top_k` best children; after `depth` levels
all proposed nodes are globally reranked and the best `total_tokens` (closed under ancestors)
form the tree the target verifies. Tokens, parents, depths, scores and ancestry live in
preallocated tensors (ancestry from `fovea.tree`, the one implementation); a level runs without
a host sync. The drafter's KV cache is a preallocated buffer (`fovea.layers.KVBuffer`): tree
levels are written after the committed pairs and simply overwritten by the next commit.
Knows nothing about acceptance.
"""
from __future__ import annotations

import math

from dataclasses import dataclass, field
from functools import cached_property

import torch

from fovea.config import FoveaConfig
from fovea.drafter import Drafter
from fovea.memory import VisualMemory
from fovea.profile import NO_CLOCK, Clock
from fovea.trace import RetrievalLog
from fovea.tree import add_nodes, new_ancestors, prune, renumber


@dataclass
class DraftState:
    """The drafter's committed KV cache: `length` cached (feature, next token) pairs in `buffers`."""
    buffers: list                   # per layer KVBuffer [1, H_kv, capacity, Dh]
    length: int                     # cached pairs (slots 0..length-1)
    root_h: torch.Tensor            # [D] draft state of the current root (predicts depth-1 tokens)
    next_pos: int = -1              # position of the next pair; == length unless pairs were skipped

    def __post_init__(self) -> None:
        if self.next_pos < 0:
            self.next_pos = self.length


@dataclass
class DraftTree:
    """A pruned draft tree as tensors (node 0 = root, parents before children, siblings by score);
    the list views are converted on first read."""
    token_ids: torch.Tensor         # [N+1] long
    parent_ids: torch.Tensor        # [N+1] long, -1 for the root
    depth_ids: torch.Tensor         # [N+1] long, root 0
    score_values: torch.Tensor      # [N+1] float, cumulative draft log-prob (root 0)
    mask: torch.Tensor              # [N+1, N+1] bool ancestor-or-self: the verification mask
    retrieval: RetrievalLog | dict = field(default_factory=dict)

    @cached_property
    def tokens(self) -> list[int]:
        return self.token_ids.tolist()

    @cached_property
    def parents(self) -> list[int]:
        return self.parent_ids.tolist()

    @cached_property
    def depths(self) -> list[int]:
        return self.depth_ids.tolist()

    @cached_property
    def scores(self) -> list[float]:
        return self.score_values.tolist()


def context_pairs(input_ids: torch.Tensor, image_token_id: int | None) -> torch.Tensor:
    """input_ids [..., T+1] (prompt + first answer token, or training rows) -> bool [..., T]: the
    (feature i, token i+1) pairs a text-context drafter caches, i.e. those with neither side an
    image placeholder. Decoding's prefill and the training mask both use it."""
    if image_token_id is None:
        return torch.ones_like(input_ids[..., 1:], dtype=torch.bool)
    text = input_ids != image_token_id
    return text[..., :-1] & text[..., 1:]


def image_states(hidden: torch.Tensor, input_ids: torch.Tensor, image_token_id: int) -> torch.Tensor:
    """hidden [T, D] (the target's last-layer states of one sequence), input_ids [T] -> [N, D]: the
    states at the image placeholders, in image order: the memory of a drafter with
    memory_source="hidden". Decoding's prefill and training both use it."""
    return hidden[input_ids == image_token_id]


@torch.inference_mode()
def extend(drafter: Drafter, state: DraftState | None, tokens: torch.Tensor, features: torch.Tensor,
           keep: torch.Tensor | None = None, capacity: int = 0) -> DraftState:
    """Append committed pairs: features [T, D] of target positions p..p+T-1 with the tokens [T] that
    follow them, written into the buffers after the committed slots (over any tree slots). The
    last output is the new root's draft state. keep [T] bool (prefill of a text-context drafter):
    cache only those pairs, at their original positions; the last pair must be kept (it yields the
    root state). `capacity`: slots to preallocate on the first call (they grow if exceeded)."""
    start = 0 if state is None else state.length
    first_pos = 0 if state is None else state.next_pos
    t = tokens.shape[0]
    positions = torch.arange(first_pos, first_pos + t)
    if keep is not None:
        if not bool(keep[-1]):
            raise ValueError("the last committed pair must be kept: it gives the root's draft state")
        tokens, features, positions = tokens[keep], features[keep], positions[keep]
    n = tokens.shape[0]
    buffers = drafter.new_buffers(max(capacity, start + n)) if state is None else state.buffers
    mask = torch.ones(n, start + n, dtype=torch.bool).tril(start)   # all committed + causal among new
    h, _ = drafter.step(tokens[None], features[None], positions[None], mask[None, None],
                        buffers=buffers, at=start, max_pos=first_pos + t)
    return DraftState(buffers=buffers, length=start + n, root_h=h[0, -1], next_pos=first_pos + t)


@torch.inference_mode()
def draft_tree(drafter: Drafter, state: DraftState, root_token: int, memory: VisualMemory | None,
               cfg: FoveaConfig, trace: bool = True, generator: torch.Generator | None = None,
               clock: Clock = NO_CLOCK) -> DraftTree:
    """Grow `depth` levels from the root, then prune to `total_tokens` nodes. `clock` (profiling)
    gets a lap per stage and level; the default records nothing. One candidate a level (a chain)
    takes `_draft_chain`, the same tree without the per-level tree bookkeeping."""
    if cfg.tree.chain or cfg.tree.top_k == 1:
        return _draft_chain(drafter, state, root_token, memory, cfg, trace, generator, clock)
    return _draft_levels(drafter, state, root_token, memory, cfg, trace, generator, clock)


def _draft_levels(drafter: Drafter, state: DraftState, root_token: int, memory: VisualMemory | None,
                  cfg: FoveaConfig, trace: bool, generator: torch.Generator | None, clock: Clock) -> DraftTree:
    """The general tree: `top_k` frontier nodes a level, each proposing `top_k` children."""
    k, depth = (1 if cfg.tree.chain else cfg.tree.top_k), cfg.tree.depth
    size = 1 + k + (depth - 1) * k * k                  # every node any level can propose
    tok = torch.empty(size, dtype=torch.long)
    par = torch.full((size,), -1, dtype=torch.long)
    dep = torch.zeros(size, dtype=torch.long)
    sco = torch.zeros(size)
    anc = new_ancestors(size)
    tok[0] = root_token
    log = RetrievalLog() if trace else None
    front = torch.zeros(1, dtype=torch.long)            # node ids of the frontier [F]
    h = state.root_h[None]                              # draft states of the frontier [F, D]
    n = 1                                               # nodes so far (static: no host sync)
    expanded = torch.empty(0, dtype=torch.long)         # node id of each tree KV slot, in slot order
    stop = math.log(cfg.tree.stop_below) if cfg.tree.stop_below > 0 else None
    clock.lap("draft/setup", 0)
    for level in range(1, depth + 1):
        logits, pre = _head(drafter, h, front, level, memory, cfg, generator, clock, log)
        top_lp, top_tok = torch.log_softmax(logits, -1).topk(k, dim=-1)        # [F, k]
        clock.lap("draft/head", level)
        width = front.shape[0] * k
        parents = front.repeat_interleave(k)                                    # [F*k]
        tok[n:n + width] = top_tok.flatten()
        par[n:n + width] = parents
        dep[n:n + width] = level
        sco[n:n + width] = (sco[front][:, None] + top_lp).flatten()
        add_nodes(anc, n, parents)
        clock.lap("draft/tree", level)
        if level < depth and stop is not None and float(sco[n:n + width].max()) < stop:
            n += width                                  # dynamic depth: no path worth another level
            break
        if level < depth:
            pick = sco[n:n + width].topk(k).indices                             # [k] among the new nodes
            front = n + pick
            expanded = torch.cat([expanded, front])
            # a child reads its parent's draft state: row pick // k of this level's h [k, D]
            # (its corrected state with correction.propagate)
            parent = pre if cfg.correction.propagate else h
            h = _expand(drafter, state, tok, anc, expanded, parent[pick // k], level, clock)
        n += width
    return _select(tok, par, dep, sco, anc, n, cfg.tree.total_tokens, log, clock)


def _head(drafter: Drafter, h: torch.Tensor, nodes: torch.Tensor, level: int, memory: VisualMemory | None,
          cfg: FoveaConfig, generator: torch.Generator | None, clock: Clock,
          log: RetrievalLog | None) -> tuple[torch.Tensor, torch.Tensor]:
    """The head over a level's draft states h [F, D] (tree nodes `nodes` [F], depth level - 1), its
    retrieval added to `log` -> (logits [F, V], the LM head's input [F, D])."""
    logits, got, gate, pre = drafter.head_with_state(h, level - 1, memory, cfg.correction, cfg.retrieval,
                                                     generator, clock=clock, level=level)
    if log is not None and got is not None:
        # references only: the uncorrected head runs when the trace is read, not here
        # (with correction.trigger only the rows got.rows were corrected)
        rows = slice(None) if got.rows is None else got.rows
        log.add(nodes[rows], got, gate, logits[rows], h[rows], drafter.logits)
    return logits, pre


def _draft_chain(drafter: Drafter, state: DraftState, root_token: int, memory: VisualMemory | None,
                 cfg: FoveaConfig, trace: bool, generator: torch.Generator | None, clock: Clock) -> DraftTree:
    """One node a level: node `level` is the top-1 child of node `level - 1`, so every node attends
    all committed pairs and every earlier chain slot (the mask is all ones) and the ancestor matrix is
    lower triangular, built once. The same tree, scores and stop rule as `_draft_levels` with one
    candidate a level, in fewer ops a level (tests/test_draft_chain.py)."""
    depth = cfg.tree.depth
    tok = torch.empty(depth + 1, dtype=torch.long)
    sco = torch.zeros(depth + 1)
    tok[0] = root_token
    log = RetrievalLog() if trace else None
    h = state.root_h[None]                                              # [1, D]
    ones = torch.ones(1, 1, 1, state.length + depth, dtype=torch.bool)  # the chain's mask, sliced per level
    stop = math.log(cfg.tree.stop_below) if cfg.tree.stop_below > 0 else None
    n = 1
    clock.lap("draft/setup", 0)
    for level in range(1, depth + 1):
        logits, pre = _head(drafter, h, torch.tensor([level - 1]), level, memory, cfg, generator, clock, log)
        top_lp, top_tok = torch.log_softmax(logits, -1).topk(1, dim=-1)         # [1, 1]
        clock.lap("draft/head", level)
        tok[level:level + 1] = top_tok[0]
        sco[level:level + 1] = sco[level - 1] + top_lp[0]
        n = level + 1
        clock.lap("draft/tree", level)
        if level == depth or (stop is not None and float(sco[level]) < stop):
            break
        parent = pre if cfg.correction.propagate else h
        pos = state.next_pos - 1 + level
        h, _ = drafter.step(tok[level:level + 1][None], parent[None], torch.full((1, 1), pos),
                            ones[..., :state.length + level], buffers=state.buffers,
                            at=state.length + level - 1, max_pos=pos)
        h = h[0]
        clock.lap("draft/blocks", level)
    anc = torch.ones(n, n, dtype=torch.bool).tril()
    par = torch.arange(-1, n - 1)
    return _select(tok, par, torch.arange(n), sco, anc, n, cfg.tree.total_tokens, log, clock)


def _expand(drafter: Drafter, state: DraftState, tok: torch.Tensor, anc: torch.Tensor, expanded: torch.Tensor,
            feats: torch.Tensor, level: int, clock: Clock) -> torch.Tensor:
    """Run this level's frontier (the last k of `expanded` [S]: own token, parent's draft state
    feats [k, D]) in one drafter step, writing their KV at tree slots S-k..S-1 after the committed
    pairs. Slot s holds node expanded[s], so a node attends the committed pairs plus the slots of
    its ancestors and itself: its ancestor row restricted to `expanded`. -> draft states [k, D]."""
    k = feats.shape[0]
    nodes = expanded[-k:]
    mask = torch.cat([torch.ones(k, state.length, dtype=torch.bool), anc[nodes][:, expanded]], 1)
    pos = state.next_pos - 1 + level
    clock.lap("draft/tree", level)
    h, _ = drafter.step(tok[nodes][None], feats[None], torch.full((1, k), pos), mask[None, None],
                        buffers=state.buffers, at=state.length + expanded.shape[0] - k, max_pos=pos)
    clock.lap("draft/blocks", level)
    return h[0]


def _select(tok, par, dep, sco, anc, n: int, budget: int, log: RetrievalLog | None, clock: Clock) -> DraftTree:
    """Keep the `budget` best-scoring nodes plus their ancestors; renumber with parents first."""
    order = prune(anc[:n, :n], sco[:n], dep[:n], budget)                         # [N+1]
    mask, parents = renumber(anc[:n, :n], par[:n], order)
    if log is not None:
        log.renumber(order, n)
    clock.lap("draft/select", 0)
    return DraftTree(token_ids=tok[order], parent_ids=parents, depth_ids=dep[order], score_values=sco[order],
                     mask=mask, retrieval=log if log is not None else {})

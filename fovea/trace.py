"""Typed records of a decoding run: one `IterationTrace` per draft-verify round, one
`GenerationResult` per request.

This is the single stream the CLI, the benchmarks and the app read. It holds plain Python
values (ints, floats, lists), never tensors, so records can be pickled, JSON-dumped and
shared with a UI process.

Vocabulary used everywhere:
- node 0 of a draft tree is the *root*: the last committed token (the previous round's bonus
  token), whose draft state predicts depth-1 tokens. Nodes 1..N are draft tokens.
- the *draft state* of node i is the drafter hidden state computed at node i; it predicts the
  children of node i. Retrieval and correction happen at draft states of depth <= limit.
- `accept_length` counts the accepted draft tokens PLUS the bonus token (EAGLE's tau);
  `accepted_draft` counts only the draft tokens.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field


@dataclass
class NodeRetrieval:
    """What the draft state of one node read from the visual memory."""
    indices: list[int]      # memory entries selected (sorted by weight, largest first)
    weights: list[float]    # renormalised retrieval weights alpha_i over the selected set (sum 1)
    k: int                  # |selected| chosen by the retrieval rule
    gate: float             # scalar correction gate g in [0, 1] (1.0 when the gate is ablated)


@dataclass
class IterationTrace:
    iteration: int
    tokens: list[int]                 # [N+1] node tokens, node 0 = root
    parents: list[int]                # [N+1] parent node index, -1 for the root
    depths: list[int]                 # [N+1] root depth 0
    scores: list[float]               # [N+1] cumulative draft log-prob (root 0.0)
    retrieval: dict[int, NodeRetrieval]  # node index -> retrieval at its draft state (corrected states only)
    accepted: list[int]               # accepted node indices along the path, root excluded
    rejected: list[int]               # draft nodes not accepted
    emitted: list[int]                # tokens appended to the output this round (accepted + bonus, cut at EOS / budget)
    bonus_token: int                  # the target's own token after the accepted path
    draft_ms: float = 0.0
    verify_ms: float = 0.0
    commit_ms: float = 0.0

    @property
    def accepted_draft(self) -> int:
        return len(self.accepted)

    @property
    def accept_length(self) -> int:
        return len(self.accepted) + 1

    def producer_of(self, k: int) -> int:
        """Node whose draft state proposed the k-th emitted token (the parent of that accepted node);
        -1 when the token is the bonus (produced by the target itself)."""
        return self.parents[self.accepted[k]] if k < len(self.accepted) else -1


@dataclass
class StepTrace:
    """One autoregressive step (the baseline): one target forward, one token."""
    step: int
    token: int
    forward_ms: float


@dataclass
class GenerationResult:
    method: str                       # "fovea", "autoregressive", ...
    tokens: list[int]                 # generated token ids (EOS included if produced)
    text: str
    wall_s: float                     # prefill + decode wall time
    prefill_ms: float
    target_forwards: int              # target forwards, the prefill counted as one
    iterations: list = field(default_factory=list)   # IterationTrace or StepTrace records (if traced)
    accept_lengths: list[int] = field(default_factory=list)  # per round, bonus counted (always recorded)
    memory_grid: tuple[int, int] | None = None       # (rows, cols) of the visual memory, for heatmaps
    finish_reason: str = "length"     # "eos" or "length"

    @property
    def tokens_per_s(self) -> float:
        return len(self.tokens) / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def mean_accept_length(self) -> float:
        """tau: mean tokens emitted per verification round, bonus token counted (1.0 for AR)."""
        return sum(self.accept_lengths) / len(self.accept_lengths) if self.accept_lengths else 1.0

    @property
    def tokens_per_forward(self) -> float:
        """Generated tokens per target forward, the prefill counted as one forward."""
        return len(self.tokens) / max(1, self.target_forwards)

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["tokens_per_s"] = self.tokens_per_s
        d["mean_accept_length"] = self.mean_accept_length
        d["tokens_per_forward"] = self.tokens_per_forward
        return d

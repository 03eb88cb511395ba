"""The one record stream of a decoding run and the one accumulator that folds it.

`generate` yields a `PrefillTrace` (the prefill's token), then one `IterationTrace` per
draft-verify round (FOVEA) or one `StepTrace` per step (autoregressive). Every record carries
what it emitted, how each emitted token came (`origins`), every token id it mentions, its own
wall milliseconds (consumer time excluded) and, on the last one, the finish reason. `Accumulator` folds records, in any consumer (app, bench, analyses, CLI), into
tokens, accept lengths, target forwards, tokens/s, the focus trajectory and focus drift; each
record folds itself (`fold_into`), so no consumer filters records by type.

Records keep the draft loop's tensors and convert them to Python lists on first read, so
tracing costs a reference per level, not a host sync per node. Records pickle.

Vocabulary used everywhere:
- node 0 of a draft tree is the *root*: the last committed token (the previous round's bonus
  token), whose draft state predicts depth-1 tokens. Nodes 1..N are draft tokens.
- the *draft state* of node i is the drafter hidden state computed at node i; it predicts the
  children of node i. Retrieval and correction happen at draft states of depth <= limit.
- `accept_length` counts the accepted draft tokens PLUS the bonus token (EAGLE's tau);
  `accepted_draft` counts only the draft tokens.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import torch

from fovea.tree import ancestors_of, path_to

JACCARD_TOP = 16      # the paper's focus-shift statistic compares Top-16 sets
TOP_TOKENS = 5        # draft tokens kept per corrected state, before and after the correction

TopTokens = list[tuple[int, float]]   # (token id, draft probability), most likely first


@dataclass
class NodeRetrieval:
    """What the draft state of one node read from the visual memory, and what it changed."""
    indices: list[int]      # memory entries selected (sorted by weight, largest first)
    weights: list[float]    # renormalised retrieval weights alpha_i over the selected set (sum 1)
    k: int                  # |selected| chosen by the retrieval rule
    gate: float             # scalar correction gate g in [0, 1] (1.0 when the gate is ablated)
    top_before: TopTokens | None = None   # the drafter's top tokens without the correction
    top_after: TopTokens | None = None    # ... and with it (what the tree was grown from)

    @property
    def flipped(self) -> bool | None:
        """Did the correction change the most likely draft token? None when not recorded."""
        if not self.top_before or not self.top_after:
            return None
        return self.top_before[0][0] != self.top_after[0][0]


class RetrievalLog(Mapping):
    """node -> NodeRetrieval of one round, stored as the draft loop's tensors (one tuple per tree
    level) and converted on first read. `renumber` maps the loop's node ids to the pruned tree's."""

    def __init__(self):
        # per level: node ids [F], indices [F, W], weights [F, W], k [F], gate [F], the corrected
        # head logits [F, V], the draft states [F, D] and the uncorrected head (or Nones)
        self._levels: list[tuple] = []
        self._order: torch.Tensor | None = None
        self._size = 0
        self._table: dict[int, NodeRetrieval] | None = None

    def add(self, nodes: torch.Tensor, got, gate: torch.Tensor, after: torch.Tensor | None = None,
            states: torch.Tensor | None = None, head=None) -> None:
        """One tree level's corrected states. after: their head logits [F, V] with the correction;
        states [F, D] and head (states -> logits): the uncorrected head, run only when read. Keeps
        references, so tracing costs no matmul and no host sync in the draft loop."""
        self._levels.append((nodes, got.indices, got.weights, got.k, gate, after, states, head))

    def renumber(self, order: torch.Tensor, size: int) -> None:
        """order [N+1]: the loop's node id of each kept node; size: node ids the loop used."""
        self._order, self._size = order, size

    def _convert(self) -> dict[int, NodeRetrieval]:
        if self._table is None:
            new_id = list(range(self._size))
            if self._order is not None:
                new_id = [-1] * self._size
                for new, old in enumerate(self._order.tolist()):
                    new_id[old] = new
            self._table = {}
            for nodes, idx, w, k, gate, after, states, head in self._levels:
                before = None if states is None or head is None else _head(head, states)
                rows = zip(nodes.tolist(), idx.tolist(), w.tolist(), k.tolist(), gate.tolist(),
                           _top_rows(before, nodes), _top_rows(after, nodes))
                for node, row, wt, kk, g, tb, ta in rows:
                    if new_id[node] >= 0:
                        self._table[new_id[node]] = NodeRetrieval(row[:kk], wt[:kk], kk, g, tb, ta)
        return self._table

    def __getitem__(self, node: int) -> NodeRetrieval:
        return self._convert()[node]

    def __iter__(self):
        return iter(self._convert())

    def __len__(self) -> int:
        return len(self._convert())


@torch.inference_mode()
def _head(head, states: torch.Tensor) -> torch.Tensor:
    """The uncorrected head on the recorded draft states (inference tensors: read in inference mode)."""
    return head(states)


def _top_rows(logits: torch.Tensor | None, nodes: torch.Tensor) -> list:
    """Head logits [F, V] -> per row the TOP_TOKENS [(token id, probability), ...]; Nones without them."""
    if logits is None:
        return [None] * nodes.shape[0]
    top = torch.log_softmax(logits.float(), -1).topk(min(TOP_TOKENS, logits.shape[-1]), -1)
    return [list(zip(ids, probs)) for ids, probs in zip(top.indices.tolist(), top.values.exp().tolist())]


class _Listed:
    """Attribute that may be handed a tensor and reads as a Python list (converted once)."""

    def __set_name__(self, owner, name):
        self.slot = "_" + name

    def __get__(self, obj, owner=None):
        if obj is None:
            return self
        value = obj.__dict__[self.slot]
        if isinstance(value, torch.Tensor):
            value = obj.__dict__[self.slot] = value.tolist()
        return value

    def __set__(self, obj, value):
        obj.__dict__[self.slot] = value


class _OneToken:
    """A record of one target forward that emitted one token, `token`, and holds no tensors."""
    origin = "target"                 # how its token came (`origins`)

    @property
    def emitted(self) -> list[int]:
        return [self.token]

    @property
    def origins(self) -> list[str]:
        return [self.origin]

    @property
    def mentioned_ids(self) -> set[int]:
        return {self.token}

    def materialize(self):
        return self


@dataclass
class PrefillTrace(_OneToken):
    """The prefill: one target forward over the prompt and the first answer token."""
    token: int
    ms: float = 0.0
    finish: str | None = None         # "eos" or "length" when this token ended the run
    origin = "prefill"

    def fold_into(self, acc: "Accumulator") -> None:
        acc.prefill = self
        acc.tokens.append(self.token)
        acc.prefill_ms += self.ms
        acc._count(1, self.ms, self.finish)


@dataclass
class IterationTrace:
    """One draft-verify round. Tree fields may be given as tensors (read as lists)."""
    iteration: int
    tokens: list[int] = _Listed()      # [N+1] node tokens, node 0 = root
    parents: list[int] = _Listed()     # [N+1] parent node index, -1 for the root
    depths: list[int] = _Listed()      # [N+1] root depth 0
    scores: list[float] = _Listed()    # [N+1] cumulative draft log-prob (root 0.0)
    retrieval: Mapping = field(default_factory=dict)   # node -> NodeRetrieval (corrected states only)
    accepted: list[int] = field(default_factory=list)   # accepted node indices along the path, root excluded
    rejected: list[int] | None = None  # draft nodes not accepted (derived when None)
    emitted: list[int] = field(default_factory=list)    # tokens appended this round (accepted + bonus, cut at EOS / budget)
    bonus_token: int = -1              # the target's own token after the accepted path
    draft_ms: float = 0.0
    verify_ms: float = 0.0
    commit_ms: float = 0.0
    finish: str | None = None
    mask: torch.Tensor | None = None   # [N+1, N+1] ancestor-or-self matrix (derived from parents when None)

    def __post_init__(self) -> None:
        if self.rejected is None:
            kept = set(self.accepted)
            self.rejected = [n for n in range(1, len(self.tokens)) if n not in kept]

    @property
    def ms(self) -> float:
        return self.draft_ms + self.verify_ms + self.commit_ms

    @property
    def accepted_draft(self) -> int:
        return len(self.accepted)

    @property
    def accept_length(self) -> int:
        return len(self.accepted) + 1

    @property
    def ancestors(self) -> torch.Tensor:
        """[N+1, N+1] bool: ancestors[i, j] when j is i or an ancestor of i (from `fovea.tree`)."""
        if self.mask is None:
            self.mask = ancestors_of(self.parents)
        return self.mask

    def path_to(self, node: int) -> list[int]:
        return path_to(self.ancestors, node)

    @property
    def origins(self) -> list[str]:
        """How each emitted token came: "draft" (an accepted draft token) or "target" (the bonus)."""
        drafted = min(len(self.accepted), len(self.emitted))
        return ["draft"] * drafted + ["target"] * (len(self.emitted) - drafted)

    @property
    def mentioned_ids(self) -> set[int]:
        """Every token id the round names: its tree's nodes, the bonus, the top tokens around each correction."""
        tops = (t for r in self.retrieval.values() for t, _ in (r.top_before or []) + (r.top_after or []))
        return {*self.tokens, self.bonus_token, *tops}

    def producer_of(self, k: int) -> int:
        """Node whose draft state proposed the k-th emitted token (the parent of that accepted node);
        -1 when the token is the bonus (produced by the target itself)."""
        return self.parents[self.accepted[k]] if k < len(self.accepted) else -1

    def materialize(self) -> "IterationTrace":
        """Convert every lazily kept tensor now (tree lists, the retrieval log with its top tokens),
        so that later reads on another thread run no torch op (see app.streaming)."""
        _ = self.tokens, self.parents, self.depths, self.scores
        len(self.retrieval)
        return self

    def fold_into(self, acc: "Accumulator") -> None:
        acc.tokens.extend(self.emitted)
        acc.rounds.append(self)
        acc.accept_lengths.append(self.accept_length)
        acc._count(1, self.ms, self.finish)


@dataclass
class StepTrace(_OneToken):
    """One autoregressive step (the baseline): one target forward, one token, from the target itself."""
    step: int
    token: int
    forward_ms: float
    finish: str | None = None

    @property
    def ms(self) -> float:
        return self.forward_ms

    def fold_into(self, acc: "Accumulator") -> None:
        acc.tokens.append(self.token)
        acc.steps.append(self)
        acc.accept_lengths.append(1)
        acc._count(1, self.forward_ms, self.finish)


class _Figures:
    """Throughput figures of a run from its tokens, wall_s, accept_lengths and target_forwards."""

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


@dataclass
class GenerationResult(_Figures):
    """A finished run, as the accumulator sums it up (`Accumulator.result`)."""
    method: str                       # "fovea", "autoregressive", ...
    tokens: list[int]                 # generated token ids (EOS included if produced)
    text: str
    wall_s: float                     # prefill + decode wall time
    prefill_ms: float
    target_forwards: int              # target forwards, the prefill counted as one
    iterations: list = field(default_factory=list)   # IterationTrace (FOVEA) or StepTrace (autoregressive) records
    accept_lengths: list[int] = field(default_factory=list)  # per round, bonus counted (1 per AR step)
    memory_grid: tuple[int, int] | None = None       # (rows, cols) of the visual memory, for heatmaps
    finish_reason: str = "length"     # "eos" or "length"
    prefill: PrefillTrace | None = None   # the prefill's record: the first answer token and its time



class Accumulator(_Figures):
    """Folds records into a run's figures, live (while streaming) or at the end."""

    def __init__(self, method: str = "fovea", memory_grid: tuple[int, int] | None = None):
        self.method, self.memory_grid = method, memory_grid
        self.tokens: list[int] = []
        self.rounds: list[IterationTrace] = []
        self.steps: list[StepTrace] = []
        self.accept_lengths: list[int] = []
        self.target_forwards = 0
        self.prefill: PrefillTrace | None = None
        self.prefill_ms = 0.0
        self.ms = 0.0                      # the records' own wall time: consumer time excluded
        self.finish_reason: str | None = None

    def add(self, record):
        record.fold_into(self)
        return record

    def extend(self, records) -> "Accumulator":
        for record in records:
            record.fold_into(self)
        return self

    def _count(self, forwards: int, ms: float, finish: str | None) -> None:
        self.target_forwards += forwards
        self.ms += ms
        self.finish_reason = finish or self.finish_reason

    @property
    def done(self) -> bool:
        return self.finish_reason is not None

    @property
    def wall_s(self) -> float:
        return self.ms / 1e3

    @property
    def iterations(self) -> list:
        """The rounds (FOVEA) or steps (autoregressive) so far, as `GenerationResult.iterations`."""
        return self.rounds or self.steps

    def focus_trajectory(self) -> list["FocusStep"]:
        return focus_trajectory(self.rounds)

    def focus_drift(self, top: int = JACCARD_TOP) -> list[float | None]:
        """Top-`top` Jaccard distance between adjacent rounds' root retrievals (None where either
        root did not read the memory): the paper's focus drift, one value per adjacent pair."""
        roots = [r.retrieval.get(0) for r in self.rounds]
        return [None if a is None or b is None else jaccard_distance(top_set(a, top), top_set(b, top))
                for a, b in zip(roots, roots[1:])]

    def result(self, text: str = "") -> GenerationResult:
        return GenerationResult(self.method, list(self.tokens), text, self.wall_s, self.prefill_ms,
                                self.target_forwards, list(self.iterations), list(self.accept_lengths),
                                self.memory_grid, self.finish_reason or "length", self.prefill)


@dataclass(frozen=True)
class FocusStep:
    """One draft state on the committed path that read the memory; `iteration` indexes the rounds."""
    iteration: int
    node: int
    retrieval: NodeRetrieval


def focus_trajectory(rounds: list[IterationTrace]) -> list[FocusStep]:
    """Draft states on the committed path with a retrieval record, in decoding order (per round:
    the root, then the accepted nodes)."""
    return [FocusStep(pos, node, it.retrieval[node]) for pos, it in enumerate(rounds)
            for node in [0, *it.accepted] if node in it.retrieval]


def top_set(retrieval: NodeRetrieval, top: int = JACCARD_TOP) -> set[int]:
    """The `top` highest-weight entries (indices are stored largest weight first); all when K < top."""
    return set(retrieval.indices[:top])


def jaccard_distance(a: set, b: set) -> float:
    """1 - |a & b| / |a | b|; two empty sets are identical (distance 0)."""
    union = a | b
    return 1.0 - len(a & b) / len(union) if union else 0.0


def focus_shifts(trajectory: list[FocusStep], top: int = JACCARD_TOP) -> list[float]:
    """Top-`top` Jaccard distance between each pair of adjacent focus steps ([n-1] values)."""
    sets = [top_set(s.retrieval, top) for s in trajectory]
    return [jaccard_distance(a, b) for a, b in zip(sets, sets[1:])]

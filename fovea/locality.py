"""Focus locality after PRR ("Predict, Reuse, and Repair", arXiv 2606.30389): predict a draft
state's selected memory entries before its selection is known, read them out speculatively, then
repair the readout exactly once the true selected set arrives.

Prediction, per memory entry i, for a draft state c whose parent draft state is p (a root state
has no parent and gets no prediction). x_t[i] is the retrieval mass state t put on entry i: its
renormalised weight alpha_i on the selected set T_t, 0 elsewhere. Holt's double exponential
smoothing carries a level L and a trend B per entry down the parent links:

    root t:    L_t = x_t,                                    B_t = 0
    child t:   L_t = alpha * x_t + (1 - alpha) * (L_p + B_p)
               B_t = beta * (L_t - L_p) + (1 - beta) * B_p
    forecast for a child c of p (before c's scores exist):   F_c = L_p + B_p
    mix:       z_c = gamma * x_p + (1 - gamma) * max(F_c, 0)
    predicted: P_c = the ceil(budget * |T_p|) entries with the largest z_c > 0 (ties: lower index)

gamma = 1 predicts the parent's set, gamma = 0 the smoothed forecast alone (`LocalityConfig`).

Readout, exactly as `fovea.retrieval` computes it: with logits s_i and values u_i, the readout over a
set T is r = sum_{i in T} exp(s_i) u_i / sum_{i in T} exp(s_i) (alpha renormalised over T). A
*partial* over a set A is (m, l, acc) = (max_A s, sum_A exp(s_i - m), sum_A exp(s_i - m) u_i), and
partials of disjoint sets merge exactly (the online-softmax merge):

    m = max(m_a, m_b),  l = e^(m_a - m) l_a + e^(m_b - m) l_b,  acc likewise,  r = acc / l.

`repair` merges the missed entries T \\ P into the speculative partial over P, then subtracts the
wrongly predicted ones P \\ T. Subtracting is exact in real arithmetic; in floating point it loses
about log2(l_before / l_after) bits, and when T is a top-K set by score (every retrieval rule
here except random / static) the reference max lies in T, so the loss is at most log2(|P| + 1)
bits. Rows whose kept mass is tiny anyway are recomputed directly.

Knows nothing about the drafter, the draft tree or the decode loop: it reads score tensors and the
(indices, weights) of retrieval records.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import torch

from fovea.config import LocalityConfig

# repair() trusts the subtraction only where a row kept at least this fraction of its mass; below it,
# the subtraction may have lost ~20 bits or more, and the row is recomputed over the true set
CANCEL_TOL = 1e-6


# ---- prediction ----------------------------------------------------------------------------
@dataclass
class HoltState:
    level: torch.Tensor     # [N] smoothed retrieval mass per memory entry
    trend: torch.Tensor     # [N] smoothed change of the level per draft step


def holt_update(parent: HoltState | None, x: torch.Tensor, cfg: LocalityConfig) -> HoltState:
    """The state after observing mass x [N] at a draft state whose parent's state is `parent`."""
    if parent is None:
        return HoltState(level=x.clone(), trend=torch.zeros_like(x))
    level = cfg.alpha * x + (1.0 - cfg.alpha) * (parent.level + parent.trend)
    trend = cfg.beta * (level - parent.level) + (1.0 - cfg.beta) * parent.trend
    return HoltState(level=level, trend=trend)


def predict_selection(parent_mass: torch.Tensor, parent_state: HoltState, parent_k: int,
                      cfg: LocalityConfig) -> torch.Tensor:
    """Predicted entries [P] (largest mixed score first) for a child of a state that selected
    `parent_k` entries with mass `parent_mass` [N] and whose smoothed state is `parent_state`."""
    forecast = (parent_state.level + parent_state.trend).clamp_min(0.0)        # [N]
    z = cfg.gamma * parent_mass + (1.0 - cfg.gamma) * forecast                  # [N]
    n_pred = min(math.ceil(cfg.budget * parent_k), int((z > 0).sum()))
    order = torch.argsort(-z, stable=True)       # stable: ties go to the lower entry index
    return order[:n_pred]


def dense_mass(indices: Sequence[int], weights: Sequence[float], n: int,
               dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """(indices, weights) of one selection -> [n] mass vector, 0 off the selected set."""
    x = torch.zeros(n, dtype=dtype)
    pairs = [(i, w) for i, w in zip(indices, weights) if i >= 0]
    if pairs:
        idx, w = zip(*pairs)
        x[list(idx)] = torch.tensor(w, dtype=dtype)
    return x


# ---- per-step locality of a focus trajectory -----------------------------------------------
@dataclass(frozen=True)
class LocalityStep:
    """How well one draft state's selection was predicted (None: a root state, nothing to predict from)."""
    parent: int                     # index of the parent step, -1 for a root
    predicted: tuple[int, ...]      # P, largest mixed score first
    selected: tuple[int, ...]       # T, as recorded
    overlap: float | None           # |P & T| / |T|
    hit_rate: float | None          # retrieval weight of T that P covers: sum_{P & T} alpha / sum_T alpha
    missed: int                     # |T \ P|: entries the repair merges in
    wrong: int                      # |P \ T|: entries the repair drops


def overlap_and_hit_rate(predicted, selected, weights) -> tuple[float, float]:
    """|P & T| / |T| and the alpha-weighted share of T inside P; an empty T counts as fully hit."""
    pred, sel = set(predicted), [(i, w) for i, w in zip(selected, weights) if i >= 0]
    if not sel:
        return 1.0, 1.0
    hits = [w for i, w in sel if i in pred]
    total = sum(w for _, w in sel)
    overlap = len(hits) / len(sel)
    return overlap, (sum(hits) / total if total > 0 else overlap)


def focus_locality(steps: Sequence, parents: Sequence[int] | None = None, n_entries: int | None = None,
                   cfg: LocalityConfig = LocalityConfig()) -> list[LocalityStep]:
    """Predicted sets and their overlap / hit rate for a sequence of draft-state selections.

    steps: per draft state, (indices, weights) or any record with `.indices` / `.weights` (a
    `NodeRetrieval`, a `FocusStep.retrieval`). parents: index of each step's parent step (-1: a
    root), each before its child; default a chain, as in the committed-path focus trajectory.
    n_entries: memory size (default: the largest index seen + 1).
    """
    sel = [_as_pair(s) for s in steps]
    parents = list(range(-1, len(sel) - 1)) if parents is None else list(parents)
    if len(parents) != len(sel) or any(not -1 <= p < t for t, p in enumerate(parents)):
        raise ValueError("parents must give, for each step, -1 or the index of an earlier step")
    n = n_entries or 1 + max((i for idx, _ in sel for i in idx), default=0)
    masses = [dense_mass(idx, w, n) for idx, w in sel]             # [N] each
    states: list[HoltState] = []
    out = []
    for t, ((idx, w), par) in enumerate(zip(sel, parents)):
        selected = tuple(i for i in idx if i >= 0)
        if par < 0:
            out.append(LocalityStep(par, (), selected, None, None, 0, 0))
        else:
            k_parent = sum(1 for i in sel[par][0] if i >= 0)
            pred = tuple(predict_selection(masses[par], states[par], k_parent, cfg).tolist())
            overlap, hit = overlap_and_hit_rate(pred, idx, w)
            out.append(LocalityStep(par, pred, selected, overlap, hit,
                                    len(set(selected) - set(pred)), len(set(pred) - set(selected))))
        states.append(holt_update(states[par] if par >= 0 else None, masses[t], cfg))
    return out


def summarize_locality(steps: Sequence[LocalityStep], n_entries: int | None = None) -> dict:
    """Means over the steps that had a prediction (JSON-ready). With the memory size, also the
    overlap a random guess of the same size would get on average (|P| / N)."""
    done = [s for s in steps if s.overlap is not None]

    def avg(values):
        values = list(values)
        return sum(values) / len(values) if values else None

    return {"n_steps": len(steps), "n_predicted": len(done),
            "overlap": avg(s.overlap for s in done), "hit_rate": avg(s.hit_rate for s in done),
            "selected": avg(len(s.selected) for s in done), "predicted": avg(len(s.predicted) for s in done),
            "missed": avg(s.missed for s in done), "wrong": avg(s.wrong for s in done),
            "chance_overlap": avg(len(s.predicted) / n_entries for s in done) if n_entries else None}


def trace_links(rounds: Sequence, tree: bool = False) -> tuple[list, list[int]]:
    """(retrieval records, parent step of each) from a run's draft-verify rounds, for `focus_locality`.

    tree=False: the committed-path focus trajectory (each round's root, then its accepted nodes
    that read the memory), a chain. tree=True: every draft state that read the memory, linked to
    its nearest ancestor that did; a round's root links to the previous round's last committed
    step. Reads `.retrieval` (node -> record), `.accepted` and `.parents` of each round record.
    """
    steps, parents, last = [], [], -1          # last: the newest committed-path step
    for rec in rounds:
        retrieval = getattr(rec, "retrieval", None) or {}
        path = [0, *rec.accepted]
        nodes = sorted(retrieval) if tree else [n for n in path if n in retrieval]
        step_of: dict[int, int] = {}
        for node in nodes:                     # nodes are numbered parents first
            if tree:
                up = rec.parents[node] if node > 0 else -1
                while up > 0 and up not in step_of:
                    up = rec.parents[up]
                parent = step_of.get(up, last)
            else:
                parent = len(steps) - 1        # -1 for the first step
            step_of[node] = len(steps)
            steps.append(retrieval[node])
            parents.append(parent)
        on_path = [step_of[n] for n in path if n in step_of]
        last = on_path[-1] if on_path else last
    return steps, parents


def _as_pair(step) -> tuple[list[int], list[float]]:
    if hasattr(step, "indices"):
        return list(step.indices), list(step.weights)
    indices, weights = step
    return list(indices), list(weights)


# ---- exact readout from log-sum-exp partials -----------------------------------------------
@dataclass
class Partial:
    """Online-softmax statistics of a part of the selected set, for S draft states at once."""
    m: torch.Tensor         # [S] reference logit: the part's max (-inf for an empty part)
    l: torch.Tensor         # [S] sum_i exp(s_i - m)
    acc: torch.Tensor       # [S, D] sum_i exp(s_i - m) u_i


def _ref(m: torch.Tensor) -> torch.Tensor:
    """m with -inf (empty parts) replaced by 0, so exp(-inf - ref) = 0 and never NaN."""
    return torch.nan_to_num(m, neginf=0.0)


def partial_readout(logits: torch.Tensor, idx: torch.Tensor, values: torch.Tensor) -> Partial:
    """logits [S, N], idx [S, k] (-1 pads; k may be 0), values [N, D] -> the partial over idx.
    Touches only the k listed rows of values: the work is proportional to the part's size."""
    s_rows, k = idx.shape
    safe = idx.clamp_min(0)
    s = logits.gather(1, safe).masked_fill(idx < 0, float("-inf"))           # [S, k]
    m = s.amax(-1) if k else s.new_full((s_rows,), float("-inf"))           # [S]
    e = torch.exp(s - _ref(m)[:, None])                                       # [S, k], 0 on pads
    rows = values.index_select(0, safe.reshape(-1)).view(s_rows, k, values.shape[1])   # [S, k, D]
    return Partial(m=m, l=e.sum(-1), acc=torch.bmm(e[:, None, :], rows).squeeze(1))


def masked_partial(logits: torch.Tensor, mask: torch.Tensor, values: torch.Tensor) -> Partial:
    """The partial over the entries where mask [S, N] is True, as one [S, N] @ [N, D] product:
    fewer, larger ops than gathering, which is what small memories on a CPU want."""
    s = logits.masked_fill(~mask, float("-inf"))                              # [S, N]
    m = s.amax(-1)
    e = torch.exp(s - _ref(m)[:, None])                                       # [S, N], 0 off the mask
    return Partial(m=m, l=e.sum(-1), acc=e @ values)


def merge(a: Partial, b: Partial) -> Partial:
    """The partial over the union of two disjoint parts (commutative and associative)."""
    m = torch.maximum(a.m, b.m)
    ref = _ref(m)
    ca, cb = torch.exp(a.m - ref), torch.exp(b.m - ref)                        # [S], 0 for empty parts
    return Partial(m=m, l=ca * a.l + cb * b.l, acc=ca[:, None] * a.acc + cb[:, None] * b.acc)


def drop(a: Partial, b: Partial) -> Partial:
    """The partial over a's part minus b's part (b's entries must all be in a's part). a's max
    stays the reference: it bounds every remaining logit, which is all the merge needs."""
    cb = torch.exp(b.m - _ref(a.m))                                           # [S], <= 1
    return Partial(m=a.m, l=a.l - cb * b.l, acc=a.acc - cb[:, None] * b.acc)


def finish(p: Partial) -> torch.Tensor:
    """The readout r = acc / l [S, D]; 0 for an empty part (as `Retriever` gives an empty selection)."""
    return p.acc / p.l.clamp_min(torch.finfo(p.l.dtype).tiny)[:, None]


def direct_readout(logits: torch.Tensor, idx: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """The readout over idx [S, k] computed in one pass: the reference `repair` must reproduce."""
    return finish(partial_readout(logits, idx, values))


def repair(speculative: Partial, logits: torch.Tensor, values: torch.Tensor, predicted: torch.Tensor,
           selected: torch.Tensor) -> Partial:
    """The partial over the true selected set [S, t], from the speculative partial over the
    predicted set [S, p] (both -1 padded): merge in T \\ P, then drop P \\ T."""
    n = logits.shape[1]
    in_p, in_t = membership(predicted, n), membership(selected, n)            # [S, N] bool
    fixed = merge(speculative, masked_partial(logits, in_t & ~in_p, values))
    out = drop(fixed, masked_partial(logits, in_p & ~in_t, values))
    lost = out.l < CANCEL_TOL * fixed.l        # kept mass too small for the subtraction to be trusted
    if bool(lost.any()):
        redo = partial_readout(logits[lost], selected[lost], values)
        out.m[lost], out.l[lost], out.acc[lost] = redo.m, redo.l, redo.acc
    return out


def membership(idx: torch.Tensor, n: int) -> torch.Tensor:
    """idx [S, k] (-1 pads) -> [S, n] bool, True on the listed entries."""
    slots = torch.where(idx >= 0, idx, n)                                     # pads -> spare column n
    mask = torch.zeros(idx.shape[0], n + 1, dtype=torch.bool, device=idx.device)
    return mask.scatter_(1, slots, True)[:, :n]

"""Visual-budget sweep: how much of the visual memory each draft state actually needs.

At every round of a greedy FOVEA decode, before the real round runs, the tree is re-drafted from
the same draft state with the memory restricted to the top 0 / 25 / 50 / 75 / 100 % of its
entries, ranked by importance = the root draft state's retrieval probability over entries
(0 % = correction off). Each probe tree is verified by the target and rolled back (forward, then
commit keeping none), so the real decode is untouched and stays lossless. The *preferred budget*
of a state is the smallest budget whose accept length reaches the maximum over budgets.
The real round itself is the 100 % probe (same state, same full memory, same tree), so its
accept length is reused rather than drafted twice.
"""
from __future__ import annotations

import dataclasses
from collections import Counter

import torch
from tqdm import tqdm

from fovea.analysis.rounds import analysis_config, by_family, is_early, mean
from fovea.config import FoveaConfig
from fovea.data import FAMILIES, Sample
from fovea.candidates import TreeDrafter
from fovea.decoding import Session, run, speculative_rounds, start, verify_tree
from fovea.memory import VisualMemory
from fovea.methods import FULL

FRACTIONS = (0.0, 0.25, 0.5, 0.75, 1.0)


def preferred_budget(accept_lengths: list[int], fractions=FRACTIONS) -> float:
    """Smallest budget (fractions ascending) whose accept length equals the maximum over budgets."""
    best = max(accept_lengths)
    return next(f for f, a in zip(fractions, accept_lengths) if a == best)


@torch.inference_mode()
def importance(drafter, session: Session, mode: str) -> torch.Tensor:
    """Root draft state's retrieval probability over memory entries [N] (0 on invalid entries)."""
    h = session.draft.root_state.to(drafter.device)[None]                   # [1, D]
    depth = torch.zeros(1, dtype=torch.long, device=drafter.device)
    scores = drafter.retriever.scores(h, depth, session.draft.memory, mode)  # [1, N], -inf on invalid
    return torch.softmax(scores, -1)[0]


def restrict(memory: VisualMemory, weight: torch.Tensor, fraction: float) -> VisualMemory | None:
    """The memory with only its top `fraction` of valid entries (by weight) left valid; None at 0
    (the drafter then skips retrieval and correction). At least one entry above 0 %."""
    if fraction <= 0:
        return None
    n = max(1, round(fraction * memory.size))
    keep = torch.zeros_like(memory.valid)
    keep[weight.masked_fill(~memory.valid, -1.0).topk(n).indices] = True
    return dataclasses.replace(memory, valid=memory.valid & keep)


@torch.inference_mode()
def probe_accept_length(target, session: Session, memory: VisualMemory | None, cfg: FoveaConfig) -> int:
    """Draft + verify one tree from the session's current state (`TreeSession.probe`), then drop the tree
    from the target cache (commit keeping none). Neither cache nor the session changes. Bonus token counted."""
    rng = torch.Generator().manual_seed(cfg.decoding.seed)   # never consume the real decode's RNG
    tree = session.draft.probe(session.root, memory, rng)
    _, accepted, _ = verify_tree(target, session.target_state, tree, cfg, rng)
    target.commit(session.target_state, len(tree.tokens), torch.empty(0, dtype=torch.long))
    return len(accepted) + 1


def sweep_sample(pipe, sample: Sample, cfg: FoveaConfig, fractions=FRACTIONS,
                 drafter_name: str = FULL.fovea) -> tuple[list[dict], list[int]]:
    """-> (one record per round with the accept length per budget, the generated tokens).

    The real decode is `speculative_rounds` itself: a generator does nothing until asked, so the
    probes run on the session exactly as the next real round will find it."""
    cfg = analysis_config(cfg)
    target, drafter = pipe.target, pipe.drafters[drafter_name]
    session = start(target, TreeDrafter(drafter_name, drafter), target.prepare(sample.image, sample.question), cfg)
    rounds = speculative_rounds(target, session, cfg)
    states = []
    while not session.done:
        weight = importance(drafter, session, cfg.retrieval.mode)
        probes = {f: probe_accept_length(target, session, restrict(session.draft.memory, weight, f), cfg)
                  for f in fractions if f < 1.0}
        real = next(rounds)                     # the full-memory round, committed as usual
        lengths = [probes.get(f, real.accept_length) for f in fractions]
        states.append({"family": sample.family, "round": real.iteration, "accept_lengths": lengths,
                       "preferred": preferred_budget(lengths, fractions)})
    for s in states:
        s["early"] = is_early(s["round"], len(states))
    return states, list(session.out)


def summarise_budget(states: list[dict], fractions=FRACTIONS) -> dict:
    def distribution(sub):
        counts = Counter(s["preferred"] for s in sub)
        return {_key(f): counts[f] / len(sub) if sub else None for f in fractions}

    def part(sub):
        return {"n_states": len(sub), "preferred_share": distribution(sub),
                "mean_preferred_budget": mean(s["preferred"] for s in sub),
                "mean_accept_length": {_key(f): mean(s["accept_lengths"][i] for s in sub)
                                       for i, f in enumerate(fractions)}}
    return {**part(states), "early": part([s for s in states if s["early"]]),
            "late": part([s for s in states if not s["early"]])}


def visual_budget_sweep(pipe, samples: list[Sample], cfg: FoveaConfig, fractions=FRACTIONS) -> dict:
    """Accept length per visual budget at every round; preferred-budget distribution over states,
    early vs late, per family. Budgets are keyed by percent ("0" ... "100")."""
    states, lossless = [], True
    ar_cfg = analysis_config(cfg).replace(decoding={"trace": False})
    for s in tqdm(samples, desc="budget sweep", dynamic_ncols=True, leave=False):
        got, tokens = sweep_sample(pipe, s, cfg, fractions)
        states += got
        # the probes' rollback must leave the real decode exactly autoregressive greedy
        ar = run(pipe.target, None, pipe.target.prepare(s.image, s.question), ar_cfg)
        lossless &= tokens == ar.tokens
    return {"budgets": [_key(f) for f in fractions], "decode_matches_autoregressive": lossless,
            **summarise_budget(states, fractions),
            "per_family": by_family(states, FAMILIES, lambda xs: summarise_budget(xs, fractions)),
            "states": [{k: s[k] for k in ("family", "round", "early", "accept_lengths", "preferred")}
                       for s in states]}


def _key(fraction: float) -> str:
    return str(round(fraction * 100))

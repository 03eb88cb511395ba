"""Per-round views of traced greedy FOVEA decodes, shared by the diagnostics.

`decode_traced` runs the ordinary decode loop once per sample (the analyses never fork it) and
keeps what the diagnostics read: the generated tokens and the `IterationTrace` of every round.
The helpers map rounds to output positions and split rounds into the early and late half of a
generation. Knows nothing about any one diagnostic.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass

from tqdm import tqdm

from fovea.config import FoveaConfig
from fovea.data import FAMILIES, Sample, eval_seeds, make_sample
from fovea.candidates import TreeDrafter
from fovea.decoding import run
from fovea.methods import FULL
from fovea.trace import IterationTrace, NodeRetrieval, PrefillTrace


@dataclass
class Decoded:
    """One sample's traced decode."""
    sample: Sample
    tokens: list[int]                 # generated ids, as GenerationResult.tokens
    rounds: list[IterationTrace]      # one per draft-verify round, in order
    prefill: PrefillTrace             # the record of the tokens before the rounds (GenerationResult.prefill)


def held_out(n: int, seeds=eval_seeds) -> list[Sample]:
    """The first n held-out samples, families round-robin (the same questions for every method);
    seeds=tuning_seeds gives the tuning questions of --tree-sweep, never benchmarked."""
    return [make_sample(s, family=FAMILIES[i % len(FAMILIES)]) for i, s in enumerate(seeds(n))]


def analysis_config(cfg: FoveaConfig, mode: str | None = None) -> FoveaConfig:
    """Greedy, traced decoding (the diagnostics read retrievals and need the lossless token stream);
    `mode` swaps the retrieval rule for the controls."""
    changes = {"decoding": {"greedy": True, "trace": True}}
    if mode is not None:
        changes["retrieval"] = {"mode": mode}
    return cfg.replace(**changes)


def decode_traced(pipe, samples: list[Sample], cfg: FoveaConfig, mode: str | None = None,
                  drafter: str = FULL.fovea) -> list[Decoded]:
    cfg = analysis_config(cfg, mode)
    out = []
    for s in tqdm(samples, desc=f"decode {mode or cfg.retrieval.mode}", dynamic_ncols=True, leave=False):
        prompt = pipe.target.prepare(s.image, s.question)
        result = run(pipe.target, TreeDrafter(drafter, pipe.drafters[drafter]), prompt, cfg)
        out.append(Decoded(s, result.tokens, result.iterations, result.prefill))
    return out


def root_retrieval(rec: IterationTrace) -> NodeRetrieval | None:
    """What the root draft state (node 0, which predicts the round's first emitted token) read."""
    return rec.retrieval.get(0)


def first_emitted_positions(prefill: PrefillTrace, rounds: list[IterationTrace]) -> list[int]:
    """Index in the generated tokens of each round's first emitted token: the prefill's come first, and
    a round always emits >= 1 token."""
    pos, out = len(prefill.emitted), []
    for rec in rounds:
        out.append(pos)
        pos += len(rec.emitted)
    return out


def is_early(index: int, count: int) -> bool:
    """First half of `count` ordered items (rounds, or adjacent-round pairs)."""
    return index < count / 2


def mean(values) -> float | None:
    values = list(values)
    return statistics.fmean(values) if values else None


def by_family(items: list[dict], families, summarise) -> dict:
    """{family: summarise(items of that family)} for families that have items."""
    out = {}
    for fam in families:
        sub = [x for x in items if x["family"] == fam]
        if sub:
            out[fam] = summarise(sub)
    return out

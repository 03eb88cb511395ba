"""The paper's decoding diagnostics plus one new one, each a function over a pipeline and held-out
samples that returns plain (JSON-ready) dicts:

- `visual_budget_sweep`: accept length with 0-100 % of the visual memory, preferred budget per state;
- `focus_drift`: Top-16 Jaccard distance between adjacent rounds' retrieved sets;
- `grounding`: retrieval mass on the object the next token names, FOVEA vs retrieval controls (new);
- `k_distribution`: cumulative-mass K per task family.

`run_analyses` runs them all, sharing one traced decode per retrieval mode; `fovea.analysis.report`
renders the result. Everything here reads the decode loop's traces or drives its public calls; the
decode loop itself is never copied or changed.
"""
from __future__ import annotations

import time

from fovea.analysis.budget import FRACTIONS, preferred_budget, visual_budget_sweep
from fovea.analysis.focus import focus_drift, jaccard_distance, k_distribution
from fovea.analysis.grounding import CONTROL_MODES, grounding
from fovea.analysis.rounds import decode_traced
from fovea.config import FoveaConfig

ANALYSES = ("visual_budget", "focus_drift", "grounding", "k_distribution")


def run_analyses(pipe, samples, cfg: FoveaConfig, modes=("cumulative", *CONTROL_MODES),
                 fractions=FRACTIONS) -> dict:
    """All four diagnostics on `samples`; FOVEA traces are decoded once and shared by drift, K and
    grounding. Returns {name: result} plus "meta" (sizes, seconds per analysis)."""
    seconds = {}
    t0 = time.perf_counter()
    fovea = decode_traced(pipe, samples, cfg)
    out = {"focus_drift": focus_drift(pipe, samples, cfg, fovea),
           "k_distribution": k_distribution(pipe, samples, cfg, fovea)}
    seconds["fovea_decode"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    out["grounding"] = grounding(pipe, samples, cfg, modes, {"cumulative": fovea})
    seconds["grounding"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    out["visual_budget"] = visual_budget_sweep(pipe, samples, cfg, fractions)
    seconds["visual_budget"] = time.perf_counter() - t0
    out["meta"] = {"n_samples": len(samples), "max_new_tokens": cfg.decoding.max_new_tokens,
                   "families": sorted({s.family for s in samples}), "seconds": seconds}
    return out


__all__ = ["ANALYSES", "CONTROL_MODES", "FRACTIONS", "decode_traced", "focus_drift", "grounding",
           "jaccard_distance", "k_distribution", "preferred_budget", "run_analyses", "visual_budget_sweep"]

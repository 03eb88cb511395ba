"""Where the drafter looks, round by round: focus drift and the cumulative-mass K distribution.

Focus drift is the paper's Top-16 Jaccard distance between the entries retrieved by the root
draft states of adjacent rounds (0 = same set, 1 = disjoint). A static memory readout would have
drift 0; FOVEA's claim is that the focus moves as the answer moves across the image. The K
distribution is how many entries the cumulative-mass rule (smallest set reaching rho, clamped to
[K_min, K_max]) selected at root states, per task family. Both read traces only.
"""
from __future__ import annotations

from collections import Counter

from fovea.analysis.rounds import Decoded, by_family, decode_traced, is_early, mean, root_retrieval
from fovea.config import FoveaConfig
from fovea.data import FAMILIES
from fovea.trace import JACCARD_TOP, Accumulator, jaccard_distance, top_set

TOP_N = JACCARD_TOP
__all__ = ["TOP_N", "drift_pairs", "focus_drift", "jaccard_distance", "k_distribution", "summarise_drift",
           "summarise_k", "top_set"]


def drift_pairs(decoded: list[Decoded], top_n: int = TOP_N) -> list[dict]:
    """One record per pair of adjacent rounds whose root states both retrieved (the accumulator's
    focus drift; pairs never cross samples: drift is within one answer)."""
    pairs = []
    for d in decoded:
        drift = Accumulator().extend(d.rounds).focus_drift(top_n)
        for i, distance in enumerate(drift):
            if distance is not None:
                pairs.append({"family": d.sample.family, "early": is_early(i, len(drift)), "distance": distance})
    return pairs


def summarise_drift(pairs: list[dict]) -> dict:
    return {"mean": mean(p["distance"] for p in pairs),
            "early": mean(p["distance"] for p in pairs if p["early"]),
            "late": mean(p["distance"] for p in pairs if not p["early"]),
            "n_pairs": len(pairs)}


def focus_drift(pipe, samples, cfg: FoveaConfig, decoded: list[Decoded] | None = None,
                top_n: int = TOP_N) -> dict:
    """Top-n Jaccard distance between adjacent rounds' root retrievals: overall, early vs late
    (first vs second half of a generation's round pairs), and per family."""
    decoded = decoded if decoded is not None else decode_traced(pipe, samples, cfg)
    pairs = drift_pairs(decoded, top_n)
    return {"top_n": top_n, **summarise_drift(pairs), "per_family": by_family(pairs, FAMILIES, summarise_drift)}


def summarise_k(ks: list[int]) -> dict:
    hist = Counter(ks)
    return {"mean": mean(ks), "n_states": len(ks), "hist": {str(k): hist[k] for k in sorted(hist)}}


def k_distribution(pipe, samples, cfg: FoveaConfig, decoded: list[Decoded] | None = None) -> dict:
    """Histogram (K -> count of root states) and mean K, per task family and over all."""
    decoded = decoded if decoded is not None else decode_traced(pipe, samples, cfg)
    items = [{"family": d.sample.family, "k": r.k} for d in decoded
             for r in map(root_retrieval, d.rounds) if r is not None]
    out = by_family(items, FAMILIES, lambda xs: summarise_k([x["k"] for x in xs]))
    out["all"] = summarise_k([x["k"] for x in items])
    return {"per_family": out, "k_min": cfg.retrieval.k_min, "k_max": cfg.retrieval.k_max, "rho": cfg.retrieval.rho}

"""Benchmark statistics over result rows (one per question and method): speedups as ratios of
median wall times against autoregressive decoding, tau, per-round milliseconds, losslessness,
the ranking of trained drafters and what the correction buys. Pure functions over dicts.
"""
from __future__ import annotations

import statistics

from fovea.methods import CONTEXTS, METHODS, TRAINED_DRAFTERS
from fovea.data import FAMILIES


def summarise(rows: list[dict], methods: list[str]) -> dict:
    """rows: one per (question, method). -> {family: {method: metrics}} plus an "all" family."""
    out = {}
    for fam in [*FAMILIES, "all"]:
        fam_rows = [r for r in rows if fam == "all" or r["family"] == fam]
        if not fam_rows:
            continue
        ar = {r["q"]: r for r in fam_rows if r["method"] == "autoregressive"}
        out[fam] = {}
        for m in methods:
            mr = [r for r in fam_rows if r["method"] == m]
            wall = [r["wall_s"] for r in mr]
            per_q = [ar[r["q"]]["wall_s"] / r["wall_s"] for r in mr if r["q"] in ar]
            taus = [t for r in mr for t in r["accept_lengths"]]
            iters = [it for r in mr for it in r["iter_ms"]]
            out[fam][m] = {
                "n": len(mr),
                "speedup_ratio_of_medians": statistics.median(ar[q]["wall_s"] for q in ar) / statistics.median(wall)
                if ar else None,
                "speedup_median_per_question": statistics.median(per_q) if per_q else None,
                "tau_with_bonus": statistics.mean(taus) if taus else None,
                "tau_without_bonus": statistics.mean(taus) - 1 if taus else None,
                "tokens_per_s": sum(r["n_tokens"] for r in mr) / sum(wall),
                "draft_ms": statistics.median(i[0] for i in iters) if iters else None,
                "verify_ms": statistics.median(i[1] for i in iters) if iters else None,
                "commit_ms": statistics.median(i[2] for i in iters) if iters else None,
                "lossless": all(r["identical_to_ar"] for r in mr),
                "acceptance_by_position": acceptance_by_position(taus) if m != "autoregressive" else [],
            }
    return out


def acceptance_by_position(accept_lengths: list[int]) -> list[float]:
    """Per draft position d = 1, 2, ... the acceptance rate at d: of the rounds that accepted the
    first d-1 draft tokens, the share that accepted token d too. A round's accept length counts the
    bonus token, so it accepted `length - 1` draft tokens; positions no round reached are left out.
    (The product of the first d rates is the share of rounds that accepted d or more.)"""
    accepted = [n - 1 for n in accept_lengths]
    rates, d = [], 1
    while (reached := sum(a >= d - 1 for a in accepted)) and d <= max(accepted, default=0) + 1:
        rates.append(sum(a >= d for a in accepted) / reached)
        d += 1
    return rates


def family_mean_speedup(summary: dict, method: str) -> float | None:
    """Speedup (ratio of medians) averaged over the task families (not over questions)."""
    vals = [per[method]["speedup_ratio_of_medians"] for fam, per in summary.items()
            if fam != "all" and per.get(method, {}).get("speedup_ratio_of_medians") is not None]
    return statistics.mean(vals) if vals else None


def ranking(summary: dict, methods: list[str]) -> list[dict]:
    """The methods with a trained drafter, best first by speedup averaged over task families."""
    scored = [{"method": m, "mean_speedup": family_mean_speedup(summary, m)} for m in methods
              if m in TRAINED_DRAFTERS or m not in METHODS]   # a --drafters NAME is a trained drafter too
    return sorted((r for r in scored if r["mean_speedup"] is not None), key=lambda r: -r["mean_speedup"])




def correction_gain(summary: dict, methods: list[str]) -> list[dict]:
    """Per drafter context whose pair ran (FOVEA and its "- correction" ablation): FOVEA's pooled speedup
    over its ablation's (both ratios of medians against the same autoregressive runs) and the two tau
    (bonus counted)."""
    out = []
    for c in CONTEXTS.values():
        with_c, without = c.fovea, c.twin
        if with_c in methods and without in methods:
            a, b = summary["all"][with_c], summary["all"][without]
            sa, sb = a["speedup_ratio_of_medians"], b["speedup_ratio_of_medians"]
            out.append({"context": c.name, "fovea": with_c, "ablation": without, "gain": sa / sb if sa and sb else None,
                        "tau": a["tau_with_bonus"], "tau_ablation": b["tau_with_bonus"],
                        "family_gain": {fam: (summary[fam][with_c]["speedup_ratio_of_medians"] or 0)
                                        / (summary[fam][without]["speedup_ratio_of_medians"] or float("inf"))
                                        for fam in summary if fam != "all"}})
    return out

"""`python -m fovea.bench --profile`: where a FOVEA round's time goes, and what tracing costs.

The decode loop is run with a `fovea.profile.Clock` whose laps split every round into the
drafter's stages per tree level (drafter blocks, head, retrieval, correction, tree bookkeeping,
final selection), the target's verify, and the commit (target cache surgery, then the drafter's
cache extended with the accepted pairs). Autoregressive decoding of the same questions
gives the per-token cost a round competes with. The tracing overhead is FOVEA's wall time with
tracing on over tracing off, the two interleaved per question (order alternated) and repeated.
Writes profile.json and profile.md; the numbers are measured, none are assumed.
"""
from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

from fovea.candidates import TreeDrafter
from fovea.config import FoveaConfig
from fovea.decoding import run
from fovea.profile import Clock

DRAFT_STAGES = ("draft/blocks", "draft/head", "draft/retrieval", "draft/correction", "draft/tree")
# commit/target: the target cache keeps root + accepted path; commit/drafter: the drafter caches the new pairs
ROUND_STAGES = (*DRAFT_STAGES, "draft/setup", "draft/select", "verify", "commit/target", "commit/drafter")


def profile_rounds(pipe, samples, cfg: FoveaConfig, drafter: str = "fovea") -> dict:
    """Per-round and per-level milliseconds of FOVEA decoding (tracing off) on `samples`."""
    strategy = TreeDrafter(drafter, pipe.drafters[drafter])
    prompts = [pipe.target.prepare(s.image, s.question) for s in samples]
    run(pipe.target, strategy, prompts[0], cfg)                      # warm-up: first-call allocations
    clock, rounds, taus, ar_ms, ar_tokens = Clock(), 0, [], 0.0, 0
    for p in prompts:
        result = run(pipe.target, strategy, p, cfg, clock=clock)
        rounds += len(result.iterations)
        taus += result.accept_lengths
        ar = run(pipe.target, None, p, cfg)
        ar_ms += sum(step.ms for step in ar.iterations)
        ar_tokens += len(ar.iterations)
    total = {stage: 0.0 for stage in ROUND_STAGES}
    per_level: dict[str, dict[int, float]] = {stage: {} for stage in DRAFT_STAGES}
    for (stage, level), seconds in clock.seconds.items():
        total[stage] = total.get(stage, 0.0) + seconds
        if stage in per_level:
            per_level[stage][level] = 1e3 * seconds / clock.calls[(stage, level)]
    per_round = {stage: 1e3 * s / rounds for stage, s in total.items()}
    draft = sum(v for k, v in per_round.items() if k.startswith("draft/"))
    corrected = sum(clock.calls[key] for key in clock.calls if key[0] == "draft/correction")
    return {"rounds": rounds, "tau_with_bonus": statistics.mean(taus), "per_round_ms": per_round,
            "draft_ms_per_round": draft, "draft_ms_per_level": draft / cfg.tree.depth,
            "correction_ms_per_corrected_level": 1e3 * sum(s for k, s in clock.seconds.items()
                                                           if k[0] == "draft/correction") / max(1, corrected),
            "per_level_ms": {stage: {str(k): v for k, v in sorted(levels.items())}
                             for stage, levels in per_level.items()},
            "autoregressive_ms_per_token": ar_ms / max(1, ar_tokens)}


def tracing_overhead(pipe, samples, cfg: FoveaConfig, repeats: int = 3, drafter: str = "fovea") -> dict:
    """FOVEA wall time with tracing on vs off, interleaved per question with the order alternated."""
    strategy = TreeDrafter(drafter, pipe.drafters[drafter])
    on, off = cfg.replace(decoding={"trace": True}), cfg.replace(decoding={"trace": False})
    walls = {"on": [], "off": []}
    for r in range(repeats):
        for i, s in enumerate(samples):
            prompt = pipe.target.prepare(s.image, s.question)
            order = (("on", on), ("off", off)) if (i + r) % 2 == 0 else (("off", off), ("on", on))
            for name, c in order:
                t0 = time.perf_counter()
                run(pipe.target, strategy, prompt, c)
                walls[name].append(time.perf_counter() - t0)
    ratios = [a / b for a, b in zip(walls["on"], walls["off"])]
    return {"runs_per_setting": len(walls["on"]), "sum_on_s": sum(walls["on"]), "sum_off_s": sum(walls["off"]),
            "overhead_total": sum(walls["on"]) / sum(walls["off"]) - 1,
            "overhead_median_per_question": statistics.median(ratios) - 1}


def profile_markdown(p: dict, t: dict, meta: dict) -> str:
    r = p["per_round_ms"]
    round_ms = sum(r.values())
    lines = [f"Profile {meta['date']} on {meta['machine']}; {meta['n_questions']} held-out questions, max "
             f"{meta['max_new_tokens']} new tokens, greedy, tree depth {meta['tree']['depth']} / top-k "
             f"{meta['tree']['top_k']} / {meta['tree']['total_tokens']} nodes. Command: `{meta['command']}`", "",
             f"{p['rounds']} FOVEA rounds, tau {p['tau_with_bonus']:.2f} (bonus counted); autoregressive decoding "
             f"{p['autoregressive_ms_per_token']:.2f} ms per token.", "",
             "| stage | ms per round | share |", "|---|---|---|"]
    lines += [f"| {stage} | {ms:.3f} | {ms / round_ms:.0%} |" for stage, ms in r.items()]
    lines += [f"| **round** | **{round_ms:.2f}** | |", "",
              f"Draft: {p['draft_ms_per_round']:.2f} ms per round, {p['draft_ms_per_level']:.2f} ms per level; "
              f"correction {p['correction_ms_per_corrected_level']:.3f} ms per corrected level.", "",
              "Per level (ms per call):", "", "| level | " + " | ".join(s.split("/")[1] for s in DRAFT_STAGES) + " |",
              "|" + "---|" * (len(DRAFT_STAGES) + 1)]
    levels = sorted({int(k) for v in p["per_level_ms"].values() for k in v} - {0})
    for lv in levels:
        cells = [p["per_level_ms"][s].get(str(lv)) for s in DRAFT_STAGES]
        lines.append(f"| {lv} | " + " | ".join("-" if c is None else f"{c:.3f}" for c in cells) + " |")
    lines += ["", f"Tracing overhead (FOVEA, tracing on vs off, {t['runs_per_setting']} interleaved runs each): "
                  f"{100 * t['overhead_total']:+.1f}% total wall time, "
                  f"{100 * t['overhead_median_per_question']:+.1f}% median per question."]
    return "\n".join(lines) + "\n"


def write_profile(out: Path, p: dict, t: dict, meta: dict) -> str:
    out.mkdir(parents=True, exist_ok=True)
    md = profile_markdown(p, t, meta)
    (out / "profile.json").write_text(json.dumps({"meta": meta, "profile": p, "tracing": t}, indent=1))
    (out / "profile.md").write_text(md)
    return md

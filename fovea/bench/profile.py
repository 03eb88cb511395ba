"""`python -m fovea.bench --profile`: where a FOVEA round's time goes, and what tracing costs.

The decode loop is run with a `fovea.profile.Clock` whose laps split every round into the
drafter's stages per tree level (drafter blocks, head, retrieval, correction, tree bookkeeping,
final selection), the target's verify, and the commit (target cache surgery, then the drafter's
cache extended with the accepted pairs). Autoregressive decoding of the same questions
gives the per-token cost a round competes with. The tracing overhead is FOVEA's wall time with
tracing on over tracing off, the two interleaved per question (order alternated) and repeated.
The cost curves time one target forward over a tree of n nodes after a real prefill (n = 1 is an
autoregressive step) and one drafter step over w tree nodes, so a round's cost can be read in
target steps: on a small target on 2 CPU cores a 16-node verification is arithmetic, not just
per-call overhead, and no drafter, however good, is free. With `compile_check`, the drafter
block's eager call is compared with `torch.compile`'s (compile time included).
Writes profile.json and profile.md; the numbers are measured, none are assumed.
"""
from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

import torch

from fovea.candidates import TreeDrafter
from fovea.config import FoveaConfig
from fovea.decoding import run
from fovea.draft import _draft_chain, _draft_levels, extend
from fovea.methods import CONTEXTS, FULL
from fovea.profile import NO_CLOCK, Clock, interleaved_order
from fovea.tree import ancestors_of

CURVE_NODES = (1, 2, 4, 8, 16, 32)
CURVE_WIDTHS = (1, 2, 4, 8)
CHAIN_LEVELS = 16          # the chain proposal timed both ways (`cost_curves`)

DRAFT_STAGES = ("draft/blocks", "draft/head", "draft/trigger", "draft/retrieval", "draft/correction", "draft/tree")
# commit/target: the target cache keeps root + accepted path; commit/drafter: the drafter caches the new pairs
ROUND_STAGES = (*DRAFT_STAGES, "draft/setup", "draft/select", "verify", "commit/target", "commit/drafter")


def profile_rounds(pipe, samples, cfg: FoveaConfig, drafter: str = FULL.fovea) -> dict:
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


# --cost-split: each FOVEA decode setting beside its no-correction twin, and the stages only FOVEA runs
COST_PAIRS = tuple((fovea, c.twin) for c in CONTEXTS.values() for fovea in c.settings)
CORRECTION_STAGES = ("draft/trigger", "draft/retrieval", "draft/correction")


def cost_split(pipe, samples, table: dict, base: FoveaConfig, pairs=COST_PAIRS) -> dict:
    """Where each method of `pairs` spends a decode round, all methods interleaved per question (order
    rotated), each with its own Clock per task family: per-round ms of every stage, drafter expansions and
    corrected levels per round, tau, and decode ms per generated token (the rounds' stages over their
    tokens, prefill excluded). Per pair, pooled and per family, FOVEA's decode speed over its twin's as
    measured, and with the stages only FOVEA runs (CORRECTION_STAGES) taken as free: whether a cheaper
    correction alone could reach a speed bar, given how many levels, nodes and tokens FOVEA's rounds have."""
    from fovea.bench.methods import strategy_for

    pairs = [p for p in pairs if all(table[m].drafter in pipe.drafters for m in p)]
    methods = list(dict.fromkeys(m for p in pairs for m in p))
    prompts = [pipe.target.prepare(s.image, s.question) for s in samples]
    families = sorted({s.family for s in samples})
    strategies = {m: strategy_for(pipe, table[m]) for m in methods}
    for m in methods:                                                # warm-up: first-call allocations
        run(pipe.target, strategies[m], prompts[0], base)
    clocks = {(m, f): Clock() for m in methods for f in families}
    rounds = {key: 0 for key in clocks}
    taus: dict[tuple, list[int]] = {key: [] for key in clocks}
    for i, (p, s) in enumerate(zip(prompts, samples)):
        for m in interleaved_order(methods, i):
            key = (m, s.family)
            clocks[key].start()
            result = run(pipe.target, strategies[m], p, base, clock=clocks[key])
            rounds[key] += len(result.iterations)
            taus[key] += result.accept_lengths

    def summary(m: str, fams) -> dict:
        n = max(1, sum(rounds[(m, f)] for f in fams))
        stages: dict[str, float] = {}
        expansions = corrected = 0
        for f in fams:
            c = clocks[(m, f)]
            for (stage, _), seconds in c.seconds.items():
                stages[stage] = stages.get(stage, 0.0) + 1e3 * seconds / n
            expansions += sum(v for k, v in c.calls.items() if k[0] == "draft/blocks")
            corrected += sum(v for k, v in c.calls.items() if k[0] == "draft/correction")
        accepted = [a for f in fams for a in taus[(m, f)]]
        round_ms, tokens = sum(stages.values()), max(1, sum(accepted))
        return {"rounds": n, "tokens": tokens, "tau_with_bonus": statistics.mean(accepted) if accepted else 0.0,
                "per_round_ms": stages, "round_ms": round_ms, "expansions_per_round": expansions / n,
                "corrected_levels_per_round": corrected / n, "decode_ms_per_token": round_ms * n / tokens,
                "correction_ms_per_round": sum(stages.get(k, 0.0) for k in CORRECTION_STAGES)}

    def compare(f: dict, t: dict) -> dict:
        free = (f["round_ms"] - f["correction_ms_per_round"]) * f["rounds"] / f["tokens"]
        return {"tau_ratio": f["tau_with_bonus"] / max(1e-9, t["tau_with_bonus"]),
                "speed_ratio": t["decode_ms_per_token"] / f["decode_ms_per_token"],
                "speed_ratio_free_correction": t["decode_ms_per_token"] / free}

    per_method = {m: summary(m, families) for m in methods}
    per_family = {fam: {m: summary(m, [fam]) for m in methods} for fam in families}
    out = [{"fovea": f, "twin": t, **compare(per_method[f], per_method[t]),
            "families": {fam: compare(per_family[fam][f], per_family[fam][t]) for fam in families}}
           for f, t in pairs]
    return {"questions": len(prompts), "families": families, "methods": per_method, "per_family": per_family,
            "pairs": out}


def cost_split_markdown(split: dict, meta: dict) -> str:
    methods, pairs = split["methods"], split["pairs"]
    stages = [s for s in ROUND_STAGES if any(s in m["per_round_ms"] for m in methods.values())]
    lines = [f"Cost split {meta['date']} on {meta['machine']}; {split['questions']} tuning questions "
             f"(fovea.data.tuning_seeds), max {meta['max_new_tokens']} new tokens, greedy, every method interleaved "
             f"per question. Command: `{meta['command']}`", "",
             "Per method: ms per decode round by stage (trigger: the trigger's check, the corrected rows' second "
             "head and their bookkeeping), drafter expansions (block calls) and corrected levels per round, tau "
             "with the bonus token, and decode ms per generated token (prefill excluded).", "",
             "| method | tau | expansions | corrected levels | " + " | ".join(s.split("/")[-1] if s.startswith("draft/")
                                                                                 else s for s in stages)
             + " | round ms | ms / token |", "|" + "---|" * (len(stages) + 6)]
    for name, m in methods.items():
        cells = [f"{m['per_round_ms'][s]:.2f}" if s in m["per_round_ms"] else "-" for s in stages]
        lines.append(f"| {name} | {m['tau_with_bonus']:.2f} | {m['expansions_per_round']:.2f} | "
                     f"{m['corrected_levels_per_round']:.2f} | " + " | ".join(cells)
                     + f" | {m['round_ms']:.2f} | {m['decode_ms_per_token']:.3f} |")
    lines += ["", "Per pair: FOVEA's decode speed over its twin's as measured, and with the stages only FOVEA runs "
                  "(trigger, retrieval, correction) taken as free. The second is the most any cheaper correction "
                  "could give with these rounds: the same levels, tree nodes and accepted tokens.", "",
              "| FOVEA | twin | tau ratio | speed ratio | with a free correction | "
              + " | ".join(f"{fam}: tau / speed / free" for fam in split["families"]) + " |",
              "|" + "---|" * (5 + len(split["families"]))]
    for p in pairs:
        fams = [f"{c['tau_ratio']:.2f} / {c['speed_ratio']:.2f}x / {c['speed_ratio_free_correction']:.2f}x"
                for c in p["families"].values()]
        lines.append(f"| {p['fovea']} | {p['twin']} | {p['tau_ratio']:.3f} | {p['speed_ratio']:.3f}x | "
                     f"{p['speed_ratio_free_correction']:.3f}x | " + " | ".join(fams) + " |")
    return "\n".join(lines) + "\n"


def write_cost_split(out: Path, split: dict, meta: dict) -> str:
    out.mkdir(parents=True, exist_ok=True)
    md = cost_split_markdown(split, meta)
    (out / "results.json").write_text(json.dumps({"meta": meta, "split": split}, indent=1))
    (out / "results.md").write_text(md)
    return md


def _call_ms(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return 1e3 * (time.perf_counter() - t0)


def _median_ms(fn, repeats: int) -> float:
    return statistics.median(_call_ms(fn) for _ in range(repeats))


def _binary_tree(n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A balanced binary tree of n nodes (root 0): its ancestor mask [n, n] and depths [n]."""
    mask = ancestors_of([-1] + [(i - 1) // 2 for i in range(1, n)])
    return mask, mask.sum(1) - 1


@torch.inference_mode()
def cost_curves(pipe, sample, drafter: str = FULL.fovea, repeats: int = 40, nodes=CURVE_NODES,
                widths=CURVE_WIDTHS) -> dict:
    """Median ms of one target forward over a binary tree of n nodes after `sample`'s prefill (the cache
    is cut back after each call), and of one drafter step over w tree nodes after the prompt's pairs;
    the sizes interleaved, `repeats` calls each."""
    target, model = pipe.target, pipe.drafters[drafter]
    prompt = target.prepare(sample.image, sample.question)
    state, out = target.prefill(prompt)
    vocab = min(target.vocab_size, 1000)
    trees = {n: _binary_tree(n) for n in nodes}
    tokens = {n: torch.randint(0, vocab, (n,), generator=torch.Generator().manual_seed(n)) for n in nodes}

    def verify(n):
        target.forward(state, tokens[n], trees[n][1], trees[n][0] if n > 1 else None)
        target.commit(state, n, torch.empty(0, dtype=torch.long))

    ids = prompt.input_ids[0]
    first = out.logits[-1].argmax()[None]
    dstate = extend(model, None, torch.cat([ids[1:], first]), out.hidden, capacity=ids.shape[0] + 64)
    d = model.cfg.hidden_size
    feats = {w: torch.randn(1, w, d, generator=torch.Generator().manual_seed(w)) for w in widths}
    masks = {w: torch.ones(1, 1, w, dstate.length + w, dtype=torch.bool) for w in widths}

    def draft(w):
        model.step(tokens[max(nodes)][:w][None], feats[w], torch.full((1, w), dstate.next_pos), masks[w],
                   buffers=dstate.buffers, at=dstate.length, max_pos=dstate.next_pos)

    # a CHAIN_LEVELS-level chain proposal (no correction, no early stop) through the general level loop
    # and through the chain path (`fovea.draft._draft_chain`): the per-level tree bookkeeping it skips
    chain_cfg = FoveaConfig().replace(tree=dict(depth=CHAIN_LEVELS, top_k=1, total_tokens=CHAIN_LEVELS, stop_below=0.0),
                                      correction=dict(enabled=False))
    paths = {"level_loop": _draft_levels, "chain_path": _draft_chain}
    root = int(first)

    verify_ms = {n: [] for n in nodes}
    draft_ms = {w: [] for w in widths}
    chain_ms = {name: [] for name in paths}
    for r in range(repeats):                         # interleaved: drift hits every size alike
        for n in nodes:
            verify_ms[n].append(_call_ms(lambda: verify(n)))
        for w in widths:
            draft_ms[w].append(_call_ms(lambda: draft(w)))
        for name in (list(paths) if r % 2 else list(paths)[::-1]):
            chain_ms[name].append(_call_ms(lambda: paths[name](model, dstate, root, None, chain_cfg, False, None,
                                                               NO_CLOCK)))
    verify_med = {str(n): statistics.median(v) for n, v in verify_ms.items()}
    return {"context_tokens": state.length, "target_forward_ms": verify_med,
            "drafter_step_ms": {str(w): statistics.median(v) for w, v in draft_ms.items()},
            "target_forward_in_steps": {n: v / verify_med["1"] for n, v in verify_med.items()},
            "chain_proposal_ms": {"levels": CHAIN_LEVELS, **{k: statistics.median(v) for k, v in chain_ms.items()}}}


def compile_check(pipe, drafter: str = FULL.fovea, width: int = 2, context: int = 200, repeats: int = 300) -> dict:
    """The drafter block's eager call against `torch.compile(dynamic=True)`'s, at `width` tree nodes over
    `context` cached pairs: compile seconds (first call), then the median ms of each."""
    model = pipe.drafters[drafter]
    block, d = model.blocks[0], model.cfg.hidden_size
    buffers = model.new_buffers(context + 64)
    x = torch.randn(1, width, d, generator=torch.Generator().manual_seed(0))
    pos = torch.full((1, width), context)
    mask = torch.ones(1, 1, width, context + width, dtype=torch.bool)
    with torch.inference_mode():
        rope = model._rope(pos, context)
        eager = lambda: block(x, rope, mask, None, buffers[0], context)
        _median_ms(eager, 20)
        eager_ms = _median_ms(eager, repeats)
        t0 = time.perf_counter()
        compiled = torch.compile(block, dynamic=True)
        compiled(x, rope, mask, None, buffers[0], context)
        compile_s = time.perf_counter() - t0
        call = lambda: compiled(x, rope, mask, None, buffers[0], context)
        _median_ms(call, 20)
        compiled_ms = _median_ms(call, repeats)
    return {"width": width, "context": context, "eager_ms": eager_ms, "compiled_ms": compiled_ms,
            "compile_seconds": compile_s, "torch": torch.__version__}


def int8_drafter(model):
    """A copy of a drafter whose block projections o, gate_up and down hold int8 weights (torch's dynamic
    quantization: int8 weights, activations quantized per call). q and kv stay fp32: decoding multiplies
    them as one fused weight. Drafts may differ a little; verification keeps the output lossless."""
    import copy
    import warnings

    from torch import nn

    q = copy.deepcopy(model)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for block in q.blocks:
            for name in ("o", "gate_up", "down"):
                setattr(block, name, torch.ao.quantization.quantize_dynamic(
                    nn.Sequential(getattr(block, name)), {nn.Linear}, dtype=torch.qint8))
    return q


def lever_check(pipe, samples, cfg: FoveaConfig, drafter: str = FULL.twin, repeats: int = 2) -> dict:
    """Two levers on the per-level cost, end to end: ms per generated token (median over questions x
    repeats, all settings interleaved per question) of autoregressive decoding and of the tree drafter
    `drafter` (correction off) at 2 and at 1 torch threads, and of the same drafter with int8 block
    weights (`int8_drafter`) at 2 threads; tau beside each."""
    settings = {"2 threads": (2, drafter), "1 thread": (1, drafter), "int8, 2 threads": (2, "int8")}
    drafters = {drafter: pipe.drafters[drafter], "int8": int8_drafter(pipe.drafters[drafter])}
    c = cfg.replace(correction={"enabled": False})
    prompts = [pipe.target.prepare(s.image, s.question) for s in samples]
    before = torch.get_num_threads()
    ms = {(name, m): [] for name in settings for m in ("autoregressive", "drafter")}
    taus = {name: [] for name in settings}
    try:
        for r in range(repeats + 1):                                  # round 0 warms every setting up
            for i, p in enumerate(prompts if r else prompts[:1]):
                for name in interleaved_order(list(settings), i + r):
                    threads, d = settings[name]
                    torch.set_num_threads(threads)
                    for m, strategy in (("autoregressive", None), ("drafter", TreeDrafter(d, drafters[d]))):
                        t0 = time.perf_counter()
                        out = run(pipe.target, strategy, p, c)
                        if r:
                            ms[(name, m)].append(1e3 * (time.perf_counter() - t0) / max(1, len(out.tokens)))
                            if strategy is not None:
                                taus[name] += out.accept_lengths
    finally:
        torch.set_num_threads(before)
    rows = {}
    for name in settings:
        ar, dr = statistics.median(ms[(name, "autoregressive")]), statistics.median(ms[(name, "drafter")])
        rows[name] = {"autoregressive_ms_per_token": ar, "drafter_ms_per_token": dr, "speedup": ar / dr,
                      "tau_with_bonus": statistics.mean(taus[name])}
    base = rows["2 threads"]
    return {"drafter": drafter, "questions": len(prompts), "repeats": repeats, "settings": rows,
            "int8_vs_fp32_drafter": base["drafter_ms_per_token"] / rows["int8, 2 threads"]["drafter_ms_per_token"]}


def tracing_overhead(pipe, samples, cfg: FoveaConfig, repeats: int = 3, drafter: str = FULL.fovea) -> dict:
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


def curves_markdown(c: dict, p: dict, meta: dict) -> list[str]:
    """The cost curves and what they bound: a round in target steps, and the speedup with a free drafter."""
    step = c["target_forward_ms"]["1"]
    nodes = meta["tree"]["total_tokens"] + 1            # the root plus the kept draft nodes
    lines = ["", f"Cost curves (one call, median of interleaved repeats, after a {c['context_tokens']}-token prefill):",
             "", "| target forward, nodes | " + " | ".join(c["target_forward_ms"]) + " |",
             "|" + "---|" * (len(c["target_forward_ms"]) + 1),
             "| ms | " + " | ".join(f"{v:.2f}" for v in c["target_forward_ms"].values()) + " |",
             "| in one-token steps | " + " | ".join(f"{v:.2f}" for v in c["target_forward_in_steps"].values()) + " |",
             "", "| drafter step, tree nodes | " + " | ".join(c["drafter_step_ms"]) + " |",
             "|" + "---|" * (len(c["drafter_step_ms"]) + 1),
             "| ms | " + " | ".join(f"{v:.3f}" for v in c["drafter_step_ms"].values()) + " |",
             "| in one-token target steps | " + " | ".join(f"{v / step:.2f}" for v in c["drafter_step_ms"].values())
             + " |"]
    if "chain_proposal_ms" in c:
        ch = c["chain_proposal_ms"]
        lines += ["", f"A {ch['levels']}-level chain proposal (no correction): {ch['chain_path']:.2f} ms through the "
                      f"chain path, {ch['level_loop']:.2f} ms through the general level loop."]
    r = p["per_round_ms"]
    verify_commit = r["verify"] + r["commit/target"] + r["commit/drafter"]
    ar = p["autoregressive_ms_per_token"]
    lines += ["", f"A round of this profile costs {sum(r.values()) / ar:.1f} autoregressive tokens' time for "
                  f"tau {p['tau_with_bonus']:.2f}: verify + commit alone {verify_commit / ar:.1f}, drafting "
                  f"{p['draft_ms_per_round'] / ar:.1f}. With a free drafter the same tau would give at most "
                  f"{p['tau_with_bonus'] * ar / verify_commit:.2f}x; a {nodes}-node forward costs "
                  f"{c['target_forward_in_steps'].get(str(nodes), float('nan')):.2f} one-token steps here."]
    return lines


def levers_markdown(lv: dict) -> list[str]:
    lines = ["", f"Levers on the per-level cost (`--lever-check`: the {lv['drafter']} tree drafter end to end, "
                 f"{lv['questions']} questions x {lv['repeats']} repeats interleaved; ms per generated token, median):",
             "", "| setting | autoregressive | tree drafter | speedup | tau |", "|---|---|---|---|---|"]
    for name, r in lv["settings"].items():
        lines.append(f"| {name} | {r['autoregressive_ms_per_token']:.2f} | {r['drafter_ms_per_token']:.2f} | "
                     f"{r['speedup']:.2f}x | {r['tau_with_bonus']:.2f} |")
    lines += ["", f"int8 block weights make the drafter's tokens {lv['int8_vs_fp32_drafter']:.3f}x as fast as fp32 ones."]
    return lines


def profile_markdown(p: dict, t: dict, meta: dict, curves: dict | None = None, compiled: dict | None = None,
                     levers: dict | None = None) -> str:
    r = p["per_round_ms"]
    round_ms = sum(r.values())
    lines = [f"Profile {meta['date']} on {meta['machine']}; {meta['n_questions']} held-out questions, max "
             f"{meta['max_new_tokens']} new tokens, greedy, tree depth {meta['tree']['depth']} / top-k "
             f"{meta['tree']['top_k']} / {meta['tree']['total_tokens']} nodes, stop below "
             f"{meta['tree'].get('stop_below', 0):g} (dynamic depth; 0 = fixed). Command: `{meta['command']}`", "",
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
    if curves is not None:
        lines += curves_markdown(curves, p, meta)
    if compiled is not None:
        lines += ["", f"torch.compile (torch {compiled['torch']}, dynamic shapes) of the drafter block, "
                      f"{compiled['width']} nodes over {compiled['context']} cached pairs: "
                      f"{compiled['compiled_ms']:.3f} ms per call against {compiled['eager_ms']:.3f} ms eager, "
                      f"after {compiled['compile_seconds']:.1f} s of compiling."]
    if levers is not None:
        lines += levers_markdown(levers)
    return "\n".join(lines) + "\n"


def write_profile(out: Path, p: dict, t: dict, meta: dict, curves: dict | None = None,
                  compiled: dict | None = None, levers: dict | None = None) -> str:
    out.mkdir(parents=True, exist_ok=True)
    md = profile_markdown(p, t, meta, curves, compiled, levers)
    (out / "profile.json").write_text(json.dumps({"meta": meta, "profile": p, "tracing": t, "curves": curves,
                                                  "compile": compiled, "levers": levers}, indent=1))
    (out / "profile.md").write_text(md)
    return md

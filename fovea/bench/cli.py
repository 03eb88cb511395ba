"""`python -m fovea.bench`: side-by-side decoding benchmark on held-out generated questions.

Every method runs on the same target, the same questions, in the same process, interleaved
question by question (method order rotated) so machine drift cancels. Reports per task family:
speedup (ratio of median wall times vs autoregressive, and median of per-question ratios), tau
with and without the bonus token, draft / verify / commit ms per iteration, tokens/s, and
losslessness (identical tokens to autoregressive). Writes JSON + Markdown (+ plotly HTML).
With `--analyses` (on in `--quick`) it also runs the diagnostics of `fovea.analysis` (visual-budget
sweep, focus drift, grounding score, K distribution) on the first held-out questions and adds them
to results.json under "analyses", to results.md and as figures. The logic lives in the library.
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

import torch

from fovea.bench.methods import METHODS, Method, load_assistant, with_triggers
from fovea.methods import AUTOREGRESSIVE, CONTEXTS, CORRECTION_PAIRS, FULL
from fovea.bench.report import write_results
from fovea.bench.runner import PAIR_SWEEPS, cold_start_seconds, held_out, pair_sweep, run_meta, run_speed, tree_sweep
from fovea.bench.stats import summarise
from fovea.config import FoveaConfig, TreeConfig, range_of
from fovea.data import tuning_seeds

# the sweeps, each its own --NAME-sweep flag: the tree shapes, then the pair sweeps (PAIR_SWEEPS)
SWEEPS = ("tree", *PAIR_SWEEPS)


PRESETS = {
    "quick": {"n": 6, "max_new_tokens": 32, "methods": [AUTOREGRESSIVE.name, *CORRECTION_PAIRS[0], "chain",
                                                        *CORRECTION_PAIRS[1]],
              "analyses": True, "analysis_n": 3, "analysis_tokens": 16},
    "default": {"n": 100, "max_new_tokens": 64, "methods": list(METHODS), "cold_start": True,
                "analyses": True, "analysis_n": 60, "analysis_tokens": 64},
}


def tree_shape(text: str) -> tuple[int, int, int]:
    """"DEPTH,TOP_K,NODES" -> a tree shape, each in TreeConfig's range."""
    from fovea.config import TreeConfig, range_of

    parts = text.split(",")
    if len(parts) != 3 or not all(x.strip().isdigit() for x in parts):
        raise argparse.ArgumentTypeError(f"a tree shape is DEPTH,TOP_K,NODES (three whole numbers), got {text!r}")
    shape = tuple(int(x) for x in parts)
    for name, value in zip(("depth", "top_k", "total_tokens"), shape):
        allowed = range_of(TreeConfig, name)
        if value not in allowed:
            raise argparse.ArgumentTypeError(f"{text!r}: {name} must be {allowed.text}, got {value}")
    return shape


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m fovea.bench", description=__doc__)
    p.add_argument("--preset", choices=sorted(PRESETS), default="default")
    p.add_argument("--quick", action="store_true", help="shorthand for --preset quick")
    p.add_argument("--n", type=int, help="questions (spread over the task families)")
    p.add_argument("--max-new-tokens", type=int)
    p.add_argument("--methods", nargs="+", metavar="METHOD",
                   help=f"any of {', '.join(sorted(METHODS))}, or a NAME of --drafters")
    p.add_argument("--target", type=Path)
    p.add_argument("--drafter", type=Path)
    p.add_argument("--baseline-drafter", type=Path,
                   help=f"the no-correction drafter (default assets/{FULL.folders[1]} with the default target)")
    others = " ".join(f"{name}=assets/{folder}" for c in CONTEXTS.values() if c is not FULL
                      for name, folder in c.drafter_folders.items())
    p.add_argument("--drafters", nargs="+", default=[], metavar="NAME=FOLDER",
                   help=f"more drafters by the name the methods use, e.g. {others} (loaded by default with the "
                        "default target; a non-default target loads none)")
    p.add_argument("--assistant", type=Path, help="assistant LM folder for hf_assisted (default assets/assistant)")
    p.add_argument("--tiny-random", action="store_true", help="random tiny model (smoke tests, no assets)")
    p.add_argument("--mmspec", type=Path, help="questions from a JSONL in MMSpec's layout (image, question, category) "
                   "instead of the generated ones; adds by_category.json / .md (fovea.bench.mmspec)")
    p.add_argument("--out", type=Path, help="results folder (default assets/results/bench, "
                   "assets/results/tree_sweep with --tree-sweep, assets/results/profile with --profile)")
    p.add_argument("--tree-sweep", action="store_true",
                   help="compare tree shapes (TREE_SHAPES) for FOVEA and its twin on tuning questions "
                        "(default 30) instead of the benchmark")
    p.add_argument("--shapes", nargs="+", type=tree_shape, metavar="DEPTH,TOP_K,NODES",
                   help="with --tree-sweep: these shapes instead of TREE_SHAPES, e.g. --shapes 9,1,9 11,2,12")
    p.add_argument("--tree", type=tree_shape, metavar="DEPTH,TOP_K,NODES",
                   help="the tree every tree method drafts (default TreeConfig's 9,2,16), e.g. --tree 16,1,16 for the "
                        "deep chain the tree sweep picks on the 16-layer candidate target")
    p.add_argument("--trigger-sweep", action="store_true",
                   help="compare correction.trigger thresholds (TRIGGERS) for each FOVEA drafter context beside its "
                        "twin on tuning questions (default 30); writes assets/results/trigger_sweep")
    p.add_argument("--retrieval-sweep", action="store_true",
                   help="compare the sharpness of retrieval at decode time (cumulative mass rho, K bounds: "
                        "RETRIEVAL_VARIANTS) for each FOVEA drafter context beside its twin on tuning questions "
                        "(default 30); writes assets/results/retrieval_sweep")
    p.add_argument("--depth-sweep", action="store_true",
                   help="compare the correction's depth limit (CorrectionConfig.max_depth: DEPTH_VARIANTS) for each FOVEA "
                        "drafter context beside its twin on tuning questions (default 30); writes "
                        "assets/results/depth_sweep")
    p.add_argument("--controls-sweep", action="store_true",
                   help="compare the retrieval controls (random, static, query-agnostic, dense, state-only) with FOVEA in "
                        "each drafter context, at depth <= 1 and at every depth, on tuning questions (default 30); "
                        "writes assets/results/controls_sweep")
    p.add_argument("--stop-sweep", action="store_true",
                   help="compare dynamic-depth thresholds (TreeConfig.stop_below: STOPS) for FOVEA and its twin in "
                        "each drafter context on tuning questions (default 30); writes assets/results/stop_sweep")
    p.add_argument("--profile", action="store_true",
                   help="split FOVEA rounds into per-level drafter stages, verify and commit, and measure the "
                        "tracing overhead (default 20 questions; writes assets/results/profile)")
    p.add_argument("--cost-split", action="store_true",
                   help="split the decode rounds of each FOVEA setting and its no-correction twin (COST_PAIRS) into "
                        "stages, interleaved on tuning questions (default 30), and bound what a free correction would "
                        "give; writes assets/results/cost_split")
    p.add_argument("--compile-check", action="store_true",
                   help="with --profile: also time the drafter block under torch.compile against eager "
                        "(compiling takes seconds to a minute)")
    p.add_argument("--lever-check", action="store_true",
                   help="with --profile: also time the no-correction drafter end to end at 1 vs 2 torch threads "
                        "and with int8 block weights (interleaved; a few minutes)")
    p.add_argument("--stop-below", type=float, default=None,
                   help="dynamic depth for every tree method: stop drafting below a level whose best path has a "
                        "draft probability under this (TreeConfig.stop_below; default 0 = fixed depth)")
    p.add_argument("--threads", type=int,
                   help="torch threads (default 2; 1 with --tiny-random, whose per-op overhead makes a second "
                        "thread slower, badly so on a busy machine)")
    p.add_argument("--analyses", action=argparse.BooleanOptionalAction, default=None,
                   help="also run the diagnostics (visual budget, focus drift, grounding, K); on in --quick")
    p.add_argument("--analysis-n", type=int,
                   help="held-out questions for the diagnostics (the same seeds the bench starts with)")
    p.add_argument("--analysis-tokens", type=int, help="max new tokens for the diagnostics")
    p.add_argument("--trigger", nargs="+", default=[], metavar="CONTEXT=T",
                   help="the correction trigger of each named drafter context's triggered FOVEA method for this run "
                        "(e.g. text=0.8 full=0.7), in place of fovea.methods.TRIGGER / TRIGGER_TEXT: the values a "
                        "trigger sweep picks for a pair other than the shipped one")
    p.add_argument("--repeats", type=int, default=1,
                   help="time every question this many times per method (each pass interleaved, the order rotated "
                        "again) and take the median wall time per question: less of the machine's jitter in each "
                        "question's figure, at that many times the run time (benchmark and sweeps)")
    p.add_argument("--cold-start", action=argparse.BooleanOptionalAction, default=None,
                   help="also time a fresh process loading the bundled default and answering one question "
                        "(on in the default preset)")
    args = p.parse_args(argv)
    extra = {}
    for item in args.drafters:
        name, sep, folder = item.partition("=")
        if not sep or not name or not folder:
            p.error(f"--drafters takes NAME=FOLDER, got {item!r}")
        if not Path(folder).is_dir():
            p.error(f"--drafters {name}: {folder} is not a folder")
        extra[name] = Path(folder)
    args.drafters = extra
    triggers = {}
    for item in args.trigger:
        name, sep, value = item.partition("=")
        if not sep or name not in CONTEXTS:
            p.error(f"--trigger takes CONTEXT=T with CONTEXT one of {sorted(CONTEXTS)}, got {item!r}")
        try:
            triggers[name] = float(value)
        except ValueError:
            p.error(f"--trigger {name}: {value!r} is not a number")
        if not 0.0 < triggers[name] <= 1.0:
            p.error(f"--trigger {name}: T must be in (0, 1], got {triggers[name]}")
    args.trigger = triggers
    stop_below = range_of(TreeConfig, "stop_below")
    if args.stop_below is not None and args.stop_below not in stop_below:
        p.error(f"--stop-below must be {stop_below.text}, got {args.stop_below}")
    unknown = [m for m in args.methods or [] if m not in METHODS and m not in extra]
    if unknown:
        p.error(f"unknown method(s) {unknown}: choose from {sorted(METHODS)} or a NAME given to --drafters")
    modes = [f for f in (*(f"{kind}_sweep" for kind in SWEEPS), "profile", "cost_split") if getattr(args, f)]
    if len(modes) > 1:
        p.error("run one of " + ", ".join("--" + f.replace("_", "-") for f in modes) + " at a time")
    if (args.compile_check or args.lever_check) and not args.profile:
        p.error("--compile-check and --lever-check are parts of --profile: add --profile")
    for name in ("n", "max_new_tokens", "threads", "analysis_n", "analysis_tokens", "repeats"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    return args


def drafter_methods(pipe, names) -> dict[str, Method]:
    """A method per --drafters NAME that no built-in method decodes with: FOVEA with that drafter,
    under the decode-time correction settings it was trained with (propagate, depth limit, gate)."""
    used = {m.drafter for m in METHODS.values()}
    out = {}
    for name in names:
        if name in used:
            continue
        c = pipe.drafters[name].correction_cfg
        out[name] = Method(name, drafter=name, overrides={"correction": {
            "enabled": c.enabled, "propagate": c.propagate, "max_depth": c.max_depth, "use_gate": c.use_gate,
            "trigger": c.trigger}})
    return out


def main(argv=None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--diffusion" in argv:  # the diffusion-decoding benchmark has its own options (fovea.bench.diffusion)
        from fovea.bench.diffusion import main as diffusion_main

        return diffusion_main([a for a in argv if a != "--diffusion"])
    args = parse_args(argv)
    args.argv = list(argv if argv is not None else sys.argv[1:])
    sweep = any(getattr(args, f"{kind}_sweep") for kind in SWEEPS)
    if (sweep or args.profile or args.cost_split) and args.methods:
        raise SystemExit(", ".join(f"--{kind}-sweep" for kind in SWEEPS) + ", --profile and --cost-split run their own methods; "
                         "drop --methods")
    preset = PRESETS["quick" if args.quick else args.preset]
    torch.set_num_threads(args.threads or (1 if args.tiny_random else 2))
    from fovea.pipeline import FoveaPipeline

    pipe = FoveaPipeline.tiny_random() if args.tiny_random else \
        FoveaPipeline.from_pretrained(args.target, args.drafter, args.baseline_drafter)
    if args.drafters:
        from fovea.drafter import Drafter

        loaded = {name: Drafter.from_pretrained(folder) for name, folder in args.drafters.items()}
        pipe = FoveaPipeline(pipe.target, {**pipe.drafters, **loaded})
    table = with_triggers({**METHODS, **drafter_methods(pipe, args.drafters)}, args.trigger)
    max_new = args.max_new_tokens or (64 if sweep else preset["max_new_tokens"])
    base = FoveaConfig().replace(decoding={"max_new_tokens": max_new, "trace": False})
    if args.stop_below is not None:
        base = base.replace(tree={"stop_below": args.stop_below})
    if args.tree is not None:
        depth, top_k, total = args.tree
        base = base.replace(tree={"depth": depth, "top_k": top_k, "total_tokens": total})
    if args.tree_sweep:
        print(tree_sweep(args, pipe, base))
        return
    for kind in PAIR_SWEEPS:
        if getattr(args, f"{kind}_sweep"):
            print(pair_sweep(args, pipe, base, kind, table))
            return
    if args.profile:
        print(profile(args, pipe, base))
        return
    if args.cost_split:
        from fovea.bench.profile import cost_split, write_cost_split

        n = args.n or 30
        split = cost_split(pipe, held_out(n, tuning_seeds), table, base)
        print(write_cost_split(args.out or Path("assets/results/cost_split"), split, run_meta(args.argv, n, base)))
        return
    n = args.n or preset["n"]
    methods = args.methods or preset["methods"]
    if AUTOREGRESSIVE.name not in methods:
        methods = [AUTOREGRESSIVE.name, *methods]
    assistant = load_assistant(args.assistant, pipe, args.tiny_random) if {"hf_assisted", "assisted"} & set(methods) else None
    t_start = time.perf_counter()
    from fovea.bench.mmspec import bench_questions, write_by_category

    rows = run_speed(pipe, bench_questions(args.mmspec, n) if args.mmspec else held_out(n), methods, base, assistant,
                     table, repeats=args.repeats)
    summary = summarise(rows, methods)
    analyses = None
    if preset["analyses"] if args.analyses is None else args.analyses:
        from fovea.analysis import run_analyses

        tokens = args.analysis_tokens or preset["analysis_tokens"]
        analyses = run_analyses(pipe, held_out(args.analysis_n or preset["analysis_n"]),
                                base.replace(decoding={"max_new_tokens": tokens}))
    meta = {**run_meta(args.argv, n, base, args.repeats), "config": dataclasses.asdict(base),
            "cold_start": cold_start_seconds() if (preset.get("cold_start", False) if args.cold_start is None
                                                  else args.cold_start) and not args.tiny_random else None}
    meta["run_minutes"] = round((time.perf_counter() - t_start) / 60, 1)
    print(write_results(args.out or Path("assets/results/bench"), meta, summary, rows, methods, analyses))
    if args.mmspec:
        print(write_by_category(args.out or Path("assets/results/bench"), rows, methods))


def profile(args, pipe, base: FoveaConfig) -> str:
    from fovea.bench.profile import (CURVE_NODES, compile_check, cost_curves, lever_check, profile_rounds,
                                     tracing_overhead, write_profile)

    n = args.n or 20
    samples = held_out(n)
    split = profile_rounds(pipe, samples, base)
    tracing = tracing_overhead(pipe, samples, base)
    curves = cost_curves(pipe, samples[0], nodes=sorted({*CURVE_NODES, base.tree.total_tokens + 1}))
    compiled = compile_check(pipe) if args.compile_check else None
    levers = lever_check(pipe, samples, base) if args.lever_check else None
    meta = {**run_meta(args.argv, n, base), "tree": dataclasses.asdict(base.tree)}
    return write_profile(args.out or Path("assets/results/profile"), split, tracing, meta, curves, compiled, levers)

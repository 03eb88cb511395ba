"""Running the benchmark: held-out questions, every method on every question interleaved with the
order rotated (machine drift cancels), the cold-start subprocess, the tree-shape sweep.
"""
from __future__ import annotations

import json
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
from tqdm import tqdm

from fovea.bench.methods import (CONTROL_VARIANTS, DEPTH_VARIANTS, METHODS, RETRIEVAL_VARIANTS, STOP_PAIRS, STOP_VARIANTS, SWEEP_DRAFTERS, SWEEP_PAIRS,
                                 TREE_SHAPES, TRIGGER_VARIANTS, Method, pair_sweep_methods, run_method,
                                 tree_sweep_methods)
from fovea.bench.report import pair_sweep_markdown, tree_sweep_markdown, write_rows
from fovea.bench.stats import summarise
from fovea.config import FoveaConfig
from fovea.analysis.rounds import held_out
from fovea.data import tuning_seeds
from fovea.profile import interleaved_order


def run_speed(pipe, samples: list, methods: list[str], base: FoveaConfig, assistant=None,
              table: dict[str, Method] = METHODS, repeats: int = 1) -> list[dict]:
    """Every method on every sample, interleaved with the method order rotated per question. With
    `repeats` > 1 each question is decoded that many times by every method (each pass interleaved and
    rotated again) and a row's wall time is the median of its timings (all of them in "walls"): the
    tokens are the same every time (greedy), only the machine's jitter differs."""
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, got {repeats}")
    rows = []
    warm = samples[0]
    for m in methods:                                      # warm-up: first-call allocations
        run_method(pipe, table[m], warm.image, warm.question, base, assistant)
    for qi, s in enumerate(tqdm(samples, desc="bench", dynamic_ncols=True)):
        runs: dict[str, list] = {m: [] for m in methods}
        for rep in range(repeats):
            for m in interleaved_order(methods, qi * repeats + rep):
                runs[m].append(run_method(pipe, table[m], s.image, s.question, base, assistant))
        ar_tokens = runs["autoregressive"][0].tokens
        for m, results in runs.items():
            r = results[0]
            walls = [x.wall_s for x in results]
            rows.append({"q": qi, "family": s.family, "task": s.task, "method": m,
                         "wall_s": statistics.median(walls), **({"walls": walls} if repeats > 1 else {}),
                         "n_tokens": len(r.tokens), "accept_lengths": r.accept_lengths,
                         "iter_ms": [(it.draft_ms, it.verify_ms, it.commit_ms) for it in r.iterations
                                     if r.method != "autoregressive"],
                         "identical_to_ar": all(x.tokens == ar_tokens for x in results)})
    return rows


COLD_START_SNIPPET = """
import time; t0 = time.perf_counter()
from fovea.config import FoveaConfig
from fovea.data import make_sample, EVAL_SEED_START
from fovea.pipeline import FoveaPipeline
pipe = FoveaPipeline.from_pretrained()
s = make_sample(EVAL_SEED_START, family="scene")
r = pipe.generate(s.image, s.question, FoveaConfig())
print(time.perf_counter() - t0, len(r.tokens))
"""


def cold_start_seconds() -> dict:
    """A fresh Python process: import, load the bundled default, answer one question (64 tokens max)."""
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", COLD_START_SNIPPET], capture_output=True, text=True, check=True)
    inner, tokens = done.stdout.split()[-2:]
    return {"process_wall_s": round(time.perf_counter() - t0, 2), "in_process_s": round(float(inner), 2),
            "tokens": int(tokens)}


def run_meta(argv: list[str], n: int, base: FoveaConfig, repeats: int = 1) -> dict:
    """What every results file records about its run."""
    return {"date": time.strftime("%Y-%m-%d"), "repeats": repeats,
            "machine": f"{torch.get_num_threads()} threads, {platform.processor() or platform.machine()}",
            "command": " ".join(["python -m fovea.bench", *argv]), "n_questions": n,
            "max_new_tokens": base.decoding.max_new_tokens}


def _sweep(args, pipe, base: FoveaConfig, table: dict[str, Method], default_out: str, extra_meta: dict,
           markdown) -> str:
    """Every method of `table` on the tuning questions (default 30), interleaved; results.json and the
    sweep's results.md (`markdown(summary, meta) -> (text, best)`) under `args.out` or `default_out`."""
    methods = list(table)
    n = args.n or 30
    t_start = time.perf_counter()
    rows = run_speed(pipe, held_out(n, tuning_seeds), methods, base, table=table, repeats=args.repeats)
    summary = summarise(rows, methods)
    meta = {**run_meta(args.argv, n, base, args.repeats), "run_minutes": round((time.perf_counter() - t_start) / 60, 1),
            **extra_meta}
    md, best = markdown(summary, meta)
    out = args.out or Path(default_out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps({"meta": meta, "best": best, "summary": summary,
                                                  "rows_file": write_rows(out, rows)}, indent=1))
    (out / "results.md").write_text(md)
    return md


def tree_sweep(args, pipe, base: FoveaConfig) -> str:
    shapes = tuple(args.shapes or TREE_SHAPES)
    return _sweep(args, pipe, base, tree_sweep_methods(shapes), "assets/results/tree_sweep",
                  {"shapes": [list(s) for s in shapes], "drafters": list(SWEEP_DRAFTERS)},
                  lambda summary, meta: tree_sweep_markdown(summary, meta, shapes))


PAIR_SWEEPS = {   # name: (variants, default folder, what @label means, the twins run the variants too, (FOVEA, twin) pairs)
    "trigger": (TRIGGER_VARIANTS, "assets/results/trigger_sweep",
                "FOVEA@triggerT: the correction at every depth, only where the uncorrected head's top-1 probability "
                "is below T (T = 1: every state).", False, SWEEP_PAIRS),
    "retrieval": (RETRIEVAL_VARIANTS, "assets/results/retrieval_sweep",
                  "FOVEA@rhoR: cumulative mass R (the paper and the training: 0.8); kmin1: K_min 1; kmax64: K_max 64 "
                  "(default K in [4, 32]); the same trained drafters, decode-time settings only.", False, SWEEP_PAIRS),
    "depth": (DEPTH_VARIANTS, "assets/results/depth_sweep",
              "FOVEA@depthD: the correction at tree depths <= D (the paper: 1; the root's state is depth 0); all: every "
              "depth; all_trigger0.5: every depth, only where the uncorrected head's top-1 probability is below 0.5.",
              False, SWEEP_PAIRS),
    "controls": (CONTROL_VARIANTS, "assets/results/controls_sweep",
                 "FOVEA@mode: the retrieval control `mode` in place of the cumulative-mass rule, correction at depth <= 1 "
                 "(the paper); all: FOVEA corrected at every depth; mode_all: the control with every depth corrected.",
                 False, SWEEP_PAIRS),
    "stop": (STOP_VARIANTS, "assets/results/stop_sweep",
             "@stopT: dynamic depth, drafting stops below a level whose best path has a draft probability under T "
             "(0: fixed depth; TreeConfig.stop_below; the default tree otherwise), for FOVEA and its twin "
             "alike.", True, STOP_PAIRS),
}


def pair_sweep(args, pipe, base: FoveaConfig, kind: str, table: dict[str, Method] = METHODS) -> str:
    """FOVEA under decode-time variants (PAIR_SWEEPS[kind]) beside its twin, per drafter context the
    pipeline has, on tuning questions; each variant is built on its method in `table` (the CLI's, with
    `--trigger` applied)."""
    variants, folder, legend, twins_too, sweep_pairs = PAIR_SWEEPS[kind]
    pairs = tuple(p for p in sweep_pairs if all(table[m].drafter in pipe.drafters for m in p))
    labels = [label for label, _ in variants]
    return _sweep(args, pipe, base, pair_sweep_methods(variants, pairs, twins_too, table), folder,
                  {"sweep": kind, "variants": [[label, o] for label, o in variants], "pairs": [list(p) for p in pairs]},
                  lambda summary, meta: pair_sweep_markdown(summary, meta, kind, legend, labels, pairs, twins_too))

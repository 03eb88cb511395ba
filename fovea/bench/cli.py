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
import json
import platform
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
from tqdm import tqdm

from fovea.config import FoveaConfig
from fovea.data import FAMILIES, eval_seeds, make_sample, tuning_seeds
from fovea.candidates import AssistantLM, PromptLookup, TreeDrafter
from fovea.decoding import run
from fovea.trace import GenerationResult


@dataclass(frozen=True)
class Method:
    name: str
    # "fovea" (a TreeDrafter) | "autoregressive" | "prompt_lookup" | "assisted" (strategies of our decode
    # loop) | "hf_prompt_lookup" | "hf_assisted" (transformers' own generate(), for reference)
    kind: str = "fovea"
    drafter: str = "fovea"
    overrides: dict = field(default_factory=dict)


METHODS = {m.name: m for m in [
    Method("autoregressive", kind="autoregressive"),
    Method("fovea"),
    Method("no_correction", drafter="no_correction", overrides={"correction": {"enabled": False}}),
    # the cache-friendly pair: the drafter's cache skips the image; FOVEA and its "- correction" ablation
    Method("fovea_text", drafter="fovea_text"),
    Method("no_correction_text", drafter="no_correction_text", overrides={"correction": {"enabled": False}}),
    Method("chain", overrides={"tree": {"chain": True}}),
    Method("no_depth_embedding", overrides={"retrieval": {"mode": "state_only"}}),
    Method("no_gate", overrides={"correction": {"use_gate": False}}),
    Method("correction_depth0", overrides={"correction": {"max_depth": 0}}),
    Method("correction_depth3", overrides={"correction": {"max_depth": 3}}),
    Method("random", overrides={"retrieval": {"mode": "random"}}),
    Method("static", overrides={"retrieval": {"mode": "static"}}),
    Method("query_agnostic", overrides={"retrieval": {"mode": "query_agnostic"}}),
    Method("dense", overrides={"retrieval": {"mode": "dense"}}),
    *[Method(f"fixed_k{k}", overrides={"retrieval": {"mode": "fixed", "fixed_k": k}}) for k in (8, 16, 32, 64)],
    Method("prompt_lookup", kind="prompt_lookup"),
    Method("assisted", kind="assisted"),
    Method("hf_prompt_lookup", kind="hf_prompt_lookup"),
    Method("hf_assisted", kind="hf_assisted"),
]}
# the methods whose drafts come from a trained model (the ranking the README reports)
TRAINED_DRAFTERS = [m.name for m in METHODS.values() if m.kind in ("fovea", "assisted", "hf_assisted")]
# analyses: run the diagnostics of fovea.analysis by default; analysis_n / analysis_tokens size them
PRESETS = {
    "quick": {"n": 6, "max_new_tokens": 32, "methods": ["autoregressive", "fovea", "no_correction", "chain",
                                                        "fovea_text", "no_correction_text"],
              "analyses": True, "analysis_n": 3, "analysis_tokens": 16},
    "default": {"n": 100, "max_new_tokens": 64, "methods": list(METHODS), "cold_start": True,
                "analyses": True, "analysis_n": 60, "analysis_tokens": 64},
}


# --tree-sweep: (depth, top_k, total_tokens) shapes compared for FOVEA and its ablation, on tuning
# questions disjoint from the benchmark's (fovea.data.tuning_seeds); the TreeConfig default comes from it
TREE_SHAPES = ((5, 4, 16), (5, 8, 32), (7, 2, 12), (7, 2, 16), (8, 2, 16), (9, 2, 16), (9, 3, 20), (11, 2, 16))
SWEEP_DRAFTERS = ("fovea", "no_correction")


def shape_name(method: str, shape: tuple[int, int, int]) -> str:
    return f"{method}@d{shape[0]}k{shape[1]}n{shape[2]}"


def tree_sweep_methods(shapes=TREE_SHAPES, drafters=SWEEP_DRAFTERS) -> dict[str, Method]:
    """autoregressive plus every (drafter method, tree shape) as its own Method."""
    out = {"autoregressive": METHODS["autoregressive"]}
    for depth, top_k, total in shapes:
        for name in drafters:
            m = METHODS[name]
            tree = {"depth": depth, "top_k": top_k, "total_tokens": total}
            key = shape_name(name, (depth, top_k, total))
            out[key] = Method(key, drafter=m.drafter, overrides={**m.overrides, "tree": tree})
    return out


def strategy_for(pipe, method: Method, assistant=None):
    """The drafting strategy of a method (None for autoregressive decoding): FOVEA, its ablations
    and the chain are TreeDrafters over a loaded drafter with config overrides; prompt lookup and
    the assistant LM are their own strategies in the same decode loop."""
    if method.kind == "autoregressive":
        return None
    if method.kind == "prompt_lookup":
        return PromptLookup(method.name)
    if method.kind == "assisted":
        if assistant is None:
            raise SystemExit(f"method {method.name} needs an assistant LM (see --assistant)")
        return AssistantLM(assistant, method.name)
    if method.drafter not in pipe.drafters:
        raise SystemExit(f"method {method.name} needs the drafter {method.drafter!r}, which is not loaded")
    return TreeDrafter(method.name, pipe.drafters[method.drafter], method.overrides)


def run_method(pipe, method: Method, image, question, base: FoveaConfig, assistant=None) -> GenerationResult:
    prompt = pipe.target.prepare(image, question)
    if method.kind == "hf_prompt_lookup":
        return hf_generate(pipe.target, prompt, base, method.name, prompt_lookup_num_tokens=5)
    if method.kind == "hf_assisted":
        if assistant is None:
            raise SystemExit("method hf_assisted needs an assistant LM (see --assistant)")
        return hf_generate(pipe.target, prompt, base, method.name, assistant_model=assistant)
    return run(pipe.target, strategy_for(pipe, method, assistant), prompt, base)


def load_assistant(folder: Path | None, pipe, tiny_random: bool):
    """The small LM for `generate(assistant_model=...)`: the committed one, or (tiny-random smoke
    runs) an untrained one of the right shape."""
    from transformers import LlamaForCausalLM

    from fovea.models.bundled import DEFAULT_ASSISTANT_DIR
    from fovea.training.assistant import build_assistant

    if tiny_random:
        return build_assistant(pipe.target.model.config, pipe.target.tokenizer).eval()
    folder = Path(folder or DEFAULT_ASSISTANT_DIR)
    if not (folder / "config.json").exists():
        raise SystemExit(f"method hf_assisted needs the assistant LM at {folder}, which is missing; "
                         "build it with `python -m fovea.train assistant` or drop the method")
    model = LlamaForCausalLM.from_pretrained(str(folder), dtype=torch.float32).eval()
    if model.config.vocab_size != pipe.target.vocab_size:
        raise SystemExit(f"assistant at {folder} has vocabulary {model.config.vocab_size}, the target "
                         f"{pipe.target.vocab_size}: they must share the tokenizer")
    return model


@torch.no_grad()
def hf_generate(target, prompt, cfg: FoveaConfig, name: str, **assist) -> GenerationResult:
    """transformers' own `generate()` on the same model with one of its assisted-decoding options
    (prompt lookup, or a small assistant LM): what a transformers user would pick instead."""
    t0 = time.perf_counter()
    out = target.model.generate(input_ids=prompt.input_ids, **prompt.model_inputs, do_sample=False,
                                max_new_tokens=cfg.decoding.max_new_tokens,
                                pad_token_id=target.tokenizer.pad_token_id, **assist)
    tokens = out[0, prompt.input_ids.shape[1]:].tolist()
    return GenerationResult(method=name, tokens=tokens, text=target.tokenizer.decode(tokens),
                            wall_s=time.perf_counter() - t0, prefill_ms=0.0, target_forwards=0)


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
            }
    return out


def family_mean_speedup(summary: dict, method: str) -> float | None:
    """Speedup (ratio of medians) averaged over the task families (not over questions)."""
    vals = [per[method]["speedup_ratio_of_medians"] for fam, per in summary.items()
            if fam != "all" and per.get(method, {}).get("speedup_ratio_of_medians") is not None]
    return statistics.mean(vals) if vals else None


def ranking(summary: dict, methods: list[str]) -> list[dict]:
    """The methods with a trained drafter, best first by speedup averaged over task families."""
    scored = [{"method": m, "mean_speedup": family_mean_speedup(summary, m)} for m in methods if m in TRAINED_DRAFTERS]
    return sorted((r for r in scored if r["mean_speedup"] is not None), key=lambda r: -r["mean_speedup"])


# FOVEA and its "- correction" ablation with the same drafter context, trained on the same batches
CORRECTION_PAIRS = (("fovea", "no_correction"), ("fovea_text", "no_correction_text"))


def correction_gain(summary: dict, methods: list[str]) -> list[dict]:
    """Per pair of CORRECTION_PAIRS that ran: FOVEA's pooled speedup over its ablation's (both
    ratios of medians against the same autoregressive runs) and the two tau (bonus counted)."""
    out = []
    for with_c, without in CORRECTION_PAIRS:
        if with_c in methods and without in methods:
            a, b = summary["all"][with_c], summary["all"][without]
            sa, sb = a["speedup_ratio_of_medians"], b["speedup_ratio_of_medians"]
            out.append({"fovea": with_c, "ablation": without, "gain": sa / sb if sa and sb else None,
                        "tau": a["tau_with_bonus"], "tau_ablation": b["tau_with_bonus"],
                        "family_gain": {fam: (summary[fam][with_c]["speedup_ratio_of_medians"] or 0)
                                        / (summary[fam][without]["speedup_ratio_of_medians"] or float("inf"))
                                        for fam in summary if fam != "all"}})
    return out


def markdown(summary: dict, methods: list[str], meta: dict) -> str:
    lines = [f"Benchmark {meta['date']} on {meta['machine']}; {meta.get('n_questions')} held-out questions, "
             f"max {meta.get('max_new_tokens')} new tokens, greedy"
             + (f"; speed part took {meta['run_minutes']} min" if meta.get("run_minutes") is not None else "")
             + f". Command: `{meta['command']}`", ""]
    if meta.get("cold_start"):
        c = meta["cold_start"]
        lines += [f"Cold start (fresh process: import, load the bundled default, answer one question, "
                  f"{c['tokens']} tokens): {c['process_wall_s']:.1f} s", ""]

    def f(v, p=2):
        return "-" if v is None else f"{v:.{p}f}"
    fams = [fam for fam in summary if fam != "all"]

    def table(fam: str) -> list[str]:
        rows = ["| method | speedup (ratio of medians) | mean over families | speedup (median per q) | tau (+bonus) "
                "| tau (no bonus) | tok/s | draft ms | verify ms | commit ms | lossless |", "|" + "---|" * 11]
        for m in methods:
            s = summary[fam][m]
            mean = family_mean_speedup(summary, m) if fam == "all" else None
            rows.append(f"| {m} | {f(s['speedup_ratio_of_medians'])}x | {f(mean)}x "
                        f"| {f(s['speedup_median_per_question'])}x | {f(s['tau_with_bonus'])} "
                        f"| {f(s['tau_without_bonus'])} | {f(s['tokens_per_s'], 1)} | {f(s['draft_ms'])} "
                        f"| {f(s['verify_ms'])} | {f(s['commit_ms'])} | {'yes' if s['lossless'] else 'NO'} |")
        return rows
    lines += ["### All task families pooled", "", *table("all")]
    lines += ["", "### Per task family: speedup (ratio of medians) / tau with bonus / lossless", "",
              "| method | " + " | ".join(fams) + " |", "|" + "---|" * (len(fams) + 1)]
    for m in methods:
        cells = []
        for fam in fams:
            s = summary[fam][m]
            cells.append(f"{f(s['speedup_ratio_of_medians'])}x / {f(s['tau_with_bonus'])} / "
                         f"{'yes' if s['lossless'] else 'NO'}")
        lines.append(f"| {m} | " + " | ".join(cells) + " |")
    ranked = ranking(summary, methods)
    if ranked:
        place = next((i + 1 for i, r in enumerate(ranked) if r["method"] == "fovea"), None)
        lines += ["", "### Trained drafters ranked by speedup averaged over task families", "",
                  " ".join(f"{i + 1}. {r['method']} ({r['mean_speedup']:.2f}x)" for i, r in enumerate(ranked)), "",
                  f"FOVEA ranks {place} of {len(ranked)}." if place else "FOVEA was not run."]
    gains = correction_gain(summary, methods)
    if gains:
        lines += ["", "### What the correction buys: FOVEA's speedup over its \"- correction\" ablation", "",
                  "| drafter context | FOVEA / ablation (pooled) | " + " | ".join(fams) + " | tau FOVEA | tau ablation |",
                  "|" + "---|" * (len(fams) + 4)]
        for g in gains:
            ctx = "text only (cache-friendly)" if g["fovea"].endswith("_text") else "full prompt"
            lines.append(f"| {ctx} | {f(g['gain'])}x | " + " | ".join(f"{f(g['family_gain'][fam])}x" for fam in fams)
                         + f" | {f(g['tau'])} | {f(g['tau_ablation'])} |")
    for fam in fams:
        lines += ["", f"<details><summary>Family {fam}: every metric</summary>", "", *table(fam), "", "</details>"]
    return "\n".join(lines) + "\n"


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m fovea.bench", description=__doc__)
    p.add_argument("--preset", choices=sorted(PRESETS), default="default")
    p.add_argument("--quick", action="store_true", help="shorthand for --preset quick")
    p.add_argument("--n", type=int, help="questions (spread over the task families)")
    p.add_argument("--max-new-tokens", type=int)
    p.add_argument("--methods", nargs="+", choices=sorted(METHODS))
    p.add_argument("--target", type=Path)
    p.add_argument("--drafter", type=Path)
    p.add_argument("--assistant", type=Path, help="assistant LM folder for hf_assisted (default assets/assistant)")
    p.add_argument("--tiny-random", action="store_true", help="random tiny model (smoke tests, no assets)")
    p.add_argument("--out", type=Path, help="results folder (default assets/results/bench, "
                   "or assets/results/tree_sweep with --tree-sweep)")
    p.add_argument("--tree-sweep", action="store_true",
                   help="compare tree shapes (TREE_SHAPES) for FOVEA and no_correction on tuning questions "
                        "(default 30) instead of the benchmark")
    p.add_argument("--threads", type=int,
                   help="torch threads (default 2; 1 with --tiny-random, whose per-op overhead makes a second "
                        "thread slower, badly so on a busy machine)")
    p.add_argument("--analyses", action=argparse.BooleanOptionalAction, default=None,
                   help="also run the diagnostics (visual budget, focus drift, grounding, K); on in --quick")
    p.add_argument("--analysis-n", type=int,
                   help="held-out questions for the diagnostics (the same seeds the bench starts with)")
    p.add_argument("--analysis-tokens", type=int, help="max new tokens for the diagnostics")
    p.add_argument("--cold-start", action=argparse.BooleanOptionalAction, default=None,
                   help="also time a fresh process loading the bundled default and answering one question "
                        "(on in the default preset)")
    args = p.parse_args(argv)
    for name in ("n", "max_new_tokens", "threads", "analysis_n", "analysis_tokens"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    return args


def held_out(n: int, seeds=eval_seeds) -> list:
    """The first n held-out samples, families round-robin (the same questions for every method);
    seeds=tuning_seeds gives the tuning questions of --tree-sweep, never benchmarked."""
    return [make_sample(s, family=FAMILIES[i % len(FAMILIES)]) for i, s in enumerate(seeds(n))]


def run_speed(pipe, samples: list, methods: list[str], base: FoveaConfig, assistant=None,
              table: dict[str, Method] = METHODS) -> list[dict]:
    """Every method on every sample, interleaved with the method order rotated per question."""
    rows = []
    warm = samples[0]
    for m in methods:                                      # warm-up: first-call allocations
        run_method(pipe, table[m], warm.image, warm.question, base, assistant)
    for qi, s in enumerate(tqdm(samples, desc="bench", dynamic_ncols=True)):
        order = methods[qi % len(methods):] + methods[: qi % len(methods)]
        results = {m: run_method(pipe, table[m], s.image, s.question, base, assistant) for m in order}
        for m, r in results.items():
            rows.append({"q": qi, "family": s.family, "task": s.task, "method": m, "wall_s": r.wall_s,
                         "n_tokens": len(r.tokens), "accept_lengths": r.accept_lengths,
                         "iter_ms": [(it.draft_ms, it.verify_ms, it.commit_ms) for it in r.iterations
                                     if r.method != "autoregressive"],
                         "identical_to_ar": r.tokens == results["autoregressive"].tokens})
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
    import subprocess

    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", COLD_START_SNIPPET], capture_output=True, text=True, check=True)
    inner, tokens = done.stdout.split()[-2:]
    return {"process_wall_s": round(time.perf_counter() - t0, 2), "in_process_s": round(float(inner), 2),
            "tokens": int(tokens)}


def tree_sweep_markdown(summary: dict, meta: dict, shapes=TREE_SHAPES, drafters=SWEEP_DRAFTERS) -> tuple[str, dict]:
    """The sweep's table (pooled over families) and the best shape by the drafters' mean speedup."""
    def f(v):
        return "-" if v is None else f"{v:.2f}"
    allf = summary["all"]
    head = " | ".join(f"{d} speedup | {d} tau (+bonus)" for d in drafters)
    lines = [f"Tree-shape sweep {meta['date']} on {meta['machine']}; {meta['n_questions']} tuning questions "
             f"(fovea.data.tuning_seeds, disjoint from the benchmark's), max {meta['max_new_tokens']} new tokens, "
             f"greedy; took {meta['run_minutes']} min. Command: `{meta['command']}`", "",
             f"| depth | top_k | nodes verified | {head} | lossless |", "|" + "---|" * (4 + 2 * len(drafters))]
    score = {}
    for shape in shapes:
        cells = []
        for d in drafters:
            m = allf[shape_name(d, shape)]
            cells += [f"{f(m['speedup_ratio_of_medians'])}x", f(m["tau_with_bonus"])]
        ok = all(allf[shape_name(d, shape)]["lossless"] for d in drafters)
        score[shape] = statistics.mean(allf[shape_name(d, shape)]["speedup_ratio_of_medians"] for d in drafters)
        lines.append(f"| {shape[0]} | {shape[1]} | {shape[2]} | " + " | ".join(cells) + f" | {'yes' if ok else 'NO'} |")
    best = max(score, key=score.get)
    lines += ["", f"Best by the mean of the drafters' pooled speedups: depth {best[0]}, top_k {best[1]}, "
              f"{best[2]} nodes ({score[best]:.2f}x)."]
    return "\n".join(lines) + "\n", {"depth": best[0], "top_k": best[1], "total_tokens": best[2],
                                     "mean_speedup": score[best]}


def run_meta(argv: list[str], n: int, base: FoveaConfig) -> dict:
    """What every results file records about its run."""
    return {"date": time.strftime("%Y-%m-%d"),
            "machine": f"{torch.get_num_threads()} threads, {platform.processor() or platform.machine()}",
            "command": " ".join(["python -m fovea.bench", *argv]), "n_questions": n,
            "max_new_tokens": base.decoding.max_new_tokens}


def tree_sweep(args, pipe, base: FoveaConfig) -> str:
    table = tree_sweep_methods()
    methods = list(table)
    n = args.n or 30
    t_start = time.perf_counter()
    rows = run_speed(pipe, held_out(n, tuning_seeds), methods, base, table=table)
    summary = summarise(rows, methods)
    meta = {**run_meta(args.argv, n, base), "run_minutes": round((time.perf_counter() - t_start) / 60, 1),
            "shapes": [list(s) for s in TREE_SHAPES], "drafters": list(SWEEP_DRAFTERS)}
    md, best = tree_sweep_markdown(summary, meta)
    out = args.out or Path("assets/results/tree_sweep")
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps({"meta": meta, "best": best, "summary": summary, "rows": rows}, indent=1))
    (out / "results.md").write_text(md)
    return md


def main(argv=None) -> None:
    args = parse_args(argv)
    args.argv = list(argv if argv is not None else sys.argv[1:])
    if args.tree_sweep and args.methods:
        raise SystemExit("--tree-sweep runs its own methods (FOVEA and no_correction per tree shape); drop --methods")
    preset = PRESETS["quick" if args.quick else args.preset]
    torch.set_num_threads(args.threads or (1 if args.tiny_random else 2))
    from fovea.pipeline import FoveaPipeline

    pipe = FoveaPipeline.tiny_random() if args.tiny_random else FoveaPipeline.from_pretrained(args.target, args.drafter)
    max_new = args.max_new_tokens or (64 if args.tree_sweep else preset["max_new_tokens"])
    base = FoveaConfig().replace(decoding={"max_new_tokens": max_new, "trace": False})
    if args.tree_sweep:
        print(tree_sweep(args, pipe, base))
        return
    n = args.n or preset["n"]
    methods = args.methods or preset["methods"]
    if "autoregressive" not in methods:
        methods = ["autoregressive", *methods]
    assistant = load_assistant(args.assistant, pipe, args.tiny_random) if {"hf_assisted", "assisted"} & set(methods) else None
    t_start = time.perf_counter()
    rows = run_speed(pipe, held_out(n), methods, base, assistant)
    summary = summarise(rows, methods)
    analyses = None
    if preset["analyses"] if args.analyses is None else args.analyses:
        from fovea.analysis import run_analyses

        tokens = args.analysis_tokens or preset["analysis_tokens"]
        analyses = run_analyses(pipe, held_out(args.analysis_n or preset["analysis_n"]),
                                base.replace(decoding={"max_new_tokens": tokens}))
    meta = {**run_meta(args.argv, n, base), "config": dataclasses.asdict(base),
            "cold_start": cold_start_seconds() if (preset.get("cold_start", False) if args.cold_start is None
                                                  else args.cold_start) and not args.tiny_random else None}
    meta["run_minutes"] = round((time.perf_counter() - t_start) / 60, 1)
    print(write_results(args.out or Path("assets/results/bench"), meta, summary, rows, methods, analyses))


def write_results(out: Path, meta: dict, summary: dict, rows: list[dict], methods: list[str],
                  analyses: dict | None) -> str:
    """results.json, results.md and the HTML figures under `out`; returns the Markdown."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(
        {"meta": meta, "methods": methods, "families": list(summary), "summary": summary,
         "ranking": ranking(summary, methods), "correction_gain": correction_gain(summary, methods), "rows": rows,
         "analyses": analyses}, indent=1))
    table = markdown(summary, methods, meta)
    write_figures(summary, methods, out)
    if analyses is not None:
        from fovea.analysis.report import markdown_section, write_figures as write_analysis_figures

        table += markdown_section(analyses)
        write_analysis_figures(analyses, out)
    (out / "results.md").write_text(table)
    return table


def write_figures(summary: dict, methods: list[str], out: Path) -> None:
    import plotly.graph_objects as go

    fig = go.Figure()
    for m in methods:
        fams = list(summary)
        fig.add_bar(name=m, x=fams, y=[summary[f][m]["speedup_ratio_of_medians"] for f in fams])
    fig.update_layout(title="Speedup over autoregressive decoding (ratio of medians)", barmode="group",
                      yaxis_title="x", template="plotly_white")
    fig.write_html(out / "speedup.html", include_plotlyjs="cdn")


if __name__ == "__main__":
    main()

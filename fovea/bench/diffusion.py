"""`python -m fovea.bench --diffusion` (or `python -m fovea.bench.diffusion`): the diffusion-decoding
benchmark. Every method (fovea.diffusion.config.METHODS: the full schedule, the fixed-region gate,
threshold unmasking, LATCH, LATCH without BWEC) decodes the same held-out questions with the same
model in one process, interleaved question by question with the method order rotated, and each answer
is scored by the target's scorer (fovea.data.scoring.answer_correct). Per task: accuracy, denoising
steps (NFE), tokens/s (answer tokens before the EOS over wall time, prefill included) and both
against the full schedule; the shipped autoregressive target (greedy, the same timing) is a sixth row.

`--tune` chooses the shared block length and LATCH's frozen set on tuning seeds instead: first the
full schedule's accuracy at each block length (TUNE_BLOCKS), then, at the chosen length, every
(tau_c, stable_steps): without BWEC the decode is the full schedule's until CVC fires, so one recorded
full-schedule trajectory per question replays each setting exactly (`replay_cvc`); then BWEC's tau_b
(TUNE_TAU_B), decoded for real; last the gate's threshold that runs at LATCH's mean NFE (`replay_gate`),
so the two stop rules are compared at the same speed. Knows nothing about training.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

from fovea.bench.report import write_rows
from fovea.data import TASKS, eval_seeds, make_sample, tuning_seeds
from fovea.data.scoring import answer_correct
from fovea.diffusion.config import BLOCK_LENGTHS, METHODS, DiffusionDecodeConfig, LatchConfig, ScheduleConfig
from fovea.diffusion.decode import answer_of, diffusion_generate

TASK_NAMES = tuple(f"{f}/{t}" for f, ts in TASKS.items() for t in ts)
AUTOREGRESSIVE = "autoregressive"      # the shipped target, greedy: the reference the app also times
TUNE_GRID = {"tau_c": (0.5, 0.7, 0.8, 0.9, 0.95, 0.99), "stable_steps": (1, 2, 3, 4)}
TUNE_BLOCKS = BLOCK_LENGTHS
TUNE_TAU_B = (0.7, 0.8, 0.9, 0.95, 0.99)
# the gate's thresholds; the one whose replayed mean NFE is nearest LATCH's is the gate "at LATCH's speed"
TUNE_GATE = (0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.93, 0.95, 0.97, 0.98, 0.99)


def questions(n_per_task: int, seeds=eval_seeds) -> list:
    """n held-out samples of every task, task by task."""
    return [make_sample(seed, *task.split("/")) for task in TASK_NAMES for seed in seeds(n_per_task)]


def measure(model, samples, methods, record: bool = False, target=None, block_length: int | None = None,
            configs: dict | None = None, progress: bool = False) -> list[dict]:
    """One row per (question, method): correct, NFE, seconds, answer tokens, the rule that stopped it.
    The method AUTOREGRESSIVE decodes with `target` (a BundledTarget) instead of the diffusion model.
    A method is a preset's name, or a name in `configs` ({name: DiffusionDecodeConfig}, the tuning's
    candidates); `block_length` replaces the shared block length (the tuning sweep). `progress` prints a
    line to stderr after each task's questions."""
    configs = {m: (configs or {}).get(m) or DiffusionDecodeConfig.from_name(m) for m in methods if m != AUTOREGRESSIVE}
    if block_length is not None:
        configs = {m: c.with_block_length(block_length) for m, c in configs.items()}
    rows = []
    for i, s in enumerate(samples):
        task = f"{s.family}/{s.task}"
        order = methods[i % len(methods):] + methods[: i % len(methods)]   # rotated: drift cancels
        for m in order:
            if m == AUTOREGRESSIVE:
                row = autoregressive_row(target, s, model.canvas.length)
            else:
                r = diffusion_generate(model, s.image, s.question, configs[m], task=task, record=record)
                row = {"text": r.text, "nfe": r.nfe, "seconds": r.seconds, "answer_tokens": r.answer_tokens,
                       "stopped_by": r.stopped_by, **({"result": r} if record else {})}
            rows.append({"task": task, "method": m, "correct": answer_correct(s, row["text"]), **row})
        if progress and (i + 1 == len(samples) or f"{samples[i + 1].family}/{samples[i + 1].task}" != task):
            print(f"[{i + 1}/{len(samples)}] {task} done", file=sys.stderr, flush=True)
    return rows


@torch.no_grad()
def autoregressive_row(target, sample, max_new_tokens: int) -> dict:
    """The shipped target's greedy answer, timed the same way (prefill included): NFE = forward passes."""
    start = time.perf_counter()
    prompt = target.prepare(sample.image, sample.question)
    out = target.model.generate(input_ids=prompt.input_ids, **prompt.model_inputs, do_sample=False,
                                max_new_tokens=max_new_tokens, pad_token_id=target.tokenizer.pad_token_id)
    new = out[0, prompt.input_ids.shape[1]:].tolist()
    eos = target.tokenizer.eos_token_id
    answer = new[: new.index(eos)] if eos in new else new
    return {"text": target.tokenizer.decode(answer, skip_special_tokens=True).strip(), "nfe": len(new),
            "seconds": time.perf_counter() - start, "answer_tokens": len(answer), "stopped_by": "eos"}


def summarise(rows: list[dict], methods) -> dict:
    """{method: {task or "all": accuracy, mean NFE, tokens/s, and NFE and tokens/s over the full schedule's}}."""
    out = {}
    for m in methods:
        out[m] = {}
        for task in (*TASK_NAMES, "all"):
            sel = [r for r in rows if r["method"] == m and task in (r["task"], "all")]
            if sel:
                tps = sum(r["answer_tokens"] for r in sel) / max(sum(r["seconds"] for r in sel), 1e-9)
                out[m][task] = {"n": len(sel), "accuracy": round(statistics.mean(r["correct"] for r in sel), 4),
                                "nfe": round(statistics.mean(r["nfe"] for r in sel), 2), "tokens_per_s": round(tps, 1)}
    if "full" in out:
        for m, tasks in out.items():
            for task, cell in tasks.items():
                ref = out["full"][task]
                cell["nfe_reduction"] = round(ref["nfe"] / cell["nfe"], 2)
                cell["speedup"] = round(cell["tokens_per_s"] / max(ref["tokens_per_s"], 1e-9), 2)
                cell["accuracy_delta"] = round(cell["accuracy"] - ref["accuracy"], 4)
                if AUTOREGRESSIVE in out:
                    ar = out[AUTOREGRESSIVE][task]["tokens_per_s"]
                    cell["speedup_vs_autoregressive"] = round(cell["tokens_per_s"] / max(ar, 1e-9), 2)
    return out


def accuracy(model, n_per_task: int, method: str = "full") -> dict:
    """Held-out decoded accuracy per task with one method, and the mean NFE (training's evaluation)."""
    was = model.training
    model.eval()
    rows = measure(model, questions(n_per_task), [method])
    model.train(was)
    summary = summarise(rows, [method])[method]
    return {"method": method, **{t: c["accuracy"] for t, c in summary.items()}, "nfe": summary["all"]["nfe"]}


def replay(steps, fires) -> tuple[int, tuple[int, ...]]:
    """(NFE, final canvas) had a stop rule ended a recorded full-schedule decode: the first step where
    `fires(step, settled, held)` holds, its prediction filling the rest; the full schedule's own end when
    it never does. `settled` is the step's confidence with the positions committed before it at 1.0 (as
    fovea.diffusion.decode.settled reads it); `held` the steps the candidate span has kept its place and
    tokens, this one included (as decode.hold_span counts)."""
    held, last, before = 0, None, (False,) * len(steps[0].prediction)
    for st in steps:
        key = None if st.span is None else (*st.span, st.prediction[st.span[0]:st.span[1]])
        held = held + 1 if key is not None and key == last else int(key is not None)
        last = key
        if fires(st, [1.0 if done else c for c, done in zip(st.confidence, before)], held):
            return st.step + 1, st.prediction
        before = st.committed
    return len(steps), steps[-1].prediction


def replay_cvc(steps, tau_c: float, stable_steps: int) -> tuple[int, tuple[int, ...]]:
    """CVC replayed (`replay`): the span held `stable_steps` steps at minimum settled confidence >= tau_c."""
    return replay(steps, lambda st, conf, held: st.span is not None and held >= stable_steps
                  and min(conf[st.span[0]:st.span[1]]) >= tau_c)


def replay_gate(steps, threshold: float) -> tuple[int, tuple[int, ...]]:
    """The fixed-region gate replayed (`replay`): the whole canvas's mean settled confidence >= threshold."""
    return replay(steps, lambda st, conf, held: sum(conf) / len(conf) >= threshold)


def replayed(samples, rows, model, stop) -> dict:
    """Per-task accuracy and mean NFE of recorded full-schedule decodes (`rows`, with their results) cut
    by `stop(steps) -> (nfe, canvas)`."""
    hits, nfe = {}, []
    for sample, row in zip(samples, rows):
        steps_used, canvas = stop(row["result"].steps)
        hits.setdefault(row["task"], []).append(answer_correct(sample, answer_of(model, canvas)[1]))
        nfe.append(steps_used)
    return {"nfe": statistics.mean(nfe), **{t: statistics.mean(v) for t, v in hits.items()}}


def tune(model, n_per_task: int, blocks=TUNE_BLOCKS, tau_bs=TUNE_TAU_B, progress: bool = False) -> dict:
    """On tuning seeds: the full schedule's accuracy at each block length in `blocks`, the chosen one the
    most accurate over all tasks (ties: the longer block); then, at that length, per (tau_c,
    stable_steps), per-task accuracy and mean NFE replayed from its full-schedule trajectories. The
    chosen setting is the one with the fewest steps whose accuracy is within 2 points of the full
    schedule's on every task (ties: the larger tau_c). Last, with that CVC, BWEC at each tau_b in
    `tau_bs`, decoded for real (BWEC changes the trajectory, so it cannot be replayed), chosen by the
    same rule (ties: the larger tau_b); on blocks of 1 BWEC cannot act (decode.bwec_fires), so only the
    largest tau_b is decoded. And the fixed-region gate at LATCH's speed: of the thresholds in
    TUNE_GATE, replayed, the one whose mean NFE is nearest the chosen LATCH's (ties: the larger)."""
    samples = questions(n_per_task, tuning_seeds)
    by_block = {b: measure(model, samples, ["full"], record=True, block_length=b, progress=progress) for b in blocks}
    block_accuracy = {b: statistics.mean(r["correct"] for r in rows) for b, rows in by_block.items()}
    block = max(blocks, key=lambda b: (block_accuracy[b], b))
    rows = by_block[block]
    grid = {f"tau_c={tau_c},s={st}": {"tau_c": tau_c, "stable_steps": st,
                                     **replayed(samples, rows, model, lambda steps: replay_cvc(steps, tau_c, st))}
            for tau_c in TUNE_GRID["tau_c"] for st in TUNE_GRID["stable_steps"]}
    full = {t: statistics.mean(r["correct"] for r in rows if r["task"] == t) for t in TASK_NAMES}
    chosen = fewest_steps_within(grid, full, "tau_c")
    tau_bs = (max(tau_bs),) if block == 1 else tau_bs          # every tau_b decodes the same tokens there
    bwec = {} if chosen is None else tune_bwec(model, samples, block, chosen, tau_bs, progress)
    chosen_bwec = fewest_steps_within(bwec, full, "tau_b")
    latch = chosen_bwec or chosen
    gate = {f"threshold={g}": {"threshold": g, **replayed(samples, rows, model, lambda steps: replay_gate(steps, g))}
            for g in TUNE_GATE}
    gate_choice = None if latch is None else min(gate.values(), key=lambda g: (abs(g["nfe"] - latch["nfe"]), -g["threshold"]))
    return {"block_accuracy": block_accuracy, "block_length": block, "full_accuracy": full,
            "full_nfe": statistics.mean(r["nfe"] for r in rows), "grid": grid, "chosen": chosen,
            "bwec": bwec, "chosen_tau_b": None if chosen_bwec is None else chosen_bwec["tau_b"],
            "gate": gate, "chosen_gate": None if gate_choice is None else gate_choice["threshold"],
            "n_per_task": n_per_task, "seeds": "tuning_seeds"}


def fewest_steps_within(candidates: dict, full: dict, threshold: str, points: float = 0.02) -> dict | None:
    """The tuning rule: of the candidates ({name: {"nfe", threshold, task: accuracy}}) within `points`
    of the full schedule's accuracy on every task, the one with the fewest steps (ties: the larger
    threshold); None when none is."""
    ok = [g for g in candidates.values() if all(g[t] >= full[t] - points for t in TASK_NAMES)]
    return min(ok, key=lambda g: (g["nfe"], -g[threshold])) if ok else None


def tune_bwec(model, samples, block: int, cvc: dict, tau_bs, progress: bool = False) -> dict:
    """LATCH with the chosen CVC and BWEC at each tau_b, decoded on `samples`: per-task accuracy and mean NFE."""
    configs = {f"tau_b={tb}": DiffusionDecodeConfig(
        "latch", schedule=ScheduleConfig(block_length=block),
        latch=LatchConfig(cvc=True, tau_c=cvc["tau_c"], stable_steps=cvc["stable_steps"], bwec=True, tau_b=tb))
        for tb in tau_bs}
    rows = measure(model, samples, list(configs), configs=configs, progress=progress)
    out = {}
    for (name, cfg) in configs.items():
        mine = [r for r in rows if r["method"] == name]
        out[name] = {"tau_b": cfg.latch.tau_b, "nfe": statistics.mean(r["nfe"] for r in mine),
                     **{t: statistics.mean(r["correct"] for r in mine if r["task"] == t)
                        for t in dict.fromkeys(r["task"] for r in mine)}}
    return out


def markdown(summary: dict, meta: dict) -> str:
    lines = [f"# Diffusion decoding, {meta['n_per_task']} held-out questions per task ({meta['model']})", "",
             "accuracy / mean NFE / tokens/s (x the full schedule's, x the autoregressive target's)", "",
             "| task | " + " | ".join(summary) + " |", "|---|" + "---|" * len(summary)]
    for task in (*TASK_NAMES, "all"):
        cells = [summary[m].get(task) for m in summary]
        lines.append(f"| {task} | " + " | ".join(
            f"{c['accuracy']:.0%} / {c['nfe']:.0f} / {c['tokens_per_s']:.0f} ({c.get('speedup', 1):.2f}x"
            + (f", {c['speedup_vs_autoregressive']:.2f}x AR)" if "speedup_vs_autoregressive" in c else ")") if c else "-"
            for c in cells) + " |")
    return "\n".join(lines + ["", f"`{meta['command']}`", ""])


def main(argv=None) -> None:
    from fovea.diffusion.model import DEFAULT_DIFFUSION_DIR, load_diffusion
    from fovea.models.bundled import DEFAULT_TARGET_DIR, load_target

    p = argparse.ArgumentParser(prog="python -m fovea.bench --diffusion", description=__doc__)
    p.add_argument("--model", type=Path, default=DEFAULT_DIFFUSION_DIR, help="an exported diffusion model folder")
    p.add_argument("--n", type=int, default=50, help="held-out questions per task")
    p.add_argument("--methods", nargs="+", default=[*METHODS, AUTOREGRESSIVE], choices=[*METHODS, AUTOREGRESSIVE])
    p.add_argument("--target", type=Path, default=DEFAULT_TARGET_DIR, help="the autoregressive target timed beside")
    p.add_argument("--tune", action="store_true", help="choose LATCH's CVC thresholds on tuning seeds instead")
    p.add_argument("--blocks", type=int, nargs="+", default=list(TUNE_BLOCKS),
                   help="with --tune: the block lengths the full schedule is tried at")
    p.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    p.add_argument("--out", type=Path, default=Path("assets/results/diffusion_bench"))
    args = p.parse_args(argv)
    if args.n < 1 or args.threads < 1:
        p.error("--n and --threads must be at least 1")
    if any(b < 1 for b in args.blocks):
        p.error("--blocks must be at least 1")
    try:
        model = load_diffusion(args.model)
        target = load_target(args.target) if AUTOREGRESSIVE in args.methods and not args.tune else None
    except FileNotFoundError as e:
        raise SystemExit(str(e))
    torch.set_num_threads(args.threads)
    meta = {"model": str(args.model), "n_per_task": args.n, "threads": args.threads, "date": time.strftime("%Y-%m-%d"),
            "command": "python -m fovea.bench --diffusion " + " ".join(sys.argv[1:] if argv is None else argv)}
    args.out.mkdir(parents=True, exist_ok=True)
    if args.tune:
        result = {**meta, **tune(model, args.n, blocks=tuple(args.blocks), progress=True)}
        (args.out / "tune.json").write_text(json.dumps(result, indent=2))
        print(json.dumps({k: result[k] for k in ("block_accuracy", "block_length", "chosen", "chosen_tau_b", "chosen_gate",
                                                 "full_nfe")},
                         indent=2))
        return
    rows = measure(model, questions(args.n), args.methods, target=target, progress=True)
    summary = summarise(rows, args.methods)
    rows_file = write_rows(args.out, rows)
    (args.out / "results.json").write_text(json.dumps({**meta, "rows_file": rows_file, "summary": summary}, indent=2))
    (args.out / "results.md").write_text(markdown(summary, meta))
    print(markdown(summary, meta))


if __name__ == "__main__":
    main()

"""`python -m fovea.train rebuild`: retrain every shipped drafter and the assistant on a (new) target.

A drafter is trained on one target's states, so continuing the target makes every shipped drafter stale
(`TargetMismatchWarning`). This runs the README's recipe for all of them, in order, each step in its
own run directory (resumable: re-run the same command after an interruption) and skipped once done:

1. `pair_full`: the full-context FOVEA drafter and its no-correction twin continue together for 600
   steps on fresh batches (the twin is exported to its shipped folder, `fovea.methods.CONTEXTS`);
2. `adapter_full`: the shipped full-context FOVEA drafter, the twin's frozen base plus a correction
   with an image-state memory and retrieval grounding (`--adapter`), 500 steps, exported as an adapter
   that loads its base from the twin's folder beside it (so between steps 1 and 2 the shipped FOVEA
   drafter is refused: its base changed);
3. `pair_text`, 4. `deep_text`: the same for the text context; the correction is the shipped 64-wide
   one corrected at every depth, trained on depths 0-3 (`--unroll 4`), 800 steps;
5. `assistant`: the `generate(assistant_model=...)` baseline's small LM, retrained on the world's text.

Each pair continues the shipped drafters (`--init-from`), so a rebuild costs about an hour on 2 cores
(`--dry-run` lists the commands and their measured times) rather than the hours of a start from scratch.

`--from-dumps` runs the target once per drafter step first (`python -m fovea.train dump`, the step's
seeds, 16 samples per step, under RUNS/dumps/STEP) and trains each drafter step from its dump
(`drafter --dumps`): the same batches as the online recipe, the target no longer in the loop.
`--shared-dump N` dumps N samples once (RUNS/dumps/shared) and trains every drafter step from that one
dump, each step in its own seeded order (`drafter --dump-shuffle`): dump once, train many. On a deep
target, where the target's pass dominates, this is the cheap way: N = 12,800 covers the longest step.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

from fovea.data.generate import EVAL_SEED_START
from fovea.methods import CONTEXTS
from fovea.models.bundled import ASSETS, DEFAULT_TARGET_DIR

# the highest --seed-base: its five steps' seeds (1,000,000 apart, a few tens of thousands used each) stay
# far below the evaluation seeds
MAX_SEED_BASE = EVAL_SEED_START - 100_000_000


@dataclass(frozen=True)
class Step:
    name: str
    command: str              # the `python -m fovea.train` subcommand
    argv: tuple[str, ...]
    minutes: float            # measured on 2 cores (README), for the plan
    writes: tuple[str, ...]   # the shipped folders it exports


def plan(target: Path, assets: Path, runs: Path, seed_base: int) -> list[Step]:
    """The rebuild's steps, in order. Seed offsets are seed_base + k * 1,000,000: fresh batches, never
    the evaluation range (`fovea.data.generate`)."""
    a, r = Path(assets), Path(runs)
    common = ("--target", str(target))
    full, full_twin = CONTEXTS["full"].folders
    text, text_twin = CONTEXTS["text"].folders

    def seeds(k: int) -> tuple[str, str]:
        return "--seed-offset", str(seed_base + k * 1_000_000)

    # --minutes is a safety net far above the measured times: a step ends on its step count, not its clock
    pair = ("--total-steps", "600", "--warmup", "50", "--lr", "5e-4", "--memory-source", "hidden", "--minutes", "120")
    adapter = ("--adapter", "--memory-source", "hidden", "--warmup", "30", "--lr", "1e-3", "--minutes", "120")
    return [
        Step("pair_full", "drafter", (*common, "--context", "full", "--init-from", str(a / full),
                                      str(a / full_twin), "--fovea", "ground_weight=1",
                                      "--out", str(r / "pair_full"), "--baseline-out", str(a / full_twin),
                                      "--run-dir", str(r / "pair_full_run"), *pair, *seeds(0)),
             14, (full_twin,)),
        Step("adapter_full", "drafter", (*common, "--context", "full", *adapter, "--init-from", str(r / "pair_full"),
                                         str(a / full_twin), "--fovea", "ground_weight=1",
                                         "--out", str(a / full), "--run-dir", str(r / "adapter_full_run"),
                                         "--total-steps", "500", *seeds(1)),
             7, (full,)),
        Step("pair_text", "drafter", (*common, "--context", "text", "--init-from", str(a / text),
                                      str(a / text_twin), "--fovea", "hidden=64", "max_depth=8",
                                      "ground_weight=1", "--out", str(r / "pair_text"),
                                      "--baseline-out", str(a / text_twin),
                                      "--run-dir", str(r / "pair_text_run"), *pair, *seeds(2)),
             12, (text_twin,)),
        Step("deep_text", "drafter", (*common, "--context", "text", *adapter, "--init-from", str(r / "pair_text"),
                                      str(a / text_twin), "--fovea", "hidden=64", "max_depth=8",
                                      "ground_weight=1", "--out", str(a / text),
                                      "--run-dir", str(r / "deep_text_run"), "--total-steps", "800", "--unroll", "4",
                                      *seeds(3)),
             18, (text,)),
        Step("assistant", "assistant", (*common, "--out", str(a / "assistant"), "--run-dir", str(r / "assistant_run"),
                                        "--minutes", "5", *seeds(4)),
             5, ("assistant",)),
    ]


DUMP_BATCH = 16                # DrafterTrainConfig.batch_size: the samples each drafter step reads
# dumping the bundled target, ms per sample: 80 (64 samples, 1 thread, 2026-12-06; assets/results/dumps)
DUMP_MS_PER_SAMPLE = 80


def dump_step(name: str, target: Path, folder: Path, samples: int, seed_offset) -> Step:
    """`python -m fovea.train dump` of `samples` generator samples from `seed_offset` into `folder`;
    its minutes are DUMP_MS_PER_SAMPLE per sample."""
    return Step(name, "dump", ("--set", f"target.path={target}", f"data.dumps={folder}", f"data.samples={samples}",
                               f"data.seed_offset={seed_offset}"),
                round(samples * DUMP_MS_PER_SAMPLE / 60_000), ())


def with_dumps(steps: list[Step], target: Path, runs: Path) -> list[Step]:
    """The plan with a dump before every drafter step (its seeds, total steps x DUMP_BATCH samples)
    and that step trained from it. A dump's minutes are DUMP_MS_PER_SAMPLE per sample; training from a
    dump is not timed yet on the full recipe, so the plan keeps the online minutes for those steps."""
    out = []
    for s in steps:
        if s.command != "drafter":
            out.append(s)
            continue
        opts = dict(zip(s.argv, s.argv[1:]))
        folder = Path(runs) / "dumps" / s.name
        samples = int(opts["--total-steps"]) * DUMP_BATCH
        out.append(dump_step(f"dump_{s.name}", target, folder, samples, opts["--seed-offset"]))
        out.append(replace(s, argv=(*s.argv, "--dumps", str(folder))))
    return out


def with_shared_dump(steps: list[Step], target: Path, runs: Path, samples: int, seed_base: int) -> list[Step]:
    """The plan with one dump of `samples` samples (seeds seed_base + 5,000,000: after the five steps'
    ranges) before the first drafter step, and every drafter step trained from it in its own order."""
    folder = Path(runs) / "dumps" / "shared"
    out, k = [dump_step("dump_shared", target, folder, samples, seed_base + 5_000_000)], 0
    for s in steps:
        if s.command == "drafter":
            k += 1
            s = replace(s, argv=(*s.argv, "--dumps", str(folder), "--dump-shuffle", str(k)))
        out.append(s)
    return out


def scaled(steps: list[Step], factor: float) -> list[Step]:
    """Each drafter step's --total-steps (and its planned minutes) times `factor`, at least 50 steps: for a
    target close to the one the shipped drafters were trained on, where their warm start is nearly there."""
    out = []
    for s in steps:
        if s.command == "drafter" and factor != 1.0:
            argv = list(s.argv)
            i = argv.index("--total-steps") + 1
            argv[i] = str(max(50, round(int(argv[i]) * factor)))
            s = replace(s, argv=tuple(argv), minutes=s.minutes * factor)
        out.append(s)
    return out


def steps_of(args) -> list[Step]:
    steps = scaled(plan(args.target, args.assets, args.runs, args.seed_base), args.scale_steps)
    if args.shared_dump:
        return with_shared_dump(steps, args.target, args.runs, args.shared_dump, args.seed_base)
    return with_dumps(steps, args.target, args.runs) if args.from_dumps else steps


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog="python -m fovea.train rebuild", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--target", type=Path, default=DEFAULT_TARGET_DIR, help="the target the drafters are for")
    p.add_argument("--assets", type=Path, default=ASSETS, help="where the shipped drafters are read and written")
    p.add_argument("--runs", type=Path, default=Path("runs/rebuild"), help="run directories and done-markers")
    p.add_argument("--seed-base", type=int, default=30_000_000,
                   help="first training seed offset (each step adds 1,000,000); pick one no earlier run used")
    p.add_argument("--only", nargs="+", metavar="STEP", help="run only these steps (in plan order)")
    p.add_argument("--force", action="store_true", help="run steps already marked done again")
    p.add_argument("--dry-run", action="store_true", help="print the commands and their measured times, run nothing")
    p.add_argument("--from-dumps", action="store_true",
                   help="dump the target's states once per drafter step (RUNS/dumps), then train each step from its dump")
    p.add_argument("--shared-dump", type=int, default=0, metavar="SAMPLES",
                   help="dump SAMPLES samples once (RUNS/dumps/shared) and train every drafter step from that dump, "
                        "each in its own seeded order (12,800 covers the longest step's 800 x 16 samples once)")
    p.add_argument("--scale-steps", type=float, default=1.0, metavar="F",
                   help="train each drafter step for F times its recipe's steps (0 < F <= 1; at least 50): for a "
                        "target the shipped drafters nearly fit already, e.g. one distilled from the shipped target")
    args = p.parse_args(argv)
    if not 0 < args.scale_steps <= 1:
        p.error(f"--scale-steps must be in (0, 1], got {args.scale_steps}")
    if args.shared_dump and args.from_dumps:
        p.error("--shared-dump and --from-dumps are two ways to dump: pick one")
    if args.shared_dump < 0:
        p.error(f"--shared-dump must be a positive number of samples, got {args.shared_dump}")
    names = [s.name for s in steps_of(args)]
    unknown = sorted(set(args.only or ()) - set(names))
    if unknown:
        p.error(f"--only: unknown step(s) {unknown}; the steps are {names}")
    if not 0 <= args.seed_base < MAX_SEED_BASE:
        p.error(f"--seed-base must be in [0, {MAX_SEED_BASE:,}), got {args.seed_base}")
    if not args.dry_run:
        if not (args.target / "config.json").exists():
            p.error(f"--target {args.target} is not a target folder (no config.json)")
        missing = [str(args.assets / f) for c in CONTEXTS.values() for f in c.folders
                   if not (args.assets / f / "model.safetensors").exists()]
        if missing:
            p.error(f"the rebuild continues the shipped drafters; missing: {missing}")
    return args


def main(argv=None) -> None:
    args = parse_args(argv)
    steps = [s for s in steps_of(args) if not args.only or s.name in args.only]
    total = sum(s.minutes for s in steps)
    print(f"rebuild: {len(steps)} steps, about {total:.0f} min on 2 cores")
    for step in steps:
        marker = args.runs / f"{step.name}.done"
        line = f"python -m fovea.train {step.command} " + " ".join(step.argv)
        if args.dry_run:
            print(f"# {step.name} (~{step.minutes:.0f} min, writes {', '.join(step.writes)})\n{line}")
            continue
        if marker.exists() and not args.force:
            print(f"{step.name}: done before ({marker}), skipped")
            continue
        print(f"{step.name} (~{step.minutes:.0f} min): {line}", flush=True)
        start = time.time()
        done = subprocess.run([sys.executable, "-m", "fovea.train", step.command, *step.argv])
        if done.returncode:
            raise SystemExit(f"rebuild: step {step.name} failed (exit {done.returncode}); fix it and re-run: "
                             "finished steps are skipped, this one resumes from its run directory")
        args.runs.mkdir(parents=True, exist_ok=True)
        marker.write_text(json.dumps({"command": line, "minutes": round((time.time() - start) / 60, 1)}))

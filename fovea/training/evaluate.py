"""`python -m fovea.train evaluate`: exact-answer accuracy of the bundled target on held-out
questions of every task family (seeds >= 1e9, never used in training), written to a committed
results file. The quality bar of the bundled model is >= 95% on colour, count and OCR reading.
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from fovea.data import TASKS
from fovea.models.bundled import ASSETS, DEFAULT_TARGET_DIR, load_target
from fovea.training.target import evaluate

BAR_TASKS = ("scene/colour", "scene/count", "ocr/read")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m fovea.train evaluate", description=__doc__)
    p.add_argument("--target", type=Path, default=DEFAULT_TARGET_DIR)
    p.add_argument("--n", type=int, default=40, help="questions per task")
    p.add_argument("--out", type=Path, default=ASSETS / "results" / "target_accuracy.json")
    args = p.parse_args(argv)
    if args.n < 1:
        raise SystemExit("--n must be at least 1")
    target = load_target(args.target)
    tasks = [(fam, task) for fam, names in TASKS.items() for task in names]
    t0 = time.time()
    acc = evaluate(target.model, target.tokenizer, n_per_task=args.n, tasks=tasks)
    report = {"date": time.strftime("%Y-%m-%d"), "n_per_task": args.n, "accuracy": acc,
              "quality_bar_tasks": {k: acc[k] for k in BAR_TASKS if k in acc},
              "meets_95_percent_bar": all(acc[k] >= 0.95 for k in BAR_TASKS if k in acc),
              "minutes": round((time.time() - t0) / 60, 2), "threads": torch.get_num_threads()}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2))
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()

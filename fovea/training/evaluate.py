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


@torch.no_grad()
def probe_accuracy(target, folder: Path, n: int) -> dict | None:
    """Per-patch accuracy of the target's auxiliary heads on held-out images, on patches whose label is
    an object (colour, shape, character, bar), not background: whether the projected visual tokens
    carry what the answers need. None when the folder has no aux heads."""
    from safetensors.torch import load_file

    from fovea.data import FAMILIES, NUM_LABELS, eval_seeds, make_sample
    from fovea.training.target import AuxHeads

    path = folder / "aux_heads.safetensors"
    if not path.exists():
        return None
    aux = AuxHeads(target.hidden_size)
    aux.load_state_dict({k: v.float() for k, v in load_file(str(path)).items()})
    hits = {k: [0, 0] for k in NUM_LABELS}
    for family in FAMILIES:
        for seed in eval_seeds(n):
            s = make_sample(seed, family=family)
            feats = target.visual_tokens(target.prepare(s.image, s.question))        # [64, D]
            for kind, head in aux.heads.items():
                labels = torch.as_tensor(s.patch_labels[kind]).flatten()
                on = labels > 0                                                    # object patches only
                if on.any():
                    pred = head(feats).argmax(-1)
                    hits[kind][0] += int((pred[on] == labels[on]).sum())
                    hits[kind][1] += int(on.sum())
    return {kind: {"accuracy": round(h / t, 3), "patches": t} for kind, (h, t) in hits.items() if t}


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
              "visual_probe_object_patches": probe_accuracy(target, args.target, max(4, args.n // 2)),
              "minutes": round((time.time() - t0) / 60, 2), "threads": torch.get_num_threads()}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2))
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()

"""`python -m fovea.train layer-use`: does every decoder layer of a bundled target do real work?

Two measurements on held-out prompts (seeds never used in training):
1. per decoder layer, the mean norm of its residual update (output stream minus input stream) over
   the mean norm of its input stream, on every prompt position: a layer that is an identity (padding)
   scores 0; the bar is >= 0.05 for every layer;
2. the exact-answer accuracy (the target's scorer) of each 4-layer subnetwork that keeps every
   (L/4)-th layer, offsets 0 .. L/4-1, against the full model's: no such subnetwork may keep more
   than 70% of the full model's task sum (it would mean the other layers are passengers).
Writes one JSON (default assets/results/layer_use.json). Knows nothing about speculative decoding.
"""
from __future__ import annotations

import argparse
import copy
import json
from pathlib import Path

import torch

from fovea.data import eval_seeds, make_sample
from fovea.models.bundled import ASSETS, DEFAULT_TARGET_DIR, encode_prompt, image_to_pixels, load_target, prompt_format

UPDATE_BAR = 0.05
SUBNET_BAR = 0.70
SUBNET_LAYERS = 4


@torch.no_grad()
def update_ratios(model, tokenizer, n_per_family: int = 8) -> list[float]:
    """Per decoder layer: mean ||layer(x) - x|| / mean ||x|| over all positions of held-out prompts."""
    from fovea.data import FAMILIES

    layers = model.model.language_model.layers
    sums = torch.zeros(len(layers), 2, dtype=torch.float64)      # [L, (update norm, input norm)]

    def hook(i):
        def keep(_module, args, output):
            x = args[0]
            y = output[0] if isinstance(output, tuple) else output
            sums[i, 0] += (y - x).norm(dim=-1).double().sum()
            sums[i, 1] += x.norm(dim=-1).double().sum()
        return keep

    handles = [layer.register_forward_hook(hook(i)) for i, layer in enumerate(layers)]
    n_image, order = prompt_format(model.config)
    size = model.config.vision_config.image_size
    try:
        for family in FAMILIES:
            for seed in eval_seeds(n_per_family):
                s = make_sample(seed, family=family)
                ids = torch.tensor([encode_prompt(tokenizer, s.question, n_image, order)])
                model(input_ids=ids, pixel_values=image_to_pixels(s.image, size))
    finally:
        for h in handles:
            h.remove()
    return [round(float(u / x), 4) for u, x in sums]


def subnetwork(model, keep: list[int]):
    """A copy of the model whose decoder keeps only layers `keep` (in order)."""
    sub = copy.deepcopy(model)
    lm = sub.model.language_model
    lm.layers = torch.nn.ModuleList([lm.layers[i] for i in keep])
    for new_index, layer in enumerate(lm.layers):
        layer.self_attn.layer_idx = new_index
    sub.config.text_config.num_hidden_layers = len(keep)
    return sub


def subnetwork_report(model, tokenizer, n_per_task: int) -> dict:
    """The full model's per-task accuracy and sum, and each every-(L/4)-th-layer subnetwork's, with the
    share of the full sum it keeps."""
    from fovea.training.target import evaluate

    depth = model.config.text_config.num_hidden_layers
    stride = depth // SUBNET_LAYERS
    full = evaluate(model, tokenizer, n_per_task=n_per_task)
    full_sum = sum(full.values())
    out = {"full": {"sum": round(full_sum, 3), "tasks": full}, "subnetworks": []}
    if stride < 2:
        return out
    for offset in range(stride):
        keep = list(range(offset, depth, stride))[:SUBNET_LAYERS]
        acc = evaluate(subnetwork(model, keep), tokenizer, n_per_task=n_per_task)
        kept = sum(acc.values()) / max(full_sum, 1e-9)
        out["subnetworks"].append({"layers": keep, "sum": round(sum(acc.values()), 3), "share": round(kept, 3),
                                   "meets_bar": kept <= SUBNET_BAR, "tasks": acc})
    return out


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m fovea.train layer-use", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--target", type=Path, default=DEFAULT_TARGET_DIR)
    p.add_argument("--n", type=int, default=10, help="questions per task for the subnetwork accuracy")
    p.add_argument("--n-prompts", type=int, default=8, help="prompts per family for the update norms")
    p.add_argument("--out", type=Path, default=ASSETS / "results" / "layer_use.json")
    p.add_argument("--threads", type=int, default=0)
    args = p.parse_args(argv)
    if args.n < 1 or args.n_prompts < 1:
        p.error("--n and --n-prompts must be >= 1")
    if args.threads:
        torch.set_num_threads(args.threads)
    try:
        target = load_target(args.target)
    except (FileNotFoundError, ValueError) as e:
        raise SystemExit(str(e))
    model, tokenizer = target.model, target.tokenizer
    ratios = update_ratios(model, tokenizer, args.n_prompts)
    report = {"target": str(args.target), "layers": len(ratios), "update_ratio": ratios,
              "update_bar": UPDATE_BAR, "update_meets_bar": min(ratios) >= UPDATE_BAR,
              "subnet_bar": SUBNET_BAR, "n_per_task": args.n, **subnetwork_report(model, tokenizer, args.n)}
    report["meets_bar"] = report["update_meets_bar"] and all(s["meets_bar"] for s in report["subnetworks"]) \
        and bool(report["subnetworks"])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2))
    print(f"update ratios: min {min(ratios):.3f} (bar {UPDATE_BAR}); full sum {report['full']['sum']}; "
          + "; ".join(f"layers {s['layers']}: {s['share']:.0%}" for s in report["subnetworks"]))


if __name__ == "__main__":
    main()

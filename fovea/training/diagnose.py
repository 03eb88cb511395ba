"""`python -m fovea.train diagnose --target DIR`: why a target's lookups fail, teacher-forced on
held-out questions.

- **By mention kind:** per task, the share of mention tokens predicted right, split by what they
  name (colour, shape, position, size, glyph text, chart label, chart digit). A task's accuracy is a
  mix of easy copies (the shape named in the question) and real lookups (its colour).
- **Found or read:** for each scene colour question, at the state that predicts the colour, the best
  head's attention mass on the named shape in each decoder layer, and whether the colour token is
  right. "Found but misread" (mass >= 0.5, wrong colour) means the readout is the problem, not the
  search.

Writes JSON (default: stdout only).
"""
from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

import torch

from fovea.data import make_sample
from fovea.data.generate import EVAL_SEED_START
from fovea.data.labels import COLOURS, SHAPES
from fovea.models.bundled import load_tokenizer, prompt_format
from fovea.training.packing import as_conversation, pack_batch
from fovea.training.target import ALL_TASKS, forward, grounding_mass, set_attention

POSITION_WORDS = {"top", "middle", "bottom", "left", "right", "centre"}
SEED_START = EVAL_SEED_START + 7000  # held out, apart from evaluate's first seeds


def mention_kind(word: str, family: str) -> str:
    w = word.strip().lower()
    if w in COLOURS:
        return "colour"
    if w in SHAPES:
        return "shape"
    if w in POSITION_WORDS:
        return "position"
    if w in ("small", "large"):
        return "size"
    if family == "chart":
        return "digit" if w.isdigit() else "label"
    return "text"


@torch.no_grad()
def by_mention_kind(model, tokenizer, n: int = 12) -> dict:
    """{task: {kind: [right, total]}} over n held-out questions per task."""
    out: dict = defaultdict(lambda: defaultdict(lambda: [0, 0]))
    fmt, size = prompt_format(model.config), model.config.vision_config.image_size
    for family, task in ALL_TASKS:
        samples = [make_sample(SEED_START + i, family, task) for i in range(n)]
        batch = pack_batch([as_conversation(s) for s in samples], tokenizer, fmt, 2.0, image_size=size)
        logits = forward(model, batch)[0]
        pred, labels = logits.argmax(-1), batch["labels"][:, 1:]
        for i, t in (batch["weights"][:, 1:] == 2.0).nonzero().tolist():
            cell = out[f"{family}/{task}"][mention_kind(tokenizer.decode(labels[i, t]), family)]
            cell[0] += int(pred[i, t] == labels[i, t])
            cell[1] += 1
    return {task: {kind: {"accuracy": round(r / t, 3), "n": t} for kind, (r, t) in kinds.items()}
            for task, kinds in out.items()}


@torch.no_grad()
def found_or_read(model, tokenizer, n: int = 24) -> dict:
    """Scene colour questions: attention mass on the named shape per layer, and found-but-misread."""
    impl = model.config._attn_implementation
    set_attention(model, "eager")
    fmt, size = prompt_format(model.config), model.config.vision_config.image_size
    layers = model.config.text_config.num_hidden_layers
    masses, right, found = defaultdict(list), [], []
    try:
        for i in range(n):
            s = make_sample(SEED_START + i, "scene", "colour")
            batch = pack_batch([as_conversation(s)], tokenizer, fmt, 2.0, image_size=size)
            logits, _, attn, _ = forward(model, batch, attentions=True)
            ids, ground = batch["input_ids"][0], batch["ground"][0]
            t = next(t for t in (ground >= 0).nonzero().flatten().tolist()
                     if tokenizer.decode(ids[t + 1]).strip() == s.short_answer)
            only = dict(batch, ground=torch.full_like(batch["ground"], -1))
            only["ground"][0, t] = ground[t]
            per_layer = [float(grounding_mass(attn, only, model.config.image_token_id, [layer])[0])
                         for layer in range(layers)]
            for layer, mass in enumerate(per_layer):
                masses[layer].append(mass)
            right.append(bool(logits[0, t].argmax() == ids[t + 1]))
            found.append(max(per_layer) >= 0.5)
    finally:
        set_attention(model, impl)
    mean = lambda xs: round(sum(xs) / max(1, len(xs)), 3)  # noqa: E731
    return {"n": n, "colour_right": mean(right), "found": mean(found),
            "found_but_misread": mean([f and not r for f, r in zip(found, right)]),
            "mass_per_layer": {f"layer{layer}": mean(v) for layer, v in masses.items()}}


def main(argv=None) -> None:
    from transformers import LlavaForConditionalGeneration

    p = argparse.ArgumentParser(prog="python -m fovea.train diagnose", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--target", type=Path, required=True, help="an exported target folder")
    p.add_argument("--n", type=int, default=12, help="held-out questions per task")
    p.add_argument("--out", type=Path, help="write the JSON here too")
    args = p.parse_args(argv)
    if not (args.target / "config.json").exists():
        p.error(f"{args.target} has no config.json; pass an exported target folder (e.g. assets/target)")
    if args.n < 1:
        p.error("--n must be >= 1")
    model = LlavaForConditionalGeneration.from_pretrained(str(args.target), dtype=torch.float32).eval()
    tokenizer = load_tokenizer(args.target)
    report = {"target": str(args.target), "by_mention_kind": by_mention_kind(model, tokenizer, args.n),
              "scene_colour_lookup": found_or_read(model, tokenizer, 2 * args.n)}
    text = json.dumps(report, indent=1)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()

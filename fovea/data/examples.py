"""The app's bundled examples: held-out samples (seeds the benchmark and evaluations do not use)
written as PNGs plus an examples.json that keeps each question's gold short answer, so a test can
check that the shipped model answers its own examples right.

`python -m fovea examples [folder]` rewrites assets/examples; `python -m fovea examples --looks
[folder]` rewrites assets/results/layouts, sheets of chart and scene images in training and held-out
looks (fovea.data.looks) with a looks.json naming each tile's look (`python -m fovea.data.examples`
runs the same). Knows nothing about models.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

from PIL import Image

from fovea.data.generate import EVAL_SEED_START, eval_seeds, make_conversation, make_sample
from fovea.data.looks import LOOKS
from fovea.data.sample import CANVAS, letterbox

# (family, task): one a user would try first per family, plus lookups that need the image.
PICKS = (("scene", "count"), ("scene", "colour"), ("scene", "position"), ("ocr", "read"),
         ("chart", "highest"), ("chart", "value"))
FIRST_SEED = EVAL_SEED_START + 400_000  # held out, and far from the seeds benchmarks iterate over


def write_examples(folder: str | Path, picks=PICKS) -> list[dict]:
    """Write one example per pick (the first seed whose image is non-square for scenes, so the
    letterbox shows, and whose count, for a count question, is more than one: a count of one needs
    no counting) and examples.json; returns the entries."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    entries = []
    for i, (family, task) in enumerate(picks):
        seed = FIRST_SEED + i
        sample = make_sample(seed, family, task)
        while family == "scene" and (sample.image.size[0] == sample.image.size[1]
                                     or (task == "count" and sample.short_answer == "1")):
            seed += 1000
            sample = make_sample(seed, family, task)
        name = f"{family}_{task}.png"
        sample.image.save(folder / name)
        entries.append({"image": name, "question": sample.question, "family": family, "task": task,
                        "seed": seed, "answer": sample.short_answer})
    (folder / "examples.json").write_text(json.dumps(entries, indent=1) + "\n")
    return entries


def _in_looks(family: str, side: str, n: int) -> list:
    """The first n images of a family in held-out looks (the layout split) or in training looks (the
    training conversations drawn in one)."""
    if side == "held_out":
        return [make_sample(seed, family, split="layout") for seed in eval_seeds(n)]
    convs = (make_conversation(seed, 1, family) for seed in range(EVAL_SEED_START))
    return [c for _, c in zip(range(n), (c for c in convs if c.look is not None))]


def write_look_sheets(folder: str | Path, per_sheet: int = 4) -> dict:
    """One PNG per (training or held-out looks, chart or scene): per_sheet model inputs side by side, at
    the model's canvas size; and looks.json with each tile's look. Returns that json's content."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    index = {}
    for side, family in ((side, family) for side in ("training", "held_out") for family in LOOKS):
        images = _in_looks(family, side, per_sheet)
        sheet = Image.new("RGB", (per_sheet * (CANVAS + 4) - 4, CANVAS), (255, 255, 255))
        for i, image in enumerate(images):
            sheet.paste(letterbox(image.image), (i * (CANVAS + 4), 0))
        name = f"{side}_{family}.png"
        sheet.save(folder / name, optimize=True)
        index[name] = [dataclasses.asdict(image.look) for image in images]
    (folder / "looks.json").write_text(json.dumps(index, indent=1) + "\n")
    return index


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m fovea examples", description=__doc__.split("\n\n")[0])
    p.add_argument("folder", nargs="?", type=Path,
                   help="where to write (default assets/examples, with --looks assets/results/layouts)")
    p.add_argument("--looks", action="store_true", help="write the look sheets instead of the app's examples")
    args = p.parse_args(argv)
    assets = Path(__file__).resolve().parents[2] / "assets"
    out = args.folder or assets / ("results/layouts" if args.looks else "examples")
    if args.looks:
        print(json.dumps(write_look_sheets(out), indent=1))
        return
    for old in out.glob("*.png"):
        old.unlink()
    print(json.dumps(write_examples(out), indent=1))


if __name__ == "__main__":
    main()

"""The app's bundled examples: held-out samples (seeds the benchmark and evaluations do not use)
written as PNGs plus an examples.json that keeps each question's gold short answer, so a test can
check that the shipped model answers its own examples right.

`python -m fovea.data.examples [folder]` rewrites assets/examples. Knows nothing about models.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from fovea.data.generate import EVAL_SEED_START, make_sample

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


if __name__ == "__main__":
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[2] / "assets" / "examples"
    for old in out.glob("*.png"):
        old.unlink()
    print(json.dumps(write_examples(out), indent=1))

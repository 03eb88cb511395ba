"""Benchmark questions in MMSpec's JSONL layout, for the bench and the acceptance evaluation on real
backbones, and results grouped by its categories.

One question per line, the image path relative to the images folder (default: the JSONL's folder):
    {"image": "images/0001.jpg", "question": "Describe the chart.", "category": "chart"}
Extra keys (e.g. "question_id") are ignored. `load_questions` validates every line and names the bad
ones (`fovea.training.records.read_image_jsonl`); each question's category plays the part a task
family plays for the generated questions. Knows nothing about decoding.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

KEYS = ("image", "question", "category")


@dataclass(frozen=True)
class BenchQuestion:
    image: object           # PIL image, RGB
    question: str
    family: str             # the MMSpec category (grouping key, as `Sample.family` for generated questions)
    task: str               # the same category: MMSpec has no finer task label
    line: int


def load_questions(jsonl: str | Path, images_dir: str | Path | None = None, n: int | None = None) -> list[BenchQuestion]:
    """The first `n` (None: all) questions of an MMSpec-layout JSONL, images decoded."""
    from PIL import Image

    from fovea.training.records import read_image_jsonl

    rows = read_image_jsonl(jsonl, images_dir, KEYS)[: n if n is not None else None]
    out = []
    for obj, path, line in rows:
        with Image.open(path) as im:
            image = im.convert("RGB")
        category = obj["category"].strip()
        out.append(BenchQuestion(image, obj["question"].strip(), category, category, line))
    return out


def bench_questions(jsonl: Path, n: int) -> list[BenchQuestion]:
    """load_questions for a command line: a bad file ends the program with the message, no traceback."""
    from fovea.training.records import RecordError

    try:
        return load_questions(jsonl, n=n)
    except RecordError as err:
        raise SystemExit(f"--mmspec: {err}") from None


def by_category(rows: list[dict], methods: list[str]) -> dict:
    """Bench rows (one per question and method, "family" = category) -> {category: {method: metrics}}
    plus "all", each with the bench's own statistics and the acceptance rate per draft position."""
    from fovea.bench.stats import acceptance_by_position, summarise

    out = {}
    for cat in [*dict.fromkeys(r["family"] for r in rows), "all"]:
        sub = [r for r in rows if cat == "all" or r["family"] == cat]
        summary = summarise(sub, methods)["all"]
        for m in methods:   # the bench's own statistic where `summarise` has it, the same rule otherwise
            lengths = [a for r in sub if r["method"] == m for a in r["accept_lengths"]]
            summary[m].setdefault("acceptance_by_position",
                                  acceptance_by_position(lengths) if m != "autoregressive" else [])
        out[cat] = summary
    return out


def write_by_category(out: Path, rows: list[dict], methods: list[str]) -> str:
    """Write by_category.json and by_category.md into `out`; returns the Markdown."""
    table = by_category(rows, methods)
    lines = ["| category | method | speedup | tau | acceptance at draft position 1, 2, 3, ... |", "|---|---|---|---|---|"]
    for cat, per in table.items():
        for m, s in per.items():
            acc = s.get("acceptance_by_position")
            rates = ", ".join(f"{a:.2f}" for a in acc) if acc else "-"
            speed = s["speedup_ratio_of_medians"]
            lines.append(f"| {cat} | {m} | {speed:.2f}x | {s['tau_with_bonus'] or 1:.2f} | {rates} |"
                         if speed is not None else f"| {cat} | {m} | - | - | {rates} |")
    text = "\n".join(lines) + "\n"
    out.mkdir(parents=True, exist_ok=True)
    (out / "by_category.json").write_text(json.dumps(table, indent=2))
    (out / "by_category.md").write_text(text)
    return text

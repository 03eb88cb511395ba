"""Seeded sample generation across families, train/eval seed ranges, a
tokenizer corpus, and example images.

Each family module provides sample_layout(rng) -> layout (pure data),
options(layout, task) -> the questions with a unique answer, ask(...) -> QA and
render(layout) -> (image, objects, patch labels).

Every random choice flows from string-seeded random.Random instances (never
the global RNG), so a seed reproduces the same sample on any machine. The
family comes from the seed alone and the task from (seed, family), so
make_sample(s) == make_sample(s, family, task) for the family and task it picked.
"""
import random
from collections.abc import Iterator
from pathlib import Path

from fovea.data import charts, ocr, scenes
from fovea.data.sample import Sample
from fovea.data.text import QA

FAMILIES = ("scene", "ocr", "chart")
_MODULES = {"scene": scenes, "ocr": ocr, "chart": charts}
TASKS = {family: module.TASKS for family, module in _MODULES.items()}
EVAL_SEED_START = 1_000_000_000  # training never draws a seed at or above this
TUNE_SEED_START = EVAL_SEED_START + 500_000  # held out too, but kept apart from the benchmark's questions


def train_seeds(n: int, start: int = 0) -> range:
    if start < 0 or start + n > EVAL_SEED_START:
        raise ValueError("training seeds must stay below EVAL_SEED_START")
    return range(start, start + n)


def eval_seeds(n: int) -> range:
    """The held-out questions of the evaluations and the benchmark (never trained on)."""
    if not 0 <= n <= TUNE_SEED_START - EVAL_SEED_START:
        raise ValueError(f"eval_seeds: n must be in [0, {TUNE_SEED_START - EVAL_SEED_START}], got {n}")
    return range(EVAL_SEED_START, EVAL_SEED_START + n)


def tuning_seeds(n: int) -> range:
    """Held-out questions for choosing settings (the tree shape), disjoint from eval_seeds, so a
    default is never picked on the questions that then measure it."""
    if n < 0:
        raise ValueError(f"tuning_seeds: n must be >= 0, got {n}")
    return range(TUNE_SEED_START, TUNE_SEED_START + n)


def _resolve(seed: int, family: str | None, task: str | None) -> tuple[str, str]:
    """Fill in a missing family (round robin over seeds) and task (seeded choice)."""
    if family is None:
        family = FAMILIES[seed % len(FAMILIES)]
    if family not in _MODULES:
        raise ValueError(f"unknown family {family!r}; expected one of {FAMILIES}")
    if task is None:
        task = random.Random(f"task/{seed}/{family}").choice(TASKS[family])
    if task not in TASKS[family]:
        raise ValueError(f"unknown {family} task {task!r}; expected one of {TASKS[family]}")
    return family, task


def _layout_and_text(seed: int, family: str, task: str) -> tuple[object, QA]:
    """A layout on which `task` has a unique answer (resampled until it has), and its question and answer."""
    rng = random.Random(f"sample/{seed}/{family}/{task}")
    module = _MODULES[family]
    while True:
        layout = module.sample_layout(rng)
        choices = module.options(layout, task)
        if choices:
            return layout, module.ask(layout, task, rng.choice(choices), rng)


def make_sample(seed: int, family: str | None = None, task: str | None = None) -> Sample:
    """The sample for this seed; identical pixels and text every call."""
    family, task = _resolve(seed, family, task)
    layout, qa = _layout_and_text(seed, family, task)
    image, objects, labels = _MODULES[family].render(layout)
    return Sample(image, qa.question, qa.answer, family, task, qa.short_answer, objects, qa.mentions, labels)


def iter_corpus_text(n: int, start: int = 0) -> Iterator[str]:
    """'question\\nanswer' of the first n training samples, without drawing images (for a BPE tokenizer)."""
    for seed in train_seeds(n, start):
        _, qa = _layout_and_text(seed, *_resolve(seed, None, None))
        yield f"{qa.question}\n{qa.answer}"


def save_examples(folder: str | Path, per_family: int = 2) -> list[Path]:
    """Write per_family PNGs of each family (plus their text) into folder, for eyeballing."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for family in FAMILIES:
        for seed in range(per_family):
            sample = make_sample(seed, family)
            path = folder / f"{family}_{seed}.png"
            sample.image.save(path)
            path.with_suffix(".txt").write_text(f"{sample.task}\n{sample.question}\n{sample.answer}\n")
            paths.append(path)
    return paths

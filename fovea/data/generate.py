"""Seeded sample generation across families, train/eval seed ranges, a
tokenizer corpus, and example images.

Each family module provides sample_layout(rng) -> layout (pure data),
options(layout, task) -> the questions with a unique answer, ask(...) -> QA and
render(layout) -> (image, objects, patch labels).

Every random choice flows from string-seeded random.Random instances (never
the global RNG), so a seed reproduces the same sample on any machine. The
family comes from the seed alone and the task from (seed, family), so
make_sample(s) == make_sample(s, family, task) for the family and task it picked.

Splits: "train" (held-out seeds of it are the main evaluation), "shifted" (rendering values training
never sees) and "layout" (chart and scene looks training never draws, fovea.data.looks); make_sample
draws the base look on "train" and "shifted". Training conversations mix in the training looks.
"""
import random
from collections.abc import Iterator
from pathlib import Path

from fovea.data import charts, ocr, scenes
from fovea.data.looks import draw_look
from fovea.data.sample import SPLITS, Conversation, Sample
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


def _rng(kind: str, seed: int, family: str, task: str, split: str) -> random.Random:
    """The seeded generator of one sample; the shifted and layout splits draw from their own streams."""
    suffix = "" if split == "train" else f"/{split}"
    return random.Random(f"{kind}/{seed}/{family}/{task}{suffix}")


def _check_split(split: str) -> None:
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; expected one of {tuple(SPLITS)}")


def _layout_and_text(seed: int, family: str, task: str, split: str = "train", look=None) -> tuple[object, QA]:
    """A layout in `look` (None: the base look) on which `task` has a unique answer (resampled until it
    has), and its question and answer."""
    rng = _rng("sample", seed, family, task, split)
    module = _MODULES[family]
    while True:
        layout = module.sample_layout(rng, split) if look is None else module.sample_layout(rng, split, look)
        choices = module.options(layout, task)
        if choices:
            return layout, module.ask(layout, task, _pick(module, layout, task, choices, rng), rng)


def _pick(module, layout, task: str, choices: list, rng: random.Random):
    """The family's own draw among a layout's questions (scenes balance count answers), else uniform."""
    pick = getattr(module, "pick", None)
    return pick(layout, task, choices, rng) if pick is not None else rng.choice(choices)


def make_sample(seed: int, family: str | None = None, task: str | None = None, split: str = "train",
                look=None) -> Sample:
    """The sample for this seed; identical pixels and text every call. `split="shifted"` draws the
    same kind of question in rendering parameters training never sees (sample.STYLES), `split="layout"`
    in a chart or scene look training never draws (fovea.data.looks). `look` (a looks.ChartLook or
    SceneLook of the family) replaces the split's look."""
    _check_split(split)
    family, task = _resolve(seed, family, task)
    look = draw_look(seed, family, split, mixed=False) if look is None else look
    layout, qa = _layout_and_text(seed, family, task, split, look)
    image, objects, labels = _MODULES[family].render(layout)
    return Sample(image, qa.question, qa.answer, family, task, qa.short_answer, objects, qa.mentions, labels, split,
                  look, qa.stress)


def make_conversation(seed: int, turns: int, family: str | None = None, task: str | None = None,
                      split: str = "train", look=None) -> Conversation:
    """One image and up to `turns` question/answer pairs about it, each of a seeded task that has a
    unique answer on this layout (training packs them into one sequence: one image encode, many
    lookups). On the "train" split, looks.WIDE_SHARE of chart and scene images are drawn in a training
    look (never a held-out one), the rest in the base look; on the others the look is make_sample's.
    In the same look, the first turn is make_sample(seed, family, task)'s own question. `look` (a
    looks.ChartLook or SceneLook of the family) replaces the drawn look, as in make_sample."""
    _check_split(split)
    family, first = _resolve(seed, family, task)
    module = _MODULES[family]
    rng = _rng("conversation", seed, family, first, split)
    look = draw_look(seed, family, split, mixed=True) if look is None else look
    layout, qa = _layout_and_text(seed, family, first, split, look)
    qas = [(first, qa)]
    for _ in range(8 * turns):  # bounded: a small layout may offer fewer distinct questions than turns
        if len(qas) == turns:
            break
        task = rng.choice(TASKS[family])
        choices = module.options(layout, task)
        if choices:
            new = module.ask(layout, task, _pick(module, layout, task, choices, rng), rng)
            if all(new.question != old.question for _, old in qas):
                qas.append((task, new))
    image, objects, labels = module.render(layout)
    return Conversation(image, family, qas, objects, labels, split, look)


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

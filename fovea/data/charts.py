"""The "chart" family: a bar chart with 3-5 lettered bars, values 1-9 written
above each bar, and questions about the values.

Labels are letters only, so a digit in the image is always a value. Layouts
are pure data; render() draws them.
"""
import random
import string
from dataclasses import dataclass

import numpy as np
from PIL import Image

from fovea.data import glyphs, text
from fovea.data.labels import CHAR_ID, COLOUR_ID, COLOUR_RGB, box_mask, patch_labels
from fovea.data.sample import IMAGE_SIZE, Obj, box_of
from fovea.data.text import QA, Name

TASKS = ("highest", "value", "describe")
PALETTE = ("red", "green", "blue", "purple", "orange", "cyan")  # white and yellow vanish on light paper
AXIS_X, BASE_Y = 12, 102  # the y axis and the x axis (bar bottoms)
PLOT_X0, PLOT_X1 = 16, 124  # horizontal extent of the bar slots
UNIT = 8.5  # px per value unit: value 9 leaves room for its digit above
FONT_SIZE = 18  # capitals ~13 px tall
GAP = 3  # px between a bar's top and its value digit
MAX_LABEL = {3: 3, 4: 2, 5: 1}  # letters per label that fit a bar's slot
AXIS_RGB, TEXT_RGB = (70, 70, 70), (20, 20, 20)
INK_THRESHOLD = 96


@dataclass(frozen=True)
class Bar:
    label: str
    value: int
    colour: str
    x0: int  # bar rectangle columns [x0, x1)
    x1: int

    @property
    def top(self) -> int:
        return BASE_Y - round(self.value * UNIT)

    @property
    def centre(self) -> int:
        return (self.x0 + self.x1) // 2


@dataclass(frozen=True)
class Layout:
    bars: tuple[Bar, ...]  # left to right, which is also the order of Sample.objects
    background: tuple[int, int, int]


def sample_layout(rng: random.Random) -> Layout:
    n = rng.randint(3, 5)
    slot = (PLOT_X1 - PLOT_X0) / n
    width = round(slot * 0.6)
    labels: list[str] = []
    while len(labels) < n:
        label = "".join(rng.choice(string.ascii_uppercase) for _ in range(rng.randint(1, MAX_LABEL[n])))
        if label not in labels and glyphs.text_width(label, FONT_SIZE) <= slot - 3:
            labels.append(label)
    bars = []
    for i, (label, colour) in enumerate(zip(labels, rng.sample(PALETTE, n))):
        x0 = round(PLOT_X0 + (i + 0.5) * slot - width / 2)
        bars.append(Bar(label, rng.randint(1, 9), colour, x0, x0 + width))
    background = tuple(245 - rng.randint(0, 12) for _ in range(3))
    return Layout(tuple(bars), background)


def options(layout: Layout, task: str) -> list:
    """Every question of this task that has a unique answer in this layout."""
    values = [bar.value for bar in layout.bars]
    if task == "highest":
        return [values.index(max(values))] if values.count(max(values)) == 1 else []
    if task == "value":
        return list(range(len(values)))
    if task == "describe":
        return [None]
    raise ValueError(f"unknown chart task {task!r}")


def ask(layout: Layout, task: str, choice, rng: random.Random) -> QA:
    """Word the question `choice` (one of options(layout, task))."""
    bars = layout.bars
    n = len(bars)
    values = "".join(text.join([str(bar.value) for bar in bars]))  # "3, 7, 5 and 2"
    fields = dict(count=text.count(n, "bar"), be=text.be(n), values=values)
    if task == "describe":
        names = [Name(bar.label, i) for i, bar in enumerate(bars)]
        pairs = [[name, f" is {bar.value}"] for name, bar in zip(names, bars)]
        return text.ask(rng, text.CHART, task, values, labels=text.join(names), pairs=text.join(pairs), **fields)
    bar = bars[choice]
    short = bar.label if task == "highest" else str(bar.value)
    return text.ask(rng, text.CHART, task, short, label=Name(bar.label, choice), value=bar.value,
                    ordinal=text.ORDINALS[choice], **fields)


def render(layout: Layout) -> tuple[Image.Image, list[Obj], dict[str, np.ndarray]]:
    """Draw a layout: (RGB image, one "bar" object per bar, patch labels)."""
    canvas = np.empty((IMAGE_SIZE, IMAGE_SIZE, 3), dtype=np.uint8)
    canvas[:] = layout.background
    canvas[BASE_Y:BASE_Y + 1, AXIS_X:PLOT_X1 + 2] = AXIS_RGB  # x axis
    canvas[8:BASE_Y + 1, AXIS_X:AXIS_X + 1] = AXIS_RGB  # y axis
    ink = np.zeros((IMAGE_SIZE, IMAGE_SIZE), dtype=np.uint8)
    texts = []  # per bar: (label char boxes, value char boxes)
    for bar in layout.bars:
        canvas[bar.top:BASE_Y, bar.x0:bar.x1] = COLOUR_RGB[bar.colour]
        texts.append([
            glyphs.draw_text(ink, bar.centre - glyphs.text_width(s, FONT_SIZE) // 2, y, s, FONT_SIZE)
            for s, y in ((bar.label, BASE_Y + 5), (str(bar.value), bar.top - GAP - glyphs.cap_height(FONT_SIZE)))
        ])
    image = glyphs.blend(canvas, ink, TEXT_RGB)
    inked = ink > INK_THRESHOLD
    objects, colour_regions, char_regions, bar_regions = [], [], [], []
    for i, (bar, char_boxes) in enumerate(zip(layout.bars, texts)):
        rect = box_mask((bar.x0, bar.top, bar.x1, BASE_Y))
        # A bar object is its whole column: the rectangle plus its label and value glyphs.
        mask = rect.copy()
        for boxes in char_boxes:
            mask |= inked & box_mask(glyphs.text_box(boxes))
            char_regions += [(box_mask(box), CHAR_ID[char]) for char, box in boxes]
        attrs = {"value": str(bar.value), "colour": bar.colour, "index": str(i)}
        objects.append(Obj("bar", bar.label, box_of(mask), mask, attrs))
        colour_regions.append((rect, COLOUR_ID[bar.colour]))
        bar_regions.append((rect, bar.value))
    labels = patch_labels({"colour": colour_regions, "char": char_regions, "bar": bar_regions})
    return image, objects, labels

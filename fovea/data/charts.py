"""The "chart" family: a bar chart with 3-5 lettered bars, values 1-9 written above each bar,
laid out in the content rectangle, and questions about the values.

Labels are letters only, so a digit in the image is always a value. Layouts
are pure data; render() draws them.
"""
import random
import re
from dataclasses import dataclass, replace

import numpy as np
from PIL import Image

from fovea.data import glyphs, ocr, text
from fovea.data.labels import CHAR_ID, COLOUR_ID, COLOUR_RGB, box_mask, patch_labels
from fovea.data.sample import CANVAS, PAD_RGB, STYLES, Obj, box_of, content_rect
from fovea.data.text import QA, Name

TASKS = ("highest", "value", "describe")
PALETTE = ("red", "green", "blue", "purple", "orange", "cyan")  # white and yellow vanish on light paper
GAP = 3  # px between a bar's top and its value digit
MAX_LABEL = {3: 3, 4: 2, 5: 1}  # letters per label that fit a bar's slot
AXIS_RGB, TEXT_RGB = (70, 70, 70), (20, 20, 20)
INK_THRESHOLD = 96


@dataclass(frozen=True)
class Bar:
    label: str
    value: int
    colour: str
    x0: int  # bar rectangle columns [x0, x1), canvas pixels
    x1: int


@dataclass(frozen=True)
class Layout:
    bars: tuple[Bar, ...]  # left to right, which is also the order of Sample.objects
    background: tuple[int, int, int]
    rect: tuple[int, int, int, int]  # content rectangle in the canvas
    font_size: int

    # The plot frame follows from the rectangle and the font: the x axis sits above the labels,
    # and value 9 leaves room for its digit under the top edge.
    @property
    def base_y(self) -> int:
        return self.rect[3] - glyphs.cap_height(self.font_size) - 12

    @property
    def axis_x(self) -> int:
        return self.rect[0] + 8

    @property
    def unit(self) -> float:
        return (self.base_y - self.rect[1] - glyphs.cap_height(self.font_size) - GAP - 6) / 9

    def top(self, bar: Bar) -> int:
        return self.base_y - round(bar.value * self.unit)


def sample_layout(rng: random.Random, split: str = "train") -> Layout:
    style = STYLES[split]
    rect = content_rect(rng.choice(style.sizes))
    font_size = rng.choice(style.chart_font_sizes)
    n = rng.randint(3, 5)
    plot_x0, plot_x1 = rect[0] + 12, rect[2] - 4
    slot = (plot_x1 - plot_x0) / n
    width = round(slot * rng.uniform(0.5, 0.7))
    labels: list[str] = []
    while len(labels) < n:
        label = "".join(rng.choice(ocr.LETTERS) for _ in range(rng.randint(1, MAX_LABEL[n])))
        if label not in labels and glyphs.text_width(label, font_size) <= slot - 3:
            labels.append(label)
    bars = []
    for i, (label, colour) in enumerate(zip(labels, rng.sample(PALETTE, n))):
        x0 = round(plot_x0 + (i + 0.5) * slot - width / 2)
        bars.append(Bar(label, rng.randint(1, 9), colour, x0, x0 + width))
    background = tuple(c - rng.randint(0, 8) for c in rng.choice(style.chart_paper))
    return Layout(tuple(bars), background, rect, font_size)


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


def _pairs(bars, last: str = " and ") -> list:
    """The bars from the left as "U is 2, X is 5 and P is 3", each label and value named as its bar;
    `last` joins the final pair (", " reads "U is 2, X is 5, P is 3")."""
    return text.join([[Name(bar.label, i), " is ", Name(str(bar.value), i)] for i, bar in enumerate(bars)],
                     last=last)


def ask(layout: Layout, task: str, choice, rng: random.Random) -> QA:
    """Word the question `choice` (one of options(layout, task))."""
    bars = layout.bars
    n = len(bars)
    values = text.join([Name(str(bar.value), i) for i, bar in enumerate(bars)])  # "3, 7, 5 and 2"
    pairs = _pairs(bars)
    fields = dict(count=text.count(n, "bar"), be=text.be(n), values=values, pairs=pairs)
    if task == "describe":
        short = text.fill("{pairs}", pairs=pairs)[0]  # "U is 2, X is 5 and P is 3": every bar
        return text.ask(rng, text.CHART, task, short, **fields)
    bar = bars[choice]
    short = bar.label if task == "highest" else str(bar.value)
    if task == "value":  # the bars up to and including the asked one, commas only: whether to go on is
        # decided after writing a bar's label (is it the asked one?), never before it (an " and" announced the
        # last bar before its label was read; the model learned to read every bar, 34% held-out at step 31,800)
        fields["upto"] = _pairs(bars[:choice + 1], last=", ")
    qa = text.ask(rng, text.CHART, task, short, label=Name(bar.label, choice),
                  value=Name(str(bar.value), choice), **fields)
    return _with_stop(qa, text.fill("{upto}", upto=fields["upto"])[0]) if task == "value" else qa


def _with_stop(qa: QA, upto: str) -> QA:
    """A chart value answer with its stop marked as stress: the punctuation and word right after the
    asked bar's pair ("..., K is 7, so" / "... K is 7. So"), where the answer stops reading bars. The
    model goes on reading at each earlier bar through a mention (the next label, weighted as a mention);
    the stop is no mention, and at step 36,300 its probability barely depended on the label just read
    (0.49 at the asked bar against 0.31 at the others)."""
    end = qa.answer.index(upto) + len(upto)
    stop = re.match(r"[.,] \w+", qa.answer[end:])
    return replace(qa, stress=((end, end + stop.end()),)) if stop else qa


def drill(seed: int) -> QA:
    """A text-only chart-value drill: the bars are listed in the question, and the answer is a chart
    value answer (read from the left up to the asked bar, then its value). It practises the step the
    image questions fail on, stopping when the label just written is the asked one, with no image to
    read. Seeded; labels and values drawn as for a chart."""
    rng = random.Random(f"drill/{seed}")
    n = rng.randint(3, 5)
    labels: list[str] = []
    while len(labels) < n:
        label = "".join(rng.choice(ocr.LETTERS) for _ in range(rng.randint(1, MAX_LABEL[n])))
        if label not in labels:
            labels.append(label)
    layout = Layout(tuple(Bar(label, rng.randint(1, 9), "red", 0, 0) for label in labels), (0, 0, 0), (0, 0, 0, 0), 0)
    qa = ask(layout, "value", rng.randrange(n), rng)
    listed = text.fill("{pairs}", pairs=text.join([f"{bar.label} {bar.value}" for bar in layout.bars]))[0]
    return QA(f"The bars from the left are {listed}. {qa.question}", qa.answer, qa.short_answer, [], qa.stress)


def render(layout: Layout) -> tuple[Image.Image, list[Obj], dict[str, np.ndarray]]:
    """Draw a layout: (RGB content image, one "bar" object per bar, patch labels on the canvas)."""
    x0, y0, x1, y1 = layout.rect
    base, axis, size = layout.base_y, layout.axis_x, layout.font_size
    canvas = np.empty((CANVAS, CANVAS, 3), dtype=np.uint8)
    canvas[:] = PAD_RGB
    canvas[y0:y1, x0:x1] = layout.background
    canvas[base:base + 1, axis:x1 - 2] = AXIS_RGB  # x axis
    canvas[y0 + 4:base + 1, axis:axis + 1] = AXIS_RGB  # y axis
    ink = np.zeros((CANVAS, CANVAS), dtype=np.uint8)
    texts = []  # per bar: (label char boxes, value char boxes)
    for bar in layout.bars:
        top, centre = layout.top(bar), (bar.x0 + bar.x1) // 2
        canvas[top:base, bar.x0:bar.x1] = COLOUR_RGB[bar.colour]
        texts.append([
            glyphs.draw_text(ink, centre - glyphs.text_width(s, size) // 2, y, s, size)
            for s, y in ((bar.label, base + 6), (str(bar.value), top - GAP - glyphs.cap_height(size)))
        ])
    image = glyphs.blend(canvas, ink, TEXT_RGB)
    inked = ink > INK_THRESHOLD
    objects, colour_regions, char_regions, bar_regions = [], [], [], []
    for i, (bar, char_boxes) in enumerate(zip(layout.bars, texts)):
        rect = box_mask((bar.x0, layout.top(bar), bar.x1, base))
        # A bar object is its whole column: the rectangle plus its label and value glyphs.
        mask = rect.copy()
        for boxes in char_boxes:
            mask |= inked & box_mask(glyphs.text_box(boxes))
            char_regions += [(box_mask(box), CHAR_ID[char]) for char, box in boxes]
        attrs = {"value": str(bar.value), "colour": bar.colour, "index": str(i)}
        drawn = {s: tuple(box for _, box in boxes) for s, boxes in zip((bar.label, str(bar.value)), char_boxes)}
        objects.append(Obj("bar", bar.label, box_of(mask), mask, attrs, drawn))
        colour_regions.append((rect, COLOUR_ID[bar.colour]))
        bar_regions.append((rect, bar.value))
    labels = patch_labels({"colour": colour_regions, "char": char_regions, "bar": bar_regions})
    return image.crop(layout.rect), objects, labels

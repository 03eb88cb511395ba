"""The "chart" family: a bar chart with 3-5 lettered bars, values 1-9 written above or inside each
bar, laid out in the content rectangle in one of the world's looks (fovea.data.looks: bar width and
gap, axes, gridlines, label lengths, value placement, font face), and questions about the values.

Labels are letters only, so a digit in the image is always a value. Layouts
are pure data; render() draws them.
"""
import random
import re
from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np
from PIL import Image

from fovea.data import glyphs, ocr, text
from fovea.data.labels import CHAR_ID, COLOUR_ID, COLOUR_RGB, box_mask, patch_labels
from fovea.data.looks import BASE_CHART, ChartLook
from fovea.data.sample import CANVAS, PAD_RGB, Obj, box_of, content_rect, split_style
from fovea.data.text import QA, Name

TASKS = ("highest", "value", "describe")
PALETTE = ("red", "green", "blue", "purple", "orange", "cyan")  # white and yellow vanish on light paper
GAP = 3  # px between a bar's top and its value digit (above it, or inside it under its top edge)
MAX_LABEL = {3: 3, 4: 2, 5: 1}  # letters per label that fit a bar's slot
AXIS_RGB, TEXT_RGB, LIGHT_TEXT_RGB = (70, 70, 70), (20, 20, 20), (250, 250, 250)
LIGHT_TEXT_ON = ("red", "blue", "purple")  # a value inside a bar of these colours is written light, else dark
GRID_LEVELS, GRID_SHADE = (3, 6, 9), 26  # light gridlines: at these values, this much darker than the paper
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
    look: ChartLook = BASE_CHART

    # The plot frame follows from the rectangle and the font: the x axis sits above the labels,
    # and value 9 leaves room for its digit under the top edge.
    @property
    def cap(self) -> int:
        return glyphs.cap_height(self.font_size, self.look.face)

    @property
    def base_y(self) -> int:
        return self.rect[3] - self.cap - 12

    @property
    def axis_x(self) -> int:
        return self.rect[0] + 8

    @property
    def unit(self) -> float:
        return (self.base_y - self.rect[1] - self.cap - GAP - 6) / 9

    def top(self, bar: Bar) -> int:
        return self.base_y - round(bar.value * self.unit)

    def value_inside(self, bar: Bar) -> bool:
        """Whether bar's value is drawn inside its top: the look asks for it and the digit fits, with
        GAP px on every side."""
        return (self.look.values == "inside" and self.base_y - self.top(bar) >= self.cap + 2 * GAP
                and bar.x1 - bar.x0 >= glyphs.text_width(str(bar.value), self.font_size, self.look.face) + 2 * GAP)


@lru_cache(maxsize=None)
def _label_widths(length: int, font_size: int, face: str) -> tuple[int, ...]:
    """Ink widths of every letter repeated `length` times, narrowest first."""
    return tuple(sorted(glyphs.text_width(c * length, font_size, face) for c in ocr.LETTERS))


def _bar_count(rng: random.Random, look: ChartLook, font_size: int, plot_width: float) -> tuple[int, tuple[int, int]]:
    """3-5 bars and the (min, max) letters of their labels. Bars are dropped (down to 3) until labels of
    the look's length have room: the 2n-th narrowest letter, repeated that often, fits a bar's slot with
    the look's label_spare, so n distinct labels are easy to draw (the base look's fonts always leave
    room for one letter). A look without a length gives each label 1 up to MAX_LABEL[n] letters; one
    with a length gives every label that many, fewer where even 3 bars leave too little room."""
    n = rng.randint(3, 5)

    def fits(length: int, bars: int) -> bool:
        return _label_widths(length, font_size, look.face)[2 * bars - 1] <= plot_width / bars - look.label_spare

    while n > 3 and not fits(look.label_length or 1, n):
        n -= 1
    if not look.label_length:
        return n, (1, MAX_LABEL[n])
    length = max([k for k in range(1, look.label_length + 1) if fits(k, n)], default=1)
    return n, (length, length)


def sample_layout(rng: random.Random, split: str = "train", look: ChartLook = BASE_CHART) -> Layout:
    style = split_style(split)
    rect = content_rect(rng.choice(style.sizes))
    font_size = rng.choice(style.chart_font_sizes)
    plot_x0, plot_x1 = rect[0] + 12, rect[2] - 4
    n, lengths = _bar_count(rng, look, font_size, plot_x1 - plot_x0)
    slot = (plot_x1 - plot_x0) / n
    width = round(slot * rng.uniform(*look.width))
    labels: list[str] = []
    while len(labels) < n:
        label = "".join(rng.choice(ocr.LETTERS) for _ in range(rng.randint(*lengths)))
        if label not in labels and glyphs.text_width(label, font_size, look.face) <= slot - look.label_spare:
            labels.append(label)
    bars = []
    for i, (label, colour) in enumerate(zip(labels, rng.sample(PALETTE, n))):
        x0 = round(plot_x0 + (i + 0.5) * slot - width / 2)
        bars.append(Bar(label, rng.randint(1, 9), colour, x0, x0 + width))
    background = tuple(c - rng.randint(0, 8) for c in rng.choice(style.chart_paper))
    return Layout(tuple(bars), background, rect, font_size, look)


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


def _frame(canvas: np.ndarray, layout: Layout) -> None:
    """Draw the look's gridlines and axis lines into canvas [CANVAS, CANVAS, 3], under the bars."""
    x1, base, axis = layout.rect[2], layout.base_y, layout.axis_x
    if layout.look.grid == "light":
        shade = tuple(max(0, c - GRID_SHADE) for c in layout.background)
        for level in GRID_LEVELS:
            y = base - round(level * layout.unit)
            canvas[y:y + 1, axis:x1 - 2] = shade
    if layout.look.axes != "none":
        canvas[base:base + 1, axis:x1 - 2] = AXIS_RGB  # x axis
    if layout.look.axes == "both":
        canvas[layout.rect[1] + 4:base + 1, axis:axis + 1] = AXIS_RGB  # y axis


def _write(ink: dict[bool, np.ndarray], layout: Layout, bar: Bar) -> list[list]:
    """Stamp bar's label (under the axis) and value (above the bar, or inside its top in light or dark
    ink by the bar's colour) into the ink layers (light? -> uint8 [CANVAS, CANVAS]); their char boxes."""
    top, size, face = layout.top(bar), layout.font_size, layout.look.face
    value, inside = str(bar.value), layout.value_inside(bar)
    centre = (bar.x0 + bar.x1) // 2
    places = ((bar.label, layout.base_y + 6, False),
              (value, top + GAP if inside else top - GAP - layout.cap, inside and bar.colour in LIGHT_TEXT_ON))
    return [glyphs.draw_text(ink[light], centre - glyphs.text_width(s, size, face) // 2, y, s, size, face)
            for s, y, light in places]


def render(layout: Layout) -> tuple[Image.Image, list[Obj], dict[str, np.ndarray]]:
    """Draw a layout: (RGB content image, one "bar" object per bar, patch labels on the canvas)."""
    x0, y0, x1, y1 = layout.rect
    base = layout.base_y
    canvas = np.empty((CANVAS, CANVAS, 3), dtype=np.uint8)
    canvas[:] = PAD_RGB
    canvas[y0:y1, x0:x1] = layout.background
    _frame(canvas, layout)
    ink = {light: np.zeros((CANVAS, CANVAS), dtype=np.uint8) for light in (False, True)}
    texts = []  # per bar: (label char boxes, value char boxes)
    for bar in layout.bars:
        canvas[layout.top(bar):base, bar.x0:bar.x1] = COLOUR_RGB[bar.colour]
        texts.append(_write(ink, layout, bar))
    image = glyphs.blend(canvas, ink[False], TEXT_RGB)
    if ink[True].any():
        image = glyphs.blend(np.array(image), ink[True], LIGHT_TEXT_RGB)
    inked = np.maximum(ink[False], ink[True]) > INK_THRESHOLD
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

"""The sample record shared by every family: the model's canvas and patch grid, the letterbox
that maps any image onto that canvas, the rendering style of a split, and the dataclasses a
generator returns.

World v2 geometry: the model sees a 192 x 192 canvas cut into 16-px patches, a 12 x 12 grid of
144 visual tokens. A generated image is `content` pixels (non-square as often as not) drawn
straight into the canvas's letterbox: centred, never stretched, the bars around it in PAD_RGB.
Masks, boxes and patch labels are in canvas coordinates, so the model input and every overlay
share one geometry. Holds no drawing or wording logic; families fill these records in.
"""
import colorsys
import random
from dataclasses import dataclass, field

import numpy as np
from PIL import Image

CANVAS = 192
IMAGE_SIZE = CANVAS  # the model input's side; kept as the name the rest of the code reads
PATCH = 16
GRID = CANVAS // PATCH  # 12 patches per side, 144 visual tokens
IGNORE = -100  # patch label value ignored by the loss (matches torch's default ignore_index)
PAD_RGB = (128, 128, 128)  # letterbox bars: a mid grey no background of the world uses
MIN_WORDS, MAX_WORDS = 4, 80  # every answer's length in whitespace-separated words


@dataclass(frozen=True)
class Mention:
    """Characters answer[start:end] name an attribute of objects[obj] (its colour, shape, position,
    word, bar label or value)."""

    start: int
    end: int
    obj: int


@dataclass
class Obj:
    """One thing drawn in the image that answers can talk about."""

    kind: str  # "shape", "word" or "bar"
    label: str  # how answers name it: "red circle", "KOTA", "A"
    box: tuple[int, int, int, int]  # (x0, y0, x1, y1) in canvas pixels, x1 and y1 exclusive
    mask: np.ndarray  # bool [CANVAS, CANVAS], the canvas pixels that belong to it
    attrs: dict[str, str] = field(default_factory=dict)  # family-specific facts: size, position, value...
    # text drawn for this object -> the ink box (x0, y0, x1, y1) of each of its characters, in order
    # (a word, a bar's label and value): per-glyph grounding targets for the tokens that spell it
    glyphs: dict[str, tuple[tuple[int, int, int, int], ...]] = field(default_factory=dict)


@dataclass
class Sample:
    image: Image.Image  # RGB, the content only (w x h, long side CANVAS): what a user would upload
    question: str
    answer: str
    family: str
    task: str
    short_answer: str  # the key fact scored for accuracy; appears verbatim (as whole words) in answer
    objects: list[Obj]
    mentions: list[Mention]
    patch_labels: dict[str, np.ndarray]  # int64 [GRID, GRID] per label kind; IGNORE where not applicable
    split: str = "train"  # "train", "shifted" (rendering values training never sees) or "layout" (held-out looks)
    look: object = None  # the chart or scene look it was drawn in (fovea.data.looks); None: the base look, or ocr
    stress: tuple = ()  # the answer's stress spans (QA.stress), for training's weights


@dataclass
class Conversation:
    """One image with several (task, QA) turns about it: the packed training record."""

    image: Image.Image
    family: str
    turns: list  # [(task, fovea.data.text.QA)]
    objects: list[Obj]
    patch_labels: dict[str, np.ndarray]
    split: str = "train"
    look: object = None  # as Sample.look


@dataclass(frozen=True)
class Style:
    """The rendering parameters of a split. The "shifted" split uses values training never sees,
    so its accuracy measures generalisation, not memorisation."""

    sizes: tuple[tuple[int, int], ...]  # content (width, height); the long side is always CANVAS
    scene_backgrounds: tuple[tuple[int, int, int], ...]
    shape_radius: tuple[int, int]  # inclusive range of a shape's radius in px
    font_sizes: tuple[int, ...]  # OCR font sizes (capitals ~0.7 x size)
    chart_font_sizes: tuple[int, ...]
    chart_paper: tuple[tuple[int, int, int], ...]
    paper: tuple[tuple[tuple[int, int, int], tuple[int, int, int]], ...]  # (background, ink) for text


SHIFTED = Style(
    sizes=((192, 128), (128, 192), (192, 176)),
    scene_backgrounds=((40, 20, 48), (10, 36, 20), (250, 240, 214)),
    shape_radius=(11, 26),
    font_sizes=(27, 34),
    chart_font_sizes=(21, 26),
    chart_paper=((250, 240, 214), (228, 236, 244)),
    paper=(((40, 16, 16), (255, 255, 255)), ((250, 240, 214), (90, 20, 20))),
)
MIN_STYLE_DISTANCE = 12  # every generated training colour is at least this far (max channel diff) from a shifted one


def _shifted_colours() -> list[tuple[int, int, int]]:
    colours = list(SHIFTED.scene_backgrounds) + list(SHIFTED.chart_paper)
    return colours + [c for pair in SHIFTED.paper for c in pair]


def _far_from_shifted(rgb: tuple[int, int, int]) -> bool:
    return all(max(abs(a - b) for a, b in zip(rgb, c)) >= MIN_STYLE_DISTANCE for c in _shifted_colours())


def _tints(seed: str, n: int, lo: int, hi: int, spread: int) -> tuple[tuple[int, int, int], ...]:
    """n seeded near-grey colours: a base level in [lo, hi] plus a per-channel tint of +-spread, each
    far from every shifted colour. Low saturation keeps every shape colour visible on them."""
    rng, out = random.Random(seed), []
    while len(out) < n:
        level = rng.randint(lo, hi)
        rgb = tuple(min(255, max(0, level + rng.randint(-spread, spread))) for _ in range(3))
        if _far_from_shifted(rgb) and rgb not in out:
            out.append(rgb)
    return tuple(out)


def _hued(seed: str, n: int) -> tuple[tuple[int, int, int], ...]:
    """n seeded scene backgrounds in any hue: half dark and saturated (value <= 0.2), half light and
    pale (value >= 0.9, saturation <= 0.15), each far from every shifted colour, so a shape of any
    palette colour still stands out."""
    rng, out = random.Random(seed), []
    while len(out) < n:
        dark = len(out) % 2 == 0
        rgb = (_hsv(rng.random(), rng.uniform(0.3, 0.8), rng.uniform(0.08, 0.2)) if dark else
               _hsv(rng.random(), rng.uniform(0.03, 0.15), rng.uniform(0.9, 0.98)))
        if _far_from_shifted(rgb) and rgb not in out:
            out.append(rgb)
    return tuple(out)


def _papers(seed: str, n: int) -> tuple[tuple[tuple[int, int, int], tuple[int, int, int]], ...]:
    """n seeded (background, ink) pairs in any hue, dark on light or light on dark, with the ink's
    luminance at least 110 away from the background's so every glyph stays legible."""
    rng, out = random.Random(seed), []
    while len(out) < n:
        dark = _hsv(rng.random(), rng.uniform(0.0, 0.9), rng.uniform(0.04, 0.3))
        light = _hsv(rng.random(), rng.uniform(0.0, 0.9 if rng.random() < 0.5 else 0.25), rng.uniform(0.82, 1.0))
        pair = (dark, light) if rng.random() < 0.5 else (light, dark)
        if abs(_luma(dark) - _luma(light)) >= 110 and all(map(_far_from_shifted, pair)):
            out.append(pair)
    return tuple(out)


def _hsv(h: float, s: float, v: float) -> tuple[int, int, int]:
    return tuple(round(255 * c) for c in colorsys.hsv_to_rgb(h, s, v))


def _luma(rgb: tuple[int, int, int]) -> float:
    return 0.299 * rgb[0] + 0.587 * rgb[1] + 0.114 * rgb[2]


# Training draws from many values around the shifted split's, never those values themselves: font
# sizes on both sides of 27 and 34 px, backgrounds and papers of many tints and hues, each at least
# MIN_STYLE_DISTANCE from a shifted colour. So the shifted split measures generalisation to unseen
# values inside the training range (fonts, colours) and outside it (aspect ratios; shape radii 11-12
# and 25-26, which no training radius hits: the base look's 13-24 and the widened looks' 7-10 and 27-30).
# The "layout" split renders in the training style: what it holds out is looks (fovea.data.looks).
STYLES = {
    "train": Style(
        # aspect ratios 1 to 1.6 either way (the shifted split's 1.5 and 1.09 fall between them, never on them)
        sizes=((192, 192), (192, 144), (144, 192), (192, 160), (160, 192), (192, 120), (120, 192), (192, 184),
               (184, 192)),
        scene_backgrounds=((18, 18, 22), (30, 30, 38), (14, 26, 34), (36, 30, 28),  # dark
                           (236, 234, 226), (246, 246, 246), (222, 230, 238))         # light
        + _tints("style/scene/dark", 8, 8, 44, 12) + _tints("style/scene/light", 8, 214, 248, 10)
        + _hued("style/scene/hued", 12),
        shape_radius=(13, 24),
        font_sizes=(25, 26, 28, 29, 30, 31, 32, 33, 35, 36),
        chart_font_sizes=(19, 20, 22, 23, 24, 25, 27),
        chart_paper=((245, 245, 245), (236, 236, 230), (250, 248, 240)) + _tints("style/chart", 9, 222, 252, 10),
        paper=(((20, 22, 30), (240, 240, 240)), ((24, 24, 24), (250, 230, 40)), ((16, 28, 36), (0, 215, 220)),
               ((235, 232, 220), (20, 20, 20)), ((245, 245, 245), (30, 40, 120))) + _papers("style/paper", 27),
    ),
    "shifted": SHIFTED,
}  # the rendering styles, by name
# split -> the rendering style it draws in; the layout split holds out looks instead (fovea.data.looks)
SPLITS = {"train": "train", "shifted": "shifted", "layout": "train"}


def split_style(split: str) -> Style:
    """The rendering style of a split's images."""
    return STYLES[SPLITS[split]]


def content_rect(size: tuple[int, int], canvas: int = CANVAS) -> tuple[int, int, int, int]:
    """(x0, y0, x1, y1) of a w x h image letterboxed into a canvas x canvas square (long side fills it)."""
    w, h = size
    scale = canvas / max(w, h)
    sw, sh = max(1, round(w * scale)), max(1, round(h * scale))
    x0, y0 = (canvas - sw) // 2, (canvas - sh) // 2
    return x0, y0, x0 + sw, y0 + sh


def letterbox(image: Image.Image, canvas: int = CANVAS) -> Image.Image:
    """Any image -> the canvas x canvas RGB model input: scaled to fit (aspect kept, never stretched),
    centred, PAD_RGB bars. The one geometry the model input and every overlay share."""
    image = image.convert("RGB")
    x0, y0, x1, y1 = content_rect(image.size, canvas)
    if image.size != (x1 - x0, y1 - y0):
        image = image.resize((x1 - x0, y1 - y0), Image.BICUBIC)
    out = Image.new("RGB", (canvas, canvas), PAD_RGB)
    out.paste(image, (x0, y0))
    return out


def box_of(mask: np.ndarray) -> tuple[int, int, int, int]:
    """Tight (x0, y0, x1, y1) box of a non-empty bool mask, exclusive upper bounds."""
    ys = np.flatnonzero(mask.any(axis=1))
    xs = np.flatnonzero(mask.any(axis=0))
    return int(xs[0]), int(ys[0]), int(xs[-1]) + 1, int(ys[-1]) + 1

"""The "scene" family: 1-6 flat-coloured shapes, one per cell of a 3x3 grid laid over the
content rectangle, on a dark or light background, and questions about them. A scene's look
(fovea.data.looks) sets the shapes' size range, where each sits in its cell (anywhere, centred, or
pulled towards the image centre), a frame (none, a border, or lines between the cells) and a
backdrop panel; a shape never leaves its cell, so positions and neighbours read the same in any look.

A scene is laid out first (pure data, no pixels), so text can be generated without drawing;
render() draws a layout into the letterboxed canvas. options() lists only questions whose answer
is unique.
"""
import random
from dataclasses import dataclass

import numpy as np
from PIL import Image, ImageDraw

from fovea.data import text
from fovea.data.labels import COLOUR_ID, COLOUR_RGB, SHAPE_ID, SHAPES, patch_labels
from fovea.data.looks import BASE_SCENE, SceneLook
from fovea.data.sample import CANVAS, PAD_RGB, Obj, box_of, content_rect, split_style
from fovea.data.text import QA, Name

TASKS = ("describe", "count", "colour", "spatial", "position")
KINDS = SHAPES[1:]
PALETTE = tuple(COLOUR_RGB)
LIGHT_PALETTE = tuple(c for c in PALETTE if c not in ("white", "yellow"))  # they vanish on light paper
LARGE_FROM = 18  # radius (px) from which a shape is called "large"
LINE_CONTRAST, PANEL_CONTRAST = 80, 16  # frame lines and an inset panel: this much off the background
PANEL_INSET = 0.08  # an inset panel's margin, as a share of the image's shorter side
POSITIONS = (  # no name is a substring of another, so short answers cannot match by accident
    ("top left", "top middle", "top right"),
    ("middle left", "centre", "middle right"),
    ("bottom left", "bottom middle", "bottom right"),
)
# (row step, column step, wording) for "what is <relation> the X"
RELATIONS = ((0, -1, "directly to the left of"), (0, 1, "directly to the right of"),
             (-1, 0, "directly above"), (1, 0, "directly below"))


@dataclass(frozen=True)
class Shape:
    kind: str
    colour: str
    row: int
    col: int
    cx: int  # centre in canvas pixels
    cy: int
    radius: int

    @property
    def size(self) -> str:
        return "large" if self.radius >= LARGE_FROM else "small"

    @property
    def label(self) -> str:
        return f"{self.colour} {self.kind}"

    @property
    def position(self) -> str:
        return POSITIONS[self.row][self.col]


@dataclass(frozen=True)
class Layout:
    shapes: tuple[Shape, ...]  # row-major order, which is also the order of Sample.objects
    background: tuple[int, int, int]
    rect: tuple[int, int, int, int]  # content rectangle in the canvas
    look: SceneLook = BASE_SCENE


def _is_light(rgb: tuple[int, int, int]) -> bool:
    return sum(rgb) > 3 * 128


def _centre(rng: random.Random, look: SceneLook, rect, cell: tuple[float, float], row: int, col: int,
            radius: int) -> tuple[int, int]:
    """A shape's centre inside its cell, 2 px clear of the cell's edges: anywhere ("jitter", positions off
    any patch grid), at the cell's centre ("centred"), or as far towards the image centre as it goes
    ("inward": the shapes pack around the middle)."""
    cell_w, cell_h = cell
    slack_x, slack_y = int(cell_w / 2) - radius - 2, int(cell_h / 2) - radius - 2
    cx, cy = round(rect[0] + (col + 0.5) * cell_w), round(rect[1] + (row + 0.5) * cell_h)
    if look.placement == "jitter":
        return cx + rng.randint(-slack_x, slack_x), cy + rng.randint(-slack_y, slack_y)
    if look.placement == "inward":
        return cx + (1 - col) * slack_x, cy + (1 - row) * slack_y
    return cx, cy


def sample_layout(rng: random.Random, split: str = "train", look: SceneLook = BASE_SCENE) -> Layout:
    style = split_style(split)
    rect = content_rect(rng.choice(style.sizes))
    background = rng.choice(style.scene_backgrounds)
    palette = LIGHT_PALETTE if _is_light(background) else PALETTE
    cell = cell_w, cell_h = (rect[2] - rect[0]) / 3, (rect[3] - rect[1]) / 3
    shapes = []
    for index in sorted(rng.sample(range(9), rng.randint(1, 6))):
        row, col = divmod(index, 3)
        radius = min(rng.randint(*(look.radius or style.shape_radius)), int(min(cell_w, cell_h) / 2) - 2)
        cx, cy = _centre(rng, look, rect, cell, row, col, radius)
        shapes.append(Shape(rng.choice(KINDS), rng.choice(palette), row, col, cx, cy, radius))
    return Layout(tuple(shapes), background, rect, look)


def options(layout: Layout, task: str) -> list:
    """Every question of this task that has a unique answer in this layout."""
    shapes = layout.shapes
    kinds = [s.kind for s in shapes]
    labels = [s.label for s in shapes]
    if task == "describe":
        return [None]
    if task == "count":
        return ([("all", "")] + [("kind", k) for k in sorted(set(kinds))]
                + [("colour", c) for c in sorted({s.colour for s in shapes})])
    if task == "colour":  # "the circle" must pick out one shape
        return [i for i, k in enumerate(kinds) if kinds.count(k) == 1]
    if task == "position":  # "the red circle" must pick out one shape
        return [i for i, lab in enumerate(labels) if labels.count(lab) == 1]
    if task == "spatial":
        where = {(s.row, s.col): i for i, s in enumerate(shapes)}
        return [(ref, where[(s.row + dr, s.col + dc)], wording)
                for ref, s in enumerate(shapes) if labels.count(s.label) == 1
                for dr, dc, wording in RELATIONS if (s.row + dr, s.col + dc) in where]
    raise ValueError(f"unknown scene task {task!r}")


def _matching(layout: Layout, choice) -> list[int]:
    """The shapes a count question (by, value) counts: all of them, or those of that kind or colour."""
    by, value = choice
    return [i for i, s in enumerate(layout.shapes) if by == "all" or value in (s.kind, s.colour)]


def pick(layout: Layout, task: str, choices: list, rng: random.Random):
    """One of `choices` (options(layout, task)). A count question first draws its answer uniformly
    among the counts this layout offers, then a question with that count: drawn uniformly from the
    options, 71% of count questions answered 1 (most colours and kinds occur once), and at step 42,800
    the target, which stopped after the first match, was right on 80% of them but on 45% of those
    whose answer is 2 or more. Every other task draws uniformly."""
    if task != "count":
        return rng.choice(choices)
    count = {c: len(_matching(layout, c)) for c in choices}
    n = rng.choice(sorted(set(count.values())))
    return rng.choice([c for c in choices if count[c] == n])


def _pos(layout: Layout, i: int, short: bool = False) -> list:
    """'in the top left corner', the position named as a mention of shape i; the short form
    'at top left' keeps 6-shape descriptions short."""
    shape = layout.shapes[i]
    name = Name(shape.position, i)
    if shape.position == "centre":
        return ["in the ", name]
    if short:
        return ["at ", name]
    return ["in the ", name, " corner"] if shape.row != 1 and shape.col != 1 else ["in the ", name]


def _item(layout: Layout, i: int, size: bool) -> list:
    """'a small red circle at top left', naming the colour and shape."""
    s = layout.shapes[i]
    lead = [Name(s.size, i), " "] if size else []
    return [f"{text.article(s.size if size else s.colour)} ", *lead, Name(s.label, i), " ",
            *_pos(layout, i, short=True)]


def _with_list_stops(qa: QA, listed) -> QA:
    """A describe answer with the words right after each listed shape marked as stress (", a" / " and a"
    go on; ", so" / ". That" stop): there the answer decides whether another shape follows. At step
    39,363 most describe misses left a shape out. (A count answer stresses its ticks instead, in `ask`.)"""
    return text.with_stops(qa, listed, r"(?:[.,]| and)? \w+")   # a shape's last mention is its position


def ask(layout: Layout, task: str, choice, rng: random.Random) -> QA:
    """Word the question `choice` (one of options(layout, task))."""
    shapes = layout.shapes
    total = text.count(len(shapes), "shape")
    if task == "describe":
        n = len(shapes)
        shade = "light" if _is_light(layout.background) else "dark"
        return _with_list_stops(text.ask(rng, text.SCENE, task, str(n), count=total, be=text.be(n), shade=shade,
                                         items=text.join([_item(layout, i, size=True) for i in range(n)])),
                                range(n))
    if task == "count":
        by, value = choice
        chosen = _matching(layout, choice)
        noun = {"all": "shape", "kind": value, "colour": f"{value} shape"}[by]
        n = len(chosen)
        asked = "" if by == "all" else f"{value}? "          # what the tick checks, restated beside it
        walk, seen = [], 0
        for i in range(len(shapes)):
            seen += i in chosen
            walk.append([*_item(layout, i, size=False), ", " + asked + (text.tally(seen) if i in chosen else "no")])
        qa = text.ask(rng, text.SCENE, task, str(n), what=text.plural(noun), count=text.count(n, noun),
                      be=text.be(n), n=n, walk=text.join(walk, sep="; ", last="; "))
        return text.with_stops(qa, range(len(shapes)), r", (?:\w+\? )?\w+[;.]")
    if task == "colour":
        s = shapes[choice]
        return text.ask(rng, text.SCENE, task, s.colour, shape=Name(s.kind, choice),
                        colour=Name(s.colour, choice), size=Name(s.size, choice), pos=_pos(layout, choice), total=total)
    if task == "position":
        s = shapes[choice]
        return text.ask(rng, text.SCENE, task, s.position, target=Name(s.label, choice), size=Name(s.size, choice),
                        pos=_pos(layout, choice), total=total)
    ref, target, wording = choice
    r, t = shapes[ref], shapes[target]
    return text.ask(rng, text.SCENE, task, t.label, relation=wording, Relation=wording.capitalize(),
                    ref=Name(r.label, ref), target=Name(t.label, target), article=text.article(t.size),
                    size=Name(t.size, target), ref_pos=_pos(layout, ref), target_pos=_pos(layout, target), total=total,
                    be=text.be(len(shapes)))


def _draw_shape(draw: ImageDraw.ImageDraw, kind: str, cx: int, cy: int, r: int, fill: int) -> None:
    if kind == "circle":
        draw.ellipse((cx - r, cy - r, cx + r, cy + r), fill=fill)
        return
    if kind == "square":
        h = round(r * 0.85)  # equal-looking area to the circle
        draw.rectangle((cx - h, cy - h, cx + h, cy + h), fill=fill)
        return
    if kind == "triangle":
        points = [(0, -1), (0.95, 0.8), (-0.95, 0.8)]
    elif kind == "diamond":
        points = [(0, -1), (0.8, 0), (0, 1), (-0.8, 0)]
    elif kind == "cross":
        a = 0.33  # half the arm width
        points = [(-a, -1), (a, -1), (a, -a), (1, -a), (1, a), (a, a), (a, 1), (-a, 1), (-a, a), (-1, a),
                  (-1, -a), (-a, -a)]
    else:  # star: 5 outer points, inner radius 0.45
        angles = np.pi * (np.arange(10) / 5 - 0.5)
        radii = np.where(np.arange(10) % 2 == 0, 1.0, 0.45)
        points = list(zip(np.cos(angles) * radii, np.sin(angles) * radii * 1.05 + 0.08))
    draw.polygon([(cx + x * r, cy + y * r) for x, y in points], fill=fill)


def _off(rgb: tuple[int, int, int], amount: int) -> tuple[int, int, int]:
    """rgb moved `amount` towards the other end of the scale: darker on light, lighter on dark."""
    step = -amount if _is_light(rgb) else amount
    return tuple(min(255, max(0, c + step)) for c in rgb)


def _backdrop(canvas: np.ndarray, layout: Layout) -> None:
    """Draw the look's inset panel and frame lines into canvas [CANVAS, CANVAS, 3], under the shapes
    (frame lines sit in the 2 px every shape keeps clear of its cell's edges)."""
    x0, y0, x1, y1 = layout.rect
    if layout.look.panel == "inset":
        m = round(PANEL_INSET * min(x1 - x0, y1 - y0))
        canvas[y0 + m:y1 - m, x0 + m:x1 - m] = _off(layout.background, PANEL_CONTRAST)
    line = _off(layout.background, LINE_CONTRAST)
    if layout.look.frame == "border":
        canvas[y0:y1, x0:x1][[0, 1, -2, -1], :] = line
        canvas[y0:y1, x0:x1][:, [0, 1, -2, -1]] = line
    elif layout.look.frame == "cells":
        for k in (1, 2):
            canvas[y0:y1, round(x0 + k * (x1 - x0) / 3)] = line
            canvas[round(y0 + k * (y1 - y0) / 3), x0:x1] = line


def render(layout: Layout) -> tuple[Image.Image, list[Obj], dict[str, np.ndarray]]:
    """Draw a layout: (RGB content image, objects in layout order, patch labels on the canvas)."""
    # Every shape is drawn into one id map (1 + index), so masks never overlap.
    id_map = Image.new("L", (CANVAS, CANVAS), 0)
    draw = ImageDraw.Draw(id_map)
    for i, s in enumerate(layout.shapes):
        _draw_shape(draw, s.kind, s.cx, s.cy, s.radius, i + 1)
    ids = np.asarray(id_map)
    canvas = np.empty((CANVAS, CANVAS, 3), dtype=np.uint8)
    canvas[:] = PAD_RGB
    x0, y0, x1, y1 = layout.rect
    canvas[y0:y1, x0:x1] = layout.background
    _backdrop(canvas, layout)
    objects, colour_regions, shape_regions = [], [], []
    for i, s in enumerate(layout.shapes):
        mask = ids == i + 1
        canvas[mask] = COLOUR_RGB[s.colour]
        attrs = {"colour": s.colour, "shape": s.kind, "size": s.size, "position": s.position}
        objects.append(Obj("shape", s.label, box_of(mask), mask, attrs))
        colour_regions.append((mask, COLOUR_ID[s.colour]))
        shape_regions.append((mask, SHAPE_ID[s.kind]))
    labels = patch_labels({"colour": colour_regions, "shape": shape_regions})
    return Image.fromarray(canvas[y0:y1, x0:x1]), objects, labels

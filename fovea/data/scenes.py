"""The "scene" family: 1-6 flat-coloured shapes, one per cell of a 3x3 grid
on a dark background, and questions about them.

A scene is laid out first (pure data, no pixels), so text can be generated
without drawing; render() draws a layout. options() lists only questions
whose answer is unique.
"""
import random
from dataclasses import dataclass

import numpy as np
from PIL import Image, ImageDraw

from fovea.data import text
from fovea.data.labels import COLOUR_ID, COLOUR_RGB, SHAPE_ID, SHAPES, patch_labels
from fovea.data.sample import IMAGE_SIZE, Obj, box_of
from fovea.data.text import QA, Name

TASKS = ("describe", "count", "colour", "spatial", "position")
KINDS = SHAPES[1:]
PALETTE = tuple(COLOUR_RGB)
CENTRES = (21, 64, 107)  # cell centres of a 3x3 grid over 128 px (cells ~42 px)
RADIUS = {"small": 9, "large": 16}
JITTER = {"small": 7, "large": 2}  # large shapes nearly fill a cell, so they move less
BACKGROUNDS = ((18, 18, 22), (30, 30, 38), (14, 26, 34), (36, 30, 28))
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
    size: str
    row: int
    col: int
    dx: int
    dy: int

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


def sample_layout(rng: random.Random) -> Layout:
    cells = sorted(rng.sample(range(9), rng.randint(1, 6)))
    shapes = []
    for cell in cells:
        size = rng.choice(("small", "large"))
        shapes.append(Shape(rng.choice(KINDS), rng.choice(PALETTE), size, cell // 3, cell % 3,
                            rng.randint(-JITTER[size], JITTER[size]), rng.randint(-JITTER[size], JITTER[size])))
    return Layout(tuple(shapes), rng.choice(BACKGROUNDS))


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


def _pos(shape: Shape, short: bool = False) -> str:
    """'in the top left corner'; short form 'at top left' keeps 6-shape descriptions under 60 words."""
    name = shape.position
    if name == "centre":
        return "in the centre"
    if short:
        return f"at {name}"
    return f"in the {name} corner" if shape.row != 1 and shape.col != 1 else f"in the {name}"


def _item(layout: Layout, i: int, size: bool) -> list:
    """'a small red circle at top left', naming the colour and shape."""
    s = layout.shapes[i]
    lead = f"{s.size} " if size else ""
    return [f"{text.article(lead or s.colour)} {lead}", Name(s.label, i), f" {_pos(s, short=True)}"]


def ask(layout: Layout, task: str, choice, rng: random.Random) -> QA:
    """Word the question `choice` (one of options(layout, task))."""
    shapes = layout.shapes
    total = text.count(len(shapes), "shape")
    if task == "describe":
        n = len(shapes)
        return text.ask(rng, text.SCENE, task, str(n), count=total, be=text.be(n),
                        items=text.join([_item(layout, i, size=True) for i in range(n)]))
    if task == "count":
        by, value = choice
        chosen = [i for i, s in enumerate(shapes) if by == "all" or value in (s.kind, s.colour)]
        noun = {"all": "shape", "kind": value, "colour": f"{value} shape"}[by]
        n = len(chosen)
        return text.ask(rng, text.SCENE, task, str(n), what=text.plural(noun), count=text.count(n, noun),
                        be=text.be(n), n=n, total=total,
                        items=text.join([_item(layout, i, size=False) for i in chosen]))
    if task == "colour":
        s = shapes[choice]
        return text.ask(rng, text.SCENE, task, s.colour, shape=Name(s.kind, choice),
                        colour=Name(s.colour, choice), size=s.size, pos=_pos(s), total=total)
    if task == "position":
        s = shapes[choice]
        return text.ask(rng, text.SCENE, task, s.position, target=Name(s.label, choice), size=s.size,
                        pos=_pos(s), total=total)
    ref, target, wording = choice
    r, t = shapes[ref], shapes[target]
    return text.ask(rng, text.SCENE, task, t.label, relation=wording, Relation=wording.capitalize(),
                    ref=Name(r.label, ref), target=Name(t.label, target), article=text.article(t.size),
                    size=t.size, ref_pos=_pos(r), target_pos=_pos(t), total=total, be=text.be(len(shapes)))


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


def render(layout: Layout) -> tuple[Image.Image, list[Obj], dict[str, np.ndarray]]:
    """Draw a layout: (RGB image, objects in layout order, patch labels)."""
    # Every shape is drawn into one id map (1 + index), so masks never overlap.
    id_map = Image.new("L", (IMAGE_SIZE, IMAGE_SIZE), 0)
    draw = ImageDraw.Draw(id_map)
    for i, s in enumerate(layout.shapes):
        _draw_shape(draw, s.kind, CENTRES[s.col] + s.dx, CENTRES[s.row] + s.dy, RADIUS[s.size], i + 1)
    ids = np.asarray(id_map)
    canvas = np.empty((IMAGE_SIZE, IMAGE_SIZE, 3), dtype=np.uint8)
    canvas[:] = layout.background
    objects, colour_regions, shape_regions = [], [], []
    for i, s in enumerate(layout.shapes):
        mask = ids == i + 1
        canvas[mask] = COLOUR_RGB[s.colour]
        attrs = {"colour": s.colour, "shape": s.kind, "size": s.size, "position": s.position}
        objects.append(Obj("shape", s.label, box_of(mask), mask, attrs))
        colour_regions.append((mask, COLOUR_ID[s.colour]))
        shape_regions.append((mask, SHAPE_ID[s.kind]))
    labels = patch_labels({"colour": colour_regions, "shape": shape_regions})
    return Image.fromarray(canvas), objects, labels

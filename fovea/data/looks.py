"""The layout space of charts and scenes: the *look* of an image (bar width and gap, axes, gridlines,
label lengths, where values sit, the font face; a scene's object sizes, placement, frame and backdrop
panel), split into TRAINING looks and HELD-OUT looks that training never draws.

A look is a few layout parameters; a family's `Layout` is one image drawn in a look (bars, shapes and
their positions). `BASE_CHART` and `BASE_SCENE` are the looks of world v2 as it was before looks
existed: the "train" and "shifted" splits draw only those, so their samples are unchanged. Training
conversations draw a training look on WIDE_SHARE of their chart and scene images (fovea.data.generate);
the "layout" split draws held-out looks only.

The partition (what "training never sees" means here):
- Every categorical factor's values all occur in training, but whole combinations are held out: a look
  whose factor indices (the position of each value in its FACTORS tuple) sum to HELD_OUT_RESIDUE modulo
  3 is held out, any other is a training look. Every pair of factor values still occurs in training,
  so the held-out split measures recombination, not an unseen value.
- Charts also hold out bar-width values: training bars fill 28-38%, 50-70% (the base) or 82-94% of
  their slot, held-out bars 40-48% or 72-80%: unseen widths inside the training range.
Scenes hold out combinations only. Pure data: knows nothing about drawing.
"""
import itertools
import random
from dataclasses import dataclass

from fovea.data.glyphs import FACES

HELD_OUT_RESIDUE = 2  # the base looks (every index 0, sum 0) are training looks
WIDE_SHARE = 0.5  # of training conversations' chart and scene images drawn in a training look (else the base)
LABEL_SPARE = 10  # px between neighbouring bar labels at least, so 3-letter labels read as separate words


@dataclass(frozen=True)
class ChartLook:
    width: tuple[float, float]  # a bar's width as a share of its slot (the rest is the gap), drawn uniformly
    axes: str  # "both" (x and y axis lines), "x" (the baseline only) or "none"
    grid: str  # "none" or "light" (faint horizontal lines at values 3, 6 and 9)
    label_length: int  # letters per bar label; 0: 1 up to what a bar's slot fits (3, 2, 1 for 3, 4, 5 bars)
    values: str  # "above" each bar, or "inside" its top (above where the digit does not fit inside)
    face: str  # one of glyphs.FACES
    label_spare: int = LABEL_SPARE  # px of its bar's slot a label leaves free: the least gap between labels


@dataclass(frozen=True)
class SceneLook:
    radius: tuple[int, int] | None  # inclusive radius range in px; None: the split style's shape_radius
    placement: str  # "jitter" (anywhere in its cell), "centred" (its cell's centre), "inward" (towards the image centre)
    frame: str  # "none", "border" (a line around the image) or "cells" (lines between the 3x3 cells)
    panel: str  # "flat" background, or "inset": a slightly lighter or darker panel inside it


TRAIN_WIDTHS = ((0.5, 0.7), (0.28, 0.38), (0.82, 0.94))
HELD_OUT_WIDTHS = ((0.4, 0.48), (0.72, 0.8))
CHART_FACTORS = {  # index 0 of each is the base look's value
    "axes": ("both", "x", "none"),
    "grid": ("none", "light"),
    "label_length": (0, 1, 2, 3),
    "values": ("above", "inside"),
    "face": FACES,
}
SCENE_FACTORS = {
    "radius": (None, (7, 10), (27, 30)),  # never 11-12 or 25-26: the shifted split's unseen radii
    "placement": ("jitter", "centred", "inward"),
    "frame": ("none", "border", "cells"),
    "panel": ("flat", "inset"),
}


def _combinations(factors: dict[str, tuple], held_out: bool) -> list[dict]:
    """Every combination of the factors' values (as keyword dicts) on one side of the partition."""
    out = []
    for indices in itertools.product(*(range(len(values)) for values in factors.values())):
        if (sum(indices) % 3 == HELD_OUT_RESIDUE) == held_out:
            out.append({name: factors[name][i] for name, i in zip(factors, indices)})
    return out


def _chart_looks(held_out: bool) -> tuple[ChartLook, ...]:
    widths = HELD_OUT_WIDTHS if held_out else TRAIN_WIDTHS
    return tuple(ChartLook(width, **combo) for width in widths for combo in _combinations(CHART_FACTORS, held_out))


# world v2's labels may come within 3 px of their slot's edge (its longest labels have the widest slots)
BASE_CHART = ChartLook(TRAIN_WIDTHS[0], **{name: values[0] for name, values in CHART_FACTORS.items()}, label_spare=3)
BASE_SCENE = SceneLook(**{name: values[0] for name, values in SCENE_FACTORS.items()})
# family -> {"train": training looks, "held_out": held-out looks}
LOOKS = {
    "chart": {"train": _chart_looks(False), "held_out": _chart_looks(True)},
    "scene": {side: tuple(SceneLook(**c) for c in _combinations(SCENE_FACTORS, side == "held_out"))
              for side in ("train", "held_out")},
}


def draw_look(seed: int, family: str, split: str, mixed: bool):
    """The look of seed's image: a held-out look on the "layout" split; with `mixed` (training
    conversations, "train" split) a training look on WIDE_SHARE of images; else None, the base look.
    None for a family without looks (ocr). Seeded by (seed, family) alone, so every task of a seed
    shares its look."""
    if family not in LOOKS or not (split == "layout" or (mixed and split == "train")):
        return None
    rng = random.Random(f"look/{seed}/{family}/{split}")
    if split == "layout":
        return rng.choice(LOOKS[family]["held_out"])
    return rng.choice(LOOKS[family]["train"]) if rng.random() < WIDE_SHARE else None


def training_look(seed: int, family: str):
    """A training look for seed's image, drawn uniformly over every training look (never the base look
    alone, never a held-out one): the vision tower's drill on the widened looks. None for ocr."""
    if family not in LOOKS:
        return None
    return random.Random(f"training-look/{seed}/{family}").choice(LOOKS[family]["train"])


HARD_FACES = tuple(face for face in FACES if face != "regular")
# the label drills' faces by name (the trainers' --aux-looks and --focus-looks "labels" / "condensed")
LABEL_FACES = {"labels": HARD_FACES, "condensed": ("condensed",)}


def label_look(seed: int, family: str, faces: tuple[str, ...] = HARD_FACES):
    """A training look for the tower's label drill: for a chart, one whose labels run 2-3 letters (or as
    long as a slot fits) in one of `faces` (by default every face but the regular one), where held-out
    charts' labels are misread one letter wrong; a scene's is training_look's. None for ocr. Never a
    held-out look."""
    if family != "chart":
        return training_look(seed, family)
    if not faces or set(faces) - set(FACES):
        raise ValueError(f"faces must be some of {FACES}, got {faces!r}")
    hard = [look for look in LOOKS["chart"]["train"] if look.face in faces and look.label_length != 1]
    return random.Random(f"label-look/{seed}").choice(hard)


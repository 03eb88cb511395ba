"""The sample record shared by every family: image size, patch grid, and the
dataclasses a generator returns.

Holds no drawing or wording logic; families fill these records in.
"""
from dataclasses import dataclass, field

import numpy as np
from PIL import Image

IMAGE_SIZE = 128
PATCH = 16
GRID = IMAGE_SIZE // PATCH  # 8 patches per side
IGNORE = -100  # patch label value ignored by the loss (matches torch's default ignore_index)
MIN_WORDS, MAX_WORDS = 20, 60  # every answer's length in whitespace-separated words


@dataclass(frozen=True)
class Mention:
    """Characters answer[start:end] name an attribute of objects[obj] (its colour, shape, word or bar label)."""

    start: int
    end: int
    obj: int


@dataclass
class Obj:
    """One thing drawn in the image that answers can talk about."""

    kind: str  # "shape", "word" or "bar"
    label: str  # how answers name it: "red circle", "KOTA", "A"; every mention is a substring
    box: tuple[int, int, int, int]  # (x0, y0, x1, y1), x1 and y1 exclusive
    mask: np.ndarray  # bool [IMAGE_SIZE, IMAGE_SIZE], the pixels that belong to it
    attrs: dict[str, str] = field(default_factory=dict)  # family-specific facts: size, position, value...


@dataclass
class Sample:
    image: Image.Image  # RGB, IMAGE_SIZE x IMAGE_SIZE
    question: str
    answer: str
    family: str
    task: str
    short_answer: str  # the key fact scored for accuracy; appears verbatim (as whole words) in answer
    objects: list[Obj]
    mentions: list[Mention]
    patch_labels: dict[str, np.ndarray]  # int64 [GRID, GRID] per label kind; IGNORE where not applicable


def box_of(mask: np.ndarray) -> tuple[int, int, int, int]:
    """Tight (x0, y0, x1, y1) box of a non-empty bool mask, exclusive upper bounds."""
    ys = np.flatnonzero(mask.any(axis=1))
    xs = np.flatnonzero(mask.any(axis=0))
    return int(xs[0]), int(ys[0]), int(xs[-1]) + 1, int(ys[-1]) + 1

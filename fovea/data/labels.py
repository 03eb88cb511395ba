"""Id tables for the dense per-patch labels, and the vote that turns pixel
regions into one label per 16x16 patch.

These labels are auxiliary targets for the vision encoder (a per-patch
classification head per kind); a plain next-token loss alone barely moves the
image features. Knows nothing about wording or drawing order.
"""
import string

import numpy as np

from fovea.data.sample import GRID, IGNORE, IMAGE_SIZE, PATCH

# Id 0 is "nothing of this kind here" in every table.
COLOURS = ("background", "red", "green", "blue", "yellow", "purple", "orange", "white", "cyan")
# Saturated and far apart in RGB, so a 16-px patch is unambiguous after resizing.
COLOUR_RGB = {
    "red": (230, 40, 40),
    "green": (40, 200, 60),
    "blue": (50, 100, 255),
    "yellow": (250, 230, 40),
    "purple": (170, 70, 230),
    "orange": (255, 140, 0),
    "white": (245, 245, 245),
    "cyan": (0, 215, 220),
}
SHAPES = ("background", "circle", "square", "triangle", "star", "diamond", "cross")
CHARSET = ("none",) + tuple(string.ascii_uppercase) + tuple(string.digits)
BAR_VALUES = tuple(range(10))  # "bar": the value 1-9 of the bar covering the patch, 0 = no bar

NUM_LABELS = {
    "colour": len(COLOURS),
    "shape": len(SHAPES),
    "char": len(CHARSET),
    "bar": len(BAR_VALUES),
}

# A patch takes the label of the region covering most of it when that region
# covers at least 1/8 of the patch (32 px). Slivers below that, with nothing
# bigger present, are IGNORE: neither a confident object nor background.
MIN_COVER = PATCH * PATCH // 8

COLOUR_ID = {name: i for i, name in enumerate(COLOURS)}
SHAPE_ID = {name: i for i, name in enumerate(SHAPES)}
CHAR_ID = {name: i for i, name in enumerate(CHARSET)}

# [GRID, IMAGE_SIZE] 0/1 rows: _POOL @ mask @ _POOL.T sums a mask over each patch (a BLAS call, not a Python loop).
_POOL = np.kron(np.eye(GRID, dtype=np.float32), np.ones((1, PATCH), dtype=np.float32))

Region = tuple[np.ndarray, int]  # (bool [IMAGE_SIZE, IMAGE_SIZE] mask, class id)


def box_mask(box: tuple[int, int, int, int]) -> np.ndarray:
    """Bool mask of a (x0, y0, x1, y1) box, clipped to the image."""
    mask = np.zeros((IMAGE_SIZE, IMAGE_SIZE), dtype=bool)
    x0, y0, x1, y1 = (min(max(v, 0), IMAGE_SIZE) for v in box)
    mask[y0:y1, x0:x1] = True
    return mask


def patch_cover(masks: np.ndarray) -> np.ndarray:
    """float32 [..., GRID, GRID]: how many pixels of bool [..., IMAGE_SIZE, IMAGE_SIZE] masks fall in each patch."""
    return _POOL @ masks.astype(np.float32) @ _POOL.T


def vote(regions: list[Region]) -> np.ndarray:
    """int64 [GRID, GRID] label of each patch from non-overlapping regions."""
    if not regions:
        return np.zeros((GRID, GRID), dtype=np.int64)
    cover = patch_cover(np.stack([mask for mask, _ in regions]))  # [R, GRID, GRID] pixels of each region in each patch
    ids = np.array([cls for _, cls in regions], dtype=np.int64)
    best = cover.argmax(axis=0)
    best_cover = cover.max(axis=0)
    background = np.where(cover.sum(axis=0) == 0, 0, IGNORE)
    return np.where(best_cover >= MIN_COVER, ids[best], background).astype(np.int64)


def patch_labels(regions: dict[str, list[Region]]) -> dict[str, np.ndarray]:
    """Every kind in NUM_LABELS: voted where the family supplies regions, IGNORE elsewhere.

    A family passes an empty list for a kind that applies but has nothing drawn
    (all background), and omits kinds that do not apply to it.
    """
    ignore = np.full((GRID, GRID), IGNORE, dtype=np.int64)
    return {kind: vote(regions[kind]) if kind in regions else ignore.copy() for kind in NUM_LABELS}

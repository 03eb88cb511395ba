"""Where the drafter looked: heatmap overlays of a run's focus steps, and the token -> step map.

A *focus step* is one draft state on the committed path (the root of a round or an accepted node)
that read the visual memory; the trajectory (`fovea.trace.Accumulator.focus_trajectory`) lists
them in decoding order, and the scrubber, the token click and the focus-shift plot all index into
it. Pure numpy + Pillow: no gradio, no model, no tokenizer (token strings come in).
"""
from __future__ import annotations

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from fovea.data import letterbox
from fovea.trace import (JACCARD_TOP, FocusStep, IterationTrace, NodeRetrieval, focus_shifts, focus_trajectory,
                         jaccard_distance, top_set)

# the trajectory and its Jaccard statistics live in fovea.trace; the app's renderers import them here
__all__ = ["JACCARD_TOP", "FocusStep", "colormap", "focus_shifts", "focus_trajectory", "heatmap_overlay",
           "jaccard_distance", "step_caption", "step_for_token", "top_set", "weight_grid", "trajectory_gif"]

HEATMAP_SIDE = 384    # display side of the overlay: the model's letterboxed square canvas, scaled
# "inferno"-like anchors, dark -> bright; interpolated linearly (no matplotlib dependency)
_CMAP = np.array([[0, 0, 4], [87, 16, 110], [188, 55, 84], [249, 142, 9], [252, 255, 164]], dtype=float)


def step_for_token(trajectory: list[FocusStep], rounds: list[IterationTrace], iteration: int, k: int) -> int | None:
    """Trajectory index of the draft state that proposed emitted token k of a round.

    A draft token's producer is its parent node; when that state did not read the memory
    (deeper than the correction depth) its nearest corrected ancestor is used. The bonus token
    comes from the target, so it maps to the round's last focus step. None: no focus step
    at or before this token (e.g. correction disabled)."""
    if not 0 <= iteration < len(rounds):
        return None
    it = rounds[iteration]
    node = it.producer_of(k) if k < len(it.accepted) else (it.accepted[-1] if it.accepted else 0)
    path = it.path_to(node)                              # root .. node, on the accepted path
    node = next((n for n in reversed(path) if n in it.retrieval), 0)
    before = set(path[:path.index(node) + 1])
    best = None
    for idx, step in enumerate(trajectory):
        if step.iteration < iteration or (step.iteration == iteration and step.node in before):
            best = idx
    return best


def weight_grid(retrieval: NodeRetrieval, grid: tuple[int, int]) -> np.ndarray:
    """Retrieval weights placed on the memory grid: float [rows, cols], 0 where not selected.
    Entries beyond rows*cols (non-patch memory slots, if any) are ignored."""
    rows, cols = grid
    out = np.zeros(rows * cols, dtype=np.float32)
    for i, w in zip(retrieval.indices, retrieval.weights):
        if 0 <= i < rows * cols:
            out[i] = w
    return out.reshape(rows, cols)


def colormap(values: np.ndarray) -> np.ndarray:
    """Values in [0, 1] -> uint8 RGB [..., 3] along the inferno-like anchors."""
    x = np.clip(values, 0.0, 1.0) * (len(_CMAP) - 1)
    lo = np.floor(x).astype(int).clip(0, len(_CMAP) - 2)
    frac = (x - lo)[..., None]
    return (_CMAP[lo] * (1 - frac) + _CMAP[lo + 1] * frac).round().astype(np.uint8)


def heatmap_overlay(image: Image.Image, retrieval: NodeRetrieval | None, grid: tuple[int, int],
                    side: int = HEATMAP_SIDE) -> Image.Image:
    """The image as the model sees it (letterboxed into a square canvas: aspect kept, grey bars; the
    memory grid covers the whole canvas) with the retrieval weights on top.

    Selected patches are tinted by weight relative to the largest one (colour and opacity);
    unselected patches are dimmed, so the "fovea" reads at a glance. `retrieval=None` returns
    the image with the patch grid only."""
    base = np.asarray(letterbox(image, side), dtype=np.float32)
    rows, cols = grid
    if retrieval is not None and retrieval.indices:
        w = weight_grid(retrieval, grid)
        level = w / max(float(w.max()), 1e-12)                         # [rows, cols] in [0, 1]
        # colour and opacity per patch, then nearest-upsampled: cheap at any display size
        tint = _upsample(colormap(level).astype(np.float32), side)      # [side, side, 3]
        alpha = _upsample(np.where(level > 0, 0.2 + 0.45 * level, 0.0)[..., None].astype(np.float32), side)
        dim = _upsample(np.where(level > 0, 1.0, 0.4)[..., None].astype(np.float32), side)
        base = base * dim * (1 - alpha) + tint * alpha
    _draw_grid(base, rows, cols)
    return Image.fromarray(base.clip(0, 255).astype(np.uint8))


def trajectory_gif(image: Image.Image, trajectory: list[FocusStep], grid: tuple[int, int], path,
                   labels: list[str], side: int = 256, frame_ms: int = 600) -> None:
    """The focus trajectory as an animated GIF: one frame per focus step, `labels[i]` (its step and
    token) written in a band under it; the plain image when the trajectory is empty."""
    frames = [_labelled(heatmap_overlay(image, s.retrieval, grid, side), label)
              for s, label in zip(trajectory, labels)] or [heatmap_overlay(image, None, grid, side)]
    frames[0].save(path, format="GIF", save_all=True, append_images=frames[1:], duration=frame_ms, loop=0)


def _labelled(frame: Image.Image, label: str, band: int = 22) -> Image.Image:
    """The frame over a white band holding `label` in dark text."""
    out = Image.new("RGB", (frame.width, frame.height + band), (255, 255, 255))
    out.paste(frame, (0, 0))
    ImageDraw.Draw(out).text((6, frame.height + 4), label, fill=(31, 41, 55), font=ImageFont.load_default(14))
    return out


def _upsample(grid_values: np.ndarray, side: int) -> np.ndarray:
    """[rows, cols, C] -> [side, side, C] by nearest neighbour (patch cells of equal size +-1 px)."""
    rows, cols = grid_values.shape[:2]
    ys = np.arange(side) * rows // side
    xs = np.arange(side) * cols // side
    return grid_values[ys][:, xs]


def _draw_grid(px: np.ndarray, rows: int, cols: int, strength: float = 0.35) -> None:
    """Lighten the patch borders in place (float [H, W, 3]), so patches read without hiding pixels."""
    h, w = px.shape[:2]
    ys = [r * h // rows for r in range(1, rows)]
    xs = [c * w // cols for c in range(1, cols)]
    px[ys, :] = px[ys, :] * (1 - strength) + 255 * strength
    px[:, xs] = px[:, xs] * (1 - strength) + 255 * strength


def step_caption(step: FocusStep, it: IterationTrace, strings: list[str], index: int, total: int,
                 grid: tuple[int, int]) -> str:
    """Markdown caption of one focus step. `strings[i]` is the display text of it.tokens[i]."""
    r = step.retrieval
    node = step.node
    kind = "the root, i.e. the last committed token" if node == 0 else f"accepted node at depth {it.depths[node]}"
    children = [c for c, p in enumerate(it.parents) if p == node]
    accepted = set(it.accepted)
    proposed = ", ".join(f"`{_tok(strings[c])}`{' ✓' if c in accepted else ''}" for c in children[:6]) or "none"
    return (f"**Step {index + 1} / {total}** · iteration {it.iteration} · draft state of "
            f"`{_tok(strings[node])}` ({kind})  \n"
            f"**K = {r.k}** of {grid[0] * grid[1]} memory entries · **gate g = {r.gate:.2f}** · "
            f"top weight {max(r.weights, default=0.0):.3f}  \n"
            f"proposed next: {proposed}")


def _tok(s: str) -> str:
    """Token text safe inside a markdown code span."""
    s = s.replace("`", "'").replace("\n", "⏎")
    return s if s.strip() else "␣" * max(1, len(s)) if s else "∅"

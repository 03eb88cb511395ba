"""Does an image look like the bundled model's synthetic world? A measured image statistic.

The procedural world (`fovea.data`) paints flat colours on flat backgrounds: a dozen colours (at 5
bits per channel) cover at least 95.8% of every generated image, train and shifted splits alike
(1,200 images), while 1,199 of 1,200 procedural photo-like images (noise, skies, textures, smooth
blobs) stay under 72% (`python -m fovea.analysis.ood --n 200`, assets/results/ood.json; the one
miss is a near-flat blob picture at 84%). A generated image saved as a JPEG at quality 90 drops to
0.74-0.91, so the threshold sits just below that. `palette_coverage` is that share; below
`WORLD_THRESHOLD` the upload is out of distribution for the bundled model and its answers are
guesses. The statistic says nothing about a real backbone, which was trained on photos.
Pure numpy + Pillow; knows nothing about models.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from PIL import Image

TOP_COLOURS = 12
BITS = 5                   # per channel: 32 levels merge anti-aliasing and JPEG noise, keep real shading apart
WORLD_THRESHOLD = 0.72     # generated >= 0.958, their JPEGs >= 0.743; photo-like: 1 of 1,200 above (ood.json)
_ANALYSIS_SIDE = 256       # larger uploads are scaled down first (nearest: no new colours)


def palette_coverage(image: Image.Image, top: int = TOP_COLOURS) -> float:
    """Share of pixels covered by the `top` most frequent colours, quantised to BITS per channel."""
    image = image.convert("RGB")
    if max(image.size) > _ANALYSIS_SIDE:
        scale = _ANALYSIS_SIDE / max(image.size)
        image = image.resize((max(1, round(image.width * scale)), max(1, round(image.height * scale))),
                             Image.NEAREST)
    a = (np.asarray(image, dtype=np.uint8) >> (8 - BITS)).astype(np.int32)           # [H, W, 3]
    codes = (a[..., 0] << (2 * BITS)) | (a[..., 1] << BITS) | a[..., 2]              # one code per colour
    counts = np.bincount(codes.ravel(), minlength=1 << (3 * BITS))
    return float(np.sort(counts)[::-1][:top].sum() / codes.size)


@dataclass(frozen=True)
class WorldCheck:
    coverage: float            # palette_coverage of the image
    in_world: bool             # coverage >= WORLD_THRESHOLD

    @property
    def message(self) -> str:
        if self.in_world:
            return ""
        return (f"This image does not look like the bundled model's synthetic world: a dozen flat colours "
                f"cover {self.coverage:.0%} of it (generated scenes, text and charts: 96% or more). The bundled "
                "model was trained only on that world, so its answer is a guess; the decoding itself is still "
                "shown faithfully. For photos, start the app with a real backbone: "
                "python app.py --target <LLaVA-NeXT or Qwen2.5-VL folder> --drafter <drafter trained for it>.")


def check_world(image: Image.Image) -> WorldCheck:
    coverage = palette_coverage(image)
    return WorldCheck(coverage, coverage >= WORLD_THRESHOLD)

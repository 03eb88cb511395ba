"""Measure the out-of-distribution score (`fovea.ood.palette_coverage`) on generated images of both
splits against procedural photo-like images, and write assets/results/ood.json.

No photos can be downloaded where this project is built, so `photo_like(seed)` paints six kinds
of natural-looking images: white noise, a noisy sky gradient, blurred-noise foliage, multi-scale
value noise, gradient + smooth blobs, and noisy striped fabric, at random non-square sizes.
`python -m fovea.analysis.ood [--n 200]` (n per family and split, and photo-like images per kind).
"""
from __future__ import annotations

import argparse
import io
import json
from pathlib import Path

import numpy as np
from PIL import Image, ImageFilter

from fovea.ood import BITS, TOP_COLOURS, WORLD_THRESHOLD, palette_coverage

PHOTO_KINDS = ("noise", "sky", "foliage", "value_noise", "blobs", "fabric")
OUT = Path(__file__).resolve().parents[2] / "assets" / "results" / "ood.json"


def _value_noise(rng, h: int, w: int) -> np.ndarray:
    out = np.zeros((h, w, 3))
    for cell in (4, 16, 64):                   # octaves: fine grain, mid texture, large shapes
        small = rng.uniform(0, 255, (max(2, h // cell), max(2, w // cell), 3)).astype(np.uint8)
        out += np.asarray(Image.fromarray(small).resize((w, h), Image.BICUBIC), float) / 3
    return out * rng.uniform(0.5, 1.2) + rng.uniform(-30, 30, 3)


def photo_like(seed: int) -> Image.Image:
    """One procedural photo-like RGB image; the kind cycles with the seed (PHOTO_KINDS)."""
    rng = np.random.default_rng(seed)
    kind = PHOTO_KINDS[seed % len(PHOTO_KINDS)]
    w, h = (int(v) for v in rng.integers(160, 640, 2))
    y = np.linspace(0, 1, h)[:, None, None]
    x = np.linspace(0, 1, w)[None, :, None]
    if kind == "noise":
        a = rng.integers(0, 256, (h, w, 3)).astype(float)
    elif kind == "sky":
        a = rng.uniform(0, 255, 3) * (1 - y) + rng.uniform(0, 255, 3) * y + 20 * x + rng.normal(0, 3, (h, w, 3))
    elif kind == "foliage":
        grain = Image.fromarray(rng.integers(0, 256, (h, w, 3)).astype(np.uint8)).filter(ImageFilter.GaussianBlur(3))
        a = np.asarray(grain, float)
        a = (a - a.mean()) * 4 + rng.uniform(60, 200, 3)
    elif kind == "value_noise":
        a = _value_noise(rng, h, w)
    elif kind == "blobs":
        blobs = Image.fromarray(rng.uniform(0, 240, (6, 6)).astype(np.uint8)).resize((w, h), Image.BICUBIC)
        a = rng.uniform(0, 255, 3) * (1 - y) + rng.uniform(0, 255, 3) * y + np.asarray(blobs, float)[..., None] - 60
    else:
        stripes = np.sin(np.arange(w)[None, :, None] / rng.uniform(2, 9))
        a = 128 + 80 * stripes * rng.uniform(0.3, 1, 3) + rng.normal(0, 12, (h, w, 3))
    return Image.fromarray(np.clip(a, 0, 255).astype(np.uint8))


def generated_images(n: int, start: int = 0):
    """(split, family, image) for n seeds per family and split, from `start`."""
    from fovea.data import FAMILIES, STYLES, make_sample

    for split in STYLES:
        for family in FAMILIES:
            for seed in range(start, start + n):
                yield split, family, make_sample(seed, family=family, split=split).image


def measure(n: int) -> dict:
    gen: dict[str, list[float]] = {}
    for split, family, image in generated_images(n):
        gen.setdefault(f"{split}/{family}", []).append(palette_coverage(image))
    for split, family, image in generated_images(max(2, n // 6), start=n):       # re-encoded by a user
        buf = io.BytesIO()
        image.save(buf, format="JPEG", quality=90)
        gen.setdefault(f"jpeg_q90/{split}/{family}", []).append(palette_coverage(Image.open(buf)))
    photo: dict[str, list[float]] = {}
    for seed in range(n * len(PHOTO_KINDS)):
        photo.setdefault(PHOTO_KINDS[seed % len(PHOTO_KINDS)], []).append(palette_coverage(photo_like(seed)))

    def span(values):
        return {"n": len(values), "min": round(min(values), 4), "median": round(float(np.median(values)), 4),
                "max": round(max(values), 4)}
    all_gen = [v for vs in gen.values() for v in vs]
    all_photo = [v for vs in photo.values() for v in vs]
    return {"statistic": f"share of pixels covered by the top {TOP_COLOURS} colours at {BITS} bits per channel",
            "threshold": WORLD_THRESHOLD, "generated": {k: span(v) for k, v in gen.items()},
            "photo_like": {k: span(v) for k, v in photo.items()},
            "generated_below_threshold": sum(v < WORLD_THRESHOLD for v in all_gen),
            "photo_like_at_or_above_threshold": sum(v >= WORLD_THRESHOLD for v in all_photo),
            "margin": {"generated_min": round(min(all_gen), 4), "photo_like_max": round(max(all_photo), 4)}}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=200)
    p.add_argument("--out", type=Path, default=OUT)
    args = p.parse_args(argv)
    result = measure(args.n)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result["margin"]), result["generated_below_threshold"], result["photo_like_at_or_above_threshold"])


if __name__ == "__main__":
    main()

"""Text drawing for the ocr and chart families: Pillow's built-in scalable
font, drawn one character at a time so each character's box is known exactly
(the "char" patch labels need it). Glyphs are stamped into a uint8 ink array.

The one font comes in FACES derived from it, so the world needs no font file:
"regular" (the font itself), "bold" (a 1-px stroke), "condensed" (squeezed to
CONDENSE of its width) and "oblique" (slanted by SLANT). Knows nothing about
what the text means.
"""
from functools import lru_cache

import numpy as np
from PIL import Image, ImageDraw, ImageFont

TRACKING = 2  # extra px between characters, so neighbouring glyph boxes do not touch
FACES = ("regular", "bold", "condensed", "oblique")
CONDENSE = 0.72  # a condensed glyph's width and advance over the regular one's
SLANT = 0.2  # an oblique glyph's top moves right by this share of its height


@lru_cache(maxsize=None)
def font(size: int) -> ImageFont.FreeTypeFont:
    # Pillow >= 10.1 embeds a scalable font; cap height is ~0.68 * size.
    return ImageFont.load_default(size=size)


@lru_cache(maxsize=None)
def _rendered(size: int, char: str, face: str) -> tuple[np.ndarray, tuple[int, int, int, int], float]:
    """(uint8 [h, w] anti-aliased ink cropped to its box, the ink box relative to the draw origin, the
    advance width) of one character in one face.

    Rendered once per (size, char, face) and stamped with numpy afterwards: drawing through Pillow per
    character dominated the cost of a sample.
    """
    if face not in FACES:
        raise ValueError(f"unknown face {face!r}; expected one of {FACES}")
    stroke = {"stroke_width": 1, "stroke_fill": 255} if face == "bold" else {}
    left, top, right, bottom = font(size).getbbox(char, stroke_width=stroke.get("stroke_width", 0))
    image = Image.new("L", (right - left, bottom - top), 0)
    ImageDraw.Draw(image).text((-left, -top), char, fill=255, font=font(size), **stroke)
    advance = font(size).getlength(char) + 2 * bool(stroke)
    if face == "condensed":
        image = image.resize((max(1, round(image.width * CONDENSE)), image.height), Image.BILINEAR)
        left, advance = round(left * CONDENSE), advance * CONDENSE
    elif face == "oblique":  # output (x, y) reads input (x - SLANT * (h - 1 - y), y): the baseline stays put
        shift = SLANT * (image.height - 1)
        image = image.transform((image.width + int(np.ceil(shift)), image.height), Image.AFFINE,
                                (1, SLANT, -shift, 0, 1, 0), Image.BILINEAR)
    ink = np.asarray(image)
    cols = np.flatnonzero(ink.any(axis=0))  # a resampled glyph may gain blank columns at its sides
    if face in ("condensed", "oblique") and cols.size:
        ink, left = ink[:, cols[0]:cols[-1] + 1], left + int(cols[0])
    return ink, (left, top, left + ink.shape[1], top + ink.shape[0]), advance


def _metrics(size: int, char: str, face: str) -> tuple[tuple[int, int, int, int], float]:
    """(ink bbox relative to the draw origin, advance width)."""
    return _rendered(size, char, face)[1:]


def cap_top(size: int, face: str = "regular") -> int:
    """Distance from the draw origin down to the top of a capital letter."""
    return _metrics(size, "H", face)[0][1]


def cap_height(size: int, face: str = "regular") -> int:
    top, bottom = _metrics(size, "H", face)[0][1::2]
    return bottom - top


def text_width(text: str, size: int, face: str = "regular") -> int:
    """Ink width of text drawn by draw_text (first glyph's left to last glyph's right)."""
    x = 0.0
    for char in text[:-1]:
        x += _metrics(size, char, face)[1] + TRACKING
    return round(x + _metrics(size, text[-1], face)[0][2] - _metrics(size, text[0], face)[0][0])


def draw_text(ink: np.ndarray, x: int, y: int, text: str, size: int, face: str = "regular") -> list[tuple[str, tuple]]:
    """Stamp text into ink (uint8 [H, W]) with its ink starting at x and its capitals' top at y.

    Returns [(char, (x0, y0, x1, y1) ink box)] per character.
    """
    boxes = []
    origin_x = x - _metrics(size, text[0], face)[0][0]
    origin_y = y - cap_top(size, face)
    for char in text:
        glyph, (left, top, right, bottom), advance = _rendered(size, char, face)
        box = (round(origin_x) + left, origin_y + top, round(origin_x) + right, origin_y + bottom)
        region = ink[box[1]:box[3], box[0]:box[2]]
        np.maximum(region, glyph, out=region)
        boxes.append((char, box))
        origin_x += advance + TRACKING
    return boxes


def text_box(char_boxes: list[tuple[str, tuple]]) -> tuple[int, int, int, int]:
    """Union of the per-character boxes draw_text returned."""
    boxes = [box for _, box in char_boxes]
    return (min(b[0] for b in boxes), min(b[1] for b in boxes), max(b[2] for b in boxes), max(b[3] for b in boxes))


def blend(canvas: np.ndarray, ink: np.ndarray, colour: tuple[int, int, int]) -> Image.Image:
    """RGB image of canvas [H, W, 3] uint8 with colour alpha-blended in, weighted by ink [H, W] uint8."""
    image = Image.fromarray(canvas)
    image.paste(colour, (0, 0, *image.size), Image.fromarray(ink))
    return image

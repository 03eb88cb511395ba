"""Text drawing for the ocr and chart families: Pillow's built-in scalable
font, drawn one character at a time so each character's box is known exactly
(the "char" patch labels need it). Glyphs are stamped into a uint8 ink array.

Knows nothing about what the text means.
"""
from functools import lru_cache

import numpy as np
from PIL import Image, ImageDraw, ImageFont

TRACKING = 2  # extra px between characters, so neighbouring glyph boxes do not touch


@lru_cache(maxsize=None)
def font(size: int) -> ImageFont.FreeTypeFont:
    # Pillow >= 10.1 embeds a scalable font; cap height is ~0.68 * size.
    return ImageFont.load_default(size=size)


@lru_cache(maxsize=None)
def _metrics(size: int, char: str) -> tuple[tuple[int, int, int, int], float]:
    """(ink bbox relative to the draw origin, advance width)."""
    return font(size).getbbox(char), font(size).getlength(char)


@lru_cache(maxsize=None)
def _glyph(size: int, char: str) -> np.ndarray:
    """uint8 [h, w] anti-aliased ink of one character, cropped to its bbox.

    Rendered once per (size, char) and stamped with numpy afterwards: drawing
    through Pillow per character dominated the cost of a sample.
    """
    left, top, right, bottom = _metrics(size, char)[0]
    image = Image.new("L", (right - left, bottom - top), 0)
    ImageDraw.Draw(image).text((-left, -top), char, fill=255, font=font(size))
    return np.asarray(image)


def cap_top(size: int) -> int:
    """Distance from the draw origin down to the top of a capital letter."""
    return _metrics(size, "H")[0][1]


def cap_height(size: int) -> int:
    top, bottom = _metrics(size, "H")[0][1::2]
    return bottom - top


def text_width(text: str, size: int) -> int:
    """Ink width of text drawn by draw_text (first glyph's left to last glyph's right)."""
    x = 0.0
    for char in text[:-1]:
        x += _metrics(size, char)[1] + TRACKING
    return round(x + _metrics(size, text[-1])[0][2] - _metrics(size, text[0])[0][0])


def draw_text(ink: np.ndarray, x: int, y: int, text: str, size: int) -> list[tuple[str, tuple]]:
    """Stamp text into ink (uint8 [H, W]) with its ink starting at x and its capitals' top at y.

    Returns [(char, (x0, y0, x1, y1) ink box)] per character.
    """
    boxes = []
    origin_x = x - _metrics(size, text[0])[0][0]
    origin_y = y - cap_top(size)
    for char in text:
        (left, top, right, bottom), advance = _metrics(size, char)
        box = (round(origin_x) + left, origin_y + top, round(origin_x) + right, origin_y + bottom)
        region = ink[box[1]:box[3], box[0]:box[2]]
        np.maximum(region, _glyph(size, char), out=region)
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

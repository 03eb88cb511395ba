"""The "ocr" family: 1-3 random codes (3-6 capital letters and digits) on separate lines of a
dark or light page, in glyphs a little larger than a 16-px patch, and questions that need
reading them.

Codes come from the seeded generator, not a dictionary, so the model must read
glyphs rather than guess words. Layouts are pure data; render() draws them.
"""
import random
import string
from dataclasses import dataclass

import numpy as np
from PIL import Image

from fovea.data import glyphs, text
from fovea.data.labels import CHAR_ID, box_mask, patch_labels
from fovea.data.sample import CANVAS, PAD_RGB, Obj, box_of, content_rect, split_style
from fovea.data.text import QA, Name

TASKS = ("read", "top", "word_count")
LETTERS = "".join(c for c in string.ascii_uppercase if c not in "IO")  # I/1 and O/0 look alike
ALPHABET = LETTERS + string.digits
MARGIN = 6
ROW_NAMES = ("top", "middle", "bottom")
INK_THRESHOLD = 96  # anti-aliased ink above this counts as part of a word's mask


@dataclass(frozen=True)
class Line:
    word: str
    size: int
    row: int
    x: int  # left of the ink, canvas pixels
    y: int  # top of the capitals


@dataclass(frozen=True)
class Layout:
    lines: tuple[Line, ...]  # top to bottom, which is also the order of Sample.objects
    background: tuple[int, int, int]
    ink: tuple[int, int, int]
    rect: tuple[int, int, int, int]  # content rectangle in the canvas


def sample_layout(rng: random.Random, split: str = "train") -> Layout:
    style = split_style(split)
    rect = content_rect(rng.choice(style.sizes))
    width, height = rect[2] - rect[0], rect[3] - rect[1]
    n = rng.randint(1, 3)
    words: list[str] = []
    while len(words) < n:
        word = "".join(rng.choice(ALPHABET) for _ in range(rng.randint(3, 6)))
        # a narrow page takes only the words that fit on one line at the smallest font
        if word not in words and glyphs.text_width(word, min(style.font_sizes)) <= width - 2 * MARGIN:
            words.append(word)
    lines = []
    for word, row in zip(words, sorted(rng.sample(range(3), n))):
        fits = [s for s in style.font_sizes if glyphs.text_width(word, s) <= width - 2 * MARGIN]
        size = rng.choice(fits or [min(style.font_sizes)])
        ink_w = glyphs.text_width(word, size)
        x = rect[0] + rng.randint(MARGIN, max(MARGIN, width - MARGIN - ink_w))
        centre = rect[1] + round((row + 0.5) * height / 3)
        slack = max(0, height // 6 - glyphs.cap_height(size) // 2 - 3)
        y = centre - glyphs.cap_height(size) // 2 + rng.randint(-slack, slack)
        lines.append(Line(word, size, row, x, y))
    background, ink = rng.choice(style.paper)
    background = tuple(min(255, max(0, c + rng.randint(-8, 8))) for c in background)
    return Layout(tuple(lines), background, ink, rect)


def options(layout: Layout, task: str) -> list:
    """Every ocr question has a unique answer on any layout."""
    if task not in TASKS:
        raise ValueError(f"unknown ocr task {task!r}")
    return [None]


def ask(layout: Layout, task: str, choice, rng: random.Random) -> QA:
    """Word the question for `task`; ocr questions need no `choice`."""
    words = [Name(line.word, i) for i, line in enumerate(layout.lines)]
    n = len(words)
    fields = dict(count=text.count(n, "word"), be=text.be(n))
    if task == "read":
        short = " ".join(w.text for w in words)
        # stress: the character right after each word (" " + the next word, or the stop), where a read
        # answer doubles or drops a word's last letter (most OCR read misses at step 42,800)
        return text.with_stops(text.ask(rng, text.OCR, task, short, text=text.join(words, sep=" ", last=" "),
                                        **fields), range(n), r"[ .,]")
    if task == "word_count":
        return text.ask(rng, text.OCR, task, str(n), listed=text.join(words), **fields)
    rest_templates = text.OCR["top"]["rest_one" if n == 1 else "rest_more"]
    rest = text.pieces(rng.choice(rest_templates), others=text.join(words[1:]))
    return text.ask(rng, text.OCR, task, words[0].text, word=words[0], rest=rest, **fields)


def render(layout: Layout) -> tuple[Image.Image, list[Obj], dict[str, np.ndarray]]:
    """Draw a layout: (RGB content image, one "word" object per line, patch labels on the canvas)."""
    ink = np.zeros((CANVAS, CANVAS), dtype=np.uint8)
    char_boxes = [glyphs.draw_text(ink, line.x, line.y, line.word, line.size) for line in layout.lines]
    canvas = np.empty((CANVAS, CANVAS, 3), dtype=np.uint8)
    canvas[:] = PAD_RGB
    x0, y0, x1, y1 = layout.rect
    canvas[y0:y1, x0:x1] = layout.background
    image = glyphs.blend(canvas, ink, layout.ink)
    objects, char_regions = [], []
    for line, boxes in zip(layout.lines, char_boxes):
        mask = (ink > INK_THRESHOLD) & box_mask(glyphs.text_box(boxes))
        objects.append(Obj("word", line.word, box_of(mask), mask, {"row": ROW_NAMES[line.row]},
                           {line.word: tuple(box for _, box in boxes)}))
        char_regions += [(box_mask(box), CHAR_ID[char]) for char, box in boxes]
    return image.crop(layout.rect), objects, patch_labels({"char": char_regions})

"""Strict exact-answer scoring of a generated answer against a world sample.

The world's answers are full sentences that restate other facts beside the asked one ("The value of
V is 2. The chart shows 4 bars ..."), so finding the short answer *anywhere* in the output overstates
accuracy: the "4" of "4 bars" would score a question whose answer is 4. Each task is therefore scored
at its answer slot, following the templates in fovea.data.text:

- lookups (colour, position, OCR top, chart highest): the short answer appears as whole words in
  the output's first sentence, where every template states it;
- scene spatial (the named shape is found first, then its neighbour): the last "<colour> <shape>"
  the output names;
- counts (scene count, OCR word count): the first number of the output;
- chart value (every bar is read first, then the asked one): the last number of the output;
- OCR read: the all-caps words of the first sentence are exactly the gold words, in order;
- chart describe: the "<label> is <value>" pairs of the output are exactly the gold pairs, in order;
- scene describe (every shape is listed first, then the count): the last number is the shape count,
  and the output's "<size> <colour> <shape> at <position>" items are exactly the gold items (as a
  multiset).

Knows nothing about models.
"""
from __future__ import annotations

import re
from collections import Counter

from fovea.data.labels import COLOUR_RGB
from fovea.data.scenes import KINDS, POSITIONS

_NUMBER = re.compile(r"(?<!\w)\d+(?!\w)")
_CAPS = re.compile(r"(?<!\w)[A-Z0-9]+(?!\w)")
_PAIR = re.compile(r"(?<!\w)([A-Z]+) is (\d+)(?!\w)")
_PLACES = "|".join(p for row in POSITIONS for p in row)
_COLOURS = "|".join(COLOUR_RGB)
_LABEL = re.compile(rf"\b(?:{_COLOURS}) (?:{'|'.join(KINDS)})\b")
_ITEM = re.compile(rf"\b(large|small) ([a-z]+) ([a-z]+) (?:at|in) (?:the )?({_PLACES})\b")

FIRST_SENTENCE = ("scene/colour", "scene/position", "ocr/top", "chart/highest")
FIRST_NUMBER = ("scene/count", "ocr/word_count")


def first_sentence(text: str) -> str:
    return re.split(r"(?<=\.)\s", text.strip(), maxsplit=1)[0]


def _first_number(text: str) -> str | None:
    m = _NUMBER.search(text)
    return m.group(0) if m else None


def _last_number(text: str) -> str | None:
    numbers = _NUMBER.findall(text)
    return numbers[-1] if numbers else None


def _whole_words(needle: str, text: str) -> bool:
    return bool(re.search(r"(?<!\w)" + re.escape(needle) + r"(?!\w)", text))


def answer_correct(sample, text: str) -> bool:
    """Whether `text` (a generated answer) answers `sample`'s question exactly (see module doc)."""
    task = f"{sample.family}/{sample.task}"
    gold = sample.short_answer
    text = text.strip()
    if task in FIRST_SENTENCE:
        return _whole_words(gold, first_sentence(text))
    if task in FIRST_NUMBER:
        return _first_number(text) == gold
    if task == "scene/spatial":
        named = _LABEL.findall(text)
        return bool(named) and named[-1] == gold
    if task == "chart/value":
        return _last_number(text) == gold
    if task == "ocr/read":
        return _CAPS.findall(first_sentence(text)) == gold.split()
    if task == "chart/describe":
        return _PAIR.findall(text) == _PAIR.findall(gold)
    if task == "scene/describe":
        return (_last_number(text) == gold
                and Counter(_ITEM.findall(text)) == Counter(_ITEM.findall(sample.answer)))
    raise ValueError(f"no scoring rule for task {task!r}")

"""The candidate span: where, in the current prediction of the canvas, the task's answer sits.

A deterministic parser per task, built on the slot rules of fovea.data.scoring (which reads each
answer at its template slot) and on its own compiled patterns, so the parser and the scorer never disagree. It returns the *token* positions whose values decide the score, so
that once they are fixed, filling the rest of the canvas cannot change whether the answer is right:

- first-sentence tasks (colour, position, OCR top, chart highest, OCR read): the first sentence, once it
  holds a value of the slot's kind (a colour word, a place, a code or label in capitals); before that
  the slot is absent, so a sentence that ends before its answer ("The circle in the bottom left corner
  is.") is never a candidate;
- first-number tasks (scene count, OCR word count): everything up to the first number;
- "last" tasks (scene spatial: the last "<colour> <shape>"; chart value: the last number): from that
  match to the answer's end;
- whole-answer tasks (chart describe, scene describe): the whole answer.

The answer ends at the canvas's first EOS, and that EOS belongs to every span that reaches the end.
Each character span also takes the character on either side (a boundary: "1" must not become "12"),
so the token span covers every token that could move a match. `question_task` names the parser a free
question needs (the world template it fills), for front ends that get no task. Knows nothing about models.
"""
from __future__ import annotations

import bisect
import re

from fovea.data import TASKS, scoring, text as templates

# one pattern per "last match" task; whole-answer and first-* tasks need none
_LAST = {"scene/spatial": scoring._LABEL, "chart/value": scoring._NUMBER}
_WHOLE = ("chart/describe", "scene/describe")
# what the first sentence of a first-sentence task must hold before it is a candidate: a value of the
# kind its slot takes (chart labels are letters only, so the digits of "Of the 4 bars" do not count)
_SLOT_VALUE = {
    "scene/colour": re.compile(rf"\b(?:{scoring._COLOURS})\b"),
    "scene/position": re.compile(rf"\b(?:{scoring._PLACES})\b"),
    "ocr/top": scoring._CAPS,
    "ocr/read": scoring._CAPS,
    "chart/highest": re.compile(r"(?<!\w)[A-Z]+(?!\w)"),
}
_SENTENCE_END = re.compile(r"\.(?=\s)")
_FAMILY_TEXT = {"scene": templates.SCENE, "ocr": templates.OCR, "chart": templates.CHART}
_FIELD = re.compile(r"\{\w+\}")


class TokenText:
    """Per-token strings of a tokenizer's vocabulary (byte-level BPE, ASCII world text), so a canvas
    is turned into text and character offsets without a tokenizer call per step."""

    def __init__(self, tokenizer):
        self.pieces = [tokenizer.decode([i]) for i in range(len(tokenizer))]
        self.eos_id = tokenizer.eos_token_id

    def answer(self, ids: list[int]) -> tuple[str, list[int], int | None]:
        """(the text before the first EOS, each of those tokens' first character offset, the EOS's
        position or None when the canvas has none)."""
        end = ids.index(self.eos_id) if self.eos_id in ids else None
        starts, text = [], []
        at = 0
        for i in ids[:end]:
            starts.append(at)
            text.append(self.pieces[i])
            at += len(self.pieces[i])
        return "".join(text), starts, end


def char_span(task: str, text: str) -> tuple[int, int] | None:
    """The characters [start, end) of `text` that the scorer of `task` reads, or None when the slot is
    absent (no number, no label, a first sentence without a value of the slot's kind yet).
    `end == len(text)` means the span runs to the answer's end."""
    begin = len(text) - len(text.lstrip())
    if task in _SLOT_VALUE:
        stop = _SENTENCE_END.search(text, begin)
        end = stop.end() if stop else len(text)
        return (begin, end) if _SLOT_VALUE[task].search(text, begin, end) else None
    if task in scoring.FIRST_NUMBER:
        number = scoring._NUMBER.search(text)
        return (begin, number.end()) if number else None
    if task in _LAST:
        matches = list(_LAST[task].finditer(text))
        return (matches[-1].start(), len(text)) if matches else None
    if task in _WHOLE:
        return begin, len(text)
    raise ValueError(f"no candidate parser for task {task!r}")


def candidate_span(task: str, ids: list[int], token_text: TokenText) -> tuple[int, int] | None:
    """The canvas positions [start, end) of the task's candidate span in the canvas token ids, or None
    (see module doc)."""
    text, starts, eos = token_text.answer(ids)
    span = char_span(task, text)
    if span is None or not starts:
        return None
    a, b = max(0, span[0] - 1), span[1]                        # with the boundary character on each side
    first = bisect.bisect_right(starts, a) - 1
    if b < len(text):
        return first, bisect.bisect_right(starts, b)
    return first, (len(ids) if eos is None else eos + 1)        # to the end: the EOS is part of the span


def _question_patterns() -> list[tuple[re.Pattern, int, str]]:
    """(pattern, literal characters, task) for every question template of the world; a {field} matches
    any text, the rest literally, case and end punctuation ignored."""
    out = []
    for family, tasks in TASKS.items():
        for task in tasks:
            for template in _FAMILY_TEXT[family][task]["q"]:
                literal = _FIELD.split(template.rstrip("?.! ").lower())
                pattern = "(.+)".join(re.escape(part) for part in literal)
                out.append((re.compile(pattern), sum(map(len, literal)), f"{family}/{task}"))
    return out


_QUESTIONS = _question_patterns()


def question_task(question: str) -> str | None:
    """The task ("family/task") whose question template `question` fills, or None when it fills none.
    Where several match ("What is written at the top?" also fills "What is {relation} the {ref}?"),
    the template with the most literal text wins."""
    q = " ".join(str(question or "").split()).rstrip("?.! ").lower()
    hits = [(n, task) for pattern, n, task in _QUESTIONS if pattern.fullmatch(q)]
    return max(hits)[1] if hits else None

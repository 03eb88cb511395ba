"""Question and answer templates for every family, and the small formatter
that fills them while recording which characters name which image object.

Knows nothing about images: families choose the facts and the template, this
module turns them into English plus Mention spans.
"""
import dataclasses
import random
import re
import string
from dataclasses import dataclass

from fovea.data.sample import MIN_WORDS, Mention


@dataclass(frozen=True)
class Name:
    """Answer text that names objects[obj]; filling it records a Mention."""

    text: str
    obj: int


Piece = str | int | Name
Field = Piece | list[Piece]


@dataclass(frozen=True)
class QA:
    question: str
    answer: str
    short_answer: str
    mentions: list[Mention]
    # character spans [start, end) of the answer whose tokens decide the answer's course (a chart value
    # answer's stop after the asked bar): training may weight them (--stress-weight); nothing else reads them
    stress: tuple = ()


_FORMATTER = string.Formatter()


def pieces(template: str, **fields: Field) -> list[Piece]:
    """str.format for plain {name} fields, kept as pieces so Names survive nesting."""
    out: list[Piece] = []
    for literal, name, _, _ in _FORMATTER.parse(template):
        out.append(literal)
        if name is not None:
            value = fields[name]
            out.extend(value if isinstance(value, list) else [value])
    return out


def fill(template: str, **fields: Field) -> tuple[str, list[Mention]]:
    """Fill a template; a Mention for every Name, at its character span in the result."""
    out: list[str] = []
    mentions: list[Mention] = []
    length = 0
    for piece in pieces(template, **fields):
        piece_text = piece.text if isinstance(piece, Name) else str(piece)
        if isinstance(piece, Name):
            mentions.append(Mention(length, length + len(piece_text), piece.obj))
        out.append(piece_text)
        length += len(piece_text)
    return "".join(out), mentions


def ask(rng: random.Random, family: dict, task: str, short_answer: str, **fields: Field) -> QA:
    """Pick a question and an answer phrasing from family[task], fill both, pad the answer to MIN_WORDS."""
    question, _ = fill(rng.choice(family[task]["q"]), **fields)
    answer, mentions = fill(rng.choice(family[task]["a"]), **fields)
    for filler in rng.sample(family["pad"], len(family["pad"])):
        if len(answer.split()) >= MIN_WORDS:
            break
        answer += " " + filler
    return QA(question, answer, short_answer, mentions)


def with_stops(qa: QA, objs, pattern: str) -> QA:
    """`qa` with one more stress span per object of `objs`: the characters that `pattern` matches right
    after the object's last mention (where the answer decides whether it goes on or stops)."""
    spans = list(qa.stress)
    for obj in objs:
        end = max(m.end for m in qa.mentions if m.obj == obj)
        after = re.match(pattern, qa.answer[end:])
        if after:
            spans.append((end, end + after.end()))
    return dataclasses.replace(qa, stress=tuple(spans))


def join(items: list[Field], sep: str = ", ", last: str = " and ") -> list[Piece]:
    """English list: ["a", "b", "c"] -> a, b and c, keeping Names intact."""
    out: list[Piece] = []
    for i, item in enumerate(items):
        if i:
            out.append(last if i == len(items) - 1 else sep)
        out.extend(item if isinstance(item, list) else [item])
    return out


def plural(noun: str) -> str:
    return noun + ("es" if noun.endswith(("s", "x", "ch")) else "s")


def count(n: int, noun: str) -> str:
    """'1 shape', '3 shapes'."""
    return f"{n} {noun if n == 1 else plural(noun)}"


TALLY = ("one", "two", "three", "four", "five", "six", "seven", "eight", "nine")


def tally(n: int) -> str:
    """The running count a walk writes after the n-th match: a word, so an answer's first digit is still
    its count."""
    return TALLY[n - 1]


def be(n: int) -> str:
    return "is" if n == 1 else "are"


def article(word: str) -> str:
    return "an" if word[0] in "aeiou" else "a"


# Fillers are appended, in seeded order, until an answer reaches MIN_WORDS.
# They carry no colour, digit or position words, so they never look like a short answer.
SCENE = {
    "pad": [
        "Each shape sits in its own cell of a three by three grid.",
        "No two shapes overlap.",
        "The shapes are drawn in flat, solid colours.",
    ],
    "describe": {
        "q": ["Describe the image.", "What shapes can you see in this picture?",
              "Describe every shape in the image with its colour and position.", "List the shapes in this image."],
        # every shape first, then how many: the count is read off the list
        "a": ["On a {shade} background, the image shows {items}. That makes {count}.",
              "Reading from the top left, there is {items}. There {be} {count} in this picture.",
              "Going row by row from the top, the picture contains {items}. I can see {count} in all."],
    },
    "count": {
        "q": ["How many {what} are there?", "How many {what} can you see in the image?",
              "Count the {what} in this picture."],
        # every shape is walked in reading order and ticked, then the number. A tick restates what is
        # counted ("orange?") and answers it: "no", or the running tally as a word. At step 42,800 a list
        # of only the matching shapes stopped after the first match (every count miss an undercount)
        # while describe, which walks every shape, was 96% right; a walk whose tick had to recall the
        # question first learned "the first shape is one, the rest no" (step 44,736), so the tick now
        # compares two words a few tokens apart
        "a": ["Checking for {what}: {walk}. So there {be} {count}.",
              "Row by row: {walk}. That makes {count}.",
              "Looking for {what}: {walk}. So the answer is {n}."],
    },
    "colour": {
        "q": ["What colour is the {shape}?", "Which colour does the {shape} have?", "Tell me the colour of the {shape}."],
        "a": ["The {shape} {pos} is {colour}. It is a {size} shape. The image contains {total} in total.",
              "It is {colour}. The {size} {shape} sits {pos}, and it is the only {shape} in the picture.",
              "The {shape} is coloured {colour}. You can find this {size} shape {pos}. "
              "The image contains {total} altogether."],
    },
    "spatial": {
        "q": ["What is {relation} the {ref}?", "Which shape is {relation} the {ref}?",
              "Name the shape {relation} the {ref}."],
        # find the named shape first, then name its neighbour: the answer is the last shape named
        "a": ["The {ref} is {ref_pos}, so I look {relation} it: there is {article} {size} {target} {target_pos}.",
              "First I find the {ref}, which sits {ref_pos}. {Relation} it, {target_pos}, is {article} {size} "
              "{target}.",
              "The {ref} sits {ref_pos}. The shape {relation} it is {article} {size} {target}, which sits "
              "{target_pos}. There {be} {total} in the picture."],
    },
    "position": {
        "q": ["Where is the {target}?", "In which part of the image is the {target}?",
              "Where can you find the {target}?"],
        "a": ["The {target} is {pos}. It is a {size} shape, and the image contains {total} in total.",
              "You can find the {size} {target} {pos} of the image. It is one of {total} in the picture.",
              "It is {pos}. The {target} there is {size}, and the picture holds {total} altogether."],
    },
}

OCR = {
    "pad": [
        "The letters are printed in a plain font.",
        "The words are made-up codes, not dictionary words.",
        "Each line of text uses capital letters and digits.",
        "There is nothing else in the image besides the text.",
    ],
    "read": {
        "q": ["What does the text say?", "Read all the text in the image.", "What is written in this image?",
              "Read the text from top to bottom."],
        "a": ["The text reads {text}. There {be} {count} in the image, each on its own line.",
              "Reading from top to bottom, the image says {text}. It holds {count} in total.",
              "It says {text}. I can see {count}, printed on separate lines from top to bottom."],
    },
    "top": {
        "q": ["What is written at the top?", "What does the top line of text say?", "Read the first line of text.",
              "Which word is at the top of the image?"],
        "a": ["The top line says {word}. {rest}", "The first word from the top is {word}. {rest}",
              "At the top of the image it says {word}. {rest}"],
        "rest_one": ["It is the only text in the image.", "No other text appears in the picture."],
        "rest_more": ["Below it you can also read {others}.", "Further down, the image shows {others}."],
    },
    "word_count": {
        "q": ["How many words are written in the image?", "How many words can you see?",
              "Count the words in this picture."],
        "a": ["There {be} {count} in the image: {listed}. Each word is on its own line.",
              "I can see {count}. From top to bottom the text reads {listed}.",
              "The image contains {count}, namely {listed}, written on separate lines."],
    },
}

CHART = {
    "pad": [
        "Each bar has its value written above it.",
        "The labels are written below the bars.",
        "The chart has a horizontal and a vertical axis.",
        "All values are whole numbers between one and nine.",
    ],
    "highest": {
        "q": ["Which bar is the highest?", "Which bar has the largest value?", "Which label has the tallest bar?"],
        "a": ["Bar {label} is the highest, with a value of {value}. The chart has {count}, and from left "
              "to right their values are {values}.",
              "The tallest bar is {label}. It reaches {value}, more than any other bar. "
              "The values from left to right are {values}.",
              "Of the {count} in the chart, {label} has the largest value, {value}. "
              "Reading from the left, the values are {values}."],
    },
    "value": {
        "q": ["What is the value of bar {label}?", "How high is the bar labelled {label}?",
              "What number is shown above bar {label}?"],
        # read the bars from the left up to the asked one, then repeat its value: the answer is the last number.
        # (Listing every bar and then copying the asked value back, or naming its ordinal, failed at step 26,850:
        # the model listed the bars right and copied a neighbour's value, 30% held-out.)
        "a": ["From the left, {upto}. So bar {label} has a value of {value}.",
              "Reading the bars from the left up to {label}: {upto}. Bar {label} has the value {value}.",
              "Bar by bar from the left, {upto}, so the value of {label} is {value}."],
    },
    "describe": {
        "q": ["Describe the chart.", "What does this bar chart show?", "List every bar and its value.",
              "Describe all the bars in the chart."],
        "a": ["This bar chart has {count}. From left to right, {pairs}.",
              "The chart shows {count}: {pairs}.",
              "There {be} {count} in this chart. Reading from the left, {pairs}."],
    },
}

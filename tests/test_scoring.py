"""The evaluation's scorer reads each answer at its slot: gold answers score right on both splits, and
outputs that only restate the short answer elsewhere (the "4" of "4 bars") score wrong."""
import dataclasses
import re

import pytest

from fovea.data import TASKS, eval_seeds, make_sample
from fovea.data.scoring import answer_correct

ALL = [(family, task) for family, tasks in TASKS.items() for task in tasks]


@pytest.mark.parametrize("split", ["train", "shifted"])
@pytest.mark.parametrize("family,task", ALL)
def test_every_gold_answer_scores_right(family, task, split):
    for seed in eval_seeds(40):
        s = make_sample(seed, family, task, split=split)
        assert answer_correct(s, s.answer), (s.question, s.answer)


def _sample(family, task, **want):
    for seed in eval_seeds(400):
        s = make_sample(seed, family, task)
        if all(pred(s) for pred in want.values()):
            return s
    raise AssertionError(f"no {family}/{task} sample with {list(want)}")


def test_a_number_elsewhere_in_the_answer_does_not_score_a_value():
    s = _sample("chart", "value", several=lambda s: len(s.objects) > 1)
    label = s.question.split()[-1].rstrip("?")
    wrong = str((int(s.short_answer) % 9) + 1)
    listing = f"From left to right, the chart shows {label} is {s.short_answer} and Q is {wrong}."
    assert not answer_correct(s, f"{listing} So bar {label} has a value of {wrong}.")
    assert answer_correct(s, f"{listing} So bar {label} has a value of {s.short_answer}.")


def test_spatial_is_the_last_shape_named():
    s = _sample("scene", "spatial")
    ref = s.question.split(" the ")[-1].rstrip("?")
    other = "red circle" if s.short_answer != "red circle" else "blue square"
    assert answer_correct(s, f"The {ref} sits in the centre. Above it is a large {s.short_answer}.")
    assert not answer_correct(s, f"The {s.short_answer} sits in the centre. Above it is a large {other}.")
    assert not answer_correct(s, "Above it is nothing.")


def test_ocr_read_needs_every_word_and_no_extra_one():
    s = _sample("ocr", "read", two=lambda s: len(s.short_answer.split()) >= 2)
    words = s.short_answer.split()
    assert answer_correct(s, f"It says {s.short_answer}. I can see {len(words)} words.")
    assert not answer_correct(s, f"It says {' '.join(words[:-1])}. I can see {len(words)} words.")
    assert not answer_correct(s, f"It says {s.short_answer} A1. I can see {len(words)} words.")
    assert not answer_correct(s, f"It says {s.short_answer[:-1]}. I can see {len(words)} words.")
    # a transcription outside the first sentence is not an answer to "read the text"
    assert not answer_correct(s, f"I can see {len(words)} words. It says {s.short_answer}.")


def test_scene_describe_needs_every_shape_not_just_the_count():
    s = _sample("scene", "describe", several=lambda s: int(s.short_answer) >= 2)
    item = re.search(r"\b(large|small) [a-z]+ [a-z]+ (at|in)\b", s.answer).group(0)
    resized = item.replace("large", "small") if item.startswith("large") else item.replace("small", "large")
    assert not answer_correct(s, s.answer.replace(item, resized, 1))
    assert not answer_correct(s, f"There are {s.short_answer} shapes in this picture.")


def test_chart_describe_needs_the_pairs_in_order_and_no_extra_bar():
    s = _sample("chart", "describe", several=lambda s: " and " in s.short_answer)
    assert answer_correct(s, f"The chart shows bars: {s.short_answer}.")
    assert not answer_correct(s, f"The chart shows bars: Q is 1, {s.short_answer}.")
    first, rest = s.short_answer.split(", ", 1) if ", " in s.short_answer else s.short_answer.split(" and ", 1)
    assert not answer_correct(s, f"The chart shows bars: {rest} and {first}.")


def test_lookups_are_read_in_the_first_sentence():
    s = _sample("scene", "colour")
    assert answer_correct(s, f"It is {s.short_answer}. It is a small shape.")
    other = "red" if s.short_answer != "red" else "blue"
    assert not answer_correct(s, f"It is {other}. Another shape is {s.short_answer}.")


def test_an_unknown_task_is_an_error_not_a_silent_miss():
    s = dataclasses.replace(make_sample(eval_seeds(1)[0], "scene", "colour"), task="nonsense")
    with pytest.raises(ValueError, match="no scoring rule"):
        answer_correct(s, "anything")

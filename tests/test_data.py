"""Properties of the procedural data generator (fovea.data): determinism,
seed ranges, answer wording, object masks, mentions and patch labels, on the training split and on
the layout split's held-out looks (tests/test_layouts.py checks the looks themselves)."""
import dataclasses
import re
import random

import numpy as np
import pytest
from PIL import Image

from fovea.data import (
    EVAL_SEED_START,
    FAMILIES,
    GRID,
    IGNORE,
    IMAGE_SIZE,
    NUM_LABELS,
    SHAPES,
    TASKS,
    eval_seeds,
    iter_corpus_text,
    letterbox,
    make_conversation,
    make_sample,
    save_examples,
    train_seeds,
)
from fovea.data.labels import COLOURS, MIN_COVER
from fovea.data.sample import MAX_WORDS, MIN_STYLE_DISTANCE, MIN_WORDS, PAD_RGB, PATCH, STYLES, box_of, content_rect
from fovea.data.scenes import POSITIONS, RELATIONS
from fovea.data.text import TALLY

SEEDS_PER_TASK = {"train": 200, "layout": 60}  # the layout split's looks: fewer seeds, same properties
ALL_TASKS = [(family, task) for family in FAMILIES for task in TASKS[family]]
# Label kinds that carry supervision in each family; the rest must be all IGNORE.
APPLIES = {"scene": {"colour", "shape"}, "ocr": {"char"}, "chart": {"colour", "char", "bar"}}


@pytest.fixture(scope="module", params=list(SEEDS_PER_TASK))
def samples(request):
    """SEEDS_PER_TASK samples of every (family, task) of a split, generated once for all property tests."""
    split = request.param
    return [make_sample(seed, family, task, split=split) for family, task in ALL_TASKS
            for seed in range(SEEDS_PER_TASK[split])]


def _same(a, b) -> bool:
    return (
        np.array_equal(np.asarray(a.image), np.asarray(b.image))
        and (a.question, a.answer, a.short_answer, a.family, a.task) == (b.question, b.answer, b.short_answer,
                                                                         b.family, b.task)
        and a.mentions == b.mentions
        and [(o.kind, o.label, o.box) for o in a.objects] == [(o.kind, o.label, o.box) for o in b.objects]
        and all(np.array_equal(x.mask, y.mask) for x, y in zip(a.objects, b.objects))
        and all(np.array_equal(a.patch_labels[k], b.patch_labels[k]) for k in NUM_LABELS)
    )


def test_same_seed_gives_identical_sample():
    for seed in list(range(30)) + list(eval_seeds(6)):
        assert _same(make_sample(seed), make_sample(seed))


def test_different_seeds_give_different_samples():
    texts = {make_sample(seed).answer for seed in range(60)}
    assert len(texts) == 60


def test_family_and_task_follow_from_seed_alone():
    for seed in range(30):
        sample = make_sample(seed)
        assert _same(sample, make_sample(seed, sample.family, sample.task))
        assert make_sample(seed, sample.family).task == sample.task


def test_every_family_and_task_is_reachable_from_seed_alone():
    seen = {(s.family, s.task) for s in map(make_sample, range(300))}
    assert seen == set(ALL_TASKS)


def test_train_and_eval_seeds_are_disjoint():
    assert max(train_seeds(1000, start=EVAL_SEED_START - 1000)) < min(eval_seeds(1000))
    assert not set(train_seeds(5000)) & set(eval_seeds(5000))
    with pytest.raises(ValueError):
        train_seeds(10, start=EVAL_SEED_START - 5)


def test_tuning_seeds_are_disjoint_from_training_and_evaluation():
    """Settings are chosen on tuning_seeds, measured on eval_seeds: the two never overlap."""
    from fovea.data import TUNE_SEED_START, tuning_seeds

    biggest_eval = eval_seeds(TUNE_SEED_START - EVAL_SEED_START)
    assert max(biggest_eval) < min(tuning_seeds(1000))
    assert min(tuning_seeds(10)) >= EVAL_SEED_START
    with pytest.raises(ValueError, match="eval_seeds"):
        eval_seeds(TUNE_SEED_START - EVAL_SEED_START + 1)
    with pytest.raises(ValueError, match="tuning_seeds"):
        tuning_seeds(-1)


def test_unknown_family_or_task_is_rejected():
    with pytest.raises(ValueError):
        make_sample(0, "video")
    with pytest.raises(ValueError):
        make_sample(0, "scene", "highest")


def test_image_is_rgb_content_with_long_side_canvas_and_a_training_size(samples):
    for s in samples[::20]:
        assert s.image.mode == "RGB" and max(s.image.size) == IMAGE_SIZE
        assert s.image.size in STYLES["train"].sizes


def test_letterbox_keeps_the_aspect_and_the_content_pixels(samples):
    """The model input is the content pasted unscaled into the canvas: one geometry for input and overlays."""
    for s in samples[::40]:
        canvas = np.asarray(letterbox(s.image))
        x0, y0, x1, y1 = content_rect(s.image.size)
        assert canvas.shape == (IMAGE_SIZE, IMAGE_SIZE, 3)
        assert np.array_equal(canvas[y0:y1, x0:x1], np.asarray(s.image))
        assert (canvas[:y0] == PAD_RGB).all() and (canvas[y1:] == PAD_RGB).all()
        assert (canvas[:, :x0] == PAD_RGB).all() and (canvas[:, x1:] == PAD_RGB).all()
    wide = letterbox(Image.new("RGB", (400, 100), (255, 0, 0)))  # an upload: scaled to fit, never stretched
    red = np.asarray(wide)[..., 0] == 255
    assert red.any(axis=0).sum() == IMAGE_SIZE and red.any(axis=1).sum() == IMAGE_SIZE // 4


def test_shifted_split_uses_rendering_parameters_training_never_sees():
    train, shifted = STYLES["train"], STYLES["shifted"]
    for field in ("sizes", "scene_backgrounds", "font_sizes", "chart_font_sizes", "chart_paper", "paper"):
        assert not set(getattr(train, field)) & set(getattr(shifted, field)), field
    # the generated training colours keep their distance from every shifted colour
    shifted_colours = set(shifted.scene_backgrounds) | set(shifted.chart_paper) | {c for p in shifted.paper for c in p}
    generated = train.scene_backgrounds[7:] + train.chart_paper[3:] + tuple(c for p in train.paper[5:] for c in p)
    assert len(generated) > 50
    for rgb in generated:
        assert min(max(abs(a - b) for a, b in zip(rgb, c)) for c in shifted_colours) >= MIN_STYLE_DISTANCE
    # shifted font sizes lie between training sizes: unseen values inside the training range
    assert min(train.font_sizes) < min(shifted.font_sizes) and max(shifted.font_sizes) < max(train.font_sizes)
    for seed in eval_seeds(12):
        s = make_sample(seed, split="shifted")
        assert s.split == "shifted" and s.image.size in shifted.sizes
    with pytest.raises(ValueError, match="split"):
        make_sample(0, split="test")


def test_conversation_turns_are_distinct_questions_about_one_image():
    from fovea.data.looks import LOOKS

    for seed in range(30):
        conv = make_conversation(seed, 4)
        if conv.look is None:  # the base look: the first turn is make_sample's own question and image
            first = make_sample(seed, conv.family, conv.turns[0][0])
            assert conv.turns[0][1].question == first.question
            assert np.array_equal(np.asarray(conv.image), np.asarray(first.image))
        else:
            assert conv.look in LOOKS[conv.family]["train"]
        questions = [qa.question for _, qa in conv.turns]
        assert len(set(questions)) == len(questions) and 1 <= len(questions) <= 4
        assert all(task in TASKS[conv.family] for task, _ in conv.turns)


def test_short_answer_appears_as_whole_words_in_answer(samples):
    for s in samples:
        assert re.search(rf"(?<!\w){re.escape(s.short_answer)}(?!\w)", s.answer), (s.short_answer, s.answer)


def test_answer_length_is_within_bounds_for_every_task(samples):
    for s in samples:
        assert MIN_WORDS <= len(s.answer.split()) <= MAX_WORDS, (s.task, s.answer)


def test_questions_and_answers_vary_within_a_task(samples):
    for family, task in ALL_TASKS:
        group = [s for s in samples if (s.family, s.task) == (family, task)]
        assert len({s.answer.split()[0] for s in group}) >= 2, (family, task)
        assert len({s.question for s in group}) >= 2, (family, task)


def _facts(obj) -> set[str]:
    """Every string an answer may use to name something about obj."""
    return set(obj.attrs.values())


def test_mentions_are_valid_spans_that_name_their_object(samples):
    for s in samples:
        assert s.mentions, (s.task, s.answer)
        for m in s.mentions:
            assert 0 <= m.start < m.end <= len(s.answer)
            assert 0 <= m.obj < len(s.objects)
            span, obj = s.answer[m.start:m.end], s.objects[m.obj]
            assert span in obj.label or span in _facts(obj), (span, obj.label, obj.attrs)


def test_objects_have_nonempty_masks_inside_their_boxes(samples):
    for s in samples:
        for obj in s.objects:
            assert obj.mask.shape == (IMAGE_SIZE, IMAGE_SIZE) and obj.mask.dtype == bool
            assert obj.mask.any()
            x0, y0, x1, y1 = obj.box
            cx0, cy0, cx1, cy1 = content_rect(s.image.size)
            assert cx0 <= x0 < x1 <= cx1 and cy0 <= y0 < y1 <= cy1  # inside the content, never in the bars
            assert obj.box == box_of(obj.mask)


def test_objects_never_overlap(samples):
    for s in samples:
        total = sum(obj.mask.astype(int) for obj in s.objects)
        assert total.max() == 1


def test_patch_labels_have_grid_shape_and_valid_ids(samples):
    for s in samples:
        assert set(s.patch_labels) == set(NUM_LABELS)
        for kind, labels in s.patch_labels.items():
            assert labels.shape == (GRID, GRID) and labels.dtype == np.int64
            valid = (labels == IGNORE) | ((labels >= 0) & (labels < NUM_LABELS[kind]))
            assert valid.all(), kind
            if kind in APPLIES[s.family]:
                assert (labels > 0).any(), (s.family, kind)
            else:
                assert (labels == IGNORE).all(), (s.family, kind)


def _patch_cover(mask: np.ndarray) -> np.ndarray:
    return mask.reshape(GRID, PATCH, GRID, PATCH).sum(axis=(1, 3))


def test_scene_patch_labels_name_the_object_covering_most_of_the_patch(samples):
    for s in samples:
        if s.family != "scene":
            continue
        cover = np.stack([_patch_cover(obj.mask) for obj in s.objects])  # [objects, GRID, GRID]
        best = cover.argmax(axis=0)
        for (r, c), colour in np.ndenumerate(s.patch_labels["colour"]):
            if cover[:, r, c].max() >= MIN_COVER:
                obj = s.objects[best[r, c]]
                assert colour == COLOURS.index(obj.attrs["colour"])
                assert s.patch_labels["shape"][r, c] == SHAPES.index(obj.attrs["shape"])
            else:
                assert colour == (0 if cover[:, r, c].sum() == 0 else IGNORE)


def test_bar_labels_hold_the_value_of_the_bar_below_them(samples):
    for s in samples:
        if s.family != "chart":
            continue
        for obj in s.objects:
            bar_patches = s.patch_labels["bar"] == int(obj.attrs["value"])
            assert (_patch_cover(obj.mask)[bar_patches] > 0).any() or not bar_patches.any()


def _grid_cell(obj) -> tuple[int, int]:
    return next((r, c) for r, row in enumerate(POSITIONS) for c, name in enumerate(row) if name == obj.attrs["position"])


def test_scene_questions_have_a_unique_answer(samples):
    for s in samples:
        if s.family != "scene":
            continue
        labels = [o.label for o in s.objects]
        if s.task == "colour":
            kinds = [o.attrs["shape"] for o in s.objects]
            asked = [k for k in set(kinds) if re.search(rf"\b{k}\b", s.question)]
            assert len(asked) == 1 and kinds.count(asked[0]) == 1
            assert s.objects[kinds.index(asked[0])].attrs["colour"] == s.short_answer
        elif s.task == "position":
            asked = [lab for lab in set(labels) if lab in s.question]
            assert len(asked) == 1 and labels.count(asked[0]) == 1
            assert s.objects[labels.index(asked[0])].attrs["position"] == s.short_answer
        elif s.task == "spatial":
            ref = next(lab for lab in set(labels) if lab in s.question)
            assert labels.count(ref) == 1
            dr, dc = next((dr, dc) for dr, dc, wording in RELATIONS if wording in s.question)
            r, c = _grid_cell(s.objects[labels.index(ref)])
            target = [o for o in s.objects if _grid_cell(o) == (r + dr, c + dc)]
            assert len(target) == 1 and target[0].label == s.short_answer
        elif s.task == "count":
            named = [w for w in COLOURS[1:] + SHAPES[1:] if re.search(rf"\b{w}(e?s)?\b", s.question)]
            matching = [o for o in s.objects if all(w in (o.attrs["colour"], o.attrs["shape"]) for w in named)]
            assert str(len(matching)) == s.short_answer, (s.question, s.answer)
        elif s.task == "describe":
            assert s.short_answer == str(len(s.objects))
            assert all(lab in s.answer for lab in labels)


def test_count_questions_draw_their_answer_evenly_among_the_counts_a_layout_offers():
    from collections import Counter

    from fovea.data import scenes

    answers = Counter(make_sample(seed, "scene", "count").short_answer for seed in eval_seeds(120))
    # uniform over the questions, most of them named a colour or kind that occurs once (71% answered 1)
    assert answers["1"] / 120 < 0.6 and sum(answers[n] for n in "23") >= 24, answers
    layout = scenes.sample_layout(random.Random(3))
    choices = scenes.options(layout, "count")
    rng, drawn = random.Random(0), Counter()
    for _ in range(600):
        drawn[len(scenes._matching(layout, scenes.pick(layout, "count", choices, rng)))] += 1
    offered = {len(scenes._matching(layout, c)) for c in choices}
    assert set(drawn) == offered and min(drawn.values()) > 600 / len(offered) / 2, drawn


def test_ocr_answers_read_the_words_top_to_bottom(samples):
    for s in samples:
        if s.family != "ocr":
            continue
        words = [o.label for o in s.objects]
        assert [o.box[1] for o in s.objects] == sorted(o.box[1] for o in s.objects)
        assert all(re.fullmatch(r"[A-HJ-NP-Z0-9]{3,6}", w) for w in words)  # no I or O: they read as 1 and 0
        expected = {"read": " ".join(words), "top": words[0], "word_count": str(len(words))}[s.task]
        assert s.short_answer == expected


def test_chart_questions_have_a_unique_answer(samples):
    for s in samples:
        if s.family != "chart":
            continue
        values = [int(o.attrs["value"]) for o in s.objects]
        assert 3 <= len(values) <= 5 and all(1 <= v <= 9 for v in values)
        assert len({o.label for o in s.objects}) == len(values)
        if s.task == "highest":
            assert values.count(max(values)) == 1
            assert s.short_answer == s.objects[values.index(max(values))].label
        elif s.task == "value":
            asked = [o for o in s.objects if re.search(rf"\b{o.label}\?", s.question)]
            assert len(asked) == 1 and s.short_answer == asked[0].attrs["value"]


def test_corpus_text_matches_the_samples():
    for seed, text in zip(range(40), iter_corpus_text(40)):
        sample = make_sample(seed)
        assert text == f"{sample.question}\n{sample.answer}"


def test_save_examples_writes_two_pngs_per_family(tmp_path):
    paths = save_examples(tmp_path)
    assert len(paths) == 2 * len(FAMILIES)
    assert all(p.exists() and p.suffix == ".png" for p in paths)


def test_mention_share_counts_the_answer_tokens_that_name_the_image():
    from fovea.models.bundled import ASSETS, load_tokenizer
    from fovea.training.packing import mention_share

    tok = load_tokenizer(ASSETS / "target")
    value = [make_sample(seed, "chart", "value") for seed in eval_seeds(10)]
    share = mention_share(tok, value)
    assert 0.2 < share < 0.6        # the listed pairs and the answer are mentions, the template words not
    unnamed = [dataclasses.replace(s, mentions=[]) for s in value]
    assert mention_share(tok, unnamed) == 0.0


def test_chart_drills_list_the_bars_in_the_question_and_stop_at_the_asked_one():
    """A text-only chart-value drill (charts.drill) is seeded, names every bar in its question, and
    answers like a chart value: the bars from the left up to the asked one, commas only, then its value."""
    from fovea.data.charts import drill

    assert drill(5) == drill(5) and drill(5) != drill(6)
    for seed in range(40):
        qa = drill(seed)
        listed = qa.question.split(" are ", 1)[1].split(". ", 1)[0]
        bars = [pair.rsplit(" ", 1) for pair in listed.replace(" and ", ", ").split(", ")]
        asked = next(label for label, _ in bars if qa.question.endswith((f" {label}?", f" {label}.")))
        upto = bars[:[label for label, _ in bars].index(asked) + 1]
        reading = ", ".join(f"{label} is {value}" for label, value in upto)
        assert reading in qa.answer and " and " not in qa.answer and qa.short_answer == upto[-1][1]
        assert qa.answer.rstrip(".").endswith(qa.short_answer) and not qa.mentions
        (start, end), = qa.stress           # the stop: right after the asked bar's pair
        assert qa.answer[:start].endswith(reading) and qa.answer[start:end] in (", so", ". So", ". Bar")


def test_scene_list_answers_mark_each_go_on_or_stop_decision_as_stress():
    """Describe answers stress the words right after every listed shape: ', a' / ' and a' between
    shapes, and the stop (', so', '. That', ...) after the last one."""
    from fovea.data import make_conversation

    for seed in range(20):
        qa = make_conversation(seed, 1, "scene", "describe").turns[0][1]
        words = [qa.answer[a:b] for a, b in qa.stress]
        assert len(words) == int(qa.short_answer) >= 1
        assert all(w in (", a", ", an", " and a", " and an") for w in words[:-1])
        assert words[-1] in (", so", ". That", ". So", ". There", ". I")
        for (a, _), m in zip(qa.stress, sorted({m.obj: m for m in qa.mentions}.values(), key=lambda m: m.end)):
            assert a == max(x.end for x in qa.mentions if x.obj == m.obj)


def test_count_answers_walk_every_shape_and_tick_it():
    """A count answer names every shape in reading order, each followed by what is counted ("orange?",
    for a kind or colour question) and 'no' or the running tally as a word (stressed with the ';' / '.'
    that goes on or stops), and only then the count as a digit: the first number of the answer, where
    the scorer reads it."""
    from fovea.data import Sample, make_conversation
    from fovea.data.scoring import answer_correct

    for seed in range(40):
        conv = make_conversation(seed, 1, "scene", "count")  # it keeps the stress; half of them in training looks
        qa = conv.turns[0][1]
        if conv.look is None:
            assert qa.answer == make_sample(seed, "scene", "count").answer
        sample = Sample(conv.image, qa.question, qa.answer, "scene", "count", qa.short_answer, conv.objects,
                        qa.mentions, conv.patch_labels)
        words = [qa.answer[a:b] for a, b in qa.stress]
        assert len(words) == len(sample.objects)                   # every shape is ticked, matching or not
        named = [o.label for o in sample.objects]
        assert [m for m in named if m in qa.answer] == named
        ticks = [w[2:-1].split()[-1] for w in words]
        asked = {w[2:-1].split()[0] for w in words if "?" in w}
        named = [w for w in COLOURS[1:] + SHAPES[1:] if re.search(rf"\b{w}(e?s)?\b", sample.question)]
        assert asked == ({f"{named[0]}?"} if named else set())        # a kind or colour tick restates it
        tallies = [t for t in ticks if t != "no"]
        assert tallies == list(TALLY[:int(sample.short_answer)])
        assert all(w.endswith(";") for w in words[:-1]) and words[-1].endswith(".")
        assert re.search(r"\d+", qa.answer).group(0) == sample.short_answer
        assert answer_correct(sample, qa.answer)


def test_ocr_read_answers_mark_each_word_end_as_stress():
    """An OCR read answer stresses the character right after every word: the space before the next
    word, or the stop after the last one (where a read doubles or drops a last letter)."""
    from fovea.data import make_conversation

    for seed in range(20):
        qa = make_conversation(seed, 1, "ocr", "read").turns[0][1]
        words = qa.short_answer.split()
        assert len(qa.stress) == len(words)
        for (a, b), word in zip(qa.stress, words):
            assert qa.answer[:a].endswith(word) and b == a + 1 and qa.answer[a] in " .,"
        assert [qa.answer[a] for a, _ in qa.stress][:-1] == [" "] * (len(words) - 1)

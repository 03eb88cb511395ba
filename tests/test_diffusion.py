"""The pieces of fovea.diffusion that need no model: each task's candidate-span parser against the
scorer, and the masked-diffusion objective's masking rate and 1/t weighting."""
import math
import random

import pytest
import torch

from fovea.data import make_sample, tuning_seeds
from fovea.data.scoring import answer_correct
from fovea.diffusion import TokenText, answer_canvas, candidate_span, char_span, diffusion_loss, mask_canvas
from fovea.models.bundled import DEFAULT_TARGET_DIR, load_tokenizer
from fovea.training.target import ALL_TASKS

TASKS = [f"{f}/{t}" for f, t in ALL_TASKS]
LENGTH = 96


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer(DEFAULT_TARGET_DIR)


@pytest.fixture(scope="module")
def token_text(tok):
    return TokenText(tok)


def gold_canvas(tok, sample) -> list[int]:
    return answer_canvas(tok(" " + sample.answer, add_special_tokens=False)["input_ids"], LENGTH, tok.eos_token_id)


def decoded(tok, canvas: list[int]) -> str:
    end = canvas.index(tok.eos_token_id) if tok.eos_token_id in canvas else len(canvas)
    return tok.decode(canvas[:end], skip_special_tokens=True).strip()


@pytest.mark.parametrize("task", TASKS)
def test_every_task_parser_finds_the_scored_answer_in_its_span(tok, token_text, task):
    for seed in tuning_seeds(6):
        sample = make_sample(seed, *task.split("/"))
        canvas = gold_canvas(tok, sample)
        span = candidate_span(task, canvas, token_text)
        assert span is not None and 0 <= span[0] < span[1] <= LENGTH
        assert sample.short_answer in tok.decode(canvas[span[0]:span[1]], skip_special_tokens=True)
        assert answer_correct(sample, decoded(tok, canvas))


@pytest.mark.parametrize("task", TASKS)
def test_tokens_outside_the_span_never_change_the_score(tok, token_text, task):
    """The span is every token the scorer reads: rewriting the others (with digits, labels, pairs and
    full stops) leaves a right answer right."""
    pool = tok(" 7 red circle at top left. A is 3 The 12 KOTA", add_special_tokens=False)["input_ids"]
    rng = random.Random(task)
    for seed in tuning_seeds(6):
        sample = make_sample(seed, *task.split("/"))
        canvas = gold_canvas(tok, sample)
        lo, hi = candidate_span(task, canvas, token_text)
        outside = [i for i in range(LENGTH) if not lo <= i < hi]
        for _ in range(5):
            noisy = list(canvas)
            for i in rng.sample(outside, min(len(outside), 6)):
                noisy[i] = rng.choice(pool)
            assert answer_correct(sample, decoded(tok, noisy)), (task, decoded(tok, noisy))


def test_a_missing_slot_gives_no_span():
    assert char_span("scene/count", " Looking for red shapes: none yet") is None
    assert char_span("chart/value", " From the left, bar") is None
    assert char_span("scene/spatial", " First I find the shape") is None
    assert char_span("scene/colour", " The star is red. It") == (1, 17)
    with pytest.raises(ValueError):
        char_span("scene/nothing", "text")


@pytest.mark.parametrize("task, early, later", [
    ("scene/colour", " The circle in the bottom left corner is. It is red.", " The circle is red. It"),
    ("scene/position", " The red star is. It is at the top left.", " It is top left. The"),
    ("ocr/top", " The top line says. Below it reads KOTA.", " The top line says 4821. Below"),
    ("ocr/read", " The text reads. It holds KOTA.", " It says KOTA 12B. I"),
    ("chart/highest", " Of the 4 bars in the chart. Bar K", " Of the 4 bars in the chart, KX has the largest"),
])
def test_a_first_sentence_is_a_candidate_only_once_it_holds_a_value_of_the_slots_kind(task, early, later):
    """A sentence that ends before its answer is no span, so CVC cannot stop on it (the shipped model's
    early argmax "The circle in the bottom left corner is.." did); the digits of "4 bars" are no chart
    label. Once the value is there, the span is the first sentence (or all of it, unfinished)."""
    assert char_span(task, early) is None
    start, end = char_span(task, later)
    assert start == 1 and later[start:end].rstrip(".").strip() == later.split(". ")[0].strip()


def test_a_canvas_is_the_answer_then_eos_up_to_its_length():
    assert answer_canvas([7, 8, 9], 6, 2) == [7, 8, 9, 2, 2, 2]
    assert answer_canvas(list(range(10, 20)), 6, 2) == [10, 11, 12, 13, 14, 2]


def test_masking_rate_of_each_row_is_its_drawn_t():
    canvas = torch.randint(5, 100, (64, 4000))
    noisy, masked, p = mask_canvas(canvas, 4, torch.Generator().manual_seed(0))
    assert ((p > 0) & (p <= 1)).all()
    assert (masked.float().mean(1) - p).abs().max() < 0.03           # binomial spread at L = 4000
    assert (noisy[masked] == 4).all() and (noisy[~masked] == canvas[~masked]).all()
    assert abs(float(p.mean()) - 0.5) < 0.1                            # t ~ U(0, 1)


def test_loss_is_masked_cross_entropy_weighted_by_one_over_t():
    b, length, vocab = 3, 10, 16
    canvas = torch.randint(0, vocab, (b, length))
    masked = torch.rand(b, length) < 0.5
    p = torch.tensor([0.1, 0.5, 1.0])
    logits = torch.zeros(b, length, vocab)                             # uniform: CE = log V everywhere
    expected = math.log(vocab) * float((masked / p[:, None]).sum()) / (b * length)
    assert diffusion_loss(logits, canvas, masked, p).item() == pytest.approx(expected, rel=1e-5)
    garbage = logits.clone()
    garbage[~masked] = torch.randn(int((~masked).sum()), vocab) * 10   # unmasked positions never count
    assert diffusion_loss(garbage, canvas, masked, p).item() == pytest.approx(expected, rel=1e-5)


def test_stress_and_mention_weights_scale_only_their_canvas_tokens(tok):
    """--stress-weight / --mention-weight: the target recipe's token weights on the canvas (a chart value
    walk's stop, the mentioned labels and values); 1 elsewhere, and 1, 1 leaves the plain bound."""
    from types import SimpleNamespace

    from fovea.diffusion.model import CanvasConfig
    from fovea.training.diffusion import canvas_weights

    model = SimpleNamespace(tokenizer=tok, canvas=CanvasConfig(96, 4))
    s = make_sample(2, "chart", "value")
    assert s.stress                                                     # the walk's stop is marked
    w = canvas_weights([s], model, stress_weight=6.0, mention_weight=3.0)[0]
    ids = tok(" " + s.answer, add_special_tokens=False)["input_ids"]
    text = {float(v): "".join(tok.decode([t]) for t, x in zip(ids, w) if float(x) == v) for v in (6.0, 3.0)}
    assert text[6.0].replace(" ", "") == ",so"                          # the stop, and only it, at 6
    assert all(part in text[3.0] for part in s.short_answer.split())    # the asked bar's value is a mention
    assert (w[len(ids):] == 1).all()                                    # EOS padding keeps weight 1
    assert (canvas_weights([s], model)[0] == 1).all()
    # the loss multiplies each masked position's term by its weight
    b, length, vocab = 1, 96, 16
    canvas, masked, p = torch.randint(0, vocab, (b, length)), torch.ones(b, length, dtype=torch.bool), torch.ones(b)
    logits = torch.zeros(b, length, vocab)
    plain = diffusion_loss(logits, canvas, masked, p).item()
    assert diffusion_loss(logits, canvas, masked, p, w[None]).item() == pytest.approx(plain * float(w.mean()), rel=1e-5)


def test_prefix_rows_are_masked_as_blocks_of_one_decode_them():
    """--prefix-share: a share of rows gets a clean prefix of k answer tokens (k in 0..n, the first EOS
    included) and the rest masked at p = 1; share 0 leaves mask_canvas's rows and the generator alone."""
    from fovea.diffusion.objective import mask_prefix_rows

    eos, mask_id, length = 2, 4, 12
    canvas = torch.tensor([[7, 8, 9, 10, 11] + [eos] * 7] * 400)
    gen = torch.Generator().manual_seed(0)
    iid = mask_canvas(canvas, mask_id, gen)
    state = gen.get_state()
    assert all(torch.equal(a, b) for a, b in zip(mask_prefix_rows(canvas, *iid, mask_id, eos, 0.0, gen), iid))
    assert torch.equal(gen.get_state(), state)
    noisy, masked, p = mask_prefix_rows(canvas, *iid, mask_id, eos, 0.5, gen)
    prefix = p == 1.0
    assert 150 < int(prefix.sum()) < 250
    for row in masked[prefix]:
        k = int((~row).sum())
        assert row[k:].all() and not row[:k].any() and 0 <= k <= 5     # clean prefix, masked suffix
    assert {int((~row).sum()) for row in masked[prefix]} == set(range(6))   # every k, the first EOS too
    assert torch.equal(noisy, canvas.masked_fill(masked, mask_id))
    assert torch.equal(masked[~prefix], iid[1][~prefix]) and torch.equal(p[~prefix], iid[2][~prefix])

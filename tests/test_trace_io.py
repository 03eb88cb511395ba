"""Trace files: a decoded request written as schema-versioned JSON reads back to the same records
(trees, verdicts, retrievals, top tokens, timings); every kind of bad file gets one sentence."""
import json

import pytest

from fovea.methods import METHODS
from fovea.config import FoveaConfig
from fovea.trace_io import (SCHEMA, VERSION, TraceFile, TraceFormatError, display_image, dump_trace, load_trace,
                            token_ids)


@pytest.fixture(scope="module")
def trace(tiny_pipeline):
    pipe = tiny_pipeline
    image, question = pipe.random_example("chart", 11)
    cfg = FoveaConfig().replace(decoding={"max_new_tokens": 8}, tree=dict(depth=3, top_k=2, total_tokens=6))
    runs = {m: pipe.generate(image, question, cfg, METHODS[m]) for m in ("fovea", "autoregressive")}
    ids = sorted(token_ids(runs))
    vocab = dict(zip(ids, pipe.token_strings(ids)))
    return TraceFile(question, image, pipe.memory_grid, pipe.image_size, vocab, runs, {"tree": {"depth": 3}},
                     {"repeats": 1})


def test_trace_round_trips_through_json_text(trace):
    text = json.dumps(dump_trace(trace))
    back = load_trace(text)
    assert json.loads(text)["schema"] == SCHEMA and json.loads(text)["version"] == VERSION
    assert back.question == trace.question and back.memory_grid == tuple(trace.memory_grid)
    assert back.vocab == trace.vocab and back.config == trace.config and back.timing == trace.timing
    assert back.image.size == display_image(trace.image).size
    for name, run in trace.runs.items():
        got = back.runs[name]
        assert (got.tokens, got.text, got.accept_lengths, got.finish_reason) == \
               (run.tokens, run.text, run.accept_lengths, run.finish_reason)
        assert got.wall_s == run.wall_s and len(got.iterations) == len(run.iterations)
    a, b = trace.runs["fovea"].iterations[0], back.runs["fovea"].iterations[0]
    assert (a.tokens, a.parents, a.depths, a.accepted, a.emitted, a.bonus_token) == \
           (b.tokens, b.parents, b.depths, b.accepted, b.emitted, b.bonus_token)
    assert a.scores == pytest.approx(b.scores) and dict(a.retrieval) == b.retrieval
    assert b.retrieval[0].top_after and len(b.retrieval[0].top_after) == 5


def test_display_image_keeps_aspect_and_caps_the_long_side():
    from PIL import Image
    assert display_image(Image.new("RGB", (2000, 500))).size == (512, 128)
    assert display_image(Image.new("RGB", (300, 200))).size == (300, 200)


def _broken(trace, edit):
    data = dump_trace(trace)
    edit(data)
    return json.dumps(data)


BAD = {
    "not json": (lambda t: "{not json", "not valid JSON"),
    "other json": (lambda t: json.dumps({"hello": 1}), "not a FOVEA trace"),
    "a list": (lambda t: "[1, 2]", "not a FOVEA trace"),
    "newer version": (lambda t: _broken(t, lambda d: d.update(version=99)), "this app reads version 1"),
    "missing runs": (lambda t: _broken(t, lambda d: d.pop("runs")), "missing field 'runs'"),
    "bad image": (lambda t: _broken(t, lambda d: d.update(image_png="!!notbase64")), "damaged in the image"),
    "parent out of range": (lambda t: _broken(t, lambda d: d["runs"]["fovea"]["rounds"][0]["parents"].__setitem__(1, 5)),
                            "damaged in run 'fovea'"),
    "no vocab entry": (lambda t: _broken(t, lambda d: d.update(vocab={})), "no display text for token ids"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_a_bad_trace_file_gets_one_sentence(trace, case):
    make, phrase = BAD[case]
    with pytest.raises(TraceFormatError, match=phrase) as err:
        load_trace(make(trace))
    assert "\n" not in str(err.value)

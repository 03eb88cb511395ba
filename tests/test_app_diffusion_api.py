"""API test of the diffusion view: the app launched in-process on the tiny random pipeline and a tiny
random diffusion model steered toward one chart question's gold answer (tests/conftest.py), driven
with gradio_client through /run_diffusion. A run shows the recorded trajectory first, then the timed
speedups against the full schedule and the autoregressive target, which the headline, the table and
the JSON give alike; bad inputs get the app's sentence. (Without a diffusion model: test_app_api.)"""
import re

import pytest
from gradio_client import Client, handle_file
from gradio_client.exceptions import AppError

from app.ui import build_demo, serve_in_background
from app.views import DIFFUSION_OUTPUTS
from fovea.data import make_sample, tuning_seeds
from fovea.diffusion.config import FROZEN_BLOCK_LENGTH, FROZEN_LATCH

OUT = {name: i for i, name in enumerate(DIFFUSION_OUTPUTS)}
SAMPLE = make_sample(tuning_seeds(1)[0], "chart", "value")
# steered hard enough (top-1 ~0.998) that BWEC's frozen tau_b holds on every block; CVC then fires once
# the span has held the frozen stable_steps; each step before it commits as usual: BWEC one block a step
# on blocks longer than 1, the schedule one position a step on blocks of 1
STABLE = FROZEN_LATCH.stable_steps
EARLY_RULE = "bwec" if FROZEN_BLOCK_LENGTH > 1 else "schedule"
BWEC_STEPS = list(range(1, STABLE)) if FROZEN_BLOCK_LENGTH > 1 else []
# a chart/value question steered toward an answer with no number: its slot never appears, so CVC never
# fires and, on blocks of 4, BWEC commits each of the 11 non-final blocks in one step; the final block
# (positions 44-47) is the schedule's, one token a step
NO_SLOT = make_sample(tuning_seeds(2)[1], "chart", "value")
NO_SLOT_ANSWER = "The bars of this chart carry no values."


@pytest.fixture(scope="module")
def image_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("diffusion") / "chart.png"
    SAMPLE.image.save(path)
    return path


@pytest.fixture(scope="module")
def app_url(tiny_pipeline, steered_diffusion):
    assert NO_SLOT.question != SAMPLE.question
    steered = steered_diffusion({SAMPLE.question: SAMPLE.answer, NO_SLOT.question: NO_SLOT_ANSWER}, strength=16.0)
    demo = build_demo(tiny_pipeline, diffusion=steered)
    url = serve_in_background(demo)
    yield url
    demo.close()


@pytest.fixture(scope="module")
def client(app_url):
    return Client(app_url, analytics_enabled=False, verbose=False, download_files=False)


def run(client, image, question=SAMPLE.question, **kw):
    job = client.submit(handle_file(str(image)), question, **kw, api_name="/run_diffusion")
    final = job.result(timeout=180)
    return job.outputs(), final


def test_a_diffusion_run_shows_the_trajectory_then_the_timed_speedups(client, image_path):
    outputs, final = run(client, image_path, decoding="latch", repeats=2)
    assert outputs[0][OUT["diffusion_summary"]] is None and "recorded decode" in outputs[0][OUT["diffusion_metrics"]]
    # the trajectory is on screen before the timing starts
    timing = [i for i, o in enumerate(outputs) if "timing run" in str(o[OUT["diffusion_metrics"]])]
    assert len(timing) == 2 and any("fv-drow" in str(o[OUT["diffusion_grid"]]) for o in outputs[:timing[0]])
    summary = final[OUT["diffusion_summary"]]
    # steered toward the gold answer: BWEC commits blocks 0, 1, ... at steps 1, 2, ..., CVC stops at step STABLE (of 48)
    assert summary["latch"]["steps"] == STABLE and summary["latch"]["stopped_by"] == "cvc"
    assert summary["early_exit_step"] == STABLE and summary["bwec_steps"] == BWEC_STEPS
    assert summary["block_length"] == FROZEN_BLOCK_LENGTH
    assert summary["grid_steps"] == STABLE
    assert summary["full"]["steps"] == 48 and summary["latch"]["answer"] == summary["full"]["answer"] == SAMPLE.answer
    assert summary["task"] == "chart/value" and summary["timing"]["repeats"] == 2
    assert summary["autoregressive"]["tokens_per_s"] > 0 and summary["speedup_vs_full"] > 1
    # the headline and the table give the JSON's timed medians
    metrics = final[OUT["diffusion_metrics"]]
    head = dict(re.findall(r'data-versus="(\w+)" data-speedup="([\d.]+)"', metrics))
    assert head == {"full": f'{summary["speedup_vs_full"]:.2f}', "autoregressive": f'{summary["speedup_vs_autoregressive"]:.2f}'}
    assert "median of 2 interleaved timed runs" in metrics and f'{summary["speedup_vs_full"]:.2f}× (' in metrics
    grid = final[OUT["diffusion_grid"]]
    assert re.findall(r'data-step="(\d+)" data-rule="(\w+)"', grid) == [
        *((str(i), EARLY_RULE) for i in range(1, STABLE)), (str(STABLE), "cvc")]
    assert f"CVC fired at step {STABLE}</b> of the full schedule's 48" in final[OUT["diffusion_stop"]]
    assert "same as the full schedule's" in final[OUT["diffusion_stop"]]


def test_a_block_length_puts_every_decoding_of_the_run_on_those_blocks(client, image_path):
    _, final = run(client, image_path, question=NO_SLOT.question, decoding="latch", repeats=1, block_length=4)
    summary = final[OUT["diffusion_summary"]]
    assert summary["block_length"] == 4 and summary["task"] == "chart/value"
    assert summary["latch"]["answer"] == NO_SLOT_ANSWER and summary["latch"]["stopped_by"] == "schedule"
    assert summary["bwec_steps"] == list(range(1, 12)) and summary["latch"]["steps"] == 11 + 4
    assert summary["early_exit_step"] is None and summary["full"]["steps"] == 48
    rules = re.findall(r'data-step="\d+" data-rule="(\w+)"', final[OUT["diffusion_grid"]])
    assert rules == ["bwec"] * 11 + ["schedule"] * 4
    stop = final[OUT["diffusion_stop"]]
    assert "BWEC committed block 0 at step 1 (4 positions at once)" in stop
    assert "never acts on the final block (positions 44–47)" in stop and "slot never appeared" in stop


@pytest.mark.parametrize("decoding,stopped_by", [("full", "schedule"), ("gate", "gate"), ("latch_no_bwec", "cvc")])
def test_every_diffusion_decoding_runs_and_is_timed_against_both_references(client, image_path, decoding, stopped_by):
    _, final = run(client, image_path, decoding=decoding, repeats=1)
    summary = final[OUT["diffusion_summary"]]
    assert summary["decoding"] == decoding and summary[decoding]["stopped_by"] == stopped_by
    assert summary["speedup_vs_autoregressive"] > 0
    assert summary["speedup_vs_full"] == 1.0 if decoding == "full" else summary["speedup_vs_full"] > 0
    assert "one timed run" in final[OUT["diffusion_metrics"]]


def test_a_question_outside_the_world_decodes_without_cvc(client, image_path):
    _, final = run(client, image_path, question="Tell me a joke.", decoding="latch", repeats=1)
    summary = final[OUT["diffusion_summary"]]
    assert summary["task"] is None and summary["latch"]["stopped_by"] == "schedule" and summary["early_exit_step"] is None
    assert "no parser for its answer" in final[OUT["diffusion_stop"]]


@pytest.mark.parametrize("question,decoding,block,message", [
    ("", "latch", 0, "Please type a question about the image."),
    (SAMPLE.question, "fastest", 0, "Choose a diffusion decoding"),
    (SAMPLE.question, "latch", 3, "Choose a block length of 1, 2, 4, 8, 16, 32"),
])
def test_bad_diffusion_inputs_get_the_apps_sentence(client, image_path, question, decoding, block, message):
    with pytest.raises(AppError, match=message):
        client.predict(handle_file(str(image_path)), question, decoding, 1, block, api_name="/run_diffusion")
    _, final = run(client, image_path, decoding="latch", repeats=1)             # the next request still works
    assert final[OUT["diffusion_summary"]]["latch"]["stopped_by"] == "cvc"

"""The shipped diffusion model (assets/diffusion) and LATCH's frozen set: the set in
fovea/diffusion/config.py is the one the committed tuning chose, and on the shipped model LATCH stops
through CVC in far fewer steps than the full schedule with the full schedule's answer.

Runs on the committed assets, as the app's diffusion view does.
"""
import json

import pytest

from fovea.data import eval_seeds, make_sample
from fovea.data.scoring import answer_correct
from fovea.diffusion import DEFAULT_DIFFUSION_DIR, DiffusionDecodeConfig, diffusion_generate, load_diffusion
from fovea.diffusion.config import FROZEN_BLOCK_LENGTH, FROZEN_GATE_THRESHOLD, FROZEN_LATCH
from fovea.models.bundled import ASSETS

TUNE = ASSETS / "results" / "diffusion_bench" / "tune.json"


def test_the_frozen_set_is_the_committed_tunings_choice():
    tune = json.loads(TUNE.read_text())
    assert tune["seeds"] == "tuning_seeds" and tune["block_length"] == FROZEN_BLOCK_LENGTH
    assert (tune["chosen"]["tau_c"], tune["chosen"]["stable_steps"]) == (FROZEN_LATCH.tau_c, FROZEN_LATCH.stable_steps)
    assert tune["chosen_tau_b"] == FROZEN_LATCH.tau_b and FROZEN_LATCH.cvc and FROZEN_LATCH.bwec
    assert tune["chosen_gate"] == FROZEN_GATE_THRESHOLD


@pytest.fixture(scope="module")
def model():
    return load_diffusion(DEFAULT_DIFFUSION_DIR)


@pytest.mark.parametrize("task", ["scene/position", "ocr/word_count"])
def test_latch_stops_early_with_the_full_schedules_answer_on_the_shipped_model(model, task):
    assert model.canvas.length == 96
    s = make_sample(eval_seeds(1)[0], *task.split("/"))
    full = diffusion_generate(model, s.image, s.question, DiffusionDecodeConfig.from_name("full"), task=task)
    latch = diffusion_generate(model, s.image, s.question, DiffusionDecodeConfig.from_name("latch"), task=task)
    assert full.nfe == model.canvas.length and answer_correct(s, full.text), full.text
    assert latch.stopped_by == "cvc" and latch.nfe * 3 <= full.nfe and answer_correct(s, latch.text), latch.text

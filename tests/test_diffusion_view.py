"""The diffusion view's renderers (app.diffusion_view) on a tiny random diffusion model: the step x
position grid has a row per denoising step and a cell per canvas position, shaded by the trace's
confidence, with the candidate span outlined, each step's commits marked and BWEC's and CVC's steps
labelled; the stop sentence and the speed table say what the trace and the timings say; the missing
model notice names the command that trains one. No UI is launched."""
import re
import subprocess
import sys
from html.parser import HTMLParser

import pytest

from app import diffusion_view as dv
from app.timing import Timings
from app.views import DIFFUSION_FAMILY, FOVEA_FAMILY, family_visibility
from fovea.data import TASKS, eval_seeds, make_sample, tuning_seeds
from fovea.diffusion import (DiffusionDecodeConfig, LatchConfig, ScheduleConfig, diffusion_generate,
                             question_task, tiny_random)

LENGTH, BLOCK = 24, 8


class Grid(HTMLParser):
    """The rows of a trajectory grid: each row's attributes and its cells (classes, style, title, text)."""

    def __init__(self, markup: str):
        super().__init__()
        self.rows, self._cell = [], None
        self.feed(markup)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        classes = (attrs.get("class") or "").split()
        if "fv-drow" in classes and "fv-dhead" not in classes:
            self.rows.append({"attrs": attrs, "cells": [], "label": ""})
        elif "fv-dc" in classes and self.rows:
            self._cell = {"classes": set(classes), "style": attrs.get("style", ""), "title": attrs["title"], "text": ""}
            self.rows[-1]["cells"].append(self._cell)
        elif "fv-dlabel" in classes and self.rows:
            self._cell = self.rows[-1]

    def handle_endtag(self, tag):
        if tag == "span":
            self._cell = None

    def handle_data(self, data):
        if isinstance(self._cell, dict) and "classes" in self._cell:
            self._cell["text"] += data
        elif self._cell is not None:
            self._cell["label"] += data


@pytest.fixture(scope="module")
def model():
    return tiny_random(length=LENGTH)


@pytest.fixture(scope="module")
def sample():
    return make_sample(tuning_seeds(1)[0], "scene", "colour")


def config(**latch) -> DiffusionDecodeConfig:
    return DiffusionDecodeConfig("test", ScheduleConfig(block_length=BLOCK), latch=LatchConfig(**latch))


def grid_of(model, result) -> Grid:
    return Grid(dv.trajectory_html(result.steps, model.token_text.pieces, model.eos_id, BLOCK))


def test_every_world_question_names_its_task_and_a_free_question_none():
    for family, tasks in TASKS.items():
        for task in tasks:
            for seed in [*eval_seeds(8), *tuning_seeds(8)]:
                assert question_task(make_sample(seed, family, task).question) == f"{family}/{task}"
    assert question_task("what is written at the top") == "ocr/top"            # not scene/spatial's template
    assert question_task("  What colour is the red square  ") == "scene/colour"
    assert question_task("Tell me a joke.") is None and question_task("") is None


def test_the_grid_has_a_row_per_step_and_a_cell_per_position_shaded_by_confidence(model, sample):
    result = diffusion_generate(model, sample.image, sample.question, config(), task="scene/colour", record=True)
    grid = grid_of(model, result)
    assert len(grid.rows) == result.nfe == LENGTH
    for st, row in zip(result.steps, grid.rows):
        assert row["attrs"]["data-step"] == str(st.step + 1) and row["attrs"]["data-rule"] == "schedule"
        assert len(row["cells"]) == LENGTH
        for p, cell in enumerate(row["cells"]):
            assert f"background:{dv.shade(st.confidence[p])}" in cell["style"]
            assert ("fv-dm" in cell["classes"]) == (not st.committed[p])         # italic: still masked
            assert ("fv-dblk" in cell["classes"]) == (p > 0 and p % BLOCK == 0)
            assert f"{st.confidence[p]:.2f}" in cell["title"]
    # the full schedule commits one token a step: one marked cell per row, each position once
    new = [[p for p, c in enumerate(row["cells"]) if "fv-dnew" in c["classes"]] for row in grid.rows]
    assert all(len(n) == 1 for n in new) and sorted(n[0] for n in new) == list(range(LENGTH))
    assert dv.shade(0.0) == "#ffffff" and dv.shade(1.0) != dv.shade(0.5) != dv.shade(0.0)


def test_blocks_of_one_get_one_head_across_the_canvas_and_bwec_says_it_had_nothing_to_commit(model, sample):
    cfg = DiffusionDecodeConfig("ones", ScheduleConfig(block_length=1), latch=LatchConfig(bwec=True, tau_b=0.0))
    result = diffusion_generate(model, sample.image, sample.question, cfg, task="scene/colour", record=True)
    markup = dv.trajectory_html(result.steps, model.token_text.pieces, model.eos_id, 1)
    assert markup.count('class="fv-dblock-head"') == 1 and f"the final block is position {LENGTH - 1}" in markup
    assert "fv-dblk" not in markup                                   # no block border between every cell
    stop = dv.stop_html(result.steps, result.stopped_by, cfg, "scene/colour", model.token_text.pieces, model.eos_id)
    assert "BWEC had nothing to commit early: on blocks of 1" in stop


def test_the_candidate_span_is_outlined_where_the_trace_puts_it(model, sample):
    result = diffusion_generate(model, sample.image, sample.question, config(), task="scene/colour", record=True)
    for st, row in zip(result.steps, grid_of(model, result).rows):
        inside = [p for p, c in enumerate(row["cells"]) if "fv-dspan" in c["classes"]]
        assert inside == ([] if st.span is None else list(range(*st.span)))
        if st.span is not None:
            assert "fv-dspan-l" in row["cells"][st.span[0]]["classes"]
            assert "fv-dspan-r" in row["cells"][st.span[1] - 1]["classes"]


def test_bwec_commits_and_the_cvc_step_are_labelled_and_explained(steered_diffusion):
    s = make_sample(tuning_seeds(1)[0], "chart", "value")
    steered = steered_diffusion({s.question: s.answer})
    # a set of its own (not the frozen one, which may change with tuning): blocks 0-31 and 32-47
    cfg = DiffusionDecodeConfig("latch", ScheduleConfig(block_length=32),
                                latch=LatchConfig(cvc=True, tau_c=0.9, stable_steps=2, bwec=True, tau_b=0.9))
    result = diffusion_generate(steered, s.image, s.question, cfg, task=question_task(s.question), record=True)
    assert result.stopped_by == "cvc" and [st.rule for st in result.steps] == ["bwec", "cvc"]
    last = result.steps[-1]
    assert last.held >= cfg.latch.stable_steps and last.span_confidence >= cfg.latch.tau_c
    pieces = steered.token_text.pieces
    grid = Grid(dv.trajectory_html(result.steps, pieces, steered.eos_id, cfg.schedule.block_length))
    bwec, cvc = grid.rows
    assert bwec["attrs"]["data-rule"] == "bwec" and "BWEC · block 0" in bwec["label"]
    assert sum("fv-dnew" in c["classes"] for c in bwec["cells"]) == cfg.schedule.block_length
    assert cvc["attrs"]["data-rule"] == "cvc" and "CVC fires" in cvc["label"] and "step 2" in cvc["label"]
    assert all(not c["classes"] & {"fv-dm"} for c in cvc["cells"])          # CVC filled every position
    full = dv.Decode(48, result.answer_tokens, "schedule", result.text)
    stop = dv.stop_html(result.steps, result.stopped_by, cfg, "chart/value", pieces, steered.eos_id, full, result.text)
    assert "CVC fired at step 2</b> of the full schedule's 48" in stop
    assert f"τc = {cfg.latch.tau_c:g}" in stop and f"{last.span_confidence:.2f}" in stop
    assert "“9.”" in stop                                         # the span: the last number to the answer's end
    assert "BWEC committed block 0 at step 1 (32 positions at once)" in stop
    assert "never acts on the final block (positions 32–47)" in stop
    assert "chart/value" in stop and "same as the full schedule's" in stop


def test_a_question_outside_the_world_templates_says_cvc_cannot_fire(model, sample):
    cfg = config(cvc=True, tau_c=0.9, stable_steps=2, bwec=True, tau_b=1.0)
    result = diffusion_generate(model, sample.image, "Tell me a joke.", cfg, task=None, record=True)
    assert result.stopped_by == "schedule"
    stop = dv.stop_html(result.steps, result.stopped_by, cfg, None, model.token_text.pieces, model.eos_id)
    assert "Every position was decoded</b> by the schedule, in 24 steps" in stop
    assert "CVC never fired: without a task parser" in stop and "BWEC never fired" in stop
    assert "fills none of the world's question templates" in stop


def test_the_speed_table_repeats_the_headline_with_ranges():
    timings = Timings()
    for r, (latch, full, ar) in enumerate([(30.0, 10.0, 100.0), (33.0, 10.0, 110.0), (36.0, 12.0, 100.0)]):
        for m, tps in (("latch", latch), ("full", full), ("autoregressive", ar)):
            timings.add(r, m, tps)
    decodes = {"latch": dv.Decode(12, 20, "cvc", "It is red."), "full": dv.Decode(96, 20, "schedule", "It is red."),
               "autoregressive": dv.Decode(21, 20, "eos", "It is red.")}
    page = dv.speed_html("latch", decodes, timings)
    head = dict(re.findall(r'data-versus="(\w+)" data-speedup="([\d.]+)"', page))
    assert head == {"full": "3.00", "autoregressive": "0.30"}
    assert "3.00× (3.00–3.30)" in page and "0.30× (0.30–0.36)" in page and "median of 3 interleaved timed runs" in page
    assert page.count("<th>LATCH (CVC + BWEC)</th>") == 1 and "autoregressive target" in page
    summary = dv.summary("latch", [], decodes, timings, task="scene/colour")
    assert summary["speedup_vs_full"] == 3.0 and summary["speedup_vs_autoregressive"] == 0.3
    assert summary["latch"]["steps"] == 12 and summary["full"]["tokens_per_s"] == 10.0
    # the full schedule chosen: one column for it, no ratio with itself in the headline
    assert "data-versus=\"full\"" not in dv.speed_html("full", decodes, timings)


def test_the_missing_model_notice_names_the_folder_and_the_training_command():
    notice = dv.missing_model_html("assets/diffusion")
    assert "No diffusion model is loaded." in notice and "assets/diffusion" in notice
    assert f"<code>{dv.DIFFUSION_TRAIN_COMMAND}</code>" in notice and "docs/latch.md" in notice
    assert "--diffusion &lt;folder&gt;" in notice                                    # escaped placeholder
    assert dv.DIFFUSION_TRAIN_COMMAND.startswith("python -m fovea.train diffusion")


def test_the_family_choice_shows_one_run_button_and_one_view():
    fovea = [u.visible for u in family_visibility(FOVEA_FAMILY)]
    diffusion = [u.visible for u in family_visibility(DIFFUSION_FAMILY)]
    assert fovea == [True, False, True, False] and diffusion == [False, True, False, True]


def test_the_library_imports_without_gradio():
    code = "import sys, fovea.diffusion; assert 'gradio' not in sys.modules, 'fovea imported gradio'"
    subprocess.run([sys.executable, "-c", code], check=True)

"""Unit tests of the app's pure pieces on hand-built trace records: renderers (answer, tree,
metrics), focus trajectory and heatmaps, plotly figures, settings -> config, and the
background stream. No model, no UI launched."""
import dataclasses
import re
import threading
import time

import numpy as np
import pytest
from PIL import Image

from app import metrics, plots, render
from app.focus import (FocusStep, colormap, focus_shifts, focus_trajectory, heatmap_overlay, jaccard_distance,
                       step_caption, step_for_token, top_set, weight_grid)
from app.settings import DEFAULTS, NUMBERS, SettingsError, config_from_settings, variant_config
from app.streaming import BackgroundStream
from app.timing import Timings
from fovea.config import FoveaConfig
from fovea.trace import Accumulator, GenerationResult, IterationTrace, NodeRetrieval, PrefillTrace

GRID = (8, 8)


def retrieval(indices, gate=0.5):
    w = np.linspace(2, 1, len(indices))
    return NodeRetrieval(list(indices), list(w / w.sum()), len(indices), gate)


@pytest.fixture
def rounds():
    """Round 0: accepted path root -> 1 -> 3 (depths 1, 2), bonus 20; node 3 has no retrieval
    (deeper than the correction depth). Round 1: nothing accepted, bonus 30."""
    r0 = IterationTrace(
        iteration=0, tokens=[10, 11, 12, 13, 14, 15], parents=[-1, 0, 0, 1, 1, 3], depths=[0, 1, 1, 2, 2, 3],
        scores=[0.0, -0.1, -2.0, -0.3, -1.5, -0.6],
        retrieval={0: retrieval([9, 0, 1], 0.4), 1: retrieval([9, 10], 0.7), 2: retrieval([5], 0.1)},
        accepted=[1, 3], rejected=[2, 4, 5], emitted=[11, 13, 20], bonus_token=20,
        draft_ms=2.0, verify_ms=5.0, commit_ms=0.5)
    r1 = IterationTrace(
        iteration=1, tokens=[20, 21, 22], parents=[-1, 0, 0], depths=[0, 1, 1], scores=[0.0, -0.5, -0.9],
        retrieval={0: retrieval(range(63, 43, -1), 0.9)}, accepted=[], rejected=[1, 2], emitted=[30],
        bonus_token=30, draft_ms=1.0, verify_ms=4.0, commit_ms=0.4)
    return [r0, r1]


@pytest.fixture
def result(rounds):
    return GenerationResult("fovea", [10, 11, 13, 20, 30], "text", wall_s=0.5, prefill_ms=3.0, target_forwards=3,
                            iterations=rounds, accept_lengths=[3, 1], memory_grid=GRID, prefill=PrefillTrace(10))


def test_answer_tokens_start_with_the_prefill_token_then_emitted_tokens(rounds):
    assert Accumulator().extend([PrefillTrace(10), *rounds]).tokens == [10, 11, 13, 20, 30]
    assert Accumulator().extend([PrefillTrace(7)]).tokens == [7]


def test_answer_html_has_one_span_per_token_coloured_by_origin(result):
    out = render.answer_html(result, ["<p>", " a", " b", " c", " d"])
    assert out.count('class="fv-tok') == 5
    assert "&lt;p&gt;" in out and "<p>" not in out                   # token text is escaped
    assert 'class="fv-tok fv-prefill"' in out
    assert 'class="fv-tok fv-draft fv-d1" data-iter="0" data-k="0"' in out
    assert 'class="fv-tok fv-draft fv-d2" data-iter="0" data-k="1"' in out
    assert 'class="fv-tok fv-bonus" data-iter="0" data-k="2"' in out
    assert 'class="fv-tok fv-bonus" data-iter="1" data-k="0"' in out
    assert render.DEPTH_COLOURS[0] in out and render.BONUS_COLOUR in out


def test_answer_html_leads_with_the_prefill_records_tokens(rounds):
    """The amber lead is the prefill record's tokens, never a guess from the string count."""
    live = Accumulator().extend([PrefillTrace(10)])
    assert render.answer_html(live, ["P"]).count('class="fv-tok fv-prefill"') == 1
    unprefilled = GenerationResult("fovea", [11, 13, 20, 30], "", 0.5, 3.0, 2, rounds)
    out = render.answer_html(unprefilled, [" a", " b", " c", " d"])
    assert "fv-prefill" not in out and 'class="fv-tok fv-draft fv-d1" data-iter="0" data-k="0"' in out


def test_special_tokens_are_hidden_in_the_answers_and_named_in_the_tree(result, tiny_pipeline):
    eos = tiny_pipeline.target.tokenizer.eos_token_id
    strings = tiny_pipeline.token_strings([eos, 5])
    assert strings[0] == "" and strings[1]                            # `</s>` shows as nothing
    out = render.answer_html(result, ["<p>", " a", " b", " c", ""])    # the last token: a special one
    assert out.count('class="fv-tok') == 4 and "</s>" not in out
    assert render.plain_answer_html(["X", ""]).endswith(">X</div>")
    assert "⟨end⟩" in render.tree_html(result.iterations[1], ["R", "", "x"], "")


def test_answer_html_while_nothing_decoded_shows_a_placeholder():
    assert "fv-empty" in render.answer_html(None, [])
    assert "fv-empty" in render.answer_html(Accumulator(), [])


def test_tree_html_marks_accepted_rejected_bonus_and_retrieval(rounds):
    r0 = rounds[0]
    out = render.tree_html(r0, ["R", "A", "x", "B", "y", "z"], "BON", selected=1)
    assert out.count('class="fv-tnode fv-accepted"') == 2 and out.count("✓ accepted") == 2
    assert out.count('class="fv-tnode fv-rejected"') == 3 and out.count("✗ rejected") == 3
    assert "BON" in out and "fv-bonus" in out
    assert out.count("fv-badge") == 3 and "K=2 g=0.70" in out
    assert "outline:2px" in out and 'data-node="1"' in out
    # the bonus token continues the accepted path: the row of B (depth 2), one column right of it
    b_row = re.search(r'data-node="3" style="grid-row:(\d+);grid-column:3;', out).group(1)
    assert f'grid-row:{b_row};grid-column:4;background:#fbbf24' in out
    assert "τ = 3" in out and "90%" in out                               # A: exp(-0.1) given the root


def test_focus_trajectory_follows_the_committed_path_and_skips_baseline_steps(rounds):
    steps = Accumulator().extend([PrefillTrace(10), *rounds]).focus_trajectory()
    assert [(s.iteration, s.node) for s in steps] == [(0, 0), (0, 1), (1, 0)]   # node 2 was rejected


@pytest.mark.parametrize("iteration,k,expected", [
    (0, 0, 0),   # draft token 11 was proposed by the root's state
    (0, 1, 1),   # draft token 13 by node 1's state
    (0, 2, 1),   # bonus: last accepted node 3 has no retrieval -> its corrected ancestor, node 1
    (1, 0, 2),   # bonus of a round with nothing accepted -> the round's root
])
def test_step_for_token_finds_the_draft_state_that_proposed_it(rounds, iteration, k, expected):
    assert step_for_token(focus_trajectory(rounds), rounds, iteration, k) == expected


def test_step_for_token_without_retrieval_or_out_of_range_is_none(rounds):
    bare = [IterationTrace(0, [1, 2], [-1, 0], [0, 1], [0.0, -1.0], {}, [1], [], [2, 3], 3)]
    assert step_for_token(focus_trajectory(bare), bare, 0, 0) is None
    assert step_for_token(focus_trajectory(rounds), rounds, 5, 0) is None


def test_jaccard_distance_and_top16_focus_shifts():
    assert jaccard_distance({1, 2}, {1, 2}) == 0.0
    assert jaccard_distance({1, 2}, {3}) == 1.0
    assert jaccard_distance({1, 2, 3}, {2, 3, 4}) == pytest.approx(0.5)
    assert jaccard_distance(set(), set()) == 0.0
    a = NodeRetrieval(list(range(20)), [0.05] * 20, 20, 1.0)
    b = NodeRetrieval(list(range(4, 24)), [0.05] * 20, 20, 1.0)
    assert top_set(a) == set(range(16))                               # only the 16 heaviest count
    steps = [FocusStep(0, 0, a), FocusStep(0, 1, b), FocusStep(1, 0, b)]
    assert focus_shifts(steps) == pytest.approx([1 - 12 / 20, 0.0])


def test_weight_grid_places_weights_row_major_and_ignores_extra_entries():
    g = weight_grid(NodeRetrieval([0, 9, 64], [0.5, 0.3, 0.2], 3, 1.0), GRID)
    assert g.shape == GRID and g[0, 0] == 0.5 and g[1, 1] == pytest.approx(0.3) and g.sum() == pytest.approx(0.8)


def test_colormap_runs_dark_to_bright():
    c = colormap(np.array([0.0, 0.5, 1.0]))
    assert c.shape == (3, 3) and c.dtype == np.uint8
    assert c[0].sum() < c[1].sum() < c[2].sum()


def test_heatmap_overlay_tints_selected_patches_and_dims_the_rest():
    image = Image.new("RGB", (50, 30), (128, 128, 128))                # any size/aspect: shown as the model's square
    out = heatmap_overlay(image, NodeRetrieval([0, 63], [0.7, 0.3], 2, 0.5), GRID, side=160)
    px = np.asarray(out, dtype=int)
    assert out.size == (160, 160)
    top_left, bottom_right, middle = px[8, 8], px[150, 150], px[85, 95]
    assert tuple(middle) == (51, 51, 51)                              # unselected: dimmed to 40%
    assert abs(top_left - 128).sum() > 30 and abs(bottom_right - 128).sum() > 30
    assert not np.array_equal(top_left, bottom_right)                 # heavier weight, different colour
    plain = np.asarray(heatmap_overlay(image, None, GRID, side=160), dtype=int)
    assert tuple(plain[85, 95]) == (128, 128, 128)


def test_step_caption_reports_k_gate_and_proposals(rounds):
    step = focus_trajectory(rounds)[1]
    text = step_caption(step, rounds[0], ["R", "A", "x", "B", "y", "z"], 1, 3, GRID)
    assert "Step 2 / 3" in text and "K = 2" in text and "of 64" in text and "g = 0.70" in text
    assert "`B` ✓" in text and "`y`" in text


def test_the_headline_and_the_table_give_the_same_timed_speedups(result):
    runs = {"fovea": result, "no_correction": result,
            "autoregressive": dataclasses.replace(result, method="autoregressive", target_forwards=5)}
    t = Timings()
    for rep, (f, nc, ar) in enumerate([(30.0, 20.0, 10.0), (20.0, 15.0, 10.0), (45.0, 30.0, 15.0)]):
        for method, tps in (("fovea", f), ("no_correction", nc), ("autoregressive", ar)):
            t.add(rep, method, tps)
    out = metrics.metrics_html(runs, t)
    head = re.findall(r'data-method="(\w+)" data-speedup="([\d.]+)"', out)
    assert head == [("fovea", "3.00"), ("no_correction", "2.00")]
    cells = re.search(r'fv-timed-speedup"><th>[^<]*</th>(.*?)</tr>', out).group(1)
    assert re.findall(r"<td>([^<]*)</td>", cells) == ["3.00× (2.00–3.00)", "2.00× (1.50–2.00)", "1.00×"]
    assert "median of 3 interleaved timed runs" in out and "counts: the live pass" in out
    assert "<td>30.0</td><td>20.0</td><td>10.0</td>" in out                   # median tokens/s of the same runs
    assert "tokens / target forward" in out and "FOVEA decoding" in metrics.metrics_html({}, None, "FOVEA decoding…")
    assert metrics.SAMPLING_NOTE in metrics.metrics_html(runs, t, sampling=True)
    s = metrics.summary(runs, t, question="q")
    assert (s["speedup"], s["twin_speedup"], s["fovea"]["tokens_per_s"], s["question"]) == (3.0, 2.0, 30.0, "q")
    assert s["fovea"]["mean_tau"] == 2.0 and s["fovea"]["wall_s"] == pytest.approx(5 / 30, abs=1e-4)


@pytest.mark.parametrize("ratio", [2.7249, 2.7251, 2.725, 1.0049999, 0.99951])
def test_a_ratio_on_a_rounding_edge_reads_the_same_in_headline_table_and_json(result, ratio):
    # CI once showed 2.72 in the headline and 2.73 from the JSON: the JSON had rounded to 3 places first
    runs = {"fovea": result, "autoregressive": dataclasses.replace(result, method="autoregressive")}
    t = Timings([{"fovea": 10.0 * ratio, "autoregressive": 10.0}])
    out, s = metrics.metrics_html(runs, t), metrics.summary(runs, t)
    head = dict(re.findall(r'data-method="(\w+)" data-speedup="([\d.]+)"', out))
    assert head == {"fovea": f"{s['speedup']:.2f}"}
    cells = re.search(r'fv-timed-speedup"><th>[^<]*</th>(.*?)</tr>', out).group(1)
    assert re.findall(r"<td>([^<]*)</td>", cells)[0] == f"{s['speedup']:.2f}×"
    assert s["timing"]["speedup"]["fovea"]["median"] == s["speedup"]


def test_comparison_table_shows_the_median_and_range_or_says_one_run(result):
    t = Timings([{"dense": 20.0, "autoregressive": 10.0}, {"dense": 17.0, "autoregressive": 10.0},
                 {"dense": 24.0, "autoregressive": 10.0}])
    out = metrics.comparison_html([metrics.comparison_row("dense", result, t, "dense")])
    assert "dense" in out and "2.00× (1.70–2.40)" in out and "interleaved" in out and "<td>20.0</td>" in out
    one = metrics.comparison_html([metrics.comparison_row("fixed", result, Timings([t.repeats[0]]), "dense")])
    assert "One timed run per variant" in one and "2.00×" in one
    assert "fv-empty" in metrics.comparison_html([])


def test_focus_shift_figure_has_k_bars_and_jaccard_line(rounds):
    fig = plots.focus_shift_figure(focus_trajectory(rounds))
    bars, line = fig.data
    assert list(bars.y) == [3, 2, 20] and len(line.y) == 2
    assert "No draft state" in plots.focus_shift_figure([]).layout.annotations[0].text


def test_analysis_figures(rounds):
    acc = plots.accept_length_figure(rounds)
    assert list(acc.data[0].y) == [2, 0] and list(acc.data[1].y) == [1, 1]
    hist = plots.accept_histogram_figure(rounds)
    assert list(hist.data[0].x) == [1, 2, 3] and list(hist.data[0].y) == [1, 0, 1]
    timing = plots.timing_figure(rounds, baseline_forward_ms=3.0)
    assert [t.name for t in timing.data] == ["draft", "verify", "commit"] and list(timing.data[1].y) == [5.0, 4.0]
    assert plots.accept_length_figure([]).layout.annotations
    comp = plots.comparison_figure([{"variant": "dense", "speedup": 1.5, "mean_tau": 2.0}])
    assert list(comp.data[0].y) == [1.5]


def test_settings_defaults_round_trip_to_the_library_defaults():
    d = FoveaConfig()
    values = dict(mode="cumulative", rho=d.retrieval.rho, k_min=d.retrieval.k_min, k_max=d.retrieval.k_max,
                  fixed_k=d.retrieval.fixed_k, depth=d.tree.depth, top_k=d.tree.top_k,
                  total_tokens=d.tree.total_tokens, correction=True, correction_depth=d.correction.max_depth,
                  sampling="greedy", temperature=1.0, top_p=1.0, seed=0, max_new_tokens=d.decoding.max_new_tokens)
    values["drafter"] = "full"
    assert config_from_settings(values) == d                  # stop_below, trigger absent: the defaults
    assert config_from_settings({**values, "stop_below": d.tree.stop_below, "trigger": 0}) == d
    # a caller that predates the trigger control gets the requested drafter context's measured trigger
    assert config_from_settings({**values, "drafter": "text"}).correction.trigger == 0.7
    assert config_from_settings({**values, "drafter": "text", "trigger": 0.25}).correction.trigger == 0.25
    assert config_from_settings({**values, "stop_below": 0}).tree.stop_below == 0.0  # 0: every level, every round
    assert config_from_settings({**values, "k_min": 4.0}).retrieval.k_min == 4      # sliders send floats


@pytest.mark.parametrize("change,phrase", [
    ({"max_new_tokens": 0}, "Max new tokens must be a whole number between 1 and 256"),
    ({"max_new_tokens": 10_000}, "Max new tokens must be a whole number between 1 and 256"),
    ({"max_new_tokens": "lots"}, "Max new tokens must be a number"),
    ({"k_min": 40, "k_max": 8}, "lower K_min or raise K_max"),
    ({"mode": "psychic"}, "Retrieval mode must be one of"),
    ({"rho": float("nan")}, "ρ \\(cumulative mass\\) must be a number between 0.05 and 1"),
    ({"stop_below": 1.5}, "Stop below \\(dynamic depth\\) must be a number between 0 and 0.95"),
    ({"top_k": 17}, "Tree top-k must be a whole number between 1 and 16"),
    ({"trigger": 2}, "Correct only where unsure must be a number between 0 and 1"),
    ({"correction_depth": 16}, "Correction depth must be a whole number between 0 and 15"),
    ({"seed": -1}, "Seed must be a whole number between 0 and 2,147,483,647"),
])
def test_bad_settings_raise_a_sentence_saying_what_to_change(change, phrase):
    values = dict(mode="cumulative", rho=0.8, k_min=4, k_max=32, fixed_k=16, depth=5, top_k=4, total_tokens=16,
                  correction=True, correction_depth=1, sampling="greedy", temperature=1.0, top_p=1.0, seed=0,
                  max_new_tokens=64)
    with pytest.raises(SettingsError, match=phrase):
        config_from_settings({**values, **change})


def test_every_value_a_control_offers_is_one_the_library_accepts():
    # a control's range is its field's (fovea.config.range_of) on the step grid, or inside it where the app
    # narrows it: both ends, and a value on the step grid near each, build a FoveaConfig
    for n in NUMBERS.values():
        if n.field:
            section, name = n.field.split(".")
            for x in (n.lo, n.hi, n.lo + n.step, n.hi - n.step):
                x = int(x) if n.integer else x
                names = ("k_min", "k_max") if name in ("k_min", "k_max") else (name,)    # k_min <= k_max
                DEFAULTS.replace(**{section: dict.fromkeys(names, x)})
    assert (NUMBERS["stop_below"].lo, NUMBERS["stop_below"].hi) == (0.0, 0.95)      # [0, 1) on a 0.05 grid
    assert (NUMBERS["rho"].lo, NUMBERS["rho"].hi) == (0.05, 1.0)                    # (0, 1]


def test_variant_config_switches_mode_or_correction():
    cfg = FoveaConfig()
    assert variant_config(cfg, "dense").retrieval.mode == "dense"
    assert variant_config(cfg, "no correction").correction.enabled is False
    with pytest.raises(SettingsError):
        variant_config(cfg, "telepathy")


def test_background_stream_keeps_order_and_does_not_pause_the_producer():
    gaps = []

    def producer():
        for i in range(5):
            t = time.perf_counter()
            yield i
            gaps.append(time.perf_counter() - t)     # how long the producer waited for its consumer

    seen = []
    for batch in BackgroundStream(producer()).batches():
        seen += batch
        time.sleep(0.05)                             # a slow consumer (rendering)
    assert seen == [0, 1, 2, 3, 4]
    assert max(gaps) < 0.04


def test_background_stream_reraises_producer_errors_and_stops_on_close():
    def failing():
        yield 1
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        for _ in BackgroundStream(failing()).batches():
            pass
    stop_seen = threading.Event()

    def endless():
        try:
            while True:
                yield 0
                time.sleep(0.001)
        finally:
            stop_seen.set()

    stream = BackgroundStream(endless())
    next(stream.batches())
    stream.close()
    stream.join(timeout=2)
    assert stop_seen.is_set()


def test_legend_names_every_depth_colour_and_the_last_covers_deeper_levels():
    """Trees are deeper (default 9) than there are depth colours: the last chip says "N+", and a
    token at depth 9 gets that same colour."""
    out = render.legend_html()
    n = len(render.DEPTH_COLOURS)
    assert all(c in out for c in render.DEPTH_COLOURS)
    assert f"depth {n}+" in out and f"depth {n + 1}" not in out
    assert render.depth_style(9) == render.depth_style(n)


def test_every_stream_and_job_runs_on_the_one_decode_thread():
    """app.streaming: all torch work of the app on one long-lived thread (a model loaded on another
    thread, or records folded on a consumer thread while decoding, measured ~2x slower)."""
    from app.streaming import run_on_decode_thread

    seen = []

    def producer():
        seen.append(threading.get_ident())
        yield 1

    prepared = []
    for _ in range(3):
        for _ in BackgroundStream(producer(), prepare=lambda item: prepared.append(threading.get_ident())).batches():
            pass
    job = run_on_decode_thread(threading.get_ident)
    assert len(set(seen)) == 1 and set(prepared) == set(seen) and job == seen[0] != threading.get_ident()

    def fails():
        raise KeyError("inside")
    with pytest.raises(KeyError, match="inside"):
        run_on_decode_thread(fails)
    assert run_on_decode_thread(lambda: 7) == 7                # the thread survives a failed job


def test_the_apps_default_token_budget_fits_every_answer_the_bundled_model_was_trained_to_give():
    """The app's Max new tokens (96, not the library's 64) covers the longest world answers (six-shape
    count walks and descriptions) plus the end-of-sequence token, so no bundled-model answer is cut."""
    from app.settings import DEFAULTS
    from fovea.data import make_sample
    from fovea.data.generate import TASKS
    from fovea.models.bundled import DEFAULT_TARGET_DIR, load_tokenizer

    tok = load_tokenizer(DEFAULT_TARGET_DIR)
    longest = max(len(tok(make_sample(seed, family, task).answer, add_special_tokens=False)["input_ids"])
                  for family, tasks in TASKS.items() for task in tasks for seed in range(60))
    assert 64 < longest + 1 <= DEFAULTS.decoding.max_new_tokens, longest


def test_the_drafter_context_control_is_checked_against_the_loaded_drafters():
    from app.settings import CONTEXT_CORRECTION, DEFAULT_CONTEXT, context_defaults, drafter_context

    assert drafter_context({}, ("full", "text")) == DEFAULT_CONTEXT
    assert drafter_context({}, ("full",)) == "full"                     # the default is not loaded: the first
    assert drafter_context({"drafter": "full"}, ("full", "text")) == "full"
    with pytest.raises(SettingsError, match="Drafter cache must be one of: full; got 'text'"):
        drafter_context({"drafter": "text"}, ("full",))
    for context, correction in CONTEXT_CORRECTION.items():
        c = context_defaults(context).correction
        assert (c.max_depth, c.trigger) == (correction["max_depth"], correction["trigger"])

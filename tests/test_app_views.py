"""Unit tests of the studio's newer pure pieces on hand-built records: where vision mattered
(flips, their verdicts, the answer marks, the race), the depth-16 tree grid, interleaved timing,
letterboxed heatmaps, the focus GIF, PRR locality in the focus-shift figure, and a session
written to a trace file and read back. No model, no UI launched."""
import numpy as np
import pytest
from PIL import Image

from app import plots, render
from app.focus import focus_trajectory, heatmap_overlay, trajectory_gif
from app.session import Session, from_trace_file, to_trace_file
from app.timing import Timings
from fovea.profile import interleaved_order
from app.tree import dfs_order, tree_html
from app.vision import corrected_states, flip_marks, race_html, token_kinds, vision_html
from app.views import Lane
from fovea.trace import Accumulator, GenerationResult, IterationTrace, NodeRetrieval, PrefillTrace, StepTrace
from fovea.trace_io import dump_trace, load_trace

GRID = (8, 8)


def r(indices, gate, before, after):
    return NodeRetrieval(list(indices), [1 / len(indices)] * len(indices), len(indices), gate,
                         [(t, 0.5 / (i + 1)) for i, t in enumerate(before)], [(t, 0.5 / (i + 1)) for i, t in enumerate(after)])


@pytest.fixture
def rounds():
    """Round 0: root flips 12 -> 11 and 11 is accepted; node 1 flips 14 -> 13, accepted too.
    Round 1: the root flips 99 -> 21 and the target rejects 21 (nothing accepted)."""
    r0 = IterationTrace(0, [10, 11, 12, 13, 14], [-1, 0, 0, 1, 1], [0, 1, 1, 2, 2], [0.0, -0.1, -2.0, -0.3, -1.5],
                        {0: r([1, 2], 0.6, [12, 11], [11, 12]), 1: r([3], 0.2, [14, 13], [13, 14]),
                         2: r([4], 0.1, [7], [7])},
                        [1, 3], None, [11, 13, 20], 20, 2.0, 5.0, 0.5)
    r1 = IterationTrace(1, [20, 21, 22], [-1, 0, 0], [0, 1, 1], [0.0, -0.5, -0.9],
                        {0: r([5, 6], 0.9, [99, 21], [21, 22])}, [], None, [30], 30, 1.0, 4.0, 0.4)
    return [r0, r1]


def test_corrected_states_report_flips_and_the_targets_verdict(rounds):
    states = {(s.round, s.node): s for s in corrected_states(rounds)}
    assert states[0, 0].flipped and states[0, 0].verdict == "accepted" and states[0, 0].child == 1
    assert states[0, 1].flipped and states[0, 1].verdict == "accepted"
    assert states[0, 2].flipped is False and states[0, 2].verdict == "pruned" and not states[0, 2].on_path
    assert states[1, 0].flipped and states[1, 0].verdict == "rejected"


def test_flip_marks_place_accepted_flips_on_tokens_and_rejected_ones_where_turned_down(rounds):
    accepted, rejected = flip_marks(rounds)
    assert set(accepted) == {(0, 0), (0, 1)} and set(rejected) == {(1, 0)}
    vocab = {10: "R", 11: "A", 13: "B", 20: "C", 21: "Z", 30: "D"}.get
    run = Accumulator().extend([PrefillTrace(10), *rounds])
    out = render.answer_html(run, ["P", "A", "B", "C", "D"], (accepted, rejected), vocab)
    assert out.count("fv-flip-accepted") == 2 and out.count("fv-flip-rejected") == 1
    assert "⚑<s>Z</s>" in out and out.index("<s>Z</s>") < out.index(">D<")   # before the round's bonus token


def test_vision_table_lists_top5_before_and_after_with_gate_and_verdict(rounds):
    out = vision_html(rounds, lambda t: f"t{t}")
    assert "<b>3</b> of 4 corrected draft states changed" in out and "accepted <b>2</b>" in out
    assert out.count("⚑ flipped") == 3 and "0.90" in out and "<code>t99</code> 50%" in out
    assert "off path" in out and ">rejected<" in out
    assert "No draft state read" in vision_html([], str)


def test_race_lanes_colour_tokens_by_acceptance_on_one_time_scale(rounds):
    kinds = token_kinds(Accumulator().extend([PrefillTrace(10), *rounds]))
    assert kinds == ["prefill", "draft", "draft", "target", "target"]
    ar = Accumulator("autoregressive").extend([PrefillTrace(4), StepTrace(0, 5, 1.0), StepTrace(1, 6, 1.0)])
    assert token_kinds(ar) == token_kinds(ar.result()) == ["prefill", "target", "target"]
    assert token_kinds(GenerationResult("fovea", [11, 13, 20, 30], "", 0.1, 0.0, 2, rounds)) == kinds[1:]
    out = race_html([Lane("FOVEA", list("PABCD"), kinds, 50.0, True), Lane("autoregressive", list("PABCD"),
                     ["prefill"] + ["target"] * 4, 100.0, False)], "note")
    assert "width:50.0%" in out and "width:100.0%" in out and "2/5 tokens from accepted drafts" in out
    assert "running…" in out and "note" in out


def _deep_round(depth=16):
    """A chain of `depth` accepted nodes plus one rejected sibling per level."""
    tokens, parents, depths, scores = [0], [-1], [0], [0.0]
    chain = 0
    for d in range(1, depth + 1):
        for rank in range(2):
            tokens.append(100 + len(tokens))
            parents.append(chain)
            depths.append(d)
            scores.append(scores[chain] - 0.1 - rank)
        chain = len(tokens) - 2
    accepted = [i for i in range(1, len(tokens)) if (i - 1) % 2 == 0]
    return IterationTrace(0, tokens, parents, depths, scores, {}, accepted, None, [1], 7)


def test_a_depth_16_tree_keeps_one_fixed_width_column_per_depth():
    it = _deep_round(16)
    out = tree_html(it, [f"tok{i}" for i in range(len(it.tokens))], "BON")
    assert "grid-template-columns:repeat(18,118px)" in out           # root, 16 depths, the bonus
    assert "depth 16" in out and out.count("fv-tnode") == len(it.tokens) + 1
    order = dfs_order(it)
    assert order[0] == 0 and sorted(order) == list(range(len(it.tokens)))
    assert all(order.index(it.parents[n]) < order.index(n) for n in order[1:])


def test_interleaved_order_rotates_and_timings_give_median_and_range():
    assert [interleaved_order(["a", "b", "c"], r) for r in range(4)] == \
           [["a", "b", "c"], ["b", "c", "a"], ["c", "a", "b"], ["a", "b", "c"]]
    t = Timings()
    for rep, (f, ar) in enumerate([(30.0, 10.0), (20.0, 10.0), (45.0, 15.0)]):
        t.add(rep, "fovea", f)
        t.add(rep, "autoregressive", ar)
    s = t.speedup("fovea")
    assert (s.median, s.low, s.high, s.n) == (3.0, 2.0, 3.0, 3)
    assert "median of 3 interleaved runs" in s.label() and t.as_dict()["speedup"]["fovea"]["median"] == 3.0
    one = Timings()
    one.add(0, "fovea", 2.0)
    one.add(0, "autoregressive", 1.0)
    assert "one run" in one.speedup("fovea").label() and one.speedup("missing") is None


def test_heatmap_letterboxes_a_non_square_image_instead_of_stretching_it():
    image = Image.new("RGB", (200, 100), (220, 0, 0))                 # 2:1 -> red band, grey bars above / below
    px = np.asarray(heatmap_overlay(image, None, GRID, side=192), dtype=int)
    assert px.shape == (192, 192, 3)
    assert tuple(px[20, 100]) == (128, 128, 128) and tuple(px[170, 100]) == (128, 128, 128)
    assert tuple(px[100, 100]) == (220, 0, 0)


def test_trajectory_gif_has_one_labelled_frame_per_focus_step(rounds, tmp_path):
    path = tmp_path / "focus.gif"
    labels = ["step 1/3 · a", "step 2/3 · b", "step 3/3 · c"]
    trajectory_gif(Image.new("RGB", (60, 40)), focus_trajectory(rounds), GRID, path, labels, side=64)
    with Image.open(path) as gif:
        assert gif.n_frames == len(focus_trajectory(rounds)) == 3 and gif.size == (64, 86)
        bands = []
        for i in range(gif.n_frames):
            gif.seek(i)
            bands.append(np.asarray(gif.convert("L"))[64:])               # the label band under the heatmap
    assert all((b < 128).any() for b in bands)                            # dark text on each frame
    assert not np.array_equal(bands[0], bands[1])                          # each its own label


def test_focus_shift_figure_adds_prr_overlap_and_hit_rate(rounds):
    from fovea.locality import focus_locality, trace_links
    traj = focus_trajectory(rounds)
    loc = focus_locality(*trace_links(rounds), 64)
    fig = plots.focus_shift_figure(traj, locality=loc)
    names = [d.name for d in fig.data]
    assert "PRR overlap |P∩T|/|T|" in names and "PRR hit rate (weighted)" in names
    assert len(loc) == len(traj) and loc[0].overlap is None and loc[1].overlap is not None


def test_a_session_exports_and_imports_to_the_same_runs(rounds):
    fovea = GenerationResult("fovea", [10, 11, 13, 20, 30], "x", 0.5, 3.0, 3, rounds, [3, 1], GRID)
    ar = GenerationResult("autoregressive", [10, 11, 13, 20, 30], "x", 1.0, 3.0, 5,
                          [StepTrace(i, t, 1.0) for i, t in enumerate([11, 13, 20, 30])], [1] * 4, GRID)
    ids = {7, 10, 11, 12, 13, 14, 20, 21, 22, 30, 99}
    timings = Timings()
    timings.add(0, "fovea", 10.0)
    timings.add(0, "autoregressive", 5.0)
    s = Session(Image.new("RGB", (90, 50), (1, 2, 3)), "q?", {"fovea": fovea, "autoregressive": ar},
                {i: f"t{i}" for i in ids}, timings, GRID)
    back = from_trace_file(load_trace(dump_trace(to_trace_file(s, 192))))
    assert back.imported and back.question == "q?" and back.vocab == s.vocab
    assert back.timings.speedup("fovea").median == 2.0
    assert [(t.iteration, t.node) for t in back.trajectory] == [(t.iteration, t.node) for t in s.trajectory]
    assert vision_html(back.fovea.iterations, back.text) == vision_html(s.fovea.iterations, s.text)

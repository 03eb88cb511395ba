"""What the app's output components show, as tuples in RUN_OUTPUTS order: cleared at the start of
a run, live while methods stream, and final from a `Session` (a fresh run or an imported trace,
which therefore look the same); and the diffusion view's, in DIFFUSION_OUTPUTS order
(`app.diffusion_view` renders them). Calls the pure renderers; gradio appears only as output
updates (`gr.skip`, `gr.Slider`, visibility).
"""
from __future__ import annotations

import html
import json
from pathlib import Path

import gradio as gr

from app import diffusion_view, metrics, plots, render
from app.focus import heatmap_overlay, step_caption, trajectory_gif
from app.session import AUTOREGRESSIVE, FOVEA, LANE_NAMES, NO_CORRECTION, Session, to_trace_file
from app.tree import node_text
from app.vision import Lane, flip_marks, race_html, token_kinds, vision_html
from fovea.ood import WorldCheck, question_message
from fovea.trace_io import dump_trace

FILMSTRIP_FRAMES = 12
# outputs of `run` and `import_trace`, in order; `app.ui` builds components under these names
RUN_OUTPUTS = ("answer", "baseline", "metrics", "heatmap", "caption", "tree", "scrubber", "focus_plot",
               "filmstrip", "accept_plot", "hist_plot", "timing_plot", "summary", "compare_html",
               "compare_plot", "ood", "race", "vision", "session")
FOCUS_OUTPUTS = ("heatmap", "caption", "tree")
# outputs of `run_diffusion`, in order (the diffusion view's components in `app.ui`)
DIFFUSION_OUTPUTS = ("diffusion_notice", "diffusion_metrics", "diffusion_stop", "diffusion_grid", "diffusion_summary")
# the decoding families of the studio: the input and output groups each one shows (`family_visibility`)
FOVEA_FAMILY, DIFFUSION_FAMILY = "FOVEA speculative", "Diffusion with LATCH"
RACE_NOTE = ("The methods run one after another on the same decode thread (never at once, so none slows "
             "another); while they stream, each bar is the live pass's own time.")


def pack(**values) -> tuple:
    return tuple(values[n] if n in values else gr.skip() for n in RUN_OUTPUTS)


def ood_html(world: WorldCheck, unknown_words: float = 0.0) -> str:
    """The input's notices: an image unlike the bundled model's world, a flat image, a question mostly
    outside the vocabulary; "" when there are none. Messages are escaped (they hold `<folder>`)."""
    notices = [("Out of distribution.", world.message), ("Flat image.", world.flat_message),
               ("Unknown words.", question_message(unknown_words))]
    return "".join(f'<div class="fv-ood" role="alert"><b>{title}</b> {html.escape(text, quote=False)}</div>'
                   for title, text in notices if text)


def lane(name: str, run, strings: list[str], ms: float, done: bool) -> Lane:
    """A race lane of `run` (an `Accumulator` while it streams, or a `GenerationResult`)."""
    return Lane(name, strings, token_kinds(run)[:len(strings)], ms, done)


def cleared_outputs(notices: str = "", status: str = "decoding…") -> tuple:
    """A new run starts, or an input was rejected: nothing of the previous run stays on screen."""
    return pack(answer=render.answer_html(None, []), baseline=render.plain_answer_html([], "runs in turn with FOVEA"),
                metrics=metrics.metrics_html({}, None, status=status), heatmap=None,
                caption="The focus view fills in as FOVEA decodes.", tree="",
                scrubber=gr.Slider(minimum=0, maximum=1, value=0, step=1, interactive=False),
                focus_plot=plots.focus_shift_figure([]), filmstrip=[], accept_plot=plots.accept_length_figure([]),
                hist_plot=plots.accept_histogram_figure([]), timing_plot=plots.timing_figure([]), summary=None,
                compare_html=metrics.comparison_html([]), compare_plot=plots.comparison_figure([]),
                ood=notices, race=race_html([], RACE_NOTE), vision=vision_html([], str), session=None)


def live_outputs(pipeline, img, method: str, run, lanes: list[Lane], status: str, strings) -> tuple:
    """Race + status always; `method`'s answer (FOVEA) or baseline box (autoregressive) from `run`, its
    Accumulator while it streams or its result once finished (None: leave them as they are)."""
    values = dict(race=race_html(lanes, RACE_NOTE), metrics=metrics.metrics_html({}, None, status=status))
    if run is not None and method == FOVEA:
        values["answer"] = render.answer_html(run, strings(run.tokens))
        rounds = run.iterations
        if rounds and rounds[-1].retrieval:
            it = rounds[-1]
            node = 0 if 0 in it.retrieval else min(it.retrieval)
            values["heatmap"] = heatmap_overlay(img, it.retrieval[node], pipeline.memory_grid)
            values["tree"] = render.tree_html(it, strings(it.tokens), strings([it.bonus_token])[0])
    elif run is not None and method == AUTOREGRESSIVE:
        values["baseline"] = render.plain_answer_html(strings(run.tokens))
    return pack(**values)


def final_outputs(s: Session, sampling: bool = False) -> tuple:
    n = len(s.trajectory)
    steps = [r.ms for r in s.baseline.iterations]
    ar_ms = sum(steps) / len(steps) if steps else None
    lanes = [lane(LANE_NAMES[m], s.runs[m], s.strings(s.runs[m].tokens), _lane_ms(s, m), True)
             for m in (FOVEA, NO_CORRECTION, AUTOREGRESSIVE) if m in s.runs]
    return pack(
        answer=render.answer_html(s.fovea, s.strings(s.fovea.tokens), flip_marks(s.fovea.iterations), s.text),
        baseline=render.plain_answer_html(s.strings(s.baseline.tokens)),
        metrics=metrics.metrics_html(s.runs, s.timings, sampling=sampling),
        scrubber=gr.Slider(minimum=0, maximum=max(1, n - 1), value=0, step=1, interactive=n > 1),
        focus_plot=plots.focus_shift_figure(s.trajectory, locality=s.locality), filmstrip=filmstrip(s),
        accept_plot=plots.accept_length_figure(s.fovea.iterations),
        hist_plot=plots.accept_histogram_figure(s.fovea.iterations),
        timing_plot=plots.timing_figure(s.fovea.iterations, ar_ms), summary=summary(s),
        compare_html=metrics.comparison_html(s.comparisons), compare_plot=plots.comparison_figure(s.comparisons),
        ood=ood_html(s.world, s.unknown_words), race=race_html(lanes, RACE_NOTE + _timing_note(s)),
        vision=vision_html(s.fovea.iterations, s.text), session=s,
        **dict(zip(FOCUS_OUTPUTS, focus_view(s, 0))))


def _lane_ms(s: Session, method: str) -> float:
    """A finished lane's bar: the method's median timed wall time (the table's), else its live pass's."""
    tps = s.timings.median_tokens_per_s(method)
    return len(s.runs[method].tokens) / tps * 1e3 if tps else s.runs[method].wall_s * 1e3


def _timing_note(s: Session) -> str:
    n = len(s.timings.repeats)
    return (f" Once all have run, each bar is the median wall time of the {n} interleaved timed run(s), the same "
            "runs as the headline and the table." if n else " No timed runs: the bars are the live pass's times.")


def summary(s: Session) -> dict:
    """Machine-readable figures of a request (the API's JSON output, `app.metrics.summary`)."""
    flips = [st for st in flip_marks(s.fovea.iterations)[0].values()]
    return metrics.summary(s.runs, s.timings, question=s.question, image_sha=s.image_sha, drafter_context=s.context,
                           answer=s.fovea.text, baseline_answer=s.baseline.text, focus_steps=len(s.trajectory),
                           finish_reason=s.fovea.finish_reason, accepted_flips=len(flips), imported=s.imported,
                           ood={"coverage": round(s.world.coverage, 4), "in_world": s.world.in_world,
                                "flat": s.world.flat, "unknown_words": round(s.unknown_words, 3)})


def focus_view(s: Session, index: int) -> tuple:
    """(heatmap, caption, tree) for trajectory step `index` of a session."""
    grid = s.memory_grid
    if not s.trajectory:
        it = s.fovea.iterations[-1] if s.fovea.iterations else None
        tree = "" if it is None else render.tree_html(it, s.strings(it.tokens), s.text(it.bonus_token))
        return heatmap_overlay(s.image, None, grid), "No draft state read the visual memory in this run.", tree
    index = min(max(int(index), 0), len(s.trajectory) - 1)
    step = s.trajectory[index]
    it = s.fovea.iterations[step.iteration]
    strings = s.strings(it.tokens)
    caption = step_caption(step, it, strings, index, len(s.trajectory), grid)
    loc = s.locality[index] if index < len(s.locality) else None
    if loc is not None and loc.overlap is not None:
        caption += f"  \nPRR prediction: overlap **{loc.overlap:.2f}**, weighted hit rate **{loc.hit_rate:.2f}**"
    tree = render.tree_html(it, strings, s.text(it.bonus_token), step.node)
    return heatmap_overlay(s.image, step.retrieval, grid), caption, tree


def step_label(s: Session, i: int) -> str:
    """Focus step i's label (filmstrip, GIF frames): its number, K and the token its state proposed from."""
    step = s.trajectory[i]
    token = node_text(s.text(s.fovea.iterations[step.iteration].tokens[step.node])).strip() or "␣"
    return f"step {i + 1}/{len(s.trajectory)} · K={step.retrieval.k} · {token[:8]}"


def filmstrip(s: Session) -> list:
    """Small heatmaps at up to FILMSTRIP_FRAMES evenly spaced focus steps."""
    n = len(s.trajectory)
    picks = range(n) if n <= FILMSTRIP_FRAMES else \
        sorted({round(i * (n - 1) / (FILMSTRIP_FRAMES - 1)) for i in range(FILMSTRIP_FRAMES)})
    return [(heatmap_overlay(s.image, s.trajectory[i].retrieval, s.memory_grid, side=160), step_label(s, i))
            for i in picks]


def export_files(s: Session, folder: Path, image_size: int | None) -> list[str]:
    """trace.json (schema fovea-trace) and focus.gif (the trajectory) written into `folder`."""
    trace = folder / "fovea_trace.json"
    trace.write_text(json.dumps(dump_trace(to_trace_file(s, image_size))))
    gif = folder / "fovea_focus.gif"
    trajectory_gif(s.image, s.trajectory, s.memory_grid, gif, [step_label(s, i) for i in range(len(s.trajectory))])
    return [str(trace), str(gif)]


# ---- the diffusion view -------------------------------------------------------------------------
def diffusion_pack(**values) -> tuple:
    return tuple(values[n] if n in values else gr.skip() for n in DIFFUSION_OUTPUTS)


def diffusion_cleared(notice: str = "", status: str = "decoding…") -> tuple:
    """A diffusion request starts, or was refused: nothing of the previous one stays on screen."""
    return diffusion_pack(diffusion_notice=notice, diffusion_metrics=diffusion_view.speed_html("", {}, None, status),
                          diffusion_stop="", diffusion_grid=diffusion_view.trajectory_html([], [], 0, 1),
                          diffusion_summary=None)


def family_visibility(family: str) -> tuple:
    """(FOVEA's Run, the diffusion controls, FOVEA's outputs, the diffusion view): what each family shows."""
    diffusion = family == DIFFUSION_FAMILY
    return (gr.Button(visible=not diffusion), gr.Column(visible=diffusion), gr.Column(visible=not diffusion),
            gr.Column(visible=diffusion))

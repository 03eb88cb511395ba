"""The Gradio 6 layout and its event wiring; `build_demo(pipeline)` returns the Blocks and
`launch_kwargs()` the theme/css/safety arguments for `launch()`.

No logic here beyond wiring: handlers live in `app.callbacks`, renderers in `app.render`,
`app.focus`, `app.plots` and `app.diffusion_view`. Building the layout loads no model; the pipeline
(and the diffusion model, when there is one) comes in. The decoding-family choice shows either
FOVEA's Run and outputs or the diffusion view's, on the same image and question.
"""
from __future__ import annotations

import functools
import json
import logging
import socket
from pathlib import Path

import gradio as gr

from app import diffusion_view, metrics, plots, render
from app.callbacks import BLOCK_CHOICES, TUNED_BLOCKS, Callbacks
from app.settings import COMPARE_VARIANTS, SETTING_NAMES, context_defaults, settings_panel
from app.views import (DIFFUSION_FAMILY, DIFFUSION_OUTPUTS, FOCUS_OUTPUTS, FOVEA_FAMILY, RACE_NOTE, RUN_OUTPUTS,
                       family_visibility)
from app.vision import race_html, vision_html
from fovea.config import FoveaConfig
from fovea.diffusion import DEFAULT_DIFFUSION_DIR

log = logging.getLogger("fovea.app")

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES_DIR = ROOT / "assets" / "examples"
CSS_PATHS = [Path(__file__).with_name("studio.css"), Path(__file__).with_name("diffusion.css")]
DEFAULT_CONCURRENCY = 2          # requests served at once (decodes take turns on one decode thread)
QUEUE_MAX_SIZE = 64
HEADER = """# FOVEA Studio
Speculative decoding for a vision-language model: a small **drafter** proposes a tree of tokens, the
**target** verifies it in one forward pass. At each draft state the drafter retrieves a few of the image's
visual tokens (its *fovea*) and adds a gated correction. Upload an image, ask a question, press **Run**.

**The bundled model knows only its synthetic world.** It was trained from scratch on generated shape scenes,
rendered text and bar charts; on photos its answers are guesses (the app warns when an upload looks unlike that
world). Decoding is still shown faithfully. For photos, start the app with a real backbone
(`python app.py --target <LLaVA-NeXT or Qwen2.5-VL folder> --drafter <its drafter>`).

Pick **Diffusion with LATCH** under *Decoding family* to answer the same question with a masked-diffusion model
instead, and see each denoising step, the candidate span LATCH watches, and when and why it stopped early."""
# Delegated click handler: the answer HTML re-renders on every streamed round, the root element stays.
TOKEN_CLICK_JS = """
element.addEventListener('click', (e) => {
  const t = e.target.closest('[data-iter]');
  if (!t) return;
  element.querySelectorAll('.fv-selected').forEach((s) => s.classList.remove('fv-selected'));
  t.classList.add('fv-selected');
  trigger('click', {iter: Number(t.dataset.iter), k: Number(t.dataset.k)});
});
"""


def load_examples(folder: Path = EXAMPLES_DIR) -> list[list[str]]:
    """[[image path, question], ...] from folder/examples.json (empty if absent)."""
    index = folder / "examples.json"
    if not index.is_file():
        return []
    return [[str(folder / row["image"]), row["question"]] for row in json.loads(index.read_text())]


def launch_kwargs() -> dict:
    """Arguments for `demo.launch()` shared by app.py and the tests (Gradio 6 takes theme/css here)."""
    # system fonts: the page fetches nothing from font CDNs
    theme = gr.themes.Soft(primary_hue="teal", secondary_hue="amber", font=["ui-sans-serif", "system-ui", "sans-serif"],
                           font_mono=["ui-monospace", "SFMono-Regular", "monospace"])
    return dict(theme=theme, css_paths=CSS_PATHS,
                share=False, ssr_mode=False, show_error=True, footer_links=["api"])


def serve_in_background(demo: gr.Blocks) -> str:
    """Launch on a free local port without blocking (tests, screenshots); returns the URL.
    Stop it with `demo.close()`."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    _, url, _ = demo.launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True,
                            **launch_kwargs())
    return url


def build_demo(pipeline, concurrency_limit: int = DEFAULT_CONCURRENCY,
               initial: FoveaConfig | None = None, warm_up: bool = True, context: str | None = None,
               diffusion=None, diffusion_folder=DEFAULT_DIFFUSION_DIR, diffusion_reason: str = "") -> gr.Blocks:
    """The app over a ready pipeline; `initial` sets what the Settings controls show at load, and
    `context` the drafter context selected (default: the measured fastest of those loaded).
    `diffusion` is the masked-diffusion model of the diffusion view (None: the view says that none was
    found at `diffusion_folder`, and why, and how to train one).
    `warm_up` runs every decode path once first, so the first request is timed like the rest."""
    cap = pipeline.max_new_tokens_cap
    cb = Callbacks(pipeline, cap, context, diffusion, diffusion_folder, diffusion_reason)
    initial = initial or context_defaults(cb.default_context)
    if warm_up:
        log.info("warmed up the %s drafter context(s) in %.1f s", ", ".join(cb.contexts), cb.warm_up(initial))
    with gr.Blocks(title="FOVEA Studio", analytics_enabled=False) as demo:
        session = gr.State(None, time_to_live=3600)   # freed an hour after the last update
        gr.Markdown(HEADER, elem_id="fv-header")
        with gr.Row(equal_height=False):
            with gr.Column(scale=2, min_width=320):
                inputs = _input_column(cap, initial, cb.contexts, cb.default_context)
            with gr.Column(scale=5, min_width=480):
                with gr.Column(elem_id="fv-fovea-view") as fovea_view:
                    c = _output_column()
                with gr.Column(visible=False, elem_id="fv-diffusion-view") as diffusion_panel:
                    c.update(_diffusion_column(cb.diffusion_notice))
        c["session"], c["fovea_view"], c["diffusion_view"] = session, fovea_view, diffusion_panel
        _wire(cb, inputs, c, concurrency_limit)
    demo.queue(default_concurrency_limit=concurrency_limit, max_size=QUEUE_MAX_SIZE)
    return demo


def _input_column(cap: int, initial: FoveaConfig, contexts: tuple[str, ...], context: str) -> dict:
    with gr.Tabs():
        with gr.Tab("Input", id="input"):
            image = gr.Image(type="filepath", label="Image", sources=["upload", "clipboard"], height=260,
                             elem_id="fv-image")
            question = gr.Textbox(label="Question", lines=2, max_lines=4, elem_id="fv-question",
                                  placeholder="e.g. Where is the red square?")
            family = gr.Radio([FOVEA_FAMILY, DIFFUSION_FAMILY], value=FOVEA_FAMILY, label="Decoding family",
                              elem_id="fv-family")
            run = gr.Button("Run", variant="primary", elem_id="fv-run")
            with gr.Column(visible=False, elem_id="fv-diffusion-controls") as diffusion_controls:
                decoding = gr.Dropdown([(label, name) for name, label in diffusion_view.DECODINGS.items()],
                                       value="latch", label="Diffusion decoding", elem_id="fv-decoding",
                                       info="timed against the full schedule and the autoregressive target")
                block_length = gr.Dropdown(list(BLOCK_CHOICES), value=TUNED_BLOCKS, label="Block length",
                                           elem_id="fv-block-length",
                                           info="every decoding of the Run, the full schedule included")
                run_diffusion = gr.Button("Run", variant="primary", elem_id="fv-run-diffusion")
            with gr.Row():
                randoms = {family: gr.Button(f"Random {label}", size="sm", min_width=60,
                                              elem_id=f"fv-random-{family}")
                           for family, label in (("scene", "scene"), ("ocr", "text"), ("chart", "chart"))}
            examples = load_examples()
            if examples:
                gr.Examples(examples=examples, inputs=[image, question], label="Examples", examples_per_page=8)
        with gr.Tab("Settings", id="settings", elem_id="fv-settings-tab"):
            settings = settings_panel(cap, initial, contexts, context)
        with gr.Tab("Trace file", id="trace"):
            gr.Markdown("Export the last run's full trace (JSON, schema `fovea-trace` v1, documented in "
                        "`fovea/trace_io.py`) and its focus trajectory (animated GIF); upload a trace to view it "
                        "without re-running.")
            export = gr.Button("Export trace", elem_id="fv-export")
            exported = gr.File(label="Exported files", file_count="multiple", interactive=False,
                               elem_id="fv-exported")
            upload = gr.File(label="Trace to view (.json)", file_types=[".json"], type="filepath",
                             elem_id="fv-import-file")
            view = gr.Button("View trace", variant="secondary", elem_id="fv-import")
    return dict(image=image, question=question, family=family, run=run, diffusion_controls=diffusion_controls,
                decoding=decoding, block_length=block_length, run_diffusion=run_diffusion, randoms=randoms, settings=settings, export=export,
                exported=exported, upload=upload, view=view)


def _html(value: str = "", **kwargs) -> gr.HTML:
    """A display-only HTML block (no default click handler)."""
    return gr.HTML(value, js_on_load=None, **kwargs)


def _output_column() -> dict:
    c = {"ood": _html("", label="Input notices", elem_id="fv-ood"),
         "metrics": _html(metrics.metrics_html({}, None), label="Metrics", elem_id="fv-metrics")}
    _html(render.legend_html())
    c["answer"] = gr.HTML(render.answer_html(None, []), label="Answer", js_on_load=TOKEN_CLICK_JS,
                          elem_id="fv-answer")
    _html('<div class="fv-label">Autoregressive baseline (same target, same question)</div>')
    c["baseline"] = _html(render.plain_answer_html([], "runs in turn with FOVEA"), label="Baseline answer",
                          elem_id="fv-baseline")
    with gr.Tabs():
        with gr.Tab("Focus", id="focus"):
            _focus_tab(c)
        with gr.Tab("Where vision mattered", id="vision"):
            c["race"] = _html(race_html([], RACE_NOTE), label="Race of the methods", elem_id="fv-race")
            c["vision"] = _html(vision_html([], str), label="Corrected draft states", elem_id="fv-vision")
        with gr.Tab("Focus shifts", id="shifts"):
            c["focus_plot"] = gr.Plot(plots.focus_shift_figure([]), label="Focus shifts", show_label=False,
                                      elem_id="fv-focus-plot")
            c["filmstrip"] = gr.Gallery(label="Focus along the trajectory", columns=6, object_fit="contain",
                                        format="png", elem_id="fv-filmstrip")
        with gr.Tab("Analysis", id="analysis"):
            _analysis_tab(c)
    c["timer"] = gr.Timer(0.8, active=False)
    return c


def _diffusion_column(notice: str) -> dict:
    """The diffusion view: notices (or what is missing), the timed speed table, why decoding stopped, and
    the step x position grid of the recorded decode."""
    d = {"diffusion_notice": _html(notice, label="Diffusion notices", elem_id="fv-diffusion-notice"),
         "diffusion_metrics": _html(diffusion_view.speed_html("", {}, None), label="Diffusion speed",
                                    elem_id="fv-diffusion-metrics"),
         "diffusion_stop": _html("", label="When and why decoding stopped", elem_id="fv-diffusion-stop"),
         "diffusion_grid": _html(diffusion_view.trajectory_html([], [], 0, 1), label="Denoising trajectory",
                                 elem_id="fv-diffusion-grid")}
    with gr.Accordion("Figures of the last diffusion request (the API's JSON output)", open=False):
        d["diffusion_summary"] = gr.JSON(label="Figures of the last diffusion request", show_label=False)
    return d


def _focus_tab(c: dict) -> None:
    with gr.Row():
        with gr.Column(scale=1, min_width=300):
            # buttons=[]: no toolbar over the heatmap's corner
            c["heatmap"] = gr.Image(label="Retrieval weights over the image patches", type="pil", format="png",
                                    interactive=False, show_label=False, height=384, buttons=[],
                                    elem_id="fv-heatmap")
        with gr.Column(scale=1, min_width=300):
            c["scrubber"] = gr.Slider(0, 1, value=0, step=1, label="Draft state (decoding step)",
                                      interactive=False, elem_id="fv-scrubber")
            with gr.Row():
                c["play"] = gr.Button("▶ Play", size="sm")
                c["pause"] = gr.Button("❚❚ Pause", size="sm")
            c["caption"] = gr.Markdown("Run a request to see where the drafter looks.", label="Caption",
                                       elem_id="fv-caption")
    c["tree"] = _html("", label="Draft tree", elem_id="fv-tree")


def _analysis_tab(c: dict) -> None:
    with gr.Row():
        c["accept_plot"] = gr.Plot(plots.accept_length_figure([]), label="Accepted length", show_label=False)
        c["hist_plot"] = gr.Plot(plots.accept_histogram_figure([]), label="Histogram", show_label=False)
    c["timing_plot"] = gr.Plot(plots.timing_figure([]), label="Timing", show_label=False)
    with gr.Row():
        c["variant"] = gr.Dropdown(list(COMPARE_VARIANTS), value=COMPARE_VARIANTS[0], scale=3,
                                   label="Re-run the same request with retrieval variant")
        c["compare"] = gr.Button("Compare", scale=1)
    c["compare_html"] = _html(metrics.comparison_html([]), label="Comparison table", elem_id="fv-compare")
    c["compare_plot"] = gr.Plot(plots.comparison_figure([]), label="Comparison", show_label=False)
    with gr.Accordion("Figures of the last request (the API's JSON output)", open=False):
        c["summary"] = gr.JSON(label="Figures of the last request", show_label=False)


def _wire(cb: Callbacks, i: dict, c: dict, limit: int) -> None:
    """Events: i = input components, c = output components (names as in RUN_OUTPUTS)."""
    run_inputs = [i["image"], i["question"], *i["settings"], c["session"]]
    run_outputs = [c[name] for name in RUN_OUTPUTS]
    # preprocess=False: the image arrives as its upload payload, so unreadable files reach the
    # pipeline's validation (and its message) instead of failing inside gr.Image.preprocess.
    # The UI checks inputs in a fast step first, so a bad input only raises a toast.
    check_args = dict(fn=cb.check, inputs=run_inputs[:-1], outputs=None, preprocess=False, api_name=False,
                      show_progress="hidden")
    run_args = dict(fn=cb.run, inputs=run_inputs, outputs=run_outputs, preprocess=False,
                    concurrency_id="decode", concurrency_limit=limit)
    # a rejected input clears the previous request's results (they belong to another input)
    clear_args = dict(fn=cb.cleared, inputs=None, outputs=run_outputs, api_name=False, show_progress="hidden")
    checked = i["run"].click(**check_args)
    checked.success(**run_args, api_name="run")
    checked.failure(**clear_args)
    _wire_diffusion(cb, i, c, limit, clear_args)
    for family, button in i["randoms"].items():
        button.click(functools.partial(cb.random_example, family), None, [i["image"], i["question"]],
                     api_name=f"random_{family}")
    focus_outputs = [c[name] for name in FOCUS_OUTPUTS]
    # preprocess=False: an out-of-range value gets the app's sentence, not gradio's
    c["scrubber"].change(cb.scrub, [c["scrubber"], c["session"]], focus_outputs, api_name="scrub",
                         show_progress="hidden", concurrency_limit=8, preprocess=False)
    c["answer"].click(cb.click_token, [c["session"]], [c["scrubber"]], api_name=False, show_progress="hidden")
    c["play"].click(cb.play, [c["scrubber"], c["session"]], [c["scrubber"], c["timer"]], api_name=False)
    c["pause"].click(lambda: gr.Timer(active=False), None, c["timer"], api_name=False)
    c["timer"].tick(cb.advance, [c["scrubber"], c["session"]], [c["scrubber"], c["timer"]], api_name=False,
                    show_progress="hidden")
    i["export"].click(cb.export_trace, [c["session"]], [i["exported"]], api_name="export_trace")
    i["view"].click(cb.import_trace, [i["upload"], c["session"]], run_outputs, api_name="import_trace",
                    concurrency_limit=8)
    c["compare"].click(cb.compare, [c["variant"], c["session"]], [c["compare_html"], c["compare_plot"], c["session"]],
                       api_name="compare", concurrency_id="decode", concurrency_limit=limit)


# Submitting the question box (Shift+Enter: it has two lines) presses the Run button of the family shown
# (the other one is hidden)
SUBMIT_JS = """() => {
  const run = [...document.querySelectorAll('#fv-run, #fv-run-diffusion')].find((b) => b.offsetParent !== null);
  if (run) run.click();
}"""


def _wire_diffusion(cb: Callbacks, i: dict, c: dict, limit: int, clear_fovea: dict) -> None:
    """The decoding-family switch, submitting the question box, and the diffusion view's Run. A Run of
    either family is a new request: it clears the other family's results too (they may belong to
    another input), so nothing of an earlier request waits behind the switch."""
    i["family"].change(family_visibility, i["family"], [i["run"], i["diffusion_controls"], c["fovea_view"],
                                                        c["diffusion_view"]], api_name=False, show_progress="hidden")
    i["question"].submit(None, None, None, js=SUBMIT_JS, api_name=False)
    inputs = [i["image"], i["question"], i["decoding"], i["settings"][SETTING_NAMES.index("repeats")],
              i["block_length"]]
    outputs = [c[name] for name in DIFFUSION_OUTPUTS]
    i["run"].click(cb.cleared_diffusion, None, outputs, api_name=False, show_progress="hidden")
    i["run_diffusion"].click(**clear_fovea)
    checked = i["run_diffusion"].click(cb.check_diffusion, inputs, None, preprocess=False, api_name=False,
                                       show_progress="hidden")
    checked.success(cb.run_diffusion, inputs, outputs, preprocess=False, api_name="run_diffusion",
                    concurrency_id="decode", concurrency_limit=limit)
    checked.failure(cb.cleared_diffusion, None, outputs, api_name=False, show_progress="hidden")

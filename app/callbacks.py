"""Event handlers of the app: each validates its input, calls the `fovea` pipeline and hands the
records to the pure renderers in `app.render`, `app.tree`, `app.vision`, `app.focus` and `app.plots`.

Per-user data lives in a `app.session.Session` carried by `gr.State`; the `Callbacks` object only
holds the shared, read-only pipeline (and the diffusion model, when one is loaded: its view is drawn
from the decode's per-step trace by `app.diffusion_view`). Every decode, of every method and repeat, goes through
`_stream` (one decode thread, the same streaming, records timing themselves), so the methods are
timed the same way; the headline comes from repeats during which nothing is rendered. Bad input becomes a `gr.Error` with the library's sentence; any other failure
is logged with its traceback and shown as a short generic message.
"""
from __future__ import annotations

import functools
import html
import logging
import random
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import gradio as gr

from app import diffusion_view, metrics, plots
from app.diffusion_view import DECODINGS, FULL, Decode
from app.focus import step_for_token
from app.session import (AUTOREGRESSIVE, FOVEA, LANE_NAMES, NO_CORRECTION, Session, from_trace_file, image_sha,
                         new_session)
from app.settings import (SETTING_NAMES, SettingsError, config_from_settings, drafter_context, timing_repeats,
                          variant_config)
from app.streaming import BackgroundStream, run_on_decode_thread
from app.timing import Timings, timed_repeats
from app.views import (cleared_outputs, diffusion_cleared, diffusion_pack, export_files, final_outputs, focus_view,
                       lane, live_outputs, ood_html, pack)
from fovea.config import FoveaConfig
from fovea.data import EVAL_SEED_START
from fovea.diffusion import DEFAULT_DIFFUSION_DIR, DiffusionDecodeConfig, diffusion_generate, question_task
from fovea.diffusion.config import BLOCK_LENGTHS, FROZEN_BLOCK_LENGTH, THRESHOLD_BLOCK_LENGTH
from fovea.methods import CONTEXTS, METHODS, Method
from fovea.ood import check_world
from fovea.pipeline import InputError
from fovea.profile import interleaved_order
from fovea.trace_io import TraceFormatError, load_trace

log = logging.getLogger("fovea.app")
STREAM_EVERY_S = 0.08      # at most ~12 UI updates per second while streaming
__all__ = ["Callbacks", "image_sha", "user_errors"]


def lane_methods(context: str) -> dict[str, Method]:
    """The method each lane decodes with in a drafter context (`fovea.methods.CONTEXTS`): FOVEA's drafter
    under the user's settings, its no-correction twin, the target alone."""
    c = CONTEXTS[context]
    return {FOVEA: METHODS[c.fovea], NO_CORRECTION: METHODS[c.twin], AUTOREGRESSIVE: METHODS[AUTOREGRESSIVE]}


@contextmanager
def user_errors(action: str):
    """InputError / SettingsError / TraceFormatError -> gr.Error with their sentence; anything
    else -> logged + generic."""
    try:
        yield
    except gr.Error:
        raise
    except (InputError, SettingsError, TraceFormatError) as err:
        raise gr.Error(html.escape(str(err), quote=False), title="Please check your input",
                       print_exception=False) from None
    except Exception:
        log.exception("unexpected failure while %s", action)
        raise gr.Error(f"Something went wrong while {action}. Please try again; if it keeps happening, "
                       "try another image or question.", print_exception=False) from None


def _image_path(payload) -> object:
    """Raw gr.Image payload (events run with preprocess=False) -> what `validate_image` accepts."""
    if isinstance(payload, dict):
        return payload.get("path")
    return payload


def _step_index(index, steps: int) -> int:
    """The scrubber's raw value (the event skips gradio's checks) -> a focus step, or InputError."""
    last = max(steps - 1, 0)
    try:
        value = float(index or 0)
    except (TypeError, ValueError):
        value = float("nan")
    if not (0 <= value <= last and value == int(value)):
        raise InputError(f"The draft-state scrubber takes a whole number from 0 to {last}; got {index!r}.")
    return int(value)


def _shown_path(folder) -> str:
    """A folder as a message shows it: relative to the working directory when inside it."""
    try:
        return str(Path(folder).resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(folder)


def _drain(gen):
    """Run a generator to its end, dropping what it yields; return its return value."""
    while True:
        try:
            next(gen)
        except StopIteration as stop:
            return stop.value


def _materialized(result):
    """A finished run with every record's lazy tensors converted, on the decode thread, after its
    records timed themselves: the UI then reads it without a torch op (app.streaming)."""
    for record in result.iterations:
        record.materialize()
    return result


# the diffusion view's block-length choice: TUNED_BLOCKS keeps each decoding's tuned length (threshold
# unmasking needs longer blocks than the rest); any other choice puts every decoding of the request,
# the full schedule included, on blocks of that length
TUNED_BLOCKS = 0
BLOCK_CHOICES = ((f"tuned: {FROZEN_BLOCK_LENGTH} (threshold unmasking: {THRESHOLD_BLOCK_LENGTH})", TUNED_BLOCKS),
                 *((str(b), b) for b in BLOCK_LENGTHS))


def block_length_choice(value) -> int | None:
    """The block-length control, checked: None for TUNED_BLOCKS (or absent), else one of BLOCK_LENGTHS."""
    if value is None or value == "":
        return None
    number = None
    if isinstance(value, str) and value.strip().isdigit():
        number = int(value)
    elif isinstance(value, (int, float)) and not isinstance(value, bool) and float(value).is_integer():
        number = int(value)
    if number not in (TUNED_BLOCKS, *BLOCK_LENGTHS):
        raise InputError(f"Choose a block length of {', '.join(map(str, BLOCK_LENGTHS))} (or {TUNED_BLOCKS} for "
                         f"each decoding's tuned length); got {value!r}.")
    return None if number == TUNED_BLOCKS else number


class Callbacks:
    def __init__(self, pipeline, cap: int, context: str | None = None, diffusion=None,
                 diffusion_folder=DEFAULT_DIFFUSION_DIR, diffusion_reason: str = ""):
        self.pipeline = pipeline
        self.cap = cap
        # the masked-diffusion model (a fovea.diffusion.DiffusionVLM) or None, and what to say then
        self.diffusion = diffusion
        diffusion_folder = _shown_path(diffusion_folder)
        self.diffusion_missing = ("" if diffusion is not None else
                                  diffusion_view.missing_model_text(str(diffusion_folder), diffusion_reason))
        self.diffusion_notice = ("" if diffusion is not None else
                                 diffusion_view.missing_model_html(str(diffusion_folder), diffusion_reason))
        # the drafter contexts this pipeline has a FOVEA drafter for; the default one is `context`, else
        # the app's measured fastest where loaded
        self.contexts = tuple(name for name, c in CONTEXTS.items() if c.fovea in pipeline.drafters)
        self.default_context = drafter_context({"drafter": context}, self.contexts)

    def methods_for(self, context: str) -> list[str]:
        """The race in this drafter context: FOVEA, its no-correction twin when loaded, the target alone."""
        lanes = lane_methods(context)
        return [m for m in (FOVEA, NO_CORRECTION) if lanes[m].drafter in self.pipeline.drafters] + [AUTOREGRESSIVE]

    def warm_up(self, config: FoveaConfig) -> float:
        """Serve one whole request per drafter context (live pass, one timed repeat, every renderer), and one
        diffusion request when a diffusion model is loaded, so that no user's first request pays first-call
        costs inside its timing; returns the seconds it took."""
        t0 = time.perf_counter()
        image, question = self.pipeline.random_example("scene", EVAL_SEED_START)
        for context in self.contexts:
            _drain(self._request(image, question, config, 1, context))
        if self.diffusion is not None:
            _drain(self._diffusion_request(image, question, "latch", 1))
        return time.perf_counter() - t0

    def _validate(self, image, question, settings: dict):
        with user_errors("reading your input"):
            img = self.pipeline.validate_image(_image_path(image))
            q = self.pipeline.validate_question(question)
            context = drafter_context(settings, self.contexts, self.default_context)
            cfg = config_from_settings({**settings, "drafter": context}, self.cap)   # its trigger, when absent
            repeats = timing_repeats(settings)
        return img, q, cfg, repeats, context

    def check(self, image, question, *settings) -> None:
        """The UI's fast pre-step: raise the input's gr.Error before any output is touched."""
        self._validate(image, question, dict(zip(SETTING_NAMES, settings)))

    # ---- Run: every method, interleaved repeats, the first repeat streamed live ----------------
    def run(self, image, question, mode, rho, k_min, k_max, fixed_k, depth, top_k, total_tokens, correction,
            correction_depth, sampling, temperature, top_p, seed, max_new_tokens, repeats=None, stop_below=None,
            drafter=None, trigger=None, session=None):
        """Generator over RUN_OUTPUTS tuples. Parameters are named for the API (settings follow
        SETTING_NAMES); the previous session's outputs are cleared first, then replaced."""
        settings = dict(zip(SETTING_NAMES, (mode, rho, k_min, k_max, fixed_k, depth, top_k, total_tokens, correction,
                                             correction_depth, sampling, temperature, top_p, seed, max_new_tokens,
                                             repeats, stop_below, drafter, trigger)))
        img, q, cfg, n_repeats, context = self._validate(image, question, settings)
        yield from self._request(img, q, cfg, n_repeats, context)

    def cleared(self):
        """What a rejected input leaves on screen: nothing of the previous request."""
        return cleared_outputs(status="Press Run to decode.")

    def _request(self, img, q, cfg, n_repeats: int, context: str):
        """The live pass (every method streamed in turn, shown, not timed), then up to `n_repeats`
        interleaved timed repeats with nothing rendered while they run; yields RUN_OUTPUTS tuples."""
        methods = self.methods_for(context)
        yield cleared_outputs(ood_html(check_world(img), self.pipeline.unknown_word_share(q)))
        with user_errors("decoding"):
            first = {}
            for method in methods:
                live = self._live(img, first, method, methods)
                first[method] = yield from self._stream(img, q, cfg, method, live, context)
                yield live(first[method])                 # its whole answer, before the next method starts
            timings = yield from timed_repeats(
                methods, n_repeats, lambda method: _drain(self._stream(img, q, cfg, method, None, context)).tokens_per_s,
                lambda r: pack(metrics=metrics.metrics_html({}, None, status=f"timing run {r + 1} of up to {n_repeats}: "
                                                            "the methods in turn, nothing rendered meanwhile…")))
            session = new_session(img, q, cfg, first, timings, self.pipeline, context)
            yield final_outputs(session, sampling=not cfg.decoding.greedy)

    def _stream(self, img, q, cfg, method: str, live, context: str):
        """One decode of `method` on the shared decode thread; return its GenerationResult.

        live=None (a timed run): the whole decode, records folded into the Accumulator included,
        runs on the decode thread while this thread only waits, so no other thread touches torch
        or the GIL meanwhile (a consumer folding records on its own thread slowed FOVEA by ~60%).
        Otherwise the records stream back and `live(acc)` is yielded at most every STREAM_EVERY_S:
        that pass is shown, never timed."""
        run = lane_methods(context)[method]
        if live is None:
            result = run_on_decode_thread(lambda: _materialized(self.pipeline.generate(img, q, cfg, run)))
            result.method = method
            return result
        acc = self.pipeline.accumulator(run)
        last = 0.0
        stream = self.pipeline.stream(img, q, cfg, run)
        for batch in BackgroundStream(stream, prepare=lambda record: record.materialize()).batches():
            acc.extend(batch)
            if not acc.done and time.perf_counter() - last >= STREAM_EVERY_S:
                last = time.perf_counter()
                yield live(acc)
        if not acc.done:
            raise RuntimeError(f"the {method} stream ended before the run finished")
        result = self.pipeline.result(acc)
        result.method = method
        return result

    def _live(self, img, first: dict, method: str, methods: list[str]):
        """The live view of `method`: the race lanes (finished ones + this one) and its own outputs;
        live(run) takes its Accumulator while it streams, its result once finished."""
        strings = self.pipeline.token_strings

        def live(run) -> tuple:
            lanes = [lane(LANE_NAMES[m], first[m], strings(first[m].tokens), first[m].wall_s * 1e3, True)
                     for m in methods if m in first]
            if method not in first:
                lanes.append(lane(LANE_NAMES[method], run, strings(run.tokens), run.ms, False))
            return live_outputs(self.pipeline, img, method, run, lanes, f"live pass (shown, not timed): "
                                f"{LANE_NAMES[method]}…", strings)
        return live

    # ---- Diffusion: one recorded decode shown, then the decodings timed interleaved ------------
    def check_diffusion(self, image, question, decoding, repeats=None, block_length=TUNED_BLOCKS) -> None:
        """The UI's fast pre-step of a diffusion Run (no model, or a bad input: its gr.Error)."""
        self._validate_diffusion(image, question, decoding, repeats, block_length)

    def run_diffusion(self, image, question, decoding="latch", repeats=None, block_length=TUNED_BLOCKS):
        """Generator over DIFFUSION_OUTPUTS tuples: the chosen diffusion decoding's recorded trajectory,
        then interleaved timed repeats of it, the full schedule and the autoregressive target, all on
        blocks of `block_length` (TUNED_BLOCKS: each decoding's tuned length)."""
        img, q, decoding, n_repeats, block = self._validate_diffusion(image, question, decoding, repeats, block_length)
        yield from self._diffusion_request(img, q, decoding, n_repeats, block)

    def cleared_diffusion(self):
        """What a refused diffusion request leaves on screen: nothing of the previous one."""
        return diffusion_cleared(self.diffusion_notice, status="Press Run to decode.")

    def _validate_diffusion(self, image, question, decoding, repeats, block_length=TUNED_BLOCKS):
        if self.diffusion is None:
            raise gr.Error(html.escape(self.diffusion_missing, quote=False), title="No diffusion model",
                           print_exception=False)
        with user_errors("reading your input"):
            img = self.pipeline.validate_image(_image_path(image))
            q = self.pipeline.validate_question(question)
            if decoding not in DECODINGS:
                raise InputError(f"Choose a diffusion decoding ({', '.join(DECODINGS)}); got {decoding!r}.")
            n_repeats = timing_repeats({"repeats": repeats})
            block = block_length_choice(block_length)
        return img, q, decoding, n_repeats, block

    def _diffusion_request(self, img, q, decoding: str, n_repeats: int, block: int | None = None):
        """The recorded decode (shown, not timed), then up to `n_repeats` interleaved timed repeats of the
        chosen decoding, the full schedule and the autoregressive target, on blocks of `block` (None: each
        decoding's own); yields DIFFUSION_OUTPUTS tuples."""
        model, task = self.diffusion, question_task(q)
        configs = {m: DiffusionDecodeConfig.from_name(m).with_block_length(block) for m in (decoding, FULL)}
        notices = ood_html(check_world(img), self.pipeline.unknown_word_share(q))
        yield diffusion_cleared(notices, "the recorded decode (shown, not timed)…")
        with user_errors("decoding"):
            shown = run_on_decode_thread(lambda: diffusion_generate(model, img, q, configs[decoding], task=task,
                                                                    record=True))
            stop = functools.partial(diffusion_view.stop_html, shown.steps, shown.stopped_by, configs[decoding], task,
                                     model.token_text.pieces, model.eos_id, text=shown.text)
            grid = diffusion_view.trajectory_html(shown.steps, model.token_text.pieces, model.eos_id,
                                                  configs[decoding].schedule.block_length)
            yield diffusion_pack(diffusion_stop=stop(), diffusion_grid=grid)
            methods = list(dict.fromkeys((decoding, FULL, AUTOREGRESSIVE)))
            decodes = {}

            def timed(method: str) -> float:
                decode, tokens_per_s = self._timed_decode(img, q, method, configs, task)
                decodes.setdefault(method, decode)
                return tokens_per_s

            timings = yield from timed_repeats(
                methods, n_repeats, timed, lambda r: diffusion_pack(diffusion_metrics=diffusion_view.speed_html(
                    decoding, {}, None, f"timing run {r + 1} of up to {n_repeats}: the decodings in turn, "
                    "nothing rendered meanwhile…")))
            summary = diffusion_view.summary(decoding, shown.steps, decodes, timings, task=task, question=q,
                                             image_sha=image_sha(img),
                                             block_length=configs[decoding].schedule.block_length)
            yield diffusion_pack(diffusion_notice=notices, diffusion_metrics=diffusion_view.speed_html(
                decoding, decodes, timings), diffusion_stop=stop(full=decodes[FULL]), diffusion_grid=grid,
                diffusion_summary=summary)

    def _timed_decode(self, img, q, method: str, configs: dict, task: str | None) -> tuple[Decode, float]:
        """One timed decode on the decode thread: (its counts, answer tokens per second, prefill included;
        the EOS is not an answer token, as in `python -m fovea.bench --diffusion`)."""
        if method == AUTOREGRESSIVE:
            cfg = FoveaConfig().replace(decoding=dict(max_new_tokens=min(self.diffusion.canvas.length, self.cap)))
            r = run_on_decode_thread(lambda: self.pipeline.generate(img, q, cfg, METHODS[AUTOREGRESSIVE]))
            n = len(r.tokens) - (r.finish_reason == "eos")
            return Decode(r.target_forwards, n, r.finish_reason, r.text.strip()), n / r.wall_s if r.wall_s > 0 else 0.0
        r = run_on_decode_thread(lambda: diffusion_generate(self.diffusion, img, q, configs[method], task=task))
        return Decode(r.nfe, r.answer_tokens, r.stopped_by, r.text), r.answer_tokens / max(r.seconds, 1e-9)

    # ---- Focus: scrubber, token click, player -------------------------------------------------
    def scrub(self, index, session: Session | None):
        if session is None:
            return gr.skip(), "Run a request (or import a trace) first; then the scrubber moves through its focus steps.", gr.skip()
        with user_errors("drawing the focus view"):
            return focus_view(session, _step_index(index, len(session.trajectory)))

    def click_token(self, session: Session | None, evt: gr.EventData):
        """Answer token clicked (data-iter / data-k from the HTML) -> move the scrubber there."""
        data = getattr(evt, "_data", None) or {}
        if session is None or "iter" not in data:
            return gr.skip()
        try:
            iteration, k = int(data["iter"]), int(data["k"])
        except (TypeError, ValueError):
            return gr.skip()
        index = step_for_token(session.trajectory, session.fovea.iterations, iteration, k)
        return gr.skip() if index is None else index

    def play(self, index, session: Session | None):
        """Start the player (from the first step when already at the end)."""
        if session is None or len(session.trajectory) < 2:
            return gr.skip(), gr.skip()
        at_end = index is not None and index >= len(session.trajectory) - 1
        return (0 if at_end else gr.skip()), gr.Timer(active=True)

    def advance(self, index, session: Session | None):
        """Player tick: next step, and stop the timer at the end."""
        if session is None or not session.trajectory or index is None or index >= len(session.trajectory) - 1:
            return gr.skip(), gr.Timer(active=False)
        return int(index) + 1, gr.skip()

    # ---- Analysis: the same request under another variant, timed interleaved ------------------
    def compare(self, variant: str, session: Session | None):
        if session is None:
            raise gr.Error("Run a request first, then compare retrieval modes on it.", print_exception=False)
        if session.imported:
            raise gr.Error("This view is an imported trace; Compare re-runs the request, so press Run first.",
                           print_exception=False)
        with user_errors("running the comparison"):
            cfg = variant_config(session.config, variant)
            timings, run = Timings(), None
            for r in range(max(1, len(session.timings.repeats))):
                for method in interleaved_order([variant, AUTOREGRESSIVE], r):
                    use = cfg if method == variant else session.config
                    result = _drain(self._stream(session.model_image, session.question, use,
                                                 FOVEA if method == variant else AUTOREGRESSIVE, None,
                                                 session.context))
                    timings.add(r, method, result.tokens_per_s)
                    run = run or (result if method == variant else None)
            if not session.comparisons:
                session.comparisons.append(metrics.comparison_row(
                    f"{session.config.retrieval.mode} (your run)", session.fovea, session.timings, FOVEA))
            session.comparisons.append(metrics.comparison_row(variant, run, timings, variant))
            rows = session.comparisons
            return metrics.comparison_html(rows), plots.comparison_figure(rows), session

    # ---- Export / import of a run's full trace ------------------------------------------------
    def export_trace(self, session: Session | None):
        if session is None:
            raise gr.Error("Run a request (or import a trace) first, then export it.", print_exception=False)
        with user_errors("exporting the trace"):
            folder = Path(tempfile.mkdtemp(prefix="fovea-trace-"))
            return export_files(session, folder, self.pipeline.image_size)

    def import_trace(self, file, session: Session | None = None):
        """A trace JSON (uploaded file path) -> every view of that run, without decoding."""
        path = file.get("path") if isinstance(file, dict) else file
        if not path:
            raise gr.Error("Choose a trace file (.json) exported from FOVEA Studio.", print_exception=False)
        with user_errors("reading the trace"):
            try:
                data = Path(path).read_bytes()
                new = from_trace_file(load_trace(data))
            except (OSError, ValueError) as err:
                if isinstance(err, TraceFormatError):
                    raise
                raise TraceFormatError(f"That trace cannot be shown ({err}); export it again from the app.") from None
            return final_outputs(new)

    # ---- Inputs: random generated examples --------------------------------------------------
    def random_example(self, family: str):
        with user_errors("drawing a random example"):
            # held-out seeds: the bundled model never trained on these images
            return self.pipeline.random_example(family, EVAL_SEED_START + random.randrange(10**9))

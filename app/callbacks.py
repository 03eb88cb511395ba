"""Event handlers of the app: each validates its input, calls the `fovea` pipeline and hands
the records to the pure renderers in `app.render`, `app.focus` and `app.plots`.

Per-user data lives in a `Session` carried by `gr.State`; the `Callbacks` object only holds the
shared, read-only pipeline. Bad input becomes a `gr.Error` with the library's sentence; any
other failure is logged with its traceback and shown as a short generic message.
"""
from __future__ import annotations

import hashlib
import html
import logging
import random
import time
from contextlib import contextmanager
from dataclasses import dataclass, field

import gradio as gr
from PIL import Image

from app import plots, render
from app.focus import FocusStep, focus_trajectory, heatmap_overlay, step_caption, step_for_token
from app.settings import SETTING_NAMES, SettingsError, config_from_settings, variant_config
from app.streaming import BackgroundStream
from fovea.config import FoveaConfig
from fovea.data import EVAL_SEED_START
from fovea.pipeline import InputError
from fovea.trace import GenerationResult, IterationTrace

log = logging.getLogger("fovea.app")
STREAM_EVERY_S = 0.08      # at most ~12 UI updates per second while streaming
FILMSTRIP_FRAMES = 12
# outputs of `run`, in order; `app.ui` builds components under these names
RUN_OUTPUTS = ("answer", "baseline", "metrics", "heatmap", "caption", "tree", "scrubber", "focus_plot",
               "filmstrip", "accept_plot", "hist_plot", "timing_plot", "summary", "compare_html",
               "compare_plot", "session")
FOCUS_OUTPUTS = ("heatmap", "caption", "tree")


@dataclass
class Session:
    """Everything one user's last request produced (kept in gr.State, never shared)."""
    image: Image.Image                  # validated RGB input
    question: str
    config: FoveaConfig
    fovea: GenerationResult
    baseline: GenerationResult
    strings: list[str]                  # display text of fovea.tokens
    trajectory: list[FocusStep]
    image_sha: str                      # identifies the input in the API summary
    comparisons: list[dict] = field(default_factory=list)


@contextmanager
def user_errors(action: str):
    """InputError / SettingsError -> gr.Error with their sentence; anything else -> logged + generic."""
    try:
        yield
    except gr.Error:
        raise
    except (InputError, SettingsError) as err:
        raise gr.Error(html.escape(str(err), quote=False), title="Please check your input",
                       print_exception=False) from None
    except Exception:
        log.exception("unexpected failure while %s", action)
        raise gr.Error(f"Something went wrong while {action}. Please try again; if it keeps happening, "
                       "try another image or question.", print_exception=False) from None


def _pack(names: tuple[str, ...], **values) -> tuple:
    return tuple(values[n] if n in values else gr.skip() for n in names)


def image_sha(image: Image.Image) -> str:
    return hashlib.sha256(image.tobytes()).hexdigest()[:16]


def _image_path(payload) -> object:
    """Raw gr.Image payload (events run with preprocess=False) -> what `validate_image` accepts."""
    if isinstance(payload, dict):
        return payload.get("path")
    return payload


class Callbacks:
    def __init__(self, pipeline, cap: int):
        self.pipeline = pipeline
        self.cap = cap

    def _strings(self, ids: list[int]) -> list[str]:
        return render.display_strings(ids, self.pipeline.token_strings(ids))

    def _validate(self, image, question, settings: dict):
        with user_errors("reading your input"):
            img = self.pipeline.validate_image(_image_path(image))
            q = self.pipeline.validate_question(question)
            cfg = config_from_settings(settings, self.cap)
        return img, q, cfg

    def check(self, image, question, *settings) -> None:
        """The UI's fast pre-step: raise the input's gr.Error before any output is touched
        (an error in `run` itself would mark every output component as failed)."""
        self._validate(image, question, dict(zip(SETTING_NAMES, settings)))

    # ---- Run: FOVEA streamed, then the autoregressive baseline, then the speedup ----------
    def run(self, image, question, mode, rho, k_min, k_max, fixed_k, depth, top_k, total_tokens, correction,
            correction_depth, sampling, temperature, top_p, seed, max_new_tokens, session=None):
        """Generator over RUN_OUTPUTS tuples. Parameters are named for the API (settings follow
        SETTING_NAMES); the previous session is replaced by the new one."""
        settings = dict(mode=mode, rho=rho, k_min=k_min, k_max=k_max, fixed_k=fixed_k, depth=depth, top_k=top_k,
                        total_tokens=total_tokens, correction=correction, correction_depth=correction_depth,
                        sampling=sampling, temperature=temperature, top_p=top_p, seed=seed,
                        max_new_tokens=max_new_tokens)
        img, q, cfg = self._validate(image, question, settings)
        with user_errors("decoding"):
            fovea = yield from self._stream(img, q, cfg, "fovea", self._live_fovea(img))
            fovea_stats = render.stats_from_result(fovea)
            baseline = yield from self._stream(img, q, cfg, "autoregressive", self._live_baseline(fovea_stats))
            session = Session(img, q, cfg, fovea, baseline, self._strings(fovea.tokens),
                              focus_trajectory(fovea.iterations), image_sha(img))
            yield self._final_outputs(session)

    def _stream(self, img, q, cfg, method: str, live):
        """Fold one decode's records into an Accumulator, yielding `live(acc)` at most every
        STREAM_EVERY_S while it runs; return its GenerationResult. The decoder runs in its own
        thread and each record times itself, so rendering never slows or inflates the figures."""
        acc = self.pipeline.accumulator(method)
        last = 0.0
        for batch in BackgroundStream(self.pipeline.stream(img, q, cfg, method=method)).batches():
            acc.extend(batch)
            if not acc.done and time.perf_counter() - last >= STREAM_EVERY_S:
                last = time.perf_counter()
                yield live(acc)
        if not acc.done:
            raise RuntimeError(f"the {method} stream ended before the run finished")
        return self.pipeline.result(acc)

    def _live_fovea(self, img):
        def live(acc) -> tuple:
            stats = render.stats_from(acc)
            return _pack(RUN_OUTPUTS, answer=render.answer_html(acc.rounds, self._strings(acc.tokens)),
                         metrics=render.metrics_html(stats, None), summary=render.summary(stats, None),
                         **self._live_focus(img, acc.rounds))
        return live

    def _live_baseline(self, fovea_stats: render.RunStats):
        def live(acc) -> tuple:
            stats = render.stats_from(acc)
            return _pack(RUN_OUTPUTS, baseline=render.plain_answer_html(self._strings(acc.tokens)),
                         metrics=render.metrics_html(fovea_stats, stats), summary=render.summary(fovea_stats, stats))
        return live

    def _live_focus(self, img, rounds: list) -> dict:
        """Heatmap + tree of the newest round while streaming."""
        steps = focus_trajectory(rounds[-1:])
        if not steps:
            return {}
        it = rounds[-1]
        strings = self._strings(it.tokens)
        return {"heatmap": heatmap_overlay(img, steps[-1].retrieval, self.pipeline.memory_grid),
                "caption": step_caption(steps[-1], it, strings, 0, 1, self.pipeline.memory_grid),
                "tree": render.tree_html(it, strings, self._strings([it.bonus_token])[0])}

    def _final_outputs(self, s: Session) -> tuple:
        f, b = render.stats_from_result(s.fovea), render.stats_from_result(s.baseline)
        n = len(s.trajectory)
        steps = [r.ms for r in s.baseline.iterations]
        ar_ms = sum(steps) / len(steps) if steps else None
        return _pack(
            RUN_OUTPUTS, answer=render.answer_html(s.fovea.iterations, s.strings),
            baseline=render.plain_answer_html(self._strings(s.baseline.tokens)),
            metrics=render.metrics_html(f, b),
            scrubber=gr.Slider(minimum=0, maximum=max(1, n - 1), value=0, step=1, interactive=n > 1),
            focus_plot=plots.focus_shift_figure(s.trajectory), filmstrip=self._filmstrip(s),
            accept_plot=plots.accept_length_figure(s.fovea.iterations),
            hist_plot=plots.accept_histogram_figure(s.fovea.iterations),
            timing_plot=plots.timing_figure(s.fovea.iterations, ar_ms),
            summary=render.summary(f, b, question=s.question, image_sha=s.image_sha, answer=s.fovea.text,
                                   baseline_answer=s.baseline.text, focus_steps=n,
                                   finish_reason=s.fovea.finish_reason),
            compare_html=render.comparison_html([]), compare_plot=plots.comparison_figure([]), session=s,
            **dict(zip(FOCUS_OUTPUTS, self._focus_view(s, 0))))

    # ---- Focus: scrubber, token click, player -------------------------------------------------
    def _focus_view(self, s: Session, index: int) -> tuple:
        """(heatmap, caption, tree) for trajectory step `index` of a session."""
        grid = self.pipeline.memory_grid
        if not s.trajectory:
            tree = self._tree(s.fovea.iterations[-1]) if s.fovea.iterations else ""
            return heatmap_overlay(s.image, None, grid), "No draft state read the visual memory in this run.", tree
        index = min(max(int(index), 0), len(s.trajectory) - 1)
        step = s.trajectory[index]
        it = s.fovea.iterations[step.iteration]
        strings = self._strings(it.tokens)
        caption = step_caption(step, it, strings, index, len(s.trajectory), grid)
        return heatmap_overlay(s.image, step.retrieval, grid), caption, self._tree(it, step.node, strings)

    def _tree(self, it: IterationTrace, selected: int | None = None, strings: list[str] | None = None) -> str:
        strings = strings or self._strings(it.tokens)
        return render.tree_html(it, strings, self._strings([it.bonus_token])[0], selected)

    def scrub(self, index, session: Session | None):
        if session is None:
            return _pack(FOCUS_OUTPUTS)
        with user_errors("drawing the focus view"):
            return self._focus_view(session, index or 0)

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

    def _filmstrip(self, s: Session) -> list[tuple[Image.Image, str]]:
        """Small heatmaps at up to FILMSTRIP_FRAMES evenly spaced focus steps."""
        n = len(s.trajectory)
        picks = range(n) if n <= FILMSTRIP_FRAMES else \
            sorted({round(i * (n - 1) / (FILMSTRIP_FRAMES - 1)) for i in range(FILMSTRIP_FRAMES)})
        frames = []
        for i in picks:
            step = s.trajectory[i]
            token = self._strings([s.fovea.iterations[step.iteration].tokens[step.node]])[0].strip() or "␣"
            frames.append((heatmap_overlay(s.image, step.retrieval, self.pipeline.memory_grid, side=160),
                           f"{i + 1} · K={step.retrieval.k} · {token[:8]}"))
        return frames

    # ---- Analysis: the same request under another retrieval variant ---------------------------
    def compare(self, variant: str, session: Session | None):
        if session is None:
            raise gr.Error("Run a request first, then compare retrieval modes on it.", print_exception=False)
        with user_errors("running the comparison"):
            cfg = variant_config(session.config, variant)
            result = self.pipeline.generate(session.image, session.question, cfg, method="fovea")
            base = render.stats_from_result(session.baseline)
            if not session.comparisons:
                session.comparisons.append(render.comparison_row(
                    f"{session.config.retrieval.mode} (your run)", render.stats_from_result(session.fovea), base))
            session.comparisons.append(render.comparison_row(variant, render.stats_from_result(result), base))
            rows = session.comparisons
            return render.comparison_html(rows), plots.comparison_figure(rows), session

    # ---- Inputs: random generated examples --------------------------------------------------
    def random_example(self, family: str):
        with user_errors("drawing a random example"):
            # held-out seeds: the bundled model never trained on these images
            return self.pipeline.random_example(family, EVAL_SEED_START + random.randrange(10**9))

"""The Settings tab: its Gradio controls and the pure mapping from their values to a
`fovea.config.FoveaConfig`.

`config_from_settings` never trusts its input (API callers can send anything) and raises
`SettingsError` with a sentence saying which control to change. Defaults come from
`FoveaConfig()` so the app and the library agree.
"""
from __future__ import annotations

import math

import gradio as gr

from fovea.config import RETRIEVAL_MODES, FoveaConfig

MAX_NEW_TOKENS_CAP = 256
MAX_REPEATS = 15
DEFAULT_REPEATS = 7        # interleaved timing repeats per Run (at most; see app.timing.TIMING_BUDGET_S)
# Every answer the bundled model was trained to give fits in 96 tokens (a six-shape count walk is up to 92,
# a six-shape description up to 68); the library's default of 64 would cut the longest ones short.
APP_MAX_NEW_TOKENS = 96
DEFAULTS = FoveaConfig().replace(decoding=dict(max_new_tokens=APP_MAX_NEW_TOKENS))
# order of the controls, i.e. of the callback arguments that carry them (new ones go last: API callers
# that pass arguments by position keep working)
SETTING_NAMES = ("mode", "rho", "k_min", "k_max", "fixed_k", "depth", "top_k", "total_tokens",
                 "correction", "correction_depth", "sampling", "temperature", "top_p", "seed", "max_new_tokens",
                 "repeats", "stop_below", "drafter", "trigger")

# What the drafters' KV cache holds of the prompt, and the correction each context was measured best with
# on the benchmark (assets/results/bench, fovea.bench.methods): the full-context drafter corrects depth
# <= 1 (the paper); the text-context drafter, whose cache skips the image, reads it at every level where
# its head is unsure (correction.trigger, a deviation: fovea_text_triggered).
DRAFTER_CONTEXTS = {"full": "full: the image in the drafter's cache",
                    "text": "text: a text-only drafter cache, the image read on demand"}
MAX_CORRECTION_DEPTH = 15          # the deepest level of a 16-deep tree: "every level"
CONTEXT_CORRECTION = {"full": dict(max_depth=DEFAULTS.correction.max_depth, trigger=0.0),
                      "text": dict(max_depth=MAX_CORRECTION_DEPTH, trigger=0.7)}
# the app's default: the fastest lossless FOVEA configuration measured on the shipped drafters (the runs
# and their numbers: README, "Speed and ablations"; assets/results/bench and bench_ranking)
DEFAULT_CONTEXT = "full"


def context_defaults(context: str, config: FoveaConfig = DEFAULTS) -> FoveaConfig:
    """`config` with the correction that drafter context was measured best with."""
    return config.replace(correction=CONTEXT_CORRECTION[context])


class SettingsError(ValueError):
    """A settings value the decoder cannot use; the message says what to change."""


def settings_panel(cap: int = MAX_NEW_TOKENS_CAP, initial: FoveaConfig = DEFAULTS, contexts=("full",),
                   context: str = "full") -> list[gr.components.Component]:
    """Build the controls inside the current Blocks context (the Settings tab), showing `initial` and
    the drafter context `context` (one of `contexts`, those the pipeline has drafters for); returns
    them in SETTING_NAMES order. Picking a context moves the correction controls to its measured best."""
    r, c, t, d = initial.retrieval, initial.correction, initial.tree, initial.decoding
    with gr.Group():
        with gr.Row():
            drafter = gr.Radio([(DRAFTER_CONTEXTS[x], x) for x in contexts], value=context, label="Drafter cache",
                               visible=len(contexts) > 1, elem_id="fv-drafter",
                               info="what the drafters' KV cache holds of the prompt; FOVEA's retrieval reads "
                                    "the image's visual memory either way")
        with gr.Row():
            mode = gr.Dropdown(list(RETRIEVAL_MODES), value=r.mode, label="Retrieval mode")
            max_new = gr.Slider(1, cap, value=min(d.max_new_tokens, cap), step=1, label="Max new tokens")
        with gr.Row():
            rho = gr.Slider(0.05, 1.0, value=r.rho, step=0.05, label="ρ (cumulative mass)")
            k_min = gr.Slider(1, 64, value=r.k_min, step=1, label="K_min")
            k_max = gr.Slider(1, 64, value=r.k_max, step=1, label="K_max")
            fixed_k = gr.Slider(1, 64, value=r.fixed_k, step=1, label="K (fixed / random / static)")
        with gr.Row():
            depth = gr.Slider(1, 16, value=t.depth, step=1, label="Tree depth")
            top_k = gr.Slider(1, 8, value=t.top_k, step=1, label="Tree top-k")
            total = gr.Slider(1, 64, value=t.total_tokens, step=1, label="Tree budget (nodes)")
            stop = gr.Slider(0.0, 0.95, value=t.stop_below, step=0.05, label="Stop below (dynamic depth)",
                             info="stop drafting below a level whose best path is less likely than this; "
                                  "0 = always draft every level")
        with gr.Row():
            correction = gr.Checkbox(value=c.enabled, label="Gated correction")
            corr_depth = gr.Slider(0, MAX_CORRECTION_DEPTH, value=min(c.max_depth, MAX_CORRECTION_DEPTH), step=1,
                                   label="Correction depth", info=f"the deepest tree level corrected (root = 0; "
                                                                  f"{MAX_CORRECTION_DEPTH} = every level)")
            trigger = gr.Slider(0.0, 1.0, value=c.trigger, step=0.05, label="Correct only where unsure",
                                info="correct a draft state only when its uncorrected top-1 probability is "
                                     "below this; 0 = always")
        with gr.Row():
            sampling = gr.Radio(["greedy", "sampling"], value="greedy" if d.greedy else "sampling", label="Decoding")
            temperature = gr.Slider(0.05, 2.0, value=d.temperature, step=0.05, label="Temperature")
            top_p = gr.Slider(0.05, 1.0, value=d.top_p, step=0.05, label="Top-p")
            seed = gr.Number(value=d.seed, precision=0, label="Seed")
        repeats = gr.Slider(1, MAX_REPEATS, value=DEFAULT_REPEATS, step=1, label="Timing repeats",
                            info="each method runs up to this many times, interleaved (at least 3, then until "
                                 "the timing budget is spent); the speedup is their median")
    gr.Markdown("Greedy decoding is lossless: FOVEA's answer equals the target's own, token for token. "
                "Speculative sampling preserves the target's output distribution, not its exact tokens, so with "
                "sampling the two answers are different valid samples.", elem_classes=["fv-note"])
    controls = [mode, rho, k_min, k_max, fixed_k, depth, top_k, total, correction, corr_depth,
                sampling, temperature, top_p, seed, max_new, repeats, stop, drafter, trigger]
    drafter.change(lambda x: (CONTEXT_CORRECTION[x]["max_depth"], CONTEXT_CORRECTION[x]["trigger"])
                   if x in CONTEXT_CORRECTION else (gr.skip(), gr.skip()), drafter, [corr_depth, trigger],
                   api_name=False, show_progress="hidden")
    return controls


def drafter_context(values: dict, available=tuple(DRAFTER_CONTEXTS), default: str | None = None) -> str:
    """The "Drafter cache" control, checked against the contexts this pipeline has drafters for
    (absent = `default`, else the app's default where available, else the first)."""
    context = values.get("drafter")
    if context is None:
        return default or (DEFAULT_CONTEXT if DEFAULT_CONTEXT in available else available[0])
    if context not in available:
        raise SettingsError(f"Drafter cache must be one of: {', '.join(available)}; got {context!r}.")
    return context


def timing_repeats(values: dict) -> int:
    """The "Timing repeats" control, checked (1..MAX_REPEATS; absent = the default)."""
    if values.get("repeats") is None:
        return DEFAULT_REPEATS
    return _number(values, "repeats", "Timing repeats", 1, MAX_REPEATS)


def _number(values: dict, name: str, label: str, lo: float, hi: float, integer: bool = True):
    raw = values.get(name)
    try:
        x = float(raw)
    except (TypeError, ValueError):
        raise SettingsError(f"{label} must be a number; set it in the Settings panel.") from None
    if not math.isfinite(x) or not lo <= x <= hi or (integer and x != int(x)):
        kind = "a whole number" if integer else "a number"
        raise SettingsError(f"{label} must be {kind} between {lo:g} and {hi:g}; got {raw}. "
                            "Adjust it in the Settings panel.")
    return int(x) if integer else x


def _trigger(values: dict) -> float:
    """The "Correct only where unsure" control; absent (an API caller that predates it): the measured
    value of the requested drafter context."""
    if values.get("trigger") is None:
        context = values.get("drafter") if values.get("drafter") in CONTEXT_CORRECTION else DEFAULT_CONTEXT
        return CONTEXT_CORRECTION[context]["trigger"]
    return _number(values, "trigger", "Correct only where unsure", 0.0, 1.0, integer=False)


def config_from_settings(values: dict, cap: int = MAX_NEW_TOKENS_CAP) -> FoveaConfig:
    """Settings values (keyed by SETTING_NAMES) -> FoveaConfig, or SettingsError."""
    mode = values.get("mode")
    if mode not in RETRIEVAL_MODES:
        raise SettingsError(f"Retrieval mode must be one of: {', '.join(RETRIEVAL_MODES)}.")
    k_min = _number(values, "k_min", "K_min", 1, 64)
    k_max = _number(values, "k_max", "K_max", 1, 64)
    if k_min > k_max:
        raise SettingsError(f"K_min ({k_min}) is larger than K_max ({k_max}); lower K_min or raise K_max.")
    greedy = values.get("sampling", "greedy") != "sampling"
    try:
        return DEFAULTS.replace(
            retrieval=dict(mode=mode, rho=_number(values, "rho", "ρ", 0.01, 1.0, integer=False), k_min=k_min,
                           k_max=k_max, fixed_k=_number(values, "fixed_k", "K", 1, 64)),
            correction=dict(enabled=bool(values.get("correction", True)),
                            max_depth=_number(values, "correction_depth", "Correction depth", 0,
                                              MAX_CORRECTION_DEPTH),
                            trigger=_trigger(values)),
            tree=dict(depth=_number(values, "depth", "Tree depth", 1, 16),
                      top_k=_number(values, "top_k", "Tree top-k", 1, 16),
                      total_tokens=_number(values, "total_tokens", "Tree budget", 1, 128),
                      stop_below=DEFAULTS.tree.stop_below if values.get("stop_below") is None else
                      _number(values, "stop_below", "Stop below", 0.0, 0.99, integer=False)),
            decoding=dict(max_new_tokens=_number(values, "max_new_tokens", "Max new tokens", 1, cap),
                          greedy=greedy,
                          temperature=_number(values, "temperature", "Temperature", 0.01, 5.0, integer=False),
                          top_p=_number(values, "top_p", "Top-p", 0.01, 1.0, integer=False),
                          seed=_number(values, "seed", "Seed", 0, 2**31 - 1)),
        )
    except ValueError as err:
        if isinstance(err, SettingsError):
            raise
        raise SettingsError(f"Those settings do not fit together ({err}); adjust them in the Settings panel.") from err


def variant_config(config: FoveaConfig, variant: str) -> FoveaConfig:
    """The same config under another retrieval mode, or with the correction switched off
    (`variant == "no correction"`), for the Analysis tab's comparison."""
    if variant == "no correction":
        return config.replace(correction=dict(enabled=False))
    if variant not in RETRIEVAL_MODES:
        raise SettingsError(f"Pick a variant from the list: {', '.join(COMPARE_VARIANTS)}.")
    return config.replace(retrieval=dict(mode=variant))


COMPARE_VARIANTS = ("dense", "fixed", "random", "static", "no correction", *[m for m in RETRIEVAL_MODES
                    if m not in ("dense", "fixed", "random", "static")])

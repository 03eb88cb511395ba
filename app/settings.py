"""The Settings tab: one schema of its numeric controls (`NUMBERS`: name, label, step, help and the
`FoveaConfig` field it sets), from which the Gradio controls, the validation of every request and the
`FoveaConfig` are all built. A control's default is its field's, and its range is the range the library
declares for that field (`fovea.config.range_of`) unless the app narrows it, so neither is written twice.

`config_from_settings` never trusts its input (API callers can send anything) and raises
`SettingsError` with a sentence saying which control to change. Defaults come from
`FoveaConfig()` (the library's) except the app's longer answer budget; the drafter contexts and
their measured corrections come from `fovea.methods.CONTEXTS`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import gradio as gr

from fovea.config import RETRIEVAL_MODES, CorrectionConfig, FoveaConfig, TreeConfig, range_of
from fovea.methods import CONTEXTS
from fovea.pipeline import MAX_NEW_TOKENS_CAP

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
MAX_CORRECTION_DEPTH = range_of(TreeConfig, "depth").hi - 1    # the deepest level of the deepest tree: "every level"


class SettingsError(ValueError):
    """A settings value the decoder cannot use; the message says what to change."""


@dataclass(frozen=True)
class Number:
    """One numeric control: its API name, label, the "section.field" of FoveaConfig it sets (where its
    default is read), step (a whole step: a whole number) and help. Its range is the library's for that
    field on the step grid (an open end one step inward); `lo` / `hi` set the app's own where the library
    has no such bound or the app offers less."""
    name: str
    label: str
    field: str = ""
    step: float = 1
    info: str = ""
    lo: float | None = None
    hi: float | None = None

    def __post_init__(self) -> None:
        if self.lo is None or self.hi is None:
            section, name = self.field.split(".")
            lo, hi = range_of(type(getattr(DEFAULTS, section)), name).on_grid(self.step)
            object.__setattr__(self, "lo", lo if self.lo is None else self.lo)     # frozen: set once, here
            object.__setattr__(self, "hi", hi if self.hi is None else self.hi)

    @property
    def integer(self) -> bool:
        return float(self.step).is_integer()

    def default(self, config: FoveaConfig):
        section, name = self.field.split(".")
        return getattr(getattr(config, section), name)

    def slider(self, config: FoveaConfig, hi: float | None = None, value=None) -> gr.Slider:
        hi = self.hi if hi is None else hi
        value = self.default(config) if value is None else value
        return gr.Slider(self.lo, hi, value=min(max(value, self.lo), hi), step=self.step, label=self.label,
                         info=self.info or None)

    def read(self, values: dict, hi: float | None = None):
        """The value sent for this control, checked against its range, or SettingsError."""
        hi, raw = self.hi if hi is None else hi, values.get(self.name)
        try:
            x = float(raw)
        except (TypeError, ValueError):
            raise SettingsError(f"{self.label} must be a number; set it in the Settings panel.") from None
        if not math.isfinite(x) or not self.lo <= x <= hi or (self.integer and x != int(x)):
            kind, bounds = ("a whole number", (f"{self.lo:,}", f"{hi:,}")) if self.integer else \
                ("a number", (f"{self.lo:g}", f"{hi:g}"))
            raise SettingsError(f"{self.label} must be {kind} between {bounds[0]} and {bounds[1]}; got {raw}. "
                                "Adjust it in the Settings panel.")
        return int(x) if self.integer else x


NUMBERS = {n.name: n for n in [
    Number("rho", "ρ (cumulative mass)", "retrieval.rho", 0.05),
    Number("k_min", "K_min", "retrieval.k_min", hi=64),
    Number("k_max", "K_max", "retrieval.k_max", hi=64),
    Number("fixed_k", "K (fixed / random / static)", "retrieval.fixed_k", hi=64),
    Number("depth", "Tree depth", "tree.depth"),
    Number("top_k", "Tree top-k", "tree.top_k"),
    Number("total_tokens", "Tree budget (nodes)", "tree.total_tokens"),
    Number("stop_below", "Stop below (dynamic depth)", "tree.stop_below", 0.05,
           "stop drafting below a level whose best path is less likely than this; 0 = always draft every level"),
    Number("correction_depth", "Correction depth", "correction.max_depth", 1,
           f"the deepest tree level corrected (root = 0; {MAX_CORRECTION_DEPTH} = every level)",
           lo=0, hi=MAX_CORRECTION_DEPTH),
    Number("trigger", "Correct only where unsure", "correction.trigger", 0.05,
           "correct a draft state only when its uncorrected top-1 probability is below this; 0 = always"),
    Number("temperature", "Temperature", "decoding.temperature", 0.05, lo=0.05, hi=2.0),
    Number("top_p", "Top-p", "decoding.top_p", 0.05),
    Number("seed", "Seed", "decoding.seed", lo=0, hi=2**31 - 1),
    Number("max_new_tokens", "Max new tokens", "decoding.max_new_tokens", hi=MAX_NEW_TOKENS_CAP),
    Number("repeats", "Timing repeats", "", 1,
           "each method runs up to this many times, interleaved (at least 3, then until the timing budget is "
           "spent); the speedup is their median", lo=1, hi=MAX_REPEATS),
]}

# What the drafters' KV cache holds of the prompt, and the correction each context was measured best with
# (fovea.methods.CONTEXTS); the correction depth shown is capped at the deepest level a tree can have
DRAFTER_CONTEXTS = {name: c.label for name, c in CONTEXTS.items()}
CONTEXT_CORRECTION = {name: dict(max_depth=min(c.correction.get("max_depth", DEFAULTS.correction.max_depth),
                                               MAX_CORRECTION_DEPTH),
                                 trigger=c.correction.get("trigger", CorrectionConfig().trigger))
                      for name, c in CONTEXTS.items()}
# the app's default: the fastest lossless FOVEA configuration measured on the shipped drafters (the runs
# and their numbers: README, "Results"; assets/results/bench and bench_ranking)
DEFAULT_CONTEXT = "full"


def context_defaults(context: str, config: FoveaConfig = DEFAULTS) -> FoveaConfig:
    """`config` with the correction that drafter context was measured best with."""
    return config.replace(correction=CONTEXT_CORRECTION[context])


def settings_panel(cap: int = MAX_NEW_TOKENS_CAP, initial: FoveaConfig = DEFAULTS, contexts=("full",),
                   context: str = "full") -> list[gr.components.Component]:
    """Build the controls inside the current Blocks context (the Settings tab), showing `initial` and
    the drafter context `context` (one of `contexts`, those the pipeline has drafters for); returns
    them in SETTING_NAMES order. Picking a context moves the correction controls to its measured best."""
    def slider(name: str) -> gr.Slider:
        return NUMBERS[name].slider(initial)
    with gr.Group():
        with gr.Row():
            drafter = gr.Radio([(DRAFTER_CONTEXTS[x], x) for x in contexts], value=context, label="Drafter cache",
                               visible=len(contexts) > 1, elem_id="fv-drafter",
                               info="what the drafters' KV cache holds of the prompt; FOVEA's retrieval reads "
                                    "the image's visual memory either way")
        with gr.Row():
            mode = gr.Dropdown(list(RETRIEVAL_MODES), value=initial.retrieval.mode, label="Retrieval mode")
            max_new = NUMBERS["max_new_tokens"].slider(initial, hi=cap)
        with gr.Row():
            rho, k_min, k_max, fixed_k = (slider(x) for x in ("rho", "k_min", "k_max", "fixed_k"))
        with gr.Row():
            depth, top_k, total, stop = (slider(x) for x in ("depth", "top_k", "total_tokens", "stop_below"))
        with gr.Row():
            correction = gr.Checkbox(value=initial.correction.enabled, label="Gated correction")
            corr_depth, trigger = slider("correction_depth"), slider("trigger")
        with gr.Row():
            sampling = gr.Radio(["greedy", "sampling"], value="greedy" if initial.decoding.greedy else "sampling",
                                label="Decoding")
            temperature, top_p = slider("temperature"), slider("top_p")
            seed = gr.Number(value=initial.decoding.seed, precision=0, label=NUMBERS["seed"].label,
                             minimum=NUMBERS["seed"].lo, maximum=NUMBERS["seed"].hi)
        repeats = NUMBERS["repeats"].slider(initial, value=DEFAULT_REPEATS)
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
    """The "Timing repeats" control, checked (absent = the default)."""
    return DEFAULT_REPEATS if values.get("repeats") is None else NUMBERS["repeats"].read(values)


def _read(values: dict, name: str, cap: int = MAX_NEW_TOKENS_CAP):
    """A numeric control's value, checked; absent (an API caller that predates it): its default, and for
    the trigger the measured value of the requested drafter context."""
    if values.get(name) is not None:
        return NUMBERS[name].read(values, hi=cap if name == "max_new_tokens" else None)
    if name == "trigger":
        context = values.get("drafter") if values.get("drafter") in CONTEXT_CORRECTION else DEFAULT_CONTEXT
        return CONTEXT_CORRECTION[context]["trigger"]
    return NUMBERS[name].default(DEFAULTS)


def config_from_settings(values: dict, cap: int = MAX_NEW_TOKENS_CAP) -> FoveaConfig:
    """Settings values (keyed by SETTING_NAMES) -> FoveaConfig, or SettingsError."""
    mode = values.get("mode")
    if mode not in RETRIEVAL_MODES:
        raise SettingsError(f"Retrieval mode must be one of: {', '.join(RETRIEVAL_MODES)}.")
    got = {name: _read(values, name, cap) for name in NUMBERS if name != "repeats"}
    if got["k_min"] > got["k_max"]:
        raise SettingsError(f"K_min ({got['k_min']}) is larger than K_max ({got['k_max']}); "
                            "lower K_min or raise K_max.")
    sections: dict[str, dict] = {"retrieval": {"mode": mode},
                                 "correction": {"enabled": bool(values.get("correction", True))},
                                 "decoding": {"greedy": values.get("sampling", "greedy") != "sampling"}}
    for name, value in got.items():
        section, field = NUMBERS[name].field.split(".")
        sections.setdefault(section, {})[field] = value
    try:
        return DEFAULTS.replace(**sections)
    except ValueError as err:
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

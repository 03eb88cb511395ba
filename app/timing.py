"""Honest speedup figures: interleaved repeats of each method, summarised by their median and spread.

The app runs every method (autoregressive, no-correction, FOVEA) the same way: one after another on
one decode thread, each through the same stream, timed by its own records (consumer time
excluded). With R repeats the order rotates each repeat (A B C, B C A, C A B, ...) so no method
always runs first or warm. A speedup is the median over repeats of the paired ratio of tokens/s
within a repeat; its spread is the min-max of those ratios. Pure; no gradio, no model.
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field

from fovea.methods import AUTOREGRESSIVE
from fovea.profile import interleaved_order

BASELINE = AUTOREGRESSIVE.name      # the lane every speedup is a ratio against
# Timed repeats stop early once this much time has gone into them (after MIN_REPEATS). A 25-token
# answer decodes in ~0.1 s, where one paired ratio swings 0.75-1.3x on 2 cores; the median of 7 held
# 10 requests of the same input within max/min ~1.2 (assets/results/app_timing.json). Long answers
# swing less and get fewer repeats, so a Run never spends more than a few seconds timing.
TIMING_BUDGET_S = 4.0
MIN_REPEATS = 3


def keep_timing(repeat: int, elapsed_s: float, budget_s: float = TIMING_BUDGET_S) -> bool:
    """Whether to start timed repeat `repeat` (0-based) after `elapsed_s` seconds of timing."""
    return repeat < MIN_REPEATS or elapsed_s < budget_s


def timed_repeats(methods: list[str], n_repeats: int, decode, status):
    """Up to `n_repeats` interleaved timed repeats of `methods` within the timing budget (`keep_timing`).
    A generator: yields `status(r)` before repeat r (what the page shows meanwhile) and returns the
    `Timings`; `decode(method)` runs one decode and returns its tokens/s."""
    timings, t0 = Timings(), time.perf_counter()
    for r in range(n_repeats):
        if not keep_timing(r, time.perf_counter() - t0):
            break
        yield status(r)
        for method in interleaved_order(methods, r):
            timings.add(r, method, decode(method))
    return timings


RATIO_PLACES = 3  # every timed speedup, from its one construction on


@dataclass
class Timings:
    """tokens/s of each method per repeat (repeat r -> {method: tokens/s})."""
    repeats: list[dict[str, float]] = field(default_factory=list)

    def add(self, repeat: int, method: str, tokens_per_s: float) -> None:
        while len(self.repeats) <= repeat:
            self.repeats.append({})
        self.repeats[repeat][method] = tokens_per_s

    def ratios(self, method: str, baseline: str = BASELINE) -> list[float]:
        return [r[method] / r[baseline] for r in self.repeats
                if method in r and r.get(baseline, 0) > 0]

    def median_tokens_per_s(self, method: str) -> float | None:
        """The method's median tokens/s over the repeats it ran in (None when it ran in none)."""
        values = [r[method] for r in self.repeats if method in r]
        return statistics.median(values) if values else None

    def speedup(self, method: str, baseline: str = BASELINE) -> "Speedup | None":
        ratios = self.ratios(method, baseline)
        if not ratios:
            return None
        # rounded once, here: the JSON carries these values and the screen shows them to 2 places, so
        # a headline, a table and the JSON can never differ in the last digit (2.7249 against 2.725)
        return Speedup(*(round(x, RATIO_PLACES) for x in (statistics.median(ratios), min(ratios), max(ratios))),
                       len(ratios))

    def as_dict(self) -> dict:
        methods = sorted({m for r in self.repeats for m in r} - {BASELINE})
        return {"repeats": len(self.repeats), "tokens_per_s": self.repeats,
                "speedup": {m: s.as_dict() for m in methods if (s := self.speedup(m))}}


@dataclass(frozen=True)
class Speedup:
    median: float
    low: float
    high: float
    n: int

    def cell(self) -> str:
        """The table cell: "1.42× (1.31–1.55)", or "1.42×" for a single run."""
        return f"{self.median:.2f}×" if self.n == 1 else f"{self.median:.2f}× ({self.low:.2f}–{self.high:.2f})"

    def label(self) -> str:
        """"1.42× (median of 3 interleaved runs, 1.31-1.55×)" or "1.42× (one run)"."""
        if self.n == 1:
            return f"{self.median:.2f}× (one run: single timings vary run to run)"
        return f"{self.median:.2f}× (median of {self.n} interleaved runs, range {self.low:.2f}–{self.high:.2f}×)"

    def as_dict(self) -> dict:
        return {"median": self.median, "min": self.low, "max": self.high, "n": self.n}

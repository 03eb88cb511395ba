"""The figures of a request, as HTML (the headline and the table under it, the Compare table) and as
the API's JSON: one source for each number, so no two of them can disagree.

- Every speed figure is *timed*: from the interleaved repeats that run after the live pass with
  nothing rendered (`app.timing.Timings`). The headline gives each drafter's speedup over
  autoregressive decoding (the median of the paired ratios and their range); the table repeats the
  same speedups and adds each method's median tokens/s and wall time over the same repeats.
- Every count (tokens, target forwards, tokens per forward, tau) comes from the live pass; a greedy
  run produces the same tokens every time, so the counts hold for every repeat.
The live pass's own wall time, slowed by rendering beside it, is never shown as a speed.
Pure: runs (anything with `fovea.trace`'s figures) and timings in, strings and dicts out.
"""
from __future__ import annotations

import html

from app.session import AUTOREGRESSIVE, FOVEA, NO_CORRECTION
from app.timing import Speedup, Timings

SAMPLING_NOTE = ("Speculative sampling preserves the target's output distribution, not its exact tokens: with "
                 "sampling on, FOVEA's answer and the autoregressive one are two valid samples and may differ.")
COLUMNS = {FOVEA: "FOVEA", NO_CORRECTION: "no correction", AUTOREGRESSIVE: "autoregressive"}
COUNT_ROWS = (("tokens", lambda r: f"{len(r.tokens)}"),
              ("target forwards", lambda r: f"{r.target_forwards}"),
              ("tokens / target forward", lambda r: f"{r.tokens_per_forward:.2f}"),
              ("mean accepted length τ", lambda r: f"{r.mean_accept_length:.2f}"))


def _methods(runs: dict) -> list[str]:
    return [m for m in COLUMNS if m in runs]


def _speedup_text(s: Speedup | None) -> str:
    return "—" if s is None else s.cell()


def headline_html(runs: dict, timings: Timings | None, status: str = "") -> str:
    """Each drafter's timed speedup over autoregressive decoding, or what is running now."""
    if status:
        return f'<div class="fv-speedup fv-running">{html.escape(status)}</div>'
    speedups = {m: timings.speedup(m) for m in _methods(runs) if m != AUTOREGRESSIVE} if timings else {}
    speedups = {m: s for m, s in speedups.items() if s is not None}
    if not speedups:
        return '<div class="fv-speedup fv-running">Press Run to decode.</div>'
    items = " · ".join(f'<span class="fv-head-item" data-method="{m}" data-speedup="{s.median:.2f}"><b>'
                       f'{s.median:.2f}×</b> {COLUMNS[m]}</span>' for m, s in speedups.items())
    n = next(iter(speedups.values())).n
    spread = ("one timed run: single timings vary run to run" if n == 1 else
              f"median of {n} interleaved timed runs; ranges in the table")
    return (f'<div class="fv-speedup">{items} <span class="fv-over">over autoregressive decoding</span> '
            f'<span class="fv-spread">({spread})</span></div>')


def metrics_html(runs: dict, timings: Timings | None, status: str = "", sampling: bool = False) -> str:
    """The headline and, once the runs are in, the table: timed rows, then the live pass's counts."""
    head = headline_html(runs, timings, status)
    methods = _methods(runs)
    if status or not methods:
        return f'<div class="fv-metrics">{head}</div>'
    n = len(timings.repeats) if timings else 0
    cols = "".join(f"<th>{COLUMNS[m]}</th>" for m in methods)

    def row(name: str, cells: list[str], cls: str = "") -> str:
        return f'<tr class="{cls}"><th>{name}</th>' + "".join(f"<td>{c}</td>" for c in cells) + "</tr>"

    rows = [row(f"timed: median of {n} interleaved run{'s' * (n != 1)}", [""] * len(methods), "fv-section")]
    rows.append(row("speedup (range)", [
        "1.00×" if m == AUTOREGRESSIVE else _speedup_text(timings.speedup(m) if timings else None) for m in methods],
        "fv-timed-speedup"))
    tps = {m: timings.median_tokens_per_s(m) if timings else None for m in methods}
    rows.append(row("tokens / s", ["—" if tps[m] is None else f"{tps[m]:.1f}" for m in methods]))
    rows.append(row("wall time", ["—" if not tps[m] else f"{len(runs[m].tokens) / tps[m]:.2f} s" for m in methods]))
    rows.append(row("counts: the live pass (every greedy run makes the same tokens)", [""] * len(methods),
                    "fv-section"))
    rows += [row(name, [fmt(runs[m]) for m in methods]) for name, fmt in COUNT_ROWS]
    note = f'<div class="fv-note">{SAMPLING_NOTE}</div>' if sampling else ""
    return (f'<div class="fv-metrics">{head}<table><thead><tr><th></th>{cols}</tr></thead>'
            f'<tbody>{"".join(rows)}</tbody></table>{note}</div>')


def summary(runs: dict, timings: Timings, **extra) -> dict:
    """Machine-readable figures of a request (the API's JSON output): per method the live pass's
    counts and the timed median tokens/s and wall time; `speedup` / `twin_speedup` are the headline's."""
    def one(m: str) -> dict | None:
        if m not in runs:
            return None
        r, tps = runs[m], timings.median_tokens_per_s(m)
        return {"tokens": len(r.tokens), "target_forwards": r.target_forwards,
                "tokens_per_forward": round(r.tokens_per_forward, 3), "mean_tau": round(r.mean_accept_length, 3),
                "tokens_per_s": None if tps is None else round(tps, 3),
                "wall_s": None if not tps else round(len(r.tokens) / tps, 4), "done": True}

    def median(m: str) -> float | None:
        s = timings.speedup(m)
        return None if s is None else s.median
    return {**{m: one(m) for m in COLUMNS}, "speedup": median(FOVEA), "twin_speedup": median(NO_CORRECTION),
            "timing": timings.as_dict(), **extra}


def comparison_html(rows: list[dict]) -> str:
    """Table of the same request under other variants (rows from `comparison_row`); the speedup is
    the median of interleaved repeats against autoregressive decoding, with its range."""
    if not rows:
        return '<div class="fv-empty">Run a request, then pick a mode and press Compare.</div>'
    head = "".join(f"<th>{h}</th>" for h in ("variant", "speedup (median, range)", "timed runs",
                                              "tokens/s (median)", "mean τ", "tokens / forward"))
    body = "".join(
        f"<tr><td>{html.escape(r['variant'])}</td><td>{_speedup_text(r['timing'])}</td><td>{r['runs']}</td>"
        f"<td>{'—' if r['tokens_per_s'] is None else format(r['tokens_per_s'], '.1f')}</td>"
        f"<td>{r['mean_tau']:.2f}</td><td>{r['tokens_per_forward']:.2f}</td></tr>" for r in rows)
    one = any(r["runs"] == 1 for r in rows)
    note = ('<div class="fv-note">One timed run per variant: differences of a few tenths are noise; raise '
            '"Timing repeats" in Settings for a median.</div>' if one else
            '<div class="fv-note">Each variant and the autoregressive baseline ran interleaved; the table shows '
            'the median speedup and its min–max range.</div>')
    return f'<div class="fv-metrics"><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>{note}</div>'


def comparison_row(variant: str, run, timings: Timings, method: str) -> dict:
    """One Compare row: `run` is the variant's live-pass result (its counts), `timings` the repeats in
    which `method` stood for it."""
    s = timings.speedup(method)
    return {"variant": variant, "tokens_per_s": timings.median_tokens_per_s(method),
            "mean_tau": run.mean_accept_length, "tokens_per_forward": run.tokens_per_forward, "timing": s,
            "speedup": None if s is None else s.median, "runs": 0 if s is None else s.n}

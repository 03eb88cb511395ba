"""Text renderers: trace records -> HTML strings for the answer, the draft-tree inspector and
the speedup metrics.

Pure functions over `fovea.trace` records and token display strings; no gradio, no model, no
tokenizer (callers pass `pipeline.token_strings(...)`). Colours are inline styles so the HTML
reads the same with or without the app's stylesheet.
"""
from __future__ import annotations

import html
from dataclasses import dataclass, field

from app.timing import Speedup
from app.tree import token_text, tree_html
from fovea.trace import Accumulator, GenerationResult, IterationTrace

__all__ = ["answer_html", "comparison_html", "metrics_html", "tree_html", "token_text"]
SAMPLING_NOTE = ("Speculative sampling preserves the target's output distribution, not its exact tokens: with "
                 "sampling on, FOVEA's answer and the autoregressive one are two valid samples and may differ.")

# accepted draft tokens: darker = shallower in the draft tree; index 0 is depth 1
DEPTH_COLOURS = ["#0f766e", "#0d9488", "#2dd4bf", "#99f6e4", "#ccfbf1"]
BONUS_COLOUR = "#fbbf24"          # the target's own (bonus) token
REJECTED_COLOUR = "#9ca3af"


def depth_style(depth: int) -> str:
    bg = DEPTH_COLOURS[min(max(depth, 1), len(DEPTH_COLOURS)) - 1]
    fg = "#ffffff" if depth <= 2 else "#134e4a"
    return f"background:{bg};color:{fg}"


def display_strings(ids: list[int], strings: list[str]) -> list[str]:
    """Token display texts with a visible stand-in (the id) for tokens that decode to nothing."""
    return [s if s else f"⟨{i}⟩" for i, s in zip(ids, strings)]


def answer_html(rounds: list[IterationTrace], strings: list[str], flips: tuple[dict, dict] | None = None,
                vocab=None) -> str:
    """The FOVEA answer, one span per token.

    `strings` is the display text of every answer token in order (`Accumulator.tokens`): any
    leading tokens not covered by the rounds' emitted tokens came from the target's prefill.
    Accepted draft tokens are shaded by their tree depth; bonus and prefill tokens (the
    target's own) are amber. Round tokens carry data-iter (index into iterations) and data-k
    (position within that round's emitted tokens) for the click handler. `flips`
    (`app.vision.flip_marks`) marks tokens the correction flipped: accepted ones get a ⚑ badge,
    rejected ones appear struck through where the target turned them down (`vocab(id)` names them)."""
    accepted_flips, rejected_flips = flips or ({}, {})
    lead = max(0, len(strings) - sum(len(it.emitted) for it in rounds))
    target_style = f"background:{BONUS_COLOUR};color:#422006"
    spans = [f'<span class="fv-tok fv-prefill" style="{target_style}" title="first token, from the target\'s '
             f'prefill">{token_text(s)}</span>' for s in strings[:lead]]
    pos = lead
    for i, it in enumerate(rounds):
        for k in range(len(it.emitted)):
            spans += [_rejected_flip(s, vocab) for s in rejected_flips.get((i, k), [])]
            text = token_text(strings[pos]) if pos < len(strings) else "?"
            pos += 1
            if (i, k) in accepted_flips:
                text += '<sup class="fv-flip fv-flip-accepted" title="the visual correction flipped this draft ' \
                        'token; the target accepted it">⚑</sup>'
            if k < len(it.accepted):
                depth = it.depths[it.accepted[k]]
                style, cls = depth_style(depth), f"fv-tok fv-draft fv-d{depth}"
                title = f"round {it.iteration}: draft token at depth {depth}, accepted by the target"
            else:
                style, cls = target_style, "fv-tok fv-bonus"
                title = f"round {it.iteration}: bonus token, produced by the target itself"
            spans.append(f'<span class="{cls}" data-iter="{i}" data-k="{k}" style="{style}" '
                         f'title="{html.escape(title)}">{text}</span>')
    body = "".join(spans) or '<span class="fv-empty">The answer appears here, token by token.</span>'
    return f'<div class="fv-answer">{body}</div>'


def _rejected_flip(state, vocab) -> str:
    token = state.top_after[0][0]
    text = token_text(vocab(token)) if vocab else str(token)
    return (f'<span class="fv-flip fv-flip-rejected" title="the visual correction flipped this draft token; the '
            f'target rejected it ({state.verdict})">⚑<s>{text}</s></span>')


def plain_answer_html(strings: list[str], placeholder: str = "") -> str:
    """A baseline answer (autoregressive): plain tokens, no colouring."""
    body = "".join(token_text(s) for s in strings) or f'<span class="fv-empty">{html.escape(placeholder)}</span>'
    return f'<div class="fv-answer fv-plain">{body}</div>'


def legend_html() -> str:
    """One chip per depth colour; the last colour covers every deeper level too ("depth 5+")."""
    n = len(DEPTH_COLOURS)
    chips = [f'<span class="fv-tok" style="{depth_style(d)}">depth {d}{"+" if d == n else ""}</span>'
             for d in range(1, n + 1)]
    chips.append(f'<span class="fv-tok" style="background:{BONUS_COLOUR};color:#422006">bonus (target)</span>')
    chips.append('<span class="fv-tok fv-rejected">rejected</span>')
    chips.append('<span class="fv-flip fv-flip-accepted">⚑</span> the visual correction flipped the draft '
                 '(<span class="fv-flip fv-flip-rejected">⚑<s>tok</s></span> = flipped, rejected)')
    return ('<div class="fv-legend">accepted draft tokens by tree depth: ' + " ".join(chips)
            + ' · click a token to see the draft state that proposed it</div>')


@dataclass
class RunStats:
    """Throughput figures of one decoding run, final or so far (`done=False`)."""
    method: str
    tokens: int
    wall_s: float
    target_forwards: int
    accept_lengths: list[int] = field(default_factory=list)   # tau per round (bonus included); FOVEA only
    done: bool = False

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def tokens_per_forward(self) -> float:
        return self.tokens / self.target_forwards if self.target_forwards else 0.0

    @property
    def mean_tau(self) -> float:
        return sum(self.accept_lengths) / len(self.accept_lengths) if self.accept_lengths else 1.0


def stats_from(acc: Accumulator) -> RunStats:
    """Figures of a run, live or finished, from its accumulator (the records' own wall time)."""
    return RunStats(acc.method, len(acc.tokens), acc.wall_s, acc.target_forwards,
                    [] if acc.method == "autoregressive" else list(acc.accept_lengths), done=acc.done)


def stats_from_records(method: str, records: list) -> RunStats:
    """Figures of a run in progress from its streamed records (prefill first)."""
    return stats_from(Accumulator(method).extend(records))


def stats_from_result(result: GenerationResult) -> RunStats:
    return RunStats(result.method, len(result.tokens), result.wall_s, result.target_forwards,
                    result.accept_lengths if result.method != "autoregressive" else [], done=True)


def speedup(fovea: RunStats | None, baseline: RunStats | None) -> float | None:
    """Tokens/s ratio FOVEA / baseline, once both runs are finished."""
    if fovea is None or baseline is None or not (fovea.done and baseline.done) or baseline.tokens_per_s <= 0:
        return None
    return fovea.tokens_per_s / baseline.tokens_per_s


def metrics_html(fovea: RunStats | None, baseline: RunStats | None, timing: Speedup | None = None,
                 status: str = "", sampling: bool = False) -> str:
    """Side-by-side throughput table with the speedup headline: the median of interleaved repeats
    with its range (`timing`), else this one run's ratio said to be one run."""
    ratio = speedup(fovea, baseline)
    if status:
        headline = f'<div class="fv-speedup fv-running">{html.escape(status)}</div>'
    elif timing is not None:
        big, _, rest = timing.label().partition(" ")
        headline = (f'<div class="fv-speedup"><b>{big}</b> speedup over autoregressive decoding '
                    f'<span class="fv-spread">{html.escape(rest)}</span></div>')
    elif ratio is not None:
        headline = (f'<div class="fv-speedup"><b>{ratio:.2f}×</b> speedup over autoregressive decoding '
                    '<span class="fv-spread">(one run: single timings vary run to run)</span></div>')
    elif fovea is not None and not fovea.done:
        headline = '<div class="fv-speedup fv-running">FOVEA decoding…</div>'
    elif fovea is not None:
        headline = '<div class="fv-speedup fv-running">autoregressive baseline running…</div>'
    else:
        headline = '<div class="fv-speedup fv-running">Press Run to decode.</div>'

    def col(s: RunStats | None, fmt) -> str:
        return "—" if s is None else fmt(s)

    rows = [
        ("tokens", lambda s: f"{s.tokens}"),
        ("wall time", lambda s: f"{s.wall_s:.2f} s"),
        ("tokens / s", lambda s: f"{s.tokens_per_s:.1f}"),
        ("target forwards", lambda s: f"{s.target_forwards}"),
        ("tokens / target forward", lambda s: f"{s.tokens_per_forward:.2f}"),
        ("mean accepted length τ", lambda s: f"{s.mean_tau:.2f}"),
    ]
    body = "".join(f"<tr><th>{name}</th><td>{col(fovea, fmt)}</td><td>{col(baseline, fmt)}</td></tr>"
                   for name, fmt in rows)
    note = f'<div class="fv-note">{SAMPLING_NOTE}</div>' if sampling else ""
    return (f'<div class="fv-metrics">{headline}<table><thead><tr><th></th><th>FOVEA</th>'
            f'<th>autoregressive</th></tr></thead><tbody>{body}</tbody></table>{note}</div>')


def summary(fovea: RunStats | None, baseline: RunStats | None, **extra) -> dict:
    """Machine-readable figures of a request (the API's JSON output)."""
    def one(s: RunStats | None) -> dict | None:
        if s is None:
            return None
        return {"tokens": s.tokens, "wall_s": round(s.wall_s, 4), "tokens_per_s": round(s.tokens_per_s, 3),
                "target_forwards": s.target_forwards, "tokens_per_forward": round(s.tokens_per_forward, 3),
                "mean_tau": round(s.mean_tau, 3), "done": s.done}
    ratio = speedup(fovea, baseline)
    return {"fovea": one(fovea), "autoregressive": one(baseline),
            "speedup": None if ratio is None else round(ratio, 3), **extra}


def comparison_html(rows: list[dict]) -> str:
    """Table of the same request under other variants (rows from `comparison_row`); the speedup is
    the median of interleaved repeats against autoregressive decoding, with its range."""
    if not rows:
        return '<div class="fv-empty">Run a request, then pick a mode and press Compare.</div>'
    head = "".join(f"<th>{h}</th>" for h in ("variant", "speedup (median, range)", "timed runs", "tokens/s",
                                              "mean τ", "tokens / forward"))
    body = "".join(
        f"<tr><td>{html.escape(r['variant'])}</td><td>{_speedup_cell(r)}</td><td>{r['runs']}</td>"
        f"<td>{r['tokens_per_s']:.1f}</td><td>{r['mean_tau']:.2f}</td><td>{r['tokens_per_forward']:.2f}</td></tr>"
        for r in rows)
    one = any(r["runs"] == 1 for r in rows)
    note = ('<div class="fv-note">One timed run per variant: differences of a few tenths are noise; raise '
            '"Timing repeats" in Settings for a median.</div>' if one else
            '<div class="fv-note">Each variant and the autoregressive baseline ran interleaved; the table shows '
            'the median speedup and its min–max range.</div>')
    return f'<div class="fv-metrics"><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>{note}</div>'


def _speedup_cell(row: dict) -> str:
    if row["speedup"] is None:
        return "—"
    if row["runs"] == 1:
        return f"{row['speedup']:.2f}×"
    return f"{row['speedup']:.2f}× ({row['low']:.2f}–{row['high']:.2f})"


def comparison_row(variant: str, run: RunStats, timing: Speedup | None) -> dict:
    """One Compare row: `run` is the variant's first timed run, `timing` its speedup over repeats."""
    return {"variant": variant, "tokens_per_s": run.tokens_per_s, "mean_tau": run.mean_tau,
            "tokens_per_forward": run.tokens_per_forward, "wall_s": run.wall_s,
            "speedup": None if timing is None else timing.median, "low": None if timing is None else timing.low,
            "high": None if timing is None else timing.high, "runs": 0 if timing is None else timing.n}

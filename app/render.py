"""Text renderers: trace records -> HTML strings for the answer, the draft-tree inspector and
the speedup metrics.

Pure functions over `fovea.trace` records and token display strings; no gradio, no model, no
tokenizer (callers pass `pipeline.token_strings(...)`). Colours are inline styles so the HTML
reads the same with or without the app's stylesheet.
"""
from __future__ import annotations

import html
import math
from dataclasses import dataclass, field

from fovea.trace import Accumulator, GenerationResult, IterationTrace
from fovea.tree import children_of

# accepted draft tokens: darker = shallower in the draft tree; index 0 is depth 1
DEPTH_COLOURS = ["#0f766e", "#0d9488", "#2dd4bf", "#99f6e4", "#ccfbf1"]
BONUS_COLOUR = "#fbbf24"          # the target's own (bonus) token
REJECTED_COLOUR = "#9ca3af"


def depth_style(depth: int) -> str:
    bg = DEPTH_COLOURS[min(max(depth, 1), len(DEPTH_COLOURS)) - 1]
    fg = "#ffffff" if depth <= 2 else "#134e4a"
    return f"background:{bg};color:{fg}"


def token_text(s: str) -> str:
    """HTML-escaped display text of one token; empty tokens get a visible placeholder."""
    if s == "":
        return "∅"
    return html.escape(s).replace("\n", "⏎")


def display_strings(ids: list[int], strings: list[str]) -> list[str]:
    """Token display texts with a visible stand-in (the id) for tokens that decode to nothing."""
    return [s if s else f"⟨{i}⟩" for i, s in zip(ids, strings)]


def answer_html(rounds: list[IterationTrace], strings: list[str]) -> str:
    """The FOVEA answer, one span per token.

    `strings` is the display text of every answer token in order (`Accumulator.tokens`): any
    leading tokens not covered by the rounds' emitted tokens came from the target's prefill.
    Accepted draft tokens are shaded by their tree depth; bonus and prefill tokens (the
    target's own) are amber. Round tokens carry data-iter (index into iterations) and data-k
    (position within that round's emitted tokens) for the click handler."""
    lead = max(0, len(strings) - sum(len(it.emitted) for it in rounds))
    target_style = f"background:{BONUS_COLOUR};color:#422006"
    spans = [f'<span class="fv-tok fv-prefill" style="{target_style}" title="first token, from the target\'s '
             f'prefill">{token_text(s)}</span>' for s in strings[:lead]]
    pos = lead
    for i, it in enumerate(rounds):
        for k in range(len(it.emitted)):
            text = token_text(strings[pos]) if pos < len(strings) else "?"
            pos += 1
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
    return ('<div class="fv-legend">accepted draft tokens by tree depth: ' + " ".join(chips)
            + ' · click a token to see the draft state that proposed it</div>')


def tree_html(it: IterationTrace, strings: list[str], bonus_string: str, selected: int | None = None) -> str:
    """Draft-tree inspector for one iteration: nested lists, children by draft score.

    `strings[i]` is the display text of it.tokens[i]. The accepted path is highlighted, rejected
    nodes are struck through, nodes whose draft state read the memory carry a K badge, and the
    bonus token hangs under the last accepted node. `selected` outlines one node."""
    children = [sorted(kids, key=lambda c: -it.scores[c]) for kids in children_of(it.parents)]
    last = it.accepted[-1] if it.accepted else 0
    accepted = set(it.accepted)

    def node_html(node: int) -> str:
        kids = "".join(node_html(c) for c in children[node])
        if node == last:
            kids += (f'<li><span class="fv-node fv-bonus" style="background:{BONUS_COLOUR};color:#422006" '
                     f'title="the target\'s own token after the accepted path">{token_text(bonus_string)}'
                     '<small> bonus</small></span></li>')
        sub = f"<ul>{kids}</ul>" if kids else ""
        return f"<li>{_node_label(it, node, strings, node in accepted, node == selected)}{sub}</li>"

    head = (f'<div class="fv-tree-head">Round {it.iteration}: {len(it.tokens) - 1} draft nodes, '
            f'{len(it.accepted)} accepted + 1 bonus (τ = {it.accept_length}) · '
            f'draft {it.draft_ms:.1f} ms, verify {it.verify_ms:.1f} ms</div>')
    return f'<div class="fv-tree">{head}<ul>{node_html(0)}</ul></div>'


def _node_label(it: IterationTrace, node: int, strings: list[str], accepted: bool, selected: bool) -> str:
    text = token_text(strings[node]) if node < len(strings) else "?"
    if node == 0:
        cls, style, note = "fv-root", "background:#1f2937;color:#ffffff", "root"
    elif accepted:
        cls, style = "fv-accepted", depth_style(it.depths[node])
        note = _percent(_local_prob(it, node))
    else:
        cls, style = "fv-rejected", f"color:{REJECTED_COLOUR};text-decoration:line-through"
        note = _percent(_local_prob(it, node))
    badge = ""
    if node in it.retrieval:
        r = it.retrieval[node]
        badge = (f'<small class="fv-badge" title="this draft state read K memory entries; g is the correction '
                 f'gate">K={r.k} g={r.gate:.2f}</small>')
    outline = ";outline:2px solid #f43f5e;outline-offset:1px" if selected else ""
    return (f'<span class="fv-node {cls}" style="{style}{outline}" data-node="{node}">{text}'
            f'<small> {note}</small></span>{badge}')


def _percent(p: float) -> str:
    return f"{p:.0%}" if p >= 0.01 else "<1%"


def _local_prob(it: IterationTrace, node: int) -> float:
    """Drafter probability of a node given its parent (scores are cumulative log-probs)."""
    return math.exp(it.scores[node] - it.scores[it.parents[node]])


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


def metrics_html(fovea: RunStats | None, baseline: RunStats | None) -> str:
    """Side-by-side throughput table with the speedup headline (live while runs stream)."""
    ratio = speedup(fovea, baseline)
    if ratio is not None:
        headline = f'<div class="fv-speedup"><b>{ratio:.2f}×</b> speedup over autoregressive decoding</div>'
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
    return (f'<div class="fv-metrics">{headline}<table><thead><tr><th></th><th>FOVEA</th>'
            f'<th>autoregressive</th></tr></thead><tbody>{body}</tbody></table></div>')


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
    """Table of runs of the same request under different retrieval modes (see `summary`)."""
    if not rows:
        return '<div class="fv-empty">Run a request, then pick a mode and press Compare.</div>'
    head = "".join(f"<th>{h}</th>" for h in ("variant", "tokens/s", "speedup", "mean τ", "tokens / forward", "wall"))
    head = f"<tr>{head}</tr>"
    body = "".join(
        f"<tr><td>{html.escape(r['variant'])}</td><td>{r['tokens_per_s']:.1f}</td>"
        f"<td>{'—' if r['speedup'] is None else format(r['speedup'], '.2f') + '×'}</td>"
        f"<td>{r['mean_tau']:.2f}</td><td>{r['tokens_per_forward']:.2f}</td><td>{r['wall_s']:.2f} s</td></tr>"
        for r in rows)
    return f'<div class="fv-metrics"><table><thead>{head}</thead><tbody>{body}</tbody></table></div>'


def comparison_row(variant: str, run: RunStats, baseline: RunStats | None) -> dict:
    return {"variant": variant, "tokens_per_s": run.tokens_per_s, "speedup": speedup(run, baseline),
            "mean_tau": run.mean_tau, "tokens_per_forward": run.tokens_per_forward, "wall_s": run.wall_s}

"""Where vision mattered: what the gated correction changed in a run's drafts, and the race of the
decoding methods on the same input.

A corrected draft state records the drafter's top tokens before and after the correction
(`fovea.trace.NodeRetrieval.top_before / top_after`). The correction *flipped* a state when its
most likely token changed; the flipped token is then the child the tree grew from the corrected
head, and the target's verdict on it is accepted, rejected, or pruned (never verified). Pure
functions over trace records and token display strings; no gradio.
"""
from __future__ import annotations

import html
from dataclasses import dataclass

from app.tree import BONUS_COLOUR, node_text, percent, token_text
from fovea.trace import IterationTrace

DRAFT_COLOUR, TARGET_COLOUR = "#0f766e", "#cbd5e1"   # white / dark text: >= 5:1


@dataclass(frozen=True)
class CorrectedState:
    round: int                  # index into the run's rounds
    node: int                   # the draft state's node in that round's tree
    depth: int
    on_path: bool               # the root or an accepted node: its children could be accepted
    gate: float
    top_before: list
    top_after: list
    flipped: bool | None
    child: int | None           # the node holding the corrected top token, None when pruned
    verdict: str                # "accepted", "rejected" or "pruned"


def corrected_states(rounds: list[IterationTrace]) -> list[CorrectedState]:
    """Every draft state that read the memory, in decoding order, with the fate of its top token."""
    out = []
    for i, it in enumerate(rounds):
        path = {0, *it.accepted}
        for node in sorted(it.retrieval):
            r = it.retrieval[node]
            top = r.top_after[0][0] if r.top_after else None
            child = next((c for c, p in enumerate(it.parents) if p == node and it.tokens[c] == top), None)
            verdict = "pruned" if child is None else ("accepted" if child in it.accepted else "rejected")
            out.append(CorrectedState(i, node, it.depths[node], node in path, r.gate, r.top_before or [],
                                      r.top_after or [], r.flipped, child, verdict))
    return out


def flip_marks(rounds: list[IterationTrace]) -> tuple[dict, dict]:
    """(accepted, rejected) flips placed in the answer: accepted[(round, k)] marks emitted token k;
    rejected[(round, k)] lists (node, verdict) of flipped tokens the target turned down right
    before emitted token k (only for states on the committed path: others never reach the answer)."""
    accepted, rejected = {}, {}
    for s in corrected_states(rounds):
        if not s.flipped:
            continue
        it = rounds[s.round]
        if s.verdict == "accepted":
            accepted[(s.round, it.accepted.index(s.child))] = s
        elif s.on_path:
            k = 0 if s.node == 0 else it.accepted.index(s.node) + 1
            rejected.setdefault((s.round, k), []).append(s)
    return accepted, rejected


def _tops(top: list, vocab) -> str:
    return " ".join(f'<span class="fv-top"><code>{node_text(vocab(t))}</code> {percent(p)}</span>' for t, p in top)


def vision_html(rounds: list[IterationTrace], vocab) -> str:
    """Table of every corrected draft state: gate, top-5 before / after, flip, verdict.
    `vocab(id)` gives a token's display text."""
    states = corrected_states(rounds)
    if not states:
        return ('<div class="fv-empty">No draft state read the visual memory in this run (the correction is '
                'off, or this drafter has none).</div>')
    flips = [s for s in states if s.flipped]
    kept = sum(s.verdict == "accepted" for s in flips)
    head = (f'<div class="fv-vision-head"><b>{len(flips)}</b> of {len(states)} corrected draft states changed '
            f'their top token; the target accepted <b>{kept}</b> of those flips.</div>')
    rows = []
    for s in sorted(states, key=lambda s: (not s.flipped, s.round, s.node)):
        mark = "⚑ flipped" if s.flipped else ("same" if s.flipped is False else "—")
        rows.append(f'<tr class="{"fv-flip-row" if s.flipped else ""}"><td>{s.round}</td><td>{s.node}'
                    f'{"" if s.on_path else " (off path)"}</td><td>{s.depth}</td><td>{s.gate:.2f}</td>'
                    f'<td>{_tops(s.top_before, vocab)}</td><td>{_tops(s.top_after, vocab)}</td>'
                    f'<td>{mark}</td><td class="fv-{s.verdict}">{s.verdict}</td></tr>')
    table = ('<table><thead><tr><th>round</th><th>state</th><th>depth</th><th>gate g</th><th>top-5 before '
             'correction</th><th>top-5 after</th><th>top token</th><th>target verdict</th></tr></thead>'
             f'<tbody>{"".join(rows)}</tbody></table>')
    return f'<div class="fv-vision fv-metrics">{head}<div class="fv-tscroll">{table}</div></div>'


# ---- the race: the same input under each method ---------------------------------------------
@dataclass
class Lane:
    name: str
    tokens: list[str]           # display text of the emitted tokens so far
    kinds: list[str]            # per token: "prefill", "draft" (accepted draft) or "target" (bonus / AR step)
    ms: float                   # the run's own wall time so far
    done: bool


def token_kinds(run) -> list[str]:
    """Per emitted token of `run` (an `Accumulator` or a `GenerationResult`), how it came: the
    `origins` of its prefill record (when it has one), then of its rounds or steps."""
    records = [run.prefill, *run.iterations] if run.prefill else run.iterations
    return [kind for rec in records for kind in rec.origins]


def race_html(lanes: list[Lane], note: str = "") -> str:
    """One lane per method: tokens coloured by acceptance and a bar of wall time, all bars on the
    scale of the slowest method."""
    if not lanes:
        return '<div class="fv-empty">Press Run: autoregressive, no-correction and FOVEA decode the same input.</div>'
    scale = max(max(l.ms for l in lanes), 1e-9)
    rows = []
    for lane in lanes:
        chips = "".join(f'<span class="fv-rtok fv-r{k}" style="{_kind_style(k)}">'
                        f'{token_text(t)}</span>' for t, k in zip(lane.tokens, lane.kinds) if t)
        drafted = lane.kinds.count("draft")
        share = f"{drafted}/{len(lane.kinds)} tokens from accepted drafts" if lane.kinds else ""
        state = "done" if lane.done else "running…"
        rows.append(f'<div class="fv-lane"><div class="fv-lane-name">{html.escape(lane.name)}</div>'
                    f'<div class="fv-lane-bar"><span style="width:{100 * lane.ms / scale:.1f}%"></span></div>'
                    f'<div class="fv-lane-time">{lane.ms:.0f} ms · {len(lane.tokens)} tokens · {share} · {state}</div>'
                    f'<div class="fv-lane-toks">{chips}</div></div>')
    foot = f'<div class="fv-note">{html.escape(note)}</div>' if note else ""
    return f'<div class="fv-race">{"".join(rows)}{foot}</div>'


def _kind_style(kind: str) -> str:
    if kind == "draft":
        return f"background:{DRAFT_COLOUR};color:#ffffff"
    return f"background:{BONUS_COLOUR if kind == 'prefill' else TARGET_COLOUR};color:#1f2937"

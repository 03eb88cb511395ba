"""The draft-tree inspector as HTML: readable at any depth up to 16.

One row per node (depth-first, children by draft score) and one column per tree depth, laid out by
a CSS grid. Every label has the same fixed size (12 px token, 11 px notes) however deep the tree,
and the tree scrolls sideways instead of shrinking. The accepted path comes first (rows 2.., one
column per depth) and is also spelled out in one line above the grid. Every label's colour is
set on the node, its text at least 4.5:1 against its background (WCAG AA). Each node shows its token, the drafter's
probability of it given its parent, and the target's verdict (accepted / rejected); the bonus
token sits one column right of the last accepted node. Pure: trace record + token strings in.
"""
from __future__ import annotations

import html
import math

from fovea.trace import IterationTrace
from fovea.tree import children_of

COLUMN_PX = 118           # width of one depth column
BONUS_COLOUR = "#fbbf24"
ACCEPTED_BG, ACCEPTED_FG = "#0f766e", "#ffffff"
REJECTED_BG, REJECTED_FG = "#f9fafb", "#4b5563"     # 7.2:1 (WCAG AA asks 4.5:1), in light or dark theme


def token_text(s: str) -> str:
    """HTML-escaped display text of one token; "" (a special token: the pipeline shows none) stays ""."""
    return html.escape(s).replace("\n", "⏎")


def local_prob(it: IterationTrace, node: int) -> float:
    """Drafter probability of a node given its parent (scores are cumulative log-probs)."""
    return math.exp(it.scores[node] - it.scores[it.parents[node]])


def percent(p: float) -> str:
    return f"{p:.0%}" if p >= 0.01 else "<1%"


def dfs_order(it: IterationTrace) -> list[int]:
    """Nodes depth-first from the root, the accepted child first, then siblings by draft score (best
    first): the accepted path fills the first rows, a diagonal from the top left, read without
    scrolling down."""
    accepted = set(it.accepted)
    children = [sorted(kids, key=lambda c: (c not in accepted, -it.scores[c])) for kids in children_of(it.parents)]
    order, stack = [], [0]
    while stack:
        node = stack.pop()
        order.append(node)
        stack.extend(reversed(children[node]))
    return order


def tree_html(it: IterationTrace, strings: list[str], bonus_string: str, selected: int | None = None) -> str:
    """Grid view of one round's draft tree. `strings[i]` is the display text of it.tokens[i]."""
    accepted = set(it.accepted)
    last = it.accepted[-1] if it.accepted else 0
    cells, row = [], 2                                 # grid row 1 is the depth header
    for node in dfs_order(it):
        cells.append(_cell(it, node, strings, node in accepted, node == selected, row))
        if node == last:                              # the bonus token continues the accepted path
            cells.append(f'<div class="fv-tnode fv-bonus" style="grid-row:{row};grid-column:{it.depths[node] + 2};'
                         f'background:{BONUS_COLOUR};color:#422006" title="the target\'s own token after the '
                         f'accepted path"><b>{node_text(bonus_string)}</b><i>bonus · target</i></div>')
        row += 1
    columns = max(max(it.depths), it.depths[last] + 1) + 1
    header = "".join(f'<div class="fv-tcol" style="grid-row:1;grid-column:{d + 1}">'
                     f'{"root" if d == 0 else f"depth {d}"}</div>' for d in range(columns))
    grid = (f'<div class="fv-tgrid" style="grid-template-columns:repeat({columns},{COLUMN_PX}px);'
            f'grid-template-rows:auto">{header}{"".join(cells)}</div>')
    head = (f'<div class="fv-tree-head">Round {it.iteration}: {len(it.tokens) - 1} draft nodes, depth '
            f'{max(it.depths)}, {len(it.accepted)} accepted + 1 bonus (τ = {it.accept_length}) · draft '
            f'{it.draft_ms:.1f} ms, verify {it.verify_ms:.1f} ms</div>')
    path = " → ".join(f"<code>{node_text(strings[n]) if n < len(strings) else '?'}</code>"
                      for n in [0, *it.accepted])
    path = (f'<div class="fv-tree-path">Accepted path: {path} → <code>{node_text(bonus_string)}</code> (bonus); '
            'it fills the first rows below, rejected branches follow</div>')
    return f'<div class="fv-tree">{head}{path}<div class="fv-tscroll">{grid}</div></div>'


def node_text(s: str) -> str:
    """A tree label: the token's text, or ⟨end⟩ for a special token (shown as "" in the answer)."""
    return token_text(s) or "⟨end⟩"


def _cell(it: IterationTrace, node: int, strings: list[str], accepted: bool, selected: bool, row: int) -> str:
    text = node_text(strings[node]) if node < len(strings) else "?"
    if node == 0:
        cls, style, note = "fv-root", "background:#1f2937;color:#ffffff", "root · committed"
    elif accepted:
        cls, style = "fv-accepted", f"background:{ACCEPTED_BG};color:{ACCEPTED_FG}"
        note = f"{percent(local_prob(it, node))} · ✓ accepted"
    else:
        cls, style = "fv-rejected", f"background:{REJECTED_BG};color:{REJECTED_FG}"
        note = f"{percent(local_prob(it, node))} · ✗ rejected"
    badge = ""
    if node in it.retrieval:
        r = it.retrieval[node]
        flip = " flip" if r.flipped else ""
        badge = f'<i class="fv-badge" title="this draft state read K memory entries; g is the correction gate">' \
                f'K={r.k} g={r.gate:.2f}{flip}</i>'
    outline = ";outline:2px solid #f43f5e;outline-offset:-2px" if selected else ""
    parent = it.parents[node]
    title = f"node {node}, parent {parent}" if node else "the last committed token"
    return (f'<div class="fv-tnode {cls}" data-node="{node}" style="grid-row:{row};'
            f'grid-column:{it.depths[node] + 1};{style}{outline}" title="{title}"><b>{text}</b>'
            f'<i>{note}</i>{badge}</div>')

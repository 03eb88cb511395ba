"""Text renderers: trace records -> HTML strings for the answer, the draft-tree inspector and
the speedup metrics.

Pure functions over `fovea.trace` records and token display strings; no gradio, no model, no
tokenizer (callers pass `pipeline.token_strings(...)`). Colours are inline styles so the HTML
reads the same with or without the app's stylesheet.
"""
from __future__ import annotations

import html

from app.tree import token_text, tree_html

__all__ = ["answer_html", "legend_html", "plain_answer_html", "tree_html", "token_text"]

# accepted draft tokens: darker = shallower in the draft tree; index 0 is depth 1
DEPTH_COLOURS = ["#134e4a", "#0f766e", "#2dd4bf", "#99f6e4", "#ccfbf1"]   # text contrast >= 5:1
BONUS_COLOUR = "#fbbf24"          # the target's own (bonus) token


def depth_style(depth: int) -> str:
    bg = DEPTH_COLOURS[min(max(depth, 1), len(DEPTH_COLOURS)) - 1]
    fg = "#ffffff" if depth <= 2 else "#134e4a"
    return f"background:{bg};color:{fg}"


def answer_html(run, strings: list[str], flips: tuple[dict, dict] | None = None, vocab=None) -> str:
    """The FOVEA answer, one span per token.

    `run` is the FOVEA run (its `Accumulator` while it streams, or its `GenerationResult`; None
    before anything decoded): its prefill's tokens lead the answer, then its rounds' emitted tokens.
    `strings` is the display text of every answer token in order ("" for a special token, which is
    not shown). Accepted draft tokens are shaded by their tree depth; bonus and prefill tokens (the
    target's own) are amber. Round tokens carry data-iter (index into iterations) and data-k
    (position within that round's emitted tokens) for the click handler. `flips`
    (`app.vision.flip_marks`) marks tokens the correction flipped: accepted ones get a ⚑ badge,
    rejected ones appear struck through where the target turned them down (`vocab(id)` names them)."""
    accepted_flips, rejected_flips = flips or ({}, {})
    rounds = run.iterations if run is not None else []
    lead = len(run.prefill.emitted) if run is not None and run.prefill else 0
    target_style = f"background:{BONUS_COLOUR};color:#422006"
    spans = [f'<span class="fv-tok fv-prefill" style="{target_style}" title="first token, from the target\'s '
             f'prefill">{token_text(s)}</span>' for s in strings[:lead] if s]
    pos = lead
    for i, it in enumerate(rounds):
        for k in range(len(it.emitted)):
            spans += [_rejected_flip(s, vocab) for s in rejected_flips.get((i, k), [])]
            text = token_text(strings[pos]) if pos < len(strings) else "?"
            pos += 1
            if not text:                  # a special token (`</s>`): never shown
                continue
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
    body = "".join(token_text(s) for s in strings if s) or f'<span class="fv-empty">{html.escape(placeholder)}</span>'
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

"""The diffusion view: one masked-diffusion decode drawn from its per-step trace
(`fovea.diffusion.DenoiseStep` records), the sentences that say when and why it stopped, and its
timed speed against the full schedule and the autoregressive target.

- `trajectory_html`: a step x canvas-position grid. Each cell is that step's token at that position
  (the committed token, else the step's argmax, in italics while still masked), shaded by its
  confidence; the candidate span is outlined, the tokens a step commits carry a dot in the colour
  of the rule that committed them, BWEC's block commits and the step where CVC (or the gate) fired
  are labelled rows.
- `stop_html`: when and why decoding stopped, read off the trace and the decoding's settings.
- `speed_html` / `summary`: timed figures (`app.timing.Timings`: interleaved repeats, the median
  of paired tokens/s ratios and their range) and the counts of each decode.
Steps are numbered from 1 on screen (step k is the k-th denoising forward, so the last step's
number is the NFE). Pure: records, token strings and timings in, HTML strings and dicts out; no
gradio, no torch, no model.
"""
from __future__ import annotations

import html
from dataclasses import dataclass

from app.session import AUTOREGRESSIVE
from app.timing import Speedup, Timings

FULL = "full"
# the diffusion decodings the view offers (fovea.diffusion.METHODS), LATCH first
DECODINGS = {"latch": "LATCH (CVC + BWEC)", "latch_no_bwec": "LATCH without BWEC", FULL: "full schedule",
             "gate": "fixed-region gate", "threshold": "threshold unmasking (Fast-dLLM)"}
COLUMN_NAMES = {**DECODINGS, AUTOREGRESSIVE: "autoregressive target"}
# the rule that committed a step's tokens (fovea.diffusion.decode.RULES): its name and marker colour
RULES = {"schedule": ("schedule", "#0f766e"), "threshold": ("threshold unmasking", "#0369a1"),
         "bwec": ("BWEC", "#b45309"), "cvc": ("CVC", "#b91c1c"), "gate": ("fixed-region gate", "#be185d")}
SPAN_COLOUR = "#7c3aed"
SHADE_RGB = (13, 148, 136)          # confidence 1.0 mixes this teal in at SHADE_MAX over white
SHADE_MAX = 0.6                     # dark text on the darkest shade stays above 4.5:1
DIFFUSION_TRAIN_COMMAND = "python -m fovea.train diffusion --threads 2 --minutes 240"


@dataclass(frozen=True)
class Decode:
    """What the view shows of one decode (a DiffusionResult or the autoregressive target's run)."""
    steps: int                      # denoising forwards (NFE), or the target's forwards
    answer_tokens: int              # tokens before the first EOS
    stopped_by: str
    text: str


def missing_model_text(folder: str, reason: str = "") -> str:
    """What is missing when no diffusion model is loaded, and the command that trains one (plain text)."""
    why = f" ({reason})" if reason else ""
    return (f"No diffusion model is loaded: the diffusion view needs a trained masked-diffusion model, and there is "
            f"none at {folder}{why}. Train and export one with `{DIFFUSION_TRAIN_COMMAND}` (it writes assets/diffusion; "
            "see docs/latch.md), then restart the app, or start it with `python app.py --diffusion <folder>`. "
            "FOVEA speculative decoding works meanwhile.")


def missing_model_html(folder: str, reason: str = "") -> str:
    text = html.escape(missing_model_text(folder, reason), quote=False)
    head, rest = text.split(": ", 1)
    parts = rest.split("`")                       # the commands between backticks become <code>
    body = "".join(f"<code>{part}</code>" if i % 2 else part for i, part in enumerate(parts))
    return f'<div class="fv-ood fv-dmissing" role="alert"><b>{head}.</b> {body[0].upper()}{body[1:]}</div>'


# ---- the step x position grid -------------------------------------------------------------------
def shade(confidence: float) -> str:
    """Background colour of a cell: white at confidence 0, SHADE_RGB mixed in at SHADE_MAX at 1."""
    a = SHADE_MAX * min(max(confidence, 0.0), 1.0)
    return "#" + "".join(f"{round(255 * (1 - a) + c * a):02x}" for c in SHADE_RGB)


def cell_text(piece: str, eos: bool) -> str:
    if eos:
        return "EOS"
    return piece.strip() or "␣"


def _block_edge(pos: int, block_length: int) -> bool:
    """Whether a block starts at canvas position `pos` after another (a border is drawn there; none on
    blocks of 1, where every position would carry one)."""
    return block_length > 1 and pos > 0 and pos % block_length == 0


def _cell(st, pos: int, new: bool, pieces: list[str], eos_id: int, block_length: int) -> str:
    """Position `pos` of step record `st`; `new` when this step committed it."""
    token, conf, span = st.prediction[pos], st.confidence[pos], st.span
    classes = ["fv-dc"] + (["fv-dm"] if not st.committed[pos] else []) + (["fv-dnew"] if new else [])
    if _block_edge(pos, block_length):
        classes.append("fv-dblk")
    if span is not None and span[0] <= pos < span[1]:
        classes += ["fv-dspan", *(["fv-dspan-l"] if pos == span[0] else []),
                    *(["fv-dspan-r"] if pos == span[1] - 1 else [])]
    piece = pieces[token] if 0 <= token < len(pieces) else f"⟨{token}⟩"
    title = html.escape(f"position {pos}: {piece!r} {conf:.2f}")
    return (f'<span class="{" ".join(classes)}" style="background:{shade(conf)}" title="{title}">'
            f'{html.escape(cell_text(piece, token == eos_id))}</span>')


def _row_label(number: int, rule: str, block: int, final_block: bool) -> str:
    """"step 5", with a badge on the rows where BWEC committed a block or CVC / the gate stopped."""
    name, colour = RULES.get(rule, (rule, "#374151"))
    badge = {"cvc": "CVC fires", "gate": "gate fires", "bwec": f"BWEC · block {block}"}.get(rule)
    badge = f'<em style="background:{colour}">{badge}</em>' if badge else ""
    title = f'block {block}{" (final)" if final_block else ""} · {name}'
    return f'<span class="fv-dlabel" title="{title}">step {number}{badge}</span>'


def trajectory_html(steps, pieces: list[str], eos_id: int, block_length: int) -> str:
    """The step x position grid of a recorded decode (see module doc); a placeholder without steps."""
    if not steps:
        return '<div class="fv-empty">Run a diffusion decode to see its denoising trajectory.</div>'
    length = len(steps[0].prediction)
    final = (length - 1) // block_length
    columns = f"grid-template-columns:132px repeat({length},42px)"
    if block_length == 1:            # a head per position would not fit: one sentence across the canvas
        blocks = (f'<span class="fv-dblock-head" style="grid-column:span {length}">blocks of 1 position, decoded '
                  f'left to right; the final block is position {length - 1}</span>')
    else:
        blocks = "".join(
            f'<span class="fv-dblock-head" style="grid-column:span {min(block_length, length - b * block_length)}">'
            f'block {b}{" (final: only CVC ends it early)" if b == final else ""}</span>' for b in range(final + 1))
    positions = "".join(f'<span class="fv-dpos{" fv-dblk" if _block_edge(p, block_length) else ""}">{p}</span>'
                        for p in range(length))
    rows = [f'<div class="fv-drow fv-dhead" style="{columns}"><span class="fv-dlabel">block</span>{blocks}</div>',
            f'<div class="fv-drow fv-dhead" style="{columns}"><span class="fv-dlabel">position</span>{positions}</div>']
    before = (False,) * length
    for st in steps:
        cells = "".join(_cell(st, p, st.committed[p] and not before[p], pieces, eos_id, block_length)
                        for p in range(length))
        rows.append(f'<div class="fv-drow" data-step="{st.step + 1}" data-rule="{st.rule}" data-block="{st.block}" '
                    f'style="{columns};--rule:{RULES.get(st.rule, ("", "#374151"))[1]}">'
                    f'{_row_label(st.step + 1, st.rule, st.block, st.block == final)}{cells}</div>')
        before = st.committed
    return (f'<div class="fv-diffusion">{legend_html()}<div class="fv-dscroll"><div class="fv-dgrid">'
            f'{"".join(rows)}</div></div></div>')


def legend_html() -> str:
    dots = " ".join(f'<span class="fv-dkey"><i class="fv-ddot" style="background:{c}"></i>{n}</span>'
                    for rule, (n, c) in RULES.items())
    return (f'<div class="fv-dlegend">One row per denoising step, one column per canvas position. Shade: '
            f'confidence (<span class="fv-dswatch" style="background:{shade(0.0)}">0</span>'
            f'<span class="fv-dswatch" style="background:{shade(0.5)}">0.5</span>'
            f'<span class="fv-dswatch" style="background:{shade(1.0)}">1</span>: this step\'s top-1 probability '
            f'where masked, the probability at commit where committed). <i>Italic</i>: still masked (this step\'s '
            f'argmax). <span class="fv-dkey fv-dspan-key">outlined</span>: the candidate span. A dot marks the '
            f'tokens a step commits, coloured by the rule that committed them: {dots}.</div>')


# ---- when and why it stopped -----------------------------------------------------------------
def _span_text(step, pieces: list[str], eos_id: int) -> str:
    lo, hi = step.span
    return "".join("" if t == eos_id else pieces[t] for t in step.prediction[lo:hi]).strip()


def stop_html(steps, stopped_by: str, cfg, task: str | None, pieces: list[str], eos_id: int,
              full: Decode | None = None, text: str | None = None) -> str:
    """When and why a recorded decode stopped, and what BWEC and CVC did on the way (see module doc).
    `cfg` is the decode's DiffusionDecodeConfig; `full` the full schedule's decode of the same input,
    against which the decode's answer `text` is compared, once it has run."""
    if not steps:
        return ""
    latch = cfg.latch
    lines = [_headline(steps, stopped_by, cfg, pieces, eos_id, f" of the full schedule's {full.steps}" if full else "")]
    if full is not None and text is not None and cfg.name != FULL:
        lines.append("Its answer is the same as the full schedule's."
                     if text == full.text else
                     f"Its answer differs from the full schedule's (“{html.escape(full.text)}”).")
    if latch.cvc and stopped_by != "cvc":
        lines.append(_why_no_cvc(steps[-1], latch, task))
    if latch.bwec:
        lines.append(_bwec_sentence(steps, latch, cfg.schedule.block_length))
    if task:
        lines.append(f"The question fills the world's <b>{html.escape(task)}</b> question template: the candidate "
                     "span (outlined) is where that task's scorer reads the answer.")
    elif latch.cvc:
        lines.append("The question fills none of the world's question templates, so LATCH has no parser for its answer.")
    return '<div class="fv-dstop">' + "".join(f"<p>{line}</p>" for line in lines) + "</div>"


def _headline(steps, stopped_by: str, cfg, pieces: list[str], eos_id: int, of_full: str) -> str:
    last = steps[-1]
    n, latch = last.step + 1, cfg.latch
    masked = sum(not c for c in steps[-2].committed) if len(steps) > 1 else len(last.committed)
    if stopped_by == "cvc":
        lo, hi = last.span
        return (f'<b class="fv-dexit">CVC fired at step {n}</b>{of_full}: the candidate span, canvas positions '
                f'{lo}–{hi - 1} (“{html.escape(_span_text(last, pieces, eos_id))}”), had kept its place and tokens '
                f'for {last.held} step{"s" * (last.held != 1)} (it needs {latch.stable_steps}) and its least settled '
                f'confidence was {last.span_confidence:.2f} ≥ τc = {latch.tau_c:g}. The answer could no longer change '
                f"where the scorer reads it, so decoding stopped and the {masked} positions still masked took this "
                "step's argmax.")
    if stopped_by == "gate":
        return (f'<b class="fv-dexit">The fixed-region gate fired at step {n}</b>{of_full}: the mean confidence '
                f'over all {len(last.prediction)} canvas positions reached {cfg.gate.threshold:g}, and the {masked} '
                "positions still masked took this step's argmax. The region knows nothing about where the answer "
                "sits; the EOS padding, confident early, is most of it.")
    if stopped_by == "threshold":
        return (f"<b>Every position was decoded</b>: threshold unmasking committed each masked position of a block "
                f"once its confidence reached {cfg.schedule.unmask_threshold:g} (at least one a step), in {n} "
                f"steps{of_full}.")
    return f"<b>Every position was decoded</b> by the schedule, in {n} steps{of_full}: no early exit ended the decode."


def _why_no_cvc(last, latch, task) -> str:
    if not task:
        return "CVC never fired: without a task parser there is no candidate span to verify."
    if last.span is None:
        return "CVC never fired: the task's answer slot never appeared in the prediction."
    return (f"CVC never fired before the schedule finished: at the last step the span had held {last.held} "
            f"step{'s' * (last.held != 1)} (needs {latch.stable_steps}) at least settled confidence "
            f"{last.span_confidence:.2f} (needs τc = {latch.tau_c:g}).")


def _bwec_sentence(steps, latch, block_length: int) -> str:
    length = len(steps[0].prediction)
    final_lo = ((length - 1) // block_length) * block_length
    guard = (f"BWEC never acts on the final block (positions {final_lo}–{length - 1}): only CVC ends the decode "
             "early there.")
    fired = [st for st in steps if st.rule == "bwec"]
    if not fired and block_length == 1:
        return ("BWEC had nothing to commit early: on blocks of 1 the schedule already commits a whole block "
                "each step, so only CVC can end this decode early.")
    if not fired:
        return (f"BWEC never fired: no non-final block had every masked position at confidence ≥ τb = "
                f"{latch.tau_b:g}. {guard}")
    before = {st.step: steps[i - 1].committed if i else (False,) * length for i, st in enumerate(steps)}
    counts = [sum(a and not b for a, b in zip(st.committed, before[st.step])) for st in fired]
    parts = [f"block {st.block} at step {st.step + 1} ({n} position{'s' * (n != 1)} at once)"
             for st, n in zip(fired, counts)]
    return (f"BWEC committed {', '.join(parts)}: every still-masked position of the block had confidence ≥ "
            f"τb = {latch.tau_b:g}. {guard}")


# ---- timed speed and counts -------------------------------------------------------------------
def _ratio(s: Speedup | None) -> str:
    return "—" if s is None else s.cell()


def speed_html(chosen: str, decodes: dict[str, Decode], timings: Timings | None, status: str = "") -> str:
    """Headline (the chosen decoding's timed tokens/s over the full schedule's and the autoregressive
    target's) and the table of timed figures and counts; `status` while the decodes run."""
    if status:
        return f'<div class="fv-metrics"><div class="fv-speedup fv-running">{html.escape(status)}</div></div>'
    if not decodes or timings is None or not timings.repeats:
        return '<div class="fv-metrics"><div class="fv-speedup fv-running">Press Run to decode.</div></div>'
    n = len(timings.repeats)
    head = " · ".join(
        f'<span class="fv-head-item" data-versus="{b}" data-speedup="{s.median:.2f}"><b>{s.median:.2f}×</b> '
        f'{"the full schedule" if b == FULL else "the autoregressive target"}</span>'
        for b in (FULL, AUTOREGRESSIVE) if b != chosen and (s := timings.speedup(chosen, b)))
    spread = "one timed run: single timings vary run to run" if n == 1 else f"median of {n} interleaved timed runs"
    methods = [m for m in dict.fromkeys((chosen, FULL, AUTOREGRESSIVE)) if m in decodes]
    tps = {m: timings.median_tokens_per_s(m) for m in methods}

    def row(name: str, cells: list[str], cls: str = "") -> str:
        return f'<tr class="{cls}"><th>{name}</th>' + "".join(f"<td>{c}</td>" for c in cells) + "</tr>"

    rows = [row(f"timed: median of {n} interleaved run{'s' * (n != 1)}", [""] * len(methods), "fv-section"),
            row("tokens / s (answer tokens)", ["—" if tps[m] is None else f"{tps[m]:.1f}" for m in methods]),
            row("wall time", ["—" if not tps[m] else f"{decodes[m].answer_tokens / tps[m]:.2f} s" for m in methods]),
            row("× full schedule (range)", ["1.00×" if m == FULL else _ratio(timings.speedup(m, FULL)) for m in methods],
                "fv-timed-speedup"),
            row("× autoregressive (range)", ["1.00×" if m == AUTOREGRESSIVE else
                                             _ratio(timings.speedup(m, AUTOREGRESSIVE)) for m in methods]),
            row("counts (every run of a decoding makes the same tokens)", [""] * len(methods), "fv-section"),
            row("steps (denoising forwards; target forwards)", [str(decodes[m].steps) for m in methods]),
            row("answer tokens", [str(decodes[m].answer_tokens) for m in methods]),
            row("stopped by", [RULES.get(decodes[m].stopped_by, (decodes[m].stopped_by,))[0] for m in methods]),
            row("answer", [f'<span class="fv-danswer">{html.escape(decodes[m].text) or "∅"}</span>' for m in methods])]
    cols = "".join(f"<th>{COLUMN_NAMES[m]}</th>" for m in methods)
    headline = (f'<div class="fv-speedup">{DECODINGS[chosen]}: {head} <span class="fv-over">in tokens/s</span> '
                f'<span class="fv-spread">({spread})</span></div>') if head else ""
    return (f'<div class="fv-metrics">{headline}<table><thead><tr><th></th>{cols}</tr></thead>'
            f'<tbody>{"".join(rows)}</tbody></table></div>')


def summary(chosen: str, steps, decodes: dict[str, Decode], timings: Timings, **extra) -> dict:
    """Machine-readable figures of a diffusion request (the API's JSON output)."""
    def one(m: str) -> dict | None:
        if m not in decodes:
            return None
        d, tps = decodes[m], timings.median_tokens_per_s(m)
        return {"steps": d.steps, "answer_tokens": d.answer_tokens, "stopped_by": d.stopped_by, "answer": d.text,
                "tokens_per_s": None if tps is None else round(tps, 3)}

    def median(m: str, base: str) -> float | None:
        s = timings.speedup(m, base)
        return None if s is None else s.median
    stop = next((st.step + 1 for st in steps if st.rule in ("cvc", "gate")), None)
    return {"decoding": chosen, **{m: one(m) for m in (chosen, FULL, AUTOREGRESSIVE)},
            "speedup_vs_full": median(chosen, FULL), "speedup_vs_autoregressive": median(chosen, AUTOREGRESSIVE),
            "early_exit_step": stop, "bwec_steps": [st.step + 1 for st in steps if st.rule == "bwec"],
            "grid_steps": len(steps), "timing": {"repeats": len(timings.repeats), "tokens_per_s": timings.repeats},
            **extra}

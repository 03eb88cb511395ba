"""Plotly figures of a run: focus shifts along the trajectory and the per-request analysis
(accepted length per round, its histogram, draft vs verify time, mode comparison).

Pure functions: trace records in, `plotly.graph_objects.Figure` out. No gradio; the figures
carry no animation frames (they do not play inside `gr.Plot`), the app scrubs with a slider.
"""
from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from app.focus import JACCARD_TOP, FocusStep, focus_shifts
from fovea.trace import IterationTrace

TEAL, AMBER, SLATE, ROSE = "#0d9488", "#f59e0b", "#475569", "#e11d48"


def _style(fig: go.Figure, title: str, height: int = 280) -> go.Figure:
    # template "none" + explicit colours: the named templates cost ~0.25 s per figure to apply
    fig.update_layout(template="none", title=dict(text=title, x=0.01, font=dict(size=14)), height=height,
                      paper_bgcolor="white", plot_bgcolor="white", font=dict(size=12, color="#1f2937"),
                      margin=dict(l=56, r=56, t=48, b=44),
                      legend=dict(orientation="h", y=1.02, x=1, xanchor="right", yanchor="bottom"))
    fig.update_xaxes(gridcolor="#e5e7eb", linecolor="#9ca3af", zeroline=False)
    fig.update_yaxes(gridcolor="#e5e7eb", linecolor="#9ca3af", zeroline=False)
    return fig


def empty_figure(message: str) -> go.Figure:
    fig = go.Figure()
    fig.add_annotation(text=message, showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper",
                       font=dict(size=13, color=SLATE))
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    return _style(fig, "", height=220)


def focus_shift_figure(trajectory: list[FocusStep], top: int = JACCARD_TOP, locality: list | None = None) -> go.Figure:
    """K per focus step (bars, right axis) and the Top-`top` Jaccard distance between adjacent
    steps (line, left axis): how far the drafter's focus moves as decoding proceeds. `locality`
    (`fovea.locality.focus_locality` over the same steps) adds PRR's per-step overlap |P∩T|/|T|
    and weighted hit rate of the predicted selection."""
    if not trajectory:
        return empty_figure("No draft state read the visual memory (correction off?).")
    steps = list(range(1, len(trajectory) + 1))
    hover = [f"round {s.iteration}, node {s.node}" for s in trajectory]
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    fig.add_trace(go.Bar(x=steps, y=[s.retrieval.k for s in trajectory], name="K (entries retrieved)",
                         marker_color="rgba(13,148,136,0.35)", hovertext=hover), secondary_y=True)
    fig.add_trace(go.Scatter(x=steps[1:], y=focus_shifts(trajectory, top), name=f"Top-{top} Jaccard distance",
                             mode="lines+markers", line=dict(color=ROSE, width=2), hovertext=hover[1:]),
                  secondary_y=False)
    if locality:
        for name, key, colour in (("PRR overlap |P∩T|/|T|", "overlap", SLATE), ("PRR hit rate (weighted)", "hit_rate", AMBER)):
            ys = [getattr(s, key) for s in locality]
            fig.add_trace(go.Scatter(x=steps, y=ys, name=name, mode="lines+markers", connectgaps=False,
                                     line=dict(color=colour, width=1.5, dash="dot"), marker=dict(size=5)),
                          secondary_y=False)
    fig.update_yaxes(title_text="distance / overlap (0-1)", range=[0, 1.05], secondary_y=False)
    fig.update_yaxes(title_text="K", rangemode="tozero", showgrid=False, secondary_y=True)
    fig.update_xaxes(title_text="focus step (draft state on the committed path)")
    return _style(fig, "Focus shifts along the decoding trajectory", height=320)


def accept_length_figure(rounds: list[IterationTrace]) -> go.Figure:
    """τ per round (accepted draft tokens + bonus), split into its two parts."""
    if not rounds:
        return empty_figure("No FOVEA rounds yet.")
    x = [it.iteration for it in rounds]
    fig = go.Figure([go.Bar(x=x, y=[it.accepted_draft for it in rounds], name="accepted draft tokens",
                            marker_color=TEAL),
                     go.Bar(x=x, y=[1] * len(rounds), name="bonus token", marker_color=AMBER)])
    fig.update_layout(barmode="stack")
    fig.update_xaxes(title_text="round")
    fig.update_yaxes(title_text="accepted length τ", rangemode="tozero")
    return _style(fig, "Accepted length per round")


def accept_histogram_figure(rounds: list[IterationTrace]) -> go.Figure:
    if not rounds:
        return empty_figure("No FOVEA rounds yet.")
    taus = [it.accept_length for it in rounds]
    values = list(range(1, max(taus) + 1))
    fig = go.Figure(go.Bar(x=values, y=[taus.count(v) for v in values], marker_color=TEAL, name="rounds"))
    fig.update_xaxes(title_text="accepted length τ (bonus included)", dtick=1)
    fig.update_yaxes(title_text="rounds", rangemode="tozero")
    return _style(fig, f"Histogram of accepted lengths (mean τ = {sum(taus) / len(taus):.2f})")


def timing_figure(rounds: list[IterationTrace], baseline_forward_ms: float | None = None) -> go.Figure:
    """Draft, verify and commit milliseconds per round (stacked); the baseline's mean
    per-token forward as a dashed line when given."""
    if not rounds:
        return empty_figure("No FOVEA rounds yet.")
    x = [it.iteration for it in rounds]
    fig = go.Figure([go.Bar(x=x, y=[it.draft_ms for it in rounds], name="draft", marker_color=TEAL),
                     go.Bar(x=x, y=[it.verify_ms for it in rounds], name="verify", marker_color=SLATE),
                     go.Bar(x=x, y=[it.commit_ms for it in rounds], name="commit", marker_color=AMBER)])
    if baseline_forward_ms:
        fig.add_hline(y=baseline_forward_ms, line_dash="dash", line_color=ROSE,
                      annotation_text="autoregressive ms / token", annotation_position="top left")
    fig.update_layout(barmode="stack")
    fig.update_xaxes(title_text="round")
    fig.update_yaxes(title_text="ms", rangemode="tozero")
    return _style(fig, "Draft vs verify time per round")


def comparison_figure(rows: list[dict]) -> go.Figure:
    """Speedup and mean τ of each compared variant (rows from `app.render.comparison_row`)."""
    if not rows:
        return empty_figure("Pick a retrieval mode and press Compare.")
    names = [r["variant"] for r in rows]
    fig = make_subplots(rows=1, cols=2, subplot_titles=("speedup over autoregressive", "mean accepted length τ"))
    fig.add_trace(go.Bar(x=names, y=[r["speedup"] or 0.0 for r in rows], marker_color=TEAL, name="speedup"), 1, 1)
    fig.add_trace(go.Bar(x=names, y=[r["mean_tau"] for r in rows], marker_color=AMBER, name="τ"), 1, 2)
    fig.update_layout(showlegend=False)
    return _style(fig, "")

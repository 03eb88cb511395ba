"""Rendering of `run_analyses` results: a Markdown section for results.md and plotly HTML figures.

Pure functions of the result dict (plus file writes for the figures); no decoding happens here.
"""
from __future__ import annotations

from pathlib import Path


def _f(v, p: int = 2, pct: bool = False) -> str:
    if v is None:
        return "-"
    return f"{100 * v:.0f}%" if pct else f"{v:.{p}f}"


def _row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def markdown_section(a: dict) -> str:
    meta = a["meta"]
    lines = ["", f"## Analyses ({meta['n_samples']} held-out questions, {meta['max_new_tokens']} new tokens, "
                 "greedy FOVEA)", ""]
    return "\n".join(lines + _budget_md(a["visual_budget"]) + _drift_md(a["focus_drift"])
                     + _grounding_md(a["grounding"]) + _k_md(a["k_distribution"])) + "\n"


def _budget_md(b: dict) -> list[str]:
    lines = ["### Visual-budget sweep", "",
             "Accept length (bonus counted) when the drafter may read only the top x% of memory entries by the "
             "root state's retrieval probability (0% = no correction); preferred budget = smallest budget reaching "
             "the state's maximum.", "",
             "| budget | mean accept length | preferred (all) | preferred (early) | preferred (late) |",
             "|---|---|---|---|---|"]
    for key in b["budgets"]:
        lines.append(f"| {key}% | {_f(b['mean_accept_length'][key])} | {_f(b['preferred_share'][key], pct=True)} "
                     f"| {_f(b['early']['preferred_share'][key], pct=True)} "
                     f"| {_f(b['late']['preferred_share'][key], pct=True)} |")
    lines += ["", f"Mean preferred budget: {_f(b['mean_preferred_budget'], pct=True)} over {b['n_states']} states "
                  f"(early {_f(b['early']['mean_preferred_budget'], pct=True)}, "
                  f"late {_f(b['late']['mean_preferred_budget'], pct=True)}); decode identical to autoregressive: "
                  f"{'yes' if b['decode_matches_autoregressive'] else 'NO'}.", ""]
    return lines


def _drift_md(d: dict) -> list[str]:
    lines = [f"### Focus drift (Top-{d['top_n']} Jaccard distance between adjacent rounds' root retrievals)", "",
             "| family | mean | early | late | pairs |", "|---|---|---|---|---|"]
    for fam, s in [*d["per_family"].items(), ("all", d)]:
        lines.append(f"| {fam} | {_f(s['mean'])} | {_f(s['early'])} | {_f(s['late'])} | {s['n_pairs']} |")
    return lines + [""]


def _grounding_md(g: dict) -> list[str]:
    if "skipped" in g:
        return ["### Grounding score", "", f"Skipped: {g['skipped']}.", ""]
    fams = sorted({f for m in g["modes"].values() for f in m["per_family"]})
    lines = ["### Grounding score (share of root retrieval mass on the object the next token names)", "",
             f"An entry is on-object when the object's mask covers >= {_f(g['coverage_threshold'], pct=True)} of "
             "its patch, or (drawn text: OCR words, bar labels and values) one of its glyphs owns the patch; chance = "
             "the share a uniform readout would put there. FOVEA = cumulative.", "",
             _row(["mode", "grounding", "chance", "states", *fams]), _row(["---"] * (4 + len(fams)))]
    for mode, s in g["modes"].items():
        per = [_f(s["per_family"].get(f, {}).get("mean")) for f in fams]
        lines.append(_row([mode, _f(s["mean"]), _f(s["chance"]), str(s["n_states"]), *per]))
    return lines + [""]


def _k_md(k: dict) -> list[str]:
    lines = [f"### Cumulative-mass K at root states (rho {k['rho']}, K in [{k['k_min']}, {k['k_max']}])", "",
             "| family | mean K | states | histogram (K: states) |", "|---|---|---|---|"]
    for fam, s in k["per_family"].items():
        hist = ", ".join(f"{kk}: {c}" for kk, c in s["hist"].items())
        lines.append(f"| {fam} | {_f(s['mean'], 1)} | {s['n_states']} | {hist} |")
    return lines + [""]


def write_figures(a: dict, out: Path) -> list[Path]:
    """One HTML figure per analysis under `out`; returns the paths written."""
    import plotly.graph_objects as go

    figs = {"visual_budget.html": _budget_fig(go, a["visual_budget"]),
            "focus_drift.html": _drift_fig(go, a["focus_drift"]),
            "k_distribution.html": _k_fig(go, a["k_distribution"])}
    if "skipped" not in a["grounding"]:
        figs["grounding.html"] = _grounding_fig(go, a["grounding"])
    paths = []
    for name, fig in figs.items():
        fig.update_layout(template="plotly_white")
        fig.write_html(out / name, include_plotlyjs="cdn")
        paths.append(out / name)
    return paths


def _budget_fig(go, b: dict):
    x = [f"{k}%" for k in b["budgets"]]
    fig = go.Figure()
    for part, s in (("all", b), ("early", b["early"]), ("late", b["late"])):
        fig.add_bar(name=f"preferred share ({part})", x=x, y=[s["preferred_share"][k] for k in b["budgets"]])
    fig.add_scatter(name="mean accept length", x=x, y=[b["mean_accept_length"][k] for k in b["budgets"]],
                    yaxis="y2", mode="lines+markers")
    fig.update_layout(title="Visual-budget sweep: preferred budget per draft state", barmode="group",
                      xaxis_title="memory budget", yaxis_title="share of states",
                      yaxis2={"title": "accept length", "overlaying": "y", "side": "right"})
    return fig


def _drift_fig(go, d: dict):
    fams = [*d["per_family"], "all"]
    stats = {**d["per_family"], "all": d}
    fig = go.Figure()
    for part in ("early", "late"):
        fig.add_bar(name=part, x=fams, y=[stats[f][part] for f in fams])
    fig.update_layout(title=f"Focus drift: Top-{d['top_n']} Jaccard distance between adjacent rounds",
                      barmode="group", yaxis_title="Jaccard distance")
    return fig


def _grounding_fig(go, g: dict):
    modes = list(g["modes"])
    fig = go.Figure()
    fig.add_bar(name="grounding", x=modes, y=[g["modes"][m]["mean"] for m in modes])
    fig.add_bar(name="chance", x=modes, y=[g["modes"][m]["chance"] for m in modes])
    fig.update_layout(title="Grounding: retrieval mass on the object the next token names", barmode="group",
                      yaxis_title="share of retrieval mass")
    return fig


def _k_fig(go, k: dict):
    fig = go.Figure()
    for fam, s in k["per_family"].items():
        if fam != "all":
            fig.add_bar(name=fam, x=[int(v) for v in s["hist"]], y=list(s["hist"].values()))
    fig.update_layout(title="Cumulative-mass K at root draft states", barmode="group", xaxis_title="K",
                      yaxis_title="states")
    return fig

"""Benchmark reports: results.md tables (speed, per family, ranking, correction gain, tree sweep),
results.json and the speedup figure. No decoding happens here.
"""
from __future__ import annotations

import json
import statistics
from pathlib import Path

from fovea.bench.methods import SWEEP_DRAFTERS, TREE_SHAPES, shape_name
from fovea.bench.stats import correction_gain, family_mean_speedup, ranking
from fovea.jsonl import read_jsonl, write_jsonl_gz
from fovea.methods import CONTEXTS, FOVEA


def repeats_note(meta: dict) -> str:
    """How each question's wall time was taken, where it was timed more than once (`--repeats`)."""
    r = meta.get("repeats", 1)
    return f"; each question timed {r} times per method, its wall time the median" if r > 1 else ""


def markdown(summary: dict, methods: list[str], meta: dict) -> str:
    lines = [f"Benchmark {meta['date']} on {meta['machine']}; {meta.get('n_questions')} held-out questions, "
             f"max {meta.get('max_new_tokens')} new tokens, greedy"
             + repeats_note(meta)
             + (f"; speed part took {meta['run_minutes']} min" if meta.get("run_minutes") is not None else "")
             + f". Command: `{meta['command']}`", ""]
    if meta.get("cold_start"):
        c = meta["cold_start"]
        lines += [f"Cold start (fresh process: import, load the bundled default, answer one question, "
                  f"{c['tokens']} tokens): {c['process_wall_s']:.1f} s", ""]

    def f(v, p=2):
        return "-" if v is None else f"{v:.{p}f}"
    fams = [fam for fam in summary if fam != "all"]

    def table(fam: str) -> list[str]:
        rows = ["| method | speedup (ratio of medians) | mean over families | speedup (median per q) | tau (+bonus) "
                "| tau (no bonus) | tok/s | draft ms | verify ms | commit ms | lossless |", "|" + "---|" * 11]
        for m in methods:
            s = summary[fam][m]
            mean = family_mean_speedup(summary, m) if fam == "all" else None
            rows.append(f"| {m} | {f(s['speedup_ratio_of_medians'])}x | {f(mean)}x "
                        f"| {f(s['speedup_median_per_question'])}x | {f(s['tau_with_bonus'])} "
                        f"| {f(s['tau_without_bonus'])} | {f(s['tokens_per_s'], 1)} | {f(s['draft_ms'])} "
                        f"| {f(s['verify_ms'])} | {f(s['commit_ms'])} | {'yes' if s['lossless'] else 'NO'} |")
        return rows
    lines += ["### All task families pooled", "", *table("all")]
    lines += ["", "### Per task family: speedup (ratio of medians) / tau with bonus / lossless", "",
              "| method | " + " | ".join(fams) + " |", "|" + "---|" * (len(fams) + 1)]
    for m in methods:
        cells = []
        for fam in fams:
            s = summary[fam][m]
            cells.append(f"{f(s['speedup_ratio_of_medians'])}x / {f(s['tau_with_bonus'])} / "
                         f"{'yes' if s['lossless'] else 'NO'}")
        lines.append(f"| {m} | " + " | ".join(cells) + " |")
    lines += _acceptance_table(summary["all"], methods)
    ranked = ranking(summary, methods)
    if ranked:
        place = next((i + 1 for i, r in enumerate(ranked) if r["method"] == FOVEA.name), None)
        lines += ["", "### Trained drafters ranked by speedup averaged over task families", "",
                  " ".join(f"{i + 1}. {r['method']} ({r['mean_speedup']:.2f}x)" for i, r in enumerate(ranked)), "",
                  f"FOVEA ranks {place} of {len(ranked)}." if place else "FOVEA was not run."]
    gains = correction_gain(summary, methods)
    if gains:
        lines += ["", "### What the correction buys: FOVEA's speedup over its \"- correction\" ablation", "",
                  "| drafter context | FOVEA / ablation (pooled) | " + " | ".join(fams) + " | tau FOVEA | tau ablation |",
                  "|" + "---|" * (len(fams) + 4)]
        for g in gains:
            cells = [f"{f(g['family_gain'][fam])}x" for fam in fams]
            lines.append(f"| {CONTEXTS[g['context']].label} | {f(g['gain'])}x | " + " | ".join(cells)
                         + f" | {f(g['tau'])} | {f(g['tau_ablation'])} |")
    for fam in fams:
        lines += ["", f"<details><summary>Family {fam}: every metric</summary>", "", *table(fam), "", "</details>"]
    return "\n".join(lines) + "\n"


def tree_sweep_markdown(summary: dict, meta: dict, shapes=TREE_SHAPES, drafters=SWEEP_DRAFTERS) -> tuple[str, dict]:
    """The sweep's table (pooled over families) and the best shape by the drafters' mean speedup."""
    def f(v):
        return "-" if v is None else f"{v:.2f}"
    allf = summary["all"]
    head = " | ".join(f"{d} speedup | {d} tau (+bonus)" for d in drafters)
    lines = [f"Tree-shape sweep {meta['date']} on {meta['machine']}; {meta['n_questions']} tuning questions "
             f"(fovea.data.tuning_seeds, disjoint from the benchmark's), max {meta['max_new_tokens']} new tokens, "
             f"greedy{repeats_note(meta)}; took {meta['run_minutes']} min. Command: `{meta['command']}`", "",
             f"| depth | top_k | nodes verified | {head} | lossless |", "|" + "---|" * (4 + 2 * len(drafters))]
    score = {}
    for shape in shapes:
        cells = []
        for d in drafters:
            m = allf[shape_name(d, shape)]
            cells += [f"{f(m['speedup_ratio_of_medians'])}x", f(m["tau_with_bonus"])]
        ok = all(allf[shape_name(d, shape)]["lossless"] for d in drafters)
        score[shape] = statistics.mean(allf[shape_name(d, shape)]["speedup_ratio_of_medians"] for d in drafters)
        lines.append(f"| {shape[0]} | {shape[1]} | {shape[2]} | " + " | ".join(cells) + f" | {'yes' if ok else 'NO'} |")
    best = max(score, key=score.get)
    lines += ["", f"Best by the mean of the drafters' pooled speedups: depth {best[0]}, top_k {best[1]}, "
              f"{best[2]} nodes ({score[best]:.2f}x)."]
    return "\n".join(lines) + "\n", {"depth": best[0], "top_k": best[1], "total_tokens": best[2],
                                     "mean_speedup": score[best]}


def pair_sweep_markdown(summary: dict, meta: dict, kind: str, legend: str, labels, pairs,
                        twins_too: bool = False) -> tuple[str, dict]:
    """Per drafter context: the twin, FOVEA as the paper runs it and FOVEA@label per variant (and
    twin@label with `twins_too`; pooled speedup, tau, speed over the plain twin's); the best variant
    per drafter by speedup."""
    allf = summary["all"]
    lines = [f"{kind.capitalize()} sweep {meta['date']} on {meta['machine']}; {meta['n_questions']} tuning questions "
             f"(fovea.data.tuning_seeds, disjoint from the benchmark's), max {meta['max_new_tokens']} new tokens, "
             f"greedy{repeats_note(meta)}; took {meta['run_minutes']} min. Command: `{meta['command']}`", "", legend, "",
             "| method | speedup | tau (+bonus) | over the twin | lossless |", "|---|---|---|---|---|"]
    best = {}
    for fovea, twin in pairs:
        ref = allf[twin]["speedup_ratio_of_medians"]
        swept = tuple(d for d in ((fovea, twin) if twins_too else (fovea,)) if d not in best)  # a twin of two pairs once
        for name in (twin, fovea, *[f"{d}@{label}" for d in swept for label in labels]):
            m = allf[name]
            lines.append(f"| {name} | {m['speedup_ratio_of_medians']:.2f}x | {m['tau_with_bonus']:.2f} | "
                         f"{m['speedup_ratio_of_medians'] / ref:.3f}x | {'yes' if m['lossless'] else 'NO'} |")
        for d in swept:
            top = max(labels, key=lambda label: allf[f"{d}@{label}"]["speedup_ratio_of_medians"])
            speed = allf[f"{d}@{top}"]["speedup_ratio_of_medians"]
            best[d] = {"variant": top, "speedup": speed, "over_twin": speed / ref}
            lines += [f"| *best for {d}: {top}* | | | | |"]
    return "\n".join(lines) + "\n", best


ROWS_FILE = "rows.jsonl.gz"


def write_rows(out: Path, rows: list[dict]) -> str:
    """The per-question rows as gzipped JSON lines beside results.json (a tenth of their size inline);
    returns the file name."""
    write_jsonl_gz(out / ROWS_FILE, rows)
    return ROWS_FILE


def read_rows(out: Path) -> list[dict]:
    """The rows `write_rows` wrote under `out`."""
    return read_jsonl(out / ROWS_FILE)


def write_results(out: Path, meta: dict, summary: dict, rows: list[dict], methods: list[str],
                  analyses: dict | None) -> str:
    """results.json (the rows in rows.jsonl.gz), results.md and the HTML figures under `out`; returns
    the Markdown."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(
        {"meta": meta, "methods": methods, "families": list(summary), "summary": summary,
         "ranking": ranking(summary, methods), "correction_gain": correction_gain(summary, methods),
         "rows_file": write_rows(out, rows), "analyses": analyses}, indent=1))
    table = markdown(summary, methods, meta)
    write_figures(summary, methods, out)
    if analyses is not None:
        from fovea.analysis.report import markdown_section, write_figures as write_analysis_figures

        table += markdown_section(analyses)
        write_analysis_figures(analyses, out)
    (out / "results.md").write_text(table)
    return table


def write_figures(summary: dict, methods: list[str], out: Path) -> None:
    import plotly.graph_objects as go

    fig = go.Figure()
    for m in methods:
        fams = list(summary)
        fig.add_bar(name=m, x=fams, y=[summary[f][m]["speedup_ratio_of_medians"] for f in fams])
    fig.update_layout(title="Speedup over autoregressive decoding (ratio of medians)", barmode="group",
                      yaxis_title="x", template="plotly_white")
    fig.write_html(out / "speedup.html", include_plotlyjs="cdn")


def _acceptance_table(pooled: dict, methods: list[str], positions: int = 8) -> list[str]:
    """Acceptance rate at each draft position (`stats.acceptance_by_position`), pooled, first `positions`."""
    drafted = [m for m in methods if pooled[m].get("acceptance_by_position")]
    if not drafted:
        return []
    head = " | ".join(f"d{d}" for d in range(1, positions + 1))
    rows = [f"| {m} | " + " | ".join(f"{r:.2f}" if (r := _at(pooled[m]["acceptance_by_position"], d)) is not None
                                     else "-" for d in range(positions)) + " |" for m in drafted]
    return ["", "### Acceptance rate by draft position (of the rounds that reached it, the share accepted)", "",
            f"| method | {head} |", "|" + "---|" * (positions + 1), *rows]


def _at(values: list, i: int):
    return values[i] if i < len(values) else None


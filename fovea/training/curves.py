"""`python -m fovea.train curves RUN_DIR [RUN_DIR ...] [--out PNG]`: the training curves of a
target run (`python -m fovea.train target` or `deep`) as one PNG (drawn with Pillow, no plotting dependency): the loss, the held-out
teacher-forced mention-token accuracy per task family, the per-patch probe accuracy per label kind
and, when the run supervised attention, the grounding mass per decoder layer, against the step.

Reads log.jsonl and curves.jsonl of each RUN_DIR (written by `python -m fovea.train target`), or their
gzipped copies (.gz, as committed under assets/results). Several run dirs (a run continued with
--init-from in a new dir) are joined in step order; where two cover the same step, the later dir wins.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from PIL import Image, ImageDraw

from fovea.jsonl import read_jsonl

COLOURS = ((31, 119, 180), (255, 127, 14), (44, 160, 44), (214, 39, 40), (148, 103, 189), (140, 86, 75),
           (227, 119, 194), (127, 127, 127), (188, 189, 34), (23, 190, 207), (0, 0, 0))
W, H, PAD = 420, 260, 44


def run_file(run: Path, name: str) -> Path | None:
    """RUN/name, or its gzipped copy RUN/name.gz (a run committed under assets/results); None if neither."""
    return next((p for p in (run / name, run / f"{name}.gz") if p.exists()), None)


def joined(runs: list[Path], name: str) -> list[dict]:
    """The records of RUN/name over several runs by step; a later run overrides the steps it repeats."""
    by_step: dict[int, dict] = {}
    for run in runs:
        path = run_file(run, name)
        for r in read_jsonl(path) if path else []:
            by_step[r["step"]] = r
    return [by_step[k] for k in sorted(by_step)]


def series(runs: Path | list[Path]) -> list[tuple[str, dict[str, list[tuple[float, float]]], tuple[float, float] | None]]:
    """[(panel title, {line name: [(step, value)]}, fixed y range or None)]."""
    runs = [runs] if isinstance(runs, Path) else list(runs)
    log, curves = joined(runs, "log.jsonl"), joined(runs, "curves.jsonl")
    every = max(1, len(log) // 300)
    loss = {"lm (weighted)": [(r["step"], r["lm"]) for r in log[::every] if "lm" in r]}  # none in a vision phase
    # the target's aux term; a deep (distilled) run's KL to the teacher and per-group hidden distance
    for key, name in (("aux", "aux"), ("kd", "kd (KL to teacher)"), ("hidden", "hidden (per group)")):
        if any(key in r for r in log):
            loss[name] = [(r["step"], r[key]) for r in log[::every] if key in r]
    grounded = [r for r in log[::every] if "ground" in r]
    if grounded:
        loss["grounding"] = [(r["step"], r["ground"]) for r in grounded]
    attributed = [r for r in log[::every] if "attrs" in r]
    if attributed:
        loss["object attributes"] = [(r["step"], r["attrs"]) for r in attributed]
    family: dict[str, list] = {}
    probe: dict[str, list] = {}
    ground: dict[str, list] = {}
    for r in curves:
        by_family: dict[str, list[float]] = {}
        for key, value in r.items():
            if key.startswith("probe/"):
                probe.setdefault(key[6:], []).append((r["step"], value))
            elif key.startswith("ground/"):
                ground.setdefault(key[7:], []).append((r["step"], value))
            elif isinstance(value, dict) and value.get("mention_tok") is not None:
                by_family.setdefault(key.split("/")[0], []).append(value["mention_tok"])
        for fam, values in by_family.items():
            family.setdefault(fam, []).append((r["step"], sum(values) / len(values)))
    panels = [("training loss", loss, None), ("held-out mention-token accuracy", family, (0, 1)),
              ("per-patch probe accuracy (object patches)", probe, (0, 1))]
    if ground:
        panels.append(("attention mass on the named object (best head)", ground, (0, 1)))
    return panels


def panel(title: str, lines: dict, yrange) -> Image.Image:
    img = Image.new("RGB", (W, H), "white")
    d = ImageDraw.Draw(img)
    d.text((PAD, 6), title, fill="black")
    points = [p for pts in lines.values() for p in pts]
    if not points:
        d.text((PAD, H // 2), "no data yet", fill="grey")
        return img
    x0, x1 = min(p[0] for p in points), max(p[0] for p in points) or 1
    y0, y1 = yrange or (min(p[1] for p in points), max(p[1] for p in points))
    y1 = y1 if y1 > y0 else y0 + 1
    sx = lambda x: PAD + (x - x0) / max(1e-9, x1 - x0) * (W - 2 * PAD)  # noqa: E731
    sy = lambda y: H - PAD + (y0 - y) / (y1 - y0) * (H - 2 * PAD)  # noqa: E731
    d.rectangle((PAD, PAD, W - PAD, H - PAD), outline=(180, 180, 180))
    for frac in (0, 0.5, 1):
        y = y0 + frac * (y1 - y0)
        d.text((2, sy(y) - 5), f"{y:.2f}", fill="grey")
    d.text((PAD, H - PAD + 4), f"step {x0:g}", fill="grey")
    d.text((W - PAD - 60, H - PAD + 4), f"step {x1:g}", fill="grey")
    for i, (name, pts) in enumerate(sorted(lines.items())):
        colour = COLOURS[i % len(COLOURS)]
        if len(pts) > 1:
            d.line([(sx(x), sy(y)) for x, y in pts], fill=colour, width=2)
        d.text((PAD + 4 + (i % 3) * 120, H - PAD + 18 + (i // 3) * 12), f"- {name}", fill=colour)
    return img


def draw(runs: Path | list[Path], out: Path) -> Path:
    panels = [panel(*s) for s in series(runs)]
    sheet = Image.new("RGB", (W * len(panels), H + 30), "white")
    for i, p in enumerate(panels):
        sheet.paste(p, (i * W, 0))
    out.parent.mkdir(parents=True, exist_ok=True)
    sheet.save(out)
    return out


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m fovea.train curves", description=__doc__)
    p.add_argument("run_dirs", type=Path, nargs="+", metavar="RUN_DIR")
    p.add_argument("--out", type=Path, help="PNG path (default: the last RUN_DIR/curves.png)")
    args = p.parse_args(argv)
    for run in args.run_dirs:
        if run_file(run, "log.jsonl") is None:
            p.error(f"{run} has no log.jsonl; pass the --run-dir of `python -m fovea.train target`")
    print(draw(args.run_dirs, args.out or args.run_dirs[-1] / "curves.png"))


if __name__ == "__main__":
    main()

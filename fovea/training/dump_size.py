"""`python -m fovea.train dump-size --dumps DIR --out assets/results/dumps`: the measured size (and
speed) of an existing dump per sample, beside the size the formula gives for 7B-class targets.

Per sample, tensors only (`fovea.training.dump.bytes_per_sample`, ~0.5 KB of header on top):
    T (4 + 1 + 4) + (T + N) D b + T k (4 + b) [+ T N for grounding labels]
T tokens (image placeholders included), N visual entries, D hidden size, b bytes per stored value
(2: fp16 / bf16), k stored top-k logits. Once per dump: the embedding and LM head, 2 V D bytes in the
target's dtype. The 7B rows state their T and N: a prompt of 64 text tokens and an answer of 256.
Knows nothing about training.
"""
from __future__ import annotations

import argparse
import json
from dataclasses import asdict, dataclass
from pathlib import Path

from fovea.jsonl import read_jsonl
from fovea.training.dump import RUNS, bytes_per_sample
from fovea.training.dumps import DumpHead, read_index

TEXT_TOKENS = 64 + 256          # prompt text + answer tokens assumed for the 7B rows


@dataclass(frozen=True)
class Shape:
    name: str
    hidden: int         # D
    visual: int         # N: visual entries per image
    vocab: int          # V
    note: str


SHAPES_7B = (
    Shape("LLaVA-1.5-7B", 4096, 576, 32064, "336 px, 24 x 24 patches"),
    Shape("LLaVA-NeXT-7B (vicuna)", 4096, 2880, 32064, "anyres 2 x 2 tiles + base tile, the largest layout"),
    Shape("Qwen2.5-VL-7B", 3584, 256, 152064, "448 x 448 px (this project's default resize), 14 px patches, 2 x 2 merge"),
)


def formula_row(shape: Shape, top_k: int = 0) -> dict:
    tokens = shape.visual + TEXT_TOKENS
    per = bytes_per_sample(tokens, shape.visual, shape.hidden, 2, top_k)
    return {**asdict(shape), "tokens": tokens, "top_k": top_k, "bytes_per_sample": per,
            "mb_per_sample": round(per / 1e6, 2), "gb_per_100k_samples": round(per * 1e5 / 1e9, 1),
            "head_gb_bf16": round(2 * shape.vocab * shape.hidden * 2 / 1e9, 2)}


def measured(folder: Path) -> dict:
    """Bytes, tokens and visual entries per sample of a dump, against the formula, and its dump speed."""
    head, entries = DumpHead(folder), read_index(folder)
    n = len(entries)
    ground = "ground" in _first_keys(folder, entries[0])
    formula = sum(bytes_per_sample(e["tokens"], e["visual"], head.hidden_size, 2, head.meta["top_k"], ground)
                  for e in entries) / n
    runs = read_jsonl(folder / RUNS) if (folder / RUNS).exists() else []
    written, seconds = sum(r["written"] for r in runs), sum(r["seconds"] for r in runs)
    return {"target": head.meta["target"], "samples": n, "hidden": head.hidden_size, "dtype": head.meta["dtype"],
            "grounding_labels": ground, "mean_tokens": sum(e["tokens"] for e in entries) / n,
            "mean_visual": sum(e["visual"] for e in entries) / n,
            "bytes_per_sample_measured": sum(e["bytes"] for e in entries) / n, "bytes_per_sample_formula": formula,
            "head_bytes": (folder / "head.safetensors").stat().st_size,
            "ms_per_sample": round(1e3 * seconds / written, 1) if written else None}


def _first_keys(folder: Path, entry: dict) -> set[str]:
    from safetensors import safe_open

    with safe_open(str(folder / entry["file"]), "pt") as f:
        return set(f.keys())


def markdown(report: dict) -> str:
    m = report["measured"]
    lines = [f"Measured on {m['target']} ({m['samples']} samples, {m['dtype']}): {m['bytes_per_sample_measured'] / 1e3:.1f} KB "
             f"per sample (formula {m['bytes_per_sample_formula'] / 1e3:.1f} KB + headers), T {m['mean_tokens']:.0f}, "
             f"N {m['mean_visual']:.0f}, D {m['hidden']}; {m['ms_per_sample']} ms per sample to dump.", "",
             f"Formula: {report['formula']}", "",
             "| target | D | N | T | MB per sample | GB per 100k samples | head (GB, once) |", "|---|---|---|---|---|---|---|"]
    for r in report["7b"]:
        lines.append(f"| {r['name']} | {r['hidden']} | {r['visual']} | {r['tokens']} | {r['mb_per_sample']} | "
                     f"{r['gb_per_100k_samples']} | {r['head_gb_bf16']} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m fovea.train dump-size", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dumps", type=Path, required=True, help="a dump folder (python -m fovea.train dump)")
    p.add_argument("--out", type=Path, default=Path("assets/results/dumps"))
    p.add_argument("--command", default="", help="the dump command, recorded beside the numbers")
    args = p.parse_args(argv)
    from fovea.training.dump import DumpError

    try:
        report = {"command": args.command, "measured": measured(args.dumps),
                  "formula": "T (4 + 1 + 4) + (T + N) D b + T k (4 + b) [+ T N grounding] bytes; head 2 V D b once",
                  "7b_assumption": f"T = N + {TEXT_TOKENS} (64 prompt + 256 answer tokens), b = 2, k = 0",
                  "7b": [formula_row(s) for s in SHAPES_7B]}
    except DumpError as err:
        raise SystemExit(f"dump_size: {err}") from None
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "dump_size.json").write_text(json.dumps(report, indent=2))
    text = markdown(report)
    (args.out / "dump_size.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()

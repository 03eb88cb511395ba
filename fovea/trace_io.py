"""Trace files: a request's runs (their full record streams) as versioned JSON, and back.

A trace file lets someone look at a run again, or on another machine, without the model: it holds
every round's draft tree, verdicts, retrievals and the top tokens before / after the correction,
plus the display text of every token id it mentions (so no tokenizer is needed to read it).
Knows nothing about the app; `load_trace` raises `TraceFormatError` with one sentence for any
file it cannot read.

Schema `fovea-trace`, version 1 (all keys required unless marked optional):

    {"schema": "fovea-trace", "version": 1,
     "question": str, "image_png": str (base64 PNG of the input, long side <= 512 px),
     "memory_grid": [rows, cols], "image_size": int (model input side) | null,
     "config": {...} (FoveaConfig as nested dicts, optional),
     "vocab": {"<token id>": display text, ...},
     "timing": {...} (optional: repeats, per-method wall times, median speedup),
     "runs": {"<name>": run, ...}}          # keyed by the race's roles, fovea.methods.ROLES
    run = {"method": str, "tokens": [int], "text": str, "wall_s": float, "prefill_ms": float,
           "target_forwards": int, "accept_lengths": [int], "finish_reason": "eos" | "length",
           "rounds": [round, ...] | "steps": [step, ...]}
    round = {"iteration": int, "tokens": [int], "parents": [int], "depths": [int], "scores": [float],
             "accepted": [int], "emitted": [int], "bonus_token": int, "draft_ms": float,
             "verify_ms": float, "commit_ms": float, "finish": str | null,
             "retrieval": [{"node": int, "indices": [int], "weights": [float], "k": int, "gate": float,
                            "top_before": [[id, p], ...] | null, "top_after": [[id, p], ...] | null}]}
    step = {"step": int, "token": int, "forward_ms": float, "finish": str | null}
"""
from __future__ import annotations

import base64
import io
import json
from dataclasses import dataclass, field

from PIL import Image

from fovea.trace import GenerationResult, IterationTrace, NodeRetrieval, PrefillTrace, StepTrace

SCHEMA = "fovea-trace"
VERSION = 1
MAX_IMAGE_SIDE = 512     # the stored image is for display; the model already read the original


class TraceFormatError(ValueError):
    """A file that is not a readable trace; the message says what is wrong."""


@dataclass
class TraceFile:
    question: str
    image: Image.Image
    memory_grid: tuple[int, int]
    image_size: int | None
    vocab: dict[int, str]
    runs: dict[str, GenerationResult]
    config: dict = field(default_factory=dict)
    timing: dict = field(default_factory=dict)


def display_image(image: Image.Image, side: int = MAX_IMAGE_SIDE) -> Image.Image:
    """The input scaled so its long side is at most `side` (aspect kept): what a trace stores."""
    image = image.convert("RGB")
    scale = side / max(image.size)
    if scale >= 1:
        return image
    return image.resize((max(1, round(image.width * scale)), max(1, round(image.height * scale))), Image.BICUBIC)


# ---- writing ---------------------------------------------------------------------------------
def _retrieval_dict(node: int, r: NodeRetrieval) -> dict:
    return {"node": node, "indices": list(r.indices), "weights": list(r.weights), "k": r.k, "gate": r.gate,
            "top_before": r.top_before and [list(t) for t in r.top_before],
            "top_after": r.top_after and [list(t) for t in r.top_after]}


def _record_dict(rec) -> dict:
    if isinstance(rec, StepTrace):
        return {"step": rec.step, "token": rec.token, "forward_ms": rec.forward_ms, "finish": rec.finish}
    # copies: the dict must not alias the record's lists
    return {"iteration": rec.iteration, "tokens": list(rec.tokens), "parents": list(rec.parents),
            "depths": list(rec.depths), "scores": list(rec.scores), "accepted": list(rec.accepted), "emitted": list(rec.emitted),
            "bonus_token": rec.bonus_token, "draft_ms": rec.draft_ms, "verify_ms": rec.verify_ms,
            "commit_ms": rec.commit_ms, "finish": rec.finish,
            "retrieval": [_retrieval_dict(n, rec.retrieval[n]) for n in sorted(rec.retrieval)]}


def run_dict(result: GenerationResult) -> dict:
    steps = result.iterations and isinstance(result.iterations[0], StepTrace)
    return {"method": result.method, "tokens": list(result.tokens), "text": result.text, "wall_s": result.wall_s,
            "prefill_ms": result.prefill_ms, "target_forwards": result.target_forwards,
            "accept_lengths": list(result.accept_lengths), "finish_reason": result.finish_reason,
            "steps" if steps else "rounds": [_record_dict(r) for r in result.iterations]}


def image_png(image: Image.Image) -> str:
    buf = io.BytesIO()
    display_image(image).save(buf, format="PNG")
    return base64.b64encode(buf.getvalue()).decode("ascii")


def dump_trace(t: TraceFile) -> dict:
    """A TraceFile -> the JSON-ready dict of the schema above."""
    return {"schema": SCHEMA, "version": VERSION, "question": t.question, "image_png": image_png(t.image),
            "memory_grid": list(t.memory_grid), "image_size": t.image_size, "config": t.config,
            "vocab": {str(i): s for i, s in sorted(t.vocab.items())}, "timing": t.timing,
            "runs": {name: run_dict(r) for name, r in t.runs.items()}}


# ---- reading ---------------------------------------------------------------------------------
def _retrieval(d: dict) -> tuple[int, NodeRetrieval]:
    tops = [None if d.get(key) is None else [(int(i), float(p)) for i, p in d[key]] for key in ("top_before", "top_after")]
    return int(d["node"]), NodeRetrieval([int(i) for i in d["indices"]], [float(w) for w in d["weights"]],
                                         int(d["k"]), float(d["gate"]), *tops)


def _round(d: dict) -> IterationTrace:
    n = len(d["tokens"])
    if not (len(d["parents"]) == len(d["depths"]) == len(d["scores"]) == n) or n < 1:
        raise ValueError("tokens, parents, depths and scores differ in length")
    if any(not 0 < a < n for a in d["accepted"]) or any(not -1 <= p < i for i, p in enumerate(d["parents"])):
        raise ValueError("a node index is out of range")
    retrieval = dict(_retrieval(r) for r in d["retrieval"])
    return IterationTrace(int(d["iteration"]), [int(t) for t in d["tokens"]], [int(p) for p in d["parents"]],
                          [int(x) for x in d["depths"]], [float(s) for s in d["scores"]], retrieval,
                          [int(a) for a in d["accepted"]], None, [int(t) for t in d["emitted"]],
                          int(d["bonus_token"]), float(d["draft_ms"]), float(d["verify_ms"]),
                          float(d["commit_ms"]), d["finish"])


def _run(d: dict, grid: tuple[int, int]) -> GenerationResult:
    if "rounds" in d:
        records = [_round(r) for r in d["rounds"]]
    else:
        records = [StepTrace(int(s["step"]), int(s["token"]), float(s["forward_ms"]), s["finish"]) for s in d["steps"]]
    return GenerationResult(str(d["method"]), [int(t) for t in d["tokens"]], str(d["text"]), float(d["wall_s"]),
                            float(d["prefill_ms"]), int(d["target_forwards"]), records,
                            [int(a) for a in d["accept_lengths"]], grid, str(d["finish_reason"]),
                            _prefill(d))


def _prefill(d: dict) -> PrefillTrace | None:
    """The prefill's record, rebuilt: the first token, its time, and the finish when it ended the run."""
    if not d["tokens"]:
        return None
    finish = str(d["finish_reason"]) if len(d["tokens"]) == 1 else None
    return PrefillTrace(int(d["tokens"][0]), float(d["prefill_ms"]), finish)


def _image(b64: str) -> Image.Image:
    with Image.open(io.BytesIO(base64.b64decode(b64, validate=True))) as im:
        return im.convert("RGB")


def load_trace(data) -> TraceFile:
    """A parsed dict, JSON text or bytes -> TraceFile, or TraceFormatError saying what is wrong."""
    if isinstance(data, (str, bytes, bytearray)):
        try:
            data = json.loads(data)
        except (UnicodeDecodeError, json.JSONDecodeError) as err:
            raise TraceFormatError(f"That file is not valid JSON ({err}); export a trace from the app and "
                                   "upload that file.") from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise TraceFormatError(f'That JSON is not a FOVEA trace (it has no "schema": "{SCHEMA}" field); export '
                               "a trace from the app and upload that file.")
    if data.get("version") != VERSION:
        raise TraceFormatError(f"That trace has version {data.get('version')!r}; this app reads version {VERSION}. "
                               "Export it again with this version of FOVEA Studio.")
    section = "the file"
    try:
        grid = tuple(int(x) for x in data["memory_grid"])
        section = "the image"
        image = _image(data["image_png"])
        runs = {}
        for name, run in data["runs"].items():
            section = f"run {name!r}"
            runs[name] = _run(run, grid)
        section = "the vocabulary"
        vocab = {int(k): str(v) for k, v in data["vocab"].items()}
        missing = {t for r in runs.values() for t in _token_ids(r)} - vocab.keys()
        if missing:
            raise ValueError(f"no display text for token ids {sorted(missing)[:5]}")
        return TraceFile(str(data["question"]), image, grid, data.get("image_size"), vocab, runs,
                         data.get("config") or {}, data.get("timing") or {})
    except (KeyError, TypeError, ValueError, AttributeError, OSError) as err:
        what = f"missing field {err}" if isinstance(err, KeyError) else str(err)
        raise TraceFormatError(f"That trace file is damaged in {section} ({what}); export it again from "
                               "the app.") from None


def _token_ids(result: GenerationResult) -> set[int]:
    return set(result.tokens).union(*(rec.mentioned_ids for rec in result.iterations))


def token_ids(runs: dict[str, GenerationResult]) -> set[int]:
    """Every token id the runs mention (answers, tree nodes, bonus tokens, top tokens): the ids a
    trace's vocab must cover."""
    return set().union(*(_token_ids(r) for r in runs.values())) if runs else set()

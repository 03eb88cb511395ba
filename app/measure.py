"""Measure the app's live speedup as a user sees it: launch `python app.py` in a subprocess, send
the same input N times through gradio_client, and write the figures to
assets/results/app_timing.json (issue 13's check: spread of the headline, its median against the
bench's figure for the task family and against the bench's timing of the same input measured
right after, and the first request after start against later ones).

`python -m app.measure [--n 10] [--example 1] [--out ...]`. A measurement, not a test: nothing is
asserted; the numbers are written down as they came. Run it on an otherwise idle machine.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

from app.session import AUTOREGRESSIVE, FOVEA, NO_CORRECTION
from app.settings import DEFAULT_CONTEXT, DEFAULT_REPEATS, context_defaults
from app.timing import TIMING_BUDGET_S
from fovea.methods import CONTEXTS

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "assets" / "results" / "app_timing.json"
# the bench methods that decode as the app's default drafter context does (FOVEA, its twin): the app is
# compared with these, on the app's own settings
BENCH_METHODS = tuple(m.name for m in CONTEXTS[DEFAULT_CONTEXT].methods)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait_ready(url: str, proc: subprocess.Popen, timeout_s: float = 240) -> float:
    """Seconds until the app answers HTTP (it warms up every decode path before it listens)."""
    import urllib.request

    t0 = time.perf_counter()
    while time.perf_counter() - t0 < timeout_s:
        if proc.poll() is not None:
            raise RuntimeError(f"app.py exited with {proc.returncode}")
        try:
            urllib.request.urlopen(url, timeout=2)
            return time.perf_counter() - t0
        except OSError:
            time.sleep(0.5)
    raise TimeoutError("the app did not start")


BENCH = ROOT / "assets" / "results" / "bench" / "results.json"


def _bench_reference(family: str, path: Path = BENCH) -> dict | None:
    if not path.is_file():
        return None
    method = BENCH_METHODS[0]
    row = json.loads(path.read_text()).get("summary", {}).get(family, {}).get(method)
    return None if row is None else {"family": family, "method": method,
                                     "speedup_median_per_question": row["speedup_median_per_question"],
                                     "speedup_ratio_of_medians": row["speedup_ratio_of_medians"],
                                     "source": _shown(path)}


def _shown(path: Path) -> str:
    path = Path(path).resolve()
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def measure(n: int, example: int, target: str | None = None, drafter: str | None = None,
            bench: Path = BENCH) -> dict:
    """`target` / `drafter`: the app's --target / --drafter (None: the bundled pair); `bench`: the
    committed bench results of that pair, the app's reference."""
    from gradio_client import Client, handle_file

    rows = json.loads((ROOT / "assets" / "examples" / "examples.json").read_text())
    pick = rows[example]
    port = _free_port()
    url = f"http://127.0.0.1:{port}/"
    models = [*(["--target", str(target)] if target else []), *(["--drafter", str(drafter)] if drafter else [])]
    proc = subprocess.Popen([sys.executable, "app.py", "--port", str(port), *models], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=dict(os.environ))
    try:
        start_s = _wait_ready(url, proc)
        client = Client(url, analytics_enabled=False, verbose=False, download_files=False)
        requests = []
        for i in range(n):
            t0 = time.perf_counter()
            out = client.predict(handle_file(str(ROOT / "assets" / "examples" / pick["image"])), pick["question"],
                                 api_name="/run")
            summary = out[12]
            timing = summary["timing"]
            first_rep = timing["tokens_per_s"][0]
            requests.append({"request": i + 1, "client_s": round(time.perf_counter() - t0, 3),
                             "speedup_median": summary["speedup"],
                             "speedup_range": [timing["speedup"][FOVEA]["min"], timing["speedup"][FOVEA]["max"]],
                             "no_correction_median": timing["speedup"].get(NO_CORRECTION, {}).get("median"),
                             "first_repeat_speedup": round(first_rep[FOVEA] / first_rep[AUTOREGRESSIVE], 4),
                             "repeats": timing["repeats"], "tokens": summary[FOVEA]["tokens"],
                             "mean_tau": summary[FOVEA]["mean_tau"], "answer": summary["answer"]})
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    same_input = _bench_same_input(pick, repeats=3 * n, target=target, drafter=drafter)
    result = _summarise(requests, pick, start_s, same_input, bench)
    if target or drafter:
        result["command"] += "".join(f" --{k} {v}" for k, v in (("target", target), ("drafter", drafter)) if v)
        result["command"] += f" --bench {_shown(bench)}"
    return result


def _bench_same_input(pick: dict, repeats: int, target: str | None = None, drafter: str | None = None) -> dict:
    """The bench's timing (fovea.bench.runner.run_speed: direct decodes on this thread, methods
    interleaved with the order rotated) of the same input, right after the app has stopped: the
    machine-state-matched reference for the app's headline."""
    from types import SimpleNamespace

    from PIL import Image

    from fovea.bench.runner import run_speed
    from fovea.bench.stats import summarise
    from fovea.pipeline import FoveaPipeline

    pipe = FoveaPipeline.from_pretrained(target, drafter)
    image = Image.open(ROOT / "assets" / "examples" / pick["image"])
    sample = SimpleNamespace(image=image, question=pick["question"], family=pick["family"], task=pick["task"])
    fovea, twin = BENCH_METHODS
    methods = [fovea, twin, AUTOREGRESSIVE]
    rows = run_speed(pipe, [sample] * repeats, methods, context_defaults(DEFAULT_CONTEXT))
    row = summarise(rows, methods)["all"]
    return {"command": "fovea.bench.runner.run_speed on this input", "methods": methods, "repeats": repeats,
            "speedup_median_per_question": round(row[fovea]["speedup_median_per_question"], 4),
            "no_correction_median_per_question": round(row[twin]["speedup_median_per_question"], 4),
            "lossless": row[fovea]["lossless"] and row[twin]["lossless"]}


def _summarise(requests: list[dict], pick: dict, start_s: float, same_input: dict, bench_path: Path = BENCH) -> dict:
    medians = [r["speedup_median"] for r in requests]
    later = statistics.median(medians[1:]) if len(medians) > 1 else None
    bench = _bench_reference(pick["family"], bench_path)
    app_median = statistics.median(medians)
    return {"date": datetime.date.today().isoformat(), "command": "python -m app.measure",
            "input": {k: pick[k] for k in ("image", "question", "family", "task")},
            "settings": f"the app's defaults ({DEFAULT_CONTEXT} drafter context, app.settings.context_defaults, "
                        f"Timing repeats {DEFAULT_REPEATS}, budget {TIMING_BUDGET_S} s)",
            "startup_s": round(start_s, 1),
            "headline": {"median": round(app_median, 4), "max": max(medians), "min": min(medians),
                         "max_over_min": round(max(medians) / min(medians), 4),
                         "first_request": medians[0], "later_requests_median": later,
                         "first_over_later": None if later is None else round(medians[0] / later, 4)},
            "bench": bench,
            "app_median_over_bench": None if bench is None else
            round(app_median / bench["speedup_median_per_question"], 4),
            "bench_same_input_now": same_input,
            "app_median_over_bench_same_input_now": round(app_median / same_input["speedup_median_per_question"], 4),
            "requests": requests}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=10)
    p.add_argument("--example", type=int, default=1, help="index into assets/examples/examples.json")
    p.add_argument("--out", type=Path, default=OUT)
    p.add_argument("--target", help="the app's --target (default: the bundled target)")
    p.add_argument("--drafter", help="the app's --drafter, with its drafter set beside it (default: the bundled)")
    p.add_argument("--bench", type=Path, default=BENCH,
                   help="the committed bench results of that pair (the reference); default: the bundled pair's")
    args = p.parse_args(argv)
    if not args.bench.is_file():
        p.error(f"--bench {args.bench}: no such results file (python -m fovea.bench --out <dir> writes one)")
    for flag in ("target", "drafter"):
        value = getattr(args, flag)
        if value and not Path(value).is_dir():
            p.error(f"--{flag} {value}: not a model folder")
    result = measure(args.n, args.example, args.target, args.drafter, args.bench)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result["headline"]), result["app_median_over_bench"], result["app_median_over_bench_same_input_now"])


if __name__ == "__main__":
    main()

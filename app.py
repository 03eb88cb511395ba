"""FOVEA Studio entry point: `python app.py` locally, and the Hugging Face Space's `app_file`.

Loads the bundled target + drafter from assets/ (or `--target` / `--drafter`, env
FOVEA_TARGET / FOVEA_DRAFTER) and the masked-diffusion model of the diffusion view (`--diffusion`,
default assets/diffusion when it exists), builds the Gradio app with `app.ui.build_demo` and
launches it. Without a diffusion model the app runs, and its diffusion view says how to train one.
Only running this file builds a model; importing the `app` package loads nothing.
Never shares a public link; analytics are off (`build_demo` passes analytics_enabled=False).
"""
from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    from app.ui import DEFAULT_CONCURRENCY

    p = argparse.ArgumentParser(description="FOVEA Studio: live speculative decoding with visual focus heatmaps.")
    p.add_argument("--target", default=os.environ.get("FOVEA_TARGET"),
                   help="target model folder (default: env FOVEA_TARGET, else the bundled assets/target)")
    p.add_argument("--drafter", default=os.environ.get("FOVEA_DRAFTER"),
                   help="drafter folder (default: env FOVEA_DRAFTER, else the bundled assets/drafter)")
    p.add_argument("--diffusion", default=None,
                   help="masked-diffusion model folder for the diffusion view (default: assets/diffusion when it "
                        "exists; `python -m fovea.train diffusion` builds it)")
    p.add_argument("--host", default=None,
                   help="interface to bind (default: env GRADIO_SERVER_NAME, else 127.0.0.1; Spaces set 0.0.0.0)")
    p.add_argument("--port", type=int, default=None, help="port (default: env GRADIO_SERVER_PORT, else 7860)")
    p.add_argument("--concurrency", type=int, default=DEFAULT_CONCURRENCY,
                   help="requests served at once (their decodes take turns on one decode thread); the rest wait in the queue")
    p.add_argument("--threads", type=int, default=None,
                   help="torch CPU threads per process (default: torch's choice; 1 suits small models on few cores)")
    p.add_argument("--tiny-random", action="store_true",
                   help="use a random-weight tiny model instead (no assets needed; for trying the UI)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from app.streaming import run_on_decode_thread
    from app.ui import build_demo, launch_kwargs

    # Every torch call of this process runs on the one decode thread, loading included: a model
    # loaded on the main thread and decoded on another ran FOVEA ~2x slower on 2 cores (app.streaming).
    pipeline = run_on_decode_thread(lambda: _load(args))
    diffusion, folder, reason = run_on_decode_thread(lambda: _load_diffusion(args))
    # a drafter named on the command line races first: it is the pipeline's "fovea" drafter, the
    # Drafter cache control's "full" entry (the bundled text-context pair stays selectable)
    demo = build_demo(pipeline, concurrency_limit=args.concurrency, context="full" if args.drafter else None,
                      diffusion=diffusion, diffusion_folder=folder, diffusion_reason=reason)
    demo.launch(server_name=args.host, server_port=args.port, **launch_kwargs())


def _load(args: argparse.Namespace):
    from fovea.pipeline import FoveaPipeline

    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    if args.tiny_random:
        return FoveaPipeline.tiny_random()
    try:
        return FoveaPipeline.from_pretrained(args.target, args.drafter)
    except (FileNotFoundError, OSError) as err:
        sys.exit(f"Could not load the model ({err}).\nBuild the bundled assets (see README), point "
                 "--target/--drafter at checkpoint folders, or try the UI with --tiny-random.")


def _load_diffusion(args: argparse.Namespace):
    """(the diffusion model or None, its folder, why it is missing). A folder named with --diffusion
    must load; the default one may be absent (the app then says how to build it)."""
    from fovea.diffusion import DEFAULT_DIFFUSION_DIR, load_diffusion, tiny_random

    if args.tiny_random and not args.diffusion:
        return tiny_random(), "a tiny random model", ""
    folder = args.diffusion or DEFAULT_DIFFUSION_DIR
    try:
        return load_diffusion(folder), str(folder), ""
    except (FileNotFoundError, OSError) as err:
        if args.diffusion:
            sys.exit(f"Could not load the diffusion model ({err}).\nTrain one with `python -m fovea.train diffusion` "
                     "(docs/latch.md), or leave out --diffusion to run without the diffusion view's model.")
        logging.getLogger("fovea.app").info("no diffusion model at %s (%s): the diffusion view says how to build one",
                                            folder, err)
        reason = f"the folder exists but did not load: {err}" if Path(folder).exists() else ""
        return None, str(folder), reason


if __name__ == "__main__":
    main()

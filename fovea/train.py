"""`python -m fovea.train <command> [options]`: the training entry point, a thin dispatcher.

target    - train the bundled VLM from scratch on generated samples (fovea.training.target)
deep      - a deep target (v3) distilled from the shipped shallow one (fovea.training.deep)
layer-use - whether every decoder layer of a target does real work (fovea.training.layer_use)
evaluate  - held-out exact-answer accuracy of the bundled target (fovea.training.evaluate)
drafter   - train the FOVEA drafter and the no-correction baseline on the bundled target
            (fovea.training.drafter_cli)
assistant - the small assistant LM for transformers' `generate(assistant_model=...)` baseline
            (fovea.training.assistant)
rebuild   - retrain every shipped drafter and the assistant on a (new) target, in order
            (fovea.training.rebuild)
dump      - run a target once per training sample and store what the drafter's losses read
            (fovea.training.dump)
fit       - train a drafter from a dump, with accelerate; one YAML run config (fovea.training.dump_train)
accept    - acceptance per draft position, tau, estimated speedup; --select picks a checkpoint
            (fovea.training.acceptance)
diffusion - a masked-diffusion VLM adapted from the shipped target, for LATCH (fovea.training.diffusion)
All are seeded, resumable from their --run-dir, show tqdm progress, and write checkpoints, a
config and metrics.
"""
from __future__ import annotations

import importlib
import sys

# command -> the module whose main(argv) runs it
COMMANDS = {
    "target": "fovea.training.target", "deep": "fovea.training.deep", "layer-use": "fovea.training.layer_use",
    "evaluate": "fovea.training.evaluate", "drafter": "fovea.training.drafter_cli",
    "assistant": "fovea.training.assistant", "rebuild": "fovea.training.rebuild", "dump": "fovea.training.dump",
    "fit": "fovea.training.dump_train", "accept": "fovea.training.acceptance",
    "diffusion": "fovea.training.diffusion",
}


def main(argv=None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in COMMANDS:
        sys.exit(f"usage: python -m fovea.train {{{','.join(COMMANDS)}}} [--help]")
    importlib.import_module(COMMANDS[argv[0]]).main(argv[1:])


if __name__ == "__main__":
    main()

"""`python -m fovea.train {target,deep,layer-use,diffusion,drafter,assistant,evaluate,rebuild} [options]`: the training entry point.

target  - train the bundled VLM from scratch on generated samples (fovea.training.target)
drafter - train the FOVEA drafter and the no-correction baseline on the bundled target
          (fovea.training.drafter_cli)
assistant - the small assistant LM for transformers' `generate(assistant_model=...)` baseline
          (fovea.training.assistant)
evaluate - held-out exact-answer accuracy of the bundled target (fovea.training.evaluate)
deep    - a deep target (v3) distilled from the shipped shallow one (fovea.training.deep)
layer-use - whether every decoder layer does real work (fovea.training.layer_use)
diffusion - a masked-diffusion VLM adapted from the shipped target, for LATCH (fovea.training.diffusion)
rebuild - retrain every shipped drafter and the assistant on a (new) target, in order
          (fovea.training.rebuild)
dump    - run a target once per training sample and store what the drafter's losses read (fovea.training.dump)
fit     - train a drafter from a dump, with accelerate; one YAML run config (fovea.training.dump_train)
accept  - acceptance per draft position, tau, estimated speedup; --select picks a checkpoint
          (fovea.training.acceptance)
All are seeded, resumable from their --run-dir, show tqdm progress, and write checkpoints, a
config JSON and metrics.
"""
from __future__ import annotations

import sys


# the run-config commands (docs/training-drafters.md): subcommand -> module with a main(argv)
FROM_DUMPS = {"dump": "fovea.training.dump", "fit": "fovea.training.dump_train", "accept": "fovea.training.acceptance"}


def main(argv=None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in FROM_DUMPS:
        import importlib

        importlib.import_module(FROM_DUMPS[argv[0]]).main(argv[1:])
        return
    if not argv or argv[0] not in ("target", "deep", "layer-use", "diffusion", "drafter", "assistant", "evaluate", "rebuild"):
        sys.exit("usage: python -m fovea.train {target,deep,layer-use,diffusion,drafter,assistant,evaluate,rebuild} [--help]")
    if argv[0] == "target":
        from fovea.training.target import main as run
    elif argv[0] == "deep":
        from fovea.training.deep import main as run
    elif argv[0] == "layer-use":
        from fovea.training.layer_use import main as run
    elif argv[0] == "diffusion":
        from fovea.training.diffusion import main as run
    elif argv[0] == "drafter":
        from fovea.training.drafter_cli import main as run
    elif argv[0] == "assistant":
        from fovea.training.assistant import main as run
    elif argv[0] == "rebuild":
        from fovea.training.rebuild import main as run
    else:
        from fovea.training.evaluate import main as run
    run(argv[1:])


if __name__ == "__main__":
    main()

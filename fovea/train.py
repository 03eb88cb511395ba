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
online    - train a drafter for any backbone on (image, question, answer) records, the target in the loop,
            with accelerate (fovea.training.accelerate_train)
records   - check a records file; --distill-out rewrites its answers as a target's own (fovea.training.records)
dump-size - a dump's measured size per sample beside the formula's for 7B-class targets
            (fovea.training.dump_size)
diagnose  - why a target's lookups fail, teacher-forced on held-out questions (fovea.training.diagnose)
curves    - a target run's training curves as one PNG (fovea.training.curves)
glyph-slots - whether a target's visual tokens carry both glyphs of a shared patch, by a fresh linear probe
            (fovea.training.glyph_slots)
Those that train are seeded, resumable from their --run-dir, show tqdm progress, and write checkpoints,
a config and metrics. Each module run on its own (`python -m fovea.training.records`, ...) runs the same.
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
    "diffusion": "fovea.training.diffusion", "online": "fovea.training.accelerate_train",
    "records": "fovea.training.records", "dump-size": "fovea.training.dump_size", "diagnose": "fovea.training.diagnose",
    "curves": "fovea.training.curves", "glyph-slots": "fovea.training.glyph_slots",
}


def main(argv=None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in COMMANDS:
        sys.exit(f"usage: python -m fovea.train {{{','.join(COMMANDS)}}} [--help]")
    importlib.import_module(COMMANDS[argv[0]]).main(argv[1:])


if __name__ == "__main__":
    main()

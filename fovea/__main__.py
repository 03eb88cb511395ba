"""`python -m fovea <command> [options]`: the project's one command line, a thin dispatcher.

  train ...            training, evaluation and drafter dumps: hands the rest over to `python -m fovea.train`,
                       which lists its own subcommands (`python -m fovea train --help`)
  bench ...            the decoding benchmark, its sweeps and profiles (`python -m fovea.bench`)
  analysis ood ...     the out-of-distribution score on generated vs photo-like images (fovea.analysis.ood)
  analysis locality .. focus locality after PRR (fovea.analysis.locality)
  examples ...         rewrite the app's bundled examples, or with --looks the look sheets (fovea.data.examples)

Each command's module keeps its own `main(argv)`, and a module run on its own (`python -m fovea.train`,
`python -m fovea.bench`, `python -m fovea.data.examples`, ...) only calls it, so the older forms run the
same code. The app's commands live beside it (`python app.py`,
`python -m app.measure`, `python -m app.screenshots`): the library never imports gradio.
"""
from __future__ import annotations

import importlib
import sys

# command (and subcommand) -> the module whose main(argv) runs it
COMMANDS = {("train",): "fovea.train", ("bench",): "fovea.bench", ("analysis", "ood"): "fovea.analysis.ood",
            ("analysis", "locality"): "fovea.analysis.locality", ("examples",): "fovea.data.examples"}


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    for words, module in COMMANDS.items():
        if tuple(argv[:len(words)]) == words:
            importlib.import_module(module).main(argv[len(words):])
            return
    usage = "\n".join(f"  python -m fovea {' '.join(words)} ..." for words in COMMANDS)
    if argv and argv[0] not in ("-h", "--help"):
        sys.exit(f"unknown command {' '.join(argv[:2])!r}; the commands are:\n{usage}")
    print(__doc__)


if __name__ == "__main__":
    main()

"""`python -m fovea.bench`: the side-by-side decoding benchmark, its tree-shape sweep and its
profiler. `cli` parses arguments and dispatches; `methods` names what is compared (drafting
strategies), `runner` decodes, `stats` summarises, `report` writes, `profile` splits a round's time.
"""
from fovea.bench.cli import PRESETS, main, parse_args
from fovea.bench.methods import METHODS, SWEEP_DRAFTERS, TREE_SHAPES, Method, shape_name
from fovea.bench.runner import held_out

__all__ = ["METHODS", "PRESETS", "SWEEP_DRAFTERS", "TREE_SHAPES", "Method", "held_out", "main", "parse_args",
           "shape_name"]

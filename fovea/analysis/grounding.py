"""Grounding score: does the drafter look at the object it is about to name?

For every round whose first emitted token names an image object, the score is the share of the
root draft state's retrieval mass (the renormalised weights alpha over the selected entries) that
falls on patches of that object, using the generator's ground-truth masks. The root state is the
one predicting that token, so this asks whether retrieval is grounded at the moment it matters.
Chance is the share a uniform readout would get: the fraction of memory entries on the object.

Which object a token names: each object's label ("red circle", "KOTA", a bar label) and every
label word no other object of the sample shares ("circle" when there is one circle) are matched
as whole words, case-sensitively (the generator writes shape words in lower case and codes as
drawn), longest first, in the decoded output; a token names the object whose occurrence its
character span overlaps. Entry i of the memory is patch (i // cols, i % cols) of `memory_grid`,
on-object when the object's mask covers >= 25 % of it, or, for drawn text (an OCR word, a bar's
label and value), when one of its glyphs owns the patch (`object_entries`).
"""
from __future__ import annotations

import re
from typing import Callable

import numpy as np

from fovea.analysis.rounds import Decoded, by_family, decode_traced, first_emitted_positions, mean, root_retrieval
from fovea.config import FoveaConfig
from fovea.data import FAMILIES

COVERAGE = 0.25
CONTROL_MODES = ("random", "static", "query_agnostic", "dense", "state_only")


def patch_coverage(mask: np.ndarray, grid: tuple[int, int]) -> np.ndarray:
    """bool mask [H, W] -> fraction of each patch covered [rows, cols] (patches tile the image)."""
    rows, cols = grid
    ph, pw = mask.shape[0] // rows, mask.shape[1] // cols
    # [rows, ph, cols, pw]: averaging each patch's pixels gives its covered fraction
    return mask[: rows * ph, : cols * pw].reshape(rows, ph, cols, pw).mean(axis=(1, 3))


def on_object_entries(mask: np.ndarray, grid: tuple[int, int], threshold: float = COVERAGE) -> np.ndarray:
    """bool [rows * cols] in memory order (row-major): patch covered >= threshold by the mask."""
    return (patch_coverage(mask, grid) >= threshold).reshape(-1)


def object_entries(obj, grid: tuple[int, int], threshold: float = COVERAGE) -> np.ndarray:
    """bool [rows * cols]: the memory entries on an object. Its mask covers >= threshold of the patch,
    or, for drawn text on the bundled world's grid, a glyph of it owns the patch (the patches the
    drafter's grounding labels point a reading state at: `fovea.training.packing.glyph_patches`). Ink
    strokes fill a small share of a patch, so by pixel coverage alone the patches a reader looks at
    would mostly not count (2026-12-05: 0.92 of the teacher-forced retrieval mass on the glyphs being
    spelled, 0.42 on OCR and 0.17 on chart patches by coverage)."""
    on = on_object_entries(obj.mask, grid, threshold)
    drawn = getattr(obj, "glyphs", None) or {}
    if drawn:
        from fovea.data.sample import GRID
        from fovea.training.packing import glyph_patches

        if tuple(grid) == (GRID, GRID):
            for boxes in drawn.values():
                if boxes:
                    on = on | glyph_patches(boxes, 0, len(boxes))
    return on


def naming_phrases(labels: list[str]) -> list[list[str]]:
    """Per object: its full label and each label word that no other object's label contains.
    A label two objects share names neither (text cannot tell them apart)."""
    words = [set(label.split()) for label in labels]
    out = []
    for i, label in enumerate(labels):
        others = set().union(*(w for j, w in enumerate(words) if j != i))
        full = [label] if labels.count(label) == 1 else []
        out.append(full + [w for w in label.split() if w not in others and w != label])
    return out


def label_occurrences(text: str, labels: list[str]) -> list[tuple[int, int, int]]:
    """Whole-word occurrences (start, end, object index) of the objects' naming phrases in text,
    longest phrase first, never overlapping; sorted by start."""
    # longest first, so "red circle" claims its characters before a bare "circle" of another object
    candidates = sorted(((p, obj) for obj, ps in enumerate(naming_phrases(labels)) for p in ps),
                        key=lambda po: -len(po[0]))
    taken: list[tuple[int, int, int]] = []
    for phrase, obj in candidates:
        for m in re.finditer(rf"(?<!\w){re.escape(phrase)}(?!\w)", text):
            if all(m.end() <= s or m.start() >= e for s, e, _ in taken):
                taken.append((m.start(), m.end(), obj))
    return sorted(taken)


def token_spans(decode: Callable[[list[int]], str], tokens: list[int]) -> list[tuple[int, int]]:
    """Character span of each token in decode(tokens), by decoding growing prefixes (byte-level
    pieces only make sense in context). Spans are clamped monotone for partial UTF-8 prefixes."""
    spans, prev = [], 0
    for k in range(len(tokens)):
        end = max(prev, len(decode(tokens[: k + 1])))
        spans.append((prev, end))
        prev = end
    return spans


def token_objects(spans: list[tuple[int, int]], occurrences: list[tuple[int, int, int]]) -> list[int | None]:
    """Object named by each token: the first occurrence its span overlaps, else None."""
    return [next((obj for s, e, obj in occurrences if max(a, s) < min(b, e)), None) for a, b in spans]


def grounding_mass(indices: list[int], weights: list[float], on_object: np.ndarray) -> float:
    """Share of the retrieval weights (summing to 1) on entries flagged on-object."""
    return float(sum(w for i, w in zip(indices, weights) if i >= 0 and on_object[i]))


def grounding_states(decoded: list[Decoded], decode: Callable[[list[int]], str], grid: tuple[int, int],
                     threshold: float = COVERAGE) -> list[dict]:
    """One record per round whose first emitted token names an object and whose root retrieved."""
    states = []
    for d in decoded:
        labels = [o.label for o in d.sample.objects]
        # names are found in the model's own output, not the reference answer: the two may differ
        named = token_objects(token_spans(decode, d.tokens), label_occurrences(decode(d.tokens), labels))
        on = [object_entries(o, grid, threshold) for o in d.sample.objects]
        for rec, pos in zip(d.rounds, first_emitted_positions(d.prefill, d.rounds)):
            # the root state predicted the round's first emitted token, whether accepted or the bonus
            got = root_retrieval(rec)
            obj = named[pos] if pos < len(named) else None
            if got is None or obj is None:
                continue
            states.append({"family": d.sample.family, "object": obj, "round": rec.iteration,
                           "mass": grounding_mass(got.indices, got.weights, on[obj]), "chance": float(on[obj].mean())})
    return states


def summarise_grounding(states: list[dict]) -> dict:
    return {"mean": mean(s["mass"] for s in states), "chance": mean(s["chance"] for s in states),
            "n_states": len(states)}


def grounding(pipe, samples, cfg: FoveaConfig, modes=("cumulative", *CONTROL_MODES),
              decoded_by_mode: dict[str, list[Decoded]] | None = None, threshold: float = COVERAGE) -> dict:
    """Mean grounding score and chance per retrieval mode (FOVEA = "cumulative"), overall and per
    family. Greedy decoding is lossless, so every mode names objects at the same output positions;
    only the round boundaries, and so the scored states, differ."""
    grid = pipe.memory_grid
    if grid is None:
        return {"skipped": "the target has no memory_grid, so entries cannot be mapped to patches"}
    tok = pipe.target.tokenizer

    def decode(ids):
        return tok.decode(ids, skip_special_tokens=True)

    decoded_by_mode = dict(decoded_by_mode or {})
    out = {}
    for mode in modes:
        if mode not in decoded_by_mode:
            decoded_by_mode[mode] = decode_traced(pipe, samples, cfg, mode)
        states = grounding_states(decoded_by_mode[mode], decode, grid, threshold)
        out[mode] = {**summarise_grounding(states), "per_family": by_family(states, FAMILIES, summarise_grounding)}
    return {"coverage_threshold": threshold, "grid": list(grid), "modes": out}

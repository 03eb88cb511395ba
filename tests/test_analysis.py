"""The diagnostics' pure parts on hand-made inputs (sets, accept lengths, text, masks, retrievals),
plus one check on the tiny random pipeline that a budget probe leaves the decode untouched."""
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from fovea.analysis.budget import (FRACTIONS, probe_accept_length, preferred_budget, restrict, summarise_budget,
                                   sweep_sample)
from fovea.analysis.focus import drift_pairs, jaccard_distance, k_distribution, top_set
from fovea.analysis.grounding import (grounding_mass, grounding_states, label_occurrences, naming_phrases,
                                      on_object_entries, patch_coverage, token_objects, token_spans)
from fovea.analysis.rounds import Decoded, first_emitted_positions
from fovea.memory import VisualMemory
from fovea.trace import IterationTrace, NodeRetrieval, PrefillTrace


def _round(i: int, n_emitted: int, indices=(0,), weights=(1.0,)) -> IterationTrace:
    got = NodeRetrieval(indices=list(indices), weights=list(weights), k=len(indices), gate=0.5)
    return IterationTrace(iteration=i, tokens=[0], parents=[-1], depths=[0], scores=[0.0], retrieval={0: got},
                          accepted=list(range(1, n_emitted)), rejected=[], emitted=[0] * n_emitted, bonus_token=0)


def _decoded(family: str, rounds, tokens=(), objects=()) -> Decoded:
    tokens = list(tokens)
    return Decoded(SimpleNamespace(family=family, objects=list(objects)), tokens, list(rounds),
                   PrefillTrace(tokens[0] if tokens else 0))


# ---- focus drift and K -------------------------------------------------------------------------
def test_jaccard_distance_on_hand_sets():
    assert jaccard_distance({1, 2, 3}, {2, 3, 4}) == pytest.approx(0.5)
    assert jaccard_distance({1, 2}, {1, 2}) == 0.0
    assert jaccard_distance({1}, {2}) == 1.0
    assert jaccard_distance(set(), set()) == 0.0


def test_top_set_keeps_the_16_heaviest_or_all_when_fewer():
    many = NodeRetrieval(indices=list(range(40, 20, -1)), weights=[0.05] * 20, k=20, gate=1.0)
    assert top_set(many) == set(range(40, 24, -1))
    few = NodeRetrieval(indices=[3, 1, 2], weights=[0.5, 0.3, 0.2], k=3, gate=1.0)
    assert top_set(few) == {1, 2, 3}


def test_drift_pairs_are_adjacent_rounds_split_into_halves():
    rounds = [_round(0, 1, [1, 2]), _round(1, 1, [2, 3]), _round(2, 1, [2, 3]), _round(3, 1, [7])]
    pairs = drift_pairs([_decoded("scene", rounds)])
    assert [p["distance"] for p in pairs] == pytest.approx([2 / 3, 0.0, 1.0])
    assert [p["early"] for p in pairs] == [True, True, False]      # 3 pairs: 0 and 1 are the first half


def test_k_distribution_counts_root_states_per_family():
    decoded = [_decoded("scene", [_round(0, 1, [1] * 4), _round(1, 1, [1] * 8)]),
               _decoded("ocr", [_round(0, 1, [1] * 4)])]
    cfg = SimpleNamespace(retrieval=SimpleNamespace(k_min=4, k_max=32, rho=0.8))
    got = k_distribution(None, None, cfg, decoded)["per_family"]
    assert got["scene"] == {"mean": 6.0, "n_states": 2, "hist": {"4": 1, "8": 1}}
    assert got["all"]["hist"] == {"4": 2, "8": 1}


# ---- visual budget -----------------------------------------------------------------------------
def test_preferred_budget_is_the_smallest_reaching_the_maximum():
    assert preferred_budget([1, 3, 3, 2, 3]) == 0.25
    assert preferred_budget([2, 2, 2, 2, 2]) == 0.0
    assert preferred_budget([1, 1, 1, 1, 4]) == 1.0
    assert preferred_budget([4, 1, 1, 1, 1]) == 0.0


def test_budget_summary_splits_early_and_late_states():
    states = [{"accept_lengths": [1, 2, 2, 2, 2], "preferred": 0.25, "early": True},
              {"accept_lengths": [3, 3, 3, 3, 3], "preferred": 0.0, "early": False}]
    got = summarise_budget(states)
    assert got["preferred_share"] == {"0": 0.5, "25": 0.5, "50": 0.0, "75": 0.0, "100": 0.0}
    assert got["mean_accept_length"]["0"] == 2.0
    assert got["early"]["mean_preferred_budget"] == 0.25 and got["late"]["mean_preferred_budget"] == 0.0


def test_restrict_keeps_the_most_important_valid_entries():
    valid = torch.tensor([True, True, True, False])
    memory = VisualMemory(keys=torch.zeros(4, 2), values=torch.zeros(4, 2), valid=valid)
    weight = torch.tensor([0.2, 0.5, 0.3, 0.0])
    assert restrict(memory, weight, 0.0) is None                   # 0 %: correction off
    assert restrict(memory, weight, 0.25).valid.tolist() == [False, True, False, False]
    assert restrict(memory, weight, 0.5).valid.tolist() == [False, True, True, False]   # round(1.5) = 2
    assert restrict(memory, weight, 1.0).valid.tolist() == [True, True, True, False]


# ---- grounding ---------------------------------------------------------------------------------
def test_patch_coverage_on_a_hand_made_mask():
    mask = np.zeros((32, 32), dtype=bool)
    mask[:16, :16] = True            # patch (0, 0) full
    mask[:4, 16:] = True             # patch (0, 1) 4 of 16 rows = 25 %
    mask[16:19, :16] = True          # patch (1, 0) 3 of 16 rows < 25 %
    np.testing.assert_allclose(patch_coverage(mask, (2, 2)), [[1.0, 0.25], [3 / 16, 0.0]])
    assert on_object_entries(mask, (2, 2)).tolist() == [True, True, False, False]


def test_naming_phrases_use_full_labels_and_unshared_words():
    labels = ["red circle", "blue circle", "KOTA", "red circle"]
    # "circle" is shared, "red" too; the duplicated full label names neither object
    assert naming_phrases(labels) == [[], ["blue circle", "blue"], ["KOTA"], []]


def test_label_occurrences_are_whole_words_longest_first():
    labels = ["red circle", "blue square", "KOTA"]
    text = "The red circle is left of KOTA, not KOTAS; the square is blue."
    got = [(text[s:e], obj) for s, e, obj in label_occurrences(text, labels)]
    assert got == [("red circle", 0), ("KOTA", 2), ("square", 1), ("blue", 1)]


def test_token_objects_map_incremental_spans_to_occurrences():
    vocab = [" The", " red", " cir", "cle", " is", " KO", "TA", "."]
    tokens = [0, 1, 2, 3, 4, 5, 6, 7]

    def decode(ids):
        return "".join(vocab[i] for i in ids)
    spans = token_spans(decode, tokens)
    assert spans[2] == (8, 12) and spans[-1][1] == len(decode(tokens))
    occ = label_occurrences(decode(tokens), ["red circle", "KOTA"])
    assert token_objects(spans, occ) == [None, 0, 0, 0, None, 1, 1, None]


def test_grounding_mass_on_a_hand_made_retrieval():
    on = np.array([True, False, True, False, False, True])
    assert grounding_mass([0, 5, 1, -1], [0.5, 0.3, 0.2, 0.0], on) == pytest.approx(0.8)
    assert grounding_mass([1, 3], [0.6, 0.4], on) == 0.0


def test_grounding_scores_rounds_whose_first_token_names_an_object():
    vocab = [" The", " red", " circle", " is", " here", "."]

    def decode(ids):
        return "".join(vocab[i] for i in ids)
    mask = np.zeros((32, 32), dtype=bool)
    mask[:16, :16] = True                                   # object on entry 0 of a 2x2 grid
    obj = SimpleNamespace(label="red circle", mask=mask)
    # token 0 from the prefill; round 0 emits tokens 1-2 (" red circle"), round 1 tokens 3-5
    rounds = [_round(0, 2, [0, 1], [0.75, 0.25]), _round(1, 3, [0], [1.0])]
    assert first_emitted_positions(PrefillTrace(0), rounds) == [1, 3]
    got = grounding_states([_decoded("scene", rounds, [0, 1, 2, 3, 4, 5], [obj])], decode, (2, 2))
    assert len(got) == 1 and got[0]["mass"] == pytest.approx(0.75) and got[0]["chance"] == 0.25


# ---- budget probes on a real (tiny random) pipeline --------------------------------------------
def test_budget_probe_rolls_back_and_full_budget_equals_the_real_round(tiny_pipeline):
    from fovea.config import FoveaConfig
    from fovea.data import eval_seeds, make_sample
    from fovea.decoding import fovea, run, speculative_rounds, start

    pipe = tiny_pipeline
    cfg = FoveaConfig().replace(decoding={"max_new_tokens": 12})
    sample = make_sample(eval_seeds(1)[0], family="scene")
    drafter = pipe.drafters["fovea"]
    session = start(pipe.target, fovea(drafter), pipe.target.prepare(sample.image, sample.question), cfg)
    length = session.target_state.length
    full = probe_accept_length(pipe.target, session, session.draft.memory, cfg)
    assert session.target_state.length == length
    assert all(layer.keys.shape[2] == length for layer in session.target_state.cache.layers)
    assert next(speculative_rounds(pipe.target, session, cfg)).accept_length == full
    states, tokens = sweep_sample(pipe, sample, cfg)
    assert all(len(s["accept_lengths"]) == len(FRACTIONS) for s in states)
    ar = run(pipe.target, None, pipe.target.prepare(sample.image, sample.question), cfg)
    assert tokens == ar.tokens


def test_drawn_text_is_on_object_where_its_glyphs_own_the_patch():
    """An OCR word's ink covers little of a patch; its entries are also the patches its glyphs own
    (the drafter's grounding labels), so a state reading the word counts as grounded."""
    from fovea.analysis.grounding import object_entries
    from fovea.data import make_sample
    from fovea.data.sample import GRID
    from fovea.training.packing import glyph_patches

    sample = next(s for s in (make_sample(seed) for seed in range(40)) if s.family == "ocr")
    word = next(o for o in sample.objects if o.glyphs)
    by_ink = on_object_entries(word.mask, (GRID, GRID))
    entries = object_entries(word, (GRID, GRID))
    boxes = next(iter(word.glyphs.values()))
    assert (entries >= by_ink).all() and entries[glyph_patches(boxes, 0, len(boxes))].all()
    assert entries.sum() > by_ink.sum()
    shape = next(o for s in (make_sample(seed) for seed in range(40)) if s.family == "scene" for o in s.objects)
    assert (object_entries(shape, (GRID, GRID)) == on_object_entries(shape.mask, (GRID, GRID))).all()

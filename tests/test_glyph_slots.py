"""Glyph slots (fovea.training.glyph_slots): the labels, the head's loss and scores, and the deep run's
--slot-weight, on hand-built glyph boxes and a tiny random model."""
import dataclasses
from types import SimpleNamespace

import pytest
import torch

from fovea.data import IGNORE
from fovea.data.labels import CHAR_ID
from fovea.data.sample import GRID
from fovea.training.glyph_slots import SLOTS, GlyphSlotHead, glyph_slots


def _record(**words):
    """A record whose objects draw `words`: text -> the ink boxes of its characters."""
    return SimpleNamespace(objects=[SimpleNamespace(glyphs={t: b}) for t, b in words.items()])


def test_two_glyphs_in_one_patch_fill_its_left_and_right_slot():
    # "KG" as the layout split draws it (seed 1000000006): centres x 115 and 126 share patch column 7
    rec = _record(KG=((111, 157, 119, 170), (121, 157, 131, 170)))
    slots = glyph_slots([rec])
    assert slots.shape == (1, GRID * GRID, SLOTS)
    patch = (163 // 16) * GRID + 7
    assert slots[0, patch].tolist() == [CHAR_ID["K"], CHAR_ID["G"]]
    others = torch.ones(GRID * GRID, dtype=torch.bool)
    others[patch] = False
    assert (slots[0, others] == IGNORE).all()                # a patch holding no centre teaches nothing


def test_one_glyph_leaves_the_other_slot_none_and_a_crowded_slot_is_ignored():
    rec = _record(A=((2, 2, 6, 10),), BC=((34, 2, 38, 10), (36, 2, 40, 10)))
    slots = glyph_slots([rec])[0]
    assert slots[0].tolist() == [CHAR_ID["A"], 0]            # centre x 4: the left half; the right holds none
    # B and C both centre in the left half of patch column 2 (x 36 and 38): ambiguous, ignored
    assert slots[2].tolist() == [IGNORE, 0]
    # a centre outside the canvas is skipped
    assert (glyph_slots([_record(Z=((400, 0, 410, 8),))]) == IGNORE).all()


def test_the_head_learns_slots_from_features_that_hold_them_and_scores_shared_patches():
    torch.manual_seed(0)
    n_chars = len(CHAR_ID)
    labels = torch.full((4, 6, SLOTS), IGNORE)
    labels[:, :3] = torch.randint(1, n_chars, (4, 3, SLOTS))   # three patches a row hold two glyphs
    labels[:, 3, 1] = 0                                        # one holds a single glyph (the right slot none)
    labels[:, 3, 0] = 5
    feats = torch.nn.functional.one_hot(labels.clamp_min(0), n_chars).float().flatten(-2)  # both slots readable
    head = GlyphSlotHead(feats.shape[-1])
    opt = torch.optim.Adam(head.parameters(), lr=0.05)
    first = head(feats, labels).item()
    for _ in range(200):
        loss = head(feats, labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert loss.item() < first / 10
    s = head.scores(feats, labels)
    assert s["slot"] == 1.0 and s["shared"] == 1.0 and s["n_shared"] == 12 and s["n_slots"] == 4 * 3 * 2 + 4
    # features that hold only the left glyph cannot give the right one: shared patches score low
    shared = torch.stack([torch.full((48,), 7), torch.arange(48) % (n_chars - 1) + 1], -1)[None]
    left_only = torch.nn.functional.one_hot(shared[..., 0], n_chars).float()
    blind = GlyphSlotHead(n_chars)
    opt = torch.optim.Adam(blind.parameters(), lr=0.05)
    for _ in range(200):
        loss = blind(left_only, shared)
        opt.zero_grad()
        loss.backward()
        opt.step()
    s = blind.scores(left_only, shared)
    assert s["n_shared"] == 48 and s["shared"] < 0.1 and s["slot"] < 0.6


def test_deep_run_adds_the_slot_loss_on_aux_images_and_trains_its_head():
    from fovea.models import bundled
    from fovea.data import iter_corpus_text
    from fovea.training.deep import AUX_FAMILIES, DeepTargetConfig, TowerHeads, build_student, param_groups, tower_step
    from fovea.training.target import AUX_SEED_START, AuxHeads, aux_images

    tok = bundled.train_tokenizer(iter_corpus_text(200), vocab_size=400)
    sizes = dataclasses.replace(bundled.BundledModelConfig.from_name("tiny"), vocab_size=len(tok),
                                prompt_order="question_first")
    teacher = bundled.build_model(sizes, tok, seed=0)
    cfg = DeepTargetConfig(layers=2 * teacher.config.text_config.num_hidden_layers, intermediate_size=32,
                           vision_lr_scale=1.0, aux_images=4, slot_weight=1.0)
    student = build_student(teacher, cfg)
    dim = teacher.config.text_config.hidden_size
    aux = AuxHeads(dim)
    heads = TowerHeads(aux, GlyphSlotHead(dim), 1.0)
    size = teacher.config.vision_config.image_size
    pixels, labels = aux_images(AUX_SEED_START, 0, 6, ("chart", "ocr"), size, looks="labels", slots=True)
    assert labels["glyph_slots"].shape == (6, GRID * GRID, SLOTS) and (labels["glyph_slots"] > 0).any()
    assert "glyph_slots" not in aux_images(AUX_SEED_START, 0, 2, ("chart",), size, looks="labels")[1]  # opt-in
    batch = {"aux_pixels": pixels, "aux_labels": labels}
    with_slots = tower_step(student, heads, batch)["total"]
    without = tower_step(student, aux, batch)["total"]
    assert with_slots.item() > without.item()                 # the slot term is added, not swapped in
    with_slots.backward()
    assert all(p.grad is not None for p in heads.slots.parameters())
    # the fresh slot head is its own optimiser group at 10x; the per-patch heads stay at 1x
    groups = param_groups(student, heads, cfg)
    slot_group = [g for g in groups if any(p is heads.slots.linear.weight for p in g["params"])]
    assert len(slot_group) == 1 and slot_group[0]["lr_scale"] == 10.0
    assert sum(len(g["params"]) for g in groups) == len({id(p) for g in groups for p in g["params"]})


def test_deep_cli_refuses_a_slot_weight_without_aux_images(tmp_path, capsys):
    from fovea.training.deep import parse_args

    with pytest.raises(SystemExit):
        parse_args(["--slot-weight", "1", "--vision-lr-scale", "1", "--run-dir", str(tmp_path)])
    assert "--slot-weight" in capsys.readouterr().err


def test_glyph_slots_cli_refuses_a_folder_without_a_model(tmp_path, capsys):
    from fovea.training.glyph_slots import main

    with pytest.raises(SystemExit):
        main(["--target", str(tmp_path)])
    assert "no exported model" in capsys.readouterr().err

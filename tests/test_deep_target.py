"""The deep target's distillation (fovea.training.deep) and the layer-use measurement
(fovea.training.layer_use), on tiny random models."""
import dataclasses

import pytest
import torch

from fovea.models import bundled
from fovea.training.deep import (DeepTargetConfig, LayerOutputs, ProjectedTokens, build_student, distill_step,
                                 hidden_loss, param_groups, stacked_layers, teacher_right)
from fovea.training.layer_use import subnetwork, update_ratios
from fovea.training.target import TargetTrainConfig, training_batch


@pytest.fixture(scope="module")
def teacher_and_tokenizer():
    from fovea.data import iter_corpus_text

    tok = bundled.train_tokenizer(iter_corpus_text(300), vocab_size=400)
    sizes = dataclasses.replace(bundled.BundledModelConfig.from_name("tiny"), vocab_size=len(tok),
                                prompt_order="question_first")
    teacher = bundled.build_model(sizes, tok, seed=0)
    for p in teacher.parameters():
        p.requires_grad_(False)
    return teacher, tok


def _batch(model, tok, step=0):
    recipe = TargetTrainConfig(batch_size=2, turns=1)
    return training_batch(step, recipe, tok, model, [], 0.0)


def test_stack_init_with_one_copy_per_layer_is_the_teacher(teacher_and_tokenizer):
    teacher, tok = teacher_and_tokenizer
    layers = teacher.config.text_config.num_hidden_layers
    cfg = DeepTargetConfig(layers=layers, init="stack",
                           intermediate_size=teacher.config.text_config.intermediate_size)
    student = build_student(teacher, cfg).eval()
    batch = _batch(teacher, tok)
    kw = {k: batch[k] for k in ("input_ids", "attention_mask", "pixel_values")}
    with torch.no_grad():
        assert torch.allclose(student(**kw).logits, teacher(**kw).logits, atol=1e-5)


def test_stacked_copies_split_the_residual_write(teacher_and_tokenizer):
    teacher, _ = teacher_and_tokenizer
    state = stacked_layers(teacher, 3 * teacher.config.text_config.num_hidden_layers)
    original = teacher.state_dict()
    for i in (0, 1, 2):   # copies of teacher layer 0
        o = state[f"model.language_model.layers.{i}.self_attn.o_proj.weight"]
        q = state[f"model.language_model.layers.{i}.self_attn.q_proj.weight"]
        assert torch.allclose(o, original["model.language_model.layers.0.self_attn.o_proj.weight"] / 3)
        assert torch.equal(q, original["model.language_model.layers.0.self_attn.q_proj.weight"])


def test_student_trains_only_its_decoder_and_distils_each_layer_group(teacher_and_tokenizer):
    teacher, tok = teacher_and_tokenizer
    cfg = DeepTargetConfig(layers=2 * teacher.config.text_config.num_hidden_layers, intermediate_size=32)
    student = build_student(teacher, cfg)
    hooks = (LayerOutputs(student), LayerOutputs(teacher))
    losses = distill_step(student, teacher, hooks, _batch(teacher, tok), cfg)
    losses["total"].backward()
    for name, p in student.named_parameters():
        trained = name.startswith("model.language_model.layers.") or name == "model.language_model.norm.weight"
        assert p.requires_grad == trained, name
        assert (p.grad is not None) == trained, name
    assert len(hooks[0].outputs) == 2 * len(hooks[1].outputs)
    assert all(torch.isfinite(v) for v in losses.values())


def test_hidden_loss_compares_the_last_layer_of_each_group():
    t = [torch.randn(1, 3, 4) for _ in range(2)]
    s = [torch.randn(1, 3, 4), t[0], torch.randn(1, 3, 4), t[1]]     # layers 1 and 3 end the groups
    assert hidden_loss(s, t, torch.ones(1, 3)) == 0
    assert hidden_loss(s[::-1], t, torch.ones(1, 3)) > 0
    assert hidden_loss(s[::-1], t, torch.zeros(1, 3)) == 0           # every row gated off: no term


def test_teacher_right_gates_rows_with_a_wrong_fact_token_only():
    labels = torch.tensor([[0, 5, 6, 7], [0, 5, 6, 7]])
    weights = torch.tensor([[0.0, 0.0, 3.0, 3.0], [0.0, 1.0, 3.0, 3.0]])   # > 1: fact tokens
    logits = torch.zeros(2, 3, 10)
    logits[0, torch.arange(3), torch.tensor([1, 6, 7])] = 1.0   # row 0: right on the answer (pos 0 unweighted)
    logits[1, torch.arange(3), torch.tensor([5, 6, 1])] = 1.0   # row 1: last fact token wrong
    assert teacher_right(logits, {"labels": labels, "weights": weights}).tolist() == [True, False]
    logits[1, 0, 5], logits[1, 0, 4] = 0.0, 1.0                  # a phrasing token (weight 1) wrong: no matter
    logits[1, 2, 1], logits[1, 2, 7] = 0.0, 1.0                  # ... and the fact token right again
    assert teacher_right(logits, {"labels": labels, "weights": weights}).tolist() == [True, True]


def test_deep_student_rejects_a_depth_that_is_not_a_multiple(teacher_and_tokenizer):
    teacher, _ = teacher_and_tokenizer
    with pytest.raises(ValueError, match="multiple"):
        build_student(teacher, DeepTargetConfig(layers=3))


def test_layer_use_sees_an_identity_layer_as_zero_and_keeps_strided_subnetworks(teacher_and_tokenizer):
    teacher, tok = teacher_and_tokenizer
    cfg = DeepTargetConfig(layers=2 * teacher.config.text_config.num_hidden_layers, init="stack",
                           intermediate_size=teacher.config.text_config.intermediate_size)
    student = build_student(teacher, cfg).eval()
    with torch.no_grad():   # layer 1 becomes an exact identity: no residual writes
        student.model.language_model.layers[1].self_attn.o_proj.weight.zero_()
        student.model.language_model.layers[1].mlp.down_proj.weight.zero_()
    ratios = update_ratios(student, tok, n_per_family=1)
    assert ratios[1] == 0 and min(ratios[:1] + ratios[2:]) > 0
    sub = subnetwork(student, [0, 2])
    assert len(sub.model.language_model.layers) == 2 == sub.config.text_config.num_hidden_layers
    assert sub.model.language_model.layers[1].self_attn.layer_idx == 1


def test_with_a_vision_lr_scale_the_vision_tower_and_projector_train_on_the_patch_labels(teacher_and_tokenizer):
    from fovea.training.target import AuxHeads

    teacher, tok = teacher_and_tokenizer
    cfg = DeepTargetConfig(layers=2 * teacher.config.text_config.num_hidden_layers, intermediate_size=32,
                           vision_lr_scale=0.1, aux_weight=0.5)
    student = build_student(teacher, cfg)
    aux = AuxHeads(teacher.config.text_config.hidden_size)
    tokens = ProjectedTokens(student)
    losses = distill_step(student, teacher, (LayerOutputs(student), LayerOutputs(teacher)), _batch(teacher, tok),
                          cfg, (tokens, aux))
    assert tokens.tokens.shape[-1] == teacher.config.text_config.hidden_size and losses["aux"] > 0
    # with aux-only images the loss averages both sets; the images are drawn the same every call
    from fovea.training.deep import AUX_FAMILIES
    from fovea.training.target import AUX_SEED_START, aux_images

    size = teacher.config.vision_config.image_size
    batch = _batch(teacher, tok)
    batch["aux_pixels"], batch["aux_labels"] = aux_images(AUX_SEED_START, 3, 2, AUX_FAMILIES, size, looks="mixed")
    assert torch.equal(batch["aux_pixels"], aux_images(AUX_SEED_START, 3, 2, AUX_FAMILIES, size, looks="mixed")[0])
    with_extra = distill_step(student, teacher, (LayerOutputs(student), LayerOutputs(teacher)), batch, cfg,
                              (tokens, aux))
    assert torch.isfinite(with_extra["aux"]) and with_extra["aux"] != losses["aux"]
    student.zero_grad(set_to_none=True)
    losses["total"].backward()
    for name, p in student.named_parameters():
        frozen = name.startswith(("model.language_model.embed_tokens.", "lm_head.")) or "post_layernorm" in name
        assert p.requires_grad == (not frozen) and (p.grad is not None) == (not frozen), name
    assert any(p.grad is not None for p in aux.heads.parameters())        # the aux heads learn along
    groups = param_groups(student, aux, cfg)
    assert [g["lr_scale"] for g in groups] == [1.0, 0.1, 1.0]
    vision = {id(p) for n, p in student.named_parameters() if n.startswith("model.vision_tower.") and p.requires_grad}
    assert vision <= {id(p) for p in groups[1]["params"]} and not vision & {id(p) for p in groups[0]["params"]}
    # at scale 0 the tower stays frozen and has no group
    assert len(param_groups(build_student(teacher, dataclasses.replace(cfg, vision_lr_scale=0.0)), aux,
                            dataclasses.replace(cfg, vision_lr_scale=0.0))) == 1


def test_an_exported_student_continues_with_init_from(teacher_and_tokenizer, tmp_path):
    from fovea.training.deep import load_student
    from fovea.training.target import export

    teacher, tok = teacher_and_tokenizer
    cfg = DeepTargetConfig(layers=2 * teacher.config.text_config.num_hidden_layers, intermediate_size=32)
    student = build_student(teacher, cfg)
    export(student, tok, tmp_path / "v3", cfg, step=123)
    fresh = build_student(teacher, dataclasses.replace(cfg, seed=1))
    assert load_student(fresh, tmp_path / "v3") == 123
    for (name, a), b in zip(student.state_dict().items(), fresh.state_dict().values()):
        assert torch.allclose(a, b, atol=1e-3), name                   # fp16 on disk
    with pytest.raises(SystemExit, match="layers"):
        load_student(build_student(teacher, dataclasses.replace(cfg, intermediate_size=16)), tmp_path / "v3")


def test_a_tower_only_step_trains_the_tower_projector_and_heads_on_wide_looks(teacher_and_tokenizer):
    from fovea.data.looks import LOOKS
    from fovea.training.deep import AUX_FAMILIES, tower_step
    from fovea.training.target import AUX_SEED_START, AuxHeads, aux_images

    teacher, tok = teacher_and_tokenizer
    cfg = DeepTargetConfig(layers=2 * teacher.config.text_config.num_hidden_layers, intermediate_size=32,
                           vision_lr_scale=1.0, aux_images=4, vision_steps=2, aux_looks="wide")
    student = build_student(teacher, cfg)
    aux = AuxHeads(teacher.config.text_config.hidden_size)
    size = teacher.config.vision_config.image_size
    pixels, labels = aux_images(AUX_SEED_START, 0, 8, AUX_FAMILIES, size, looks="wide")
    losses = tower_step(student, aux, {"aux_pixels": pixels, "aux_labels": labels})
    assert torch.isfinite(losses["total"]) and set(losses) == {"aux", "total"}
    losses["total"].backward()
    for name, p in student.named_parameters():
        tower = name.startswith(("model.vision_tower.", "model.multi_modal_projector.")) and "post_layernorm" not in name
        assert (p.grad is not None) == tower, name                     # no decoder pass, no decoder gradient
    assert all(p.grad is not None for p in aux.heads.parameters())
    # "wide": every chart and scene image in a training look (never the base look alone, never a held-out one)
    from fovea.data import make_sample
    from fovea.data.looks import training_look

    for seed in range(12):
        for family in ("chart", "scene"):
            look = training_look(seed, family)
            assert look in LOOKS[family]["train"] and look not in LOOKS[family]["held_out"]
            assert make_sample(seed, family, look=look).look == look
    assert training_look(0, "ocr") is None
    # "labels": half the charts (even seeds) in 2-3-letter labels in a non-regular face, still training looks
    from fovea.data.looks import label_look

    hard = [label_look(seed, "chart") for seed in range(40)]
    assert all(look in LOOKS["chart"]["train"] and look.face != "regular" and look.label_length != 1 for look in hard)
    assert len({look.face for look in hard}) == 3 and label_look(0, "ocr") is None
    assert label_look(5, "scene") == training_look(5, "scene")
    assert {label_look(seed, "chart", ("condensed",)).face for seed in range(20)} == {"condensed"}
    with pytest.raises(ValueError, match="faces"):
        label_look(0, "chart", ("italic",))
    for looks in ("labels", "condensed"):
        pixels, _ = aux_images(AUX_SEED_START, 0, 4, AUX_FAMILIES, size, looks=looks)
        assert pixels.shape[0] == 4
    with pytest.raises(ValueError, match="looks"):
        aux_images(AUX_SEED_START, 0, 2, AUX_FAMILIES, size, looks="held_out")


def test_deep_cli_refuses_tower_steps_without_aux_images(tmp_path, capsys):
    from fovea.training.deep import parse_args

    with pytest.raises(SystemExit):
        parse_args(["--vision-steps", "10", "--vision-lr-scale", "1", "--run-dir", str(tmp_path)])
    assert "--aux-images" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        parse_args(["--aux-looks", "held_out", "--run-dir", str(tmp_path)])
    assert "--aux-looks" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        parse_args(["--focus-looks", "held_out", "--run-dir", str(tmp_path)])
    assert "--focus-looks" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        parse_args(["--aux-families", "ocr", "diagram", "--run-dir", str(tmp_path)])
    assert "--aux-families" in capsys.readouterr().err


def test_a_slot_run_exports_its_slot_head_and_a_continuation_goes_on_with_it(teacher_and_tokenizer, tmp_path):
    """A continuation (--init-from) of a run with the glyph-slot loss starts from the exported slot head,
    not from a fresh one whose first gradients would reach the tower."""
    from safetensors.torch import load_file

    from fovea.training.deep import SLOT_HEAD_FILE, main

    teacher, tok = teacher_and_tokenizer
    teacher.save_pretrained(tmp_path / "teacher")
    tok.save_pretrained(tmp_path / "teacher")
    common = ["--teacher", str(tmp_path / "teacher"), "--layers", str(2 * teacher.config.text_config.num_hidden_layers),
              "--intermediate-size", "32", "--batch-size", "1", "--turns", "1", "--vision-lr-scale", "1",
              "--aux-images", "2", "--aux-families", "ocr", "--slot-weight", "1", "--warmup", "1",
              "--probe-every", "1000", "--eval-every", "1000", "--threads", "1", "--autocast", "fp32"]
    main(common + ["--total-steps", "1", "--run-dir", str(tmp_path / "r1"), "--out", str(tmp_path / "v1")])
    first = load_file(str(tmp_path / "v1" / SLOT_HEAD_FILE))
    # lr 0: the continuation's slot head is the exported one, untouched
    main(common + ["--total-steps", "2", "--lr", "0", "--init-from", str(tmp_path / "v1"),
                   "--run-dir", str(tmp_path / "r2"), "--out", str(tmp_path / "v2")])
    second = load_file(str(tmp_path / "v2" / SLOT_HEAD_FILE))
    assert first.keys() == second.keys() and all(torch.equal(first[k], second[k]) for k in first)


def test_focused_chart_conversations_can_be_drawn_in_label_looks():
    from fovea.data import make_conversation
    from fovea.data.looks import LOOKS
    from fovea.training.target import focused_conversation

    focus = [("chart", "highest"), ("ocr", "read")]
    for seed in range(12):
        mixed = focused_conversation(seed, 2, focus, 1.0, "mixed")
        for looks, faces in (("labels", {"bold", "condensed", "oblique"}), ("condensed", {"condensed"})):
            conv = focused_conversation(seed, 2, focus, 1.0, looks)
            assert conv.family == mixed.family and conv.turns[0][0] == mixed.turns[0][0]
            if conv.family == "chart":  # a label look: a training look with 2-3-letter labels in a hard face
                assert conv.look in LOOKS["chart"]["train"] and conv.look.face in faces
                assert conv.look.label_length != 1
            else:  # other families keep their own draw
                assert conv.turns == mixed.turns and conv.look == mixed.look
    # unfocused seeds are the generator's own conversations, whatever the looks
    plain = focused_conversation(3, 4, [], 0.0, "labels")
    assert plain.turns == make_conversation(3, 4).turns and plain.look == make_conversation(3, 4).look
    with pytest.raises(ValueError, match="focus_looks"):
        focused_conversation(0, 1, focus, 1.0, "held_out")

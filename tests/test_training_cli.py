"""The bundled-model training commands run end to end on a couple of tiny steps: the assistant LM
for transformers' assisted generation, and drafter training continued from the shipped drafters."""
import dataclasses
import json

import pytest
import torch

from fovea.data import make_sample
from fovea.models.bundled import ASSETS, DEFAULT_TARGET_DIR, load_tokenizer


def test_assistant_command_trains_and_exports_a_loadable_lm(tmp_path):
    from transformers import LlamaForCausalLM

    from fovea.training.assistant import main

    out = tmp_path / "assistant"
    main(["--run-dir", str(tmp_path / "run"), "--out", str(out), "--total-steps", "2", "--batch-size", "2"])
    model = LlamaForCausalLM.from_pretrained(str(out), dtype=torch.float32)
    tok = load_tokenizer(DEFAULT_TARGET_DIR)
    from transformers import AutoConfig
    assert model.config.vocab_size == AutoConfig.from_pretrained(str(DEFAULT_TARGET_DIR)).text_config.vocab_size
    assert len(tok) <= model.config.vocab_size
    assert model.config.num_hidden_layers == 1
    meta = json.loads((out / "train_config.json").read_text())
    assert meta["steps"] == 2 and meta["final_loss"] > 0
    ids = torch.tensor([[tok.bos_token_id, 5, 6]])
    assert torch.isfinite(model(input_ids=ids).logits).all()


def test_assistant_command_rejects_a_folder_that_is_not_a_target(tmp_path):
    from fovea.training.assistant import main

    with pytest.raises(SystemExit, match="not a target folder"):
        main(["--target", str(tmp_path), "--run-dir", str(tmp_path / "run"), "--total-steps", "1"])


def test_drafter_command_continues_from_the_shipped_drafters(tmp_path):
    from fovea.drafter import CORRECTION_PARTS, Drafter
    from fovea.training.drafter_cli import main

    fovea_out, base_out, prop_out, narrow_out = (tmp_path / n for n in ("fovea", "base", "prop", "narrow"))
    main(["--init-from", str(ASSETS / "drafter"), str(ASSETS / "drafter_nocorr"), "--run-dir", str(tmp_path / "run"),
          "--out", str(fovea_out), "--baseline-out", str(base_out), "--total-steps", "1", "--batch-size", "2",
          "--lr", "1e-6", "--variant", str(prop_out), "propagate=true", "--variant", str(narrow_out), "hidden=64", "ground_weight=0.5"])
    # variants train beside the pair, from FOVEA's weights where shapes agree, and remember their setting
    assert json.loads((prop_out / "config.json").read_text())["correction"]["propagate"] is True
    assert json.loads((fovea_out / "config.json").read_text())["correction"]["propagate"] is False
    assert json.loads((narrow_out / "config.json").read_text())["correction"]["hidden"] == 64
    assert json.loads((narrow_out / "config.json").read_text())["correction"]["ground_weight"] == 0.5
    assert json.loads((fovea_out / "config.json").read_text())["correction"]["ground_weight"] == 0.0
    prop, fov = Drafter.from_pretrained(prop_out).state_dict(), Drafter.from_pretrained(fovea_out).state_dict()
    assert max(float((prop[k] - fov[k]).abs().max()) for k in fov) < 1e-2
    narrow = Drafter.from_pretrained(narrow_out).state_dict()
    assert narrow["corrector.f.0.weight"].shape[0] == 64
    assert float((narrow["fc.weight"] - fov["fc.weight"]).abs().max()) < 1e-2
    before = json.loads((ASSETS / "drafter" / "train_config.json").read_text())["steps"]
    for folder, shipped in ((fovea_out, ASSETS / "drafter"), (base_out, ASSETS / "drafter_nocorr")):
        meta = json.loads((folder / "train_config.json").read_text())
        assert meta["steps"] == before + 1 and meta["steps_this_run"] == 1
        # loaded, not read from the files: the shipped FOVEA drafter is an adapter that loads its twin's base
        new, old = Drafter.from_pretrained(folder), Drafter.from_pretrained(shipped)
        assert new.correction_weights == old.correction_weights
        saved = [k for k in old.state_dict() if old.correction_weights or not k.startswith(CORRECTION_PARTS)]
        # continued, not re-initialised: one tiny step barely moves the saved weights (the twin's: no correction's)
        assert max(float((new.state_dict()[k] - old.state_dict()[k]).abs().max()) for k in saved) < 1e-2


def test_adapter_training_moves_only_the_correction_on_the_twins_frozen_base(tmp_path):
    from safetensors.torch import load_file

    from fovea.drafter import Drafter
    from fovea.training.drafter_cli import BASE_PARTS, main

    out, base_out = tmp_path / "adapter", tmp_path / "base"
    main(["--init-from", str(ASSETS / "drafter"), str(ASSETS / "drafter_nocorr"), "--adapter",
          "--run-dir", str(tmp_path / "run"), "--out", str(out), "--baseline-out", str(base_out),
          "--total-steps", "2", "--batch-size", "2", "--lr", "1e-3", "--warmup", "1"])
    assert not base_out.exists()                     # the twin is neither trained nor re-exported
    new = Drafter.from_pretrained(out).state_dict()
    twin = Drafter.from_pretrained(ASSETS / "drafter_nocorr").state_dict()
    shipped = Drafter.from_pretrained(ASSETS / "drafter").state_dict()
    base = [k for k in new if k.startswith(BASE_PARTS)]
    assert base and all(torch.equal(new[k], twin[k]) for k in base)        # the twin's base, bit for bit
    rest = [k for k in new if not k.startswith(BASE_PARTS)]
    assert any(not torch.equal(new[k], shipped[k]) for k in rest)         # the correction modules trained
    meta = json.loads((out / "train_config.json").read_text())
    assert meta["adapter_of"] == str(ASSETS / "drafter_nocorr") and meta["steps_this_run"] == 2
    # exported as an adapter: the correction modules only, config.json naming the twin's folder from `out`
    assert load_file(str(out / "model.safetensors")).keys() == set(rest)
    base = json.loads((out / "config.json").read_text())["base"]["folder"]
    assert (out / base).resolve() == (ASSETS / "drafter_nocorr").resolve()
    twin_steps = json.loads((ASSETS / "drafter_nocorr" / "train_config.json").read_text())["steps"]
    earlier = json.loads((ASSETS / "drafter" / "train_config.json").read_text()).get("adapter_steps", 0)
    assert meta["steps"] == twin_steps and meta["adapter_steps"] == earlier + 2   # the pair still continues together


def test_adapter_training_needs_the_drafters_to_start_from(tmp_path):
    from fovea.training.drafter_cli import main

    with pytest.raises(SystemExit):
        main(["--adapter", "--run-dir", str(tmp_path / "run"), "--out", str(tmp_path / "a"), "--total-steps", "1"])


def test_a_deeper_drafter_warm_starts_from_a_shallower_one_and_drafts_the_same_at_first():
    from fovea.config import DrafterConfig
    from fovea.drafter import Drafter
    from fovea.training.drafter_cli import warm_start

    small = DrafterConfig(hidden_size=32, num_heads=2, num_kv_heads=2, intermediate_size=64, vocab_size=50,
                          memory_dim=32)
    torch.manual_seed(0)
    one = Drafter(small, key_dim=16)
    one.embed_weight = torch.randn(50, 32)
    two = Drafter(dataclasses.replace(small, num_layers=2), key_dim=16)
    two.embed_weight = one.embed_weight
    warm_start(two, one)
    tokens, feats = torch.randint(0, 50, (1, 5)), torch.randn(1, 5, 32)
    pos, mask = torch.arange(5)[None], torch.ones(5, 5, dtype=torch.bool).tril()[None, None]
    h1, _ = one.step(tokens, feats, pos, mask)
    h2, kv2 = two.step(tokens, feats, pos, mask)
    assert len(kv2) == 2 and torch.allclose(h1, h2, atol=1e-6)     # the added block starts as the identity
    assert float(two.blocks[1].q.weight.detach().abs().sum()) > 0            # ... but is not dead: only its outputs are zero
    with pytest.raises(SystemExit, match="more than --num-layers"):
        warm_start(one, two)
    with pytest.raises(SystemExit, match="another shape or context"):
        warm_start(Drafter(dataclasses.replace(small, num_layers=2, context="text"), key_dim=16), one)


@pytest.mark.parametrize("pairs,says", [(["hidden"], "KEY=VALUE"), (["enabled=false"], "KEY=VALUE"),
                                        (["propagate=maybe"], "true or false"), (["hidden=wide"], "whole number"),
                                        (["ground_weight=lots"], "a number"), (["ground_weight=-1"], ">= 0"),
                                        (["plain_weight=-0.5"], ">= 0")])
def test_drafter_variants_are_validated(pairs, says):
    from fovea.training.drafter_cli import correction_variant

    with pytest.raises(ValueError, match=says):
        correction_variant(pairs)
    assert correction_variant(["propagate=1", "max_depth=3"]).propagate is True


def test_target_focus_tasks_are_validated_and_oversampled_deterministically():
    from fovea.data import make_conversation
    from fovea.training.target import parse_focus

    with pytest.raises(SystemExit, match="unknown task 'scene/flavour'"):
        parse_focus(["scene/flavour"])
    assert parse_focus(["scene/colour", "chart/value"]) == [("scene", "colour"), ("chart", "value")]
    first = make_conversation(7, 3, "scene", "colour").turns[0]
    assert first[0] == "colour" and first[1].question == make_sample(7, "scene", "colour").question


def test_target_command_trains_packs_turns_and_exports_a_loadable_target(tmp_path, capsys):
    """Two steps of the tiny preset from scratch: conversations packed with mention weights, curves
    probed, the export loads through load_target with its prompt order and 12 x 12 memory grid."""
    from fovea.models.bundled import load_target
    from fovea.training.target import main

    run, out = tmp_path / "run", tmp_path / "out"
    main(["--preset", "tiny", "--run-dir", str(run), "--out", str(out), "--total-steps", "3", "--batch-size", "2",
          "--turns", "3", "--probe-every", "3", "--eval-every", "100", "--prompt-order", "question_first",
          "--ground-weight", "0.5", "--ground-layers", "1", "--aux-images", "2", "--aux-families", "ocr", "chart",
          "--char-weight", "2", "--vision-steps", "1", "--drill-rows", "2", "--stress-weight", "4"])
    curves = [json.loads(line) for line in (run / "curves.jsonl").read_text().splitlines()]
    assert curves[-1]["step"] == 3 and "scene/colour" in curves[-1] and "probe/colour" in curves[-1]
    assert 0.0 <= curves[-1]["ground/layer1"] <= 1.0                  # attention mass on the named object
    assert 0.0 <= curves[-1]["probe/glyph_centre"] <= 1.0             # the glyph head at each character's centre
    log = [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines()]
    assert log[0]["phase"] == "vision" and "lm" not in log[0]         # the vision-only first step
    assert all(r["ground"] > 0 and r["lm"] > 0 and r["drill"] > 0 for r in log[1:])   # drills: a second loss
    config = json.loads((out / "train_config.json").read_text())
    assert config["aux_families"] == ["ocr", "chart"] and config["ground_layers"] == [1]
    launch = json.loads((out / "launches.jsonl").read_text().splitlines()[-1])   # what train_config cannot hold
    assert launch["step"] == 0 and launch["argv"][launch["argv"].index("--turns") + 1] == "3"
    target = load_target(out)
    assert target.model.config._attn_implementation == "sdpa"         # eager only while training
    assert target.prompt_order == "question_first" and target.memory_grid == (12, 12)
    assert target.num_image_tokens == 144
    ids = target.prepare(make_sample(0).image, "What colour is the star?").input_ids[0].tolist()
    image_id = target.image_token_id
    assert ids.count(image_id) == 144 and ids.index(image_id) > 3     # the question comes first
    with pytest.raises(SystemExit):
        main(["--preset", "tiny", "--run-dir", str(run), "--prompt-order", "sideways"])
    with pytest.raises(SystemExit, match="layers 0-1"):
        main(["--preset", "tiny", "--run-dir", str(tmp_path / "r2"), "--ground-weight", "1", "--ground-layers", "3"])
    with pytest.raises(SystemExit):
        main(["--preset", "tiny", "--run-dir", str(tmp_path / "r4"), "--drill-rows", "-1"])
    assert "--drill-rows and --drill-weight must be >= 0" in capsys.readouterr().err
    with pytest.raises(SystemExit, match="aux-families"):
        main(["--preset", "tiny", "--run-dir", str(tmp_path / "r3"), "--aux-families", "poetry"])


def test_packed_batch_weights_mention_tokens_and_labels_only_answers():
    from fovea.data import make_conversation
    from fovea.training.packing import pack_batch

    tok = load_tokenizer(DEFAULT_TARGET_DIR)
    conv = make_conversation(3, 3, "scene")
    b = pack_batch([conv], tok, (144, "image_first"), mention_weight=4.0)
    labels, w = b["labels"][0], b["weights"][0]
    answered = labels != -100
    assert (w[~answered] == 0).all() and (w[answered] >= 1).all() and (w == 4.0).any()
    assert int((labels == tok.eos_token_id).sum()) == len(conv.turns)          # one EOS per turn
    mention_text = tok.decode(b["input_ids"][0][w == 4.0])
    assert conv.turns[0][1].mentions and any(
        conv.turns[0][1].answer[m.start:m.end] in mention_text for m in conv.turns[0][1].mentions)
    assert b["pixel_values"].shape == (1, 3, 192, 192) and b["patch_labels"]["colour"].shape == (1, 144)


def test_stress_weight_lands_on_the_chart_value_stop_and_nowhere_else():
    """--stress-weight weights the tokens of QA.stress (a chart value answer's stop after the asked
    bar) in image batches and in the text-only drills; at 1 the weights are what they were without it."""
    from fovea.data import Conversation, charts, make_conversation
    from fovea.training.packing import pack_batch, pack_text

    tok = load_tokenizer(DEFAULT_TARGET_DIR)
    conv = make_conversation(11, 1, "chart", "value")
    qa = conv.turns[0][1]
    (start, end), = qa.stress
    plain = pack_batch([conv], tok, (144, "question_first"), mention_weight=3.0)
    stressed = pack_batch([conv], tok, (144, "question_first"), mention_weight=3.0, stress_weight=7.0)
    changed = plain["weights"][0] != stressed["weights"][0]
    assert (stressed["weights"][0][changed] == 7.0).all() and 1 <= int(changed.sum()) <= 3
    assert tok.decode(stressed["input_ids"][0][changed]).strip() == qa.answer[start:end].strip()
    drills = [Conversation(None, "chart", [("value", charts.drill(seed))], [], {}) for seed in range(4)]
    d1, d7 = pack_text(drills, tok, (0, "question_first")), pack_text(drills, tok, (0, "question_first"), stress_weight=7.0)
    answered = d1["labels"] != -100
    assert (d1["weights"][answered] == 1.0).all() and ((d7["weights"] == 7.0).sum(1) >= 1).all()
    for i, conv in enumerate(drills):
        qa = conv.turns[0][1]
        (start, end), = qa.stress
        assert tok.decode(d7["input_ids"][i][d7["weights"][i] == 7.0]).strip() == qa.answer[start:end].strip()


def test_wsd_schedule_stays_flat_until_the_decay_and_rewarms_after_init_from():
    from fovea.training.target import TargetTrainConfig, lr_wsd

    cfg = TargetTrainConfig(lr=1e-3, warmup=10, total_steps=100, decay_frac=0.2)
    assert lr_wsd(0, cfg) == pytest.approx(1e-4) and lr_wsd(9, cfg) == pytest.approx(1e-3)
    assert all(lr_wsd(s, cfg) == pytest.approx(1e-3) for s in range(10, 81))      # no decay before step 80
    assert lr_wsd(99, cfg) < 1.1e-4 and lr_wsd(90, cfg) < lr_wsd(85, cfg)
    # continuing an export (fresh optimiser) warms up again from the step it was exported at
    assert lr_wsd(50, cfg, warm_start=50) == pytest.approx(1e-4) and lr_wsd(59, cfg, warm_start=50) == pytest.approx(1e-3)


def test_grounding_targets_point_each_mention_predicting_state_at_its_object():
    from fovea.data import make_sample
    from fovea.training.packing import as_conversation, pack_batch

    tok = load_tokenizer(DEFAULT_TARGET_DIR)
    s = make_sample(7, "scene", "colour")
    b = pack_batch([as_conversation(s)], tok, (144, "question_first"), mention_weight=3.0)
    ids, ground, w = b["input_ids"][0], b["ground"][0], b["weights"][0]
    queries = (ground >= 0).nonzero().flatten()
    # the state at t predicts token t+1; exactly the mention tokens (weight 3) are named by a query
    assert sorted((queries + 1).tolist()) == (w == 3.0).nonzero().flatten().tolist()
    named = {s.answer[m.start:m.end]: m.obj for m in s.mentions}
    colour_obj = named[s.short_answer]
    colour_pos = next(t for t in queries.tolist() if tok.decode(ids[t + 1]).strip() == s.short_answer)
    assert ground[colour_pos] == colour_obj
    patches = b["object_patches"][0]
    assert patches.shape == (len(s.objects), 144) and patches.sum(-1).min() >= 1
    # the named object's patches are where its colour label says it is
    colour_ids = b["patch_labels"]["colour"][0]
    assert (colour_ids[patches[colour_obj]] > 0).float().mean() > 0.8


def test_tokens_that_spell_a_drawn_text_are_grounded_on_their_own_glyphs():
    import torch

    from fovea.data import make_sample
    from fovea.data.labels import CHARSET
    from fovea.training.packing import as_conversation, pack_batch

    tok = load_tokenizer(DEFAULT_TARGET_DIR)
    for family, task, seed in (("ocr", "read", 5), ("chart", "value", 4), ("chart", "highest", 3)):
        s = make_sample(seed, family, task)
        b = pack_batch([as_conversation(s)], tok, (144, "question_first"), mention_weight=3.0)
        ids, ground, where = b["input_ids"][0], b["ground"][0], b["ground_patches"][0]
        chars = b["patch_labels"]["char"][0]
        spelled = 0
        for t in (ground >= 0).nonzero().flatten().tolist():
            word = tok.decode(ids[t + 1]).strip()
            if not word.isalnum() or word.lower() in ("first", "second", "third", "fourth", "fifth"):
                continue
            spelled += 1
            on = where[t]
            # fewer patches than the whole object, and among them a patch labelled with one of its characters
            assert 0 < on.sum() < b["object_patches"][0, ground[t]].sum() or len(s.objects[ground[t]].label) == 1
            assert {CHARSET[int(c)] for c in chars[on] if c > 0} & set(word)
        assert spelled >= 2
    # each drawn character's centre patch: the patch labels there mostly name that very character
    from fovea.training.target import glyph_centres

    pages = [make_sample(seed, "ocr", "read") for seed in range(6)]
    centre = glyph_centres(pages)
    assert len(centre) == sum(len(w.label) for p in pages for w in p.objects)
    labels = torch.stack([torch.from_numpy(p.patch_labels["char"].reshape(-1)) for p in pages])
    assert (labels[centre[:, 0], centre[:, 1]] == centre[:, 2]).float().mean() > 0.8
    # scene mentions still look at the whole object
    s = make_sample(7, "scene", "colour")
    b = pack_batch([as_conversation(s)], tok, (144, "question_first"), mention_weight=3.0)
    t = (b["ground"][0] >= 0).nonzero().flatten()
    assert (b["ground_patches"][0, t] == b["object_patches"][0, b["ground"][0, t]]).all()


def test_a_vision_only_step_leaves_the_decoder_alone():
    from fovea.models.bundled import BundledModelConfig, build_model
    from fovea.training.target import AuxHeads, TargetTrainConfig, image_features, vision_batch

    tok = load_tokenizer(DEFAULT_TARGET_DIR)
    model = build_model(BundledModelConfig.from_name("tiny"), tok, seed=0)
    cfg = TargetTrainConfig(batch_size=2, aux_images=1, aux_families=("ocr", "scene"))
    batch = vision_batch(0, cfg, model)
    assert batch["aux_pixels"].shape[0] == 3
    aux = AuxHeads(model.config.text_config.hidden_size)
    aux(image_features(model, batch["aux_pixels"]), batch["aux_labels"]).backward()
    grads = {n: p.grad for n, p in model.named_parameters()}
    assert all(g is None for n, g in grads.items() if "language_model" in n or "lm_head" in n)
    assert any(g is not None and g.abs().sum() > 0 for n, g in grads.items() if "vision" in n)


def test_grounding_loss_is_low_when_the_best_head_looks_at_the_object():
    import torch

    from fovea.training.target import grounding_loss

    B, H, T, N = 1, 2, 8, 4
    ids = torch.tensor([[1, 9, 9, 9, 9, 5, 6, 7]])                   # image token id 9 at positions 1-4
    batch = {"input_ids": ids, "ground": torch.tensor([[-1, -1, -1, -1, -1, 0, -1, -1]]),
             "object_patches": torch.tensor([[[False, False, True, True]]])}
    attn = torch.full((B, H, T, T), 1.0 / T)
    focused = attn.clone()
    focused[0, 1, 5] = 0.0
    focused[0, 1, 5, 3:5] = 0.5                                      # head 1 puts all its mass on the object
    diffuse = grounding_loss((attn,), batch, 9, [0])
    assert float(diffuse) == pytest.approx(-torch.log(torch.tensor(2.0 / T)).item(), rel=1e-5)
    assert float(grounding_loss((focused,), batch, 9, [0])) == pytest.approx(0.0, abs=1e-6)


def test_diagnose_sorts_mentions_by_kind_and_rejects_a_folder_without_a_model(tmp_path):
    from fovea.training.diagnose import main, mention_kind

    assert [mention_kind(w, "scene") for w in (" red", "star", " top", " large")] == \
        ["colour", "shape", "position", "size"]
    assert mention_kind(" 7", "chart") == "digit" and mention_kind(" QX", "chart") == "label"
    assert mention_kind("K4P", "ocr") == "text"
    with pytest.raises(SystemExit):
        main(["--target", str(tmp_path)])


def test_object_attribute_targets_follow_each_object_and_train_on_mention_states():
    import torch

    from fovea.data import make_sample
    from fovea.training.packing import ATTR_IDS, as_conversation, object_attr_batch
    from fovea.training.target import ObjectHeads

    scene, chart, text = make_sample(3, "scene", "describe"), make_sample(4, "chart", "value"), make_sample(5, "ocr", "read")
    attrs = object_attr_batch([as_conversation(s) for s in (scene, chart, text)])
    for j, obj in enumerate(scene.objects):
        assert attrs["colour"][0, j] == ATTR_IDS["colour"][obj.attrs["colour"]]
        assert attrs["position"][0, j] == ATTR_IDS["position"][obj.attrs["position"]]
        assert attrs["size"][0, j] == ATTR_IDS["size"][obj.attrs["size"]]
    assert (attrs["value"][1, : len(chart.objects)] == torch.tensor([int(o.attrs["value"]) for o in chart.objects])).all()
    assert (attrs["shape"][1] == -100).all() and all((v[2] == -100).all() for v in attrs.values())  # words: none
    heads = ObjectHeads(8)
    hidden = torch.randn(3, 5, 8, requires_grad=True)
    ground = torch.full((3, 5), -1)
    ground[0, 2], ground[1, 4] = 1, 0
    loss = heads(hidden, {"ground": ground, "object_attrs": attrs})
    loss.backward()
    assert loss > 0 and hidden.grad[0, 2].abs().sum() > 0 and hidden.grad[0, 1].abs().sum() == 0


def test_rescore_rereads_saved_answers_at_their_slot_without_a_model(tmp_path):
    from fovea.data import eval_seeds
    from fovea.jsonl import read_jsonl, write_jsonl_gz
    from fovea.training.evaluate import main as evaluate_main

    seed, s = next((seed, s) for seed, s in ((seed, make_sample(seed, "chart", "value")) for seed in eval_seeds(200))
                   if int(s.short_answer) != len(s.objects))
    label = s.question.split()[-1].rstrip("?")
    wrong = str(int(s.short_answer) % 9 + 1)
    rows = [{"split": "train", "task": "chart/value", "seed": seed, "question": s.question, "gold": s.short_answer,
             "correct": True,
             "output": f"From left to right, the chart shows {label} is {s.short_answer}. So bar {label} has a value of {wrong}."}]
    out = tmp_path / "accuracy.json"
    out.write_text(json.dumps({"accuracy": {"train": {"chart/value": 1.0}}}))
    write_jsonl_gz(tmp_path / "accuracy_answers.jsonl.gz", rows)
    evaluate_main(["--out", str(out), "--rescore"])
    report = json.loads(out.read_text())
    assert report["accuracy"] == {"train": {"chart/value": 0.0}} and not report["meets_bar"]
    assert "whole-word" in report["scorer_note"]
    assert read_jsonl(tmp_path / "accuracy_answers.jsonl.gz")[0]["correct"] is False
    with pytest.raises(SystemExit, match="run the evaluation first"):
        evaluate_main(["--out", str(tmp_path / "missing.json"), "--rescore"])


def test_rebuild_plan_chains_the_shipped_recipe_and_every_step_parses(tmp_path, capsys):
    """`python -m fovea.train rebuild`: every step's command is accepted by its own CLI, each adapter
    sits on the twin its pair just exported, the shipped folders are each written once, and the
    seeds are fresh per step."""
    from fovea.drafter import Drafter
    from fovea.training import assistant, drafter_cli, rebuild

    steps = rebuild.plan(DEFAULT_TARGET_DIR, ASSETS, tmp_path, 30_000_000)
    parsed = {s.name: {"drafter": drafter_cli, "assistant": assistant}[s.command].build_parser().parse_args(s.argv)
              for s in steps}
    for s in steps:
        if s.command == "drafter" and parsed[s.name].fovea:
            drafter_cli.correction_variant(parsed[s.name].fovea)              # the --fovea fields exist
    assert parsed["adapter_full"].adapter and parsed["deep_text"].adapter
    assert parsed["adapter_full"].init_from == [parsed["pair_full"].out, parsed["pair_full"].baseline_out]
    assert parsed["deep_text"].init_from == [parsed["pair_text"].out, parsed["pair_text"].baseline_out]
    assert parsed["adapter_full"].out == ASSETS / "drafter" and parsed["deep_text"].out == ASSETS / "drafter_text"
    assert parsed["deep_text"].unroll == 4 and parsed["pair_full"].context == "full" == parsed["adapter_full"].context
    assert {p.context for n, p in parsed.items() if "text" in n} == {"text"}
    assert len({p.seed_offset for p in parsed.values()}) == len(steps)
    writes = [w for s in steps for w in s.writes]
    assert sorted(writes) == ["assistant", "drafter", "drafter_nocorr", "drafter_text", "drafter_text_nocorr"]
    # the text pair continues the shipped 64-wide corrector: its --fovea shape is the shipped one's
    shipped = Drafter.from_pretrained(ASSETS / "drafter_text").correction_cfg
    ccfg = drafter_cli.correction_variant(parsed["deep_text"].fovea)
    assert (ccfg.hidden, ccfg.max_depth) == (shipped.hidden, shipped.max_depth)
    rebuild.main(["--dry-run", "--runs", str(tmp_path)])
    out = capsys.readouterr().out
    assert out.count("python -m fovea.train ") == len(steps) and not list(tmp_path.iterdir())


def test_rebuild_validates_its_input(tmp_path):
    from fovea.training import rebuild

    with pytest.raises(SystemExit):
        rebuild.parse_args(["--only", "pair_fulll", "--dry-run"])
    with pytest.raises(SystemExit):
        rebuild.parse_args(["--target", str(tmp_path)])                         # no config.json there
    with pytest.raises(SystemExit):
        rebuild.parse_args(["--assets", str(tmp_path)])                         # no drafters to continue


def test_bf16_autocast_only_where_the_cpu_runs_it_fast():
    """"auto" picks bf16 on CUDA and on CPUs with AMX-BF16 or AVX512-BF16, fp32 on AVX2-only CPUs (where bf16 autocast
    runs ~24x slower); "bf16" / "fp32" force it; anything else is refused."""
    from fovea.training.common import bf16_autocast

    cpu = torch.device("cpu")
    assert bf16_autocast(cpu, "auto", cpuinfo="flags\t: fpu sse avx2 fma amx_bf16 amx_tile")[1]
    assert not bf16_autocast(cpu, "auto", cpuinfo="flags\t: fpu sse avx2 fma")[1]
    assert bf16_autocast(cpu, "auto", cpuinfo="flags\t: avx2 avx512f avx512_bf16")[1]      # Zen 4: 1.4x a deep step
    assert not bf16_autocast(cpu, "auto", cpuinfo="flags\t: avx2 avx512f avx512bw")[1]     # AVX-512 without bf16
    assert bf16_autocast(cpu, "bf16", cpuinfo="flags\t: avx2")[1]
    assert not bf16_autocast(cpu, "fp32", cpuinfo="flags\t: amx_bf16")[1]
    assert bf16_autocast(torch.device("cuda"), "auto", cpuinfo="")[1]
    with pytest.raises(ValueError, match="autocast must be one of"):
        bf16_autocast(cpu, "fp8")
    context, on = bf16_autocast(cpu, "bf16")
    with context:
        assert (torch.ones(2, 2) @ torch.ones(2, 2)).dtype == torch.bfloat16


def test_drafter_training_families_weight_the_batches_and_are_validated(capsys):
    from fovea.data import make_sample
    from fovea.training.drafter_cli import main, sample_family

    seeds = range(1000, 1012)
    picked = [sample_family(s, ("ocr", "ocr", "scene", "chart")) for s in seeds]
    assert picked.count("ocr") == 6 and picked.count("scene") == 3 and picked.count("chart") == 3
    assert [make_sample(s, family=f).family for s, f in zip(seeds, picked)] == picked
    assert all(sample_family(s, ()) is None for s in seeds)          # the data's own round robin
    assert {make_sample(s, family=sample_family(s, ())).family for s in seeds} == {"scene", "ocr", "chart"}
    with pytest.raises(SystemExit):
        main(["--families", "ocr", "maps", "--total-steps", "1"])
    assert "unknown ['maps']" in capsys.readouterr().err

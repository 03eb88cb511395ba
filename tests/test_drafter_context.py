"""Text-context (cache-friendly) drafters: their cache skips the image placeholders, the image
reaches them only through the visual memory. Training and inference must see the same pairs at
the same positions, and decoding with them stays lossless."""
import pytest
import torch

from fovea.config import DrafterConfig, RetrievalConfig
from fovea.decoding import fovea, run
from fovea.draft import context_pairs, extend
from fovea.drafter import Drafter, drafter_config_for

from tests.test_lossless import CFG, assert_lossless, prompts, trained_tiny_pipeline


def test_context_pairs_skip_every_pair_touching_an_image_placeholder():
    img = 3
    seq = torch.tensor([1, img, img, 7, 8, 9])        # BOS, two image tokens, text, first answer token
    # pairs (i, i+1): (1,3) (3,3) (3,7) (7,8) (8,9)
    assert context_pairs(seq, img).tolist() == [False, False, False, True, True]
    assert context_pairs(seq, None).tolist() == [True] * 5


def test_drafter_config_rejects_an_unknown_context():
    with pytest.raises(ValueError, match="context"):
        DrafterConfig(context="image")


def test_extend_refuses_to_drop_the_root_pair(tiny_pipeline):
    target = tiny_pipeline.target
    drafter = Drafter(drafter_config_for(target, context="text")).bind(target).eval()
    feats = torch.randn(3, target.hidden_size)
    with pytest.raises(ValueError, match="last committed pair"):
        extend(drafter, None, torch.tensor([5, 6, 7]), feats, torch.tensor([True, True, False]))


def test_prefill_matches_the_training_mask(tiny_pipeline):
    """The root state a text-context drafter gets at run time (cache of text pairs only, original
    positions) equals the one its training pass computes over the whole sequence with image keys
    masked out."""
    target = tiny_pipeline.target
    torch.manual_seed(0)
    drafter = Drafter(drafter_config_for(target, context="text")).bind(target).eval()
    prompt = target.prepare(*tiny_pipeline.random_example("scene", 7))
    _, out = target.prefill(prompt)
    seq = torch.cat([prompt.input_ids[0], out.logits[-1].argmax()[None]])
    keep = context_pairs(seq, target.image_token_id)
    state = extend(drafter, None, seq[1:], out.hidden, keep)
    n = seq.shape[0] - 1
    assert state.length == int(keep.sum()) < n and state.next_pos == n

    keys = keep[None] | torch.eye(n, dtype=torch.bool)
    mask = (torch.tril(torch.ones(n, n, dtype=torch.bool)) & keys)[None, None]
    with torch.no_grad():
        h, _ = drafter.step(seq[1:][None], out.hidden[None].float(), torch.arange(n)[None], mask, None)
    assert torch.allclose(h[0, -1], state.root_h, atol=1e-5)


@pytest.fixture(scope="module")
def trained_text_pipeline():
    return trained_tiny_pipeline(seed=2, drafter_name="fovea_text", steps=80)


def test_text_context_drafter_is_lossless_untrained(tiny_pipeline):
    pipe = type(tiny_pipeline)(tiny_pipeline.target, {"fovea": tiny_pipeline.drafters["fovea_text"]})
    assert_lossless(pipe, prompts(pipe, 20, offset=300))


def test_text_context_drafter_is_lossless_trained_and_accepts(trained_text_pipeline):
    tau = assert_lossless(trained_text_pipeline, prompts(trained_text_pipeline, 20, offset=400))
    assert tau > 1.5, f"the trained text-context drafter should accept draft tokens (tau {tau:.2f})"


def test_text_context_survives_save_and_load(trained_text_pipeline, tmp_path):
    drafter = trained_text_pipeline.drafters["fovea"]
    drafter.save_pretrained(tmp_path, dtype=torch.float32)
    loaded = Drafter.from_pretrained(tmp_path).bind(trained_text_pipeline.target)
    assert loaded.cfg.context == "text"
    p = prompts(trained_text_pipeline, 1, offset=500)[0]
    assert run(trained_text_pipeline.target, fovea(loaded), p, CFG).tokens == \
        run(trained_text_pipeline.target, fovea(drafter), p, CFG).tokens


def test_training_with_propagate_feeds_the_depth1_step_the_corrected_state(tiny_pipeline):
    from fovea.config import CorrectionConfig
    from fovea.data import make_sample
    from fovea.training.drafter import answer_loss_mask, drafter_loss, target_artifacts
    from fovea.training.packing import as_conversation, pack_batch

    target = tiny_pipeline.target
    torch.manual_seed(0)
    drafter = Drafter(drafter_config_for(target)).bind(target).train()
    for p in drafter.corrector.f.parameters():
        torch.nn.init.normal_(p, std=0.05)           # an untrained corrector adds nothing; make it add
    convs = [as_conversation(make_sample(seed)) for seed in range(2)]
    batch = pack_batch(convs, target.tokenizer, (target.num_image_tokens, "image_first"), 1.0,
                       image_size=target.image_size)
    ids, att, lab = batch["input_ids"], batch["attention_mask"], batch["labels"]
    art = target_artifacts(target, ids, att, batch["pixel_values"])
    losses = {}
    for propagate in (False, True):
        loss, m = drafter_loss(drafter, art, ids, answer_loss_mask(lab), att, CorrectionConfig(propagate=propagate),
                               image_token_id=target.image_token_id)
        losses[propagate] = m
        loss.backward()
    for k in ("hid1", "kl1", "tok1"):   # depth 0 is the same (its states corrected once, for the loss and the feed)
        assert losses[True][k] == pytest.approx(losses[False][k], rel=1e-5), k
    assert losses[True]["hid2"] != pytest.approx(losses[False]["hid2"])      # depth 1 reads h + g*c


def test_retrieval_grounding_pulls_retrieval_onto_the_named_patches(tiny_pipeline):
    """ground_weight > 0 adds -log(retrieval mass on the named object's patches) at mention-predicting
    states; a few steps on it alone raise that mass; ground_weight 0 (the paper) leaves the loss as it was."""
    from fovea.config import CorrectionConfig
    from fovea.data import make_sample
    from fovea.training.drafter import answer_loss_mask, drafter_loss, retrieval_ground_loss, target_artifacts
    from fovea.training.packing import as_conversation, pack_batch

    target = tiny_pipeline.target
    torch.manual_seed(0)
    drafter = Drafter(drafter_config_for(target)).bind(target).train()
    convs = [as_conversation(make_sample(seed, "scene", "colour")) for seed in range(2)]
    batch = pack_batch(convs, target.tokenizer, (target.num_image_tokens, "image_first"), 1.0,
                       image_size=target.image_size)
    ids, att, lab, ground = batch["input_ids"], batch["attention_mask"], batch["labels"], batch["ground_patches"]
    assert ground.shape[-1] == target.num_image_tokens and ground.any()
    art = target_artifacts(target, ids, att, batch["pixel_values"])
    mask = answer_loss_mask(lab)
    plain, _ = drafter_loss(drafter, art, ids, mask, att, CorrectionConfig(), image_token_id=target.image_token_id)
    off, _ = drafter_loss(drafter, art, ids, mask, att, CorrectionConfig(), image_token_id=target.image_token_id,
                          ground=ground)
    assert off.item() == pytest.approx(plain.item())                # weight 0: the paper's loss, labels or not
    on, m = drafter_loss(drafter, art, ids, mask, att, CorrectionConfig(ground_weight=1.0),
                         image_token_id=target.image_token_id, ground=ground)
    assert on.item() > plain.item() and 0 < m["ground_mass1"] < 1

    # the loss is -log of the softmax mass on the named patches, and descending it raises that mass
    with torch.no_grad():                                            # the memory is fixed; the retriever learns
        memory = [drafter.encode_memory(art["visual"][i]) for i in range(2)]
    h = torch.randn(2, ids.shape[1] - 1, drafter.cfg.hidden_size)
    rows, valid = ground[:, 1:], att[:, 1:].bool()
    opt = torch.optim.SGD(drafter.retriever.parameters(), lr=0.5)
    masses = []
    for _ in range(8):
        loss, mass = retrieval_ground_loss(drafter, h, 0, memory, rows, valid, RetrievalConfig())
        masses.append(mass)
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert masses[-1] > masses[0]
    b, t = (valid & rows.any(-1)).nonzero()[0].tolist()
    with torch.no_grad():
        s = drafter.retriever.scores(h[b, t][None], torch.zeros(1, dtype=torch.long), memory[b], "cumulative")
        want = -torch.log(torch.softmax(s, -1)[0, rows[b, t]].sum())
        got, _ = retrieval_ground_loss(drafter, h[b:b + 1, t:t + 1], 0, memory[b:b + 1], rows[b:b + 1, t:t + 1],
                                       valid[b:b + 1, t:t + 1], RetrievalConfig())
    assert float(got) == pytest.approx(float(want), rel=1e-5)


def test_plain_weight_trains_the_head_on_the_uncorrected_state_too(tiny_pipeline):
    """plain_weight > 0 adds the head loss on the uncorrected state h (what levels deeper than
    max_depth draft from); a few steps on it raise the uncorrected head's agreement with the target,
    and weight 0 (the paper) leaves the loss as it was. The twin (correction off) ignores it."""
    from fovea.config import CorrectionConfig
    from fovea.data import make_sample
    from fovea.training.drafter import answer_loss_mask, drafter_loss, target_artifacts
    from fovea.training.packing import as_conversation, pack_batch

    target = tiny_pipeline.target
    torch.manual_seed(0)
    drafter = Drafter(drafter_config_for(target)).bind(target).train()
    convs = [as_conversation(make_sample(seed, "scene", "describe")) for seed in range(2)]
    batch = pack_batch(convs, target.tokenizer, (target.num_image_tokens, "image_first"), 1.0,
                       image_size=target.image_size)
    ids, att, lab = batch["input_ids"], batch["attention_mask"], batch["labels"]
    art = target_artifacts(target, ids, att, batch["pixel_values"])
    mask = answer_loss_mask(lab)
    kw = dict(image_token_id=target.image_token_id)
    paper, m0 = drafter_loss(drafter, art, ids, mask, att, CorrectionConfig(), **kw)
    on, m1 = drafter_loss(drafter, art, ids, mask, att, CorrectionConfig(plain_weight=1.0), **kw)
    assert "acc_plain1" not in m0 and 0 <= m1["acc_plain1"] <= 1 and on.item() > paper.item()
    twin0, _ = drafter_loss(drafter, art, ids, mask, att, CorrectionConfig(enabled=False), **kw)
    twin1, _ = drafter_loss(drafter, art, ids, mask, att, CorrectionConfig(enabled=False, plain_weight=1.0), **kw)
    assert twin1.item() == pytest.approx(twin0.item())

    opt = torch.optim.Adam(drafter.parameters(), lr=3e-3)
    accs = []
    for _ in range(6):   # the uncorrected head's KL to the target falls
        loss, m = drafter_loss(drafter, art, ids, mask, att, CorrectionConfig(plain_weight=1.0), **kw)
        accs.append(m["kl_plain1"] + m["kl_plain2"])
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert accs[-1] < accs[0]


def test_a_memory_of_the_targets_image_states_is_built_the_same_in_training_and_decoding(tiny_pipeline):
    """memory_source="hidden" (a deviation): the memory is the target's last-layer states at the image
    positions. Decoding takes them from the prefill, training from the teacher-forced pass; both are
    the same states, and decoding with such a drafter stays lossless (trained a little, so it corrects)."""
    import dataclasses

    from fovea.candidates import TreeDrafter
    from fovea.config import CorrectionConfig
    from fovea.training.drafter import target_artifacts
    from fovea.training.packing import as_conversation, pack_batch

    with pytest.raises(ValueError, match="memory_source"):
        DrafterConfig(memory_source="pixels")
    target = tiny_pipeline.target
    torch.manual_seed(0)
    cfg = dataclasses.replace(drafter_config_for(target, context="text"), memory_source="hidden")
    drafter = Drafter(cfg).bind(target).eval()
    prompt = target.prepare(*tiny_pipeline.random_example("scene", 3))
    _, out = target.prefill(prompt)
    session = TreeDrafter("fovea", drafter).start(target, prompt, out, int(out.logits[-1].argmax()), CFG)
    image = prompt.input_ids[0] == target.image_token_id
    assert int(image.sum()) == session.memory.values.shape[0] == target.num_image_tokens
    expected = drafter.encode_memory(out.hidden[image])
    assert torch.allclose(session.memory.values, expected.values, atol=1e-6)
    assert not torch.allclose(out.hidden[image], target.visual_tokens(prompt), atol=1e-3)   # not the projected tokens

    # training reads the same positions of its own teacher-forced pass
    ids, att = prompt.input_ids, torch.ones_like(prompt.input_ids)
    art = target_artifacts(target, ids, att, prompt.model_inputs["pixel_values"])
    assert torch.allclose(art["feats"][0][image], out.hidden[image], atol=1e-4)

    pipe = trained_tiny_pipeline(seed=4, drafter_name="fovea_text", steps=1)
    hidden = Drafter(cfg).bind(pipe.target).train()
    hidden.load_state_dict(pipe.drafters["fovea"].state_dict())
    opt = torch.optim.AdamW(hidden.parameters(), lr=3e-3)
    from fovea.training.drafter import train_steps
    from tests.test_lossless import self_distillation_batches
    train_steps(pipe.target, {"fovea": hidden}, self_distillation_batches(pipe), {"fovea": CorrectionConfig()}, opt,
                steps=5)
    pipe.drafters["fovea"] = hidden.eval()
    assert_lossless(pipe, prompts(pipe, 6, offset=600))


def test_unrolled_training_steps_give_the_states_the_draft_tree_reads(tiny_pipeline, monkeypatch):
    """--unroll 3 (a deviation): the depth-2 state trained for origin i is the state a chain of two
    tree nodes gets at decode time after the committed pairs 0..i; depths 0 and 1 train as with 2."""
    from fovea.config import CorrectionConfig
    from fovea.data import make_sample
    from fovea.training import drafter as training
    from fovea.training.packing import as_conversation, pack_batch

    target = tiny_pipeline.target
    torch.manual_seed(0)
    drafter = Drafter(drafter_config_for(target)).bind(target).eval()
    batch = pack_batch([as_conversation(make_sample(3))], target.tokenizer, (target.num_image_tokens, "image_first"),
                       1.0, image_size=target.image_size)
    ids, att, lab = batch["input_ids"], batch["attention_mask"], batch["labels"]
    art = training.target_artifacts(target, ids, att, batch["pixel_values"])
    seen, real = {}, training._head_losses

    def spy(drafter_, h, depth, *rest, **kw):
        seen[depth] = h.detach()
        return real(drafter_, h, depth, *rest, **kw)

    monkeypatch.setattr(training, "_head_losses", spy)
    ccfg, lmask = CorrectionConfig(max_depth=8), training.answer_loss_mask(lab)
    _, two = training.drafter_loss(drafter, art, ids, lmask, att, ccfg, unroll=2)
    _, three = training.drafter_loss(drafter, art, ids, lmask, att, ccfg, unroll=3)
    assert set(seen) == {0, 1, 2} and {k: three[k] for k in two} == pytest.approx(two)
    assert "acc3" in three and "acc4" not in three
    feats, i = art["feats"][0], 7
    with torch.no_grad():
        causal = torch.ones(i + 1, i + 1, dtype=torch.bool).tril()
        h_c, kv_c = drafter.step(ids[:, 1:i + 2], feats[None, :i + 1], torch.arange(i + 1)[None], causal[None, None])
        h_1, kv_1 = drafter.step(ids[:, i + 2:i + 3], h_c[:, -1:], torch.tensor([[i + 1]]),
                                 torch.ones(1, 1, 1, i + 2, dtype=torch.bool), kv_c)
        past = [(torch.cat([a[0], b[0]], 2), torch.cat([a[1], b[1]], 2)) for a, b in zip(kv_c, kv_1)]
        h_2, _ = drafter.step(ids[:, i + 3:i + 4], h_1, torch.tensor([[i + 2]]),
                              torch.ones(1, 1, 1, i + 3, dtype=torch.bool), past)
    assert torch.allclose(seen[1][0, i], h_1[0, 0], atol=1e-5)
    assert torch.allclose(seen[2][0, i], h_2[0, 0], atol=1e-5)


def test_drafter_command_rejects_an_unroll_out_of_range(capsys):
    from fovea.training.drafter_cli import main

    with pytest.raises(SystemExit):
        main(["--unroll", "0"])
    assert "--unroll must be in [1, 8]" in capsys.readouterr().err


def test_drafter_command_rejects_a_bad_main_correction_field(capsys):
    from fovea.training.drafter_cli import main

    with pytest.raises(SystemExit):
        main(["--fovea", "hidden=wide"])
    assert "--fovea: hidden takes a whole number" in capsys.readouterr().err

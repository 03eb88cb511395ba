"""Real-backbone targets on tiny random-weight LLaVA-NeXT and Qwen2.5-VL models (float32, CPU):
greedy FOVEA == the model's own generate(); tree verification == sequential decoding; cache
compaction == a fresh prefill; the visual memory is the documented layout; load_backbone and
the drafter resolve folders and refuse what they cannot load with clear messages."""
import copy
import itertools
import json

import pytest
import torch

from fovea.methods import METHODS
from fovea.backbones import BackboneError, load_backbone, save_backbone, tiny_llava_next, tiny_qwen2_5_vl
from fovea.backbones.llava_next import anyres_layout
from fovea.backbones.qwen2_5_vl import grid_of
from fovea.config import FoveaConfig
from fovea.data import make_sample
from fovea.decoding import fovea, run
from fovea.drafter import Drafter, drafter_config_for
from fovea.target import Prompt
from fovea.tree import build_tree_buffers

ARCHS = ["llava_next", "qwen2_5_vl"]
BUILDERS = {"llava_next": tiny_llava_next, "qwen2_5_vl": tiny_qwen2_5_vl}
# (width, height): square, wide, tall, odd sizes -> different anyres tilings / Qwen grids
SIZES = [(128, 128), (96, 48), (40, 100), (64, 80), (50, 37)]
CFG = FoveaConfig().replace(decoding=dict(max_new_tokens=12, trace=True), tree=dict(depth=4, top_k=3, total_tokens=10))
PARENTS = [-1, 0, 0, 1, 1, 2, 3]      # 7 nodes, three root-to-leaf paths


def examples(n, offset=0):
    """n (image, question) pairs with varied image sizes."""
    sizes = itertools.cycle(SIZES)
    out = []
    for i in range(n):
        s = make_sample(20_000 + offset + i)
        out.append((s.image.resize(next(sizes)), s.question))
    return out


@pytest.fixture(scope="module", params=ARCHS)
def target(request):
    return BUILDERS[request.param](seed=0)


@pytest.fixture(scope="module")
def drafted(target):
    """The target with a drafter fitted for 30 steps to its own greedy continuations of the first 8
    test prompts, so draft tokens get accepted and multi-token commits are exercised (a random
    model's continuations of other prompts do not transfer reliably: it depends on the images)."""
    from fovea.config import CorrectionConfig
    from fovea.training.drafter import answer_loss_mask, drafter_loss, target_artifacts
    from fovea.training.records import Collator

    torch.manual_seed(0)
    drafter = Drafter(drafter_config_for(target)).bind(target).train()
    rows = []
    for img, q in examples(8):
        p = target.prepare(img, q)
        gen = target.model.generate(input_ids=p.input_ids, **p.model_inputs, do_sample=False, max_new_tokens=12)
        rows.append((img, q, target.tokenizer.decode(gen[0, p.input_ids.shape[1]:], skip_special_tokens=True)))
    ids, att, lab, images = Collator(target)(rows)
    art = target_artifacts(target, ids, att, images)
    opt = torch.optim.AdamW(drafter.parameters(), lr=5e-3)
    for _ in range(30):
        loss, _ = drafter_loss(drafter, art, ids, answer_loss_mask(lab), att, CorrectionConfig())
        opt.zero_grad()
        loss.backward()
        opt.step()
    return target, drafter.eval()


def test_greedy_fovea_equals_model_generate_for_20_prompts(drafted):
    target, drafter = drafted
    accepted = rounds = 0
    for img, q in examples(20):
        p = target.prepare(img, q)
        ref = target.model.generate(input_ids=p.input_ids, **p.model_inputs, do_sample=False,
                                    max_new_tokens=CFG.decoding.max_new_tokens)
        out = run(target, fovea(drafter), p, CFG)
        assert out.tokens == ref[0, p.input_ids.shape[1]:].tolist()
        accepted += sum(len(it.accepted) for it in out.iterations)
        rounds += len(out.iterations)
    print(f"{type(target).__name__}: {accepted} draft tokens accepted in {rounds} rounds")
    assert accepted > 0, "no draft token was ever accepted: multi-token commits were not exercised"


def test_text_context_drafter_skips_the_image_and_stays_lossless(target):
    """A cache-friendly (text-context) drafter on a real backbone: its prefill caches only pairs
    without the backbone's image placeholder, and decoding still equals generate()."""
    from fovea.decoding import fovea, start

    assert target.image_token_id is not None
    torch.manual_seed(1)
    drafter = Drafter(drafter_config_for(target, context="text")).bind(target).eval()
    for img, q in examples(4, offset=700):
        p = target.prepare(img, q)
        n_image = int((p.input_ids == target.image_token_id).sum())
        assert n_image > 0
        session = start(target, fovea(drafter), p, CFG)
        n_pairs = p.input_ids.shape[1]
        assert session.draft.state.next_pos == n_pairs
        assert session.draft.state.length <= n_pairs - n_image      # every image pair skipped
        ref = target.model.generate(input_ids=p.input_ids, **p.model_inputs, do_sample=False,
                                    max_new_tokens=CFG.decoding.max_new_tokens)
        assert run(target, fovea(drafter), p, CFG).tokens == ref[0, p.input_ids.shape[1]:].tolist()


def _fresh_prompt(target, prompt, ids):
    inputs = dict(prompt.model_inputs)
    if "mm_token_type_ids" in inputs:
        inputs["mm_token_type_ids"] = target.token_types(ids)
    return Prompt(input_ids=ids, model_inputs=inputs)


def test_tree_verification_logits_equal_sequential_decoding_on_each_branch(target):
    img, q = examples(1, offset=7)[0]
    state, _ = target.prefill(target.prepare(img, q))
    tokens = torch.randint(10, target.vocab_size - 10, (len(PARENTS),), generator=torch.Generator().manual_seed(1))
    buffers = build_tree_buffers(PARENTS)
    tree_out = target.forward(copy.deepcopy(state), tokens, buffers.depths, buffers.mask)
    worst = 0.0
    for path in buffers.retrieve_indices.tolist():
        seq_state = copy.deepcopy(state)
        for n in [n for n in path if n >= 0]:
            out = target.forward(seq_state, tokens[n:n + 1], torch.zeros(1, dtype=torch.long), None)
            target.commit(seq_state, 1, torch.tensor([0]))
            worst = max(worst, (out.logits[0] - tree_out.logits[n]).abs().max().item())
    print(f"{type(target).__name__}: max |tree - sequential| logit diff {worst:.2e}")
    assert worst < 1e-4


def test_cache_compaction_equals_fresh_prefill_of_accepted_sequence(target):
    img, q = examples(1, offset=11)[0]
    prompt = target.prepare(img, q)
    state, _ = target.prefill(prompt)
    tokens = torch.tensor([11, 12, 13, 14, 15, 16, 17])
    buffers = build_tree_buffers(PARENTS)
    target.forward(state, tokens, buffers.depths, buffers.mask)
    keep = [0, 1, 3, 6]                        # root -> 1 -> 3 -> 6
    target.commit(state, len(PARENTS), torch.tensor(keep))
    after = target.forward(state, torch.tensor([21]), torch.zeros(1, dtype=torch.long), None)
    fresh_ids = torch.cat([prompt.input_ids[0], tokens[keep], torch.tensor([21])])[None]
    _, fresh = target.prefill(_fresh_prompt(target, prompt, fresh_ids))
    assert (after.logits[0] - fresh.logits[-1]).abs().max().item() < 1e-4


def test_llava_next_memory_is_base_grid_then_rows_of_patches_and_newline():
    target = tiny_llava_next(seed=0)
    cfg = target.model.config
    for img, q in examples(len(SIZES)):
        p = target.prepare(img, q)
        vis = target.visual_tokens(p)
        g, rows, cols = anyres_layout(cfg, (img.height, img.width))
        assert target.memory_grid == (g, g)
        assert vis.shape[0] == g * g + rows * (cols + 1) == int((p.input_ids == cfg.image_token_id).sum())
        newline = vis[g * g:].reshape(rows, cols + 1, -1)[:, cols]          # the last entry of every row
        assert torch.allclose(newline, target.model.model.image_newline.float().expand(rows, -1))


def test_qwen_memory_grid_comes_from_image_grid_thw_after_merge():
    native = tiny_qwen2_5_vl(seed=0)
    for img, q in examples(len(SIZES)):
        p = native.prepare(img, q)
        rows, cols = grid_of(p.model_inputs["image_grid_thw"][0], native.merge)
        assert native.visual_tokens(p).shape[0] == rows * cols == int(p.model_inputs["mm_token_type_ids"].sum())
    fixed = tiny_qwen2_5_vl(seed=0, image_size=64)
    assert fixed.memory_grid == (4, 4)
    for img, q in examples(3):
        assert fixed.visual_tokens(fixed.prepare(img, q)).shape[0] == 16


def test_qwen_prompt_matches_the_qwen2_5_vl_processor(monkeypatch):
    """Our tokenizer + image-processor path gives the processor's exact inputs (its constructor
    wants a torchvision video processor, so the class check is bypassed for this comparison)."""
    from transformers import Qwen2_5_VLProcessor
    from transformers.processing_utils import ProcessorMixin

    target = tiny_qwen2_5_vl(seed=0)
    monkeypatch.setattr(ProcessorMixin, "check_argument_for_proper_class", lambda self, name, arg: None)
    proc = Qwen2_5_VLProcessor(image_processor=target.image_processor, tokenizer=target.tokenizer,
                               video_processor=None)
    for img, q in examples(3):
        ours = target.prepare(img, q)
        ref = proc(images=img, text=target.prompt_text(q), return_tensors="pt")
        assert torch.equal(ours.input_ids, ref["input_ids"])
        for key in ("pixel_values", "image_grid_thw", "mm_token_type_ids"):
            assert torch.equal(ours.model_inputs[key], ref[key].to(ours.model_inputs[key].dtype)), key


def test_drafter_config_takes_gqa_heads_vocab_and_rope_theta_from_the_backbone(target):
    text = target.model.config.get_text_config()
    cfg = drafter_config_for(target)
    assert (cfg.hidden_size, cfg.num_heads, cfg.num_kv_heads) == (64, 4, 2)
    assert cfg.vocab_size == target.vocab_size == len(target.tokenizer)
    assert cfg.rope_theta == text.rope_parameters["rope_theta"]
    Drafter(cfg).bind(target)


def test_load_backbone_round_trips_a_saved_checkpoint(target, tmp_path):
    save_backbone(target, tmp_path / "ckpt")
    loaded = load_backbone(tmp_path / "ckpt", device="cpu", image_size=getattr(target, "image_size", None))
    assert type(loaded) is type(target)
    img, q = examples(1, offset=3)[0]
    a, b = target.prepare(img, q), loaded.prepare(img, q)
    assert torch.equal(a.input_ids, b.input_ids)
    assert torch.allclose(target.prefill(a)[1].logits, loaded.prefill(b)[1].logits, atol=1e-5)


def test_load_backbone_reads_the_bundled_llava_format(tiny_pipeline, tmp_path):
    from fovea.models.bundled import BundledTarget

    tiny_pipeline.target.model.save_pretrained(str(tmp_path / "bundled"))
    tiny_pipeline.target.tokenizer.save_pretrained(str(tmp_path / "bundled"))
    assert isinstance(load_backbone(tmp_path / "bundled", device="cpu"), BundledTarget)


def test_pipeline_from_pretrained_runs_a_backbone_folder_with_a_drafter_folder(tmp_path):
    from fovea.pipeline import FoveaPipeline

    target = tiny_qwen2_5_vl(seed=0, image_size=64)
    save_backbone(target, tmp_path / "target")
    Drafter(drafter_config_for(target)).save_pretrained(tmp_path / "drafter")
    pipe = FoveaPipeline.from_pretrained(tmp_path / "target", tmp_path / "drafter")
    assert pipe.memory_grid == (4, 4) and set(pipe.drafters) == {"fovea"}
    img, q = examples(1)[0]
    fovea, ar = (pipe.generate(img, q, CFG, METHODS[m]) for m in ("fovea", "autoregressive"))
    assert fovea.tokens == ar.tokens and len(fovea.tokens) == CFG.decoding.max_new_tokens


def test_load_backbone_refuses_with_clear_messages(tmp_path):
    with pytest.raises(BackboneError, match="No target folder at"):
        load_backbone(tmp_path / "missing")
    (tmp_path / "odd").mkdir()
    (tmp_path / "odd" / "config.json").write_text(json.dumps({"model_type": "whisper"}))
    with pytest.raises(BackboneError, match="model_type 'whisper'.*Supported: llava"):
        load_backbone(tmp_path / "odd")
    (tmp_path / "noweights").mkdir()
    (tmp_path / "noweights" / "config.json").write_text(json.dumps({"model_type": "llava_next"}))
    with pytest.raises(BackboneError, match="no \\*.safetensors weights"):
        load_backbone(tmp_path / "noweights")
    with pytest.raises(BackboneError, match="cannot be downloaded on this machine"):
        load_backbone("fovea-test-owner/llava-v1.6-not-cached", offline=True)


def test_drafter_from_a_hub_id_says_plainly_it_cannot_download_offline():
    with pytest.raises(BackboneError, match="drafter 'fovea-test-owner/drafter-not-cached'.*cannot be downloaded"):
        Drafter.from_pretrained("fovea-test-owner/drafter-not-cached", offline=True)

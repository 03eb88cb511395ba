"""The invariant: greedy FOVEA output == greedy autoregressive output, token for token, in
float32, with an untrained and a trained drafter, including EOS and max_new_tokens falling
inside an accepted path."""
import copy
import itertools

import pytest
import torch

from fovea.config import CorrectionConfig, FoveaConfig
from fovea.decoding import fovea, run
from fovea.pipeline import FoveaPipeline
from fovea.training.drafter import train_steps

N_PROMPTS = 50
CFG = FoveaConfig().replace(decoding=dict(max_new_tokens=24, trace=True), tree=dict(depth=4, top_k=3, total_tokens=10))


def prompts(pipe, n, offset=0):
    fams = itertools.cycle(["scene", "ocr", "chart"])
    return [pipe.target.prepare(*pipe.random_example(next(fams), 10_000 + offset + i)) for i in range(n)]


def self_distillation_batches(pipe, n_prompts=48, new_tokens=32, batch=8):
    """Batches of (prompt + the target's own greedy continuation); labels mark the continuation."""
    cfg = CFG.replace(decoding=dict(max_new_tokens=new_tokens, trace=False))
    rows = []
    for p in prompts(pipe, n_prompts, offset=50_000):
        out = run(pipe.target, None, p, cfg).tokens
        rows.append((p, out))
    pad = pipe.target.tokenizer.pad_token_id
    for i in itertools.cycle(range(0, n_prompts, batch)):
        chunk = rows[i:i + batch]
        width = max(p.input_ids.shape[1] + len(o) for p, o in chunk)
        ids = torch.full((len(chunk), width), pad)
        lab = torch.full((len(chunk), width), -100)
        att = torch.zeros((len(chunk), width), dtype=torch.long)
        for r, (p, o) in enumerate(chunk):
            seq = torch.cat([p.input_ids[0], torch.tensor(o)])
            ids[r, : len(seq)], att[r, : len(seq)] = seq, 1
            lab[r, p.input_ids.shape[1]: len(seq)] = torch.tensor(o)
        yield ids, att, lab, torch.cat([p.model_inputs["pixel_values"] for p, _ in chunk])


def trained_tiny_pipeline(seed: int, drafter_name: str, steps: int) -> FoveaPipeline:
    """A tiny random pipeline whose drafter `drafter_name`, self-distilled for `steps` steps,
    becomes pipe.drafters["fovea"] (the one assert_lossless decodes with)."""
    pipe = FoveaPipeline.tiny_random(seed=seed)
    drafter = pipe.drafters[drafter_name].train()
    opt = torch.optim.AdamW(drafter.parameters(), lr=3e-3)
    train_steps(pipe.target, {"fovea": drafter}, self_distillation_batches(pipe),
                {"fovea": CorrectionConfig()}, opt, steps=steps)
    pipe.drafters["fovea"] = drafter.eval()
    return pipe


@pytest.fixture(scope="module")
def trained_pipeline():
    return trained_tiny_pipeline(seed=1, drafter_name="fovea", steps=120)


def assert_lossless(pipe, cases, cfg=CFG):
    taus = []
    for p in cases:
        ar = run(pipe.target, None, p, cfg)
        sd = run(pipe.target, fovea(pipe.drafters["fovea"]), p, cfg)
        assert sd.tokens == ar.tokens, "speculative output differs from autoregressive output"
        taus.append(sd.mean_accept_length)
    return sum(taus) / len(taus)


def test_greedy_fovea_equals_autoregressive_untrained_drafter(tiny_pipeline):
    assert_lossless(tiny_pipeline, prompts(tiny_pipeline, N_PROMPTS))


def test_greedy_fovea_equals_autoregressive_trained_drafter(trained_pipeline):
    tau = assert_lossless(trained_pipeline, prompts(trained_pipeline, N_PROMPTS))
    assert tau > 1.5, f"the trained drafter should accept draft tokens (tau {tau:.2f})"


@pytest.mark.parametrize("mode", ["dense", "random", "static", "fixed", "query_agnostic", "state_only"])
def test_every_retrieval_mode_and_chain_is_lossless(trained_pipeline, mode):
    cfg = CFG.replace(retrieval=dict(mode=mode), tree=dict(chain=mode == "fixed"))
    assert_lossless(trained_pipeline, prompts(trained_pipeline, 4, offset=200), cfg)


def test_dynamic_depth_stops_unsure_rounds_early_and_stays_lossless(trained_pipeline):
    from fovea.draft import draft_tree, extend

    cases = prompts(trained_pipeline, 4, offset=400)
    for stop in (0.0, 0.2, 0.9):                  # 0: fixed depth (the default is dynamic)
        assert_lossless(trained_pipeline, cases, CFG.replace(tree=dict(stop_below=stop)))
    # a threshold no path can meet stops after the first level: only the root's children are drafted
    d = trained_pipeline.drafters["fovea"]
    state = extend(d, None, torch.randint(0, 50, (6,)), torch.randn(6, d.cfg.hidden_size))
    shallow = draft_tree(d, state, 1, None, CFG.replace(tree=dict(stop_below=0.999999)), trace=False)
    deep = draft_tree(d, state, 1, None, CFG.replace(tree=dict(stop_below=0.0)), trace=False)   # fixed depth
    assert int(shallow.depth_ids.max()) == 1 and int(deep.depth_ids.max()) > 1


def test_propagating_the_corrected_state_is_lossless(trained_pipeline):
    cfg = CFG.replace(correction=dict(propagate=True, max_depth=3))
    assert_lossless(trained_pipeline, prompts(trained_pipeline, 4, offset=300), cfg)


def test_triggered_correction_fixes_only_unsure_states_and_stays_lossless(trained_pipeline):
    """correction.trigger: only draft states whose uncorrected top-1 probability is under it are
    corrected (at depth <= max_depth). At 1 every state is unsure, so the tree is the paper's; at a
    tiny trigger none is, so it is the uncorrected tree; the trace logs the corrected nodes only."""
    from fovea.draft import draft_tree, extend
    from fovea.drafter import Drafter

    pipe = trained_pipeline
    d = pipe.drafters["fovea"]
    p = prompts(pipe, 1, offset=500)[0]
    memory = d.encode_memory(pipe.target.visual_tokens(p))
    state = extend(d, None, torch.randint(0, 50, (6,)), torch.randn(6, d.cfg.hidden_size))
    deep = CFG.replace(correction=dict(max_depth=3))

    def tree(**corr):
        return draft_tree(d, state, 1, memory, deep.replace(correction=corr), trace=True)

    paper, always, never, off = tree(), tree(trigger=1.0), tree(trigger=1e-9), tree(enabled=False)
    assert always.token_ids.tolist() == paper.token_ids.tolist()
    assert never.token_ids.tolist() == off.token_ids.tolist() and len(never.retrieval) == 0
    some = tree(trigger=0.6)
    assert 0 < len(some.retrieval) <= len(paper.retrieval)
    for node, r in some.retrieval.items():     # each logged node was unsure before its correction
        assert r.top_before[0][1] < 0.6 and some.depth_ids[node] <= 3
    for trigger in (0.3, 0.8):
        assert_lossless(pipe, prompts(pipe, 4, offset=600), deep.replace(correction=dict(trigger=trigger)))
    with pytest.raises(ValueError, match="trigger"):
        CorrectionConfig(trigger=1.5)


def mid_path_positions(result):
    """Output positions whose token is emitted inside an accepted path (not the round's last)."""
    pos, out = [], 1                            # token 0 comes from the prefill
    for rec in result.iterations:
        pos.extend(range(out, out + len(rec.emitted) - 1))
        out += len(rec.emitted)
    return pos


def test_eos_and_max_new_tokens_inside_an_accepted_path(trained_pipeline):
    pipe = trained_pipeline
    cfg = CFG.replace(decoding=dict(max_new_tokens=40))
    checked_eos = checked_len = 0
    for p in prompts(pipe, 20, offset=300):
        base = run(pipe.target, fovea(pipe.drafters["fovea"]), p, cfg)
        inside = mid_path_positions(base)
        if not inside:
            continue
        k = inside[len(inside) // 2]
        # max_new_tokens ends inside the path
        short = cfg.replace(decoding=dict(max_new_tokens=k + 1))
        sd = run(pipe.target, fovea(pipe.drafters["fovea"]), p, short)
        assert sd.tokens == run(pipe.target, None, p, short).tokens == base.tokens[:k + 1]
        checked_len += 1
        # EOS (a token first seen at position k) ends inside the path
        first = [j for j in inside if base.tokens.index(base.tokens[j]) == j]
        if first:
            target = copy.copy(pipe.target)
            target.eos_token_ids = {base.tokens[first[0]]}
            sd = run(target, fovea(pipe.drafters["fovea"]), p, cfg)
            ar = run(target, None, p, cfg)
            assert sd.tokens == ar.tokens == base.tokens[:first[0] + 1]
            assert sd.finish_reason == "eos"
            checked_eos += 1
    assert checked_len >= 5 and checked_eos >= 3, (checked_len, checked_eos)


def test_prompt_lookup_and_assistant_strategies_are_lossless(tiny_pipeline):
    """The other drafting strategies run in the same decode loop and stay exact: prompt lookup
    (n-grams of prompt + output) and an (untrained) assistant LM drafting greedy chains."""
    from fovea.candidates import AssistantLM, PromptLookup
    from fovea.training.assistant import build_assistant

    pipe = tiny_pipeline
    assistant = build_assistant(pipe.target.model.config, pipe.target.tokenizer).eval()
    for strategy in (PromptLookup(), AssistantLM(assistant, depth=4)):
        for p in prompts(pipe, 3, offset=400):
            assert run(pipe.target, strategy, p, CFG).tokens == run(pipe.target, None, p, CFG).tokens, strategy.name


def test_a_narrow_corrector_drafts_through_the_fused_path_losslessly_and_traces(tiny_pipeline, monkeypatch):
    """A corrector no wider than the drafter takes fovea.fused in the decode loop: the same trees as
    the two modules, lossless, and a trace whose every corrected node selected K in [K_min, K_max]."""
    from fovea import fused
    from fovea.draft import draft_tree, extend
    from fovea.drafter import Drafter

    pipe = tiny_pipeline
    base = pipe.drafters["fovea"]
    torch.manual_seed(3)
    narrow = Drafter(base.cfg, CorrectionConfig(hidden=base.cfg.hidden_size // 2)).bind(pipe.target).eval()
    for prm in narrow.corrector.parameters():
        torch.nn.init.normal_(prm, std=0.3)
    p = prompts(pipe, 1, offset=700)[0]
    memory = narrow.encode_memory(pipe.target.visual_tokens(p))
    with torch.no_grad():                          # the decode loop runs without autograd
        assert fused.usable(narrow.retriever, narrow.corrector, memory, CFG.retrieval, True)
    state = extend(narrow, None, torch.randint(0, 50, (6,)), torch.randn(6, narrow.cfg.hidden_size))
    deep = CFG.replace(correction=dict(max_depth=64))
    for corr in ({}, {"trigger": 0.6}):
        cfg = deep.replace(correction=corr)
        got = draft_tree(narrow, state, 1, memory, cfg, trace=True)
        with monkeypatch.context() as m:
            m.setattr(fused, "usable", lambda *a, **k: False)
            ref = draft_tree(narrow, state, 1, memory, cfg, trace=True)
        assert got.token_ids.tolist() == ref.token_ids.tolist()
        assert set(got.retrieval) == set(ref.retrieval) and len(got.retrieval) > 0
        for node, r in got.retrieval.items():
            assert cfg.retrieval.k_min <= r.k <= cfg.retrieval.k_max and r.indices == ref.retrieval[node].indices
    pipe.drafters["fovea"] = narrow
    try:
        assert_lossless(pipe, prompts(pipe, 3, offset=710), deep)
        assert_lossless(pipe, prompts(pipe, 3, offset=720), deep.replace(correction=dict(trigger=0.6)))
    finally:
        pipe.drafters["fovea"] = base

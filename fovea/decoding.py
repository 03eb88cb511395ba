"""The decode loops: FOVEA tree speculative decoding and the autoregressive baseline, both over
the same target interface, both yielding one trace record per round.

Per FOVEA round: (1) draft a tree, (2) verify it in one target forward with a tree mask,
(3) accept a path (greedy or speculative sampling), (4) commit the path into both caches.
Stops exactly at EOS or max_new_tokens, also inside an accepted path.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Iterator

import torch

from fovea.config import FoveaConfig
from fovea.draft import DraftState, context_pairs, draft_tree, extend
from fovea.drafter import Drafter
from fovea.memory import VisualMemory
from fovea.target import Prompt, TargetState
from fovea.trace import GenerationResult, IterationTrace, StepTrace
from fovea.tree import build_tree_buffers
from fovea.verify import accept_greedy, accept_sampling, process_logits


@dataclass
class Session:
    """Everything one request carries between rounds."""
    target_state: TargetState
    draft_state: DraftState | None
    memory: VisualMemory | None
    root: int                                  # last emitted token, not yet in the target cache
    out: list[int] = field(default_factory=list)
    done: bool = False
    generator: torch.Generator | None = None


def _pick(logits: torch.Tensor, cfg: FoveaConfig, gen) -> int:
    """Next token from target logits [V]: argmax, or a sample after temperature / top-p."""
    if cfg.decoding.greedy:
        return int(logits.argmax())
    probs = process_logits(logits, cfg.decoding.temperature, cfg.decoding.top_p)
    return int(torch.multinomial(probs, 1, generator=gen))


def _emit(session: Session, tokens: list[int], eos: set[int], budget: int) -> list[int]:
    """Append tokens until EOS (kept) or the budget; returns what was appended."""
    taken = []
    for t in tokens:
        if session.done:
            break
        session.out.append(t)
        taken.append(t)
        session.done = t in eos or len(session.out) >= budget
    return taken


def start(target, drafter: Drafter | None, prompt: Prompt, cfg: FoveaConfig) -> Session:
    """Prefill the target (and the drafter), emit the first token, build the visual memory."""
    gen = torch.Generator().manual_seed(cfg.decoding.seed)
    state, out = target.prefill(prompt)
    first = _pick(out.logits[-1], cfg, gen)
    memory, draft_state = None, None
    if drafter is not None:
        memory = drafter.encode_memory(target.visual_tokens(prompt), getattr(target, "memory_grid", None))
        seq = torch.cat([prompt.input_ids[0].cpu(), torch.tensor([first])])
        keep = context_pairs(seq, target.image_token_id) if drafter.cfg.context == "text" else None
        draft_state = extend(drafter, None, seq[1:], out.hidden, keep)
    session = Session(target_state=state, draft_state=draft_state, memory=memory, root=first, generator=gen)
    _emit(session, [first], target.eos_token_ids, cfg.decoding.max_new_tokens)
    return session


def verify_tree(target, state: TargetState, tree, cfg: FoveaConfig, generator=None):
    """One target forward over root + draft nodes with the tree mask (appends them to the cache),
    then the acceptance rule. -> (target output, accepted node indices, bonus token)."""
    buffers = build_tree_buffers(tree.parents)
    out = target.forward(state, torch.tensor(tree.tokens), buffers.depths, buffers.mask)
    if cfg.decoding.greedy:
        accepted, bonus = accept_greedy(tree.tokens, tree.parents, out.logits.argmax(-1).tolist())
    else:
        probs = process_logits(out.logits, cfg.decoding.temperature, cfg.decoding.top_p)
        accepted, bonus = accept_sampling(tree.tokens, tree.parents, probs, generator)
    return out, accepted, bonus


@torch.no_grad()
def speculative_rounds(target, drafter: Drafter, session: Session, cfg: FoveaConfig) -> Iterator[IterationTrace]:
    it = 0
    while not session.done:
        t0 = time.perf_counter()
        # 1. draft a tree rooted at the last emitted token
        tree = draft_tree(drafter, session.draft_state, session.root, session.memory, cfg,
                          trace=cfg.decoding.trace, generator=session.generator)
        t1 = time.perf_counter()
        # 2-3. verify the tree in one target forward, accept a path and take the bonus token
        out, accepted, bonus = verify_tree(target, session.target_state, tree, cfg, session.generator)
        t2 = time.perf_counter()
        # 4. commit root + accepted path into the target cache, extend the drafter with target features
        keep = torch.tensor([0] + accepted)
        target.commit(session.target_state, len(tree.tokens), keep)
        new_tokens = [tree.tokens[a] for a in accepted] + [bonus]
        emitted = _emit(session, new_tokens, target.eos_token_ids, cfg.decoding.max_new_tokens)
        if not session.done:
            session.draft_state = extend(drafter, session.draft_state, torch.tensor(new_tokens),
                                         out.hidden.index_select(0, keep))
            session.root = bonus
        t3 = time.perf_counter()
        yield IterationTrace(
            iteration=it, tokens=tree.tokens, parents=tree.parents, depths=tree.depths, scores=tree.scores,
            retrieval=tree.retrieval, accepted=accepted,
            rejected=[n for n in range(1, len(tree.tokens)) if n not in set(accepted)],
            emitted=emitted, bonus_token=bonus,
            draft_ms=(t1 - t0) * 1e3, verify_ms=(t2 - t1) * 1e3, commit_ms=(t3 - t2) * 1e3)
        it += 1


@torch.no_grad()
def autoregressive_steps(target, session: Session, cfg: FoveaConfig) -> Iterator[StepTrace]:
    step = 0
    zero = torch.zeros(1, dtype=torch.long)
    while not session.done:
        t0 = time.perf_counter()
        out = target.forward(session.target_state, torch.tensor([session.root]), zero, None)
        target.commit(session.target_state, 1, zero)
        session.root = _pick(out.logits[-1], cfg, session.generator)
        _emit(session, [session.root], target.eos_token_ids, cfg.decoding.max_new_tokens)
        yield StepTrace(step=step, token=session.root, forward_ms=(time.perf_counter() - t0) * 1e3)
        step += 1


def generate(target, drafter: Drafter | None, prompt: Prompt, cfg: FoveaConfig,
             method: str = "fovea") -> Iterator:
    """Yield per-round records, then one GenerationResult. method: "fovea" or "autoregressive"."""
    if method not in ("fovea", "autoregressive"):
        raise ValueError(f"method must be 'fovea' or 'autoregressive', got {method!r}")
    if method == "fovea" and drafter is None:
        raise ValueError("FOVEA decoding needs a drafter")
    t0 = time.perf_counter()
    session = start(target, drafter if method == "fovea" else None, prompt, cfg)
    prefill_ms = (time.perf_counter() - t0) * 1e3
    rounds = speculative_rounds(target, drafter, session, cfg) if method == "fovea" \
        else autoregressive_steps(target, session, cfg)
    records, accept_lengths = [], []
    for rec in rounds:
        accept_lengths.append(rec.accept_length if isinstance(rec, IterationTrace) else 1)
        records.append(rec)
        yield rec
    wall = time.perf_counter() - t0
    finish = "eos" if session.out and session.out[-1] in target.eos_token_ids else "length"
    yield GenerationResult(
        method=method, tokens=list(session.out), text=target.tokenizer.decode(session.out, skip_special_tokens=True),
        wall_s=wall, prefill_ms=prefill_ms, target_forwards=1 + len(accept_lengths), iterations=records,
        accept_lengths=accept_lengths, memory_grid=getattr(target, "memory_grid", None), finish_reason=finish)


def run(target, drafter, prompt, cfg, method="fovea") -> GenerationResult:
    """Drain `generate` and return its GenerationResult."""
    *_, result = generate(target, drafter, prompt, cfg, method)
    return result

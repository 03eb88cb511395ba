"""The decode loops: speculative decoding with any drafting strategy (`fovea.candidates`) and the
autoregressive baseline, both over the same target interface, both yielding one record stream.

`generate` yields a `PrefillTrace` for the prefill token, then per speculative round: (1) draft a
tree, (2) verify it in one target forward with a tree mask, (3) accept a path (greedy or
speculative sampling), (4) commit the path into the target cache and the drafting session.
Stops exactly at EOS or max_new_tokens, also inside an accepted path. Each record times itself
from resume to yield, so a slow consumer never inflates the decoder's figures.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Iterator

import torch

from fovea.candidates import DraftSession, Strategy, TreeDrafter
from fovea.config import FoveaConfig
from fovea.methods import AUTOREGRESSIVE, FOVEA
from fovea.profile import NO_CLOCK, Clock
from fovea.target import Prompt, TargetState
from fovea.trace import Accumulator, GenerationResult, IterationTrace, PrefillTrace, StepTrace
from fovea.verify import accept_greedy, accept_sampling, process_logits


@dataclass
class Session:
    """Everything one request carries between rounds."""
    target_state: TargetState
    draft: DraftSession | None
    root: int                                  # last emitted token, not yet in the target cache
    eos: set[int]
    budget: int                                # max_new_tokens
    out: list[int] = field(default_factory=list)
    generator: torch.Generator | None = None

    @property
    def done(self) -> bool:
        return bool(self.out) and (self.out[-1] in self.eos or len(self.out) >= self.budget)

    @property
    def finish(self) -> str | None:
        return None if not self.done else ("eos" if self.out[-1] in self.eos else "length")

    def emit(self, tokens: list[int]) -> list[int]:
        """Append tokens until EOS (kept) or the budget; returns what was appended."""
        taken = []
        for t in tokens:
            if self.done:
                break
            self.out.append(t)
            taken.append(t)
        return taken


def _pick(logits: torch.Tensor, cfg: FoveaConfig, gen) -> int:
    """Next token from target logits [V]: argmax, or a sample after temperature / top-p."""
    if cfg.decoding.greedy:
        return int(logits.argmax())
    probs = process_logits(logits, cfg.decoding.temperature, cfg.decoding.top_p)
    return int(torch.multinomial(probs, 1, generator=gen))


@torch.inference_mode()
def start(target, strategy: Strategy | None, prompt: Prompt, cfg: FoveaConfig) -> Session:
    """Prefill the target, emit the first token, start the drafting session (if any)."""
    gen = torch.Generator().manual_seed(cfg.decoding.seed)
    state, out = target.prefill(prompt)
    first = _pick(out.logits[-1], cfg, gen)
    draft = None if strategy is None else strategy.start(target, prompt, out, first, cfg)
    session = Session(target_state=state, draft=draft, root=first, eos=target.eos_token_ids,
                      budget=cfg.decoding.max_new_tokens, generator=gen)
    session.emit([first])
    return session


def verify_tree(target, state: TargetState, tree, cfg: FoveaConfig, generator=None):
    """One target forward over root + draft nodes with the tree mask (appends them to the cache),
    then the acceptance rule. -> (target output, accepted node indices, bonus token)."""
    out = target.forward(state, tree.token_ids, tree.depth_ids, tree.mask)
    if cfg.decoding.greedy:
        accepted, bonus = accept_greedy(tree.tokens, tree.parents, out.logits.argmax(-1).tolist())
    else:
        probs = process_logits(out.logits, cfg.decoding.temperature, cfg.decoding.top_p)
        accepted, bonus = accept_sampling(tree.tokens, tree.parents, probs, generator)
    return out, accepted, bonus


@torch.inference_mode()
def speculative_rounds(target, session: Session, cfg: FoveaConfig, clock: Clock = NO_CLOCK) -> Iterator[IterationTrace]:
    it = 0
    while not session.done:
        t0 = time.perf_counter()
        clock.start()
        # 1. draft a tree rooted at the last emitted token
        tree = session.draft.propose(session.root, session.generator, clock)
        t1 = time.perf_counter()
        # 2-3. verify the tree in one target forward, accept a path and take the bonus token
        out, accepted, bonus = verify_tree(target, session.target_state, tree, cfg, session.generator)
        t2 = time.perf_counter()
        clock.lap("verify")
        # 4. commit root + accepted path into the target cache and the drafting session
        keep = torch.tensor([0] + accepted)
        target.commit(session.target_state, len(tree.tokens), keep)
        new_tokens = [tree.tokens[a] for a in accepted] + [bonus]
        emitted = session.emit(new_tokens)
        clock.lap("commit/target")
        if not session.done:
            session.draft.update(new_tokens, out.hidden.index_select(0, keep))
            session.root = bonus
        t3 = time.perf_counter()
        clock.lap("commit/drafter")
        yield IterationTrace(iteration=it, tokens=tree.token_ids, parents=tree.parent_ids, depths=tree.depth_ids,
                             scores=tree.score_values, retrieval=tree.retrieval, accepted=accepted, emitted=emitted,
                             bonus_token=bonus, draft_ms=(t1 - t0) * 1e3, verify_ms=(t2 - t1) * 1e3,
                             commit_ms=(t3 - t2) * 1e3, finish=session.finish, mask=tree.mask)
        it += 1


@torch.inference_mode()
def autoregressive_steps(target, session: Session, cfg: FoveaConfig) -> Iterator[StepTrace]:
    step = 0
    zero = torch.zeros(1, dtype=torch.long)
    while not session.done:
        t0 = time.perf_counter()
        out = target.forward(session.target_state, torch.tensor([session.root]), zero, None)
        target.commit(session.target_state, 1, zero)
        session.root = _pick(out.logits[-1], cfg, session.generator)
        session.emit([session.root])
        yield StepTrace(step, session.root, (time.perf_counter() - t0) * 1e3, session.finish)
        step += 1


@torch.inference_mode()
def generate(target, strategy: Strategy | None, prompt: Prompt, cfg: FoveaConfig,
             clock: Clock = NO_CLOCK) -> Iterator:
    """Yield a PrefillTrace, then one record per round (a strategy) or step (None: autoregressive).
    The strategy adjusts the config first (e.g. the no-correction ablation switches correction off)."""
    cfg = cfg if strategy is None else strategy.configure(cfg)
    t0 = time.perf_counter()
    session = start(target, strategy, prompt, cfg)
    yield PrefillTrace(session.out[0], (time.perf_counter() - t0) * 1e3, session.finish)
    if strategy is None:
        yield from autoregressive_steps(target, session, cfg)
    else:
        yield from speculative_rounds(target, session, cfg, clock)


def run(target, strategy: Strategy | None, prompt: Prompt, cfg: FoveaConfig, clock: Clock = NO_CLOCK) -> GenerationResult:
    """Fold `generate` into an Accumulator and return its GenerationResult."""
    acc = Accumulator(AUTOREGRESSIVE.name if strategy is None else strategy.name, target.memory_grid)
    for record in generate(target, strategy, prompt, cfg, clock):
        acc.add(record)
    return acc.result(target.tokenizer.decode(acc.tokens, skip_special_tokens=True))


def fovea(drafter) -> TreeDrafter:
    """The FOVEA strategy over a drafter (the request's config decides correction, tree, retrieval)."""
    return TreeDrafter(FOVEA.name, drafter)

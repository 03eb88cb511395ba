"""Drafting strategies behind one protocol, in the spirit of transformers' `CandidateGenerator`:
a strategy `start`s a per-request drafting session, which `propose`s a draft tree rooted at the
last emitted token and is `update`d with what the target accepted. The decode loop
(`fovea.decoding`) takes any of them; a benchmark is a list of them.

- `TreeDrafter`: the FOVEA drafter's dynamic tree. FOVEA, its no-correction ablation and the chain
  (top-1 per level) are instances with different drafters / config overrides.
- `PromptLookup`: n-gram lookup in the prompt and the output so far (no model), a chain.
- `AssistantLM`: a small causal LM with its own KV cache drafting a greedy chain.

Strategies hold only shared, read-only things (models, overrides); everything per request lives
in the session, so one strategy serves concurrent requests. Knows nothing about acceptance.
"""
from __future__ import annotations

from typing import Protocol

import torch

from fovea.checkpoints import check_correction_weights
from fovea.config import FoveaConfig
from fovea.draft import DraftTree, context_pairs, draft_tree, extend, image_states
from fovea.drafter import Drafter
from fovea.memory import VisualMemory
from fovea.profile import NO_CLOCK, Clock
from fovea.tree import ancestors_of


class DraftSession(Protocol):
    def propose(self, root: int, generator: torch.Generator | None, clock: Clock) -> DraftTree: ...

    def update(self, tokens: list[int], features: torch.Tensor) -> None:
        """Committed tokens [T] (accepted path + bonus) and the target's features [T, D] before them."""


class Strategy(Protocol):
    name: str

    def configure(self, cfg: FoveaConfig) -> FoveaConfig: ...

    def start(self, target, prompt, prefill, first: int, cfg: FoveaConfig) -> DraftSession: ...


class TreeDrafter:
    """FOVEA's tree drafter; `overrides` (e.g. {"correction": {"enabled": False}}) adjust the
    request's config for this strategy (no-correction, chain, retrieval controls)."""

    def __init__(self, name: str, drafter: Drafter, overrides: dict | None = None):
        self.name, self.drafter, self.overrides = name, drafter, overrides or {}

    def configure(self, cfg: FoveaConfig) -> FoveaConfig:
        return cfg.replace(**self.overrides)

    def start(self, target, prompt, prefill, first: int, cfg: FoveaConfig) -> "TreeSession":
        d = self.drafter
        check_correction_weights(d, cfg.correction)     # a twin saved without them cannot correct
        seq = torch.cat([prompt.input_ids[0].cpu(), torch.tensor([first])])
        if d.cfg.memory_source == "hidden":   # the target's last-layer states at the image positions
            visual = image_states(prefill.hidden, seq[:-1], target.image_token_id)
        else:
            visual = target.visual_tokens(prompt)
        memory = d.encode_memory(visual, target.memory_grid)
        keep = context_pairs(seq, target.image_token_id) if d.cfg.context == "text" else None
        # room for the prompt, the answer and one round's tree slots: the buffers never grow
        capacity = seq.shape[0] + cfg.decoding.max_new_tokens + cfg.tree.depth * cfg.tree.top_k + 8
        state = extend(d, None, seq[1:], prefill.hidden, keep, capacity=capacity)
        return TreeSession(d, state, memory, cfg)


class TreeSession:
    """One request's tree drafting: the drafter's state (its KV cache and the root's draft state) and the
    request's visual memory."""

    def __init__(self, drafter: Drafter, state, memory: VisualMemory, cfg: FoveaConfig):
        self.drafter, self.state, self.memory, self.cfg = drafter, state, memory, cfg

    @property
    def root_state(self) -> torch.Tensor:
        """[D] the draft state the next tree grows from (the root's)."""
        return self.state.root_h

    def propose(self, root: int, generator=None, clock: Clock = NO_CLOCK) -> DraftTree:
        return draft_tree(self.drafter, self.state, root, self.memory, self.cfg, self.cfg.decoding.trace,
                          generator, clock)

    def probe(self, root: int, memory: VisualMemory | None, generator=None) -> DraftTree:
        """An untraced tree from the same state read against another memory (None: no correction); the
        session does not change (the visual-budget probes, `fovea.analysis.budget`)."""
        return draft_tree(self.drafter, self.state, root, memory, self.cfg, False, generator)

    def update(self, tokens: list[int], features: torch.Tensor) -> None:
        self.state = extend(self.drafter, self.state, torch.tensor(tokens), features)


def chain_tree(root: int, tokens: list[int]) -> DraftTree:
    """A chain root -> tokens[0] -> ... as a DraftTree (scores 0: a chain has nothing to rank)."""
    n = len(tokens) + 1
    parents = list(range(-1, n - 1))
    return DraftTree(token_ids=torch.tensor([root, *tokens]), parent_ids=torch.tensor(parents),
                     depth_ids=torch.arange(n), score_values=torch.zeros(n), mask=ancestors_of(parents))


class PromptLookup:
    """Prompt lookup decoding: find the latest earlier occurrence of the last `ngram` tokens
    (longest n-gram first, down to 1) in prompt + output and propose the `depth` tokens after it."""

    def __init__(self, name: str = "prompt_lookup", max_ngram: int = 3, depth: int = 8):
        self.name, self.max_ngram, self.depth = name, max_ngram, depth

    def configure(self, cfg: FoveaConfig) -> FoveaConfig:
        return cfg

    def start(self, target, prompt, prefill, first: int, cfg: FoveaConfig) -> "_LookupSession":
        return _LookupSession(self, prompt.input_ids[0].tolist() + [first])


class _LookupSession:
    def __init__(self, rule: PromptLookup, history: list[int]):
        self.rule, self.history = rule, history

    def propose(self, root: int, generator=None, clock: Clock = NO_CLOCK) -> DraftTree:
        h = self.history
        for n in range(min(self.rule.max_ngram, len(h) - 1), 0, -1):
            tail = h[-n:]
            for start in range(len(h) - n - 1, -1, -1):         # latest match first
                if h[start:start + n] == tail:
                    return chain_tree(root, h[start + n:start + n + self.rule.depth])
        return chain_tree(root, [])

    def update(self, tokens: list[int], features: torch.Tensor) -> None:
        self.history.extend(tokens)


class AssistantLM:
    """Assisted generation: a small causal LM (same tokenizer) drafts a greedy chain of `depth`
    tokens with its own KV cache, cropped back to the committed tokens after each round."""

    def __init__(self, model, name: str = "assisted", depth: int = 5):
        self.name, self.model, self.depth = name, model.eval(), depth

    def configure(self, cfg: FoveaConfig) -> FoveaConfig:
        return cfg

    def start(self, target, prompt, prefill, first: int, cfg: FoveaConfig) -> "_AssistantSession":
        from transformers import DynamicCache

        session = _AssistantSession(self, DynamicCache(config=self.model.config))
        ids = prompt.input_ids[0].tolist()
        session.advance(ids[:-1])                 # cache the prompt but its last token
        session.pending = [ids[-1], first]
        return session


class _AssistantSession:
    def __init__(self, lm: AssistantLM, cache):
        self.lm, self.cache, self.pending = lm, cache, []

    def advance(self, tokens: list[int]) -> torch.Tensor:
        """Run tokens through the assistant, appending them to its cache -> next-token logits [V]."""
        out = self.lm.model(input_ids=torch.tensor([tokens]), past_key_values=self.cache, use_cache=True)
        return out.logits[0, -1]

    def propose(self, root: int, generator=None, clock: Clock = NO_CLOCK) -> DraftTree:
        logits = self.advance(self.pending)      # the cache now holds every committed token
        chain = [int(logits.argmax())]
        for _ in range(self.lm.depth - 1):
            chain.append(int(self.advance(chain[-1:]).argmax()))
        if self.lm.depth > 1:
            self.cache.crop(-(self.lm.depth - 1))  # drop the drafted tokens (crop(-k) drops the last k)
        return chain_tree(root, chain)

    def update(self, tokens: list[int], features: torch.Tensor) -> None:
        self.pending = tokens                    # cached before the next proposal (the root last)

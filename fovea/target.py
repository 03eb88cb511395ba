"""The target interface: what a vision-language model must offer for FOVEA decoding, and its
implementation over transformers models (`HFVisionTarget`).

A target (1) turns (image, question) into a `Prompt`, (2) gives the projected visual tokens
(the visual-memory source), (3) prefills the prompt into a KV cache, (4) runs a forward over n
new tokens with an explicit tree mask and position ids, and (5) commits an accepted subset of
those n tokens into the cache. Caches, masks and positions are arguments, never attributes set
on the model. Inputs are moved to the model's device; every `TargetOutput` and `visual_tokens`
comes back as float32 on the CPU, so the decode loop's bookkeeping never depends on where the
target runs. Knows nothing about drafting or acceptance rules.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from fovea.cache import compact_tail, stacked_cache_for


@dataclass
class Prompt:
    input_ids: torch.Tensor                 # [1, T]
    model_inputs: dict = field(default_factory=dict)   # pixel_values, image_sizes, ... for the prefill


@dataclass
class TargetState:
    cache: object                           # a transformers Cache holding `length` committed tokens
    length: int
    extra: dict = field(default_factory=dict)   # backbone-specific (e.g. Qwen's rope_deltas)


@dataclass
class TargetOutput:
    logits: torch.Tensor                    # [n, V] float32
    hidden: torch.Tensor                    # [n, D] last hidden state (LM-head input): the drafter's feature


class HFVisionTarget:
    """A transformers `*ForConditionalGeneration` VLM behind the target interface.

    Subclasses provide `prepare` (tokenisation + image preprocessing) and, where the backbone needs
    it, `position_ids` (Qwen2.5-VL's 3-D rotary positions).
    """

    memory_grid: tuple[int, int] | None = None   # (rows, cols) of the visual memory; None: not a grid
    image_size: int | None = None                # the square side images are resized to; None: the backbone's own

    def __init__(self, model, tokenizer):
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.dtype = next(model.parameters()).dtype
        self.device = model.get_input_embeddings().weight.device   # where inputs go (device_map: first shard)
        text_cfg = model.config.get_text_config()
        self.vocab_size = model.get_output_embeddings().weight.shape[0]
        self.hidden_size = text_cfg.hidden_size
        # the placeholder token the projected visual tokens replace (text-context drafters skip it)
        self.image_token_id = getattr(model.config, "image_token_id", None)
        if self.image_token_id is None:
            self.image_token_id = getattr(model.config, "image_token_index", None)
        eos = model.generation_config.eos_token_id if model.generation_config else None
        eos = eos if eos is not None else tokenizer.eos_token_id
        self.eos_token_ids = set(eos if isinstance(eos, (list, tuple)) else [eos])

    # ---- weights the drafter reuses -------------------------------------------------------
    @property
    def embed_weight(self) -> torch.Tensor:
        return self.model.get_input_embeddings().weight

    @property
    def lm_head_weight(self) -> torch.Tensor:
        return self.model.get_output_embeddings().weight

    # ---- the interface ---------------------------------------------------------------------
    def prepare(self, image, question: str) -> Prompt:
        raise NotImplementedError

    def batch_model_inputs(self, prompts: list[Prompt], input_ids: torch.Tensor) -> dict:
        """The image inputs of several prompts for one teacher-forced forward over the right-padded
        `input_ids` [B, T] (training). Fixed-size images: stack the pixel values."""
        return {"pixel_values": torch.cat([p.model_inputs["pixel_values"] for p in prompts])}

    @torch.no_grad()
    def visual_tokens(self, prompt: Prompt) -> torch.Tensor:
        """Projected visual tokens [N, D] of the prompt's image (what the decoder sees)."""
        inputs = {k: v for k, v in prompt.model_inputs.items() if k in ("pixel_values", "image_sizes",
                                                                           "image_grid_thw")}
        feats = self.model.model.get_image_features(**_on(inputs, self.device))
        feats = getattr(feats, "pooler_output", feats)
        feats = torch.cat(list(feats)) if isinstance(feats, (list, tuple)) else feats
        return feats.reshape(-1, feats.shape[-1]).float().cpu()

    def position_ids(self, state: TargetState, positions: torch.Tensor) -> torch.Tensor:
        """Absolute positions [n] -> the position_ids the backbone takes ([1, n] for 1-D RoPE)."""
        return positions[None]

    @torch.no_grad()
    def prefill(self, prompt: Prompt) -> tuple[TargetState, TargetOutput]:
        cache = stacked_cache_for(self.model, self.model.config.get_text_config())
        out = self.model.model(input_ids=prompt.input_ids.to(self.device), cache=cache, use_cache=True,
                               **_on(prompt.model_inputs, self.device))
        state = TargetState(cache=cache, length=prompt.input_ids.shape[1])
        self._after_prefill(state, out)
        hidden = out.last_hidden_state[0]                              # [T, D]
        logits = self.model.lm_head(hidden[-1:]).float().cpu()
        return state, TargetOutput(logits=logits, hidden=hidden.float().cpu())

    def _after_prefill(self, state: TargetState, out) -> None:
        """Hook for backbones that must remember something from the prefill (Qwen: rope deltas)."""

    @torch.no_grad()
    def forward(self, state: TargetState, tokens: torch.Tensor, depths: torch.Tensor,
                tree_mask: torch.Tensor | None) -> TargetOutput:
        """Run n new tokens [n] at positions state.length + depths [n]; tree_mask [n, n] bool
        (True = may attend) or None for a causal chain. Appends n entries to the cache."""
        n = tokens.shape[0]
        positions = (state.length + depths).to(self.device)
        mask = None
        if tree_mask is not None and n > 1:
            mask = additive_tree_mask(tree_mask, state.length, self.dtype).to(self.device)
        out = self.model.model.language_model(
            input_ids=tokens[None].to(self.device), attention_mask=mask,
            position_ids=self.position_ids(state, positions), cache=state.cache, use_cache=True)
        hidden = out.last_hidden_state[0]
        return TargetOutput(logits=self.model.lm_head(hidden).float().cpu(), hidden=hidden.float().cpu())

    def commit(self, state: TargetState, n_appended: int, keep: torch.Tensor) -> None:
        """Keep rows `keep` (indices into the last n_appended cache entries) and drop the rest."""
        compact_tail(state.cache, n_appended, keep)
        state.length += int(keep.numel())


def _on(inputs: dict, device) -> dict:
    return {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in inputs.items()}


def additive_tree_mask(tree_mask: torch.Tensor, past: int, dtype: torch.dtype) -> torch.Tensor:
    """[n, n] bool tree mask -> [1, 1, n, past + n] additive float mask (0 attend, finfo.min blocked).
    A bool 4-D mask gave wrong logits under eager attention (shared NOTES), so always additive."""
    n = tree_mask.shape[0]
    full = torch.ones(n, past + n, dtype=torch.bool)
    full[:, past:] = tree_mask
    return torch.zeros(full.shape, dtype=dtype).masked_fill(~full, torch.finfo(dtype).min)[None, None]

"""The FOVEA drafter: an EAGLE-style feature-level draft model plus the visual-memory corrector.

One (or two) decoder blocks read `fc([embed(next token); feature])`, where the feature is the
target's last hidden state (committed tokens) or the drafter's own state (tree nodes). Before the
target's LM head, a draft state of depth <= `correction.max_depth` retrieves from the visual
memory and adds a gated residual correction. The embedding and LM head are the target's, bound
at run time and never saved with the drafter; a drafter whose correction is disabled is saved without
the correction's modules too (`CORRECTION_PARTS`), and a FOVEA drafter whose base (`BASE_PARTS`) is its
no-correction twin's bit for bit is saved as an adapter: its correction modules only, its config naming
the twin's folder, from which it loads the base. `bind` moves the drafter to the target's device and
its calls move their inputs there, so the decode loop may hand it CPU tensors. Knows nothing about
tree shapes or acceptance.
"""
from __future__ import annotations

import json
import os
from dataclasses import asdict
from pathlib import Path

import torch
from torch import nn

from fovea import fused
from fovea.checkpoints import decoder_fingerprint, target_fingerprint, tensors_fingerprint
from fovea.config import CorrectionConfig, DrafterConfig, RetrievalConfig, from_dict
from fovea.correction import GatedCorrection
from fovea.layers import DecoderBlock, KVBuffer, RMSNorm, rotary, rotary_table
from fovea.memory import MemoryEncoder, VisualMemory
from fovea.profile import NO_CLOCK, Clock
from fovea.retrieval import Retrieved, Retriever

KVList = list  # per layer (keys, values), each [B, H_kv, S, Dh]
# the modules only the correction runs (memory -> retrieval -> correction): a drafter whose correction is
# disabled (a no-correction twin) never trains them, so it is saved without them
CORRECTION_PARTS = ("memory_encoder.", "retriever.", "corrector.")
# the parts a FOVEA drafter shares with its no-correction twin: an --adapter run freezes them at the twin's,
# and saves the drafter without them (`save_pretrained(..., base=twin folder)`)
BASE_PARTS = ("fc.", "blocks.", "norm.")
WEIGHTS = "model.safetensors"


class Drafter(nn.Module):
    def __init__(self, cfg: DrafterConfig, correction: CorrectionConfig = CorrectionConfig(), key_dim: int = 128):
        super().__init__()
        self.cfg, self.correction_cfg, self.key_dim = cfg, correction, key_dim
        d = cfg.hidden_size
        self.fc = nn.Linear(2 * d, d, bias=True)
        self.blocks = nn.ModuleList(
            DecoderBlock(d, cfg.num_heads, cfg.num_kv_heads, cfg.intermediate_size, cfg.rope_theta, cfg.rms_eps)
            for _ in range(cfg.num_layers))
        self.memory_encoder = MemoryEncoder(cfg.memory_dim, d, key_dim)
        self.retriever = Retriever(d, key_dim, correction.max_tree_depth)
        self.corrector = GatedCorrection(d, correction.hidden)
        self.norm = RMSNorm(d, cfg.rms_eps)
        self.embed_weight: torch.Tensor | None = None     # bound from the target, not a parameter
        self.lm_head_weight: torch.Tensor | None = None
        self.trained_for: str | None = None   # fingerprint of the target a saved drafter was trained with
        self.bound_to: str | None = None      # fingerprint of the target it is bound to now
        self.trained_for_decoder: str | None = None  # the same by checkpoints.decoder_fingerprint (depth, norm, head)
        self.bound_to_decoder: str | None = None
        self.correction_weights = True   # False: loaded without CORRECTION_PARTS, which keep their initialisation

    # ---- binding and persistence -------------------------------------------------------------
    def bind(self, target) -> "Drafter":
        """Share the target's token embedding and LM head (frozen, float32 copies on the device of the
        target's embedding, where the drafter moves too)."""
        if target.hidden_size != self.cfg.hidden_size or target.vocab_size != self.cfg.vocab_size:
            raise ValueError(f"drafter (hidden {self.cfg.hidden_size}, vocab {self.cfg.vocab_size}) does not "
                             f"match the target (hidden {target.hidden_size}, vocab {target.vocab_size})")
        device = target.embed_weight.device
        self.to(device)
        self.embed_weight = target.embed_weight.detach().float()
        self.lm_head_weight = target.lm_head_weight.detach().to(device).float()
        self.bound_to = target_fingerprint(target)
        self.bound_to_decoder = decoder_fingerprint(target, head=self.bound_to)
        return self

    @property
    def device(self) -> torch.device:
        return self.fc.weight.device

    def save_pretrained(self, folder, dtype: torch.dtype = torch.float16, base=None) -> None:
        """config.json and the weights (`dtype`). `base`: the saved drafter folder this one's base was frozen
        at (an --adapter run's twin); where this drafter's BASE_PARTS are that folder's bit for bit, they are
        left out and config.json names the base (its path relative to `folder`, its fingerprint), PEFT-style;
        otherwise everything is saved."""
        from safetensors.torch import load_file, save_file

        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        keep = self.correction_cfg.enabled
        state = {k: v.detach().to(dtype).contiguous() for k, v in self.state_dict().items()
                 if keep or not k.startswith(CORRECTION_PARTS)}
        meta = {"drafter": asdict(self.cfg), "correction": asdict(self.correction_cfg), "key_dim": self.key_dim,
                "target_fingerprint": self.bound_to or self.trained_for,
                "target_decoder_fingerprint": self.bound_to_decoder or self.trained_for_decoder}
        if base is not None and keep:
            shared = {k: v for k, v in state.items() if k.startswith(BASE_PARTS)}
            stored = {k: v for k, v in load_file(str(Path(base) / WEIGHTS)).items() if k.startswith(BASE_PARTS)}
            if (fingerprint := tensors_fingerprint(stored)) == tensors_fingerprint(shared):
                state = {k: v for k, v in state.items() if k not in shared}
                meta["base"] = {"folder": os.path.relpath(Path(base).absolute(), folder.absolute()),
                                "fingerprint": fingerprint}
        save_file(state, str(folder / WEIGHTS))
        (folder / "config.json").write_text(json.dumps(meta, indent=2))

    @classmethod
    def from_pretrained(cls, folder, offline: bool | None = None) -> "Drafter":
        """A drafter folder, or a Hugging Face Hub id (fetched only where a Hub is reachable)."""
        from safetensors.torch import load_file

        from fovea.backbones.hub import looks_like_hub_id, resolve_pretrained
        from fovea.checkpoints import check_state_shapes, config_error, read_config

        folder = Path(folder)
        if not folder.exists() and looks_like_hub_id(str(folder)):
            folder = resolve_pretrained(str(folder), "drafter", ["config.json", WEIGHTS], offline)
        if not (folder / "config.json").exists() or not (folder / WEIGHTS).exists():
            raise FileNotFoundError(f"{folder} is not a drafter folder (needs config.json and model.safetensors)")
        # unusable checkpoints (bad config, truncated weights, config vs weights) raise CheckpointError
        meta = read_config(folder / "config.json", "drafter")
        try:
            model = cls(from_dict(DrafterConfig, meta["drafter"]), from_dict(CorrectionConfig, meta["correction"]),
                        meta.get("key_dim", 128))
        except (KeyError, TypeError, ValueError) as err:
            raise config_error(folder / "config.json", "drafter", err) from err
        # a drafter saved with its correction disabled may lack CORRECTION_PARTS, an adapter BASE_PARTS,
        # which its base folder holds (save_pretrained)
        optional = () if model.correction_cfg.enabled else CORRECTION_PARTS
        base = _adapter_base(folder, meta["base"]) if "base" in meta else {}
        check_state_shapes(model, folder / WEIGHTS, "drafter", optional, {k: tuple(v.shape) for k, v in base.items()})
        state = {k: v.float() for k, v in {**base, **load_file(str(folder / WEIGHTS))}.items()}
        model.load_state_dict(state, strict=False)     # the check above named every tensor
        model.correction_weights = all(k in state for k in model.state_dict() if k.startswith(CORRECTION_PARTS))
        model.source = str(folder)      # named in messages about this drafter (e.g. a target mismatch)
        model.trained_for = meta.get("target_fingerprint")
        model.trained_for_decoder = meta.get("target_decoder_fingerprint")
        return model.eval()

    # ---- the two calls the decode loop makes ------------------------------------------------
    def step(self, tokens: torch.Tensor, features: torch.Tensor, positions: torch.Tensor,
             mask: torch.Tensor, past: KVList | None = None, buffers: list[KVBuffer] | None = None,
             at: int = 0, max_pos: int | None = None) -> tuple[torch.Tensor, KVList]:
        """tokens [B, T] (the NEXT token of each pair), features [B, T, D], positions [B, T],
        mask [B|1, 1, T, S+T] bool over [past; new] -> (draft states h [B, T, D], new kv per layer).
        Decoding passes `buffers` (one per layer, slots 0..at-1 = the past, written in place) and
        `max_pos` (an upper bound of `positions`: rotary rows are then looked up, not recomputed)."""
        dev = self.device
        tokens, features, positions, mask = tokens.to(dev), features.to(dev), positions.to(dev), mask.to(dev)
        x = self.fc(torch.cat([nn.functional.embedding(tokens, self.embed_weight), features], dim=-1))
        rope = self._rope(positions, max_pos)
        new_kv = []
        for i, block in enumerate(self.blocks):
            x, kv = block(x, rope, mask, None if past is None else past[i],
                          None if buffers is None else buffers[i], at)
            new_kv.append(kv)
        return x, new_kv

    def _rope(self, positions: torch.Tensor, max_pos: int | None) -> tuple[torch.Tensor, torch.Tensor]:
        """cos, sin [B, 1, T, Dh] of positions [B, T]: from a cached table when max_pos is known."""
        inv = self.blocks[0].inv_freq
        if max_pos is None:
            return rotary(positions, inv)
        table = getattr(self, "_rope_table", None)
        if table is None or table.shape[1] <= max_pos or table.device != inv.device:
            size = max(self.cfg.max_positions, 2 * (max_pos + 1))
            table = self._rope_table = rotary_table(size, inv)             # [2, P, Dh]
        rows = table[:, positions]                                          # [2, B, T, Dh]
        return rows[0, :, None], rows[1, :, None]

    def new_buffers(self, capacity: int) -> list[KVBuffer]:
        """Empty preallocated KV buffers, one per block, for `capacity` cached pairs."""
        head_dim = self.cfg.hidden_size // self.cfg.num_heads
        return [KVBuffer(self.cfg.num_kv_heads, head_dim, capacity, self.fc.weight.dtype, self.device)
                for _ in self.blocks]

    def encode_memory(self, visual_tokens: torch.Tensor, grid=None) -> VisualMemory:
        return self.memory_encoder(visual_tokens.float().to(self.device), grid=grid)

    def head(self, h: torch.Tensor, depth: torch.Tensor | int, memory: VisualMemory | None,
             correction: CorrectionConfig, retrieval: RetrievalConfig,
             generator: torch.Generator | None = None, clock: Clock = NO_CLOCK,
             level: int = 0) -> tuple[torch.Tensor, Retrieved | None, torch.Tensor | None]:
        """h [S, D] draft states at tree depths [S] (or one int for all) -> (logits [S, V],
        retrieval, gate [S]); see `head_with_state`."""
        return self.head_with_state(h, depth, memory, correction, retrieval, generator, clock, level)[:3]

    def head_with_state(self, h: torch.Tensor, depth: torch.Tensor | int, memory: VisualMemory | None,
                        correction: CorrectionConfig, retrieval: RetrievalConfig,
                        generator: torch.Generator | None = None, clock: Clock = NO_CLOCK,
                        level: int = 0) -> tuple[torch.Tensor, Retrieved | None, torch.Tensor | None, torch.Tensor]:
        """h [S, D] draft states at tree depths [S] (or one int for all) -> (logits [S, V],
        retrieval, gate [S], LM-head input [S, D]: `correct`'s state, then RMSNorm + LM head).
        With `correction.trigger` (one int depth, no autograd) only the states whose uncorrected head is
        unsure are corrected: retrieval and gate cover those rows (`Retrieved.rows`), one host sync."""
        if (correction.trigger > 0 and isinstance(depth, int) and not torch.is_grad_enabled()
                and correction.enabled and memory is not None and 0 <= depth <= correction.max_depth):
            return self._triggered(h.to(self.device), depth, memory, correction, retrieval, generator, clock, level)
        pre, got, gate = self.correct(h, depth, memory, correction, retrieval, generator, clock, level)
        logits = self.logits(pre)
        clock.lap("draft/head", level)
        return logits, got, gate, pre

    def _triggered(self, h, depth: int, memory, correction, retrieval, generator, clock, level):
        """The head with `correction.trigger`. Laps: the uncorrected head is "draft/head"; the check, the
        corrected rows' second head and their bookkeeping are "draft/trigger" (what the trigger adds beside
        the retrieval and correction themselves)."""
        logits = self.logits(h)
        clock.lap("draft/head", level)
        unsure = torch.softmax(logits, -1).amax(-1) < correction.trigger             # [S]
        rows = unsure.nonzero().squeeze(1)
        n = rows.numel()                                                             # the one host sync
        clock.lap("draft/trigger", level)
        if n == 0:
            return logits, None, None, h
        if n == h.shape[0]:        # every state unsure: correct them all, no row bookkeeping
            fixed, got, gate = self._correct_level(h, depth, memory, correction, retrieval, generator, clock, level)
            logits = self.logits(fixed)
            clock.lap("draft/trigger", level)
            return logits, got, gate, fixed
        fixed, got, gate = self._correct_level(h[rows], depth, memory, correction, retrieval, generator, clock, level)
        got.rows = rows
        pre, logits = h.clone(), logits.clone()
        pre[rows], logits[rows] = fixed, self.logits(fixed)
        clock.lap("draft/trigger", level)
        return logits, got, gate, pre

    def correct(self, h: torch.Tensor, depth: torch.Tensor | int, memory: VisualMemory | None,
                correction: CorrectionConfig, retrieval: RetrievalConfig,
                generator: torch.Generator | None = None, clock: Clock = NO_CLOCK,
                level: int = 0) -> tuple[torch.Tensor, Retrieved | None, torch.Tensor | None]:
        """h [S, D] draft states at tree depths [S] (or one int for all) -> (h + g * f([h; r]) where
        corrected, else h; retrieval; gate [S]).

        States deeper than `correction.max_depth` (or all, when disabled / no memory) stay h; h itself
        is never modified. A tree level has one depth: pass it as an int and no host sync is needed to
        split rows.
        """
        h = h.to(self.device)
        use = correction.enabled and memory is not None and correction.max_depth >= 0
        pre, got, gate = h, None, None
        if isinstance(depth, int):
            if use and depth <= correction.max_depth:
                pre, got, gate = self._correct_level(h, depth, memory, correction, retrieval, generator, clock, level)
            return pre, got, gate
        depth = depth.to(self.device)
        sel = depth <= correction.max_depth
        n_sel = int(sel.sum()) if use else 0
        if n_sel == h.shape[0]:
            got = self.retriever(h, depth, memory, retrieval, generator)
            pre, gate = self.corrector(h, got.readout, correction.use_gate)
        elif n_sel > 0:
            got = self.retriever(h[sel], depth[sel], memory, retrieval, generator)
            corrected, gate = self.corrector(h[sel], got.readout, correction.use_gate)
            pre = h.clone()
            pre[sel] = corrected
        return pre, got, gate

    def _correct_level(self, h, depth: int, memory, correction, retrieval, generator, clock, level):
        """Retrieval then correction of states h [S, D] at one tree depth -> (h + g c, retrieval, g). In
        inference, with a corrector no wider than the drafter, the two run fused (`fovea.fused`: the same
        numbers in fewer ops; one lap for both)."""
        if fused.usable(self.retriever, self.corrector, memory, retrieval, correction.use_gate):
            pre, got, gate = fused.fused_correct(self.retriever, self.corrector, h, depth, memory, retrieval)
            clock.lap("draft/correction", level)
            return pre, got, gate
        got = self.retriever(h, depth, memory, retrieval, generator)
        clock.lap("draft/retrieval", level)
        pre, gate = self.corrector(h, got.readout, correction.use_gate)
        clock.lap("draft/correction", level)
        return pre, got, gate

    def logits(self, h: torch.Tensor) -> torch.Tensor:
        """h [S, D] -> LM-head logits [S, V] with no correction (RMSNorm + the target's head); the
        trace also reads it on corrected states, to show what the correction changed."""
        return self.norm(h) @ self.lm_head_weight.T


def _adapter_base(folder: Path, entry) -> dict[str, torch.Tensor]:
    """An adapter's BASE_PARTS as saved (float16) in the drafter folder its config.json names (`entry`:
    {"folder": relative to `folder`, "fingerprint"}), refused where missing or not the weights it was saved with."""
    from safetensors.torch import load_file

    from fovea.checkpoints import adapter_base_error, config_error, safetensors_shapes

    try:
        base, fingerprint = Path(os.path.normpath(folder / entry["folder"])), entry["fingerprint"]
    except (KeyError, TypeError) as err:
        raise config_error(folder / "config.json", "drafter", err) from err
    if not (base / WEIGHTS).exists():
        raise adapter_base_error(folder, base, "which is missing")
    safetensors_shapes(base / WEIGHTS, "drafter")           # a truncated base is named as such
    state = {k: v for k, v in load_file(str(base / WEIGHTS)).items() if k.startswith(BASE_PARTS)}
    if (found := tensors_fingerprint(state)) != fingerprint:
        raise adapter_base_error(folder, base, f"whose weights are not the ones it was saved with (fingerprint "
                                               f"{found}, saved with {fingerprint})")
    return state


def drafter_config_for(target, num_layers: int = 1, context: str = "full") -> DrafterConfig:
    """Drafter shape taken from a target: hidden size, heads / GQA, vocabulary, memory width;
    `context` is what its cache holds of the prompt ("full" or "text", see DrafterConfig)."""
    text = target.model.config.get_text_config()
    heads = text.num_attention_heads
    return DrafterConfig(hidden_size=text.hidden_size, num_heads=heads,
                         num_kv_heads=getattr(text, "num_key_value_heads", heads) or heads,
                         intermediate_size=text.intermediate_size, num_layers=num_layers,
                         vocab_size=target.vocab_size, memory_dim=text.hidden_size,
                         rope_theta=_rope_theta(text),
                         rms_eps=float(getattr(text, "rms_norm_eps", 1e-6)), context=context)


def _rope_theta(text_config) -> float:
    """RoPE base: `rope_parameters["rope_theta"]` in transformers 5 (Llama, Qwen2.5-VL), else the
    older top-level `rope_theta`, else 10000."""
    params = getattr(text_config, "rope_parameters", None) or {}
    theta = params.get("rope_theta") if isinstance(params, dict) else None
    return float(theta or getattr(text_config, "rope_theta", None) or 10000.0)

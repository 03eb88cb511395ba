"""The masked-diffusion VLM: the bundled target's frozen vision tower and projector, and its Llama
decoder turned bidirectional over a fixed-length answer canvas (Dream / DiffuLLaMA-style adaptation
of an autoregressive model).

Sequence layout (the target's own prompt, then the canvas; P prompt tokens, L canvas tokens):

    <s> USER: q \\n <image>*N \\nASSISTANT: | c_0 c_1 ... c_{L-1}
    '------------ prefix[:-1] ------------' '---- active segment ----'
                                        ^ prefix[-1]

- The prefix minus its last token keeps the target's causal attention, so its keys and values are
  computed once per question and cached exactly (they never see the canvas).
- The active segment (the prompt's last token and the canvas) attends to the whole prefix and to
  itself in both directions: a 4D additive float mask of zeros (NOTES: sdpa passes it unchanged).
- Logits keep the autoregressive shift (Dream): the state at sequence position i predicts token
  i + 1, so canvas token j is read off the active segment's position j. An unmasked canvas then
  behaves like the target at initialisation.
- The mask token is `<unk>` (id 4 in the bundled tokenizer): byte-level BPE never emits it, so it is
  free without growing the embedding; its logit is never predicted (decoding sets it to -inf).
- The canvas is padded with EOS after the answer (LLaDA), so the answer's length is predicted too.

Knows nothing about schedules or early exit (fovea.diffusion.decode) nor about training.
"""
from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch
from torch import nn

from fovea.diffusion.candidate import TokenText
from fovea.models.bundled import (ASSETS, DEFAULT_TARGET_DIR, BundledModelConfig, build_model, encode_prompt,
                                  image_to_pixels, load_tokenizer, prompt_format)

DEFAULT_DIFFUSION_DIR = ASSETS / "diffusion"
MASK_TOKEN = "<unk>"


@dataclass(frozen=True)
class CanvasConfig:
    """The answer canvas: its fixed length in tokens and the id standing for a masked token."""

    length: int = 96            # the longest world v2 answer is 90 tokens + EOS (scene/count walks)
    mask_token_id: int = 4      # "<unk>" in the bundled tokenizer (see module doc)


class DiffusionVLM(nn.Module):
    """A LlavaForConditionalGeneration used as a masked-diffusion denoiser (see module doc)."""

    def __init__(self, llava, tokenizer, canvas: CanvasConfig = CanvasConfig()):
        super().__init__()
        if tokenizer.convert_ids_to_tokens(canvas.mask_token_id) != MASK_TOKEN:
            raise ValueError(f"mask token id {canvas.mask_token_id} is not {MASK_TOKEN!r} in this tokenizer")
        self.llava, self.tokenizer, self.canvas = llava, tokenizer, canvas
        self.eos_id = tokenizer.eos_token_id
        self.token_text = TokenText(tokenizer)       # canvas -> text, for the candidate parsers
        for module in (llava.model.vision_tower, llava.model.multi_modal_projector):
            module.requires_grad_(False)        # frozen: the visual tokens stay the target's

    @property
    def device(self) -> torch.device:
        return self.llava.lm_head.weight.device

    # ---- inputs ---------------------------------------------------------------------------------
    def prompt_ids(self, question: str) -> list[int]:
        n_image, order = prompt_format(self.llava.config)
        return encode_prompt(self.tokenizer, question, n_image, order)

    def pixels(self, image) -> torch.Tensor:
        return image_to_pixels(image, self.llava.config.vision_config.image_size)

    @torch.no_grad()
    def image_features(self, pixels: torch.Tensor) -> torch.Tensor:
        """Projected visual tokens [B, N, D] from the frozen tower and projector."""
        feats = self.llava.model.get_image_features(pixel_values=pixels)
        feats = getattr(feats, "pooler_output", feats)
        feats = torch.stack(list(feats)) if isinstance(feats, (list, tuple)) else feats
        return feats.reshape(pixels.shape[0], -1, feats.shape[-1])

    def embed(self, ids: torch.Tensor, feats: torch.Tensor | None) -> torch.Tensor:
        """Token embeddings [B, T, D] with each row's image-token slots replaced by its visual tokens."""
        emb = self.llava.get_input_embeddings()(ids)
        if feats is None:
            return emb
        slots = ids == self.llava.config.image_token_id
        return emb.masked_scatter(slots[..., None], feats.to(emb.dtype))

    # ---- training forward -------------------------------------------------------------------------
    def forward(self, prefix: torch.Tensor, prefix_mask: torch.Tensor, pixels: torch.Tensor,
                canvas: torch.Tensor) -> torch.Tensor:
        """Logits [B, L, V] of every canvas position, given left-padded prompts [B, P] (prefix_mask 1
        on real tokens), their images and the (partly masked) canvas [B, L]."""
        ids = torch.cat([prefix, canvas], 1)                                        # [B, P + L]
        real = torch.cat([prefix_mask.bool(), torch.ones_like(canvas, dtype=torch.bool)], 1)
        emb = self.embed(ids, self.image_features(pixels))
        positions = (real.long().cumsum(1) - 1).clamp_min(0)
        mask = attention_mask(real, active_from=prefix.shape[1] - 1, dtype=emb.dtype)
        out = self.llava.model.language_model(inputs_embeds=emb, attention_mask=mask, position_ids=positions)
        return self.llava.lm_head(out.last_hidden_state[:, prefix.shape[1] - 1:-1])

    # ---- decoding: the cached prefix, then one denoising forward per step -----------------------------
    @torch.no_grad()
    def prefill(self, image, question: str):
        """(the prefix's KV cache without its last token, that last token id, its sequence position)."""
        from transformers import DynamicCache

        ids = torch.tensor([self.prompt_ids(question)], device=self.device)
        emb = self.embed(ids[:, :-1], self.image_features(self.pixels(image).to(self.device)))
        cache = DynamicCache(config=self.llava.config.text_config)
        positions = torch.arange(ids.shape[1] - 1, device=self.device)[None]
        self.llava.model.language_model(inputs_embeds=emb, position_ids=positions, cache=cache,
                                        use_cache=True)
        return cache, int(ids[0, -1]), ids.shape[1] - 1

    @torch.no_grad()
    def denoise(self, cache, last_id: int, start: int, canvas: torch.Tensor) -> torch.Tensor:
        """Logits [L, V] of one denoising step over the canvas [L] (the cache is left as it was)."""
        active = torch.cat([canvas.new_tensor([last_id]), canvas])[None]           # [1, L + 1]
        emb = self.embed(active, None)
        positions = torch.arange(start, start + active.shape[1], device=self.device)[None]
        mask = emb.new_zeros(1, 1, active.shape[1], start + active.shape[1])       # every key: bidirectional
        out = self.llava.model.language_model(inputs_embeds=emb, attention_mask=mask, position_ids=positions,
                                              cache=cache, use_cache=True)
        cache.crop(-active.shape[1])                                               # drop the active segment
        logits = self.llava.lm_head(out.last_hidden_state[0, :-1]).float()
        logits[:, self.canvas.mask_token_id] = float("-inf")                      # never predict a mask
        return logits

    # ---- files ------------------------------------------------------------------------------------
    def save(self, folder: Path) -> None:
        """fp16 safetensors + tokenizer + the canvas settings in config.json (`fovea_diffusion`)."""
        folder.mkdir(parents=True, exist_ok=True)
        self.llava.config.fovea_diffusion = asdict(self.canvas)
        self.llava.half().save_pretrained(str(folder), safe_serialization=True)
        self.llava.float()
        self.tokenizer.save_pretrained(str(folder))


def attention_mask(real: torch.Tensor, active_from: int, dtype) -> torch.Tensor:
    """Additive mask [B, 1, T, T] (0 = attend, dtype min = blocked) over real (non-pad) keys: rows
    before `active_from` are causal (the cacheable prefix), rows from it on see every real key.
    A pad row sees only itself, so no row is empty."""
    t = real.shape[1]
    causal = torch.ones(t, t, dtype=torch.bool, device=real.device).tril()
    causal[active_from:] = True                                                   # the active segment
    allowed = causal[None] & real[:, None, :]
    allowed |= torch.eye(t, dtype=torch.bool, device=real.device)[None]
    blocked = torch.zeros(allowed.shape, dtype=dtype, device=real.device)
    return blocked.masked_fill(~allowed, torch.finfo(dtype).min)[:, None]


def from_target(folder: str | os.PathLike, canvas: CanvasConfig = CanvasConfig()) -> DiffusionVLM:
    """A denoiser initialised from an exported autoregressive target (e.g. assets/target), float32."""
    from transformers import LlavaForConditionalGeneration

    folder = Path(folder)
    if not (folder / "config.json").exists():
        raise FileNotFoundError(f"no exported target at {folder} (expected config.json + model.safetensors)")
    llava = LlavaForConditionalGeneration.from_pretrained(str(folder), dtype=torch.float32,
                                                          attn_implementation="sdpa")
    return DiffusionVLM(llava, load_tokenizer(folder), canvas)


def load_diffusion(folder: str | os.PathLike = DEFAULT_DIFFUSION_DIR) -> DiffusionVLM:
    """Load an exported denoiser (DiffusionVLM.save) as float32 in eval mode."""
    folder = Path(folder)
    config = folder / "config.json"
    if not config.exists() or "fovea_diffusion" not in json.loads(config.read_text()):
        raise FileNotFoundError(f"no diffusion model at {folder}; build it with `python -m fovea.train diffusion`")
    settings = json.loads(config.read_text())["fovea_diffusion"]
    return from_target(folder, CanvasConfig(**settings)).eval()


def tiny_random(length: int = CanvasConfig.length, seed: int = 0) -> DiffusionVLM:
    """A random-weight denoiser of the bundled architecture's tiny preset with the shipped tokenizer
    (tests, and trying the app's diffusion view without a trained model)."""
    tok = load_tokenizer(DEFAULT_TARGET_DIR)
    sizes = replace(BundledModelConfig.from_name("tiny"), prompt_order="question_first")
    return DiffusionVLM(build_model(sizes, tok, seed=seed), tok, CanvasConfig(length=length)).eval()

"""LLaVA-NeXT (`LlavaNextForConditionalGeneration`) and LLaVA-1.5 (`LlavaForConditionalGeneration`)
behind the target interface, with the model's own processor and image-feature path.

Visual memory layout. The memory entries are exactly the projected image tokens the decoder
reads, i.e. `model.model.get_image_features(...).pooler_output`, in order. For LLaVA-1.5 they are
the G x G patches of the one tile, row-major (G = image_size // patch_size, 24 for 336 / 14). For
LLaVA-NeXT "anyres" they are, per image:
    [0, G*G)        the base tile (whole image resized to one tile), row-major over G x G
    [G*G, ...)      the high-resolution mosaic (best-fit grid of tiles, unpadded to the image's
                    aspect ratio), R rows of C patches, each row followed by one `image_newline`
                    entry: row r, column c is entry G*G + r*(C + 1) + c, and c == C is the newline
so `memory_grid` is the base grid (G, G): heat maps show the base tile and ignore the rest,
while retrieval reads every entry. `anyres_layout` gives (G, R, C) for an image size. With the
"full" feature strategy (CLS kept) the entries no longer form a grid and `memory_grid` is None.
Knows nothing about drafting.
"""
from __future__ import annotations

import torch
from PIL import Image

from fovea.target import HFVisionTarget, Prompt

# The LLaVA-1.5 / LLaVA-NeXT-vicuna conversation format, used when the processor has no chat template.
LLAVA_TEMPLATE = "USER: {image}\n{question} ASSISTANT:"


class LlavaNextTarget(HFVisionTarget):
    """A LLaVA-NeXT or LLaVA-1.5 transformers model with its `LlavaNextProcessor` / `LlavaProcessor`."""

    def __init__(self, model, processor, prompt_template: str = LLAVA_TEMPLATE):
        super().__init__(model, processor.tokenizer)
        self.processor = processor
        self.prompt_template = prompt_template
        self.anyres = model.config.model_type == "llava_next"
        self.memory_grid = base_grid(model.config)

    def prompt_text(self, question: str) -> str:
        """The chat template of the processor when it has one, else `prompt_template`."""
        if getattr(self.processor, "chat_template", None):
            messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": question}]}]
            return self.processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        return self.prompt_template.format(image=self.processor.image_token, question=question)

    def prepare(self, image: Image.Image, question: str) -> Prompt:
        enc = self.processor(images=image.convert("RGB"), text=self.prompt_text(question), return_tensors="pt")
        inputs = {"pixel_values": enc["pixel_values"].to(self.dtype)}   # [1, tiles, 3, H, W] (NeXT) or [1, 3, H, W]
        if "image_sizes" in enc:
            inputs["image_sizes"] = enc["image_sizes"]                   # [1, 2] original (H, W)
        return Prompt(input_ids=enc["input_ids"], model_inputs=inputs)

    def batch_model_inputs(self, prompts: list[Prompt], input_ids: torch.Tensor) -> dict:
        if not self.anyres:
            return super().batch_model_inputs(prompts, input_ids)
        # Images differ in tile count: zero-pad the tile axis; get_image_features keeps only the
        # tiles implied by image_sizes.
        pixels = [p.model_inputs["pixel_values"][0] for p in prompts]       # each [tiles_i, 3, H, W]
        width = max(x.shape[0] for x in pixels)
        padded = torch.zeros((len(pixels), width, *pixels[0].shape[1:]), dtype=pixels[0].dtype)
        for i, x in enumerate(pixels):
            padded[i, : x.shape[0]] = x
        return {"pixel_values": padded, "image_sizes": torch.cat([p.model_inputs["image_sizes"] for p in prompts])}


def base_grid(config) -> tuple[int, int] | None:
    """(G, G) patches of one tile, or None when the visual tokens are not a plain grid."""
    if config.vision_feature_select_strategy != "default":
        return None
    g = config.vision_config.image_size // config.vision_config.patch_size
    return (g, g)


def anyres_layout(config, image_size: tuple[int, int]) -> tuple[int, int, int]:
    """(G, R, C) of a LLaVA-NeXT image of (height, width): base grid side G and the unpadded
    high-resolution mosaic of R rows x C patch columns (memory size G*G + R*(C + 1))."""
    from transformers.models.llava_next.modeling_llava_next import get_anyres_image_grid_shape, unpad_image

    g = config.vision_config.image_size // config.vision_config.patch_size
    tiles_h, tiles_w = get_anyres_image_grid_shape(list(image_size), config.image_grid_pinpoints,
                                                   config.vision_config.image_size)
    mosaic = unpad_image(torch.empty(1, tiles_h * g, tiles_w * g), list(image_size))
    return g, mosaic.shape[1], mosaic.shape[2]

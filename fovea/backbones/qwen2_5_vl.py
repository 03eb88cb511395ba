"""Qwen2.5-VL (`Qwen2_5_VLForConditionalGeneration`) behind the target interface.

Two things differ from LLaVA. (1) Positions are 3-D multimodal RoPE (temporal, height, width):
the prefill's positions come from `model.model.get_rope_index` (image tokens get 2-D grid
positions, text continues after the image at `max + 1`), which also gives `rope_deltas` =
(next position) - (sequence length). Every later token at absolute index p sits at position
p + rope_deltas on all three axes, so tree tokens get `(p + delta)` expanded to [3, 1, n]; the
deltas live in `TargetState.extra`, never on the model. (2) The image is a variable grid: the
processor resizes it to multiples of patch * merge and `image_grid_thw` = (1, H, W) patches; the
decoder sees (H / merge) x (W / merge) merged tokens, row-major, which are the memory entries.

The prompt is built here (tokenizer + image processor) instead of through `Qwen2_5_VLProcessor`,
whose constructor requires a video processor and therefore torchvision; the expansion of the
image placeholder and `mm_token_type_ids` follow the processor exactly (tested against it).
`image_size` (default 448: 16 x 16 = 256 visual tokens) resizes every image to one square size so
`memory_grid` is fixed for the app's heat maps; `image_size=None` keeps native resolution (the
grid then varies per image and `memory_grid` is None). Knows nothing about drafting.
"""
from __future__ import annotations

import torch
from PIL import Image

from fovea.target import HFVisionTarget, Prompt, TargetState

# Qwen2.5-VL-Instruct's chat format for one image + one question (its chat template's output),
# used when the tokenizer has no chat template.
QWEN_TEMPLATE = ("<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n"
                 "<|vision_start|>{image}<|vision_end|>{question}<|im_end|>\n<|im_start|>assistant\n")


class Qwen25VLTarget(HFVisionTarget):
    def __init__(self, model, tokenizer, image_processor, image_size: int | None = 448,
                 prompt_template: str = QWEN_TEMPLATE):
        super().__init__(model, tokenizer)
        self.image_processor = image_processor
        self.prompt_template = prompt_template
        self.image_token_id = model.config.image_token_id
        self.image_token = tokenizer.convert_ids_to_tokens(self.image_token_id)
        self.merge = model.config.vision_config.spatial_merge_size
        self.image_size = image_size
        self.memory_grid = None
        if image_size is not None:
            thw = image_processor(images=[Image.new("RGB", (image_size, image_size))],
                                  return_tensors="pt")["image_grid_thw"][0]
            self.memory_grid = grid_of(thw, self.merge)

    def prompt_text(self, question: str) -> str:
        if getattr(self.tokenizer, "chat_template", None):
            messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": question}]}]
            return self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        return self.prompt_template.format(image=self.image_token, question=question)

    def prepare(self, image: Image.Image, question: str) -> Prompt:
        img = image.convert("RGB")
        if self.image_size is not None:
            img = img.resize((self.image_size, self.image_size), Image.BICUBIC)
        vis = self.image_processor(images=[img], return_tensors="pt")
        thw = vis["image_grid_thw"]                                        # [1, 3] patches (T, H, W)
        n = int(thw[0].prod()) // self.merge ** 2                          # merged visual tokens
        text = self.prompt_text(question).replace(self.image_token, self.image_token * n, 1)
        ids = self.tokenizer(text, return_tensors="pt")["input_ids"]
        return Prompt(input_ids=ids, model_inputs={
            "pixel_values": vis["pixel_values"].to(self.dtype),           # [T*H*W, C*t*p*p] flattened patches
            "image_grid_thw": thw, "mm_token_type_ids": self.token_types(ids)})

    def token_types(self, input_ids: torch.Tensor) -> torch.Tensor:
        """mm_token_type_ids: 1 on image placeholders, 0 on text (no video here)."""
        return (input_ids == self.image_token_id).long()

    def batch_model_inputs(self, prompts: list[Prompt], input_ids: torch.Tensor) -> dict:
        return {"pixel_values": torch.cat([p.model_inputs["pixel_values"] for p in prompts]),
                "image_grid_thw": torch.cat([p.model_inputs["image_grid_thw"] for p in prompts]),
                "mm_token_type_ids": self.token_types(input_ids)}

    @torch.no_grad()
    def prefill(self, prompt: Prompt):
        """Prefill with explicit 3-D positions; remember rope_deltas [1, 1] for later tokens."""
        inputs = prompt.model_inputs
        positions, deltas = self.model.model.get_rope_index(
            prompt.input_ids.to(self.device), mm_token_type_ids=inputs["mm_token_type_ids"].to(self.device),
            image_grid_thw=inputs["image_grid_thw"].to(self.device))   # [3, 1, T], [1, 1]
        state, out = super().prefill(Prompt(prompt.input_ids, {**inputs, "position_ids": positions}))
        state.extra["rope_deltas"] = deltas
        return state, out

    def position_ids(self, state: TargetState, positions: torch.Tensor) -> torch.Tensor:
        """Absolute indices [n] -> [3, 1, n]: the same shifted position on the t, h, w axes."""
        return (positions + state.extra["rope_deltas"][0])[None, None].expand(3, 1, -1)


def grid_of(image_grid_thw: torch.Tensor, merge: int) -> tuple[int, int]:
    """(rows, cols) of merged visual tokens for one image's (T, H, W) patch grid."""
    _, h, w = (int(v) for v in image_grid_thw)
    return (h // merge, w // merge)

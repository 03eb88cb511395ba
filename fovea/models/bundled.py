"""The bundled synthetic-world VLM: a small transformers `LlavaForConditionalGeneration`
(CLIP-style patch encoder -> MLP projector -> Llama decoder), its byte-level BPE tokenizer,
and the chat prompt format.

It is an ordinary transformers model saved with `save_pretrained`, so the same target adapter
(`fovea.target.HFVisionTarget`) serves it and the real LLaVA checkpoints. It knows nothing about
speculative decoding.
"""
from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from fovea.methods import FULL
from fovea.target import HFVisionTarget, Prompt

IMAGE_SIZE = 192                                      # world v2 canvas (fovea.data.CANVAS)
PATCH_SIZE = 16
NUM_IMAGE_TOKENS = (IMAGE_SIZE // PATCH_SIZE) ** 2   # 144 visual tokens, one per 16x16 patch
SPECIAL_TOKENS = ["<pad>", "<s>", "</s>", "<image>", "<unk>"]
PROMPT_TEMPLATE = "USER: {question}\nASSISTANT:"
# Where the question sits relative to the image tokens, saved in the model's config.json as
# `fovea_prompt_order`. "question_first" lets every image token's decoder state see the question
# (a causal decoder can then mark the asked-about patches before the answer starts).
PROMPT_ORDERS = ("image_first", "question_first")
ASSETS = Path(__file__).resolve().parents[2] / "assets"
DEFAULT_TARGET_DIR = ASSETS / "target"
# every drafter context's pair of asset folders: fovea.methods.CONTEXTS; the default is the full context's
DEFAULT_DRAFTER_DIR = ASSETS / FULL.folders[0]
DEFAULT_ASSISTANT_DIR = ASSETS / "assistant"     # small LM for transformers' assisted generation (bench)


@dataclass(frozen=True)
class BundledModelConfig:
    """Sizes of the bundled VLM (the `from_name` presets below)."""
    vocab_size: int = 1024
    hidden_size: int = 256
    num_layers: int = 4
    num_heads: int = 4
    intermediate_size: int = 704
    vision_hidden: int = 192
    vision_layers: int = 3
    vision_heads: int = 3
    max_positions: int = 1024
    image_size: int = IMAGE_SIZE
    patch_size: int = PATCH_SIZE
    prompt_order: str = "image_first"

    @classmethod
    def from_name(cls, name: str) -> "BundledModelConfig":
        presets = {
            "tiny": cls(vocab_size=1024, hidden_size=64, num_layers=2, num_heads=4, intermediate_size=128,
                        vision_hidden=32, vision_layers=1, vision_heads=2),
            "small": cls(vision_layers=4),
            "medium": cls(hidden_size=384, num_layers=6, num_heads=6, intermediate_size=1024, vision_hidden=256,
                          vision_heads=4),
        }
        if name not in presets:
            raise ValueError(f"unknown model preset {name!r}; choose one of {sorted(presets)}")
        return presets[name]


def build_llava_config(cfg: BundledModelConfig, image_token_id: int, pad_token_id: int = 0,
                       bos_token_id: int = 1, eos_token_id: int = 2):
    from transformers import CLIPVisionConfig, LlamaConfig, LlavaConfig

    vision = CLIPVisionConfig(
        hidden_size=cfg.vision_hidden, intermediate_size=cfg.vision_hidden * 2,
        num_hidden_layers=cfg.vision_layers, num_attention_heads=cfg.vision_heads,
        image_size=cfg.image_size, patch_size=cfg.patch_size, projection_dim=cfg.vision_hidden)
    text = LlamaConfig(
        vocab_size=cfg.vocab_size, hidden_size=cfg.hidden_size, intermediate_size=cfg.intermediate_size,
        num_hidden_layers=cfg.num_layers, num_attention_heads=cfg.num_heads,
        num_key_value_heads=cfg.num_heads, max_position_embeddings=cfg.max_positions,
        pad_token_id=pad_token_id, bos_token_id=bos_token_id, eos_token_id=eos_token_id,
        tie_word_embeddings=False)
    if cfg.prompt_order not in PROMPT_ORDERS:
        raise ValueError(f"prompt_order must be one of {PROMPT_ORDERS}, got {cfg.prompt_order!r}")
    config = LlavaConfig(
        vision_config=vision, text_config=text, image_token_id=image_token_id,
        vision_feature_layer=-1, vision_feature_select_strategy="default",
        projector_hidden_act="gelu", image_seq_length=(cfg.image_size // cfg.patch_size) ** 2,
        pad_token_id=pad_token_id, bos_token_id=bos_token_id, eos_token_id=eos_token_id)
    config.fovea_prompt_order = cfg.prompt_order
    return config


def build_model(cfg: BundledModelConfig, tokenizer, seed: int = 0):
    """A freshly initialised bundled VLM (float32, eval mode, sdpa attention)."""
    from transformers import LlavaForConditionalGeneration

    torch.manual_seed(seed)
    config = build_llava_config(cfg, image_token_id=tokenizer.convert_tokens_to_ids("<image>"),
                                pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.bos_token_id,
                                eos_token_id=tokenizer.eos_token_id)
    config._attn_implementation = "sdpa"
    return LlavaForConditionalGeneration(config).eval()


def train_tokenizer(texts, vocab_size: int = 1024):
    """Byte-level BPE trained offline with `tokenizers`: every character is encodable (as bytes)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts, trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", bos_token="<s>",
                                   eos_token="</s>", unk_token="<unk>",
                                   extra_special_tokens={"image_token": "<image>"})


def load_tokenizer(folder: str | os.PathLike):
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast.from_pretrained(str(folder))


def image_to_pixels(image: Image.Image, size: int = IMAGE_SIZE) -> torch.Tensor:
    """PIL image -> [1, 3, size, size] float32 in [-1, 1]: letterboxed (aspect kept, grey bars), the
    bundled model's preprocessing. World v2 images are drawn at this geometry, so they pass unscaled."""
    from fovea.data.sample import letterbox

    arr = np.asarray(letterbox(image, size), dtype=np.float32) / 127.5 - 1.0     # [H, W, 3]
    return torch.from_numpy(arr).permute(2, 0, 1).unsqueeze(0).contiguous()


def prompt_parts(tokenizer, question: str, num_image_tokens: int = NUM_IMAGE_TOKENS,
                 order: str = "image_first") -> tuple[list[int], list[int]]:
    """(ids before the answer's first token, the image's slice in them as [start, stop]).

    image_first:    `<s><image>*N USER: {question}\nASSISTANT:`
    question_first: `<s>USER: {question}\n<image>*N\nASSISTANT:`
    The answer follows with a leading space in both."""
    image = [tokenizer.convert_tokens_to_ids("<image>")] * num_image_tokens
    enc = lambda s: tokenizer(s, add_special_tokens=False)["input_ids"]  # noqa: E731
    if order == "image_first":
        head, tail = [], enc(PROMPT_TEMPLATE.format(question=question))
    elif order == "question_first":
        head, tail = enc(f"USER: {question}\n"), enc("\nASSISTANT:")
    else:
        raise ValueError(f"prompt order must be one of {PROMPT_ORDERS}, got {order!r}")
    ids = [tokenizer.bos_token_id] + head + image + tail
    return ids, [1 + len(head), 1 + len(head) + num_image_tokens]


def encode_prompt(tokenizer, question: str, num_image_tokens: int = NUM_IMAGE_TOKENS,
                  order: str = "image_first") -> list[int]:
    """Token ids of the prompt (see prompt_parts); the answer follows with a leading space."""
    return prompt_parts(tokenizer, question, num_image_tokens, order)[0]


def prompt_format(config) -> tuple[int, str]:
    """(visual tokens per image, prompt order) of a bundled model's config; checkpoints from before
    world v2 carry no order and use 64 tokens at 128 px."""
    return config.image_seq_length, getattr(config, "fovea_prompt_order", "image_first")


def save_config_json(folder: Path, name: str, payload) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    data = asdict(payload) if hasattr(payload, "__dataclass_fields__") else payload
    (folder / name).write_text(json.dumps(data, indent=2, sort_keys=True))


class BundledTarget(HFVisionTarget):
    """The bundled VLM behind the target interface: a letterboxed square image, one visual token per
    patch on a square grid (world v2: 192 px, 12 x 12 = 144 tokens), geometry read from its config."""

    def __init__(self, model, tokenizer):
        super().__init__(model, tokenizer)
        vision = model.config.vision_config
        self.image_size = vision.image_size
        side = vision.image_size // vision.patch_size
        self.memory_grid = (side, side)
        self.num_image_tokens, self.prompt_order = prompt_format(model.config)

    def prepare(self, image: Image.Image, question: str) -> Prompt:
        ids = torch.tensor([encode_prompt(self.tokenizer, question, self.num_image_tokens, self.prompt_order)])
        pixels = image_to_pixels(image, self.image_size).to(self.dtype)
        return Prompt(input_ids=ids, model_inputs={"pixel_values": pixels})


def load_target(folder: str | os.PathLike = DEFAULT_TARGET_DIR) -> BundledTarget:
    """Load the bundled target (fp16 safetensors on disk) as float32 for CPU decoding."""
    from transformers import LlavaForConditionalGeneration

    from fovea.checkpoints import check_target_folder

    folder = Path(folder)
    if not (folder / "config.json").exists():
        raise FileNotFoundError(f"no bundled target at {folder} (expected config.json + model.safetensors); "
                                "build it with `python -m fovea.train target`")
    check_target_folder(folder)     # truncated weights or a missing tokenizer: one sentence, no traceback
    model = LlavaForConditionalGeneration.from_pretrained(str(folder), dtype=torch.float32,
                                                          attn_implementation="sdpa")
    return BundledTarget(model, load_tokenizer(folder))

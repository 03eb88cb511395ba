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

from fovea.target import HFVisionTarget, Prompt

IMAGE_SIZE = 128
PATCH_SIZE = 16
NUM_IMAGE_TOKENS = (IMAGE_SIZE // PATCH_SIZE) ** 2   # 64 visual tokens, one per 16x16 patch
SPECIAL_TOKENS = ["<pad>", "<s>", "</s>", "<image>", "<unk>"]
PROMPT_TEMPLATE = "USER: {question}\nASSISTANT:"
ASSETS = Path(__file__).resolve().parents[2] / "assets"
DEFAULT_TARGET_DIR = ASSETS / "target"
DEFAULT_DRAFTER_DIR = ASSETS / "drafter"
DEFAULT_ASSISTANT_DIR = ASSETS / "assistant"     # small LM for transformers' assisted generation (bench)
# the cache-friendly pair: drafters whose own cache skips the image (DrafterConfig.context == "text")
TEXT_CONTEXT_DRAFTER_DIRS = {"fovea_text": ASSETS / "drafter_text", "no_correction_text": ASSETS / "drafter_text_nocorr"}


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
    max_positions: int = 512

    @classmethod
    def from_name(cls, name: str) -> "BundledModelConfig":
        presets = {
            "tiny": cls(vocab_size=1024, hidden_size=64, num_layers=2, num_heads=4, intermediate_size=128,
                        vision_hidden=32, vision_layers=1, vision_heads=2),
            "small": cls(),
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
        image_size=IMAGE_SIZE, patch_size=PATCH_SIZE, projection_dim=cfg.vision_hidden)
    text = LlamaConfig(
        vocab_size=cfg.vocab_size, hidden_size=cfg.hidden_size, intermediate_size=cfg.intermediate_size,
        num_hidden_layers=cfg.num_layers, num_attention_heads=cfg.num_heads,
        num_key_value_heads=cfg.num_heads, max_position_embeddings=cfg.max_positions,
        pad_token_id=pad_token_id, bos_token_id=bos_token_id, eos_token_id=eos_token_id,
        tie_word_embeddings=False)
    return LlavaConfig(
        vision_config=vision, text_config=text, image_token_id=image_token_id,
        vision_feature_layer=-1, vision_feature_select_strategy="default",
        projector_hidden_act="gelu", image_seq_length=NUM_IMAGE_TOKENS,
        pad_token_id=pad_token_id, bos_token_id=bos_token_id, eos_token_id=eos_token_id)


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


def image_to_pixels(image: Image.Image) -> torch.Tensor:
    """PIL image -> [1, 3, 128, 128] float32 in [-1, 1] (the bundled model's preprocessing)."""
    img = image.convert("RGB")
    if img.size != (IMAGE_SIZE, IMAGE_SIZE):
        img = img.resize((IMAGE_SIZE, IMAGE_SIZE), Image.BICUBIC)
    arr = np.asarray(img, dtype=np.float32) / 127.5 - 1.0     # [H, W, 3]
    return torch.from_numpy(arr).permute(2, 0, 1).unsqueeze(0).contiguous()


def encode_prompt(tokenizer, question: str) -> list[int]:
    """Token ids of `<s><image>*64 USER: {question}\\nASSISTANT:`; the answer follows with a leading space."""
    image_id = tokenizer.convert_tokens_to_ids("<image>")
    text_ids = tokenizer(PROMPT_TEMPLATE.format(question=question), add_special_tokens=False)["input_ids"]
    return [tokenizer.bos_token_id] + [image_id] * NUM_IMAGE_TOKENS + text_ids


def save_config_json(folder: Path, name: str, payload) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    data = asdict(payload) if hasattr(payload, "__dataclass_fields__") else payload
    (folder / name).write_text(json.dumps(data, indent=2, sort_keys=True))


class BundledTarget(HFVisionTarget):
    """The bundled VLM behind the target interface: 128 px image, 64 visual tokens on an 8x8 grid."""

    memory_grid = (IMAGE_SIZE // PATCH_SIZE, IMAGE_SIZE // PATCH_SIZE)
    image_size = IMAGE_SIZE

    def prepare(self, image: Image.Image, question: str) -> Prompt:
        ids = torch.tensor([encode_prompt(self.tokenizer, question)])
        return Prompt(input_ids=ids, model_inputs={"pixel_values": image_to_pixels(image).to(self.dtype)})


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

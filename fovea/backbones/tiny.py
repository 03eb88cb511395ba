"""Tiny random-weight LLaVA-NeXT and Qwen2.5-VL models for tests, built offline from the transformers
config classes of the real checkpoints (float32, 2 decoder layers, hidden 64 with grouped-query
attention, a 1-2 layer vision tower, 32-64 px tiles) with a byte-level BPE trained on the spot.

Stand-ins for llava-hf/llava-v1.6-* and Qwen/Qwen2.5-VL-*: same classes, processors and code
paths, no weights to download. Knows nothing about drafting.
"""
from __future__ import annotations

from functools import lru_cache

import torch

from fovea.backbones.llava_next import LlavaNextTarget
from fovea.backbones.qwen2_5_vl import Qwen25VLTarget

QWEN_SPECIAL_TOKENS = ["<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>", "<|image_pad|>",
                       "<|video_pad|>"]
TILE, PATCH = 32, 8                          # LLaVA-NeXT tiles of 32 px, 4 x 4 base grid
PINPOINTS = [[32, 64], [64, 32], [64, 64]]


@lru_cache(maxsize=None)
def _tokenizer_files(extra: tuple[str, ...]) -> dict:
    """Train once per process; every builder gets a fresh tokenizer object from the same vocabulary."""
    from fovea.data import iter_corpus_text
    from fovea.models.bundled import train_tokenizer

    tok = train_tokenizer(iter_corpus_text(300), vocab_size=400)
    if extra:
        tok.add_tokens(list(extra), special_tokens=True)
    return {"tokenizer_object": tok.backend_tokenizer.to_str(), "kwargs": dict(
        pad_token="<pad>", bos_token="<s>", eos_token="</s>", unk_token="<unk>")}


def tiny_tokenizer(extra_special_tokens: tuple[str, ...] = (), image_token: str = "<image>"):
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    files = _tokenizer_files(tuple(extra_special_tokens))
    return PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_str(files["tokenizer_object"]),
                                   **files["kwargs"], extra_special_tokens={"image_token": image_token})


def _text_config(tok) -> dict:
    return dict(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
                pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id)


def _finish(model, tok):
    """Eval mode, and the EOS / pad the model's own generate() honours (as the target does)."""
    model.generation_config.eos_token_id = tok.eos_token_id
    model.generation_config.pad_token_id = tok.pad_token_id
    return model.eval()


def tiny_llava_next(seed: int = 0) -> LlavaNextTarget:
    """LlavaNextForConditionalGeneration (CLIP 32 px tiles / 8 px patches, anyres up to 2 x 2 tiles,
    Llama decoder with GQA) + LlavaNextProcessor with a PIL image processor."""
    from transformers import (CLIPVisionConfig, LlamaConfig, LlavaNextConfig, LlavaNextForConditionalGeneration,
                              LlavaNextProcessor)
    from transformers.models.llava_next.image_processing_pil_llava_next import LlavaNextImageProcessorPil

    tok = tiny_tokenizer()
    image_processor = LlavaNextImageProcessorPil(size={"shortest_edge": TILE},
                                                 crop_size={"height": TILE, "width": TILE},
                                                 image_grid_pinpoints=PINPOINTS)
    processor = LlavaNextProcessor(image_processor=image_processor, tokenizer=tok, patch_size=PATCH,
                                   vision_feature_select_strategy="default", num_additional_image_tokens=1)
    vision = CLIPVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                              image_size=TILE, patch_size=PATCH, projection_dim=32)
    config = LlavaNextConfig(vision_config=vision, text_config=LlamaConfig(**_text_config(tok)),
                             image_token_id=tok.convert_tokens_to_ids("<image>"), image_grid_pinpoints=PINPOINTS,
                             vision_feature_layer=-1, vision_feature_select_strategy="default",
                             tie_word_embeddings=False)
    config._attn_implementation = "sdpa"
    torch.manual_seed(seed)
    model = _finish(LlavaNextForConditionalGeneration(config), tok)
    return LlavaNextTarget(model, processor)


def tiny_qwen2_5_vl(seed: int = 0, image_size: int | None = None) -> Qwen25VLTarget:
    """Qwen2_5_VLForConditionalGeneration (8 px patches, 2 x 2 merge, window + full attention blocks,
    M-RoPE sections [2, 3, 3]) + a PIL Qwen2-VL image processor capped at 64 x 64 px (<= 16 tokens).
    image_size=None keeps native resolution, so grids vary per image."""
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    tok = tiny_tokenizer(tuple(QWEN_SPECIAL_TOKENS), image_token="<|image_pad|>")
    image_processor = Qwen2VLImageProcessorPil(patch_size=8, merge_size=2, temporal_patch_size=2,
                                               min_pixels=16 * 16, max_pixels=64 * 64)
    text = dict(_text_config(tok), rope_parameters={"rope_type": "default", "rope_theta": 1e6,
                                                    "mrope_section": [2, 3, 3]})
    vision = dict(depth=2, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=64, patch_size=8,
                  spatial_merge_size=2, temporal_patch_size=2, window_size=32, fullatt_block_indexes=[1])
    ids = {name: tok.convert_tokens_to_ids(t) for name, t in [
        ("image_token_id", "<|image_pad|>"), ("video_token_id", "<|video_pad|>"),
        ("vision_start_token_id", "<|vision_start|>"), ("vision_end_token_id", "<|vision_end|>")]}
    config = Qwen2_5_VLConfig(text_config=text, vision_config=vision, **ids)
    config._attn_implementation = "sdpa"
    torch.manual_seed(seed)
    model = _finish(Qwen2_5_VLForConditionalGeneration(config), tok)
    return Qwen25VLTarget(model, tok, image_processor, image_size=image_size)


def save_backbone(target, folder) -> None:
    """Write a target as a checkpoint folder `load_backbone` reads (model + tokenizer + image processor)."""
    target.model.save_pretrained(str(folder))
    if hasattr(target, "processor"):
        target.processor.save_pretrained(str(folder))
    else:
        target.tokenizer.save_pretrained(str(folder))
        target.image_processor.save_pretrained(str(folder))

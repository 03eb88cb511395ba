"""Real VLM backbones behind the target interface, chosen by the checkpoint's `model_type`.

    load_backbone("llava-hf/llava-v1.6-vicuna-7b-hf")   # llava_next -> LlavaNextTarget
    load_backbone("/ckpt/Qwen2.5-VL-7B-Instruct")        # qwen2_5_vl -> Qwen25VLTarget
    load_backbone("assets/target")                      # bundled llava format -> BundledTarget

A folder is read as is; a Hub id only from the local Hub cache or where a Hub is reachable (the
error says so plainly otherwise). Tiny random-weight builders of each architecture are here for
tests. Knows nothing about drafting.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import torch

from fovea.backbones.hub import BackboneError, resolve_pretrained
from fovea.backbones.llava_next import LlavaNextTarget
from fovea.backbones.qwen2_5_vl import Qwen25VLTarget
from fovea.backbones.tiny import save_backbone, tiny_llava_next, tiny_qwen2_5_vl

SUPPORTED = {
    "llava": "LLaVA-1.5 (llava-hf/llava-1.5-*) or the bundled FOVEA target",
    "llava_next": "LLaVA-NeXT (llava-hf/llava-v1.6-*)",
    "qwen2_5_vl": "Qwen2.5-VL (Qwen/Qwen2.5-VL-*)",
}
PROCESSOR_FILES = ("preprocessor_config.json", "processor_config.json")
# What a Hub download fetches: configs, tokenizer, processor, safetensors weights (no .bin / .pth).
HUB_PATTERNS = ["*.json", "*.safetensors", "*.model", "*.txt", "*.jinja"]


def load_backbone(ref: str | os.PathLike, device: str | torch.device | None = None, dtype: torch.dtype | None = None,
                  offline: bool | None = None, image_size: int | None = 448, attn_implementation: str = "sdpa"):
    """A target for the checkpoint at `ref` (folder or Hub id).

    device: "cpu", "cuda", "cuda:1", or "auto" (spread over all GPUs with accelerate's device_map);
    default cuda when available. dtype: default bfloat16 on GPU, float32 on CPU. image_size: the
    square size Qwen2.5-VL images are resized to (None = native resolution)."""
    folder = resolve_pretrained(ref, "target", HUB_PATTERNS, offline)
    config = json.loads((folder / "config.json").read_text())
    model_type = config.get("model_type")
    if model_type not in SUPPORTED:
        listed = "; ".join(f"{k} ({v})" for k, v in SUPPORTED.items())
        raise BackboneError(f"{folder}/config.json has model_type {model_type!r}, which FOVEA does not support. "
                            f"Supported: {listed}.")
    if not any(folder.glob("*.safetensors")):
        raise BackboneError(f"{folder} has no *.safetensors weights; convert the checkpoint with save_pretrained "
                            "(safe_serialization=True) first.")
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    dtype = dtype or (torch.float32 if str(device) == "cpu" else torch.bfloat16)
    if model_type == "llava" and not any((folder / f).exists() for f in PROCESSOR_FILES):
        from fovea.models.bundled import BundledTarget, load_tokenizer

        return BundledTarget(_model(folder, model_type, device, dtype, attn_implementation), load_tokenizer(folder))
    model = _model(folder, model_type, device, dtype, attn_implementation)
    if model_type == "qwen2_5_vl":
        from transformers import AutoImageProcessor, AutoTokenizer

        # Not AutoProcessor: Qwen2_5_VLProcessor insists on a video processor, which needs torchvision.
        return Qwen25VLTarget(model, AutoTokenizer.from_pretrained(str(folder)),
                              AutoImageProcessor.from_pretrained(str(folder)), image_size=image_size)
    from transformers import AutoProcessor

    return LlavaNextTarget(model, AutoProcessor.from_pretrained(str(folder)))


def _model(folder: Path, model_type: str, device, dtype: torch.dtype, attn_implementation: str):
    import transformers

    cls = {"llava": transformers.LlavaForConditionalGeneration,
           "llava_next": transformers.LlavaNextForConditionalGeneration,
           "qwen2_5_vl": transformers.Qwen2_5_VLForConditionalGeneration}[model_type]
    place = {"device_map": "auto"} if str(device) == "auto" else {}
    model = cls.from_pretrained(str(folder), dtype=dtype, attn_implementation=attn_implementation, **place)
    return (model if place else model.to(device)).eval()


__all__ = ["BackboneError", "LlavaNextTarget", "Qwen25VLTarget", "SUPPORTED", "load_backbone", "save_backbone",
           "tiny_llava_next", "tiny_qwen2_5_vl"]

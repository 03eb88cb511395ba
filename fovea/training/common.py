"""Shared training plumbing: seeded batches of generated samples, checkpoint/resume, LR schedule.

Knows nothing about which model is trained.
"""
from __future__ import annotations

import json
import math
import random
import time
from dataclasses import asdict
from pathlib import Path

import torch

from fovea.training.packing import as_conversation, pack_text


def lr_at(step: int, total: int, peak: float, warmup: int) -> float:
    """Linear warm-up, then cosine decay to 10% of the peak."""
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def collate_text(samples, tokenizer, max_answer_tokens: int = 96, fmt: tuple[int, str] | None = None):
    """Samples -> right-padded input ids, attention mask and answer-only labels [B, T] (single turn).
    fmt: (visual tokens, prompt order) of the target; default the bundled v2 image-first format."""
    kwargs = {} if fmt is None else {"fmt": fmt}
    b = pack_text([as_conversation(s) for s in samples], tokenizer, max_answer_tokens=max_answer_tokens, **kwargs)
    return b["input_ids"], b["attention_mask"], b["labels"]


AUTOCAST_CHOICES = ("auto", "bf16", "fp32")


def cpu_has_fast_bf16(cpuinfo: str | None = None) -> bool:
    """Whether this CPU has bf16 arithmetic in hardware, read from /proc/cpuinfo: AMX-BF16 tiles (Intel
    Sapphire Rapids and later) or AVX512-BF16 (AMD Zen 4 and later, Intel Cooper Lake)."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return False
    flags = cpuinfo.split()
    return "amx_bf16" in flags or "avx512_bf16" in flags


def bf16_autocast(device: torch.device, choice: str = "auto", cpuinfo: str | None = None):
    """(the autocast context for training steps, whether it is bf16). "auto": bf16 on CUDA and on CPUs with
    bf16 in hardware (a target training step: 0.74 s against 1.07-1.16 s in fp32, measured 2026-12-05 on 2
    cores of a Xeon with AMX; a deep-target joint step 3.0 s against 4.2 s, 2026-12-07 on 2 cores of an
    AVX512-BF16 EPYC), fp32 elsewhere: on AVX2-only CPUs bf16 autocast runs ~24x slower than fp32 (NOTES)."""
    if choice not in AUTOCAST_CHOICES:
        raise ValueError(f"autocast must be one of {AUTOCAST_CHOICES}, got {choice!r}")
    use = choice == "bf16" or (choice == "auto" and (device.type == "cuda" or
                                                     (device.type == "cpu" and cpu_has_fast_bf16(cpuinfo))))
    return torch.autocast(device.type, dtype=torch.bfloat16, enabled=use), use


def add_config_args(parser, config_cls) -> None:
    """One `--field-name` option per field of a frozen config dataclass, its default as default."""
    for f, v in asdict(config_cls()).items():
        if isinstance(v, tuple):  # e.g. --ground-layers 2 3
            parser.add_argument("--" + f.replace("_", "-"), type=type(v[0]) if v else str, nargs="*", default=v)
        else:
            parser.add_argument("--" + f.replace("_", "-"), type=type(v), default=v)


def config_from_args(args, config_cls):
    """The config dataclass from the options `add_config_args` added."""
    return config_cls(**{f: tuple(getattr(args, f)) if isinstance(v, tuple) else getattr(args, f)
                         for f, v in asdict(config_cls()).items()})


class Checkpointer:
    """Saves {model, optimiser, step, rng} to `run_dir/last.pt` atomically; resumes from it."""

    def __init__(self, run_dir: Path):
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.path = self.run_dir / "last.pt"

    def save(self, step: int, modules: dict, extra: dict | None = None) -> None:
        state = {"step": step, "extra": extra or {},
                 "rng": {"torch": torch.get_rng_state(), "python": random.getstate()},
                 "modules": {k: v.state_dict() for k, v in modules.items()}}
        tmp = self.path.with_suffix(".tmp")
        torch.save(state, tmp)
        tmp.replace(self.path)

    def load(self, modules: dict) -> tuple[int, dict]:
        if not self.path.exists():
            return 0, {}
        state = torch.load(self.path, map_location="cpu", weights_only=False)
        for k, v in modules.items():
            v.load_state_dict(state["modules"][k])
        torch.set_rng_state(state["rng"]["torch"])
        random.setstate(state["rng"]["python"])
        return state["step"], state["extra"]


def append_jsonl(path: Path, record: dict) -> None:
    with open(path, "a") as f:
        f.write(json.dumps(record) + "\n")


class Timer:
    def __init__(self):
        self.start = time.time()

    def minutes(self) -> float:
        return (time.time() - self.start) / 60

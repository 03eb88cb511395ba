"""Glyph slots: does a visual token carry *both* characters that share its 16-pixel patch?

The shipped glyph label is one character per patch (`fovea.data.labels.vote`: the glyph covering most
of it). A label of 2-3 condensed letters puts two glyph centres in one patch, and the vote names only
one of them, so the per-patch loss never asks the tower to keep the other. The layout split's chart
misreads are such labels (KG read YC, NV read NU, VWV read WW: target v3, step 4,100).

A patch's glyph slots are its left and right 8-pixel halves: slot s holds the character whose ink-box
centre lies in that half (0, "none", where no centre does; IGNORE where two do, or in a patch that holds
no centre at all). `GlyphSlotHead` reads both slots off a visual token with one linear layer: as a loss
it asks the tower to keep both glyphs (`python -m fovea.train deep --slot-weight`); as a fresh probe on
frozen tokens it measures whether they are there (`python -m fovea.train glyph-slots`).

    python -m fovea.train glyph-slots --target candidates/target_v3_drill --out runs/slots.json

trains a fresh slot head on the frozen tokens of training-look images, then scores it on images it never
saw: training looks, the layout split's held-out chart looks and OCR words. Knows nothing about decoding.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
import torch.nn.functional as F

from fovea.data import IGNORE
from fovea.data.labels import CHAR_ID, CHARSET
from fovea.data.sample import GRID, PATCH

SLOTS = 2  # the left and right 8-pixel half of a 16-pixel patch


def glyph_slots(records) -> torch.Tensor:
    """long [B, GRID*GRID, SLOTS] from samples or conversations (their objects' glyph ink boxes)."""
    out = torch.full((len(records), GRID * GRID, SLOTS), IGNORE, dtype=torch.long)
    for i, record in enumerate(records):
        seen: dict[tuple[int, int], int] = {}
        for obj in record.objects:
            for text, boxes in obj.glyphs.items():
                for char, (x0, y0, x1, y1) in zip(text, boxes):
                    cx, cy = (x0 + x1) // 2, (y0 + y1) // 2
                    if not (0 <= cx < GRID * PATCH and 0 <= cy < GRID * PATCH):
                        continue
                    patch = (cy // PATCH) * GRID + cx // PATCH
                    slot = (cx % PATCH) * SLOTS // PATCH
                    seen[(patch, slot)] = seen.get((patch, slot), 0) + 1
                    if out[i, patch].eq(IGNORE).all():   # the patch's first centre: its other slot says "none"
                        out[i, patch] = 0
                    out[i, patch, slot] = CHAR_ID[char] if seen[(patch, slot)] == 1 else IGNORE
    return out


class GlyphSlotHead(torch.nn.Module):
    """A linear read of both glyph slots off each visual token [B, N, D] -> [B, N, SLOTS, chars]."""

    def __init__(self, dim: int, none_weight: float = 0.25, shared_weight: float = 1.0):
        super().__init__()
        self.linear = torch.nn.Linear(dim, SLOTS * len(CHARSET))
        self.none_weight = none_weight  # slots holding no glyph, as AuxHeads weighs background
        self.shared_weight = shared_weight  # glyph slots of patches holding two glyphs (about 2% of them)

    def logits(self, feats: torch.Tensor) -> torch.Tensor:
        return self.linear(feats).unflatten(-1, (SLOTS, len(CHARSET)))

    def forward(self, feats: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """Cross-entropy: the weighted mean over glyph slots (shared_weight on those of patches holding two
        glyphs) plus none_weight x the mean over empty ones."""
        target = labels.flatten()
        ce = F.cross_entropy(self.logits(feats).flatten(0, 2).float(), target, ignore_index=IGNORE,
                             reduction="none")
        glyph, empty = target > 0, target == 0
        shared = (labels > 0).all(-1, keepdim=True).expand_as(labels).flatten()
        weight = 1.0 + (self.shared_weight - 1.0) * shared.float()
        parts = [(ce * weight)[glyph].sum() / weight[glyph].sum()] if glyph.any() else []
        if empty.any():
            parts.append(self.none_weight * ce[empty].mean())
        return torch.stack(parts).sum() if parts else feats.sum() * 0.0

    @torch.no_grad()
    def scores(self, feats: torch.Tensor, labels: torch.Tensor) -> dict:
        """{slot: accuracy over glyph slots, shared: over patches holding two glyphs, both slots right,
        n_slots, n_shared}."""
        pred = self.logits(feats).argmax(-1)
        glyph = labels > 0
        right = (pred == labels) | (labels == IGNORE)
        shared = glyph.all(-1)
        return {"slot": round(float(right[glyph].float().mean()), 3) if glyph.any() else None,
                "shared": round(float(right[shared].all(-1).float().mean()), 3) if shared.any() else None,
                "n_slots": int(glyph.sum()), "n_shared": int(shared.sum())}


def _split_records(kind: str, seeds) -> list:
    from fovea.data.generate import make_sample
    from fovea.data.looks import label_look

    if kind == "training-labels":  # training looks with 2-3-letter labels in the hard faces
        from fovea.data.looks import HARD_FACES
        return [make_sample(s, family="chart", look=label_look(s, "chart", HARD_FACES)) for s in seeds]
    if kind == "layout-charts":    # the layout split's held-out chart looks
        return [make_sample(s, family="chart", task="highest", split="layout") for s in seeds]
    if kind == "ocr":
        return [make_sample(s, family="ocr", task="read") for s in seeds]
    raise ValueError(kind)


def _features(model, records, size: int, batch: int = 32) -> tuple[torch.Tensor, torch.Tensor]:
    from fovea.training.target import image_features
    from fovea.training.packing import image_to_pixels

    feats = []
    for i in range(0, len(records), batch):
        chunk = records[i:i + batch]
        feats.append(image_features(model, torch.cat([image_to_pixels(r.image, size) for r in chunk])).float())
    return torch.cat(feats), glyph_slots(records)


def probe(model, steps: int = 300, n_train_images: int = 64, n_eval: int = 200, seed: int = 0) -> dict:
    """Train a fresh GlyphSlotHead on the frozen visual tokens of training-look images (looks "labels",
    as the tower's aux images), then score it on unseen images of three kinds."""
    from fovea.data.generate import eval_seeds
    from fovea.training.target import AUX_SEED_START, aux_images, image_features

    torch.manual_seed(seed)
    model.eval()
    size = model.config.vision_config.image_size
    head = GlyphSlotHead(model.config.text_config.hidden_size)
    opt = torch.optim.AdamW(head.parameters(), lr=3e-3, weight_decay=0.0)
    for step in range(steps):
        pixels, labels = aux_images(AUX_SEED_START + 7_000_000, step, n_train_images, ("chart", "ocr"), size,
                                    looks="labels", slots=True)
        with torch.no_grad():
            feats = image_features(model, pixels).float()
        loss = head(feats, labels["glyph_slots"])
        opt.zero_grad()
        loss.backward()
        opt.step()
    seeds = eval_seeds(n_eval)
    out = {"train_steps": steps, "images_per_step": n_train_images, "n_eval_images": n_eval}
    for kind in ("training-labels", "layout-charts", "ocr"):
        feats, labels = _features(model, _split_records(kind, seeds), size)
        out[kind] = head.scores(feats, labels)
    return out


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m fovea.train glyph-slots", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--target", type=Path, required=True, help="an exported target (config.json + model)")
    p.add_argument("--out", type=Path, default=None, help="write the scores here (JSON)")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--images", type=int, default=64, help="training images a probe step")
    p.add_argument("--n", type=int, default=200, help="unseen images of each kind scored")
    p.add_argument("--threads", type=int, default=0)
    args = p.parse_args(argv)
    if not (args.target / "config.json").exists():
        p.error(f"--target {args.target}: no exported model there (config.json)")
    if min(args.steps, args.images, args.n) < 1:
        p.error("--steps, --images and --n must be at least 1")
    if args.threads:
        torch.set_num_threads(args.threads)
    from transformers import LlavaForConditionalGeneration

    model = LlavaForConditionalGeneration.from_pretrained(str(args.target), dtype=torch.float32)
    result = {"target": str(args.target), **probe(model, args.steps, args.images, args.n)}
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()

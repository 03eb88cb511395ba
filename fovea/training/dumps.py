"""Reading a dump (`fovea.training.dump`) back for drafter training: `DumpHead` stands in for the
target (its embedding and LM head, shapes, image token and fingerprint: all a drafter binds to),
`DumpDataset` yields one sample file each, `collate_dumped` pads samples into a batch, and
`DumpHead.artifacts` turns a batch into what `drafter_loss` reads (the target's logits are the LM
head applied to the stored last-layer states). Knows nothing about optimisers or accelerate.
"""
from __future__ import annotations

import json
import random
from pathlib import Path

import torch

from fovea.config import DrafterConfig
from fovea.jsonl import read_jsonl
from fovea.training.dump import HEAD, INDEX, META, DumpError


class DumpHead:
    """The target as far as drafter training needs it, read from a dump folder (no decoder weights)."""

    def __init__(self, folder: str | Path):
        from safetensors.torch import load_file

        folder = Path(folder)
        for name in (META, HEAD, INDEX):
            if not (folder / name).exists():
                raise DumpError(f"{folder} is not a complete dump (no {name}); write it with "
                                "`python -m fovea.train dump`.")
        self.folder, self.meta = folder, json.loads((folder / META).read_text())
        head = load_file(str(folder / HEAD))
        self.embed_weight, self.lm_head_weight = head["embed"], head["lm_head"]
        self.lm_head_bias = head.get("lm_head_bias")
        self._on = None
        self.hidden_size, self.vocab_size = self.meta["hidden_size"], self.meta["vocab_size"]
        self.image_token_id = self.meta["image_token_id"]
        self.decoder_fingerprint = self.meta.get("decoder_fingerprint")  # checkpoints.decoder_fingerprint at dump time
        grid = self.meta.get("memory_grid")
        self.memory_grid = tuple(grid) if grid else None

    def to(self, device) -> "DumpHead":
        """Move the embedding and LM head to `device` (where the drafter binds and trains)."""
        self.embed_weight, self.lm_head_weight = self.embed_weight.to(device), self.lm_head_weight.to(device)
        if self.lm_head_bias is not None:
            self.lm_head_bias = self.lm_head_bias.to(device)
        return self

    def drafter_config(self, num_layers: int = 1, context: str = "full",
                       memory_source: str = "projected") -> DrafterConfig:
        """The drafter shape `drafter_config_for` gives the live target, with these choices."""
        return DrafterConfig(**{**self.meta["drafter_base"], "num_layers": num_layers, "context": context,
                                "memory_source": memory_source})

    def logits(self, feats: torch.Tensor) -> torch.Tensor:
        """Target logits [..., V] (float32) of stored last-layer states [..., D]."""
        if self._on is None or self._on[0].device != feats.device:    # one float32 copy per device
            bias = self.lm_head_bias
            self._on = (self.lm_head_weight.to(feats.device, torch.float32),
                        None if bias is None else bias.to(feats.device, torch.float32))
        return torch.nn.functional.linear(feats.float(), *self._on)

    def artifacts(self, batch: dict) -> dict:
        """A collated batch -> {feats [B, T, D], logits [B, T, V], visual} as `target_artifacts` returns."""
        feats = batch["hidden"].float()
        visual = batch["visual"]
        visual = visual.float() if torch.is_tensor(visual) else [v.float() for v in visual]
        return {"feats": feats, "logits": self.logits(feats), "visual": visual}


def dumped_inputs(head: DumpHead):
    """`train_steps`' inputs from collated dump batches: (artifacts, ids, att, loss mask, ground)."""
    def inputs(batch):
        return head.artifacts(batch), batch["input_ids"], batch["attention_mask"], batch["loss_mask"], batch["ground"]
    return inputs


def read_index(folder: str | Path) -> list[dict]:
    """The index entries of a dump, sorted by sample id."""
    return sorted(read_jsonl(Path(folder) / INDEX), key=lambda e: e["id"])


class DumpDataset(torch.utils.data.Dataset):
    """One dumped sample per item: the tensors of its safetensors file, plus its family."""

    def __init__(self, folder: str | Path):
        self.folder = Path(folder)
        self.entries = read_index(self.folder)
        if not self.entries:
            raise DumpError(f"{self.folder} holds no samples yet; run `python -m fovea.train dump` to fill it.")

    def __len__(self) -> int:
        return len(self.entries)

    def __getitem__(self, i: int) -> dict:
        from safetensors.torch import load_file

        e = self.entries[i]
        return {**load_file(str(self.folder / e["file"])), "family": e.get("family")}


def _pad(rows: list[torch.Tensor], value=0) -> torch.Tensor:
    """Right-pad [T_i, ...] tensors along their first axis into [B, T_max, ...]."""
    width = max(r.shape[0] for r in rows)
    out = torch.full((len(rows), width, *rows[0].shape[1:]), value, dtype=rows[0].dtype)
    for i, r in enumerate(rows):
        out[i, : r.shape[0]] = r
    return out


def collate_dumped(samples: list[dict]) -> dict:
    """Samples -> input_ids / attention_mask / loss_mask [B, T], hidden [B, T, D], visual ([B, N, D],
    or a list of [N_b, D] when images give different entry counts), next_tokens [B, T], ground [B, T, N]
    (or None) and families. Right-padded, as the online batches are."""
    lengths = [s["input_ids"].shape[0] for s in samples]
    att = torch.zeros(len(samples), max(lengths), dtype=torch.long)
    for i, n in enumerate(lengths):
        att[i, :n] = 1
    visual = [s["visual"] for s in samples]
    same = len({v.shape[0] for v in visual}) == 1
    batch = {"input_ids": _pad([s["input_ids"].long() for s in samples]), "attention_mask": att,
             "loss_mask": _pad([s["loss_mask"] for s in samples], False),
             "hidden": _pad([s["hidden"] for s in samples]), "visual": torch.stack(visual) if same else visual,
             "next_tokens": _pad([s["next_tokens"].long() for s in samples]),
             "families": [s.get("family") for s in samples], "ground": None}
    if all("ground" in s for s in samples):
        n = max(s["ground"].shape[1] for s in samples)
        batch["ground"] = _pad([torch.nn.functional.pad(s["ground"], (0, n - s["ground"].shape[1]))
                                for s in samples], False)
    return batch


def step_batches(dataset: DumpDataset, batch_size: int, start_step: int, shuffle: bool, seed: int):
    """Endless batches for step-counted training, resumable at any step: batch k holds positions
    k*B .. k*B+B-1 of the epoch-wise order (dump order, or a permutation seeded by (seed, epoch)).
    In dump order this replays the online trainer's batches when the dump was written from the same
    seeds (`drafter_cli.batches`)."""
    n = len(dataset)
    orders: dict[int, list[int]] = {}

    def order(epoch: int) -> list[int]:
        if epoch not in orders:
            idx = list(range(n))
            if shuffle:
                random.Random(seed * 1_000_003 + epoch).shuffle(idx)
            orders.clear()
            orders[epoch] = idx
        return orders[epoch]

    step = start_step
    while True:
        pos = [(step * batch_size + j) for j in range(batch_size)]
        yield collate_dumped([dataset[order(p // n)[p % n]] for p in pos])
        step += 1

"""Train a FOVEA drafter for any supported backbone on (image, question, answer) records, with
`accelerate`: the same command runs on 1 CPU, 1 GPU or many GPUs.

    python -m fovea.train online --target PATH --records data.jsonl --out drafter_dir
    accelerate launch --mixed_precision bf16 -m fovea.train online --target ... (same flags)

(`-m fovea.training.accelerate_train` in place of `-m fovea.train online` runs the same.)

Each batch: the frozen target runs teacher-forced on prompt + answer (`target_artifacts`: its
last hidden states, logits and visual tokens), then the drafter takes the two-step FOVEA loss
(`drafter_loss`). Gradient accumulation, bf16 autocast on GPU only (fp32 on CPU), checkpoints
via `accelerator.save_state` every --save-every optimiser steps under OUT/checkpoints (resumed
with --resume, data order included), tqdm on the main process. The trained drafter is written
to OUT as safetensors + config.json (`Drafter.from_pretrained(OUT)`), with train_config.json and
metrics.json next to it.
"""
from __future__ import annotations

import argparse
import json
import shutil
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import torch

from fovea.config import CorrectionConfig, RetrievalConfig
from fovea.drafter import Drafter, drafter_config_for
from fovea.training.common import lr_at
from fovea.training.drafter import answer_loss_mask, drafter_loss, target_artifacts
from fovea.training.records import Collator, RecordDataset, load_records


@dataclass(frozen=True)
class RecordTrainConfig:
    batch_size: int = 4               # per device
    grad_accum: int = 4               # optimiser step every grad_accum batches
    lr: float = 3e-4
    warmup: int = 100                 # optimiser steps
    total_steps: int = 2000           # optimiser steps
    weight_decay: float = 0.0
    max_answer_tokens: int = 256
    num_layers: int = 1               # drafter decoder blocks
    context: str = "full"             # "text": the drafter's cache skips the image (cache-friendly)
    correction: bool = True           # False: the no-correction (EAGLE-style) baseline drafter
    seed: int = 0
    save_every: int = 200             # optimiser steps between checkpoints
    keep_checkpoints: int = 2
    num_workers: int = 0              # DataLoader workers (preprocessing runs in the collator)


class DrafterObjective(torch.nn.Module):
    """The drafter with its loss as `forward`, so DDP / accelerate see one module call per batch
    (the drafter's own methods `step` / `head` bypass DDP's hooks when called directly)."""

    def __init__(self, drafter: Drafter, correction: CorrectionConfig, image_token_id: int | None = None,
                 retrieval: RetrievalConfig = RetrievalConfig(), unroll: int = 2):
        super().__init__()
        self.drafter, self.correction, self.image_token_id = drafter, correction, image_token_id
        self.retrieval, self.unroll = retrieval, unroll

    def forward(self, art: dict, ids, loss_mask, att, ground=None):
        return drafter_loss(self.drafter, art, ids, loss_mask, att, self.correction, self.retrieval,
                            image_token_id=self.image_token_id, ground=ground, unroll=self.unroll)


class Progress:
    """Optimiser steps, epoch and batches seen in it; checkpointed with the accelerator state."""

    def __init__(self):
        self.step, self.epoch, self.batches = 0, 0, 0

    def state_dict(self) -> dict:
        return {"step": self.step, "epoch": self.epoch, "batches": self.batches}

    def load_state_dict(self, state: dict) -> None:
        self.step, self.epoch, self.batches = state["step"], state["epoch"], state["batches"]


def make_accelerator(cfg):
    """An Accelerator for drafter training: bf16 autocast on GPU only (fp32 on CPU), gradient
    accumulation, a seedable sampler (the same data order on resume), DDP with unused parameters
    allowed (the corrector is idle on batches without visual memory)."""
    from accelerate import Accelerator, DataLoaderConfiguration
    from accelerate.utils import DistributedDataParallelKwargs, set_seed

    cuda = torch.cuda.is_available()
    acc = Accelerator(gradient_accumulation_steps=cfg.grad_accum, mixed_precision="bf16" if cuda else "no",
                      cpu=not cuda, dataloader_config=DataLoaderConfiguration(use_seedable_sampler=True),
                      kwargs_handlers=[DistributedDataParallelKwargs(find_unused_parameters=True)])
    set_seed(cfg.seed)
    return acc


def train(target_ref: str, records_path: Path, out: Path, cfg: RecordTrainConfig, images_dir: Path | None = None,
          resume: bool = False, stop_at: int | None = None, target=None) -> dict:
    """Train and export a drafter; returns the last step's metrics. `stop_at`: end this run
    (checkpointed, drafter exported) at that optimiser step, for time-boxed jobs; --resume goes on.
    `target` (an already loaded target) skips loading `target_ref` (tests)."""
    acc = make_accelerator(cfg)
    records = load_records(records_path, images_dir)
    if target is None:
        from fovea.backbones import load_backbone

        target = load_backbone(target_ref, device=acc.device)
    target.model.requires_grad_(False)
    ccfg = CorrectionConfig(enabled=cfg.correction)
    drafter = Drafter(drafter_config_for(target, cfg.num_layers, cfg.context), ccfg).bind(target).train()
    loader = torch.utils.data.DataLoader(RecordDataset(records), batch_size=cfg.batch_size, shuffle=True,
                                         collate_fn=Collator(target, cfg.max_answer_tokens),
                                         num_workers=cfg.num_workers)
    if acc.is_main_process:
        out.mkdir(parents=True, exist_ok=True)
        (out / "train_config.json").write_text(json.dumps({**asdict(cfg), "target": str(target_ref),
                                                           "records": str(records_path)}, indent=2))

    def inputs(batch):
        ids, att, labels, images = batch
        return target_artifacts(target, ids, att, images), ids, att, answer_loss_mask(labels), None

    return fit(acc, DrafterObjective(drafter, ccfg, target.image_token_id), loader, inputs, cfg, out, resume,
               stop_at)


def fit(acc, objective: DrafterObjective, loader, inputs, cfg, out: Path, resume: bool = False,
        stop_at: int | None = None, on_save=None) -> dict:
    """The optimisation loop shared by the online and the dump trainers: AdamW, checkpoints under
    out/checkpoints (`on_save(step, drafter, folder)` runs after each, on the main process), resume,
    the drafter exported to `out` with metrics.json. cfg: total_steps, lr, warmup, weight_decay,
    save_every, keep_checkpoints. Returns the last step's metrics."""
    from tqdm import tqdm

    opt = torch.optim.AdamW(objective.parameters(), lr=cfg.lr, betas=(0.9, 0.95), weight_decay=cfg.weight_decay)
    objective, opt, loader = acc.prepare(objective, opt, loader)
    progress = Progress()
    acc.register_for_checkpointing(progress)
    ckpt_dir = out / "checkpoints"
    if resume and (last := latest_checkpoint(ckpt_dir)) is not None:
        acc.load_state(str(last))
        acc.print(f"resumed from {last} at step {progress.step}")
    bar = tqdm(initial=progress.step, total=cfg.total_steps, desc="drafter", dynamic_ncols=True,
               disable=not acc.is_main_process)
    metrics, end = {}, min(cfg.total_steps, stop_at or cfg.total_steps)

    def save(step: int) -> None:
        save_checkpoint(acc, ckpt_dir, step, cfg.keep_checkpoints)
        if on_save is not None and acc.is_main_process:
            on_save(step, acc.unwrap_model(objective).drafter, ckpt_dir / f"step_{step:08d}")

    while progress.step < end:
        metrics = _epoch(acc, inputs, objective, opt, loader, progress, cfg, save, bar, end) or metrics
    bar.close()
    save(progress.step)
    acc.wait_for_everyone()
    if acc.is_main_process:
        acc.unwrap_model(objective).drafter.eval().save_pretrained(out)
        (out / "metrics.json").write_text(json.dumps({"step": progress.step, **metrics}, indent=2))
    return metrics


def _epoch(acc, inputs, objective, opt, loader, progress, cfg, save, bar, end: int) -> dict:
    """One pass over the (remaining) data of the current epoch; stops early at step `end`. `inputs`:
    batch -> (artifacts, ids, att, loss mask, ground or None); `save(step)` checkpoints."""
    loader.set_epoch(progress.epoch)                   # seedable sampler: the same order on resume
    data = acc.skip_first_batches(loader, progress.batches) if progress.batches else loader
    metrics = {}
    for batch in data:
        with acc.accumulate(objective):
            # 1. target artifacts: features, logits, visual tokens (the frozen target now, or a dump)
            art, ids, att, loss_mask, ground = inputs(batch)
            # 2. drafter loss (depth 0 and depth 1), backward, step at accumulation boundaries
            loss, m = objective(art, ids, loss_mask, att, ground)
            acc.backward(loss)
            if acc.sync_gradients:
                acc.clip_grad_norm_(objective.parameters(), 1.0)
                for group in opt.param_groups:     # schedule by optimiser step: resumes with `progress`
                    group["lr"] = lr_at(progress.step, cfg.total_steps, cfg.lr, cfg.warmup)
            opt.step()                             # no-ops between accumulation boundaries
            opt.zero_grad(set_to_none=True)
        progress.batches += 1
        if acc.sync_gradients:
            progress.step += 1
            metrics = {"loss": loss.item(), **m}
            bar.update(1)
            bar.set_postfix(loss=f"{metrics['loss']:.3f}", acc1=f"{m['acc1']:.2f}", acc2=f"{m['acc2']:.2f}")
            if progress.step % cfg.save_every == 0:
                save(progress.step)
            if progress.step >= end:
                return metrics
    progress.epoch, progress.batches = progress.epoch + 1, 0
    return metrics


def save_checkpoint(acc, ckpt_dir: Path, step: int, keep: int) -> None:
    """accelerator.save_state to ckpt_dir/step_XXXXXXXX; older checkpoints beyond `keep` are removed."""
    acc.save_state(str(ckpt_dir / f"step_{step:08d}"))
    acc.wait_for_everyone()
    if acc.is_main_process:
        for old in sorted(ckpt_dir.glob("step_*"))[:-keep]:
            shutil.rmtree(old)


def latest_checkpoint(ckpt_dir: Path) -> Path | None:
    found = sorted(ckpt_dir.glob("step_*")) if ckpt_dir.is_dir() else []
    return found[-1] if found else None


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m fovea.train online", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--target", required=True, help="target checkpoint folder or Hub id (see fovea.backbones)")
    p.add_argument("--records", type=Path, required=True, help="JSONL of image/question/answer records")
    p.add_argument("--images-dir", type=Path, help="folder the image paths are relative to (default: the JSONL's)")
    p.add_argument("--out", type=Path, required=True, help="drafter output folder (checkpoints go under it)")
    p.add_argument("--resume", action="store_true", help="continue from the latest checkpoint in OUT/checkpoints")
    p.add_argument("--stop-at", type=int, help="end this run at this optimiser step (checkpointed; --resume goes on)")
    for f in fields(RecordTrainConfig):
        flag = "--" + f.name.replace("_", "-")
        if f.type in (bool, "bool"):
            p.add_argument(flag, action=argparse.BooleanOptionalAction, default=f.default)
        else:
            p.add_argument(flag, type=type(f.default), default=f.default)
    args = p.parse_args(argv)
    cfg = RecordTrainConfig(**{f.name: getattr(args, f.name) for f in fields(RecordTrainConfig)})
    train(args.target, args.records, args.out, cfg, args.images_dir, args.resume, args.stop_at)


if __name__ == "__main__":
    main()

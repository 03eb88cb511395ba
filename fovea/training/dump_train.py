"""`python -m fovea.train fit --config run.yaml`: train a FOVEA drafter from a dump, with accelerate
(1 CPU, 1 GPU or many: `accelerate launch -m fovea.train fit --config run.yaml`).

The target never runs: each batch is read from `data.dumps` (`fovea.training.dump`), the target's
logits are its stored LM head applied to the stored last-layer states, and the losses are the online
trainer's (`drafter_loss`: hidden + KL + token, `training.unroll` drafting steps, the retrieval
grounding term where the dump holds grounding labels and `correction.ground_weight` > 0). Both
drafter contexts (`drafter.context`), either memory source, with or without correction
(`correction.enabled: false` is the no-correction twin, trained from the same dump). Checkpoints
under training.out/checkpoints each hold the drafter (`drafter/`) and the resolved run config, for
checkpoint selection (`python -m fovea.train accept --select`). Knows nothing about how dumps are made.
"""
from __future__ import annotations

import argparse
from pathlib import Path

import torch

from fovea.drafter import Drafter
from fovea.training.accelerate_train import DrafterObjective, fit, make_accelerator
from fovea.training.dump import DumpError
from fovea.training.dumps import DumpDataset, DumpHead, collate_dumped, dumped_inputs
from fovea.training.run_config import RunConfig, add_run_args, from_args, write_resolved


def build_drafter(head: DumpHead, cfg: RunConfig) -> Drafter:
    """A fresh drafter for the dump's target, shaped by cfg.drafter, bound to the dump's head."""
    d = cfg.drafter
    torch.manual_seed(cfg.training.seed)
    return Drafter(head.drafter_config(d.num_layers, d.context, d.memory_source), cfg.correction).bind(head).train()


def train_from_dumps(cfg: RunConfig, resume: bool = False, stop_at: int | None = None) -> dict:
    """Train and export a drafter to cfg.training.out from cfg.data.dumps; returns the last metrics."""
    t, out = cfg.training, Path(cfg.training.out)
    acc = make_accelerator(t)
    head, dataset = DumpHead(cfg.data.dumps).to(acc.device), DumpDataset(cfg.data.dumps)
    drafter = build_drafter(head, cfg)
    objective = DrafterObjective(drafter, cfg.correction, head.image_token_id, cfg.retrieval, t.unroll)
    loader = torch.utils.data.DataLoader(dataset, batch_size=t.batch_size, shuffle=t.shuffle,
                                         collate_fn=collate_dumped)
    extra = {"dump": {"folder": str(cfg.data.dumps), "target": head.meta["target"],
                      "fingerprint": head.meta["fingerprint"], "samples": len(dataset)}}
    if acc.is_main_process:
        write_resolved(cfg, out, extra)

    def on_save(step: int, model: Drafter, folder: Path) -> None:
        model.save_pretrained(folder / "drafter")
        write_resolved(cfg, folder / "drafter", {**extra, "step": step})

    return fit(acc, objective, loader, dumped_inputs(head), t, out, resume, stop_at, on_save)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m fovea.train fit", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_run_args(p)
    p.add_argument("--resume", action="store_true", help="continue from the latest checkpoint in training.out")
    p.add_argument("--stop-at", type=int, help="end this run at this optimiser step (checkpointed; --resume goes on)")
    args = p.parse_args(argv)
    cfg = from_args(p, args)
    if args.stop_at is not None and args.stop_at < 1:
        p.error(f"--stop-at must be >= 1, got {args.stop_at}")
    try:
        metrics = train_from_dumps(cfg, args.resume, args.stop_at)
    except DumpError as err:
        raise SystemExit(f"fit: {err}") from None
    shown = ", ".join(f"{k} {metrics[k]:.3f}" for k in ("loss", "acc1", "acc2") if k in metrics)
    print(f"fit: drafter written to {cfg.training.out} ({shown})")


if __name__ == "__main__":
    main()

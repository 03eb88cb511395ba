"""`python -m fovea.train diffusion`: adapt the shipped autoregressive target into a masked-diffusion
VLM (fovea.diffusion) on world v2, Dream / DiffuLLaMA-style: start from the target's weights, make
the answer canvas bidirectional, and train on the masked-diffusion objective (fovea.diffusion.objective:
t ~ U(0, 1), each answer token masked with probability t, cross-entropy on masked positions scaled by 1/t).

The vision tower and projector stay frozen; the decoder, embeddings and LM head train. Each step draws
`batch_size` single-turn samples (seeds step*B ... (step+1)*B - 1, every family and task) and masks them
with a generator seeded by (seed, step), so a resumed run repeats the batches and masks it would have
drawn. `--focus-tasks` puts a share of each batch on the named tasks. `--init-from` an exported denoiser
(e.g. assets/diffusion) continues it: step numbering (and so the data) goes on from its last step, with a
fresh optimiser and a new warm-up and cosine over the added steps. Writes checkpoints (resume), log.jsonl (loss), curves.jsonl (teacher-free masked-token accuracy
on held-out samples at fixed masking rates), eval.jsonl (decoded accuracy) in --run-dir, and an fp16
export to --out. Knows nothing about early exit.
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from tqdm import tqdm

from fovea.data import make_sample, tuning_seeds
from fovea.diffusion.config import METHODS
from fovea.diffusion.model import DEFAULT_DIFFUSION_DIR, CanvasConfig, from_target
from fovea.diffusion.objective import answer_canvas, diffusion_loss, mask_canvas, mask_prefix_rows
from fovea.models.bundled import DEFAULT_TARGET_DIR
from fovea.training.common import (AUTOCAST_CHOICES, Checkpointer, Timer, add_config_args, append_jsonl,
                                   bf16_autocast, config_from_args, lr_at)
from fovea.training.target import ALL_TASKS, focused_task, parse_focus, stop_on_sigterm, to_device

PROBE_RATES = (0.5, 1.0)     # masking rates of the held-out probe (1.0: the whole canvas from the prompt alone)


@dataclass(frozen=True)
class DiffusionTrainConfig:
    batch_size: int = 16            # single-turn samples per step
    lr: float = 3e-4
    weight_decay: float = 0.05
    warmup: int = 50
    total_steps: int = 6000         # the LR schedule length (warm-up, cosine to 10%); --minutes may stop earlier
    canvas_length: int = 96
    mask_token_id: int = 4          # "<unk>" of the bundled tokenizer (fovea.diffusion.model)
    seed: int = 0
    stress_weight: float = 1.0      # the loss on the answers' stress tokens (a chart value walk's stop), as the
    mention_weight: float = 1.0     # target recipe weighs them and the mention tokens; 1, 1: the plain bound
    prefix_share: float = 0.0       # rows masked as blocks of 1 decode: a clean prefix, the rest masked


def canvas_weights(samples, model, stress_weight: float = 1.0, mention_weight: float = 1.0) -> torch.Tensor:
    """float [B, L]: stress_weight on canvas tokens that overlap an answer's stress span, mention_weight on
    those inside a mention, 1 elsewhere (EOS padding included), as the target's packing weighs them."""
    from fovea.training.packing import answer_tokens

    length = model.canvas.length
    out = torch.ones(len(samples), length)
    for i, s in enumerate(samples):
        _, objs, _, stress = answer_tokens(model.tokenizer, s, length - 1)
        for j, (obj, st) in enumerate(zip(objs[:-1], stress[:-1])):
            out[i, j] = stress_weight if st else mention_weight if obj >= 0 else 1.0
    return out


def samples_batch(samples, model) -> dict:
    """Left-padded prompts [B, P] and their mask, pixels [B, 3, S, S] and clean canvases [B, L]."""
    tok, length = model.tokenizer, model.canvas.length
    prompts = [model.prompt_ids(s.question) for s in samples]
    width = max(map(len, prompts))
    prefix = torch.full((len(samples), width), tok.pad_token_id, dtype=torch.long)
    prefix_mask = torch.zeros_like(prefix)
    for i, p in enumerate(prompts):
        prefix[i, width - len(p):], prefix_mask[i, width - len(p):] = torch.tensor(p), 1
    answers = [tok(" " + s.answer, add_special_tokens=False)["input_ids"] for s in samples]
    canvas = torch.tensor([answer_canvas(a, length, model.eos_id) for a in answers])
    return {"prefix": prefix, "prefix_mask": prefix_mask, "canvas": canvas,
            "pixels": torch.cat([model.pixels(s.image) for s in samples])}


def step_samples(step: int, batch_size: int, focus=(), share: float = 0.0) -> list:
    """A step's samples: seeds step*B .. (step+1)*B - 1. With `focus` ([(family, task)]), each seed asks one
    of those tasks (drawn per seed) with probability `share`, else whatever make_sample draws."""
    return [make_sample(seed, *focused_task(seed, focus, share, salt="diffusion-focus"))
            for seed in range(step * batch_size, (step + 1) * batch_size)]


def training_batch(step: int, cfg: DiffusionTrainConfig, model, focus=(), share: float = 0.0) -> dict:
    """The deterministic batch of a step (step_samples) and its masks."""
    samples = step_samples(step, cfg.batch_size, focus, share)
    batch = samples_batch(samples, model)
    if (cfg.stress_weight, cfg.mention_weight) != (1.0, 1.0):
        batch["weights"] = canvas_weights(samples, model, cfg.stress_weight, cfg.mention_weight)
    gen = torch.Generator().manual_seed(cfg.seed * 1_000_003 + step)
    batch["noisy"], batch["masked"], batch["rate"] = mask_prefix_rows(
        batch["canvas"], *mask_canvas(batch["canvas"], model.canvas.mask_token_id, gen),
        model.canvas.mask_token_id, model.eos_id, cfg.prefix_share, gen)
    return batch


def train_step(model, batch: dict) -> torch.Tensor:
    logits = model(batch["prefix"], batch["prefix_mask"], batch["pixels"], batch["noisy"])
    return diffusion_loss(logits, batch["canvas"], batch["masked"], batch["rate"], batch.get("weights"))


@torch.no_grad()
def probe(model, n_per_task: int = 2) -> dict:
    """Held-out masked-token accuracy (answer tokens and EOS padding apart) at each of PROBE_RATES: one
    batched forward per rate on tuning seeds, no decoding."""
    was = model.training
    model.eval()
    samples = [make_sample(s, f, t) for f, t in ALL_TASKS for s in tuning_seeds(n_per_task)]
    batch = to_device(samples_batch(samples, model), model.device)
    out = {}
    for rate in PROBE_RATES:
        gen = torch.Generator().manual_seed(int(rate * 1000))
        masked = (torch.rand(batch["canvas"].shape, generator=gen) < rate).to(model.device)
        noisy = batch["canvas"].masked_fill(masked, model.canvas.mask_token_id)
        right = model(batch["prefix"], batch["prefix_mask"], batch["pixels"], noisy).argmax(-1) == batch["canvas"]
        pad = batch["canvas"] == model.eos_id
        for name, where in (("answer", masked & ~pad), ("pad", masked & pad)):
            out[f"mask{rate:g}/{name}_acc"] = round(float(right[where].float().mean()), 4)
    model.train(was)
    return out


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog="python -m fovea.train diffusion", description=__doc__)
    p.add_argument("--init-from", type=Path, default=DEFAULT_TARGET_DIR,
                   help="the autoregressive target to adapt, or an exported denoiser to continue (its steps go on)")
    p.add_argument("--out", type=Path, default=DEFAULT_DIFFUSION_DIR, help="where the final fp16 model goes")
    p.add_argument("--run-dir", type=Path, default=Path("runs/diffusion"), help="checkpoints + logs (resume)")
    p.add_argument("--minutes", type=float, default=60.0, help="stop after this much wall time")
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    p.add_argument("--device", default="cpu", help="cpu, cuda, cuda:1 ...")
    p.add_argument("--save-every", type=int, default=100)
    p.add_argument("--probe-every", type=int, default=50, help="held-out masked-token accuracy (curves.jsonl)")
    p.add_argument("--eval-every", type=int, default=0, help="decoded accuracy every this many steps (0: at the end only)")
    p.add_argument("--eval-n", type=int, default=3, help="held-out questions per task in each decoded evaluation")
    p.add_argument("--eval-method", default="threshold", choices=METHODS,
                   help="the decoding the evaluation uses (fovea.diffusion.config)")
    p.add_argument("--focus-tasks", nargs="+", default=[], metavar="FAMILY/TASK",
                   help="tasks a share of each batch asks (e.g. chart/value scene/count ocr/read)")
    p.add_argument("--focus-share", type=float, default=0.5, help="that share, in [0, 1]")
    p.add_argument("--autocast", default="auto", choices=AUTOCAST_CHOICES,
                   help="auto: bf16 autocast on CUDA and on CPUs with AMX-BF16 or AVX512-BF16, fp32 elsewhere")
    add_config_args(p, DiffusionTrainConfig)
    args = p.parse_args(argv)
    if not 0.0 <= args.focus_share <= 1.0:
        p.error(f"--focus-share must be in [0, 1], got {args.focus_share}")
    if args.batch_size < 1 or args.minutes <= 0 or args.total_steps < 1:
        p.error("--batch-size and --total-steps must be >= 1 and --minutes > 0")
    if not 0.0 <= args.prefix_share <= 1.0:
        p.error(f"--prefix-share must be in [0, 1], got {args.prefix_share}")
    if min(args.stress_weight, args.mention_weight) <= 0:
        p.error("--stress-weight and --mention-weight must be > 0")
    if not 8 <= args.canvas_length <= 256:
        p.error(f"--canvas-length must be in [8, 256], got {args.canvas_length}")
    if min(args.save_every, args.probe_every) < 1 or args.eval_every < 0 or args.eval_n < 0:
        p.error("--save-every and --probe-every must be >= 1, --eval-every and --eval-n >= 0")
    if not (args.init_from / "config.json").exists():
        p.error(f"--init-from {args.init_from} holds no exported target (config.json)")
    return args


def main(argv=None) -> None:
    from fovea.bench.diffusion import accuracy

    args = parse_args(argv)
    cfg = config_from_args(args, DiffusionTrainConfig)
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(cfg.seed)
    focus = parse_focus(args.focus_tasks)
    run = args.run_dir
    run.mkdir(parents=True, exist_ok=True)
    canvas = CanvasConfig(cfg.canvas_length, cfg.mask_token_id)
    exported, continued = exported_denoiser(args.init_from)
    if exported is not None and (exported["length"], exported["mask_token_id"]) != (canvas.length, canvas.mask_token_id):
        raise SystemExit(f"--init-from {args.init_from} is a denoiser with a canvas of {exported['length']} and mask "
                         f"token {exported['mask_token_id']}: pass the same --canvas-length and --mask-token-id")
    try:
        model = from_target(args.init_from, canvas)
    except ValueError as e:
        raise SystemExit(str(e))
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay, betas=(0.9, 0.95))
    ckpt = Checkpointer(run)
    step, extra = ckpt.load({"model": model, "opt": opt})
    warm_start = extra.get("warm_start", 0)
    if step == 0 and continued:
        step = warm_start = continued
    if warm_start >= cfg.total_steps:
        raise SystemExit(f"--init-from {args.init_from} ends at step {warm_start}: --total-steps "
                         f"({cfg.total_steps}) counts from step 0, so pass more than that")
    model.to(args.device).train()
    autocast, bf16 = bf16_autocast(torch.device(args.device), args.autocast)
    (run / "train_config.json").write_text(json.dumps({**asdict(cfg), "init_from": str(args.init_from)}, indent=2))
    append_jsonl(run / "launches.jsonl", {"step": step, "argv": list(sys.argv[1:] if argv is None else argv)})
    tqdm.write(f"diffusion: {sum(p.numel() for p in params) / 1e6:.1f}M trainable, "
               f"{'bf16 autocast' if bf16 else 'fp32'} on {args.device}, from step {step}")
    if step == 0:
        append_jsonl(run / "curves.jsonl", {"step": 0, "minutes": 0.0, **probe(model)})
    timer, bar = Timer(), tqdm(initial=step, total=cfg.total_steps, desc="diffusion", dynamic_ncols=True)
    stop = stop_on_sigterm()
    while step < cfg.total_steps and timer.minutes() < args.minutes and not stop:
        lr = lr_at(step - warm_start, cfg.total_steps - warm_start, cfg.lr, cfg.warmup)
        for g in opt.param_groups:
            g["lr"] = lr
        batch = to_device(training_batch(step, cfg, model, focus, args.focus_share), torch.device(args.device))
        with autocast:
            loss = train_step(model, batch)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        step += 1
        bar.update(1)
        bar.set_postfix(loss=f"{loss.item():.3f}")
        append_jsonl(run / "log.jsonl", {"step": step, "loss": round(loss.item(), 4), "lr": lr,
                                         "minutes": round(timer.minutes(), 2)})
        if step % args.save_every == 0:
            ckpt.save(step, {"model": model, "opt": opt}, {"warm_start": warm_start})
        if step % args.probe_every == 0:
            append_jsonl(run / "curves.jsonl", {"step": step, "minutes": round(timer.minutes(), 2), **probe(model)})
        if args.eval_every and step % args.eval_every == 0 and args.eval_n:
            append_jsonl(run / "eval.jsonl", {"step": step, **accuracy(model, args.eval_n, args.eval_method)})
    ckpt.save(step, {"model": model, "opt": opt}, {"warm_start": warm_start})
    if args.eval_n:
        append_jsonl(run / "eval.jsonl", {"step": step, **accuracy(model, args.eval_n, args.eval_method)})
    export(model.cpu(), args.out, cfg, step, run)


def exported_denoiser(folder: Path) -> tuple[dict | None, int]:
    """(the canvas settings, the steps it was trained for) of an exported denoiser (config.json's
    "fovea_diffusion", train_config.json's "steps"); (None, 0) for an autoregressive target."""
    settings = json.loads((folder / "config.json").read_text()).get("fovea_diffusion")
    train = folder / "train_config.json"
    if settings is None or not train.exists():
        return settings, 0
    return settings, int(json.loads(train.read_text()).get("steps", 0))


def export(model, out: Path, cfg: DiffusionTrainConfig, step: int, run_dir: Path) -> None:
    """The committed asset: fp16 safetensors + tokenizer + the training config + the run's curves."""
    model.eval().save(out)
    (out / "train_config.json").write_text(json.dumps({**asdict(cfg), "steps": step}, indent=2))
    for name in ("log.jsonl", "curves.jsonl", "eval.jsonl", "launches.jsonl"):
        if (run_dir / name).exists():
            (out / name).write_text((run_dir / name).read_text())


if __name__ == "__main__":
    main()

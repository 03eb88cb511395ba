"""Train the bundled target VLM from scratch on generated samples.

Loss = next-token cross-entropy on answer tokens + `aux_weight` x dense per-patch cross-entropy
(colour / shape / character / ... heads on the projected visual tokens, labels from the generator).
The auxiliary term is what makes a tiny from-scratch VLM actually look at the image (see
shared NOTES: with next-token loss alone colour accuracy stayed at chance).
"""
from __future__ import annotations

import argparse
import json
import re
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from tqdm import tqdm

from fovea.data import NUM_LABELS, eval_seeds, iter_corpus_text, make_sample
from fovea.models.bundled import (BundledModelConfig, DEFAULT_TARGET_DIR, build_model, encode_prompt,
                                  image_to_pixels, load_tokenizer, save_config_json, train_tokenizer)
from fovea.training.common import (Checkpointer, Timer, add_config_args, append_jsonl, collate,
                                   config_from_args, lr_at)

EVAL_TASKS = (("scene", "colour"), ("scene", "count"), ("ocr", "read"))


@dataclass(frozen=True)
class TargetTrainConfig:
    preset: str = "small"
    batch_size: int = 24
    lr: float = 1e-3
    weight_decay: float = 0.05
    warmup: int = 200
    total_steps: int = 20000        # the LR schedule length; training may stop earlier on --minutes
    aux_weight: float = 1.0
    seed: int = 0
    vocab_size: int = 1024


class AuxHeads(torch.nn.Module):
    """One linear classifier per patch-label kind over the projected visual tokens [B, 64, D]."""

    def __init__(self, dim: int):
        super().__init__()
        self.heads = torch.nn.ModuleDict({k: torch.nn.Linear(dim, n) for k, n in NUM_LABELS.items()})

    def forward(self, feats: torch.Tensor, labels: dict) -> torch.Tensor:
        losses = [F.cross_entropy(head(feats).flatten(0, 1), labels[k].flatten(), ignore_index=-100)
                  for k, head in self.heads.items() if (labels[k] != -100).any()]
        return torch.stack(losses).mean()


def train_step(model, aux, batch, aux_weight: float):
    ids, att, lab, pixels, patch = batch
    out = model.model(input_ids=ids, attention_mask=att, pixel_values=pixels)
    logits = model.lm_head(out.last_hidden_state[:, :-1])              # [B, T-1, V]
    lm = F.cross_entropy(logits.flatten(0, 1), lab[:, 1:].flatten(), ignore_index=-100)
    feats = out.image_hidden_states                                   # per image [64, D], or [B*64, D]
    feats = torch.stack(list(feats)) if isinstance(feats, (list, tuple)) else feats
    aux_loss = aux(feats.reshape(ids.shape[0], -1, feats.shape[-1]), patch)
    return lm, aux_loss


@torch.no_grad()
def evaluate(model, tokenizer, n_per_task: int = 20, max_new_tokens: int = 72, tasks=EVAL_TASKS) -> dict:
    """Exact-answer accuracy on held-out seeds (never used in training): the short answer appears
    as whole words in the greedy output."""
    model.eval()
    results = {}
    for family, task in tasks:
        hits = 0
        for seed in eval_seeds(n_per_task):
            s = make_sample(seed, family=family, task=task)
            ids = torch.tensor([encode_prompt(tokenizer, s.question)])
            out = model.generate(input_ids=ids, pixel_values=image_to_pixels(s.image), do_sample=False,
                                 max_new_tokens=max_new_tokens, pad_token_id=tokenizer.pad_token_id)
            text = tokenizer.decode(out[0, ids.shape[1]:], skip_special_tokens=True)
            hits += bool(re.search(r"(?<!\w)" + re.escape(s.short_answer) + r"(?!\w)", text))
        results[f"{family}/{task}"] = hits / n_per_task
    model.train()
    return results


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m fovea.train target", description=__doc__)
    p.add_argument("--out", type=Path, default=DEFAULT_TARGET_DIR, help="where the final fp16 model goes")
    p.add_argument("--run-dir", type=Path, default=Path("runs/target"), help="checkpoints + logs (resume)")
    p.add_argument("--minutes", type=float, default=60.0, help="stop after this much wall time")
    p.add_argument("--eval-every", type=int, default=1000)
    p.add_argument("--save-every", type=int, default=200)
    p.add_argument("--focus-tasks", nargs="+", default=[], metavar="FAMILY/TASK",
                   help="oversample these tasks (e.g. scene/colour chart/value): a seeded --focus-share of "
                        "every batch is drawn from them, the rest from the usual mix")
    p.add_argument("--focus-share", type=float, default=0.5)
    p.add_argument("--init-from", type=Path, help="continue from an exported model folder (e.g. assets/target) "
                   "when --run-dir holds no checkpoint; the optimiser state starts fresh")
    add_config_args(p, TargetTrainConfig)
    args = p.parse_args(argv)
    cfg = config_from_args(args, TargetTrainConfig)
    focus = parse_focus(args.focus_tasks)
    if not 0.0 <= args.focus_share <= 1.0:
        raise SystemExit(f"--focus-share must be in [0, 1], got {args.focus_share}")
    torch.manual_seed(cfg.seed)
    run = args.run_dir
    run.mkdir(parents=True, exist_ok=True)
    tok_dir = run / "tokenizer"
    if not (tok_dir / "tokenizer.json").exists():
        if args.init_from:        # continuing an exported model: its tokenizer, never a new one
            load_tokenizer(args.init_from).save_pretrained(str(tok_dir))
        else:
            train_tokenizer(iter_corpus_text(20000), cfg.vocab_size).save_pretrained(str(tok_dir))
    tokenizer = load_tokenizer(tok_dir)
    model = build_model(BundledModelConfig.from_name(cfg.preset), tokenizer, seed=cfg.seed).train()
    aux = AuxHeads(model.config.text_config.hidden_size)
    params = list(model.parameters()) + list(aux.parameters())
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay, betas=(0.9, 0.95))
    ckpt = Checkpointer(run)
    step, extra = ckpt.load({"model": model, "aux": aux, "opt": opt})
    if step == 0 and args.init_from:
        step = init_from_export(model, aux, args.init_from)
    save_config_json(run, "train_config.json", cfg)
    timer, bar = Timer(), tqdm(initial=step, total=cfg.total_steps, desc="target", dynamic_ncols=True)
    while step < cfg.total_steps and timer.minutes() < args.minutes:
        seeds = range(step * cfg.batch_size, (step + 1) * cfg.batch_size)   # deterministic data order
        batch = collate([training_sample(s, focus, args.focus_share) for s in seeds], tokenizer)
        for g in opt.param_groups:
            g["lr"] = lr_at(step, cfg.total_steps, cfg.lr, cfg.warmup)
        lm, aux_loss = train_step(model, aux, batch, cfg.aux_weight)
        opt.zero_grad(set_to_none=True)
        (lm + cfg.aux_weight * aux_loss).backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        step += 1
        bar.update(1)
        bar.set_postfix(lm=f"{lm.item():.3f}", aux=f"{aux_loss.item():.3f}")
        append_jsonl(run / "log.jsonl", {"step": step, "lm": lm.item(), "aux": aux_loss.item(),
                                         "minutes": round(timer.minutes(), 2)})
        if step % args.save_every == 0:
            ckpt.save(step, {"model": model, "aux": aux, "opt": opt})
        if step % args.eval_every == 0:
            acc = evaluate(model, tokenizer)
            append_jsonl(run / "eval.jsonl", {"step": step, **acc})
            tqdm.write(f"step {step}: {acc}")
    ckpt.save(step, {"model": model, "aux": aux, "opt": opt})
    export(model, tokenizer, args.out, cfg, step, aux, run)


def parse_focus(items: list[str]) -> list[tuple[str, str]]:
    """["scene/colour", ...] -> [("scene", "colour"), ...], checked against the generator's tasks."""
    from fovea.data import TASKS

    out = []
    for item in items:
        family, _, task = item.partition("/")
        if task not in TASKS.get(family, ()):
            known = ", ".join(f"{f}/{t}" for f, ts in TASKS.items() for t in ts)
            raise SystemExit(f"unknown task {item!r}; choose from {known}")
        out.append((family, task))
    return out


def training_sample(seed: int, focus: list[tuple[str, str]], share: float):
    """The sample of a training seed; with probability `share` (seeded by the seed) one of the focus tasks."""
    import random

    rng = random.Random(f"focus/{seed}")
    if focus and rng.random() < share:
        family, task = rng.choice(focus)
        return make_sample(seed, family=family, task=task)
    return make_sample(seed)


def export(model, tokenizer, out: Path, cfg: TargetTrainConfig, step: int, aux: AuxHeads | None = None,
           run_dir: Path | None = None) -> None:
    """The committed asset: fp16 safetensors + tokenizer + the training config (loaded back as fp32),
    the auxiliary heads (so training can continue from the export) and the eval log."""
    from safetensors.torch import save_file

    out.mkdir(parents=True, exist_ok=True)
    model.eval().half().save_pretrained(str(out), safe_serialization=True)
    model.float()
    tokenizer.save_pretrained(str(out))
    (out / "train_config.json").write_text(json.dumps({**asdict(cfg), "steps": step}, indent=2))
    if aux is not None:
        save_file({k: v.detach().half().contiguous() for k, v in aux.state_dict().items()},
                  str(out / "aux_heads.safetensors"))
    if run_dir is not None and (run_dir / "eval.jsonl").exists():
        (out / "eval_log.jsonl").write_text((run_dir / "eval.jsonl").read_text())


def init_from_export(model, aux: AuxHeads, folder: Path) -> int:
    """Load an exported model (and its aux heads when present); returns the step it was exported at."""
    from safetensors.torch import load_file
    from transformers import LlavaForConditionalGeneration

    exported = LlavaForConditionalGeneration.from_pretrained(str(folder), dtype=torch.float32)
    model.load_state_dict(exported.state_dict())
    if (folder / "aux_heads.safetensors").exists():
        aux.load_state_dict({k: v.float() for k, v in load_file(str(folder / "aux_heads.safetensors")).items()})
    config = folder / "train_config.json"
    return int(json.loads(config.read_text()).get("steps", 0)) if config.exists() else 0


if __name__ == "__main__":
    main()

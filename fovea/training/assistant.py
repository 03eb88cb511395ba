"""`python -m fovea.train assistant`: the small assistant LM for transformers' assisted generation
(`generate(assistant_model=...)`), the alternative a transformers user would reach for.

A text-only Llama of the drafter's size (1 decoder layer, the target's hidden width and
vocabulary/tokenizer), trained from scratch with next-token cross-entropy on the answers of the
same generated world (its own seed range, so it never sees evaluation seeds). It reads the same
token ids as the target (the 64 `<image>` placeholders included) but never the pixels: that is
what an off-the-shelf small LM of the same family gives assisted generation.
"""
from __future__ import annotations

import argparse
import json
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from tqdm import tqdm

from fovea.data import make_sample
from fovea.models.bundled import (DEFAULT_ASSISTANT_DIR, DEFAULT_TARGET_DIR, load_tokenizer, prompt_format,
                                  save_config_json)
from fovea.training.common import (Checkpointer, Timer, add_config_args, append_jsonl, collate_text,
                                   config_from_args, lr_at)


@dataclass(frozen=True)
class AssistantTrainConfig:
    batch_size: int = 32
    lr: float = 2e-3
    weight_decay: float = 0.05
    warmup: int = 100
    total_steps: int = 1500
    num_layers: int = 1
    seed: int = 2
    seed_offset: int = 7_000_000     # its own training seeds (all < the eval range)


def build_assistant(target_config, tokenizer, num_layers: int = 1, seed: int = 0):
    """A LlamaForCausalLM with the target's width, heads, MLP size and vocabulary."""
    from transformers import LlamaConfig, LlamaForCausalLM

    text = target_config.get_text_config()
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=text.vocab_size, hidden_size=text.hidden_size,
                      intermediate_size=text.intermediate_size, num_hidden_layers=num_layers,
                      num_attention_heads=text.num_attention_heads,
                      num_key_value_heads=text.num_key_value_heads,
                      max_position_embeddings=text.max_position_embeddings,
                      pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.bos_token_id,
                      eos_token_id=tokenizer.eos_token_id, tie_word_embeddings=False)
    cfg._attn_implementation = "sdpa"
    return LlamaForCausalLM(cfg)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m fovea.train assistant", description=__doc__)
    p.add_argument("--target", type=Path, default=DEFAULT_TARGET_DIR, help="whose tokenizer and shape to use")
    p.add_argument("--out", type=Path, default=DEFAULT_ASSISTANT_DIR)
    p.add_argument("--run-dir", type=Path, default=Path("runs/assistant"))
    p.add_argument("--minutes", type=float, default=15.0)
    p.add_argument("--save-every", type=int, default=100)
    add_config_args(p, AssistantTrainConfig)
    return p


def main(argv=None) -> None:
    p = build_parser()
    args = p.parse_args(argv)
    cfg = config_from_args(args, AssistantTrainConfig)
    if not (args.target / "config.json").exists():
        raise SystemExit(f"{args.target} is not a target folder (no config.json)")
    from transformers import AutoConfig

    tokenizer = load_tokenizer(args.target)
    model = build_assistant(AutoConfig.from_pretrained(str(args.target)), tokenizer, cfg.num_layers, cfg.seed).train()
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay, betas=(0.9, 0.95))
    ckpt = Checkpointer(args.run_dir)
    step, _ = ckpt.load({"model": model, "opt": opt})
    fmt = prompt_format(AutoConfig.from_pretrained(str(args.target)))  # the target's prompt layout
    save_config_json(args.run_dir, "train_config.json", cfg)
    timer, bar = Timer(), tqdm(initial=step, total=cfg.total_steps, desc="assistant", dynamic_ncols=True)
    loss = None
    while step < cfg.total_steps and timer.minutes() < args.minutes:
        base = cfg.seed_offset + step * cfg.batch_size
        ids, att, lab = collate_text([make_sample(i) for i in range(base, base + cfg.batch_size)], tokenizer, fmt=fmt)
        for g in opt.param_groups:
            g["lr"] = lr_at(step, cfg.total_steps, cfg.lr, cfg.warmup)
        logits = model(input_ids=ids, attention_mask=att).logits[:, :-1]
        loss = F.cross_entropy(logits.flatten(0, 1), lab[:, 1:].flatten(), ignore_index=-100)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        bar.update(1)
        bar.set_postfix(loss=f"{loss.item():.3f}")
        append_jsonl(args.run_dir / "log.jsonl", {"step": step, "loss": loss.item(),
                                                  "minutes": round(timer.minutes(), 2)})
        if step % args.save_every == 0:
            ckpt.save(step, {"model": model, "opt": opt})
    ckpt.save(step, {"model": model, "opt": opt})
    args.out.mkdir(parents=True, exist_ok=True)
    model.eval().half().save_pretrained(str(args.out), safe_serialization=True)
    tokenizer.save_pretrained(str(args.out))
    (args.out / "train_config.json").write_text(json.dumps(
        {**asdict(cfg), "steps": step, "final_loss": None if loss is None else round(loss.item(), 4)}, indent=2))
    print(f"assistant: {step} steps, saved to {args.out}")


if __name__ == "__main__":
    main()

"""`python -m fovea.train dump`: run the frozen target once per training sample and store what the
drafter's losses read, so drafters are trained many times from one pass of the target (SpecForge's
offline mode, vLLM speculators' one safetensors file per sample).

Layout of a dump folder (`data.dumps`):
    meta.json            the target (fingerprint, shapes, image token), the source, the storage dtype
    head.safetensors     the target's token embedding and LM head: the only target weights a drafter needs
    index.jsonl          one line per written sample: id, file, tokens, visual entries, bytes, family
    shard_00000/00000000.safetensors, ...   one file per sample (data.shard_size per shard folder)
    run_config.yaml      the resolved run config
    dump_runs.jsonl      per dump run: samples written and wall seconds
Each sample file: input_ids [T] int32, loss_mask [T] bool (position j predicts an answer token),
hidden [T, D] (the target's last-layer states, the LM-head input), visual [N, D] (the projected
visual tokens), next_tokens [T] int32 (the target's argmax), optionally topk_ids / topk_logits [T, k]
and ground [T, N] bool (the bundled world's grounding labels). Hidden, visual and top-k logits are
stored in data.dtype (fp16 / bf16). Resumable: a sample already in the index is not computed again.
Knows nothing about drafters' losses (see `fovea.training.dumps` for reading).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import time
from dataclasses import asdict
from pathlib import Path

import torch

from fovea.training.run_config import RunConfig, add_run_args, from_args, write_resolved

FORMAT = 1
INDEX, META, HEAD, RUNS = "index.jsonl", "meta.json", "head.safetensors", "dump_runs.jsonl"
PER_TOKEN_FIXED = 4 + 1 + 4        # input_ids int32, loss_mask bool, next_tokens int32


class DumpError(ValueError):
    """A dump that cannot be written or read; the message says what to do."""


def bytes_per_sample(tokens: int, visual: int, hidden: int, dtype_bytes: int = 2, top_k: int = 0,
                     ground: bool = False) -> int:
    """Tensor bytes of one sample file (headers excluded, ~0.5 KB more):
    T (4 + 1 + 4) + T D b + N D b + T k (4 + b) + [T N when grounding labels are stored]."""
    return (tokens * PER_TOKEN_FIXED + (tokens + visual) * hidden * dtype_bytes
            + tokens * top_k * (4 + dtype_bytes) + (tokens * visual if ground else 0))


def examples(target, cfg: RunConfig) -> list:
    """The samples to dump, in id order: records, or generator seeds (with their family)."""
    data = cfg.data
    if data.records is not None:
        from fovea.training.records import load_records

        return load_records(data.records, data.images_dir)
    from fovea.data import FAMILIES

    unknown = sorted(set(data.families) - set(FAMILIES))
    if unknown:
        raise DumpError(f"data.families: unknown {unknown}; expected some of {list(FAMILIES)}")
    seeds = range(data.seed_offset, data.seed_offset + data.samples)
    return [(s, data.families[s % len(data.families)] if data.families else None) for s in seeds]


def collate(target, cfg: RunConfig, items: list) -> dict:
    """Items of `examples` -> one teacher-forced batch: input_ids, attention_mask, loss_mask [B, T],
    image inputs, families, and ground [B, T, N] or None. The bundled target packs generator samples
    exactly as the online drafter trainer does (`drafter_cli.batches`)."""
    from fovea.training.drafter import answer_loss_mask
    from fovea.training.records import Collator

    if cfg.data.records is not None:
        from PIL import Image

        rows = []
        for r in items:
            with Image.open(r.image) as im:
                rows.append((im.convert("RGB"), r.question, r.answer))
        families = [None] * len(items)
    else:
        from fovea.data import make_sample

        samples = [make_sample(s, family=f) for s, f in items]
        families = [s.family for s in samples]
        if hasattr(target, "prompt_order"):            # the bundled target: its own packing, with grounding
            from fovea.training.packing import as_conversation, pack_batch

            b = pack_batch([as_conversation(s) for s in samples], target.tokenizer,
                           (target.num_image_tokens, target.prompt_order),
                           max_answer_tokens=cfg.data.max_answer_tokens, image_size=target.image_size)
            return {"input_ids": b["input_ids"], "attention_mask": b["attention_mask"],
                    "loss_mask": answer_loss_mask(b["labels"]), "images": b["pixel_values"],
                    "families": families, "ground": b["ground_patches"]}
        rows = [(s.image, s.question, s.answer) for s in samples]
    ids, att, labels, images = Collator(target, cfg.data.max_answer_tokens)(rows)
    return {"input_ids": ids, "attention_mask": att, "loss_mask": answer_loss_mask(labels), "images": images,
            "families": families, "ground": None}


def sample_tensors(art: dict, batch: dict, row: int, dtype: torch.dtype, top_k: int) -> dict:
    """Row `row` of a batch's target artifacts, cut to its length, as the tensors of one sample file."""
    n = int(batch["attention_mask"][row].sum())
    logits = art["logits"][row, :n]                                   # [T, V] float32
    visual = art["visual"][row]
    out = {"input_ids": batch["input_ids"][row, :n].to(torch.int32),
           "loss_mask": batch["loss_mask"][row, :n].bool(),
           "hidden": art["feats"][row, :n].to(dtype),
           "visual": visual.to(dtype),
           "next_tokens": logits.argmax(-1).to(torch.int32)}
    if top_k:
        top = logits.topk(top_k, dim=-1)
        out["topk_ids"], out["topk_logits"] = top.indices.to(torch.int32), top.values.to(dtype)
    if batch["ground"] is not None:
        out["ground"] = batch["ground"][row, :n].bool()
    return {k: v.detach().cpu().contiguous() for k, v in out.items()}


def target_meta(target, cfg: RunConfig, ref: str, count: int) -> dict:
    from fovea.checkpoints import decoder_fingerprint, target_fingerprint
    from fovea.drafter import drafter_config_for

    head = target_fingerprint(target)
    return {"format": FORMAT, "target": ref, "fingerprint": head,
            "decoder_fingerprint": decoder_fingerprint(target, head), "dtype": cfg.data.dtype,
            "hidden_size": target.hidden_size, "vocab_size": target.vocab_size,
            "image_token_id": target.image_token_id, "memory_grid": getattr(target, "memory_grid", None),
            "drafter_base": asdict(drafter_config_for(target)),
            "source": cfg.data.records or "generator", "samples": count,
            "seed_offset": None if cfg.data.records else cfg.data.seed_offset,
            "families": list(cfg.data.families), "top_k": cfg.data.top_k}


def write_head(target, folder: Path) -> None:
    """The token embedding and LM head (and its bias, if any) in the target's own dtype."""
    from safetensors.torch import save_file

    head = {"embed": target.embed_weight, "lm_head": target.lm_head_weight}
    bias = getattr(target.model.get_output_embeddings(), "bias", None)
    if bias is not None:
        head["lm_head_bias"] = bias
    save_file({k: v.detach().cpu().contiguous() for k, v in head.items()}, str(folder / HEAD))


def open_dump(folder: Path, meta: dict) -> set[int]:
    """Create the folder, or check an existing one was made the same way; -> the ids already written."""
    folder.mkdir(parents=True, exist_ok=True)
    if (folder / META).exists():
        old = json.loads((folder / META).read_text())
        keys = ("format", "fingerprint", "dtype", "source", "seed_offset", "families", "top_k")
        changed = [k for k in keys if old.get(k) != meta.get(k)]
        if changed:
            raise DumpError(f"{folder} holds a dump made differently ({', '.join(changed)} differ); "
                            "pick a new data.dumps folder or delete this one.")
    (folder / META).write_text(json.dumps(meta, indent=2))
    done = set()
    if (folder / INDEX).exists():
        for line in (folder / INDEX).read_text().splitlines():
            if line.strip():
                done.add(json.loads(line)["id"])
    return done


def write_sample(folder: Path, sid: int, tensors: dict, shard_size: int, family: str | None) -> dict:
    """Atomically write one sample file; -> its index entry."""
    from safetensors.torch import save_file

    rel = Path(f"shard_{sid // shard_size:05d}") / f"{sid:08d}.safetensors"
    (folder / rel.parent).mkdir(exist_ok=True)
    tmp = folder / rel.with_suffix(".tmp")
    save_file(tensors, str(tmp))
    os.replace(tmp, folder / rel)
    return {"id": sid, "file": rel.as_posix(), "tokens": int(tensors["input_ids"].shape[0]),
            "visual": int(tensors["visual"].shape[0]), "bytes": (folder / rel).stat().st_size, "family": family}


def announce_size(folder: Path, cfg: RunConfig, first: dict, todo: int, target) -> None:
    """Print the space the remaining samples will take (estimated from the first batch) and refuse
    to start when the disk has less free."""
    dtype_bytes = 2
    sizes = [bytes_per_sample(int(n), int(v.shape[0]), target.hidden_size, dtype_bytes, cfg.data.top_k,
                              first["ground"] is not None)
             for n, v in zip(first["attention_mask"].sum(1), first["visual"])]
    per = sum(sizes) / len(sizes) + 512
    head = 2 * target.vocab_size * target.hidden_size * target.embed_weight.element_size()
    need = per * todo + head
    free = shutil.disk_usage(folder).free
    print(f"dump: {todo} samples to write to {folder}, ~{per / 1e3:.1f} KB each "
          f"(T {sum(int(n) for n in first['attention_mask'].sum(1)) / len(sizes):.0f}, "
          f"D {target.hidden_size}, {cfg.data.dtype}): about {need / 1e6:.1f} MB needed, {free / 1e9:.1f} GB free",
          flush=True)
    if need > free:
        raise DumpError(f"the dump needs about {need / 1e9:.2f} GB but {folder} has {free / 1e9:.2f} GB free.")


@torch.no_grad()
def dump(target, cfg: RunConfig, ref: str, progress: bool = True) -> Path:
    """Write (or complete) the dump of `cfg.data` for `target`; returns the folder."""
    from tqdm import tqdm

    from fovea.training.drafter import target_artifacts

    t0 = time.perf_counter()
    folder, data = Path(cfg.data.dumps), cfg.data
    items = examples(target, cfg)
    done = open_dump(folder, target_meta(target, cfg, ref, len(items)))
    if not (folder / HEAD).exists():
        write_head(target, folder)
    write_resolved(cfg, folder)
    todo = [i for i in range(len(items)) if i not in done]
    dtype = getattr(torch, data.dtype)
    bar = tqdm(total=len(items), initial=len(items) - len(todo), desc="dump", dynamic_ncols=True, disable=not progress)
    with open(folder / INDEX, "a") as index:
        for start in range(0, len(todo), data.batch_size):
            ids = todo[start:start + data.batch_size]
            batch = collate(target, cfg, [items[i] for i in ids])
            art = target_artifacts(target, batch["input_ids"], batch["attention_mask"], batch["images"])
            if start == 0:
                announce_size(folder, cfg, {**batch, "visual": art["visual"]}, len(todo), target)
            for row, sid in enumerate(ids):
                entry = write_sample(folder, sid, sample_tensors(art, batch, row, dtype, data.top_k),
                                     data.shard_size, batch["families"][row])
                index.write(json.dumps(entry) + "\n")
            index.flush()
            bar.update(len(ids))
    bar.close()
    with open(folder / RUNS, "a") as f:            # the dump's own wall time, counted once against training
        f.write(json.dumps({"written": len(todo), "seconds": round(time.perf_counter() - t0, 2)}) + "\n")
    return folder


def load_target_for(cfg: RunConfig):
    """The target of cfg.target (any supported backbone), frozen."""
    from fovea.backbones import load_backbone

    target = load_backbone(cfg.target.path, image_size=cfg.target.image_size)
    target.model.requires_grad_(False)
    return target


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m fovea.train dump", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_run_args(p)
    args = p.parse_args(argv)
    cfg = from_args(p, args)
    from fovea.backbones import BackboneError
    from fovea.training.records import RecordError

    try:
        target = load_target_for(cfg)
        folder = dump(target, cfg, cfg.target.path)
    except (BackboneError, RecordError, DumpError) as err:
        raise SystemExit(f"dump: {err}") from None
    print(f"dump: {folder} complete")


if __name__ == "__main__":
    main()

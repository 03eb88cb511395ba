"""`python -m fovea.train drafter`: train the bundled FOVEA drafter and, in the same loop on the
same batches, the no-correction (EAGLE-style) baseline drafter; export both as fp16 safetensors.
"""
from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from tqdm import tqdm

from fovea.checkpoints import CheckpointError, check_correction_weights
from fovea.config import CorrectionConfig, range_of
from fovea.data import FAMILIES, make_sample
from fovea.drafter import BASE_PARTS, Drafter, drafter_config_for
from fovea.methods import FULL, ROLES
from fovea.models.bundled import ASSETS, DEFAULT_TARGET_DIR, load_target, save_config_json
from fovea.training.common import (AUTOCAST_CHOICES, Checkpointer, Timer, add_config_args, append_jsonl, bf16_autocast,
                                   config_from_args, lr_at)
from fovea.training.packing import as_conversation, pack_batch
from fovea.training.run_config import TrainingConfig
from fovea.training.drafter import train_steps
from fovea.training.dumps import DumpDataset, DumpHead, dumped_inputs, step_batches


@dataclass(frozen=True)
class DrafterTrainConfig:
    batch_size: int = 16
    lr: float = 1e-3
    warmup: int = 100
    total_steps: int = 3000
    num_layers: int = 1
    context: str = "full"            # "text": cache-friendly drafters whose cache skips the image
    memory_source: str = "projected"  # "hidden": the memory is the target's last-layer image states (DrafterConfig)
    seed: int = 1
    seed_offset: int = 5_000_000     # training seeds for the drafter data (all < the eval range)
    # unrolled drafting steps per position (training-time test; the paper: 2, i.e. depths 0 and 1). More (a
    # deviation) trains the draft states deeper levels read, for a correction deeper than depth 1 (max_depth)
    unroll: int = 2
    # the family of each training sample, drawn round robin over this list (repeats weight a family, e.g.
    # ocr ocr scene chart); empty: the data's own round robin over scene / ocr / chart. A deviation
    # (measured in the README): where the draft needs the image most, OCR, gets more of the batches
    families: tuple[str, ...] = ()


def sample_family(seed: int, families: tuple[str, ...]) -> str | None:
    """The family of training sample `seed`: round robin over `families`, or None (the data's own)."""
    return families[seed % len(families)] if families else None


def batches(target, cfg: DrafterTrainConfig, start_step: int):
    """Seeded single-turn batches in the target's own prompt format and image geometry:
    (ids, attention mask, labels, pixels, ground patches [B, T, N]: per position, the patches of what
    the next token names, for drafters trained with a retrieval-grounding loss)."""
    fmt = (target.num_image_tokens, target.prompt_order)
    for step in itertools.count(start_step):
        base = cfg.seed_offset + step * cfg.batch_size
        convs = [as_conversation(make_sample(s, family=sample_family(s, cfg.families)))
                 for s in range(base, base + cfg.batch_size)]
        b = pack_batch(convs, target.tokenizer, fmt, image_size=target.image_size)
        yield b["input_ids"], b["attention_mask"], b["labels"], b["pixel_values"], b["ground_patches"]


def correction_variant(pairs: list[str]) -> CorrectionConfig:
    """["propagate=true", "hidden=64"] -> CorrectionConfig with those fields (correction enabled)."""
    fields = {f.name: f for f in dataclasses.fields(CorrectionConfig)}
    changes = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or key not in fields or key == "enabled":
            raise ValueError(f"{pair!r} is not KEY=VALUE with KEY one of {sorted(set(fields) - {'enabled'})}")
        if fields[key].type in (bool, "bool"):
            if value.lower() not in ("true", "false", "1", "0"):
                raise ValueError(f"{key} takes true or false, got {value!r}")
            changes[key] = value.lower() in ("true", "1")
        elif fields[key].type in (float, "float"):
            try:
                changes[key] = float(value)
            except ValueError:
                raise ValueError(f"{key} takes a number, got {value!r}") from None
        else:
            try:
                changes[key] = int(value)
            except ValueError:
                raise ValueError(f"{key} takes a whole number, got {value!r}") from None
    return CorrectionConfig(**changes)


def warm_start(drafter: Drafter, source: Drafter) -> None:
    """Load `source`'s weights into `drafter`. A deeper drafter (--num-layers 2 from a 1-block one)
    takes the source's blocks as its first blocks; each added block starts as the identity (its
    attention and MLP output projections zeroed, the residual carries the input through), so the
    warm-started drafter drafts exactly as the source did at step 0."""
    have, want = source.cfg.num_layers, drafter.cfg.num_layers
    if want < have:
        raise SystemExit(f"--init-from drafter has {have} blocks, more than --num-layers {want}")
    # the memory source changes what the memory encoder reads, not any weight's shape
    if dataclasses.replace(source.cfg, num_layers=want, memory_source=drafter.cfg.memory_source) != drafter.cfg:
        raise SystemExit("--init-from drafter has another shape or context than the one being trained "
                         f"({source.cfg} vs {drafter.cfg})")
    try:   # a twin saved without its correction weights cannot start a drafter that corrects
        check_correction_weights(source, drafter.correction_cfg)
    except CheckpointError as err:
        raise SystemExit(f"--init-from: {err}") from err
    missing, unexpected = drafter.load_state_dict(source.state_dict(), strict=False)
    new_blocks = {f"blocks.{i}." for i in range(have, want)}
    if unexpected or any(not any(k.startswith(b) for b in new_blocks) for k in missing):
        raise SystemExit(f"--init-from weights do not fit: missing {missing}, unexpected {unexpected}")
    with torch.no_grad():
        for i in range(have, want):
            drafter.blocks[i].o.weight.zero_()
            drafter.blocks[i].down.weight.zero_()


# the pair's names in this run's checkpoints and metrics, whatever --context trains (fovea.methods.ROLES)
FOVEA, TWIN, _ = ROLES


def freeze_base(drafter: Drafter) -> None:
    """--adapter: only the visual memory encoder, the retriever and the corrector keep training."""
    for name, q in drafter.named_parameters():
        q.requires_grad_(not name.startswith(BASE_PARTS))


def training_source(p: argparse.ArgumentParser, args):
    """(the frozen target, None), or with --dumps (the dump's `DumpHead`, its dataset)."""
    if args.dumps is None:
        target = load_target(args.target)
        target.model.requires_grad_(False)
        return target, None
    from fovea.training.dump import DumpError

    try:
        head = DumpHead(args.dumps)
        return head, DumpDataset(args.dumps)
    except DumpError as err:
        p.error(f"--dumps: {err}")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m fovea.train drafter", description=__doc__)
    p.add_argument("--target", type=Path, default=DEFAULT_TARGET_DIR)
    p.add_argument("--dumps", type=Path,
                   help="train from a dump (python -m fovea.train dump) instead of running --target on every batch: "
                        "batches are the dump's samples in order (--batch-size each; --seed-offset and --families "
                        "are the dump's), the target's embedding and LM head come from the dump")
    p.add_argument("--dump-shuffle", type=int, default=None, metavar="SEED",
                   help="with --dumps: read the dump in a permutation seeded by SEED (a new one each epoch) instead of "
                        "dump order; for several runs trained from one shared dump (`rebuild --shared-dump`)")
    p.add_argument("--out", type=Path, default=ASSETS / FULL.folders[0])
    p.add_argument("--baseline-out", type=Path, default=ASSETS / FULL.folders[1])
    p.add_argument("--run-dir", type=Path, default=Path("runs/drafter"))
    p.add_argument("--minutes", type=float, default=30.0)
    p.add_argument("--save-every", type=int, default=50)
    p.add_argument("--init-from", type=Path, nargs=2, metavar=("FOVEA_DIR", "BASELINE_DIR"),
                   help="continue from exported drafters (e.g. assets/{} assets/{}) when ".format(*FULL.folders) +
                        "--run-dir holds no checkpoint; the optimiser and the LR schedule start fresh")
    p.add_argument("--adapter", action="store_true",
                   help="a deviation (measured in the README): train only the FOVEA drafter's visual memory encoder, "
                        "retriever and corrector, on top of a frozen copy of the --init-from no-correction drafter "
                        "(its input projection, blocks and final norm). The twin is not trained or re-exported, so "
                        "FOVEA drafts exactly as its twin wherever the gate stays shut")
    p.add_argument("--fovea", nargs="+", default=[], metavar="KEY=VALUE",
                   help="CorrectionConfig fields of the main FOVEA drafter (default: the paper's), e.g. --fovea hidden=64 "
                        "max_depth=8 to continue a 64-wide drafter corrected at every depth")
    p.add_argument("--variant", nargs="+", action="append", default=[], metavar=("OUT", "KEY=VALUE"),
                   help="also train a FOVEA drafter with these CorrectionConfig fields on the same batches from the "
                        "same initialisation, exported to OUT (repeatable), e.g. --variant assets/d_prop "
                        "propagate=true --variant assets/d_w64 hidden=64; the bench decodes it with --drafters")
    p.add_argument("--autocast", default="auto", choices=AUTOCAST_CHOICES,
                   help="auto: bf16 autocast on CPUs with AMX-BF16 or AVX512-BF16 (and CUDA), fp32 elsewhere; bf16 / fp32 force it")
    add_config_args(p, DrafterTrainConfig)
    return p


def main(argv=None) -> None:
    p = build_parser()
    args = p.parse_args(argv)
    cfg = config_from_args(args, DrafterTrainConfig)
    unroll = range_of(TrainingConfig, "unroll")
    if cfg.unroll not in unroll:
        p.error(f"--unroll must be {unroll.text}, got {cfg.unroll}")
    unknown = sorted(set(cfg.families) - set(FAMILIES))
    if unknown:
        p.error(f"--families: unknown {unknown}; expected some of {list(FAMILIES)}")
    if args.dump_shuffle is not None and args.dumps is None:
        p.error("--dump-shuffle orders a dump's samples: it needs --dumps")
    if args.adapter and not args.init_from:
        p.error("--adapter needs --init-from FOVEA_DIR BASELINE_DIR: the frozen base is BASELINE_DIR's drafter")
    target, dumped = training_source(p, args)
    torch.manual_seed(cfg.seed)
    try:
        base = drafter_config_for(target, cfg.num_layers, cfg.context) if dumped is None else \
            target.drafter_config(cfg.num_layers, cfg.context)
        dcfg = dataclasses.replace(base, memory_source=cfg.memory_source)
    except ValueError as err:
        p.error(str(err))
    try:
        main_ccfg = correction_variant(args.fovea)
    except ValueError as err:
        p.error(f"--fovea: {err}")
    ccfgs = {FOVEA: main_ccfg, TWIN: CorrectionConfig(enabled=False)}
    variants = {}
    for out, *pairs in args.variant:
        try:
            ccfg = correction_variant(pairs)
        except ValueError as err:
            p.error(f"--variant {out}: {err}")
        name = f"variant:{Path(out).name}"
        ccfgs[name], variants[name] = ccfg, Path(out)
    drafters = {}
    for name, ccfg in ccfgs.items():
        torch.manual_seed(cfg.seed)       # identical initialisation of the shared parts
        drafters[name] = Drafter(dcfg, ccfg).bind(target).train()
    fovea, baseline = drafters[FOVEA], drafters[TWIN]
    trained = {name: d for name, d in drafters.items() if not (args.adapter and name == TWIN)}
    if args.adapter:   # the base's weights arrive with the warm start below; freezing does not depend on them
        for name, d in trained.items():
            freeze_base(d)
    params = [q for d in trained.values() for q in d.parameters() if q.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=0.0, betas=(0.9, 0.95))
    ckpt = Checkpointer(args.run_dir)
    step, _ = ckpt.load({**drafters, "opt": opt})
    if step == 0 and args.init_from:
        for drafter, folder in zip((fovea, baseline), args.init_from):
            warm_start(drafter, Drafter.from_pretrained(folder))
        if args.adapter:   # FOVEA's base becomes its twin's; its correction modules keep FOVEA_DIR's weights
            for name, d in trained.items():
                d.load_state_dict({k: v for k, v in baseline.state_dict().items() if k.startswith(BASE_PARTS)},
                                  strict=False)
        for name in variants:   # from FOVEA's weights where the shapes agree (a narrower corrector starts fresh)
            own = drafters[name].state_dict()
            drafters[name].load_state_dict({k: v for k, v in fovea.state_dict().items() if own[k].shape == v.shape},
                                           strict=False)
        metas = [json.loads((f / "train_config.json").read_text()) if (f / "train_config.json").exists() else {}
                 for f in args.init_from]
        previous = [m.get("steps", 0) for m in metas]
        if previous[0] != previous[1]:
            raise SystemExit(f"--init-from drafters were trained for different steps {previous}: not a fair pair")
        (args.run_dir / "init_from.json").write_text(json.dumps(
            {"folders": [str(f) for f in args.init_from], "steps_before": previous[0],
             "adapter_steps_before": metas[0].get("adapter_steps", 0)}))
    save_config_json(args.run_dir, "train_config.json", cfg)
    autocast, bf16 = bf16_autocast(torch.device("cpu"), args.autocast)
    append_jsonl(args.run_dir / "precision.jsonl", {"step": step, "autocast": "bf16" if bf16 else "fp32"})
    timer = Timer()
    bar = tqdm(initial=step, total=cfg.total_steps, desc="drafters", dynamic_ncols=True)
    if dumped is None:
        data, inputs = batches(target, cfg, step), None
    else:
        data = step_batches(dumped, cfg.batch_size, step, shuffle=args.dump_shuffle is not None,
                            seed=args.dump_shuffle or 0)
        inputs = dumped_inputs(target)
    last = {}

    def on_step(i, metrics):
        nonlocal step, last
        step, last = step + 1, metrics
        bar.update(1)
        bar.set_postfix({name: f"{metrics[name + '/acc1']:.2f}/{metrics[name + '/acc2']:.2f}"
                         for name in (FOVEA, TWIN) if name + "/acc1" in metrics})
        append_jsonl(args.run_dir / "log.jsonl", {"step": step, **metrics})
        if step % args.save_every == 0:
            ckpt.save(step, {**drafters, "opt": opt})

    while step < cfg.total_steps and timer.minutes() < args.minutes:
        for g in opt.param_groups:
            g["lr"] = lr_at(step, cfg.total_steps, cfg.lr, cfg.warmup)
        train_steps(target, trained, data, ccfgs, opt, 1, on_step, unroll=cfg.unroll, autocast=autocast, inputs=inputs)
    ckpt.save(step, {**drafters, "opt": opt})
    init = json.loads((args.run_dir / "init_from.json").read_text()) if (args.run_dir / "init_from.json").exists() \
        else {}
    before, adapter_before = init.get("steps_before", 0), init.get("adapter_steps_before", 0)
    exports = [(FOVEA, args.out), *([] if args.adapter else [(TWIN, args.baseline_out)]),
               *variants.items()]
    for name, folder in exports:
        # an adapter is saved without the twin's base it froze, naming the twin's folder (fovea.drafter)
        drafters[name].eval().save_pretrained(folder, base=args.init_from[1] if args.adapter else None)
        # an adapter's shared parts are its twin's, trained `before` steps: "steps" stays the twin's, so the
        # pair still continues together; the correction-only steps are counted apart
        steps = {"steps": before, "adapter_of": str(args.init_from[1]),
                 "adapter_steps": adapter_before + step} if args.adapter else {"steps": before + step}
        (folder / "train_config.json").write_text(json.dumps(
            {**asdict(cfg), **steps, "steps_this_run": step, "steps_before": before,
             **({"dumps": str(args.dumps), "dump_shuffle": args.dump_shuffle} if args.dumps else {})}, indent=2))
        (folder / "metrics.json").write_text(json.dumps(
            {k.split("/", 1)[1]: v for k, v in last.items() if k.startswith(name + "/")}, indent=2))


if __name__ == "__main__":
    main()

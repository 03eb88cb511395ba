"""`python -m fovea.train deep`: a deep bundled target (target v3) distilled from a shallow teacher.

The student is the teacher's LLaVA with a deeper Llama decoder: it keeps the teacher's vision tower,
projector, embeddings and LM head (frozen: the student reads the same visual tokens and writes into the
same vocabulary space) and trains only its decoder layers and final norm. Its decoder starts either
from random initialisation (`--init random`) or from the teacher's layers stacked: each teacher layer
copied L/T times with its residual writes (o_proj, down_proj) scaled by T/L (`--init stack`), so every
copy does a share of the work from the first step.

Loss = the target recipe's weighted next-token cross-entropy on answer tokens (mention and stress
tokens up-weighted)
     + kd_weight x KL(teacher || student) of the next-token distributions on the same answer tokens
     + hidden_weight x the normalised squared distance between the student's stream after layer
       (k+1)L/T - 1 and the teacher's after layer k, on every non-padding position (image tokens
       included: that is where the lookups are prepared), for k = 0..T-1.
With `kd_gate`, the last two terms apply only to sequences whose fact tokens (mentions, stress) the
teacher predicts right (teacher-forced argmax), so the student learns layouts the teacher misreads from the labels alone.
The last term gives each group of L/T student layers the work of one teacher layer; no subset of
every (L/T)-th layer is asked to carry the function (`python -m fovea.train layer-use` checks it).
With `vision_lr_scale` > 0 the vision tower and projector train too (at lr x that scale), with
  + aux_weight x the per-patch label loss (shape, colour, glyph: the teacher's aux heads, trained along)
on the projected visual tokens: the teacher's tower never saw the widened world's looks, and on
held-out looks it misread bar-label characters (G for C, U for V) that no decoder can recover.
`vision_steps` first trains the tower alone (no decoder pass: aux_images images a step, only the
per-patch loss), a cheap drill before the joint steps let the decoder follow the changed tokens.

Knows nothing about speculative decoding. Writes checkpoints (resume), log.jsonl, curves.jsonl
(teacher-forced probe) and eval.jsonl (greedy accuracy) in --run-dir, and an fp16 export to --out.
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from tqdm import tqdm

from fovea.data import FAMILIES
from fovea.models.bundled import DEFAULT_TARGET_DIR, load_tokenizer, save_config_json
from fovea.training.common import (AUTOCAST_CHOICES, Checkpointer, Timer, add_config_args, append_jsonl,
                                   bf16_autocast, config_from_args)
from fovea.training.glyph_slots import GlyphSlotHead
from fovea.training.target import (AUX_LOOKS, AUX_SEED_START, FOCUS_LOOKS, AuxHeads, TargetTrainConfig, aux_image_loss,
                                   aux_images, drill_batch, evaluate, export, lr_wsd, parse_focus, probe,
                                   stop_on_sigterm, to_device, training_batch, weighted_lm_loss)

INITS = ("random", "stack")
# what the student takes from the teacher unchanged and never trains (its decoder layers and final norm train)
VISION_PREFIXES = ("model.vision_tower.", "model.multi_modal_projector.")
# the aux-only images (--aux-images), in turn, drawn in training looks: glyphs on charts first
AUX_FAMILIES = ("chart", "chart", "ocr", "scene")
# a run's glyph-slot head, exported beside aux_heads.safetensors so that a continuation (--init-from)
# goes on with the trained head instead of a fresh one whose first gradients (at 10x lr) reach the tower
SLOT_HEAD_FILE = "glyph_slots.safetensors"
FROZEN_PREFIXES = VISION_PREFIXES + ("model.language_model.embed_tokens.", "lm_head.")


@dataclass(frozen=True)
class DeepTargetConfig:
    layers: int = 16                # student decoder layers (a multiple of the teacher's)
    intermediate_size: int = 512    # student MLP width (hidden size, heads and vocabulary are the teacher's)
    init: str = "random"            # random | stack (see the module docstring)
    batch_size: int = 8             # images per step
    turns: int = 4                  # question/answer turns packed per image
    lr: float = 1e-3
    weight_decay: float = 0.05
    warmup: int = 100
    total_steps: int = 20000        # the LR schedule length; training may stop earlier on --minutes
    decay_frac: float = 0.2         # warmup-stable-decay: the LR decays over the last decay_frac of total_steps
    mention_weight: float = 3.0
    stress_weight: float = 6.0
    kd_weight: float = 1.0          # KL(teacher || student) on answer tokens
    hidden_weight: float = 1.0      # the student's stream every L/T layers against the teacher's per layer
    kd_gate: bool = True            # distil (KL and hidden) only on rows whose answers the teacher gets right
    drill_rows: int = 0             # text-only chart-value drills per step (distilled like the images)
    vision_lr_scale: float = 0.0    # > 0: the vision tower and projector train at lr x this; 0: frozen
    aux_weight: float = 0.5         # the per-patch label loss on the visual tokens (only when the vision trains)
    aux_images: int = 0             # extra images per step through the vision tower alone, for that loss
    aux_families: tuple = AUX_FAMILIES  # the families those images are drawn from, in turn
    aux_looks: str = "mixed"        # those images' looks (target.AUX_LOOKS): "wide" draws every chart and scene
                                    # in a training look, where "mixed" leaves half in the base look; "labels"
                                    # puts half the charts in 2-3-letter labels in non-regular faces,
                                    # "condensed" in the condensed face alone
    vision_steps: int = 0           # the first steps after a (warm) start train the tower alone on aux images
    slot_weight: float = 0.0        # > 0: the aux images' glyph-slot loss (fovea.training.glyph_slots) at this
                                    # weight: both glyphs that share a 16-px patch, read off its visual token
    slot_shared_weight: float = 1.0 # that loss's weight on the glyph slots of patches holding two glyphs
    focus_looks: str = "mixed"      # focused chart conversations' looks (target.FOCUS_LOOKS): "labels" or
                                    # "condensed" draw them in looks.label_look, so the decoder reads such labels
    seed: int = 0


def build_student(teacher, cfg: DeepTargetConfig):
    """The student LLaVA: the teacher's config with `cfg.layers` decoder layers of MLP width
    `cfg.intermediate_size`; vision tower, projector, embeddings and LM head copied and frozen; the
    decoder initialised per `cfg.init`. Returns the model in train mode (float32, sdpa)."""
    import copy

    from transformers import LlavaForConditionalGeneration

    t_layers = teacher.config.text_config.num_hidden_layers
    if cfg.init not in INITS:
        raise ValueError(f"init must be one of {INITS}, got {cfg.init!r}")
    if cfg.layers < t_layers or cfg.layers % t_layers:
        raise ValueError(f"the student's layers ({cfg.layers}) must be a multiple of the teacher's ({t_layers})")
    if cfg.init == "stack" and cfg.intermediate_size != teacher.config.text_config.intermediate_size:
        raise ValueError("--init stack copies the teacher's layers: keep its intermediate size "
                         f"({teacher.config.text_config.intermediate_size})")
    config = copy.deepcopy(teacher.config)
    config.text_config.num_hidden_layers = cfg.layers
    config.text_config.intermediate_size = cfg.intermediate_size
    config._attn_implementation = "sdpa"
    torch.manual_seed(cfg.seed)
    student = LlavaForConditionalGeneration(config)
    own = student.state_dict()
    shared = {k: v for k, v in teacher.state_dict().items()
              if k.startswith(FROZEN_PREFIXES) or k == "model.language_model.norm.weight"}
    if cfg.init == "stack":
        shared.update(stacked_layers(teacher, cfg.layers))
    own.update(shared)
    student.load_state_dict(own)
    for name, p in student.named_parameters():
        p.requires_grad_(trains(name, cfg))
    return student.train()


def trains(name: str, cfg: DeepTargetConfig) -> bool:
    """Whether the student's parameter `name` trains: the decoder and final norm always, the vision tower
    and projector when `cfg.vision_lr_scale` > 0 (less the tower's post_layernorm, which the feature layer
    LLaVA reads comes before), embeddings and LM head never."""
    if "post_layernorm" in name:
        return False
    return not name.startswith(FROZEN_PREFIXES) or (cfg.vision_lr_scale > 0 and name.startswith(VISION_PREFIXES))


def param_groups(student, aux, cfg: DeepTargetConfig) -> list[dict]:
    """AdamW groups, each with its `lr_scale` (the step's lr times it): the decoder at 1, the vision
    tower and projector at `vision_lr_scale` with the aux heads at 1 (only when the vision trains)."""
    named = [(n, p) for n, p in student.named_parameters() if p.requires_grad]
    groups = [{"params": [p for n, p in named if not n.startswith(VISION_PREFIXES)], "lr_scale": 1.0}]
    if cfg.vision_lr_scale > 0:
        groups.append({"params": [p for n, p in named if n.startswith(VISION_PREFIXES)],
                       "lr_scale": cfg.vision_lr_scale})
        slots = getattr(aux, "slots", None)   # a fresh glyph-slot head learns at 10x (a linear read, from zero)
        own = [p for n, p in aux.named_parameters() if not n.startswith("slots.")]
        groups.append({"params": own, "lr_scale": 1.0})
        if slots is not None:
            groups.append({"params": list(slots.parameters()), "lr_scale": 10.0})
    return groups


class ProjectedTokens:
    """A forward hook that keeps the projector's output (the visual tokens [B, N, D]) of the last forward."""

    def __init__(self, model):
        self.tokens = None
        self.handle = model.model.multi_modal_projector.register_forward_hook(self._keep)

    def _keep(self, _module, _inputs, output):
        self.tokens = output

    def remove(self) -> None:
        self.handle.remove()


def stacked_layers(teacher, layers: int) -> dict:
    """The `stack` init: student layer i is teacher layer i // r (r = layers / teacher layers) with
    o_proj and down_proj scaled by 1/r, so r copies together write about what the one original wrote."""
    r = layers // teacher.config.text_config.num_hidden_layers
    out = {}
    for i in range(layers):
        prefix = f"model.language_model.layers.{i // r}."
        for k, v in teacher.state_dict().items():
            if k.startswith(prefix):
                scale = 1.0 / r if k.endswith(("o_proj.weight", "down_proj.weight")) else 1.0
                out[f"model.language_model.layers.{i}." + k[len(prefix):]] = v.clone() * scale
    return out


class LayerOutputs:
    """Forward hooks that keep each decoder layer's output stream [B, T, D] of the last forward."""

    def __init__(self, model):
        self.outputs: list = [None] * len(model.model.language_model.layers)
        self.handles = [layer.register_forward_hook(self._keep(i))
                        for i, layer in enumerate(model.model.language_model.layers)]

    def _keep(self, i: int):
        def hook(_module, _inputs, output):
            self.outputs[i] = output[0] if isinstance(output, tuple) else output
        return hook

    def remove(self) -> None:
        for h in self.handles:
            h.remove()


def kd_loss(student_logits: torch.Tensor, teacher_logits: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """KL(teacher || student) of logits [B, T, V] at positions with weight > 0 [B, T], averaged."""
    on = weights > 0
    if not on.any():
        return student_logits.sum() * 0.0
    log_s = F.log_softmax(student_logits[on].float(), -1)
    log_t = F.log_softmax(teacher_logits[on].float(), -1)
    return F.kl_div(log_s, log_t, log_target=True, reduction="batchmean")


def hidden_loss(student_out: list, teacher_out: list, mask: torch.Tensor) -> torch.Tensor:
    """Mean over teacher layers k of ||s_k - t_k||^2 / ||t_k||^2 on valid positions (mask [B, T]),
    s_k being the student's stream after layer (k+1)r - 1."""
    r = len(student_out) // len(teacher_out)
    on = mask.bool()
    if not on.any():
        return student_out[0].sum() * 0.0
    losses = []
    for k, t in enumerate(teacher_out):
        s, t = student_out[(k + 1) * r - 1][on].float(), t[on].float()
        losses.append((s - t).pow(2).sum(-1).mean() / t.pow(2).sum(-1).mean().clamp_min(1e-6))
    return torch.stack(losses).mean()


def distill_step(student, teacher, hooks: tuple[LayerOutputs, LayerOutputs], batch: dict,
                 cfg: DeepTargetConfig, vision: tuple | None = None) -> dict:
    """One step's losses {lm, kd, hidden, total} on a packed image batch; with `vision` = (the student's
    ProjectedTokens hook, its trainable AuxHeads) also {aux}, the per-patch label loss."""
    inputs = {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"],
              "pixel_values": batch["pixel_values"]}
    with torch.no_grad():
        t_logits = teacher.lm_head(teacher.model(**inputs).last_hidden_state[:, :-1])
    s_logits = student.lm_head(student.model(**inputs).last_hidden_state[:, :-1])
    weights = batch["weights"][:, 1:]
    rows = teacher_right(t_logits, batch) if cfg.kd_gate else torch.ones(weights.shape[0], dtype=torch.bool)
    lm = weighted_lm_loss(s_logits, batch)
    kd = kd_loss(s_logits, t_logits, weights * rows[:, None])
    hid = hidden_loss(hooks[0].outputs, hooks[1].outputs, batch["attention_mask"] * rows[:, None])
    out = {"lm": lm, "kd": kd, "hidden": hid, "gated": (~rows).float().mean(),
           "total": lm + cfg.kd_weight * kd + cfg.hidden_weight * hid}
    if vision is not None:
        tokens, aux = vision
        feats = tokens.tokens.reshape(batch["pixel_values"].shape[0], -1, tokens.tokens.shape[-1])
        out["aux"] = aux(feats, batch["patch_labels"])
        if "aux_pixels" in batch:   # more images through the tower alone, as the shipped recipe did
            out["aux"] = (out["aux"] + aux_image_loss(student, aux, batch)) / 2
        out["total"] = out["total"] + cfg.aux_weight * out["aux"]
    return out


class TowerHeads(torch.nn.Module):
    """The per-patch heads (AuxHeads) plus, on labels that carry glyph slots (the aux images'), the
    glyph-slot head at `slot_weight`: one callable (feats, labels) -> loss, as AuxHeads alone is."""

    def __init__(self, aux: AuxHeads, slots: GlyphSlotHead, slot_weight: float):
        super().__init__()
        self.aux, self.slots, self.slot_weight = aux, slots, slot_weight

    def forward(self, feats: torch.Tensor, labels: dict) -> torch.Tensor:
        loss = self.aux(feats, labels)
        if "glyph_slots" in labels:
            loss = loss + self.slot_weight * self.slots(feats, labels["glyph_slots"])
        return loss


def tower_step(student, aux, batch: dict) -> dict:
    """A tower-only step's loss {aux, total}: the per-patch labels of the aux images read from the
    projected visual tokens, with no decoder pass (only the tower, projector and aux heads get gradients)."""
    loss = aux_image_loss(student, aux, batch)
    return {"aux": loss, "total": loss}


def teacher_right(t_logits: torch.Tensor, batch: dict) -> torch.Tensor:
    """[B] bool: the teacher's teacher-forced argmax equals the label at every fact token of the row (the
    up-weighted mention and stress tokens: what the image decides). Other answer tokens are phrasing,
    some of it drawn at random by the generator, so no model predicts all of them."""
    from fovea.data import IGNORE

    labels, facts = batch["labels"][:, 1:], batch["weights"][:, 1:] > 1
    wrong = (t_logits.argmax(-1) != labels) & facts & (labels != IGNORE)
    return ~wrong.any(1)


def drill_distill(student, teacher, batch: dict) -> torch.Tensor:
    """The text-only drills: cross-entropy plus KL to the teacher on their answers."""
    kw = {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}
    with torch.no_grad():
        t_logits = teacher.lm_head(teacher.model.language_model(**kw).last_hidden_state[:, :-1])
    s_logits = student.lm_head(student.model.language_model(**kw).last_hidden_state[:, :-1])
    return weighted_lm_loss(s_logits, batch) + kd_loss(s_logits, t_logits, batch["weights"][:, 1:])


def probe_layout(student, aux, tokenizer) -> dict:
    """The probe's glyph and chart figures on the held-out looks (the `layout` split)."""
    out = probe(student, aux, tokenizer, split="layout")
    return {k: v for k, v in out.items() if k.startswith(("probe/", "chart/"))}


def load_aux_heads(aux: AuxHeads, folder: Path) -> None:
    """An export's per-patch heads (aux_heads.safetensors) into `aux`, float32, where the file exists."""
    path = folder / "aux_heads.safetensors"
    if path.exists():
        aux.load_state_dict({k: v.float() for k, v in load_file(str(path)).items()}, strict=False)


def load_teacher(folder: Path):
    from transformers import LlavaForConditionalGeneration

    teacher = LlavaForConditionalGeneration.from_pretrained(str(folder), dtype=torch.float32,
                                                            attn_implementation="sdpa").eval()
    for p in teacher.parameters():
        p.requires_grad_(False)
    aux = AuxHeads(teacher.config.text_config.hidden_size)
    load_aux_heads(aux, folder)   # the frozen vision tower's probe heads (curves' probe/* columns)
    return teacher, aux.eval()


def load_student(student, folder: Path) -> int:
    """Load an exported student's weights into `student` (same depth and widths); returns the step it
    was exported at."""
    import json

    config = json.loads((folder / "config.json").read_text()) if (folder / "config.json").exists() else None
    if config is None or not (folder / "model.safetensors").exists():
        raise SystemExit(f"--init-from {folder}: no exported model there (config.json + model.safetensors)")
    text = config["text_config"]
    want = student.config.text_config
    if (text["num_hidden_layers"], text["intermediate_size"]) != (want.num_hidden_layers, want.intermediate_size):
        raise SystemExit(f"--init-from {folder} has {text['num_hidden_layers']} layers of MLP width "
                         f"{text['intermediate_size']}; this run builds {want.num_hidden_layers} x "
                         f"{want.intermediate_size}: pass the same --layers and --intermediate-size")
    from transformers import LlavaForConditionalGeneration

    # from_pretrained maps the checkpoint's saved key layout onto the module's
    exported = LlavaForConditionalGeneration.from_pretrained(str(folder), dtype=torch.float32)
    student.load_state_dict(exported.state_dict())
    train = folder / "train_config.json"
    return int(json.loads(train.read_text()).get("steps", 0)) if train.exists() else 0


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog="python -m fovea.train deep", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--teacher", type=Path, default=DEFAULT_TARGET_DIR, help="the exported shallow target")
    p.add_argument("--out", type=Path, default=Path("runs/target_v3_export"), help="where the fp16 export goes")
    p.add_argument("--run-dir", type=Path, default=Path("runs/target_v3"), help="checkpoints + logs (resume)")
    p.add_argument("--minutes", type=float, default=60.0, help="stop after this much wall time")
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--autocast", default="auto", choices=AUTOCAST_CHOICES,
                   help="auto: bf16 on CUDA and AMX or AVX512-BF16 CPUs, fp32 elsewhere (AVX2-only CPUs run bf16 ~24x slower)")
    p.add_argument("--probe-every", type=int, default=50)
    p.add_argument("--eval-every", type=int, default=500)
    p.add_argument("--eval-n", type=int, default=4, help="questions per task in the periodic generation eval")
    p.add_argument("--save-every", type=int, default=50)
    p.add_argument("--focus-tasks", nargs="+", default=[], metavar="FAMILY/TASK")
    p.add_argument("--focus-share", type=float, default=0.5)
    p.add_argument("--init-from", type=Path, help="continue an exported student (e.g. candidates/target_v3) when "
                   "--run-dir holds no checkpoint; the optimiser state starts fresh with a new warm-up")
    add_config_args(p, DeepTargetConfig)
    args = p.parse_args(argv)
    if args.init not in INITS:
        p.error(f"--init must be one of {INITS}, got {args.init!r}")
    if args.layers < 1 or args.intermediate_size < 1 or args.batch_size < 1 or args.turns < 1:
        p.error("--layers, --intermediate-size, --batch-size and --turns must be >= 1")
    if args.minutes <= 0 or not 0.0 <= args.focus_share <= 1.0:
        p.error("--minutes must be > 0 and --focus-share in [0, 1]")
    if min(args.kd_weight, args.hidden_weight, args.mention_weight, args.stress_weight, args.aux_weight) < 0:
        p.error("loss weights must be >= 0")
    if args.aux_images < 0 or (args.aux_images and not args.vision_lr_scale):
        p.error("--aux-images must be >= 0, and trains the vision tower: pass --vision-lr-scale > 0 with it")
    if args.vision_steps < 0 or (args.vision_steps and not args.aux_images):
        p.error("--vision-steps must be >= 0, and trains the tower on the aux images alone: pass --aux-images > 0")
    if args.slot_shared_weight <= 0:
        p.error(f"--slot-shared-weight must be > 0, got {args.slot_shared_weight}")
    if args.slot_weight < 0 or (args.slot_weight and not args.aux_images):
        p.error("--slot-weight must be >= 0, and reads the aux images' glyph slots: pass --aux-images > 0")
    if args.focus_looks not in FOCUS_LOOKS:
        p.error(f"--focus-looks must be one of {FOCUS_LOOKS}, got {args.focus_looks!r}")
    if args.aux_looks not in AUX_LOOKS:
        p.error(f"--aux-looks must be one of {AUX_LOOKS}, got {args.aux_looks!r}")
    if not args.aux_families or set(args.aux_families) - set(FAMILIES):
        p.error(f"--aux-families must name families among {list(FAMILIES)}, got {list(args.aux_families)}")
    if args.vision_lr_scale < 0:
        p.error(f"--vision-lr-scale must be >= 0 (0 keeps the vision tower frozen), got {args.vision_lr_scale}")
    if not (args.teacher / "config.json").exists():
        p.error(f"--teacher {args.teacher}: no exported target there (config.json missing)")
    return args


def main(argv=None) -> None:
    args = parse_args(argv)
    cfg = config_from_args(args, DeepTargetConfig)
    if args.threads:
        torch.set_num_threads(args.threads)
    focus = parse_focus(args.focus_tasks)
    device = torch.device(args.device)
    run = args.run_dir
    run.mkdir(parents=True, exist_ok=True)
    tokenizer = load_tokenizer(args.teacher)
    teacher, aux = load_teacher(args.teacher)
    try:
        student = build_student(teacher, cfg)
    except ValueError as e:
        raise SystemExit(str(e))
    import copy

    own_aux = copy.deepcopy(aux).train()   # trains with the vision tower; `aux` stays the teacher's probe
    own_aux.weights = {"char": 2.0}        # the shipped target's recipe (char_weight): glyphs are what it misreads
    slots = GlyphSlotHead(student.config.text_config.hidden_size, shared_weight=cfg.slot_shared_weight) \
        if cfg.slot_weight > 0 else None
    heads = TowerHeads(own_aux, slots, cfg.slot_weight) if slots is not None else own_aux
    groups = param_groups(student, heads, cfg)
    params = [p for g in groups for p in g["params"]]
    opt = torch.optim.AdamW(groups, lr=cfg.lr, weight_decay=cfg.weight_decay, betas=(0.9, 0.95))
    ckpt = Checkpointer(run)
    modules = {"model": student, "opt": opt, **({"aux": own_aux} if cfg.vision_lr_scale > 0 else {}),
               **({"slots": slots} if slots is not None else {})}
    step, extra = ckpt.load(modules)
    warm_start = extra.get("warm_start", 0)
    if step == 0 and args.init_from:
        step = warm_start = load_student(student, args.init_from)
        if cfg.vision_lr_scale > 0:   # a trained tower continues with its own heads, not the teacher's
            load_aux_heads(own_aux, args.init_from)
        if slots is not None and (args.init_from / SLOT_HEAD_FILE).exists():
            slots.load_state_dict(load_file(str(args.init_from / SLOT_HEAD_FILE)))
    student.to(device), teacher.to(device), aux.to(device), heads.to(device)
    hooks = (LayerOutputs(student), LayerOutputs(teacher))
    vision = (ProjectedTokens(student), heads) if cfg.vision_lr_scale > 0 else None
    # the shipped target's batches and drills (the same generator, weights and packing)
    recipe = TargetTrainConfig(batch_size=cfg.batch_size, turns=cfg.turns, mention_weight=cfg.mention_weight,
                               stress_weight=cfg.stress_weight, drill_rows=cfg.drill_rows,
                               focus_looks=cfg.focus_looks)
    save_config_json(run, "train_config.json", {**asdict(cfg), "teacher": str(args.teacher)})
    append_jsonl(run / "launches.jsonl", {"step": step, "argv": list(sys.argv[1:] if argv is None else argv)})
    autocast, bf16 = bf16_autocast(device, args.autocast)
    n_train = sum(p.numel() for p in params)
    tqdm.write(f"deep target: {cfg.layers} layers ({n_train / 1e6:.1f}M trainable), init {cfg.init}, "
               f"{'bf16 autocast' if bf16 else 'fp32'} on {device}")
    timer, bar = Timer(), tqdm(initial=step, total=cfg.total_steps, desc="deep", dynamic_ncols=True)
    stop = stop_on_sigterm()
    if step == 0:
        append_jsonl(run / "curves.jsonl", {"step": 0, "minutes": 0.0, **probe(student, aux, tokenizer)})
    while step < cfg.total_steps and timer.minutes() < args.minutes and not stop:
        lr = lr_wsd(step, cfg, warm_start)
        for g in opt.param_groups:
            g["lr"] = lr * g.get("lr_scale", 1.0)
        tower_only = step < warm_start + cfg.vision_steps
        batch = {} if tower_only else training_batch(step, recipe, tokenizer, student, focus, args.focus_share)
        if vision and cfg.aux_images:
            batch["aux_pixels"], batch["aux_labels"] = aux_images(
                AUX_SEED_START, step, cfg.aux_images, cfg.aux_families, student.config.vision_config.image_size,
                looks=cfg.aux_looks, slots=slots is not None)
        batch = to_device(batch, device)
        with autocast:
            losses = tower_step(student, heads, batch) if tower_only else \
                distill_step(student, teacher, hooks, batch, cfg, vision)
            total = losses["total"]
            if cfg.drill_rows and not tower_only:
                drill = to_device(drill_batch(step, recipe, tokenizer, student), device)
                losses["drill"] = drill_distill(student, teacher, drill)
                total = total + losses["drill"]
        opt.zero_grad(set_to_none=True)
        total.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        step += 1
        bar.update(1)
        bar.set_postfix({k: f"{losses[k].item():.3f}" for k in ("lm", "kd", "hidden", "aux") if k in losses})
        append_jsonl(run / "log.jsonl", {"step": step, **{k: round(v.item(), 4) for k, v in losses.items()},
                                         "lr": lr, "minutes": round(timer.minutes(), 2)})
        if step % args.save_every == 0:
            ckpt.save(step, modules, {"warm_start": warm_start})
        if step % args.probe_every == 0:
            probe_aux = own_aux if vision else aux
            append_jsonl(run / "curves.jsonl", {"step": step, "minutes": round(timer.minutes(), 2),
                                                **probe(student, probe_aux, tokenizer),
                                                **({"layout": probe_layout(student, probe_aux, tokenizer)}
                                                   if vision else {})})
        if step % args.eval_every == 0:
            acc = evaluate(student, tokenizer, n_per_task=args.eval_n)
            append_jsonl(run / "eval.jsonl", {"step": step, **acc, "sum": round(sum(acc.values()), 3)})
            tqdm.write(f"step {step}: sum {sum(acc.values()):.2f} {acc}")
    ckpt.save(step, modules, {"warm_start": warm_start})
    hooks[0].remove(), hooks[1].remove()
    if vision:
        vision[0].remove()
    # a trained vision tower's heads are its own; a frozen tower's are the teacher's, copied
    export(student.cpu().float(), tokenizer, args.out, cfg, step, aux=own_aux.cpu() if vision else None, run_dir=run)
    if slots is not None:
        save_file({k: v.detach().cpu().contiguous() for k, v in slots.state_dict().items()},
                  str(args.out / SLOT_HEAD_FILE))
    if not vision and (args.teacher / "aux_heads.safetensors").exists():
        import shutil
        shutil.copy(args.teacher / "aux_heads.safetensors", args.out / "aux_heads.safetensors")
    tqdm.write(f"exported step {step} to {args.out}")


if __name__ == "__main__":
    main()

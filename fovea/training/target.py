"""Train the bundled target VLM from scratch on generated conversations (world v2).

Loss = next-token cross-entropy on answer tokens, with the *mention* tokens (answer tokens that name
what the image shows) weighted `mention_weight`, + `aux_weight` x dense per-patch cross-entropy
(colour / shape / character / bar heads on the projected visual tokens, labels from the generator).
Each training sequence packs `turns` question/answer turns about one image (one image encode, many
lookups). The LR warms up, stays flat, and decays only over the last `decay_frac` of the schedule
(warmup-stable-decay), so it does not shrink before the lookups are learned. The auxiliary term is
what makes a tiny from-scratch VLM look at the image at all (shared NOTES).
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from tqdm import tqdm

from fovea.data import IGNORE, NUM_LABELS, TASKS, eval_seeds, iter_corpus_text, make_conversation, make_sample
from fovea.data.scoring import answer_correct
from fovea.models.bundled import (BundledModelConfig, DEFAULT_TARGET_DIR, PROMPT_ORDERS, build_model,
                                  encode_prompt, image_to_pixels, load_tokenizer, prompt_format, save_config_json,
                                  train_tokenizer)
from fovea.training.common import (AUTOCAST_CHOICES, Checkpointer, Timer, add_config_args, append_jsonl, bf16_autocast,
                                   config_from_args)
from fovea.training.packing import NUM_ATTRS, as_conversation, pack_batch, patch_label_batch

AUX_SEED_START = 500_000_000  # the aux-only images: training seeds far from the conversations' range
VISION_SEED_START = 600_000_000  # the vision-only phase's images
ALL_TASKS = tuple((family, task) for family, names in TASKS.items() for task in names)


@dataclass(frozen=True)
class TargetTrainConfig:
    preset: str = "small"
    prompt_order: str = "question_first"
    batch_size: int = 8             # images per step
    turns: int = 4                  # question/answer turns packed per image
    lr: float = 1e-3
    weight_decay: float = 0.05
    warmup: int = 150
    total_steps: int = 6000         # the LR schedule length; training may stop earlier on --minutes
    decay_frac: float = 0.2         # the LR decays only over the last decay_frac of total_steps
    aux_weight: float = 1.0
    aux_images: int = 0             # extra images per step through the vision tower for the aux loss only
    aux_families: tuple = ("scene", "ocr", "chart")  # families the aux-only images are drawn from, in turn
    char_weight: float = 1.0        # weight of the glyph head in the aux loss (glyphs are the slowest kind)
    mention_weight: float = 3.0
    stress_weight: float = 1.0      # the answers' stress tokens (QA.stress: a chart value answer's stop)
    ground_weight: float = 0.0      # attention supervision: mention-predicting states look at the named object
    ground_layers: tuple = (2, 3)   # decoder layers whose best head is supervised
    attr_weight: float = 0.0        # the named object's colour/shape/position/value, read off the decoder
                                    # state after the last ground layer at every mention-predicting state
    vision_steps: int = 0           # the run's first steps train only the vision tower, projector and aux
                                    # heads on aux-family images (glyph legibility; the decoder is untouched)
    drill_rows: int = 0             # text-only chart-value drills per step (charts.drill), a second forward
    drill_weight: float = 1.0       # weight of their LM loss
    focus_looks: str = "mixed"      # the looks of focused chart conversations (FOCUS_LOOKS): "mixed", as any
                                    # training conversation; "labels", a chart with 2-3-letter labels in a bold,
                                    # condensed or oblique face (looks.label_look); "condensed", in that face alone
    seed: int = 0
    vocab_size: int = 1024


def lr_wsd(step: int, cfg: TargetTrainConfig, warm_start: int = 0) -> float:
    """Warmup-stable-decay: linear warm-up from `warm_start` (0, or the step an --init-from export
    was at, since its optimiser state starts fresh), flat at the peak, cosine to 10% over the last
    decay_frac of total_steps."""
    if step - warm_start < cfg.warmup:
        return cfg.lr * (step - warm_start + 1) / cfg.warmup
    start = cfg.total_steps * (1 - cfg.decay_frac)
    if step < start:
        return cfg.lr
    progress = min(1.0, (step - start) / max(1.0, cfg.total_steps - start))
    return cfg.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


class AuxHeads(torch.nn.Module):
    """One linear classifier per patch-label kind over the projected visual tokens [B, N, D].

    The loss averages object patches and background patches separately (background weighted
    `background_weight`): most patches are background, and a plain mean let them drown the object
    patches that carry shape and glyph identity (world v2, step 1,900: shape 47%, glyphs 30%)."""

    def __init__(self, dim: int, background_weight: float = 0.25, weights: dict | None = None):
        super().__init__()
        self.heads = torch.nn.ModuleDict({k: torch.nn.Linear(dim, n) for k, n in NUM_LABELS.items()})
        # a second set for the decoder's image states (--ground-weight): one shared set had to compromise
        # between the two spaces and the glyph probe on the visual tokens fell (0.52 -> 0.47 in 300 steps)
        self.deep_heads = torch.nn.ModuleDict({k: torch.nn.Linear(dim, n) for k, n in NUM_LABELS.items()})
        self.background_weight = background_weight
        self.weights = weights or {}  # per kind, default 1

    def forward(self, feats: torch.Tensor, labels: dict, deep: bool = False) -> torch.Tensor:
        losses = []
        for kind, head in (self.deep_heads if deep else self.heads).items():
            target = labels[kind].flatten()                                    # [B*N], -100 = ignore
            if not (target != -100).any():
                continue
            ce = F.cross_entropy(head(feats).flatten(0, 1), target, ignore_index=-100, reduction="none")
            obj, bg = target > 0, target == 0
            parts = [ce[obj].mean()] if obj.any() else []
            if bg.any():
                parts.append(self.background_weight * ce[bg].mean())
            losses.append(self.weights.get(kind, 1.0) * torch.stack(parts).sum())
        return torch.stack(losses).mean()


class ObjectHeads(torch.nn.Module):
    """Linear classifiers of the *named* object's attributes (colour, shape, 3 x 3 position, size, bar value)
    on the decoder state that predicts a mention token. The LM loss trains the readout of a looked-up
    object only at the one token that names that attribute; these heads ask every mention-predicting
    state to carry all of them (target v2 found the right patches and still misread the colour)."""

    def __init__(self, dim: int):
        super().__init__()
        self.heads = torch.nn.ModuleDict({k: torch.nn.Linear(dim, n) for k, n in NUM_ATTRS.items()})

    def forward(self, hidden: torch.Tensor, batch: dict) -> torch.Tensor:
        ground = batch["ground"]
        b, t = (ground >= 0).nonzero(as_tuple=True)
        states, objs = hidden[b, t], ground[b, t]
        losses = []
        for kind, head in self.heads.items():
            target = batch["object_attrs"][kind][b, objs]
            if (target != -100).any():
                losses.append(F.cross_entropy(head(states), target, ignore_index=-100))
        return torch.stack(losses).mean() if losses else hidden.sum() * 0.0


def forward(model, batch: dict, attentions: bool = False):
    """(logits [B, T-1, V] predicting labels[:, 1:], projected visual tokens [B, N, D]), plus, when
    `attentions`, the per-layer attention probabilities [B, H, T, T] (needs eager attention) and the
    per-layer hidden states [B, T, D] (index 0 = the embeddings)."""
    ids = batch["input_ids"]
    out = model.model(input_ids=ids, attention_mask=batch["attention_mask"], pixel_values=batch["pixel_values"],
                      output_attentions=attentions, output_hidden_states=attentions)
    feats = out.image_hidden_states                                   # per image [N, D], or [B*N, D]
    feats = torch.stack(list(feats)) if isinstance(feats, (list, tuple)) else feats
    result = model.lm_head(out.last_hidden_state[:, :-1]), feats.reshape(ids.shape[0], -1, feats.shape[-1])
    return (*result, out.attentions, out.hidden_states) if attentions else result


def set_attention(model, implementation: str) -> None:
    """Switch the decoder's attention implementation ("eager" returns attention probabilities)."""
    model.config._attn_implementation = model.config.text_config._attn_implementation = implementation


def image_positions(ids: torch.Tensor, image_token_id: int) -> torch.Tensor:
    """[B, N]: the sequence positions of each row's image tokens, in patch order."""
    return (ids == image_token_id).nonzero(as_tuple=True)[1].view(ids.shape[0], -1)


def image_states(hidden: torch.Tensor, ids: torch.Tensor, image_token_id: int) -> torch.Tensor:
    """[B, N, D]: a decoder layer's hidden states at the image-token positions, in patch order."""
    pos = image_positions(ids, image_token_id)
    return hidden.gather(1, pos[..., None].expand(-1, -1, hidden.shape[-1]))


def grounding_mass(attn: tuple, batch: dict, image_token_id: int, layers) -> torch.Tensor:
    """[M] per mention-predicting state: the attention mass on the named object's patches, taking
    the best head of each layer in `layers` and averaging the layers.

    `batch["ground"]` [B, T] names, per query position, the object the next token mentions (-1: none);
    `batch["ground_patches"]` [B, T, N] says which image tokens that state should look at (the object,
    or the glyphs a token spells); without it, `batch["object_patches"]` [B, O, N] (the whole object)."""
    ground = batch["ground"]
    b, t = (ground >= 0).nonzero(as_tuple=True)
    image_pos = image_positions(batch["input_ids"], image_token_id)                      # [B, N]
    if "ground_patches" in batch:
        target = batch["ground_patches"][b, t].float()                                   # [M, N]
    else:
        target = batch["object_patches"][b, ground[b, t]].float()
    masses = []
    for layer in layers:
        rows = attn[layer][b, :, t, :]                                                    # [M, H, T]
        keys = image_pos[b][:, None, :].expand(-1, rows.shape[1], -1)
        on_image = rows.gather(2, keys)                                                   # [M, H, N]
        masses.append((on_image * target[:, None, :]).sum(-1).amax(-1))                 # best head
    return torch.stack(masses).mean(0)


def grounding_loss(attn: tuple, batch: dict, image_token_id: int, layers) -> torch.Tensor:
    """Mean -log grounding_mass: pulls one head per supervised layer onto the object the next token names."""
    mass = grounding_mass(attn, batch, image_token_id, layers)
    return -mass.clamp_min(1e-6).log().mean() if mass.numel() else attn[0].sum() * 0.0


def image_features(model, pixels: torch.Tensor) -> torch.Tensor:
    """Projected visual tokens [B, N, D] of a pixel batch, without the decoder."""
    feats = model.model.get_image_features(pixel_values=pixels)
    feats = getattr(feats, "pooler_output", feats)
    feats = torch.stack(list(feats)) if isinstance(feats, (list, tuple)) else feats
    return feats.reshape(pixels.shape[0], -1, feats.shape[-1])


def aux_image_loss(model, aux, batch: dict) -> torch.Tensor:
    """The per-patch label loss on the batch's tower-only images (aux_pixels, aux_labels): the vision
    tower and projector alone, no decoder."""
    return aux(image_features(model, batch["aux_pixels"]), batch["aux_labels"])


def train_step(model, aux, batch: dict, ground_layers=(), objects: ObjectHeads | None = None):
    """(weighted LM loss, aux loss, grounding loss or None when no layers are supervised, object-attribute
    loss or None without `objects`)."""
    out = forward(model, batch, attentions=bool(ground_layers))
    logits, feats = out[:2]
    aux_loss = aux(feats, batch["patch_labels"])
    if "aux_pixels" in batch:  # the vision tower learns from more images than the decoder reads
        aux_loss = (aux_loss + aux_image_loss(model, aux, batch)) / 2
    ground = None
    if ground_layers:
        image_id = model.config.image_token_id
        ground = grounding_loss(out[2], batch, image_id, ground_layers)
        # a second set of per-patch heads reads the facts off the image states where the supervised heads
        # read them, so the decoder keeps colour, shape and glyph identity there (the attention alone found
        # the right patches and still read the wrong colour: pilot at step 4,700)
        deep = image_states(out[3][min(ground_layers)], batch["input_ids"], image_id)
        aux_loss = (aux_loss + aux(deep, batch["patch_labels"], deep=True)) / 2
    attrs = objects(out[3][max(ground_layers) + 1], batch) if objects is not None and ground_layers else None
    return weighted_lm_loss(logits, batch), aux_loss, ground, attrs


@torch.no_grad()
def probe(model, aux, tokenizer, n_per_task: int = 8, split: str = "train") -> dict:
    """Cheap teacher-forced held-out metrics (one batched forward): per task, the share of mention
    tokens predicted right and of answers whose mention tokens are all right; per label kind, the aux
    heads' accuracy on object patches (is the fact in the visual tokens?)."""
    was = model.training
    model.eval()
    samples = [make_sample(s, f, t, split=split) for f, t in ALL_TASKS for s in eval_seeds(n_per_task)]
    fmt = prompt_format(model.config)
    batch = pack_batch([as_conversation(s) for s in samples], tokenizer, fmt, mention_weight=2.0,
                       image_size=model.config.vision_config.image_size)
    eager = model.config._attn_implementation == "eager"
    out = forward(model, batch, attentions=eager)
    logits, feats, attn = out[0], out[1], out[2] if eager else None
    right = logits.argmax(-1) == batch["labels"][:, 1:]
    mention = batch["weights"][:, 1:] == 2.0
    out = {}
    for i, (f, t) in enumerate(ALL_TASKS):
        rows = slice(i * n_per_task, (i + 1) * n_per_task)
        m, r = mention[rows], right[rows]
        out[f"{f}/{t}"] = {"mention_tok": round(float(r[m].float().mean()), 3) if m.any() else None,
                           "all_mentions": round(float(((r | ~m).all(1)).float().mean()), 3)}
    for kind, head in aux.heads.items():
        labels = batch["patch_labels"][kind]
        on = labels > 0
        if on.any():
            out[f"probe/{kind}"] = round(float((head(feats).argmax(-1)[on] == labels[on]).float().mean()), 3)
    centre = glyph_centres(samples)
    if centre.numel():  # the glyph head at each drawn character's centre patch: is the character legible there?
        pred = aux.heads["char"](feats).argmax(-1)
        out["probe/glyph_centre"] = round(float((pred[centre[:, 0], centre[:, 1]] == centre[:, 2]).float().mean()), 3)
    if attn is not None:  # per decoder layer, the best head's attention mass on the object the next token names
        for layer in range(len(attn)):
            mass = grounding_mass(attn, batch, model.config.image_token_id, [layer])
            out[f"ground/layer{layer}"] = round(float(mass.mean()), 3)
    model.train(was)
    return out


def glyph_centres(samples) -> torch.Tensor:
    """long [G, 3]: (sample, patch, character id) for every character drawn in the samples (words, bar
    labels and values), the patch being the one that holds the centre of the character's ink box."""
    from fovea.data.labels import CHAR_ID
    from fovea.data.sample import GRID, PATCH

    rows = [(i, min(GRID - 1, (y0 + y1) // 2 // PATCH) * GRID + min(GRID - 1, (x0 + x1) // 2 // PATCH), CHAR_ID[c])
            for i, s in enumerate(samples) for o in s.objects for text, boxes in o.glyphs.items()
            for c, (x0, y0, x1, y1) in zip(text, boxes)]
    return torch.tensor(rows, dtype=torch.long).reshape(-1, 3)


@torch.no_grad()
def evaluate(model, tokenizer, n_per_task: int = 20, max_new_tokens: int = 96, tasks=ALL_TASKS,
             split: str = "train", details: list | None = None) -> dict:
    """Exact-answer accuracy on held-out seeds (never used in training) of the given split, each greedy
    output scored at its answer slot (fovea.data.scoring). `details` collects (task, question, gold, output)."""
    was = model.training
    model.eval()
    n_image, order = prompt_format(model.config)
    size = model.config.vision_config.image_size
    results = {}
    for family, task in tasks:
        hits = 0
        for seed in eval_seeds(n_per_task):
            s = make_sample(seed, family=family, task=task, split=split)
            ids = torch.tensor([encode_prompt(tokenizer, s.question, n_image, order)])
            out = model.generate(input_ids=ids, pixel_values=image_to_pixels(s.image, size), do_sample=False,
                                 max_new_tokens=max_new_tokens, pad_token_id=tokenizer.pad_token_id)
            text = tokenizer.decode(out[0, ids.shape[1]:], skip_special_tokens=True)
            ok = answer_correct(s, text)
            hits += ok
            if details is not None:
                details.append({"task": f"{family}/{task}", "seed": seed, "question": s.question,
                                "gold": s.short_answer, "output": text.strip(), "correct": ok})
        results[f"{family}/{task}"] = hits / n_per_task
    model.train(was)
    return results


def focused_task(seed: int, focus: list, share: float, salt: str = "focus") -> tuple[str | None, str | None]:
    """The (family, task) a training seed asks: one of `focus` (drawn per seed) with probability `share`,
    else (None, None), whatever the generator draws. Seeded by (salt, seed) alone."""
    import random

    rng = random.Random(f"{salt}/{seed}")
    return rng.choice(focus) if focus and rng.random() < share else (None, None)


FOCUS_LOOKS = ("mixed", "labels", "condensed")


def focused_conversation(seed: int, turns: int, focus: list, share: float, focus_looks: str = "mixed"):
    """A training seed's conversation: its first turn one of `focus` with probability `share`
    (focused_task). A focused chart conversation is drawn per `focus_looks` (FOCUS_LOOKS): "labels" and
    "condensed" put it in looks.label_look (2-3-letter labels in a non-regular face, or the condensed
    face alone), so its questions read the labels that share a patch; never a held-out look."""
    from fovea.data.looks import LABEL_FACES, label_look

    if focus_looks not in FOCUS_LOOKS:
        raise ValueError(f"focus_looks must be one of {FOCUS_LOOKS}, got {focus_looks!r}")
    family, task = focused_task(seed, focus, share)
    look = None
    if family == "chart" and focus_looks != "mixed":
        look = label_look(seed, "chart", LABEL_FACES[focus_looks])
    return make_conversation(seed, turns, family, task, look=look)


def training_batch(step: int, cfg: TargetTrainConfig, tokenizer, model, focus: list, share: float) -> dict:
    """The deterministic batch of a step: images step*B .. (step+1)*B-1, `turns` turns each."""
    convs = [focused_conversation(seed, cfg.turns, focus, share, cfg.focus_looks)
             for seed in range(step * cfg.batch_size, (step + 1) * cfg.batch_size)]
    size = model.config.vision_config.image_size
    batch = pack_batch(convs, tokenizer, prompt_format(model.config), cfg.mention_weight, image_size=size,
                       stress_weight=cfg.stress_weight)
    if cfg.aux_images:
        batch["aux_pixels"], batch["aux_labels"] = aux_images(AUX_SEED_START, step, cfg.aux_images,
                                                              cfg.aux_families, size)
    return batch


AUX_LOOKS = ("base", "mixed", "wide", "labels", "condensed")


def aux_images(start: int, step: int, n: int, families, size: int, looks: str = "base",
               slots: bool = False) -> tuple[torch.Tensor, dict]:
    """(pixels [n, 3, S, S], patch labels) of a step's images for the vision tower alone: seeds
    start + step*n .. start + (step+1)*n - 1, from `families` in turn. `looks`: "base", as make_sample
    draws them; "mixed", as a training conversation's image (a training look on looks.WIDE_SHARE of
    charts and scenes, else the base); "wide", every chart and scene in a training look drawn uniformly
    (looks.training_look); "labels", as "wide" on odd seeds and on even ones a chart with 2-3-letter labels
    in a bold, condensed or oblique face (looks.label_look); "condensed", as "labels" in the condensed face
    alone (the face of most held-out misreads). Never a held-out look. `slots`: the labels also hold
    "glyph_slots" (fovea.training.glyph_slots), for the glyph-slot loss and probe."""
    from fovea.data.looks import LABEL_FACES, label_look, training_look

    if looks not in AUX_LOOKS:
        raise ValueError(f"looks must be one of {AUX_LOOKS}, got {looks!r}")

    def record(seed: int, family: str):
        if looks == "mixed":
            return make_conversation(seed, 1, family)
        if looks == "base":
            return make_sample(seed, family=family)
        if looks in LABEL_FACES and seed % 2 == 0:
            return make_sample(seed, family=family, look=label_look(seed, family, LABEL_FACES[looks]))
        return make_sample(seed, family=family, look=training_look(seed, family))

    records = [record(start + seed, families[seed % len(families)]) for seed in range(step * n, (step + 1) * n)]
    labels = patch_label_batch(records)
    if slots:  # AuxHeads reads only its own kinds
        from fovea.training.glyph_slots import glyph_slots

        labels["glyph_slots"] = glyph_slots(records)
    return torch.cat([image_to_pixels(r.image, size) for r in records]), labels


def drill_batch(step: int, cfg: TargetTrainConfig, tokenizer, model) -> dict:
    """The step's text-only drills packed like conversations with no image tokens (`pack_text`):
    input_ids, attention_mask, labels, weights [R, T] (stress_weight on the stop, 1 on other answer tokens)."""
    from fovea.data import Conversation
    from fovea.data.charts import drill
    from fovea.training.packing import pack_text

    convs = [Conversation(None, "chart", [("value", drill(seed))], [], {})
             for seed in range(step * cfg.drill_rows, (step + 1) * cfg.drill_rows)]
    return pack_text(convs, tokenizer, (0, prompt_format(model.config)[1]), stress_weight=cfg.stress_weight)


def drill_loss(model, batch: dict) -> torch.Tensor:
    """Weighted mean next-token cross-entropy on the drills' answers (the text decoder alone: no image;
    with every weight 1, the plain mean)."""
    out = model.model.language_model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
    logits = model.lm_head(out.last_hidden_state[:, :-1])
    return weighted_lm_loss(logits, batch)


def weighted_lm_loss(logits: torch.Tensor, batch: dict) -> torch.Tensor:
    """Next-token cross-entropy of logits [B, T-1, V] against the batch's labels, averaged with its
    per-token weights (0 off the answers): the image batches' and the drills' LM loss."""
    ce = F.cross_entropy(logits.flatten(0, 1), batch["labels"][:, 1:].flatten(), ignore_index=IGNORE,
                         reduction="none")
    w = batch["weights"][:, 1:].flatten()
    return (ce * w).sum() / w.sum().clamp_min(1e-9)


def vision_batch(step: int, cfg: TargetTrainConfig, model) -> dict:
    """A vision-only step's images: batch_size + aux_images of them, drawn from aux_families in turn."""
    pixels, labels = aux_images(VISION_SEED_START, step, cfg.batch_size + cfg.aux_images, cfg.aux_families,
                                model.config.vision_config.image_size)
    return {"aux_pixels": pixels, "aux_labels": labels}


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog="python -m fovea.train target", description=__doc__)
    p.add_argument("--out", type=Path, default=DEFAULT_TARGET_DIR, help="where the final fp16 model goes")
    p.add_argument("--run-dir", type=Path, default=Path("runs/target"), help="checkpoints + logs (resume)")
    p.add_argument("--minutes", type=float, default=60.0, help="stop after this much wall time")
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    p.add_argument("--device", default="cpu", help="cpu, cuda, cuda:1 ...")
    p.add_argument("--autocast", default="auto", choices=AUTOCAST_CHOICES,
                   help="auto: bf16 autocast on CUDA and on CPUs with AMX-BF16 or AVX512-BF16, fp32 elsewhere (on AVX2-only CPUs "
                        "bf16 runs ~24x slower); bf16 / fp32 force it")
    p.add_argument("--probe-every", type=int, default=100, help="teacher-forced held-out probe (curves.jsonl)")
    p.add_argument("--eval-every", type=int, default=1000, help="generation accuracy (eval.jsonl)")
    p.add_argument("--eval-n", type=int, default=6, help="questions per task in the periodic generation eval")
    p.add_argument("--save-every", type=int, default=100)
    p.add_argument("--focus-tasks", nargs="+", default=[], metavar="FAMILY/TASK",
                   help="oversample these tasks (e.g. scene/colour chart/value) as the first turn")
    p.add_argument("--focus-share", type=float, default=0.5)
    p.add_argument("--init-from", type=Path, help="continue from an exported model folder (e.g. assets/target) "
                   "when --run-dir holds no checkpoint; the optimiser state starts fresh")
    add_config_args(p, TargetTrainConfig)
    args = p.parse_args(argv)
    if not 0.0 <= args.focus_share <= 1.0:
        p.error(f"--focus-share must be in [0, 1], got {args.focus_share}")
    if args.focus_looks not in FOCUS_LOOKS:
        p.error(f"--focus-looks must be one of {FOCUS_LOOKS}, got {args.focus_looks!r}")
    if args.prompt_order not in PROMPT_ORDERS:
        p.error(f"--prompt-order must be one of {PROMPT_ORDERS}")
    if args.batch_size < 1 or args.turns < 1 or args.minutes <= 0:
        p.error("--batch-size and --turns must be >= 1 and --minutes > 0")
    if args.vision_steps < 0:
        p.error(f"--vision-steps must be >= 0, got {args.vision_steps}")
    if args.stress_weight < 0:
        p.error(f"--stress-weight must be >= 0, got {args.stress_weight}")
    if args.drill_rows < 0 or args.drill_weight < 0:
        p.error(f"--drill-rows and --drill-weight must be >= 0, got {args.drill_rows} and {args.drill_weight}")
    return args


def main(argv=None) -> None:
    args = parse_args(argv)
    cfg = config_from_args(args, TargetTrainConfig)
    focus = parse_focus(args.focus_tasks)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
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
    model_cfg = BundledModelConfig.from_name(cfg.preset)
    model_cfg = BundledModelConfig(**{**asdict(model_cfg), "prompt_order": cfg.prompt_order})
    model = build_model(model_cfg, tokenizer, seed=cfg.seed).train()
    depth = model.config.text_config.num_hidden_layers
    if cfg.ground_weight and not all(0 <= layer < depth for layer in cfg.ground_layers):
        raise SystemExit(f"--ground-layers {list(cfg.ground_layers)}: the {cfg.preset} decoder has layers 0-{depth - 1}")
    unknown = set(cfg.aux_families) - set(TASKS)
    if unknown or not cfg.aux_families:
        raise SystemExit(f"--aux-families must name families among {sorted(TASKS)}, got {list(cfg.aux_families)}")
    if cfg.attr_weight and not cfg.ground_weight:
        raise SystemExit("--attr-weight reads the state after the ground layers: set --ground-weight too")
    aux = AuxHeads(model.config.text_config.hidden_size, weights={"char": cfg.char_weight})
    objects = ObjectHeads(model.config.text_config.hidden_size) if cfg.attr_weight else None
    heads = {"aux": aux, **({"objects": objects} if objects is not None else {})}
    params = list(model.parameters()) + [p for m in heads.values() for p in m.parameters()]
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay, betas=(0.9, 0.95))
    ckpt = Checkpointer(run)
    modules = {"model": model, **heads, "opt": opt}
    step, extra = ckpt.load(modules)
    warm = {"warm_start": extra.get("warm_start", 0)}
    if step == 0 and args.init_from:
        step = warm["warm_start"] = init_from_export(model, aux, args.init_from)
    if cfg.ground_weight:  # attention probabilities are only returned by the eager implementation
        set_attention(model, "eager")
    model.to(device), aux.to(device)
    save_config_json(run, "train_config.json", cfg)
    # the options train_config.json does not hold (focus tasks, --init-from, ...): every launch's command line
    append_jsonl(run / "launches.jsonl", {"step": step, "argv": list(sys.argv[1:] if argv is None else argv)})
    # bf16 autocast only where the hardware has it: on AVX2-only CPUs it runs ~24x slower (NOTES)
    autocast, bf16 = bf16_autocast(device, args.autocast)
    tqdm.write(f"target: training steps in {'bf16 autocast' if bf16 else 'fp32'} on {device}")
    append_jsonl(run / "precision.jsonl", {"step": step, "autocast": "bf16" if bf16 else "fp32", "device": str(device)})
    timer, bar = Timer(), tqdm(initial=step, total=cfg.total_steps, desc="target", dynamic_ncols=True)
    stop = stop_on_sigterm()

    def save_and_probe(step: int) -> None:
        """The checkpoint and the held-out probe, each on its own period (both phases)."""
        if step % args.save_every == 0:
            ckpt.save(step, modules, warm)
        if step % args.probe_every == 0:
            append_jsonl(run / "curves.jsonl", {"step": step, "minutes": round(timer.minutes(), 2),
                                                **probe(model, aux, tokenizer)})

    while step < cfg.total_steps and timer.minutes() < args.minutes and not stop:
        for g in opt.param_groups:
            g["lr"] = lr_wsd(step, cfg, warm["warm_start"])
        if step < warm["warm_start"] + cfg.vision_steps:
            # vision-only: the decoder gets no gradient, so AdamW leaves it (and its weight decay) alone
            batch = to_device(vision_batch(step, cfg, model), device)
            with autocast:
                aux_loss = aux_image_loss(model, aux, batch)
            opt.zero_grad(set_to_none=True)
            (cfg.aux_weight * aux_loss).backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
            step += 1
            bar.update(1)
            append_jsonl(run / "log.jsonl", {"step": step, "aux": round(aux_loss.item(), 4), "phase": "vision",
                                             "lr": lr_wsd(step - 1, cfg, warm["warm_start"]),
                                             "minutes": round(timer.minutes(), 2)})
            save_and_probe(step)
            continue
        batch = to_device(training_batch(step, cfg, tokenizer, model, focus, args.focus_share), device)
        with autocast:
            lm, aux_loss, ground, attrs = train_step(model, aux, batch, cfg.ground_layers if cfg.ground_weight else (),
                                                     objects)
            drill = drill_loss(model, to_device(drill_batch(step, cfg, tokenizer, model), device)) \
                if cfg.drill_rows else None
        opt.zero_grad(set_to_none=True)
        loss = lm + cfg.aux_weight * aux_loss
        loss = loss if ground is None else loss + cfg.ground_weight * ground
        loss = loss if drill is None else loss + cfg.drill_weight * drill
        (loss if attrs is None else loss + cfg.attr_weight * attrs).backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        step += 1
        bar.update(1)
        bar.set_postfix(lm=f"{lm.item():.3f}", aux=f"{aux_loss.item():.3f}")
        append_jsonl(run / "log.jsonl", {"step": step, "lm": round(lm.item(), 4), "aux": round(aux_loss.item(), 4),
                                         **({} if ground is None else {"ground": round(ground.item(), 4)}),
                                         **({} if attrs is None else {"attrs": round(attrs.item(), 4)}),
                                         **({} if drill is None else {"drill": round(drill.item(), 4)}),
                                         "lr": lr_wsd(step - 1, cfg, warm["warm_start"]),
                                         "minutes": round(timer.minutes(), 2)})
        save_and_probe(step)
        if step % args.eval_every == 0:
            acc = evaluate(model, tokenizer, n_per_task=args.eval_n)
            append_jsonl(run / "eval.jsonl", {"step": step, **acc})
            tqdm.write(f"step {step}: {acc}")
    ckpt.save(step, modules, warm)
    set_attention(model, "sdpa")
    export(model.cpu().float(), tokenizer, args.out, cfg, step, aux.cpu().float(), run)


def stop_on_sigterm() -> list:
    """A list that becomes non-empty on SIGTERM, so `kill` ends the loop after the current step and
    the final checkpoint and export are still written."""
    import signal

    flag: list = []
    signal.signal(signal.SIGTERM, lambda *_: flag.append(True))
    return flag


def to_device(batch: dict, device: torch.device) -> dict:
    if device.type == "cpu":
        return batch
    return {k: ({kk: vv.to(device) for kk, vv in v.items()} if isinstance(v, dict) else v.to(device))
            for k, v in batch.items()}


def parse_focus(items: list[str]) -> list[tuple[str, str]]:
    """["scene/colour", ...] -> [("scene", "colour"), ...], checked against the generator's tasks."""
    out = []
    for item in items:
        family, _, task = item.partition("/")
        if task not in TASKS.get(family, ()):
            known = ", ".join(f"{f}/{t}" for f, t in ALL_TASKS)
            raise SystemExit(f"unknown task {item!r}; choose from {known}")
        out.append((family, task))
    return out


def export(model, tokenizer, out: Path, cfg: TargetTrainConfig, step: int, aux: AuxHeads | None = None,
           run_dir: Path | None = None) -> None:
    """The committed asset: fp16 safetensors + tokenizer + the training config (loaded back as fp32),
    the auxiliary heads (so training can continue from the export) and the eval logs."""
    from safetensors.torch import save_file

    out.mkdir(parents=True, exist_ok=True)
    model.eval().half().save_pretrained(str(out), safe_serialization=True)
    model.float()
    tokenizer.save_pretrained(str(out))
    (out / "train_config.json").write_text(json.dumps({**asdict(cfg), "steps": step}, indent=2))
    if aux is not None:
        save_file({k: v.detach().half().contiguous() for k, v in aux.state_dict().items()},
                  str(out / "aux_heads.safetensors"))
    for name in ("eval.jsonl", "curves.jsonl", "launches.jsonl"):
        if run_dir is not None and (run_dir / name).exists():
            (out / name.replace("eval", "eval_log")).write_text((run_dir / name).read_text())


def init_from_export(model, aux: AuxHeads, folder: Path) -> int:
    """Load an exported model (and its aux heads when present); returns the step it was exported at."""
    from safetensors.torch import load_file
    from transformers import LlavaForConditionalGeneration

    exported = LlavaForConditionalGeneration.from_pretrained(str(folder), dtype=torch.float32)
    if prompt_format(exported.config) != prompt_format(model.config):
        raise SystemExit(f"{folder} was trained with prompt format {prompt_format(exported.config)}, this run "
                         f"builds {prompt_format(model.config)}; pass the same --prompt-order and --preset")
    model.load_state_dict(exported.state_dict())
    if (folder / "aux_heads.safetensors").exists():
        state = {k: v.float() for k, v in load_file(str(folder / "aux_heads.safetensors")).items()}
        missing = aux.load_state_dict(state, strict=False).missing_keys  # exports before the deep heads lack them
        if any(not k.startswith("deep_heads.") for k in missing):
            raise SystemExit(f"{folder}/aux_heads.safetensors lacks {missing}")
    config = folder / "train_config.json"
    return int(json.loads(config.read_text()).get("steps", 0)) if config.exists() else 0


if __name__ == "__main__":
    main()

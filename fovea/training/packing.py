"""Teacher-forced training sequences for the bundled target: one image, one or more
question/answer turns packed into one sequence, labels on the answers only, and a loss weight per
label that up-weights the *mention* tokens (the answer tokens naming what the image shows).

Sequence of a conversation (prompt order from the model's config, see fovea.models.bundled):
    image_first:    <s> <image>*N USER: q1\\nASSISTANT: a1</s> USER: q2\\nASSISTANT: a2</s> ...
    question_first: <s> USER: q1\\n <image>*N \\nASSISTANT: a1</s> USER: q2\\nASSISTANT: a2</s> ...
The first turn is exactly the single-turn inference prompt; later turns reuse the one image.
Knows nothing about models or optimisers.
"""
from __future__ import annotations

import numpy as np
import torch

from fovea.data import IGNORE, Conversation, Sample
from fovea.data.labels import MIN_COVER, patch_cover
from fovea.data.sample import GRID, IMAGE_SIZE
from fovea.data.text import QA
from fovea.models.bundled import NUM_IMAGE_TOKENS, PROMPT_TEMPLATE, image_to_pixels, prompt_parts



def as_conversation(sample: Sample) -> Conversation:
    """A single-turn sample as a one-turn conversation."""
    qa = QA(sample.question, sample.answer, sample.short_answer, sample.mentions)
    return Conversation(sample.image, sample.family, [(sample.task, qa)], sample.objects, sample.patch_labels,
                        sample.split)


def answer_tokens(tokenizer, qa: QA, max_tokens: int) -> tuple[list[int], list[int], list[tuple | None], list[bool]]:
    """Token ids of ' ' + answer (cut to max_tokens) + EOS; per token the index of the object whose
    mention it overlaps (-1: not inside a mention); per token (mentioned text, first, last + 1
    character of that text the token spells), None off the mentions; and per token whether it
    overlaps one of the answer's stress spans (`QA.stress`)."""
    enc = tokenizer(" " + qa.answer, add_special_tokens=False, return_offsets_mapping=True)
    ids, spans = enc["input_ids"][:max_tokens], enc["offset_mapping"][:max_tokens]
    obj, part, stress = [], [], []
    for a, b in spans:
        stress.append(any(a < end + 1 and b > start + 1 for start, end in qa.stress))
        # offsets count the leading space: mention m covers characters [m.start + 1, m.end + 1)
        m = next((m for m in qa.mentions if a < m.end + 1 and b > m.start + 1), None)
        obj.append(-1 if m is None else m.obj)
        part.append(None if m is None else
                    (qa.answer[m.start:m.end], max(0, a - m.start - 1), min(m.end - m.start, b - m.start - 1)))
    return ids + [tokenizer.eos_token_id], obj + [-1], part + [None], stress + [False]


def mention_share(tokenizer, samples) -> float:
    """Share of answer tokens (EOS excluded) that overlap a mention span: how many of an answer's
    tokens name what the image shows."""
    named = total = 0
    for s in samples:
        _, obj, _, _ = answer_tokens(tokenizer, as_conversation(s).turns[0][1], 10_000)
        named += sum(o >= 0 for o in obj[:-1])
        total += len(obj) - 1
    return named / max(total, 1)


def sequence(tokenizer, conv: Conversation, fmt: tuple[int, str], max_answer_tokens: int = 96):
    """(ids, labels, mentioned object per token, mentioned text part per token, stress per token) of
    one packed conversation; labels IGNORE off the answers, object -1 and part None off the mentions,
    stress False off the answers' stress spans."""
    n_image, order = fmt
    ids, labels, objs, parts, stresses = [], [], [], [], []
    for turn, (_, qa) in enumerate(conv.turns):
        if turn == 0:
            prompt = prompt_parts(tokenizer, qa.question, n_image, order)[0]
        else:
            prompt = tokenizer(PROMPT_TEMPLATE.format(question=qa.question), add_special_tokens=False)["input_ids"]
        answer, obj, part, stress = answer_tokens(tokenizer, qa, max_answer_tokens)
        ids += prompt + answer
        labels += [IGNORE] * len(prompt) + answer
        objs += [-1] * len(prompt) + obj
        parts += [None] * len(prompt) + part
        stresses += [False] * len(prompt) + stress
    return ids, labels, objs, parts, stresses


def pack_text(convs: list[Conversation], tokenizer, fmt: tuple[int, str] = (NUM_IMAGE_TOKENS, "image_first"),
              mention_weight: float = 1.0, max_answer_tokens: int = 96, stress_weight: float = 1.0) -> dict:
    """Right-padded input_ids, attention_mask, labels [B, T] and weights [B, T] (stress_weight on
    stress tokens, mention_weight on mention tokens, 1 on other answer tokens, 0 elsewhere), and `ground` [B, T]: at position t, the
    object that token t+1 mentions (-1 for none), i.e. the object the state predicting it should look at."""
    rows = [sequence(tokenizer, c, fmt, max_answer_tokens) for c in convs]
    return _pack_rows(rows, tokenizer, mention_weight, stress_weight)


def _pack_rows(rows: list, tokenizer, mention_weight: float, stress_weight: float = 1.0) -> dict:
    width = max(len(r[0]) for r in rows)
    ids = torch.full((len(rows), width), tokenizer.pad_token_id, dtype=torch.long)
    lab = torch.full((len(rows), width), IGNORE, dtype=torch.long)
    att = torch.zeros((len(rows), width), dtype=torch.long)
    weights = torch.zeros((len(rows), width))
    ground = torch.full((len(rows), width), -1, dtype=torch.long)
    for i, (r, l, o, _, st) in enumerate(rows):
        ids[i, : len(r)] = torch.tensor(r)
        lab[i, : len(l)] = torch.tensor(l)
        att[i, : len(r)] = 1
        on = torch.tensor([x != IGNORE for x in l])
        obj = torch.tensor(o)
        weights[i, : len(l)] = torch.where(torch.tensor(st), stress_weight, torch.where(obj >= 0, mention_weight, 1.0)) * on
        ground[i, : len(o) - 1] = torch.where(on[1:], obj[1:], -1)
    return {"input_ids": ids, "attention_mask": att, "labels": lab, "weights": weights, "ground": ground}


def pack_batch(convs: list[Conversation], tokenizer, fmt: tuple[int, str] = (NUM_IMAGE_TOKENS, "image_first"),
               mention_weight: float = 1.0, max_answer_tokens: int = 96, image_size: int | None = None,
               stress_weight: float = 1.0) -> dict:
    """pack_text plus pixel_values [B, 3, S, S], the per-patch labels {kind: [B, N]} and
    object_patches [B, O, N] (bool: which patches each object covers; `ground` indexes O)."""
    rows = [sequence(tokenizer, c, fmt, max_answer_tokens) for c in convs]
    batch = _pack_rows(rows, tokenizer, mention_weight, stress_weight)
    kwargs = {} if image_size is None else {"size": image_size}
    batch["pixel_values"] = torch.cat([image_to_pixels(c.image, **kwargs) for c in convs])
    batch["patch_labels"] = patch_label_batch(convs)
    batch["object_patches"] = object_patch_batch(convs)
    batch["object_attrs"] = object_attr_batch(convs)
    batch["ground_patches"] = ground_patch_batch(convs, rows, batch["ground"], batch["object_patches"])
    return batch


def glyph_patches(boxes, lo: int, hi: int) -> np.ndarray:
    """bool [GRID*GRID]: the patches that characters lo..hi-1 of a drawn text *own*: where one of their
    ink boxes covers more of the patch than any other character of the text does (and at least
    MIN_COVER pixels), plus each character's best-covered patch. A glyph is a little wider than a patch,
    so the patches at its edges mostly hold its neighbours; reading those would mix two letters."""
    masks = np.zeros((len(boxes), IMAGE_SIZE, IMAGE_SIZE), dtype=bool)
    for i, (x0, y0, x1, y1) in enumerate(boxes):
        masks[i, max(y0, 0):y1, max(x0, 0):x1] = True
    cover = patch_cover(masks).reshape(len(boxes), -1)                  # [C, N] pixels of each glyph per patch
    owner = cover.argmax(0)
    out = (owner >= lo) & (owner < hi) & (cover.max(0) >= MIN_COVER)
    out[cover[lo:hi].argmax(1)] = True
    return out


def ground_patch_batch(convs, rows, ground: torch.Tensor, objects: torch.Tensor) -> torch.Tensor:
    """bool [B, T, N]: at each position whose next token names an object, the patches the state there
    should look at. A token that spells part of a drawn text (a word, a bar's label or value) looks at
    the patches that the glyphs of just the characters it spells own (glyph_patches), the way one
    reads; other mention tokens look at the whole object."""
    b, t = (ground >= 0).nonzero(as_tuple=True)
    out = torch.zeros((*ground.shape, objects.shape[-1]), dtype=torch.bool)
    out[b, t] = objects[b, ground[b, t]]
    for i, (conv, row) in enumerate(zip(convs, rows)):
        for pos, part in enumerate(row[3][1:]):            # the state at pos predicts token pos + 1
            if part is None or ground[i, pos] < 0:
                continue
            text, lo, hi = part
            boxes = conv.objects[int(ground[i, pos])].glyphs.get(text)
            if boxes and hi > lo:
                out[i, pos] = torch.from_numpy(glyph_patches(boxes, lo, hi))
    return out


def _attr_ids() -> dict[str, dict[str, int]]:
    """Per attribute kind, name -> class id (0 is never used: ids start at 1, like the patch labels)."""
    from fovea.data.labels import COLOURS, SHAPES
    from fovea.data.scenes import POSITIONS

    positions = [name for row in POSITIONS for name in row]
    return {"colour": {c: i for i, c in enumerate(COLOURS) if i},
            "shape": {c: i for i, c in enumerate(SHAPES) if i},
            "position": {c: i + 1 for i, c in enumerate(positions)},
            "size": {"small": 1, "large": 2},
            "value": {str(v): v for v in range(1, 10)}}


ATTR_IDS = _attr_ids()
NUM_ATTRS = {kind: max(ids.values()) + 1 for kind, ids in ATTR_IDS.items()}


def object_attr_batch(records) -> dict[str, torch.Tensor]:
    """{kind: long [B, O]}: each object's colour, shape, 3 x 3 position, size and bar value as class ids
    (IGNORE where the object has no such attribute), for the object-attribute heads."""
    width = max(1, max(len(r.objects) for r in records))
    out = {kind: torch.full((len(records), width), IGNORE, dtype=torch.long) for kind in ATTR_IDS}
    for i, r in enumerate(records):
        for j, obj in enumerate(r.objects):
            for kind, ids in ATTR_IDS.items():
                if obj.attrs.get(kind) in ids:
                    out[kind][i, j] = ids[obj.attrs[kind]]
    return out


def object_patches(mask: np.ndarray) -> np.ndarray:
    """bool [GRID*GRID]: the patches an object's canvas mask covers by at least MIN_COVER pixels, or
    its best-covered patch when none does (a thin glyph stroke still has one entry)."""
    cover = patch_cover(mask)
    out = cover >= MIN_COVER
    if not out.any() and cover.max() > 0:
        out = cover == cover.max()
    return out.reshape(-1)


def object_patch_batch(records) -> torch.Tensor:
    """bool [B, O, GRID*GRID] over samples or conversations, O = the most objects in one record."""
    width = max(1, max(len(r.objects) for r in records))
    out = np.zeros((len(records), width, GRID * GRID), dtype=bool)
    for i, r in enumerate(records):
        for j, obj in enumerate(r.objects):
            out[i, j] = object_patches(obj.mask)
    return torch.from_numpy(out)


def patch_label_batch(records) -> dict[str, torch.Tensor]:
    """{kind: [B, GRID*GRID] long} from samples or conversations (their `patch_labels` grids)."""
    return {k: torch.from_numpy(np.stack([r.patch_labels[k] for r in records]).reshape(len(records), -1))
            for k in records[0].patch_labels}

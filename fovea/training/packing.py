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
from fovea.data.text import QA
from fovea.models.bundled import NUM_IMAGE_TOKENS, PROMPT_TEMPLATE, image_to_pixels, prompt_parts



def as_conversation(sample: Sample) -> Conversation:
    """A single-turn sample as a one-turn conversation."""
    qa = QA(sample.question, sample.answer, sample.short_answer, sample.mentions)
    return Conversation(sample.image, sample.family, [(sample.task, qa)], sample.objects, sample.patch_labels,
                        sample.split)


def answer_tokens(tokenizer, qa: QA, max_tokens: int) -> tuple[list[int], list[bool]]:
    """Token ids of ' ' + answer (cut to max_tokens) + EOS, and per token whether it overlaps a mention."""
    enc = tokenizer(" " + qa.answer, add_special_tokens=False, return_offsets_mapping=True)
    ids, spans = enc["input_ids"][:max_tokens], enc["offset_mapping"][:max_tokens]
    # offsets count the leading space: mention m covers characters [m.start + 1, m.end + 1)
    hit = [any(a < m.end + 1 and b > m.start + 1 for m in qa.mentions) for a, b in spans]
    return ids + [tokenizer.eos_token_id], hit + [False]


def sequence(tokenizer, conv: Conversation, fmt: tuple[int, str], max_answer_tokens: int = 96):
    """(ids, labels, mention flags) of one packed conversation; labels IGNORE off the answers."""
    n_image, order = fmt
    ids, labels, flags = [], [], []
    for turn, (_, qa) in enumerate(conv.turns):
        if turn == 0:
            prompt = prompt_parts(tokenizer, qa.question, n_image, order)[0]
        else:
            prompt = tokenizer(PROMPT_TEMPLATE.format(question=qa.question), add_special_tokens=False)["input_ids"]
        answer, hit = answer_tokens(tokenizer, qa, max_answer_tokens)
        ids += prompt + answer
        labels += [IGNORE] * len(prompt) + answer
        flags += [False] * len(prompt) + hit
    return ids, labels, flags


def pack_text(convs: list[Conversation], tokenizer, fmt: tuple[int, str] = (NUM_IMAGE_TOKENS, "image_first"),
              mention_weight: float = 1.0, max_answer_tokens: int = 96) -> dict:
    """Right-padded input_ids, attention_mask, labels [B, T] and weights [B, T] (mention_weight on
    mention tokens, 1 on other answer tokens, 0 elsewhere)."""
    rows = [sequence(tokenizer, c, fmt, max_answer_tokens) for c in convs]
    width = max(len(r[0]) for r in rows)
    ids = torch.full((len(rows), width), tokenizer.pad_token_id, dtype=torch.long)
    lab = torch.full((len(rows), width), IGNORE, dtype=torch.long)
    att = torch.zeros((len(rows), width), dtype=torch.long)
    weights = torch.zeros((len(rows), width))
    for i, (r, l, f) in enumerate(rows):
        ids[i, : len(r)] = torch.tensor(r)
        lab[i, : len(l)] = torch.tensor(l)
        att[i, : len(r)] = 1
        on = torch.tensor([x != IGNORE for x in l])
        weights[i, : len(l)] = torch.where(torch.tensor(f), mention_weight, 1.0) * on
    return {"input_ids": ids, "attention_mask": att, "labels": lab, "weights": weights}


def pack_batch(convs: list[Conversation], tokenizer, fmt: tuple[int, str] = (NUM_IMAGE_TOKENS, "image_first"),
               mention_weight: float = 1.0, max_answer_tokens: int = 96, image_size: int | None = None) -> dict:
    """pack_text plus pixel_values [B, 3, S, S] and the per-patch labels {kind: [B, N]}."""
    batch = pack_text(convs, tokenizer, fmt, mention_weight, max_answer_tokens)
    kwargs = {} if image_size is None else {"size": image_size}
    batch["pixel_values"] = torch.cat([image_to_pixels(c.image, **kwargs) for c in convs])
    batch["patch_labels"] = patch_label_batch(convs)
    return batch


def patch_label_batch(records) -> dict[str, torch.Tensor]:
    """{kind: [B, GRID*GRID] long} from samples or conversations (their `patch_labels` grids)."""
    return {k: torch.from_numpy(np.stack([r.patch_labels[k] for r in records]).reshape(len(records), -1))
            for k in records[0].patch_labels}

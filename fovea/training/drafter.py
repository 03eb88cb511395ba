"""Train FOVEA drafters on target artifacts (hidden states, logits) computed on the fly.

Per position i of a teacher-forced sequence the drafter reads (token i+1, target feature f_i) and
must predict f_{i+1} and the target's distribution at i+1 (step 1, tree depth 0). A second,
unrolled step reads (token i+2, its own state h_i) at depth 1 (EAGLE-3's training-time test),
so the depth-1 draft states the tree uses at run time are trained too; `unroll` > 2 (a deviation)
goes on the same way to depth unroll-1, for drafters corrected deeper than the paper's depth 1. Loss (paper recipe):
    L = 1.0 L_hid + 0.2 L_KL + 1.0 L_tok
    L_hid = SmoothL1(h + g c, f_next) + SmoothL1(h, f_next)    (corrected + pre-correction state)
    L_KL  = KL(p_target || p_draft)
    L_tok = 1.5 CE(draft, argmax target) + 0.5 softplus(0.5 - (z_y - z_6th competitor))
With `correction.plain_weight` > 0 (a deviation) the KL and token terms are added again, so weighted,
for the head on the uncorrected state h: the state every level deeper than max_depth drafts from.
The FOVEA drafter and the no-correction (EAGLE-style) baseline are trained in the same loop on
the same batches and target artifacts, so the comparison is fair. The target is frozen.
"""
from __future__ import annotations

import contextlib

import torch
import torch.nn.functional as F

from fovea.config import CorrectionConfig, RetrievalConfig
from fovea.draft import context_pairs, image_states
from fovea.drafter import Drafter

LOSS_WEIGHTS = {"hid": 1.0, "kl": 0.2, "tok": 1.0}


@torch.no_grad()
def target_artifacts(target, ids: torch.Tensor, att: torch.Tensor, pixels) -> dict:
    """Teacher-forced target pass -> features [B, T, D], logits [B, T, V], visual tokens [B, N, D]
    (a list of [N_b, D] when images give different token counts, e.g. LLaVA-NeXT anyres, Qwen2.5-VL).
    pixels: pixel values [B, 3, H, W], or a dict of the backbone's image inputs
    (`HFVisionTarget.batch_model_inputs`: pixel_values, image_sizes, image_grid_thw, mm_token_type_ids)."""
    images = pixels if isinstance(pixels, dict) else {"pixel_values": pixels}
    out = target.model.model(input_ids=ids, attention_mask=att, use_cache=False, **images)
    feats = out.last_hidden_state.float()
    vis = out.image_outputs.pooler_output if getattr(out, "image_outputs", None) is not None \
        else out.image_hidden_states
    if isinstance(vis, (list, tuple)) and len({v.shape[0] for v in vis}) > 1:
        visual = [v.float() for v in vis]                             # one [N_b, D] per row
    else:
        vis = torch.stack(list(vis)) if isinstance(vis, (list, tuple)) else vis
        visual = vis.reshape(ids.shape[0], -1, feats.shape[-1]).float()
    return {"feats": feats, "logits": target.model.lm_head(out.last_hidden_state).float(), "visual": visual}


def token_loss(logits: torch.Tensor, target_logits: torch.Tensor) -> torch.Tensor:
    """1.5 CE(target argmax) + 0.5 softplus(0.5 - margin to the 6th competing logit); rows [M, V]."""
    y = target_logits.argmax(-1)
    ce = F.cross_entropy(logits, y)
    z_y = logits.gather(-1, y[:, None]).squeeze(-1)
    competitors = logits.scatter(-1, y[:, None], float("-inf"))
    sixth = competitors.topk(6, dim=-1).values[:, -1]
    return 1.5 * ce + 0.5 * F.softplus(0.5 - (z_y - sixth)).mean()


def _head_losses(drafter, h, depth, memory_per_row, valid, nxt_feat, nxt_logits, ccfg, rcfg, corrected=None):
    """Losses of draft states h [B, T, D] at `depth` against next features / logits, on `valid` [B, T].
    `corrected` [B, T, D]: the LM-head inputs already computed for these states (skips the corrector)."""
    rows_h, rows_pre, rows_logits = [], [], []
    for b in range(h.shape[0]):
        hb = h[b][valid[b]]                                           # [M_b, D]
        if hb.shape[0] == 0:
            continue
        if corrected is not None:
            pre = corrected[b][valid[b]]
            logits = drafter.logits(pre)
        else:
            d = torch.full((hb.shape[0],), depth, dtype=torch.long, device=hb.device)
            logits, _, _, pre = drafter.head_with_state(hb, d, memory_per_row[b], ccfg, rcfg)
        rows_h.append(hb)
        rows_pre.append(pre)
        rows_logits.append(logits)
    h_all, pre_all, lg = torch.cat(rows_h), torch.cat(rows_pre), torch.cat(rows_logits)
    f, tl = nxt_feat[valid], nxt_logits[valid]
    hid = F.smooth_l1_loss(pre_all, f) + F.smooth_l1_loss(h_all, f)
    kl = F.kl_div(F.log_softmax(lg, -1), F.log_softmax(tl, -1), log_target=True, reduction="batchmean")
    tok = token_loss(lg, tl)
    acc = (lg.argmax(-1) == tl.argmax(-1)).float().mean()
    loss = LOSS_WEIGHTS["hid"] * hid + LOSS_WEIGHTS["kl"] * kl + LOSS_WEIGHTS["tok"] * tok
    metrics = {"hid": hid.item(), "kl": kl.item(), "tok": tok.item(), "acc": acc.item()}
    if ccfg.enabled and ccfg.plain_weight > 0:   # the head on the uncorrected states too (deeper levels read it)
        plain = drafter.logits(h_all)
        kl_p = F.kl_div(F.log_softmax(plain, -1), F.log_softmax(tl, -1), log_target=True, reduction="batchmean")
        loss = loss + ccfg.plain_weight * (LOSS_WEIGHTS["kl"] * kl_p + LOSS_WEIGHTS["tok"] * token_loss(plain, tl))
        metrics.update(kl_plain=kl_p.item(), acc_plain=(plain.argmax(-1) == tl.argmax(-1)).float().mean().item())
    return loss, metrics


def retrieval_ground_loss(drafter: Drafter, h: torch.Tensor, depth: int, memory: list, patches: torch.Tensor,
                          valid: torch.Tensor, rcfg: RetrievalConfig) -> tuple[torch.Tensor | None, float]:
    """-log of the retrieval probability mass (softmax over the whole memory, before the K rule) on the
    patches `patches` [B, T, N] names, at the valid [B, T] draft states h [B, T, D] that name something
    -> (mean loss or None when no state does, mean mass)."""
    losses = []
    for b in range(h.shape[0]):
        sel = valid[b] & patches[b].any(-1)
        if not bool(sel.any()):
            continue
        hb = h[b][sel]
        d = torch.full((hb.shape[0],), depth, dtype=torch.long, device=hb.device)
        logp = torch.log_softmax(drafter.retriever.scores(hb, d, memory[b], rcfg.mode), -1)
        losses.append(-torch.logsumexp(logp.masked_fill(~patches[b][sel].to(logp.device), float("-inf")), -1))
    if not losses:
        return None, float("nan")
    nll = torch.cat(losses)
    return nll.mean(), nll.detach().neg().exp().mean().item()


def drafter_loss(drafter: Drafter, art: dict, ids: torch.Tensor, loss_mask: torch.Tensor,
                 att: torch.Tensor, ccfg: CorrectionConfig, rcfg: RetrievalConfig = RetrievalConfig(),
                 image_token_id: int | None = None, ground: torch.Tensor | None = None, unroll: int = 2):
    """`unroll`-step (depths 0..unroll-1; the paper: 2) drafter loss on one batch. loss_mask [B, T]: target positions j
    whose logits the drafter must match (the token at j+1 is an answer token). A text-context
    drafter (`drafter.cfg.context == "text"`) attends only to pairs without an image placeholder
    (`image_token_id`), as it caches at run time; positions stay the target's. `ground` [B, T, N]
    (bool; position j: the patches of what token j+1 names) adds `ccfg.ground_weight` x the
    retrieval-grounding loss of both steps' draft states."""
    feats, logits = art["feats"], art["logits"]
    b, t, _ = feats.shape
    if drafter.cfg.memory_source == "hidden":   # the target's last-layer states at the image positions
        if image_token_id is None:
            raise ValueError("a drafter whose memory is the target's image states needs the target's image_token_id")
        visual = [image_states(feats[i], ids[i], image_token_id) for i in range(b)]
    else:
        visual = art["visual"]
    memory = [drafter.encode_memory(visual[i]) for i in range(b)] if ccfg.enabled else [None] * b
    dev = feats.device
    pos = torch.arange(t - 1, device=dev)[None].expand(b, -1)
    causal = torch.tril(torch.ones(t - 1, t - 1, dtype=torch.bool, device=dev))
    pad = att[:, 1:].bool()
    keys = pad
    if drafter.cfg.context == "text":
        if image_token_id is None:
            raise ValueError("a text-context drafter needs the target's image_token_id")
        keys = pad & context_pairs(ids, image_token_id)
    # every row keeps itself, so image rows (never in the loss) do not softmax over nothing
    eye = torch.eye(t - 1, dtype=torch.bool, device=dev)[None]
    mask1 = (causal[None] & (keys[:, None, :] | eye))[:, None]          # [B, 1, T-1, T-1]
    # step 1: pair i = (token i+1, f_i) -> predicts f_{i+1}, logits_{i+1}
    h1, kv1 = drafter.step(ids[:, 1:], feats[:, :-1], pos, mask1, None)
    v1 = loss_mask[:, 1:] & pad
    # with propagate, children read the corrected depth-0 states: correct every position once, for both uses
    pre1 = corrected_states(drafter, h1, memory, ccfg, rcfg) if ccfg.propagate and ccfg.enabled else None
    loss1, m1 = _head_losses(drafter, h1, 0, memory, v1, feats[:, 1:], logits[:, 1:], ccfg, rcfg, pre1)
    # step k (depth k-1), k = 2..unroll: pair (token i+k, its parent's state h_{k-1,i}) at position i+k-1
    # attends pairs 0..i of step 1 (the committed context), its ancestors (row i of steps 2..k-1) and itself
    steps = [(h1, v1, m1)]
    past, lens, feed, loss = kv1, [t - 1], (h1 if pre1 is None else pre1), loss1
    for k in range(2, unroll + 1):
        tk = t - k
        mask = torch.zeros(b, 1, tk, sum(lens) + tk, dtype=torch.bool, device=dev)
        mask[:, 0, :, : t - 1] = mask1[:, 0, :tk, :]
        off = t - 1
        for n in (*lens[1:], tk):                                     # ancestors' rows i, then itself
            mask[:, 0, :, off:off + n] = torch.eye(tk, n, dtype=torch.bool, device=dev)
            off += n
        hk, kvk = drafter.step(ids[:, k:], feed[:, :tk], pos[:, :tk] + (k - 1), mask, past)
        vk = loss_mask[:, k:] & att[:, k:].bool()
        lossk, mk = _head_losses(drafter, hk, k - 1, memory, vk, feats[:, k:], logits[:, k:], ccfg, rcfg)
        loss = loss + lossk
        steps.append((hk, vk, mk))
        if k < unroll:
            past = [(torch.cat([pk, nk], 2), torch.cat([pv, nv], 2)) for (pk, pv), (nk, nv) in zip(past, kvk)]
            lens.append(tk)
            feed = corrected_states(drafter, hk, memory, ccfg, rcfg, k - 1) if ccfg.propagate and ccfg.enabled \
                else hk
    if ground is not None and ccfg.enabled and ccfg.ground_weight > 0:
        # the state of pair i at step k (depth k-1) predicts token i+k+1: ground rows k..
        for depth, (h, valid, m) in enumerate(steps):
            g_loss, mass = retrieval_ground_loss(drafter, h, depth, memory, ground[:, depth + 1:][:, :h.shape[1]].to(h.device),
                                                 valid, rcfg)
            m["ground_mass"] = mass
            if g_loss is not None:
                loss = loss + ccfg.ground_weight * g_loss
    return loss, {f"{key}{k}": v for k, (_, _, m) in enumerate(steps, 1) for key, v in m.items()}


def corrected_states(drafter: Drafter, h: torch.Tensor, memory: list, ccfg: CorrectionConfig,
                     rcfg: RetrievalConfig, depth: int = 0) -> torch.Tensor:
    """h [B, T, D] draft states at `depth` -> h + g * c per row (its image's memory): what a child reads
    with correction.propagate."""
    return torch.stack([drafter.correct(h[b], depth, memory[b], ccfg, rcfg)[0] for b in range(h.shape[0])])


def answer_loss_mask(labels: torch.Tensor) -> torch.Tensor:
    """labels [B, T] (-100 outside the answer) -> [B, T] True where logits at j predict an answer token."""
    m = torch.zeros_like(labels, dtype=torch.bool)
    m[:, :-1] = labels[:, 1:] != -100
    return m


def online_inputs(target):
    """The target runs on each batch: (ids, att, labels, pixels[, ground patches [B, T, N]]) ->
    (artifacts, ids, att, loss mask, ground or None). `fovea.training.dumps.dumped_inputs` is the
    same from stored artifacts."""
    def inputs(batch):
        ids, att, labels, pixels, *rest = batch
        return target_artifacts(target, ids, att, pixels), ids, att, answer_loss_mask(labels), \
            (rest[0] if rest else None)
    return inputs


def train_steps(target, drafters: dict, batches, ccfgs: dict, opt, steps: int, on_step=None,
                unroll: int = 2, autocast=None, inputs=None) -> list[dict]:
    """Run `steps` optimisation steps of every drafter in `drafters` on shared target artifacts.
    `inputs` turns a batch of `batches` into (artifacts, ids, att, loss mask, ground); default
    `online_inputs(target)`, where batches yields (ids, att, labels, pixels[, ground patches]).
    The forward passes run inside `autocast` (e.g. `common.bf16_autocast`; None: fp32); returns the
    per-step metrics."""
    history = []
    inputs = inputs or online_inputs(target)
    for step in range(steps):
        batch = next(batches)
        total, metrics = 0.0, {}
        with autocast if autocast is not None else contextlib.nullcontext():
            art, ids, att, lmask, ground = inputs(batch)
            for name, drafter in drafters.items():
                loss, m = drafter_loss(drafter, art, ids, lmask, att, ccfgs[name],
                                       image_token_id=getattr(target, "image_token_id", None), ground=ground,
                                       unroll=unroll)
                total = total + loss
                metrics.update({f"{name}/{k}": v for k, v in m.items()} | {f"{name}/loss": loss.item()})
        opt.zero_grad(set_to_none=True)
        total.backward()
        for drafter in drafters.values():   # clipped separately: one drafter's gradients never scale the other's
            torch.nn.utils.clip_grad_norm_(list(drafter.parameters()), 1.0)
        opt.step()
        history.append(metrics)
        if on_step is not None:
            on_step(step, metrics)
    return history

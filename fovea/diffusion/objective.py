"""The masked-diffusion training objective (LLaDA / MDLM) on the answer canvas.

For each row draw t ~ U(0, 1), mask each canvas token independently with probability
p = (1 - eps) t + eps (eps keeps p > 0, so 1/p is bounded), and take the cross-entropy on the masked
positions only, each weighted 1/p, summed and divided by the number of canvas positions:

    loss = 1/(B L) * sum_b sum_j [canvas_bj masked] * CE(logits_bj, target_bj) / p_b

which is an upper bound on the negative log-likelihood of the canvas (the ELBO of masked
diffusion). The prompt is never masked. Knows nothing about models or data.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

EPS = 1e-3


def answer_canvas(answer_ids: list[int], length: int, eos_id: int) -> list[int]:
    """An answer's token ids cut to length - 1, then EOS up to `length` (LLaDA's padding: the EOS
    run is part of what the model learns to predict, so it predicts the answer's length)."""
    ids = list(answer_ids)[: length - 1]
    return ids + [eos_id] * (length - len(ids))


def mask_canvas(canvas: torch.Tensor, mask_id: int, generator: torch.Generator | None = None,
                eps: float = EPS) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(noisy canvas [B, L] with masked tokens set to mask_id, masked bool [B, L], p [B] the masking rate
    of each row) for clean canvases [B, L]."""
    b, length = canvas.shape
    t = torch.rand(b, generator=generator)
    p = (1 - eps) * t + eps                                                      # [B]
    masked = torch.rand(b, length, generator=generator) < p[:, None]
    return canvas.masked_fill(masked, mask_id), masked, p


def mask_prefix_rows(canvas: torch.Tensor, noisy: torch.Tensor, masked: torch.Tensor, p: torch.Tensor,
                     mask_id: int, eos_id: int, share: float,
                     generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Redraw a `share` of the rows of mask_canvas's (noisy, masked, p) as the left-to-right block schedule
    sees its canvas: a clean prefix of k tokens, k uniform in 0..n (n the answer's length before its EOS
    run, so the first EOS is predicted too), and every later position masked, with p = 1 (the whole suffix
    is masked). I.i.d. masking almost never draws that state, which is every state the full schedule with
    blocks of 1 decodes from. share = 0 leaves the rows (and the generator) as they were."""
    if share <= 0:
        return noisy, masked, p
    b, length = canvas.shape
    pick = torch.rand(b, generator=generator) < share
    is_eos = canvas == eos_id
    n = torch.where(is_eos.any(1), is_eos.float().argmax(1), torch.full((b,), length)).clamp(max=length - 1)
    k = (torch.rand(b, generator=generator) * (n + 1).float()).long()            # 0..n
    suffix = torch.arange(length)[None, :] >= k[:, None]
    masked = torch.where(pick[:, None], suffix, masked)
    p = torch.where(pick, torch.ones_like(p), p)
    return canvas.masked_fill(masked, mask_id), masked, p


def diffusion_loss(logits: torch.Tensor, canvas: torch.Tensor, masked: torch.Tensor, p: torch.Tensor,
                   weights: torch.Tensor | None = None) -> torch.Tensor:
    """The 1/p-weighted cross-entropy on masked positions (module doc): logits [B, L, V], clean
    canvas [B, L], masked [B, L], p [B]. `weights` [B, L] scales each position's term (the target
    recipe's up-weighted stress and mention tokens); None: 1 everywhere, the plain bound."""
    ce = F.cross_entropy(logits.flatten(0, 1).float(), canvas.flatten(), reduction="none").view(canvas.shape)
    if weights is not None:
        ce = ce * weights
    return (ce * masked / p[:, None]).sum() / canvas.numel()

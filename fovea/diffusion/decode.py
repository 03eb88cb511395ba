"""Diffusion decoding of one question: semi-autoregressive blocks with low-confidence remasking
(LLaDA), Fast-dLLM's threshold unmasking, a fixed-region confidence gate, and LATCH's two early-exit
rules, CVC (global stop on the task's candidate span) and BWEC (early commit of a non-final block).

Every step is one denoising forward over the whole canvas (NFE counts them) and, when asked, one
`DenoiseStep` record: the prediction and confidence at every position, what is committed, the
candidate span and the rule that acted, so a viewer can draw a step x position grid. The rules
are small free functions; `diffusion_generate` only sequences them. Knows nothing about training
or about how results are tabulated.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from fovea.diffusion.candidate import TokenText, candidate_span
from fovea.diffusion.config import DiffusionDecodeConfig

# which rule committed tokens in a step (DenoiseStep.rule) and ended a decode (stopped_by)
RULES = ("schedule", "threshold", "bwec", "cvc", "gate")


@dataclass(frozen=True)
class DenoiseStep:
    step: int                                # 0-based; one denoising forward each
    block: int                               # the block the schedule was decoding
    prediction: tuple[int, ...]              # [L] committed token, else this step's argmax
    confidence: tuple[float, ...]            # [L] top-1 probability: this step's where masked, at commit where committed
    committed: tuple[bool, ...]              # [L] after this step
    span: tuple[int, int] | None             # the candidate span [start, end) when a parser ran
    rule: str                                # one of RULES
    held: int = 0                            # steps the span (place and tokens) has held, this one included
    span_confidence: float | None = None     # the span's minimum settled confidence, as CVC read it


@dataclass(frozen=True)
class DiffusionResult:
    tokens: tuple[int, ...]                  # the final canvas
    text: str                                # the answer: the canvas before its first EOS, decoded
    nfe: int                                 # denoising forwards
    stopped_by: str                          # "schedule"/"threshold" (every position decoded), "cvc", "gate"
    seconds: float                           # wall time, prefill included
    answer_tokens: int                       # tokens before the first EOS
    steps: tuple[DenoiseStep, ...] = ()      # empty unless recorded


@dataclass
class CanvasState:
    tokens: torch.Tensor                     # [L] long, the mask id where not yet committed
    committed: torch.Tensor                  # [L] bool
    confidence: torch.Tensor                 # [L] each committed token's probability when it was committed
    block: int = 0
    held: int = 0                            # consecutive steps the candidate span has held
    last_span: tuple | None = None           # (start, end, its tokens) at the previous step


def block_bounds(block: int, block_length: int, length: int) -> tuple[int, int]:
    return block * block_length, min((block + 1) * block_length, length)


def read_prediction(logits: torch.Tensor, state: CanvasState) -> tuple[torch.Tensor, torch.Tensor]:
    """(prediction [L], confidence [L]): where committed, the token and its probability when it was committed
    (the denoiser is never trained to predict a visible token, so its later logits there mean nothing);
    elsewhere this step's argmax and top-1 probability."""
    top, arg = logits.softmax(-1).max(-1)                                        # [L], [L]
    return (torch.where(state.committed, state.tokens, arg),
            torch.where(state.committed, state.confidence, top))


def settled(state: CanvasState, conf: torch.Tensor) -> torch.Tensor:
    """[L] the stop rules' view of confidence: a committed token is never remasked, so it is final
    (1.0) whatever its probability was; a masked position counts with this step's top-1 probability."""
    return conf.masked_fill(state.committed, 1.0)


def hold_span(state: CanvasState, span, pred_list: list[int]) -> None:
    """Count the consecutive steps the candidate span has kept its place and its argmax tokens."""
    key = None if span is None else (*span, tuple(pred_list[span[0]:span[1]]))
    state.held = state.held + 1 if key is not None and key == state.last_span else int(key is not None)
    state.last_span = key


def span_confidence(state: CanvasState, span, conf: torch.Tensor) -> float | None:
    """The span's minimum settled confidence (before this step commits anything), None without a span."""
    return None if span is None else float(settled(state, conf)[span[0]:span[1]].min())


def cvc_fires(state: CanvasState, span, conf: torch.Tensor, cfg) -> bool:
    """CVC: the span's minimum settled confidence is >= tau_c and its place and tokens held `stable_steps`
    steps (this one included; `hold_span` has counted this step)."""
    return span is not None and state.held >= cfg.stable_steps and span_confidence(state, span, conf) >= cfg.tau_c


def gate_fires(state: CanvasState, conf: torch.Tensor, threshold: float | None) -> bool:
    """The fixed-region gate: the mean settled confidence over the whole canvas reaches the threshold."""
    return threshold is not None and float(settled(state, conf).mean()) >= threshold


def bwec_fires(state: CanvasState, conf: torch.Tensor, lo: int, hi: int, final: bool, tau_b: float,
               per_step: int = 1) -> bool:
    """BWEC's local rule: every still-masked position of a non-final block has confidence >= tau_b. It
    acts only where it commits more than the schedule's `per_step` would (a block of 1 is never early)."""
    open_ = ~state.committed[lo:hi]
    return not final and int(open_.sum()) > per_step and float(conf[lo:hi][open_].min()) >= tau_b


def schedule_picks(state: CanvasState, conf: torch.Tensor, lo: int, hi: int, schedule) -> torch.Tensor:
    """Canvas positions the schedule commits this step inside block [lo, hi): the most confident
    masked ones (low-confidence remasking), or every one over the unmasking threshold (at least one)."""
    scores = conf[lo:hi].masked_fill(state.committed[lo:hi], -1.0)
    n_open = int((~state.committed[lo:hi]).sum())
    if schedule.unmask_threshold is not None:
        over = (scores >= schedule.unmask_threshold).nonzero()[:, 0]
        return lo + (over if over.numel() else scores.argmax()[None])
    return lo + scores.topk(min(schedule.tokens_per_step, n_open)).indices


def advance_block(state: CanvasState, block_length: int, length: int) -> None:
    """Move the schedule past every block that is fully committed."""
    while state.block * block_length < length:
        lo, hi = block_bounds(state.block, block_length, length)
        if not bool(state.committed[lo:hi].all()):
            return
        state.block += 1


def commit(state: CanvasState, pred: torch.Tensor, conf: torch.Tensor, where: torch.Tensor) -> None:
    """Fix the predicted tokens at `where` (bool [L] or index [K]) with their confidence."""
    state.tokens[where] = pred[where]
    state.confidence[where] = conf[where]
    state.committed[where] = True


def step_rule(state, pred, conf, span, cfg: DiffusionDecodeConfig, length: int) -> str:
    """Apply this step's rules in order (CVC, gate, BWEC, the schedule); return the one that acted."""
    lo, hi = block_bounds(state.block, cfg.schedule.block_length, length)
    final = hi == length
    if cfg.latch.cvc and cvc_fires(state, span, conf, cfg.latch):
        commit(state, pred, conf, ~state.committed)
        return "cvc"
    if gate_fires(state, conf, cfg.gate.threshold):
        commit(state, pred, conf, ~state.committed)
        return "gate"
    if cfg.latch.bwec and bwec_fires(state, conf, lo, hi, final, cfg.latch.tau_b,
                                             cfg.schedule.tokens_per_step):
        commit(state, pred, conf, lo + (~state.committed[lo:hi]).nonzero()[:, 0])
        return "bwec"
    commit(state, pred, conf, schedule_picks(state, conf, lo, hi, cfg.schedule))
    return "threshold" if cfg.schedule.unmask_threshold is not None else "schedule"


@torch.no_grad()
def diffusion_generate(model, image, question: str, cfg: DiffusionDecodeConfig = DiffusionDecodeConfig(),
                       task: str | None = None, record: bool = False) -> DiffusionResult:
    """Decode one answer. `task` ("family/task") names the candidate parser CVC needs; without it CVC
    never fires. `record` keeps a DenoiseStep per step."""
    if not str(question or "").strip():
        raise ValueError("Please give a question about the image.")
    start_time = time.perf_counter()
    length, mask_id = model.canvas.length, model.canvas.mask_token_id
    cache, last_id, start = model.prefill(image, question)
    state = CanvasState(torch.full((length,), mask_id, device=model.device),
                        torch.zeros(length, dtype=torch.bool, device=model.device),
                        torch.zeros(length, device=model.device))
    parse = (cfg.latch.cvc or record) and task is not None
    steps, rule, nfe = [], "schedule", 0
    while not bool(state.committed.all()):
        # 1. denoise: one forward over the canvas given the cached prompt
        logits = model.denoise(cache, last_id, start, state.tokens)
        nfe += 1
        # 2. read the prediction and its confidence at every position; parse the candidate span
        pred, conf = read_prediction(logits, state)
        pred_list = pred.tolist()
        span = candidate_span(task, pred_list, model.token_text) if parse else None
        hold_span(state, span, pred_list)
        span_conf = span_confidence(state, span, conf) if record else None
        # 3. act: CVC or the gate stop the decode; else BWEC or the schedule commit in the block
        block = state.block
        rule = step_rule(state, pred, conf, span, cfg, length)
        # 4. record the step, then move past finished blocks
        if record:
            steps.append(DenoiseStep(nfe - 1, block, tuple(pred_list), tuple(conf.tolist()),
                                     tuple(state.committed.tolist()), span, rule, state.held, span_conf))
        advance_block(state, cfg.schedule.block_length, length)
    return finish(model, state, nfe, rule, start_time, tuple(steps))


def answer_of(model, tokens) -> tuple[list[int], str]:
    """(the answer's tokens, its text): a canvas read up to its first EOS."""
    tokens = list(tokens)
    answer = tokens[: tokens.index(model.eos_id)] if model.eos_id in tokens else tokens
    return answer, model.tokenizer.decode(answer, skip_special_tokens=True).strip()


def finish(model, state: CanvasState, nfe: int, rule: str, start_time: float, steps: tuple) -> DiffusionResult:
    """The result of a decode: the answer before the canvas's first EOS, and its counts."""
    tokens = state.tokens.tolist()
    answer, text = answer_of(model, tokens)
    return DiffusionResult(tuple(tokens), text, nfe, rule, time.perf_counter() - start_time, len(answer), steps)

"""Settings of diffusion decoding, one frozen dataclass per concern, nested in DiffusionDecodeConfig,
with the benchmark's named presets (`from_name`).

- ScheduleConfig: the semi-autoregressive block schedule (LLaDA) and Fast-dLLM's threshold unmasking;
- GateConfig: the fixed-region confidence gate (the kind of stop LATCH criticises);
- LatchConfig: LATCH's two rules, CVC (global stop on the candidate span) and BWEC (early commit of a
  non-final block).

LATCH's values are one frozen set for every task, chosen on tuning seeds (docs/latch.md says how).
Knows nothing about models.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

# The block length every method shares, chosen on tuning seeds by `python -m fovea.bench --diffusion
# --tune` (docs/latch.md), like FROZEN_LATCH below
FROZEN_BLOCK_LENGTH = 1
# the block lengths the tuning tries and the studio offers
BLOCK_LENGTHS = (1, 2, 4, 8, 16, 32)
# Fast-dLLM's threshold unmasking commits several positions of a block in one step, so blocks of 1 leave
# it nothing to do in parallel: it keeps blocks of 4, the length the shared schedule used before blocks of
# 1 and 2 were in the sweep (docs/latch.md, "The tuning")
THRESHOLD_BLOCK_LENGTH = 4


@dataclass(frozen=True)
class ScheduleConfig:
    """Blocks of `block_length` canvas positions are decoded left to right; inside the current block
    each step commits its `tokens_per_step` most confident masked positions (low-confidence remasking:
    the others stay masked). With `unmask_threshold`, a step instead commits every masked position of
    the block whose confidence clears it, and at least the most confident one (Fast-dLLM)."""

    block_length: int = FROZEN_BLOCK_LENGTH
    tokens_per_step: int = 1                 # 1: the full schedule, one denoising step per token
    unmask_threshold: float | None = None

    def __post_init__(self):
        if self.block_length < 1 or self.tokens_per_step < 1:
            raise ValueError("block_length and tokens_per_step must be at least 1")
        if self.unmask_threshold is not None and not 0.0 <= self.unmask_threshold <= 1.0:
            raise ValueError(f"unmask_threshold must be in [0, 1], got {self.unmask_threshold}")


@dataclass(frozen=True)
class GateConfig:
    """Stop as soon as the mean top-1 probability over the whole canvas (a fixed region that knows
    nothing about where the answer sits) reaches `threshold`, and fill the rest with the argmax."""

    threshold: float | None = None           # None: the gate is off


@dataclass(frozen=True)
class LatchConfig:
    """CVC: stop when the candidate span's minimum confidence is >= tau_c (a committed token counts 1.0:
    it is never remasked) and the span (its place and its argmax tokens) has held for `stable_steps`
    consecutive steps; then fill the rest with the argmax.
    BWEC: commit the current block with its argmax when every still-masked position in it has
    confidence >= tau_b, never for the final block (which stays under CVC)."""

    cvc: bool = False
    tau_c: float = 0.9
    stable_steps: int = 2
    bwec: bool = False
    tau_b: float = 0.9

    def __post_init__(self):
        if not (0.0 <= self.tau_c <= 1.0 and 0.0 <= self.tau_b <= 1.0) or self.stable_steps < 1:
            raise ValueError("tau_c and tau_b must be in [0, 1] and stable_steps at least 1")


@dataclass(frozen=True)
class DiffusionDecodeConfig:
    name: str = "full"
    schedule: ScheduleConfig = field(default_factory=ScheduleConfig)
    gate: GateConfig = field(default_factory=GateConfig)
    latch: LatchConfig = field(default_factory=LatchConfig)

    @classmethod
    def from_name(cls, name: str) -> "DiffusionDecodeConfig":
        """The benchmark's methods: full schedule, fixed-region gate, threshold unmasking, LATCH, and
        LATCH without BWEC (all on the same block schedule but threshold unmasking's, which needs
        blocks longer than 1)."""
        if name not in PRESETS:
            raise ValueError(f"unknown diffusion decoding {name!r}; choose one of {sorted(PRESETS)}")
        return PRESETS[name]

    def with_latch(self, **changes) -> "DiffusionDecodeConfig":
        return replace(self, latch=replace(self.latch, **changes))

    def with_block_length(self, block_length: int | None) -> "DiffusionDecodeConfig":
        """This decoding on blocks of `block_length` (None: its own)."""
        return self if block_length is None else replace(self, schedule=replace(self.schedule, block_length=block_length))


# LATCH's frozen set (one for every task; see docs/latch.md for the tuning-seed sweep that chose it)
FROZEN_LATCH = LatchConfig(cvc=True, tau_c=0.8, stable_steps=2, bwec=True, tau_b=0.99)
# the fixed-region gate's threshold, chosen by the same sweep so that its mean NFE matches LATCH's: the
# two stop rules are compared at the same speed
FROZEN_GATE_THRESHOLD = 0.97
PRESETS = {
    "full": DiffusionDecodeConfig("full"),
    "gate": DiffusionDecodeConfig("gate", gate=GateConfig(threshold=FROZEN_GATE_THRESHOLD)),
    "threshold": DiffusionDecodeConfig("threshold", schedule=ScheduleConfig(block_length=THRESHOLD_BLOCK_LENGTH, unmask_threshold=0.9)),
    "latch": DiffusionDecodeConfig("latch", latch=FROZEN_LATCH),
    "latch_no_bwec": DiffusionDecodeConfig("latch_no_bwec", latch=replace(FROZEN_LATCH, bwec=False)),
}
METHODS = tuple(PRESETS)

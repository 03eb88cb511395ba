"""Configuration: frozen dataclasses, one per concern, nested in `FoveaConfig`.

Each numeric field with a valid range declares it beside its default (`ranged`); the dataclass checks
it, and the app's controls and the CLIs read it (`range_of`), so a range is written once.
Knows nothing about models or tensors; CLIs build these from argparse and write
them as JSON next to every checkpoint and result (`to_dict` / `from_dict`).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field, fields, is_dataclass

RETRIEVAL_MODES = (
    "cumulative",      # the paper's rule: smallest set reaching mass rho, clamped to [K_min, K_max]
    "fixed",           # top-K with a fixed K (the paper's appendix uses K = 16)
    "dense",           # every valid entry
    "random",          # K random valid entries, uniform weights (control)
    "static",          # the same entries for every draft state of an image (control)
    "query_agnostic",  # scores from a learned constant query, not the draft state (control)
    "state_only",      # the query without the depth embedding (control)
)


DRAFTER_CONTEXTS = ("full", "text")
MEMORY_SOURCES = ("projected", "hidden")


@dataclass(frozen=True)
class Range:
    """The values a numeric field takes: lo..hi (hi None: no upper bound), an end left out where open."""
    lo: float
    hi: float | None = None
    open_lo: bool = False
    open_hi: bool = False

    def __contains__(self, x) -> bool:
        above = x > self.lo if self.open_lo else x >= self.lo
        return above and (self.hi is None or (x < self.hi if self.open_hi else x <= self.hi))

    @property
    def text(self) -> str:
        """What an error message says a value must be: "in [1, 16]", "in (0, 1]", ">= 1", "> 0"."""
        if self.hi is None:
            return f"{'>' if self.open_lo else '>='} {self.lo:g}"
        return f"in {'(' if self.open_lo else '['}{self.lo:g}, {self.hi:g}{')' if self.open_hi else ']'}"

    def on_grid(self, step: float) -> tuple[float, float | None]:
        """The closed ends a control stepping by `step` offers: an open end moves one step inward."""
        lo = self.lo + step if self.open_lo else self.lo
        hi = None if self.hi is None else self.hi - step if self.open_hi else self.hi
        return round(lo, 10), None if hi is None else round(hi, 10)


def ranged(default, lo: float, hi: float | None = None, *, open_lo: bool = False, open_hi: bool = False):
    """A dataclass field with its valid range (checked by `check_ranges`, read by `range_of`)."""
    return field(default=default, metadata={"range": Range(lo, hi, open_lo, open_hi)})


def range_of(cls, name: str) -> Range:
    """The declared range of field `name` of config dataclass `cls` (KeyError when it has none)."""
    return {f.name: f.metadata["range"] for f in fields(cls) if "range" in f.metadata}[name]


def check_ranges(cfg) -> None:
    """ValueError naming the first ranged field of `cfg` outside its range ("tree.depth must be in
    [1, 16], got 17"); the section is the class name without "Config"."""
    section = type(cfg).__name__.removesuffix("Config").lower()
    for f in fields(cfg):
        value = getattr(cfg, f.name)
        if "range" in f.metadata and value not in f.metadata["range"]:
            raise ValueError(f"{section}.{f.name} must be {f.metadata['range'].text}, got {value}")


@dataclass(frozen=True)
class RetrievalConfig:
    mode: str = "cumulative"
    rho: float = ranged(0.8, 0.0, 1.0, open_lo=True)   # cumulative probability mass (paper: 0.8)
    # the paper's 32-256 of 870-2,900 entries is K_min 1-4% and K_max 9-29% of the memory; on the bundled
    # 144-entry memory 4 and 32 are 2.8% and 22%
    k_min: int = ranged(4, 1)
    k_max: int = ranged(32, 1)
    fixed_k: int = ranged(16, 1)   # used by mode="fixed" (and as K for random / static)

    def __post_init__(self) -> None:
        if self.mode not in RETRIEVAL_MODES:
            raise ValueError(f"retrieval mode must be one of {RETRIEVAL_MODES}, got {self.mode!r}")
        check_ranges(self)
        if self.k_min > self.k_max:
            raise ValueError(f"need k_min <= k_max, got k_min={self.k_min}, k_max={self.k_max}")


@dataclass(frozen=True)
class LocalityConfig:
    """Focus-locality predictor after PRR (arXiv 2606.30389); the formulas are in `fovea.locality`.

    Not part of `FoveaConfig` yet: decoding does not use the predictor (it is measured offline).
    """
    alpha: float = ranged(0.5, 0.0, 1.0, open_lo=True)   # level smoothing: weight of the newest observed mass
    beta: float = ranged(0.3, 0.0, 1.0)     # trend smoothing: weight of the newest level change
    gamma: float = ranged(0.5, 0.0, 1.0)    # mix: weight of the parent's selection vs the smoothed forecast
    budget: float = ranged(1.0, 0.0, open_lo=True)   # predicted set size = ceil(budget * K_parent), <= the evidence

    def __post_init__(self) -> None:
        check_ranges(self)


@dataclass(frozen=True)
class CorrectionConfig:
    enabled: bool = True
    # correct draft states at tree depth <= max_depth (root state = depth 0; -1 = never); paper: 1
    max_depth: int = ranged(1, -1)
    hidden: int = 512       # width of f and g (paper: 512)
    use_gate: bool = True   # False: g == 1 (the "no gate" ablation)
    use_depth_embedding: bool = True
    max_tree_depth: int = 8  # size of the depth-embedding table
    # False (the paper): only the LM-head input changes, children read the uncorrected state h.
    # True (a deviation, measured in the README): children read h + g*c, so the image evidence a
    # corrected state retrieved reaches the levels below it (train with the same setting).
    propagate: bool = False
    # Training only. 0 (the paper): retrieval learns end to end through the correction alone. > 0 (a
    # deviation, measured in the README): plus this weight x -log(retrieval mass on the named object's
    # patches) at every draft state that predicts a mention token (the generator's grounding labels).
    ground_weight: float = ranged(0.0, 0.0)
    # Training only. 0 (the paper): the head loss (KL + token) reads the corrected state h + g c alone.
    # > 0 (a deviation, measured in the README): plus this weight x the same loss on the uncorrected h.
    # Draft states deeper than max_depth reach the LM head uncorrected, and with the paper's two-step
    # training a FOVEA drafter never trains its head on an uncorrected state, so its deeper levels
    # draft worse than its twin's (tau 7.09 against 7.31 at step 36,300; correcting every depth: 7.57).
    plain_weight: float = ranged(0.0, 0.0)
    # 0 (the paper): every draft state at depth <= max_depth is corrected. In (0, 1] (a deviation,
    # measured in the README): a state at depth <= max_depth is corrected only when its uncorrected head
    # is unsure, top-1 probability below `trigger`; confident states skip retrieval and correction.
    trigger: float = ranged(0.0, 0.0, 1.0)

    def __post_init__(self) -> None:
        check_ranges(self)


@dataclass(frozen=True)
class TreeConfig:
    # defaults from `python -m fovea.bench --tree-sweep` on the bundled model, 2 CPU cores
    # (assets/results/tree_sweep): acceptance there is near the depth ceiling, so a narrow deep tree
    # beats EAGLE-2's wide shallow one; GPU targets usually want it wider (EAGLE-2: depth 5-6, 60 nodes)
    depth: int = ranged(9, 1, 16)          # draft levels below the root
    top_k: int = ranged(2, 1, 16)          # children per expanded node, and nodes expanded per level
    total_tokens: int = ranged(16, 1, 128)  # node budget verified by the target (root excluded)
    chain: bool = False     # True: a single chain (top-1 each level), no tree
    # stop drafting below a level whose best path has a draft probability under this (0 = always draw
    # `depth` levels, as EAGLE-2 and the paper do): a round the drafter is unsure of spends fewer levels
    # and verifies a smaller tree (dynamic depth). 0.4 from `python -m fovea.bench --stop-sweep` on tuning
    # questions (assets/results/stop_sweep): 0.3-0.5 beat fixed depth (0) for three of the four shipped
    # drafters (the fourth is flat) and are not told apart within the noise; 0.4 is their middle
    stop_below: float = ranged(0.4, 0.0, 1.0, open_hi=True)

    def __post_init__(self) -> None:
        check_ranges(self)


@dataclass(frozen=True)
class DecodingConfig:
    max_new_tokens: int = ranged(64, 1, 4096)
    greedy: bool = True
    temperature: float = 1.0   # > 0 when sampling
    top_p: float = ranged(1.0, 0.0, 1.0, open_lo=True)
    seed: int = 0
    trace: bool = True      # False: skip recording per-node retrieval (benchmarks); rounds are still yielded

    def __post_init__(self) -> None:
        check_ranges(self)
        if not self.greedy and self.temperature <= 0:
            raise ValueError(f"temperature must be > 0 when sampling, got {self.temperature}")


@dataclass(frozen=True)
class DrafterConfig:
    """Shape of the drafter; hidden size / heads / vocab come from the target."""
    hidden_size: int = 512
    num_heads: int = 8
    num_kv_heads: int = 8
    intermediate_size: int = 1376
    num_layers: int = ranged(1, 1, 2)
    vocab_size: int = 2048
    memory_dim: int = 512   # width of the projected visual tokens
    rope_theta: float = 10000.0
    rms_eps: float = 1e-6
    max_positions: int = 4096
    # what the drafter's own KV cache holds of the prompt: "full" = every prompt position, the
    # image's too (EAGLE on a VLM); "text" = text positions only (cache-friendly: the image
    # reaches the drafter only through the visual memory and its correction)
    context: str = "full"
    # what the visual memory is built from: "projected" (the paper) = the projected visual tokens, the
    # decoder's inputs; "hidden" (a deviation, measured in the README) = the target's last-layer states
    # at the image positions of the prompt, the features a full-context drafter's cache holds
    memory_source: str = "projected"

    def __post_init__(self) -> None:
        if self.context not in DRAFTER_CONTEXTS:
            raise ValueError(f"drafter.context must be one of {DRAFTER_CONTEXTS}, got {self.context!r}")
        if self.memory_source not in MEMORY_SOURCES:
            raise ValueError(f"drafter.memory_source must be one of {MEMORY_SOURCES}, got {self.memory_source!r}")
        if self.hidden_size % self.num_heads or self.num_heads % self.num_kv_heads:
            raise ValueError("hidden_size must divide by num_heads, and num_heads by num_kv_heads")
        check_ranges(self)


@dataclass(frozen=True)
class FoveaConfig:
    retrieval: RetrievalConfig = field(default_factory=RetrievalConfig)
    correction: CorrectionConfig = field(default_factory=CorrectionConfig)
    tree: TreeConfig = field(default_factory=TreeConfig)
    decoding: DecodingConfig = field(default_factory=DecodingConfig)

    def replace(self, **sections) -> "FoveaConfig":
        """`cfg.replace(tree=dict(depth=3))` -> copy with those fields of that section changed."""
        new = {}
        for name, changes in sections.items():
            current = getattr(self, name)
            new[name] = dataclasses.replace(current, **changes) if isinstance(changes, dict) else changes
        return dataclasses.replace(self, **new)


def to_dict(cfg) -> dict:
    return dataclasses.asdict(cfg)


def from_dict(cls, data: dict):
    """Build a (nested) frozen dataclass from a dict, rejecting unknown keys with a clear message."""
    known = {f.name: f for f in fields(cls)}
    unknown = set(data) - set(known)
    if unknown:
        raise ValueError(f"unknown {cls.__name__} keys: {sorted(unknown)}")
    kwargs = {}
    for name, value in data.items():
        ftype = known[name].type
        sub = globals().get(ftype) if isinstance(ftype, str) else ftype
        kwargs[name] = from_dict(sub, value) if is_dataclass(sub) and isinstance(value, dict) else value
    return cls(**kwargs)

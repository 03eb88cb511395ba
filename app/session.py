"""One user's last request as the app keeps it (in gr.State), built from a fresh run or from an
imported trace file, and turned back into a trace file for export.

A `Session` holds every run of the request (FOVEA, no-correction, autoregressive), the display text
of every token id they mention (so the views never need a tokenizer, and an imported trace looks
exactly as it did when exported), the interleaved timings and the image at display size.
No gradio here.
"""
from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass, field
from functools import cached_property

from PIL import Image

from app.focus import FocusStep, focus_trajectory
from app.timing import Timings
from fovea.config import FoveaConfig
from fovea.locality import focus_locality, trace_links
from fovea.methods import ROLES
from fovea.ood import WorldCheck, check_world
from fovea.trace import GenerationResult
from fovea.trace_io import TraceFile, display_image, token_ids

# the lanes of a race, and the runs of a session and of its trace file: fovea.methods.ROLES
FOVEA, NO_CORRECTION, AUTOREGRESSIVE = ROLES
LANE_NAMES = {AUTOREGRESSIVE: "autoregressive (target alone)", NO_CORRECTION: "no correction (EAGLE-style)",
              FOVEA: "FOVEA (gated visual correction)"}


def image_sha(image: Image.Image) -> str:
    return hashlib.sha256(image.tobytes()).hexdigest()[:16]


@dataclass
class Session:
    image: Image.Image                   # display copy (long side <= 512): heatmaps, filmstrip, export
    question: str
    runs: dict[str, GenerationResult]    # FOVEA, NO_CORRECTION (when a drafter is loaded), AUTOREGRESSIVE
    vocab: dict[int, str]                # display text of every token id the runs mention
    timings: Timings
    memory_grid: tuple[int, int]
    config: FoveaConfig | None = None    # None for an imported trace written by another config schema
    model_image: Image.Image | None = None   # what the model read; None for an imported trace
    image_sha: str = ""
    comparisons: list[dict] = field(default_factory=list)
    context: str = "full"                # the drafters' context ("full" / "text", app.settings.DRAFTER_CONTEXTS)
    unknown_words: float = 0.0           # share of the question's words unknown to the tokenizer (fovea.ood)

    @property
    def fovea(self) -> GenerationResult:
        return self.runs[FOVEA]

    @property
    def baseline(self) -> GenerationResult:
        return self.runs[AUTOREGRESSIVE]

    @property
    def imported(self) -> bool:
        return self.model_image is None

    def text(self, token: int) -> str:
        return self.vocab.get(token, f"⟨{token}⟩")

    def strings(self, ids) -> list[str]:
        return [self.text(i) for i in ids]

    @cached_property
    def trajectory(self) -> list[FocusStep]:
        return focus_trajectory(self.fovea.iterations)

    @cached_property
    def locality(self) -> list:
        """PRR's per-step prediction overlap / hit rate along the trajectory (same steps, same order)."""
        steps, parents = trace_links(self.fovea.iterations)
        n = self.memory_grid[0] * self.memory_grid[1] if self.memory_grid else None
        return focus_locality(steps, parents, n) if steps else []

    @cached_property
    def world(self) -> WorldCheck:
        return check_world(self.model_image or self.image)


def new_session(image: Image.Image, question: str, config: FoveaConfig, runs: dict[str, GenerationResult],
                timings: Timings, pipeline, context: str = "full") -> Session:
    """A session from a fresh run; the vocab comes from the pipeline's tokenizer."""
    ids = sorted(token_ids(runs))
    vocab = dict(zip(ids, pipeline.token_strings(ids)))
    return Session(display_image(image), question, runs, vocab, timings, pipeline.memory_grid, config, image,
                   image_sha(image), context=context, unknown_words=pipeline.unknown_word_share(question))


def to_trace_file(s: Session, image_size: int | None) -> TraceFile:
    """The trace file of a session; its config records the drafter context beside the FoveaConfig."""
    config = {**asdict(s.config), "drafter_context": s.context} if s.config else {}
    return TraceFile(s.question, s.image, s.memory_grid, image_size, s.vocab, s.runs, config, s.timings.as_dict())


def from_trace_file(t: TraceFile) -> Session:
    """A session viewing an imported trace (no model image: Compare needs a fresh run)."""
    if FOVEA not in t.runs or AUTOREGRESSIVE not in t.runs:
        raise ValueError(f"a trace needs a {FOVEA!r} and an {AUTOREGRESSIVE!r} run; this one has {sorted(t.runs)}")
    timings = Timings([{k: float(v) for k, v in r.items()} for r in t.timing.get("tokens_per_s", [])])
    context = t.config.get("drafter_context", "full") if isinstance(t.config, dict) else "full"
    return Session(t.image, t.question, t.runs, t.vocab, timings, t.memory_grid, image_sha=image_sha(t.image),
                   context=str(context))

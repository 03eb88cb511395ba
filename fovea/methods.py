"""The method table: every way this project decodes a request, one `Method` each, and the
drafter-context table (each context's FOVEA drafter, its no-correction twin, where the bundled
pair lives, and the FOVEA setting it was measured best with).

A `Method` names how its drafts are made (`kind`), the pipeline drafter it drafts with and its config
overrides; `FoveaPipeline.stream(..., method)` decodes with one, and the app, the bench, `app.measure`
and the analyses all read these two tables. A new method or drafter context is one entry here.
Pure data: no torch, no models.
"""
from __future__ import annotations

from dataclasses import dataclass, field

ALL_DEPTHS = 64          # max_depth past any tree's depth: every draft state may be corrected
# per drafter context, the threshold of the best pooled FOVEA speed in --trigger-sweep on tuning questions
# (assets/results/trigger_sweep, 2026-12-05: full 0.5, text 0.7)
TRIGGER = 0.5
TRIGGER_TEXT = 0.7


@dataclass(frozen=True)
class Method:
    name: str
    # "fovea" (a TreeDrafter) | "autoregressive" | "prompt_lookup" | "assisted" (strategies of our decode
    # loop) | "hf_prompt_lookup" | "hf_assisted" (transformers' own generate(), for reference)
    kind: str = "fovea"
    drafter: str = "fovea"
    overrides: dict = field(default_factory=dict)

    def on(self, drafter: str) -> "Method":
        """The same method over another pipeline drafter (e.g. one named on the command line)."""
        return Method(self.name, self.kind, drafter, self.overrides)


NO_CORRECTION = {"correction": {"enabled": False}}
METHODS = {m.name: m for m in [
    Method("autoregressive", kind="autoregressive"),
    Method("fovea"),
    Method("no_correction", drafter="no_correction", overrides=NO_CORRECTION),
    # the cache-friendly pair: the drafter's cache skips the image; FOVEA and its "- correction" ablation
    Method("fovea_text", drafter="fovea_text"),
    Method("no_correction_text", drafter="no_correction_text", overrides=NO_CORRECTION),
    # the default tree stops below an unsure level (TreeConfig.stop_below, dynamic depth); these draw all
    # `depth` levels every round, as EAGLE-2 and the paper do
    Method("fovea_fixed_depth", overrides={"tree": {"stop_below": 0.0}}),
    Method("no_correction_fixed_depth", drafter="no_correction",
           overrides={**NO_CORRECTION, "tree": {"stop_below": 0.0}}),
    Method("chain", overrides={"tree": {"chain": True}}),
    Method("no_depth_embedding", overrides={"retrieval": {"mode": "state_only"}}),
    Method("no_gate", overrides={"correction": {"use_gate": False}}),
    Method("correction_depth0", overrides={"correction": {"max_depth": 0}}),
    Method("correction_depth3", overrides={"correction": {"max_depth": 3}}),
    # deviations: the correction at every depth (the paper stops at depth 1), and at every depth but only
    # where the uncorrected head is unsure (correction.trigger: TRIGGER / TRIGGER_TEXT from tuning questions)
    Method("correction_all_depths", overrides={"correction": {"max_depth": ALL_DEPTHS}}),
    Method("fovea_triggered", overrides={"correction": {"max_depth": ALL_DEPTHS, "trigger": TRIGGER}}),
    Method("fovea_text_triggered", drafter="fovea_text",
           overrides={"correction": {"max_depth": ALL_DEPTHS, "trigger": TRIGGER_TEXT}}),
    Method("random", overrides={"retrieval": {"mode": "random"}}),
    Method("static", overrides={"retrieval": {"mode": "static"}}),
    Method("query_agnostic", overrides={"retrieval": {"mode": "query_agnostic"}}),
    Method("dense", overrides={"retrieval": {"mode": "dense"}}),
    *[Method(f"fixed_k{k}", overrides={"retrieval": {"mode": "fixed", "fixed_k": k}}) for k in (8, 16, 32, 64)],
    Method("prompt_lookup", kind="prompt_lookup"),
    Method("assisted", kind="assisted"),
    Method("hf_prompt_lookup", kind="hf_prompt_lookup"),
    Method("hf_assisted", kind="hf_assisted"),
]}
AUTOREGRESSIVE = METHODS["autoregressive"]
FOVEA = METHODS["fovea"]          # the paper's method on the full-context drafter: the library's default
# the methods whose drafts come from a trained model (the ranking the README reports)
TRAINED_DRAFTERS = [m.name for m in METHODS.values() if m.kind in ("fovea", "assisted", "hf_assisted")]


@dataclass(frozen=True)
class DrafterContext:
    """What the drafters' KV cache holds of the prompt, and the pair trained for it: FOVEA and its
    no-correction twin (pipeline drafter names = their plain methods' names), their bundled asset
    folders, and the FOVEA method measured best in this context (assets/results/bench, bench_ranking)."""
    name: str
    label: str
    fovea: str               # the FOVEA drafter and its paper-setting method
    twin: str                # the no-correction twin: drafter and method
    folders: tuple[str, str]   # (FOVEA, twin) folders under assets/ for the bundled target
    best: str                # the FOVEA method of METHODS this context runs by default
    settings: tuple[str, ...] = ()   # FOVEA methods measured beside the twin (bench --cost-split)

    @property
    def methods(self) -> tuple[Method, Method]:
        """(FOVEA as measured best, its twin): the pair the app races and `app.measure` compares."""
        return METHODS[self.best], METHODS[self.twin]

    @property
    def drafter_folders(self) -> dict[str, str]:
        """{pipeline drafter name: its folder under assets/} of the pair, FOVEA first."""
        return dict(zip((self.fovea, self.twin), self.folders))

    @property
    def correction(self) -> dict:
        """The correction overrides of the best FOVEA method (empty: the paper's defaults)."""
        return METHODS[self.best].overrides.get("correction", {})


# the full-context drafter corrects depth <= 1 (the paper); the text-context drafter, whose cache skips the
# image, reads it at every level where its head is unsure (correction.trigger, a deviation)
CONTEXTS = {c.name: c for c in [
    DrafterContext("full", "full: the image in the drafter's cache", "fovea", "no_correction",
                   ("drafter", "drafter_nocorr"), best="fovea", settings=("fovea", "fovea_triggered")),
    DrafterContext("text", "text: a text-only drafter cache, the image read on demand", "fovea_text",
                   "no_correction_text", ("drafter_text", "drafter_text_nocorr"), best="fovea_text_triggered",
                   settings=("fovea_text", "fovea_text_triggered")),
]}
# FOVEA and its "- correction" ablation with the same drafter context, trained on the same batches
CORRECTION_PAIRS = tuple((c.fovea, c.twin) for c in CONTEXTS.values())
FULL = CONTEXTS["full"]      # the bundled default pair: `FoveaPipeline.from_pretrained()` loads it first
# The roles of a race, whatever drafter context ran it: FOVEA, its no-correction twin, the target alone.
# A race's runs (the app's lanes, a trace file's "runs") and a pair's training run (its checkpoints and
# metrics) are keyed by them; they are the full context's method names.
ROLES = (FULL.fovea, FULL.twin, AUTOREGRESSIVE.name)

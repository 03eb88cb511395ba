"""The benchmark's sweeps over the method table (`fovea.methods`: a name, how its drafts are made and
its config overrides) and `run_method`, which decodes one question with one method, including
transformers' own `generate()` for reference.
"""
from __future__ import annotations

import time
from pathlib import Path

import torch

from fovea.config import FoveaConfig
from fovea.decoding import run
from fovea.methods import ALL_DEPTHS, CONTEXTS, CORRECTION_PAIRS, METHODS, TRIGGER, Method
from fovea.pipeline import InputError
from fovea.trace import GenerationResult

__all__ = ["METHODS", "Method", "TRIGGER", "run_method", "strategy_for"]


# analyses: run the diagnostics of fovea.analysis by default; analysis_n / analysis_tokens size them
# --tree-sweep: (depth, top_k, total_tokens) shapes compared for FOVEA and its ablation, on tuning
# questions disjoint from the benchmark's (fovea.data.tuning_seeds); the TreeConfig default comes from it
TREE_SHAPES = ((5, 4, 16), (5, 8, 32), (7, 2, 12), (7, 2, 16), (8, 2, 16), (9, 2, 16), (9, 3, 20), (11, 2, 16))
SWEEP_DRAFTERS = CORRECTION_PAIRS[0]


# Pair sweeps (--trigger-sweep, --retrieval-sweep, --stop-sweep): decode-time variants of each FOVEA drafter
# context beside its twin and the default setting, on tuning questions. A variant is (label, config overrides);
# FOVEA@label (and twin@label for --stop-sweep) is its method. TRIGGER comes from the trigger sweep.
SWEEP_PAIRS = CORRECTION_PAIRS
TRIGGERS = (0.5, 0.7, 0.8, 0.9, 0.95, 1.0)
TRIGGER_VARIANTS = tuple((f"trigger{t:g}", {"correction": {"max_depth": ALL_DEPTHS, "trigger": t}}) for t in TRIGGERS)
# the sharpness of retrieval: the cumulative mass rho (paper 0.8) and the K bounds, at decode time
RETRIEVAL_VARIANTS = (*((f"rho{r:g}", {"retrieval": {"rho": r}}) for r in (0.5, 0.65, 0.95)),
                      ("rho0.5kmin1", {"retrieval": {"rho": 0.5, "k_min": 1}}),
                      ("kmax64", {"retrieval": {"k_max": 64}}))
# the depth limit of the correction (CorrectionConfig.max_depth; the paper: 1), and every depth with the trigger
DEPTHS = (0, 1, 2, 3, 5)
DEPTH_VARIANTS = (*((f"depth{d}", {"correction": {"max_depth": d}}) for d in DEPTHS),
                  ("all", {"correction": {"max_depth": ALL_DEPTHS}}),
                  ("all_trigger0.5", {"correction": {"max_depth": ALL_DEPTHS, "trigger": 0.5}}))
# the retrieval controls in every drafter context, at the paper's depth limit and with every depth corrected
# (where the text-context drafter gains most from the image)
CONTROLS = ("random", "static", "query_agnostic", "dense", "state_only")
CONTROL_VARIANTS = (*((m, {"retrieval": {"mode": m}}) for m in CONTROLS),
                    ("all", {"correction": {"max_depth": ALL_DEPTHS}}),
                    *((f"{m}_all", {"retrieval": {"mode": m}, "correction": {"max_depth": ALL_DEPTHS}}) for m in CONTROLS))
# dynamic depth (TreeConfig.stop_below), applied to the twins too: the tree default serves every drafter
STOPS = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7)     # 0: fixed depth
STOP_VARIANTS = tuple((f"stop{t:g}", {"tree": {"stop_below": t}}) for t in STOPS)
# the stop sweep also runs the text-context drafter corrected where unsure: a surer drafter draws more levels
# under the same threshold (assets/results/cost_split), so it may want a later stop than its twin
STOP_PAIRS = (*SWEEP_PAIRS, *((c.best, c.twin) for c in CONTEXTS.values() if c.best != c.fovea))


def with_triggers(table: dict[str, Method], triggers: dict[str, float]) -> dict[str, Method]:
    """`table` with each named drafter context's triggered FOVEA methods (its FOVEA drafter, a correction
    trigger) set to that context's threshold."""
    out = dict(table)
    for context, t in triggers.items():
        for name, m in table.items():
            corr = m.overrides.get("correction", {})
            if m.drafter == CONTEXTS[context].fovea and corr.get("trigger"):
                out[name] = Method(m.name, m.kind, m.drafter, {**m.overrides, "correction": {**corr, "trigger": t}})
    return out


def pair_sweep_methods(variants, pairs=SWEEP_PAIRS, twins_too: bool = False,
                       table: dict[str, Method] = METHODS) -> dict[str, Method]:
    """autoregressive, then per pair: the twin, FOVEA as the paper runs it, and FOVEA@label per variant
    (and twin@label with `twins_too`), each built on its method in `table` (e.g. `with_triggers`')."""
    out = {"autoregressive": table["autoregressive"]}
    for fovea, twin in pairs:
        out[twin], out[fovea] = table[twin], table[fovea]
        for name in (fovea, twin) if twins_too else (fovea,):
            m = table[name]
            for label, overrides in variants:
                merged = {k: {**m.overrides.get(k, {}), **v} for k, v in overrides.items()}
                out[f"{name}@{label}"] = Method(f"{name}@{label}", drafter=m.drafter,
                                                overrides={**m.overrides, **merged})
    return out


def shape_name(method: str, shape: tuple[int, int, int]) -> str:
    return f"{method}@d{shape[0]}k{shape[1]}n{shape[2]}"


def tree_sweep_methods(shapes=TREE_SHAPES, drafters=SWEEP_DRAFTERS) -> dict[str, Method]:
    """autoregressive plus every (drafter method, tree shape) as its own Method."""
    out = {"autoregressive": METHODS["autoregressive"]}
    for depth, top_k, total in shapes:
        for name in drafters:
            m = METHODS[name]
            tree = {"depth": depth, "top_k": top_k, "total_tokens": total}
            key = shape_name(name, (depth, top_k, total))
            out[key] = Method(key, drafter=m.drafter, overrides={**m.overrides, "tree": tree})
    return out


def strategy_for(pipe, method: Method, assistant=None):
    """`pipe.strategy(method)` (`fovea.pipeline`), its refusal as the command line's exit message."""
    try:
        return pipe.strategy(method, assistant)
    except InputError as err:
        raise SystemExit(str(err)) from None


def run_method(pipe, method: Method, image, question, base: FoveaConfig, assistant=None) -> GenerationResult:
    prompt = pipe.target.prepare(image, question)
    if method.kind == "hf_prompt_lookup":
        return hf_generate(pipe.target, prompt, base, method.name, prompt_lookup_num_tokens=5)
    if method.kind == "hf_assisted":
        if assistant is None:
            raise SystemExit("method hf_assisted needs an assistant LM (see --assistant)")
        return hf_generate(pipe.target, prompt, base, method.name, assistant_model=assistant)
    return run(pipe.target, strategy_for(pipe, method, assistant), prompt, base)


def load_assistant(folder: Path | None, pipe, tiny_random: bool):
    """The small LM for `generate(assistant_model=...)`: the committed one, or (tiny-random smoke
    runs) an untrained one of the right shape."""
    from transformers import LlamaForCausalLM

    from fovea.models.bundled import DEFAULT_ASSISTANT_DIR
    from fovea.training.assistant import build_assistant

    if tiny_random:
        return build_assistant(pipe.target.model.config, pipe.target.tokenizer).eval()
    folder = Path(folder or DEFAULT_ASSISTANT_DIR)
    if not (folder / "config.json").exists():
        raise SystemExit(f"method hf_assisted needs the assistant LM at {folder}, which is missing; "
                         "build it with `python -m fovea.train assistant` or drop the method")
    model = LlamaForCausalLM.from_pretrained(str(folder), dtype=torch.float32).eval()
    if model.config.vocab_size != pipe.target.vocab_size:
        raise SystemExit(f"assistant at {folder} has vocabulary {model.config.vocab_size}, the target "
                         f"{pipe.target.vocab_size}: they must share the tokenizer")
    return model


@torch.no_grad()
def hf_generate(target, prompt, cfg: FoveaConfig, name: str, **assist) -> GenerationResult:
    """transformers' own `generate()` on the same model with one of its assisted-decoding options
    (prompt lookup, or a small assistant LM): what a transformers user would pick instead."""
    t0 = time.perf_counter()
    out = target.model.generate(input_ids=prompt.input_ids, **prompt.model_inputs, do_sample=False,
                                max_new_tokens=cfg.decoding.max_new_tokens,
                                pad_token_id=target.tokenizer.pad_token_id, **assist)
    tokens = out[0, prompt.input_ids.shape[1]:].tolist()
    return GenerationResult(method=name, tokens=tokens, text=target.tokenizer.decode(tokens),
                            wall_s=time.perf_counter() - t0, prefill_ms=0.0, target_forwards=0)

"""Evaluating a drafter the way EAGLE / SpecForge / vLLM speculators report one: the acceptance rate
at each draft position, per task family (or MMSpec category), tau, and a speed estimate from a stated
cost model; and choosing among a run's checkpoints by that estimate on tuning questions.

Acceptance at draft position k: among the rounds whose first k-1 draft tokens were all accepted and
whose tree reached depth k, the share that also accepted the k-th (vLLM speculators' conditional
per-position rate). tau = accepted draft tokens + the bonus token, per round.

Cost model, in one-token target forward steps (the autoregressive cost of one token is 1):
    round = draft_step * L + corrected_extra * C + verify(n)
with L the tree's draft levels, C the corrected levels (min(L, max_depth + 1) with correction on),
n the tree's nodes with the root, verify(n) the cost of an n-token target forward (piecewise linear
in n through the profile's curve). draft_step and corrected_extra come from the profile's drafter
step and its level-1 retrieval + correction laps (`python -m fovea.bench --profile`, committed under
assets/results/profile), or from eval.draft_step_cost. Estimated speedup = emitted tokens / sum of
round costs; prefill and commit are left out of both sides. Knows nothing about training.
"""
from __future__ import annotations

import argparse
import json
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path

from fovea.training.run_config import RunConfig, add_run_args, from_args, write_resolved


@dataclass(frozen=True)
class Round:
    """What the cost model and the acceptance rates read of one draft-verify round."""
    accepted: int           # accepted draft tokens (bonus excluded)
    levels: int             # draft levels of the tree (its deepest node's depth)
    nodes: int              # tree nodes with the root: the verify forward's length
    corrected: int          # corrected draft levels


@dataclass(frozen=True)
class CostModel:
    draft_step: float                       # one draft level, in one-token target steps
    corrected_extra: float                  # retrieval + correction of one corrected level, same unit
    verify: tuple[tuple[int, float], ...]   # (tokens in one target forward, its cost), ascending

    def verify_cost(self, nodes: int) -> float:
        """Piecewise-linear in the number of tokens; the end segments extend beyond the curve."""
        pts = self.verify
        if len(pts) == 1:
            return pts[0][1]
        for (n0, c0), (n1, c1) in zip(pts, pts[1:]):
            if nodes <= n1 or (n1, c1) == pts[-1]:
                return c0 + (c1 - c0) * (nodes - n0) / (n1 - n0)
        return pts[-1][1]

    def round_cost(self, r: Round) -> float:
        return self.draft_step * r.levels + self.corrected_extra * r.corrected + self.verify_cost(r.nodes)

    @classmethod
    def from_profile(cls, path: str | Path, draft_step: float | None = None) -> "CostModel":
        """The model of a profile.json (`python -m fovea.bench --profile`); `draft_step` overrides its ratio."""
        path = Path(path)
        if not path.is_file():
            raise ValueError(f"No profile at {path}; run `python -m fovea.bench --profile` or set eval.profile.")
        prof = json.loads(path.read_text())
        curves = prof.get("curves") or {}
        target = {int(k): v for k, v in curves.get("target_forward_ms", {}).items()}
        if 1 not in target or not curves.get("drafter_step_ms"):
            raise ValueError(f"{path} has no cost curves; re-run `python -m fovea.bench --profile`.")
        step = target[1]
        levels = prof.get("profile", {}).get("per_level_ms", {})
        extra = sum(levels.get(k, {}).get("1", 0.0) for k in ("draft/retrieval", "draft/correction")) / step
        ratio = curves["drafter_step_ms"]["1"] / step if draft_step is None else draft_step
        return cls(ratio, extra, tuple((n, ms / step) for n, ms in sorted(target.items())))


def rounds_of(result, max_depth: int, corrected: bool) -> list[Round]:
    """The Rounds of a GenerationResult's iterations."""
    out = []
    for it in result.iterations:
        levels = max(it.depths) if it.depths else 0
        out.append(Round(len(it.accepted), levels, len(it.tokens), min(levels, max_depth + 1) if corrected else 0))
    return out


def per_position(rounds: list[Round]) -> list[float]:
    """Conditional acceptance rate at draft positions 1..(deepest level reached)."""
    rates, deepest = [], max((r.levels for r in rounds), default=0)
    for k in range(1, deepest + 1):
        reached = [r for r in rounds if r.accepted >= k - 1 and r.levels >= k]
        if not reached:
            break
        rates.append(sum(r.accepted >= k for r in reached) / len(reached))
    return rates


def summary(rounds: list[Round], cost: CostModel, questions: int, lossless: bool | None) -> dict:
    emitted = sum(r.accepted + 1 for r in rounds)
    spent = sum(cost.round_cost(r) for r in rounds)
    return {"questions": questions, "rounds": len(rounds),
            "tau_with_bonus": emitted / len(rounds) if rounds else None,
            "acceptance_by_position": per_position(rounds),
            "estimated_speedup": emitted / spent if spent else None, "lossless": lossless}


def questions_for(cfg: RunConfig) -> list:
    """eval.questions (MMSpec layout) or the generator's tuning questions, families round robin."""
    if cfg.eval.questions is not None:
        from fovea.bench.mmspec import load_questions

        return load_questions(cfg.eval.questions, n=cfg.eval.n)
    from fovea.data import FAMILIES, make_sample, tuning_seeds

    return [make_sample(s, family=FAMILIES[i % len(FAMILIES)]) for i, s in enumerate(tuning_seeds(cfg.eval.n))]


def evaluate(target, drafter, questions: list, cfg: RunConfig, cost: CostModel) -> dict:
    """Decode every question with FOVEA on `drafter` (the run's tree and retrieval, the correction the
    drafter was trained with, as the bench decodes it) -> {"all": summary, family: summary, ...}."""
    from fovea.config import FoveaConfig
    from fovea.decoding import fovea, run

    fcfg = FoveaConfig(retrieval=cfg.retrieval, correction=drafter.correction_cfg, tree=cfg.tree).replace(
        decoding={"max_new_tokens": cfg.eval.max_new_tokens, "trace": False})
    strategy, per_family, same = fovea(drafter), {}, {}
    for q in questions:
        prompt = target.prepare(q.image, q.question)
        res = run(target, strategy, prompt, fcfg)
        rounds = rounds_of(res, fcfg.correction.max_depth, fcfg.correction.enabled)
        per_family.setdefault(q.family, []).append(rounds)
        if cfg.eval.check_lossless:
            same.setdefault(q.family, []).append(run(target, None, prompt, fcfg).tokens == res.tokens)
    out = {}
    for fam in [*per_family, "all"]:
        groups = [g for f, gs in per_family.items() if fam in ("all", f) for g in gs]
        checks = [c for f, cs in same.items() if fam in ("all", f) for c in cs]
        out[fam] = summary([r for g in groups for r in g], cost, len(groups), all(checks) if checks else None)
    return out


def checkpoint_drafters(out: Path) -> list[tuple[str, Path]]:
    """(name, folder) of every drafter a fit run left: each checkpoint's, then the final export."""
    found = [(p.name, p / "drafter") for p in sorted((out / "checkpoints").glob("step_*"))
             if (p / "drafter" / "model.safetensors").exists()]
    if (out / "model.safetensors").exists():
        found.append(("final", out))
    return found


def select(target, cfg: RunConfig, cost: CostModel, progress: bool = True) -> dict:
    """Evaluate every drafter of training.out on the tuning questions and copy the one with the best
    estimated speedup to training.out/best; -> {"chosen", "by_estimated_speedup": {name: report}}."""
    from fovea.drafter import Drafter

    out = Path(cfg.training.out)
    candidates = checkpoint_drafters(out)
    if not candidates:
        raise ValueError(f"{out} holds no drafter checkpoints; train one with `python -m fovea.train fit`.")
    questions = questions_for(cfg)
    reports = {}
    for name, folder in candidates:
        reports[name] = evaluate(target, Drafter.from_pretrained(folder).bind(target), questions, cfg, cost)
        if progress:
            print(f"accept: {name}: estimated speedup {reports[name]['all']['estimated_speedup']}", flush=True)
    chosen = max(reports, key=lambda k: reports[k]["all"]["estimated_speedup"] or 0.0)
    best = out / "best"
    if best.exists():
        shutil.rmtree(best)
    shutil.copytree(dict(candidates)[chosen], best, ignore=shutil.ignore_patterns("checkpoints", "best"))
    return {"chosen": chosen, "by_estimated_speedup": reports}


def markdown(report: dict, cost: CostModel) -> str:
    lines = [f"Cost model (one-token target steps): draft step {cost.draft_step:.3f}, corrected level "
             f"+{cost.corrected_extra:.3f}, verify curve {dict(cost.verify)}.", "",
             "| group | questions | rounds | tau | est. speedup | acceptance at draft position 1, 2, 3, ... |",
             "|---|---|---|---|---|---|"]
    for fam, s in report.items():
        rates = ", ".join(f"{a:.2f}" for a in s["acceptance_by_position"]) or "-"
        tau = f"{s['tau_with_bonus']:.2f}" if s["tau_with_bonus"] else "-"
        speed = f"{s['estimated_speedup']:.2f}x" if s["estimated_speedup"] else "-"
        lines.append(f"| {fam} | {s['questions']} | {s['rounds']} | {tau} | {speed} | {rates} |")
    return "\n".join(lines) + "\n"


def write_report(folder: Path, report: dict, cost: CostModel, cfg: RunConfig, extra: dict) -> str:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "acceptance.json").write_text(json.dumps({"cost_model": asdict(cost), **extra, "report": report},
                                                       indent=2))
    text = markdown(report, cost)
    (folder / "acceptance.md").write_text(text)
    write_resolved(cfg, folder, extra)
    return text


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m fovea.train accept", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_run_args(p)
    p.add_argument("--drafter", type=Path, help="drafter folder to evaluate (default: training.out)")
    p.add_argument("--select", action="store_true",
                   help="evaluate every checkpoint of training.out and copy the best to training.out/best")
    p.add_argument("--out", type=Path, help="results folder (default: <drafter>/acceptance, or training.out/selection)")
    args = p.parse_args(argv)
    cfg = from_args(p, args)
    from fovea.backbones import BackboneError
    from fovea.drafter import Drafter
    from fovea.training.dump import load_target_for
    from fovea.training.records import RecordError

    try:
        cost = CostModel.from_profile(cfg.eval.profile, cfg.eval.draft_step_cost)
        target = load_target_for(cfg)
        if args.select:
            result = select(target, cfg, cost)
            folder = args.out or Path(cfg.training.out) / "selection"
            report, extra = result["by_estimated_speedup"][result["chosen"]], {"chosen": result["chosen"]}
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "candidates.json").write_text(json.dumps(result, indent=2))
        else:
            source = args.drafter or Path(cfg.training.out)
            drafter = Drafter.from_pretrained(source).bind(target)
            report, extra = evaluate(target, drafter, questions_for(cfg), cfg, cost), {"drafter": str(source)}
            folder = args.out or source / "acceptance"
    except (BackboneError, RecordError, FileNotFoundError, ValueError) as err:
        raise SystemExit(f"accept: {err}") from None
    print(write_report(folder, report, cost, cfg, extra))


if __name__ == "__main__":
    main()

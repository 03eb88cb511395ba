"""One typed config per drafter run: a YAML file validated into frozen dataclasses, one per concern
(data, target, drafter, correction, retrieval, tree, training, eval), with `--set section.field=value`
overrides on the command line. The resolved config is written as `run_config.yaml` next to every
dump, checkpoint and result, so a run is described by one file, not by 20 flags.

    data:     {records: data/train.jsonl, dumps: runs/dumps/llava}
    target:   {path: /ckpt/llava-v1.6-vicuna-7b-hf}
    training: {out: runs/drafter_llava, total_steps: 2000}

Correction, retrieval and tree are the library's own dataclasses (`fovea.config`). Knows nothing
about models or tensors.
"""
from __future__ import annotations

import argparse
import dataclasses
import types
import typing
from dataclasses import dataclass, field, fields
from pathlib import Path

from fovea.config import CorrectionConfig, DrafterConfig, RetrievalConfig, TreeConfig, check_ranges, ranged

DUMP_DTYPES = ("float16", "bfloat16")
RESOLVED_NAME = "run_config.yaml"


class RunConfigError(ValueError):
    """A config file or override that cannot be used; the message names the key and what to fix."""


def _positive(section, name: str, keys: tuple[str, ...]) -> None:
    for key in keys:
        if getattr(section, key) < 1:
            raise ValueError(f"{name}.{key} must be >= 1, got {getattr(section, key)}")


@dataclass(frozen=True)
class DataConfig:
    records: str | None = None        # JSONL of image/question/answer records; None: the bundled world's generator
    images_dir: str | None = None     # folder the records' image paths are relative to (default: the JSONL's)
    samples: int = 1000               # generator samples to dump (records: every record)
    seed_offset: int = 5_000_000      # generator sample i is seed seed_offset + i (below the eval seeds)
    families: tuple[str, ...] = ()    # generator families round robin (empty: the data's own)
    max_answer_tokens: int = 96
    dumps: str = "runs/dumps"         # where `dump` writes and the trainer reads
    shard_size: int = 1000            # sample files per shard folder
    dtype: str = "float16"            # storage dtype of hidden states and visual entries
    top_k: int = 0                    # also store the target's top-k logits per position (0: none)
    batch_size: int = 8               # samples per target forward while dumping

    def __post_init__(self) -> None:
        if self.dtype not in DUMP_DTYPES:
            raise ValueError(f"data.dtype must be one of {DUMP_DTYPES}, got {self.dtype!r}")
        _positive(self, "data", ("samples", "shard_size", "batch_size", "max_answer_tokens"))
        if not 0 <= self.top_k <= 64:
            raise ValueError(f"data.top_k must be in [0, 64], got {self.top_k}")


@dataclass(frozen=True)
class TargetSpec:
    path: str = "assets/target"       # target folder or Hub id (fovea.backbones.load_backbone)
    image_size: int | None = 448      # Qwen2.5-VL: square resize (None: native resolution)


@dataclass(frozen=True)
class DrafterSpec:
    num_layers: int = 1
    context: str = "full"             # "text": the drafter's cache skips the image (cache-friendly)
    memory_source: str = "projected"  # "hidden": the memory is the target's last-layer image states

    def __post_init__(self) -> None:
        # the drafter's own config checks these fields (the rest of it comes from the target)
        DrafterConfig(num_layers=self.num_layers, context=self.context, memory_source=self.memory_source)


@dataclass(frozen=True)
class TrainingConfig:
    out: str = "runs/drafter"         # drafter folder; checkpoints under out/checkpoints
    batch_size: int = 4               # per process
    grad_accum: int = 4
    lr: float = 3e-4
    warmup: int = 100                 # optimiser steps
    total_steps: int = 2000           # optimiser steps
    weight_decay: float = 0.0
    unroll: int = ranged(2, 1, 8)     # drafting steps per position (the paper: 2, depths 0 and 1)
    shuffle: bool = True              # False: dump order (replays an online run's batches exactly)
    seed: int = 0
    save_every: int = 200
    keep_checkpoints: int = 2

    def __post_init__(self) -> None:
        _positive(self, "training", ("batch_size", "grad_accum", "total_steps", "save_every", "keep_checkpoints"))
        check_ranges(self)
        if self.lr <= 0:
            raise ValueError(f"training.lr must be > 0, got {self.lr}")


@dataclass(frozen=True)
class EvalConfig:
    questions: str | None = None      # MMSpec-layout JSONL (image, question, category); None: generator tuning seeds
    n: int = 30                       # questions (the first n)
    max_new_tokens: int = 64
    profile: str = "assets/results/profile/profile.json"   # cost model source (python -m fovea.bench --profile)
    draft_step_cost: float | None = None   # override: one drafter step in one-token target steps (e.g. 0.05 on GPU)
    check_lossless: bool = False      # also decode autoregressively and compare the tokens

    def __post_init__(self) -> None:
        _positive(self, "eval", ("n", "max_new_tokens"))
        if self.draft_step_cost is not None and self.draft_step_cost < 0:
            raise ValueError(f"eval.draft_step_cost must be >= 0, got {self.draft_step_cost}")


@dataclass(frozen=True)
class RunConfig:
    data: DataConfig = field(default_factory=DataConfig)
    target: TargetSpec = field(default_factory=TargetSpec)
    drafter: DrafterSpec = field(default_factory=DrafterSpec)
    correction: CorrectionConfig = field(default_factory=CorrectionConfig)
    retrieval: RetrievalConfig = field(default_factory=RetrievalConfig)
    tree: TreeConfig = field(default_factory=TreeConfig)
    training: TrainingConfig = field(default_factory=TrainingConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)


def _coerce(value, hint, where: str):
    """A YAML value checked (and, for tuples and int-as-float, converted) against a field's type."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        (inner,) = [a for a in args if a is not type(None)]
        return _coerce(value, inner, where)
    if origin is tuple:
        items = value if isinstance(value, (list, tuple)) else None
        if items is None:
            raise RunConfigError(f"{where} takes a list, got {value!r}")
        return tuple(_coerce(v, args[0], f"{where}[{i}]") for i, v in enumerate(items))
    if hint is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if hint is float and isinstance(value, str):     # YAML reads 3e-4 (no dot) as a string
        try:
            return float(value)
        except ValueError:
            pass
    if not isinstance(value, hint) or (hint is int and isinstance(value, bool)):
        raise RunConfigError(f"{where} takes {hint.__name__}, got {value!r}")
    return value


def _section(cls, data, where: str):
    if not isinstance(data, dict):
        raise RunConfigError(f"{where} must be a mapping of keys to values, got {data!r}")
    hints = typing.get_type_hints(cls)
    names = {f.name for f in fields(cls)}
    unknown = sorted(set(data) - names)
    if unknown:
        raise RunConfigError(f"{where}: unknown key(s) {unknown}; known: {sorted(names)}")
    kwargs = {k: _coerce(v, hints[k], f"{where}.{k}") for k, v in data.items()}
    try:
        return cls(**kwargs)
    except ValueError as err:
        raise RunConfigError(f"{where}: {err}") from None


def from_mapping(data: dict, where: str = "config") -> RunConfig:
    """A RunConfig from nested dicts (a parsed YAML file), every key and type checked."""
    data = data or {}
    if not isinstance(data, dict):
        raise RunConfigError(f"{where} must be a mapping of sections, got {type(data).__name__}")
    hints = typing.get_type_hints(RunConfig)
    unknown = sorted(set(data) - set(hints))
    if unknown:
        raise RunConfigError(f"{where}: unknown section(s) {unknown}; sections: {sorted(hints)}")
    return RunConfig(**{k: _section(hints[k], v, f"{where}: {k}") for k, v in data.items()})


def apply_overrides(data: dict, pairs: list[str]) -> dict:
    """["training.lr=1e-3", "data.families=[ocr, scene]"] -> a copy of `data` with those values (YAML-parsed)."""
    import yaml

    out = {k: dict(v) if isinstance(v, dict) else v for k, v in (data or {}).items()}
    for pair in pairs:
        key, sep, text = pair.partition("=")
        section, dot, name = key.partition(".")
        if not sep or not dot or not section or not name:
            raise RunConfigError(f"--set {pair!r} is not SECTION.FIELD=VALUE (e.g. training.lr=1e-3)")
        try:
            value = yaml.safe_load(text) if text.strip() else None
        except yaml.YAMLError:
            raise RunConfigError(f"--set {pair!r}: the value is not valid YAML") from None
        out.setdefault(section, {})
        if not isinstance(out[section], dict):
            raise RunConfigError(f"--set {pair!r}: section {section!r} is not a mapping")
        out[section][name] = value
    return out


def load(path: str | Path | None = None, overrides: list[str] = ()) -> RunConfig:
    """The run config of a YAML file (None: every default) with `overrides` applied."""
    import yaml

    data, where = {}, "defaults"
    if path is not None:
        path, where = Path(path), str(path)
        if not path.is_file():
            raise RunConfigError(f"No config file at {path}; pass a YAML file such as configs/bundled.yaml.")
        try:
            data = yaml.safe_load(path.read_text()) or {}
        except yaml.YAMLError as err:
            raise RunConfigError(f"{path} is not valid YAML ({str(err).splitlines()[0]})") from None
    if not isinstance(data, dict):
        raise RunConfigError(f"{where} must hold a mapping of sections, got {type(data).__name__}")
    return from_mapping(apply_overrides(data, list(overrides)), where)


def to_mapping(cfg: RunConfig) -> dict:
    """Plain nested dicts and lists (YAML-safe) of a run config."""
    def plain(v):
        return [plain(x) for x in v] if isinstance(v, (tuple, list)) else v
    return {name: {k: plain(v) for k, v in dataclasses.asdict(getattr(cfg, name)).items()}
            for name in (f.name for f in fields(RunConfig))}


def write_resolved(cfg: RunConfig, folder: str | Path, extra: dict | None = None) -> Path:
    """Write the resolved config (every field, defaults included) as folder/run_config.yaml."""
    import yaml

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / RESOLVED_NAME
    path.write_text(yaml.safe_dump({**to_mapping(cfg), **(extra or {})}, sort_keys=False))
    return path


def add_run_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", type=Path, help="run config YAML (see configs/); default: every default")
    parser.add_argument("--set", nargs="+", default=[], metavar="SECTION.FIELD=VALUE", dest="overrides",
                        help="override config fields, e.g. --set training.lr=1e-3 data.samples=200")


def from_args(parser: argparse.ArgumentParser, args) -> RunConfig:
    """The run config of --config / --set, or a one-sentence parser error."""
    try:
        return load(args.config, args.overrides)
    except RunConfigError as err:
        parser.error(str(err))

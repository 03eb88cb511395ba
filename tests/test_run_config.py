"""One typed config per run: YAML sections validate into the frozen dataclasses, `--set` overrides
win, every mistake is one sentence naming the key, and the resolved file reloads to the same config."""
import pytest

from fovea.training.run_config import RunConfigError, from_mapping, load, to_mapping, write_resolved


def test_yaml_sections_and_overrides_build_the_frozen_dataclasses(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("data:\n  samples: 12\n  families: [ocr, scene]\ntraining:\n  lr: 3e-4\n  total_steps: 10\n"
                    "correction:\n  ground_weight: 1\n")
    cfg = load(path, ["training.lr=1e-3", "drafter.context=text", "target.image_size=null", "eval.draft_step_cost=0.05"])
    assert cfg.data.samples == 12 and cfg.data.families == ("ocr", "scene")
    assert cfg.training.lr == 1e-3 and cfg.training.total_steps == 10 and cfg.drafter.context == "text"
    assert cfg.correction.ground_weight == 1.0 and isinstance(cfg.correction.ground_weight, float)
    assert cfg.target.image_size is None and cfg.eval.draft_step_cost == 0.05
    assert load(write_resolved(cfg, tmp_path / "out")) == cfg
    assert load(None) == from_mapping({}) and to_mapping(cfg)["data"]["families"] == ["ocr", "scene"]


@pytest.mark.parametrize("text, overrides, says", [
    ("trainig: {lr: 1}\n", [], "unknown section(s) ['trainig']"),
    ("training: {lrr: 1}\n", [], "training: unknown key(s) ['lrr']"),
    ("training: {lr: fast}\n", [], "training.lr takes float, got 'fast'"),
    ("training: {total_steps: 1.5}\n", [], "training.total_steps takes int"),
    ("drafter: {context: image}\n", [], "drafter.context must be one of"),
    ("retrieval: {rho: 2}\n", [], "rho must be in (0, 1]"),
    ("data: {dtype: float32}\n", [], "data.dtype must be one of"),
    ("data: {families: ocr}\n", [], "data.families takes a list"),
    ("training: [1, 2]\n", [], "must be a mapping"),
    ("- a\n", [], "must hold a mapping of sections"),
    ("training: {lr: [\n", [], "is not valid YAML"),
    ("", ["lr=1"], "is not SECTION.FIELD=VALUE"),
    ("", ["training.bogus=1"], "unknown key(s) ['bogus']"),
])
def test_config_mistakes_are_one_sentence_naming_the_key(tmp_path, text, overrides, says):
    path = tmp_path / "run.yaml"
    path.write_text(text)
    with pytest.raises(RunConfigError) as err:
        load(path, overrides)
    assert says in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(RunConfigError, match="No config file"):
        load(tmp_path / "missing.yaml")


def test_the_example_configs_validate():
    from pathlib import Path

    for path in sorted(Path("configs").glob("*.yaml")):
        load(path)

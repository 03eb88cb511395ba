"""Unusable checkpoints are refused with one sentence (what is wrong, what to do), never a
library traceback: truncated weights, a config that does not match its weights, a drafter built
for another target, a target folder without its tokenizer, a twin saved without its correction
weights asked to correct, a drafter stored as an adapter whose base is missing or changed. Each bad
checkpoint is built in tmp_path from the committed assets or a tiny random model. And the committed
assets stay within their size budget."""
import json
import os
import shutil
from pathlib import Path

import pytest

from fovea.checkpoints import CheckpointError, safetensors_shapes
from fovea.drafter import Drafter
from fovea.models import bundled
from fovea.pipeline import FoveaPipeline

DRAFTER_DIR, TARGET_DIR = bundled.DEFAULT_DRAFTER_DIR, bundled.DEFAULT_TARGET_DIR
needs_assets = pytest.mark.skipif(not (DRAFTER_DIR / "model.safetensors").exists()
                                  or not (TARGET_DIR / "model.safetensors").exists(),
                                  reason="the bundled assets are not built")


def one_sentence(err: pytest.ExceptionInfo) -> str:
    """The message is one line and one sentence: 'what is wrong; what to do.'"""
    text = str(err.value)
    assert "\n" not in text and "Traceback" not in text and text.endswith(".")
    assert text.count("; ") >= 1
    return text


def copy(src, dst):
    """A checkpoint folder copied; a drafter stored as an adapter brings its base along, beside it as in assets/."""
    shutil.copytree(src, dst)
    base = json.loads((src / "config.json").read_text()).get("base")
    if base:
        shutil.copytree(src / base["folder"], dst / base["folder"])
    return dst


@needs_assets
@pytest.mark.parametrize("keep", [4, 100, 0.5, -1])
def test_truncated_drafter_weights_are_named_with_what_to_do(tmp_path, keep):
    folder = copy(DRAFTER_DIR, tmp_path / "drafter")
    weights = folder / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[: int(len(data) * keep) if isinstance(keep, float) else keep])
    with pytest.raises(CheckpointError) as err:
        Drafter.from_pretrained(folder)
    text = one_sentence(err)
    assert "drafter weights file" in text and str(weights) in text and "truncated" in text
    assert "copy it again" in text


@needs_assets
def test_truncated_target_weights_are_named_before_transformers_reads_them(tmp_path):
    folder = copy(TARGET_DIR, tmp_path / "target")
    weights = folder / "model.safetensors"
    size = weights.stat().st_size
    weights.write_bytes(weights.read_bytes()[: size - 1000])
    with pytest.raises(CheckpointError) as err:
        bundled.load_target(folder)
    text = one_sentence(err)
    assert "target weights file" in text and f"{size - 1000:,} of {size:,} bytes" in text
    with pytest.raises(CheckpointError, match="target weights file .* is truncated"):
        FoveaPipeline.from_pretrained(target=folder)      # the load_backbone route checks first too


@needs_assets
def test_drafter_config_that_does_not_match_its_weights(tmp_path):
    folder = copy(DRAFTER_DIR, tmp_path / "drafter")
    meta = json.loads((folder / "config.json").read_text())
    meta["drafter"].update(hidden_size=512, memory_dim=512)
    (folder / "config.json").write_text(json.dumps(meta))
    with pytest.raises(CheckpointError) as err:
        Drafter.from_pretrained(folder)
    text = one_sentence(err)
    assert f"The drafter at {folder} does not match its config.json" in text
    assert "fc.weight is [256, 512] in the weights but [512, 1024]" in text and "more tensors differ" in text
    assert "put back the config.json saved with these weights" in text and "size mismatch" not in text


@needs_assets
def test_drafter_weights_with_a_missing_tensor(tmp_path):
    from safetensors.torch import load_file, save_file

    folder = copy(DRAFTER_DIR, tmp_path / "drafter")
    state = load_file(str(folder / "model.safetensors"))
    state.pop("corrector.f.0.bias")
    save_file(state, str(folder / "model.safetensors"))
    with pytest.raises(CheckpointError, match="corrector.f.0.bias is missing from the weights"):
        Drafter.from_pretrained(folder)


@needs_assets
@pytest.mark.parametrize("config, expected", [
    ("{not json", "is not valid JSON"),
    (json.dumps({"correction": {}}), "no 'drafter' section"),
    (json.dumps({"drafter": {"hidden_size": 256, "wings": 2}, "correction": {}}), "unknown DrafterConfig keys"),
])
def test_unreadable_drafter_config(tmp_path, config, expected):
    folder = copy(DRAFTER_DIR, tmp_path / "drafter")
    (folder / "config.json").write_text(config)
    with pytest.raises(CheckpointError) as err:
        Drafter.from_pretrained(folder)
    text = one_sentence(err)
    assert expected in text and "put back the config.json saved with the drafter" in text


@needs_assets
def test_drafter_built_for_another_target(tiny_pipeline, tmp_path):
    bundled_drafter = Drafter.from_pretrained(DRAFTER_DIR)
    with pytest.raises(CheckpointError) as err:
        FoveaPipeline(tiny_pipeline.target, {"fovea": bundled_drafter})
    text = one_sentence(err)
    assert f"The drafter 'fovea' at {DRAFTER_DIR} was built for a target with hidden size 256" in text
    assert "a 1024-token vocabulary" in text
    tiny = tiny_pipeline.target
    assert f"this target has hidden size {tiny.hidden_size} and a {tiny.vocab_size}-token vocabulary" in text
    assert "python -m fovea.train drafter --target" in text
    # the same through from_pretrained: a saved tiny target with the bundled drafter
    tiny.model.save_pretrained(str(tmp_path / "tiny"))
    tiny.tokenizer.save_pretrained(str(tmp_path / "tiny"))
    with pytest.raises(CheckpointError, match="was built for a target with hidden size 256"):
        FoveaPipeline.from_pretrained(target=tmp_path / "tiny", drafter=DRAFTER_DIR)


@needs_assets
def test_target_folder_missing_its_tokenizer(tmp_path):
    folder = copy(TARGET_DIR, tmp_path / "target")
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (folder / name).unlink()
    with pytest.raises(CheckpointError) as err:
        bundled.load_target(folder)
    text = one_sentence(err)
    assert f"The target folder {folder} has no tokenizer" in text and "copy the tokenizer files" in text
    with pytest.raises(CheckpointError, match="has no tokenizer"):
        FoveaPipeline.from_pretrained(target=folder)


def test_tiny_checkpoints_built_here_are_refused_the_same_way(tiny_pipeline, tmp_path):
    """No assets needed: a freshly saved tiny drafter, truncated, and its config edited."""
    drafter = tiny_pipeline.drafters["fovea"]
    drafter.save_pretrained(tmp_path / "d")
    assert Drafter.from_pretrained(tmp_path / "d").cfg == drafter.cfg        # intact: loads
    weights = tmp_path / "d" / "model.safetensors"
    assert safetensors_shapes(weights, "drafter")["fc.weight"] == tuple(drafter.fc.weight.shape)
    weights.write_bytes(weights.read_bytes() + b"\0" * 8)
    with pytest.raises(CheckpointError, match="8 bytes after its last tensor"):
        Drafter.from_pretrained(tmp_path / "d")
    weights.write_bytes(weights.read_bytes()[:-4000])
    with pytest.raises(CheckpointError, match="is truncated"):
        Drafter.from_pretrained(tmp_path / "d")


def test_checkpoint_error_is_caught_where_loading_errors_are():
    assert issubclass(CheckpointError, ValueError) and issubclass(CheckpointError, OSError)


def test_a_drafter_remembers_its_target_and_warns_on_another_of_the_same_shape(tiny_pipeline, tmp_path):
    import warnings

    from fovea.checkpoints import TargetMismatchWarning, target_fingerprint

    target = tiny_pipeline.target
    tiny_pipeline.drafters["fovea"].save_pretrained(tmp_path / "d")
    saved = json.loads((tmp_path / "d" / "config.json").read_text())["target_fingerprint"]
    assert saved == target_fingerprint(target) and len(saved) == 16
    reloaded = Drafter.from_pretrained(tmp_path / "d")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        FoveaPipeline(target, {"fovea": reloaded})                  # its own target: silent
    other = FoveaPipeline.tiny_random(seed=1).target                  # same shapes, other weights
    assert target_fingerprint(other) != saved
    with pytest.warns(TargetMismatchWarning, match="was trained with another target .* answers stay exactly"):
        FoveaPipeline(other, {"fovea": Drafter.from_pretrained(tmp_path / "d")})
    legacy = json.loads((tmp_path / "d" / "config.json").read_text())
    del legacy["target_fingerprint"], legacy["target_decoder_fingerprint"]  # drafters saved before fingerprints
    (tmp_path / "d" / "config.json").write_text(json.dumps(legacy))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        FoveaPipeline(other, {"fovea": Drafter.from_pretrained(tmp_path / "d")})


def test_a_target_that_kept_the_lm_head_but_changed_the_decoder_is_another_target(tiny_pipeline, tmp_path):
    """Target v3 kept step 54,200's LM head frozen, so the head fingerprint named both; the decoder
    fingerprint (depth, final norm, head) tells them apart, and drafters saved before it still load."""
    import warnings

    import torch

    from fovea.checkpoints import TargetMismatchWarning, decoder_fingerprint, target_fingerprint, trained_for_target

    target = tiny_pipeline.target
    tiny_pipeline.drafters["fovea"].save_pretrained(tmp_path / "d")
    saved = json.loads((tmp_path / "d" / "config.json").read_text())
    assert saved["target_decoder_fingerprint"] == decoder_fingerprint(target)
    other = FoveaPipeline.tiny_random(seed=1).target
    with torch.no_grad():
        other.lm_head_weight.copy_(target.lm_head_weight)            # the head kept, as v3 kept 54,200's
        other.model.get_decoder().norm.weight.mul_(1.5)              # the rest trained on
    assert target_fingerprint(other) == target_fingerprint(target)
    assert decoder_fingerprint(other) != decoder_fingerprint(target)
    reloaded = Drafter.from_pretrained(tmp_path / "d")
    assert trained_for_target(reloaded, target) is True and trained_for_target(reloaded, other) is False
    with pytest.warns(TargetMismatchWarning, match="was trained with another target"):
        FoveaPipeline(other, {"fovea": reloaded})
    del saved["target_decoder_fingerprint"]                          # saved before the decoder fingerprint:
    (tmp_path / "d" / "config.json").write_text(json.dumps(saved))    # the head decides, as it did
    legacy = Drafter.from_pretrained(tmp_path / "d")
    assert trained_for_target(legacy, other) is True
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        FoveaPipeline(other, {"fovea": legacy})


@needs_assets
def test_the_committed_drafters_name_their_target_and_not_the_deep_candidate():
    from fovea.checkpoints import trained_for_target

    deep = bundled.ASSETS.parent / "candidates" / "target_v3_drill"
    if not (deep / "model.safetensors").exists():
        pytest.skip("no deep candidate target in this checkout")
    shipped, v3 = bundled.load_target(TARGET_DIR), bundled.load_target(deep)
    for name in ("drafter", "drafter_nocorr", "drafter_text", "drafter_text_nocorr"):
        d = Drafter.from_pretrained(bundled.ASSETS / name)
        assert trained_for_target(d, shipped) is True and trained_for_target(d, v3) is False, name
        rebuilt = Drafter.from_pretrained(deep.parent / "drafters_v4" / name)
        assert trained_for_target(rebuilt, v3) is True and trained_for_target(rebuilt, shipped) is False, name


@needs_assets
def test_a_drafter_set_beside_the_drafter_loads_where_built_for_the_target(tmp_path):
    """`from_pretrained(target, drafter)` takes the twin and the other contexts' pair from the folder that
    holds the drafter (a `rebuild --assets` set), each only where it was trained for the loaded target."""
    for name in ("drafter", "drafter_nocorr", "drafter_text", "drafter_text_nocorr"):   # the set, as it is
        shutil.copytree(bundled.ASSETS / name, tmp_path / name)
    other = tmp_path / "drafter_text_nocorr" / "config.json"
    meta = json.loads(other.read_text())
    meta["target_fingerprint"] = meta["target_decoder_fingerprint"] = "0000000000000000"  # another target's
    other.write_text(json.dumps(meta))
    pipe = FoveaPipeline.from_pretrained(target=TARGET_DIR, drafter=tmp_path / "drafter")
    assert sorted(pipe.drafters) == ["fovea", "fovea_text", "no_correction"]
    assert {d.source for d in pipe.drafters.values()} == {str(tmp_path / n) for n in
                                                          ("drafter", "drafter_nocorr", "drafter_text")}
    alone = tmp_path / "alone"
    # a set of one, no twin to race: the FOVEA drafter saved with its full weights, its twin's base included
    Drafter.from_pretrained(bundled.ASSETS / "drafter").save_pretrained(alone / "drafter")
    assert sorted(FoveaPipeline.from_pretrained(target=TARGET_DIR, drafter=alone / "drafter").drafters) == ["fovea"]
    assert {d.source for d in FoveaPipeline.from_pretrained().drafters.values()} == {
        str(bundled.ASSETS / n) for n in ("drafter", "drafter_nocorr", "drafter_text", "drafter_text_nocorr")}


def test_a_twin_saved_without_its_correction_weights_drafts_the_same_and_refuses_to_correct(tiny_pipeline, tmp_path):
    """A drafter whose correction is disabled is saved without the modules only the correction runs
    (fovea.drafter.CORRECTION_PARTS); it reloads with the rest bit for bit and decodes with the
    correction off, while a request or a training start that enables the correction on it is refused."""
    import torch

    from fovea.config import CorrectionConfig, FoveaConfig
    from fovea.drafter import CORRECTION_PARTS
    from fovea.methods import METHODS
    from fovea.training.drafter_cli import warm_start

    twin, fovea = tiny_pipeline.drafters["no_correction"], tiny_pipeline.drafters["fovea"]
    twin.save_pretrained(tmp_path / "twin")
    fovea.save_pretrained(tmp_path / "fovea")
    saved = safetensors_shapes(tmp_path / "twin" / "model.safetensors", "drafter")
    assert saved and not any(k.startswith(CORRECTION_PARTS) for k in saved)
    assert any(k.startswith(CORRECTION_PARTS) for k in safetensors_shapes(tmp_path / "fovea" / "model.safetensors",
                                                                          "drafter"))
    loaded = Drafter.from_pretrained(tmp_path / "twin")
    assert not loaded.correction_weights and Drafter.from_pretrained(tmp_path / "fovea").correction_weights
    state = loaded.state_dict()
    assert all(torch.equal(state[k], v.half().float()) for k, v in twin.state_dict().items() if k in saved)
    pipe = FoveaPipeline(tiny_pipeline.target, {"no_correction": loaded})
    image, question = tiny_pipeline.random_example("chart", 0)
    cfg = FoveaConfig().replace(decoding={"max_new_tokens": 4})
    assert pipe.generate(image, question, cfg, METHODS["no_correction"]).tokens
    with pytest.raises(CheckpointError) as err:
        pipe.generate(image, question, cfg, METHODS["fovea"].on("no_correction"))
    assert "saved with its correction disabled" in one_sentence(err)
    with pytest.raises(SystemExit, match="cannot correct"):
        warm_start(Drafter(loaded.cfg), loaded)
    warm_start(Drafter(loaded.cfg, CorrectionConfig(enabled=False)), loaded)     # its own kind: fine
    meta = json.loads((tmp_path / "twin" / "config.json").read_text())
    meta["correction"]["enabled"] = True                  # a config that corrects needs the weights in the file
    (tmp_path / "twin" / "config.json").write_text(json.dumps(meta))
    with pytest.raises(CheckpointError, match="is missing from the weights"):
        Drafter.from_pretrained(tmp_path / "twin")


def test_a_fovea_drafter_saved_as_an_adapter_of_its_twin_loads_the_same(tiny_pipeline, tmp_path):
    """`save_pretrained(folder, base=twin folder)` leaves out the base (BASE_PARTS) where it is the twin's bit
    for bit, and config.json names the twin's folder (relative) and fingerprint; the adapter reloads equal
    to the drafter saved in full, and a drafter whose base is not the twin's is saved in full."""
    import copy as copies

    import torch

    from fovea.drafter import BASE_PARTS, CORRECTION_PARTS

    twin, fovea = tiny_pipeline.drafters["no_correction"], copies.deepcopy(tiny_pipeline.drafters["fovea"])
    fovea.load_state_dict({k: v for k, v in twin.state_dict().items() if k.startswith(BASE_PARTS)}, strict=False)
    twin.save_pretrained(tmp_path / "twin")
    fovea.save_pretrained(tmp_path / "full")
    fovea.save_pretrained(tmp_path / "set" / "adapter", base=tmp_path / "twin")
    meta = json.loads((tmp_path / "set" / "adapter" / "config.json").read_text())
    assert meta["base"]["folder"] == "../../twin" and len(meta["base"]["fingerprint"]) == 16
    saved = safetensors_shapes(tmp_path / "set" / "adapter" / "model.safetensors", "drafter")
    assert saved and all(k.startswith(CORRECTION_PARTS) for k in saved)
    adapter, full = (Drafter.from_pretrained(tmp_path / f).state_dict() for f in ("set/adapter", "full"))
    assert adapter.keys() == full.keys() and all(torch.equal(adapter[k], full[k]) for k in full)
    assert "base" not in json.loads((tmp_path / "full" / "config.json").read_text())   # the full format loads too
    with torch.no_grad():
        fovea.fc.bias.add_(1.0)             # a base of its own: nothing to share
    fovea.save_pretrained(tmp_path / "own", base=tmp_path / "twin")
    assert "base" not in json.loads((tmp_path / "own" / "config.json").read_text())
    assert "fc.bias" in safetensors_shapes(tmp_path / "own" / "model.safetensors", "drafter")


@needs_assets
def test_an_adapter_without_its_base_or_with_another_base_is_refused(tmp_path):
    from safetensors.torch import load_file, save_file

    alone = tmp_path / "drafter"
    shutil.copytree(DRAFTER_DIR, alone)              # without the base beside it
    with pytest.raises(CheckpointError) as err:
        Drafter.from_pretrained(alone)
    text = one_sentence(err)
    assert f"The drafter at {alone} is stored as an adapter of the drafter at {tmp_path}/" in text
    assert "which is missing" in text and "copy the two folders together" in text and "full weights" in text
    relative = json.loads((DRAFTER_DIR / "config.json").read_text())["base"]["folder"]
    base = Path(os.path.normpath(alone / relative))
    shutil.copytree(os.path.normpath(DRAFTER_DIR / relative), base)
    Drafter.from_pretrained(alone)                  # the base back beside it: loads
    state = load_file(str(base / "model.safetensors"))
    state["fc.bias"][0] += 1                        # a retrained twin
    save_file(state, str(base / "model.safetensors"))
    with pytest.raises(CheckpointError) as err:
        Drafter.from_pretrained(alone)
    text = one_sentence(err)
    assert f"adapter of the drafter at {base}, whose weights are not the ones it was saved with" in text
    assert "keep the base it was saved with beside it" in text


ASSETS_BUDGET = 60 * 10**6     # bytes: what the repository ships under assets/ (room for a larger target)


def test_the_committed_assets_stay_within_their_size_budget():
    sizes: dict[str, int] = {}
    for f in bundled.ASSETS.rglob("*"):
        if f.is_file():
            folder = "/".join(f.relative_to(bundled.ASSETS).parent.parts[:2]) or "."
            sizes[folder] = sizes.get(folder, 0) + f.stat().st_size
    total = sum(sizes.values())
    biggest = ", ".join(f"{k} {v / 1e6:.1f} MB" for k, v in sorted(sizes.items(), key=lambda kv: -kv[1])[:6])
    assert total <= ASSETS_BUDGET, (f"assets/ holds {total / 1e6:.1f} MB, over its {ASSETS_BUDGET / 1e6:.0f} MB "
                                    f"budget; the biggest folders: {biggest}")

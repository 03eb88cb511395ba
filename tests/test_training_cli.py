"""The bundled-model training commands run end to end on a couple of tiny steps: the assistant LM
for transformers' assisted generation, and drafter training continued from the shipped drafters."""
import json

import pytest
import torch

from fovea.data import make_sample
from fovea.models.bundled import ASSETS, DEFAULT_TARGET_DIR, load_tokenizer


def test_assistant_command_trains_and_exports_a_loadable_lm(tmp_path):
    from transformers import LlamaForCausalLM

    from fovea.training.assistant import main

    out = tmp_path / "assistant"
    main(["--run-dir", str(tmp_path / "run"), "--out", str(out), "--total-steps", "2", "--batch-size", "2"])
    model = LlamaForCausalLM.from_pretrained(str(out), dtype=torch.float32)
    tok = load_tokenizer(DEFAULT_TARGET_DIR)
    from transformers import AutoConfig
    assert model.config.vocab_size == AutoConfig.from_pretrained(str(DEFAULT_TARGET_DIR)).text_config.vocab_size
    assert len(tok) <= model.config.vocab_size
    assert model.config.num_hidden_layers == 1
    meta = json.loads((out / "train_config.json").read_text())
    assert meta["steps"] == 2 and meta["final_loss"] > 0
    ids = torch.tensor([[tok.bos_token_id, 5, 6]])
    assert torch.isfinite(model(input_ids=ids).logits).all()


def test_assistant_command_rejects_a_folder_that_is_not_a_target(tmp_path):
    from fovea.training.assistant import main

    with pytest.raises(SystemExit, match="not a target folder"):
        main(["--target", str(tmp_path), "--run-dir", str(tmp_path / "run"), "--total-steps", "1"])


def test_drafter_command_continues_from_the_shipped_drafters(tmp_path):
    from fovea.drafter import Drafter
    from fovea.training.drafter_cli import main

    fovea_out, base_out = tmp_path / "fovea", tmp_path / "base"
    main(["--init-from", str(ASSETS / "drafter"), str(ASSETS / "drafter_nocorr"), "--run-dir", str(tmp_path / "run"),
          "--out", str(fovea_out), "--baseline-out", str(base_out), "--total-steps", "1", "--batch-size", "2",
          "--lr", "1e-6"])
    before = json.loads((ASSETS / "drafter" / "train_config.json").read_text())["steps"]
    for folder, shipped in ((fovea_out, ASSETS / "drafter"), (base_out, ASSETS / "drafter_nocorr")):
        meta = json.loads((folder / "train_config.json").read_text())
        assert meta["steps"] == before + 1 and meta["steps_this_run"] == 1
        new, old = Drafter.from_pretrained(folder).state_dict(), Drafter.from_pretrained(shipped).state_dict()
        # continued, not re-initialised: one tiny step barely moves the weights
        assert max(float((new[k] - old[k]).abs().max()) for k in old) < 1e-2


def test_target_focus_tasks_are_validated_and_oversampled_deterministically():
    from fovea.training.target import parse_focus, training_sample

    with pytest.raises(SystemExit, match="unknown task 'scene/flavour'"):
        parse_focus(["scene/flavour"])
    focus = parse_focus(["scene/colour", "chart/value"])
    picks = [training_sample(s, focus, 0.5) for s in range(60)]
    share = sum((p.family, p.task) in focus for p in picks) / len(picks)
    assert 0.4 <= share <= 0.85                       # ~0.5 focus draws + the usual mix's own share
    again = training_sample(7, focus, 0.5)
    assert (again.question, again.answer) == (picks[7].question, picks[7].answer)
    assert all(training_sample(s, focus, 0.0).question == make_sample(s).question for s in range(5))

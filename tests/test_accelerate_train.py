"""Drafter training for real backbones: the loss on a fixed batch falls; the records loader
refuses bad records with line numbers and a fix; an accelerate run writes checkpoints, exports a
loadable drafter, and a stopped + resumed run ends exactly where an uninterrupted one does."""
import json

import pytest
import torch

from fovea.backbones import save_backbone, tiny_llava_next, tiny_qwen2_5_vl
from fovea.config import CorrectionConfig
from fovea.data import make_sample
from fovea.drafter import Drafter, drafter_config_for
from fovea.training.accelerate_train import RecordTrainConfig, latest_checkpoint, main, train
from fovea.training.drafter import answer_loss_mask, drafter_loss, target_artifacts
from fovea.training.records import Collator, RecordDataset, RecordError, load_records

SIZES = [(128, 128), (96, 48), (40, 100), (64, 80)]


def write_records(folder, n=8):
    (folder / "img").mkdir(parents=True, exist_ok=True)
    with open(folder / "data.jsonl", "w") as f:
        for i in range(n):
            s = make_sample(30_000 + i)
            s.image.resize(SIZES[i % len(SIZES)]).save(folder / "img" / f"{i}.png")
            f.write(json.dumps({"image": f"img/{i}.png", "question": s.question, "answer": s.answer}) + "\n")
    return folder / "data.jsonl"


@pytest.fixture(autouse=True)
def fresh_accelerator_state():
    """accelerate keeps process-wide state; each in-process run starts clean."""
    from accelerate.state import AcceleratorState

    AcceleratorState._reset_state(reset_partial_state=True)
    yield
    AcceleratorState._reset_state(reset_partial_state=True)


@pytest.mark.parametrize("build", [tiny_llava_next, tiny_qwen2_5_vl], ids=["llava_next", "qwen2_5_vl"])
def test_drafter_loss_on_a_fixed_batch_falls_over_20_steps(build, tmp_path):
    target = build(seed=0)
    records = load_records(write_records(tmp_path, 4))
    ids, att, lab, images = Collator(target)([RecordDataset(records)[i] for i in range(len(records))])
    art = target_artifacts(target, ids, att, images)
    torch.manual_seed(0)
    drafter = Drafter(drafter_config_for(target)).bind(target).train()
    opt = torch.optim.AdamW(drafter.parameters(), lr=3e-3)
    losses = []
    for _ in range(20):
        loss, _ = drafter_loss(drafter, art, ids, answer_loss_mask(lab), att, CorrectionConfig())
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    print(f"{type(target).__name__}: loss {losses[0]:.3f} -> {losses[-1]:.3f}")
    assert all(torch.isfinite(torch.tensor(losses)))
    assert losses[-1] == min(losses) and losses[-1] < 0.92 * losses[0]


def test_records_loader_rejects_bad_records_with_clear_messages(tmp_path):
    path = write_records(tmp_path, 2)
    (tmp_path / "img" / "broken.png").write_bytes(b"not a png")
    good = path.read_text()
    path.write_text(good + "\n".join([
        "{not json",
        json.dumps(["a", "list"]),
        json.dumps({"image": "img/0.png", "question": "q?"}),
        json.dumps({"image": "img/0.png", "question": "", "answer": "a"}),
        json.dumps({"image": "img/missing.png", "question": "q?", "answer": "a"}),
        json.dumps({"image": "../outside.png", "question": "q?", "answer": "a"}),
        json.dumps({"image": "img/broken.png", "question": "q?", "answer": "a"}),
    ]) + "\n")
    with pytest.raises(RecordError) as err:
        load_records(path)
    msg = str(err.value)
    assert msg.startswith("7 bad record(s)")
    for expected in ["line 3: not valid JSON", "line 4: expected a JSON object", "line 5: missing key(s) ['answer']",
                     "line 6: 'question' must be a non-empty string", "line 7: image 'img/missing.png' not found",
                     "line 8: image path '../outside.png' must be relative",
                     "line 9: image 'img/broken.png' could not"]:
        assert expected in msg
    with pytest.raises(RecordError, match="No records file at"):
        load_records(tmp_path / "nope.jsonl")
    (tmp_path / "empty.jsonl").write_text("\n")
    with pytest.raises(RecordError, match="holds no records"):
        load_records(tmp_path / "empty.jsonl")
    assert len(load_records(write_records(tmp_path / "ok", 3))) == 3


def test_accelerate_run_checkpoints_and_a_resumed_run_matches_an_uninterrupted_one(tmp_path):
    target = tiny_qwen2_5_vl(seed=0)
    data = write_records(tmp_path, 8)
    # 8 records, batch 2, accumulation 2 -> 2 optimiser steps per epoch; stop mid-epoch 2 at step 3
    cfg = RecordTrainConfig(batch_size=2, grad_accum=2, total_steps=5, warmup=1, lr=2e-3, save_every=2,
                            keep_checkpoints=2)
    train("tiny", data, tmp_path / "whole", cfg, target=target)
    train("tiny", data, tmp_path / "split", cfg, stop_at=3, target=target)
    assert latest_checkpoint(tmp_path / "split" / "checkpoints").name == "step_00000003"
    from accelerate.state import AcceleratorState

    AcceleratorState._reset_state(reset_partial_state=True)
    train("tiny", data, tmp_path / "split", cfg, resume=True, target=target)
    names = sorted(p.name for p in (tmp_path / "split" / "checkpoints").iterdir())
    assert names == ["step_00000004", "step_00000005"]           # keep_checkpoints=2
    whole, split = (Drafter.from_pretrained(tmp_path / d) for d in ("whole", "split"))
    for (name, a), b in zip(whole.state_dict().items(), split.state_dict().values()):
        assert torch.allclose(a, b, atol=1e-3), name                 # fp16 export; identical runs
    assert json.loads((tmp_path / "split" / "metrics.json").read_text())["step"] == 5


def test_cli_trains_from_a_checkpoint_folder_and_records(tmp_path):
    save_backbone(tiny_llava_next(seed=0), tmp_path / "target")
    data = write_records(tmp_path / "data", 4)
    main(["--target", str(tmp_path / "target"), "--records", str(data), "--out", str(tmp_path / "drafter"),
          "--batch-size", "2", "--grad-accum", "1", "--total-steps", "2", "--warmup", "1", "--save-every", "1",
          "--no-correction"])
    drafter = Drafter.from_pretrained(tmp_path / "drafter")
    assert drafter.correction_cfg.enabled is False
    assert json.loads((tmp_path / "drafter" / "train_config.json").read_text())["correction"] is False

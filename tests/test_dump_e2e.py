"""Dump -> train -> evaluate end to end on tiny random LLaVA-NeXT and Qwen2.5-VL checkpoints, through
the command lines a researcher runs: `fovea.train dump`, `fit` on two data-parallel CPU processes
(torchrun + accelerate, gloo), `accept --select`; every output carries the resolved run config, the
evaluation reports acceptance per draft position and per MMSpec category, and stays lossless."""
import json
import os
import socket
import subprocess
import sys

import pytest
import yaml

from fovea.backbones import save_backbone, tiny_llava_next, tiny_qwen2_5_vl
from fovea.data import make_sample
from fovea.train import main as train_main
from fovea.training import run_config

SIZES = [(128, 128), (96, 48), (40, 100), (64, 80)]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _write_data(folder, n: int = 8) -> None:
    """records.jsonl (image, question, answer) and questions.jsonl in MMSpec's layout (image, question, category)."""
    (folder / "img").mkdir(parents=True)
    with open(folder / "records.jsonl", "w") as rec, open(folder / "questions.jsonl", "w") as q:
        for i in range(n):
            s = make_sample(40_000 + i)
            s.image.resize(SIZES[i % len(SIZES)]).save(folder / "img" / f"{i}.png")
            rec.write(json.dumps({"image": f"img/{i}.png", "question": s.question, "answer": s.answer}) + "\n")
            q.write(json.dumps({"image": f"img/{i}.png", "question": s.question, "category": s.family}) + "\n")


@pytest.mark.slow
@pytest.mark.parametrize("build", [tiny_llava_next, tiny_qwen2_5_vl], ids=["llava_next", "qwen2_5_vl"])
def test_dump_then_two_process_training_then_per_position_evaluation(build, tmp_path):
    save_backbone(build(seed=1), tmp_path / "target")     # seed 1: neither model answers EOS at once
    _write_data(tmp_path)
    config = {"target": {"path": str(tmp_path / "target")},
              "data": {"records": str(tmp_path / "records.jsonl"), "dumps": str(tmp_path / "dumps"), "batch_size": 4},
              "drafter": {"context": "text"},
              "training": {"out": str(tmp_path / "drafter"), "batch_size": 2, "grad_accum": 1, "total_steps": 4,
                           "warmup": 1, "lr": 3e-3, "save_every": 2, "keep_checkpoints": 2},
              "tree": {"depth": 3, "top_k": 2, "total_tokens": 6},
              "eval": {"questions": str(tmp_path / "questions.jsonl"), "n": 4, "max_new_tokens": 8,
                       "check_lossless": True}}
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(config))
    train_main(["dump", "--config", str(tmp_path / "run.yaml")])
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
                           "--master_port", str(_free_port()), "-m", "fovea.train", "fit",
                           "--config", str(tmp_path / "run.yaml"), "--set", "training.seed=3"],
                          env=env, capture_output=True, text=True, timeout=400)
    assert done.returncode == 0, done.stderr[-3000:]
    out = tmp_path / "drafter"
    resolved = yaml.safe_load((out / "run_config.yaml").read_text())
    assert run_config.from_mapping({k: v for k, v in resolved.items() if k != "dump"}).training.seed == 3
    assert resolved["training"]["seed"] == 3 and resolved["dump"]["samples"] == 8
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["step_00000002", "step_00000004"]
    for step in ("step_00000002", "step_00000004"):
        assert (out / "checkpoints" / step / "drafter" / "run_config.yaml").exists()
    train_main(["accept", "--config", str(tmp_path / "run.yaml"), "--select"])
    result = json.loads((out / "selection" / "acceptance.json").read_text())
    report = result["report"]
    assert set(report) == {*{make_sample(40_000 + i).family for i in range(4)}, "all"}
    assert report["all"]["questions"] == 4 and report["all"]["lossless"] is True
    rates = report["all"]["acceptance_by_position"]
    assert 1 <= len(rates) <= 3 and all(0.0 <= a <= 1.0 for a in rates)
    assert report["all"]["estimated_speedup"] > 0 and (out / "best" / "model.safetensors").exists()
    assert result["chosen"] in json.loads((out / "selection" / "candidates.json").read_text())["by_estimated_speedup"]
    assert (out / "selection" / "run_config.yaml").exists()

"""Dump once, train many: a dump holds what the drafter's losses read, sized by its formula; it resumes
without recomputing; a drafter trained from it takes the same steps as one trained online on the
same batches (bundled target); a dump made differently is refused; acceptance per draft position
and the cost model follow their definitions."""
import json
from pathlib import Path

import pytest
import torch

from fovea.backbones import tiny_llava_next, tiny_qwen2_5_vl
from fovea.models.bundled import DEFAULT_TARGET_DIR
from fovea.training import run_config
from fovea.bench.stats import acceptance_by_position
from fovea.training.acceptance import CostModel, Round, per_position
from fovea.training.drafter import answer_loss_mask, drafter_loss, target_artifacts
from fovea.training.dump import DumpError, bytes_per_sample, collate, dump, examples
from fovea.training.dumps import DumpDataset, DumpHead, collate_dumped, dumped_inputs, step_batches


def _cfg(folder, **data):
    return run_config.from_mapping({"data": {"dumps": str(folder), "samples": 4, "batch_size": 2, **data}})


@pytest.mark.parametrize("build", [tiny_llava_next, tiny_qwen2_5_vl], ids=["llava_next", "qwen2_5_vl"])
def test_a_dump_holds_what_the_losses_read_and_its_size_is_the_formula(build, tmp_path):
    target = build(seed=0)
    cfg = _cfg(tmp_path / "d", top_k=3)
    dump(target, cfg, "tiny", progress=False)
    head, data = DumpHead(tmp_path / "d"), DumpDataset(tmp_path / "d")
    assert len(data) == 4 and head.hidden_size == target.hidden_size
    from fovea.checkpoints import decoder_fingerprint
    from fovea.drafter import Drafter, drafter_config_for
    # a drafter trained from the dump records the dumped target's decoder, as one trained online does
    assert Drafter(drafter_config_for(target)).bind(head).bound_to_decoder == decoder_fingerprint(target) is not None
    batch = collate(target, cfg, examples(target, cfg))
    online = target_artifacts(target, batch["input_ids"], batch["attention_mask"], batch["images"])
    dumped = collate_dumped([data[i] for i in range(4)])
    art, ids, att, mask, ground = dumped_inputs(head)(dumped)
    assert torch.equal(ids, batch["input_ids"]) and torch.equal(mask, batch["loss_mask"]) and ground is None
    valid = att.bool()
    assert torch.allclose(art["feats"][valid], online["feats"][valid], atol=2e-2, rtol=1e-2)
    agree = (art["logits"].argmax(-1) == dumped["next_tokens"])[valid].float().mean()
    assert agree > 0.98                                      # fp16 states: near-ties may flip, little else
    for i in range(4):
        e, s = data.entries[i], data[i]
        tensors = bytes_per_sample(e["tokens"], e["visual"], head.hidden_size, 2, top_k=3)
        assert tensors == sum(v.numel() * v.element_size() for k, v in s.items() if k != "family")
        assert 0 < e["bytes"] - tensors < 1024                # the safetensors header
    torch.manual_seed(0)
    from fovea.config import CorrectionConfig
    from fovea.drafter import Drafter, drafter_config_for
    drafter = Drafter(drafter_config_for(target)).bind(target)
    with torch.no_grad():
        a, _ = drafter_loss(drafter, online, batch["input_ids"], batch["loss_mask"], batch["attention_mask"],
                            CorrectionConfig(), image_token_id=target.image_token_id)
        b, _ = drafter_loss(drafter, art, ids, mask, att, CorrectionConfig(), image_token_id=head.image_token_id)
    assert abs(a.item() - b.item()) < 1e-2 * abs(a.item())


def test_a_dump_resumes_without_recomputing_and_refuses_another_setup(tmp_path):
    target = tiny_llava_next(seed=0)
    dump(target, _cfg(tmp_path / "d", samples=2), "tiny", progress=False)
    first = (tmp_path / "d" / "shard_00000" / "00000000.safetensors").stat().st_mtime_ns
    dump(target, _cfg(tmp_path / "d"), "tiny", progress=False)
    ids = [json.loads(x)["id"] for x in (tmp_path / "d" / "index.jsonl").read_text().splitlines()]
    assert ids == [0, 1, 2, 3]
    assert (tmp_path / "d" / "shard_00000" / "00000000.safetensors").stat().st_mtime_ns == first
    with pytest.raises(DumpError, match="made differently"):
        dump(target, _cfg(tmp_path / "d", seed_offset=7), "tiny", progress=False)
    with pytest.raises(DumpError, match="not a complete dump"):
        DumpHead(tmp_path)


def test_step_batches_resume_at_any_step_and_keep_dump_order(tmp_path):
    target = tiny_llava_next(seed=0)
    dump(target, _cfg(tmp_path / "d", samples=5), "tiny", progress=False)
    data = DumpDataset(tmp_path / "d")
    firsts = [b["input_ids"][:, 0].tolist() for b, _ in zip(step_batches(data, 2, 0, False, 0), range(5))]
    lengths = [data[i]["input_ids"].shape[0] for i in range(5)]
    order = [b["attention_mask"].sum(1).tolist() for b, _ in zip(step_batches(data, 2, 0, False, 0), range(5))]
    assert sum(order, []) == (lengths * 2)[:10]
    resumed = next(step_batches(data, 2, 3, False, 0))
    assert resumed["input_ids"][:, 0].tolist() == firsts[3]
    shuffled = [b["attention_mask"].sum(1).tolist() for b, _ in zip(step_batches(data, 5, 0, True, 1), range(2))]
    assert sorted(shuffled[0]) == sorted(lengths) and sorted(shuffled[1]) == sorted(lengths)


def test_the_bundled_drafter_trains_from_a_dump_as_it_does_online(tmp_path):
    """Same seeds, same batches: two steps from the dump end where two online steps end (fp16 states)."""
    from fovea.drafter import CORRECTION_PARTS, Drafter
    from fovea.training.drafter_cli import main as drafter_main

    cfg = run_config.from_mapping({"target": {"path": str(DEFAULT_TARGET_DIR)},
                                   "data": {"dumps": str(tmp_path / "d"), "samples": 4, "seed_offset": 5_000_000}})
    from fovea.training.dump import load_target_for
    dump(load_target_for(cfg), cfg, str(DEFAULT_TARGET_DIR), progress=False)
    common = ["--total-steps", "2", "--batch-size", "2", "--warmup", "1", "--lr", "1e-3", "--fovea", "ground_weight=1"]
    for name, extra in (("online", []), ("dumped", ["--dumps", str(tmp_path / "d")])):
        drafter_main([*common, *extra, "--run-dir", str(tmp_path / name / "run"), "--out", str(tmp_path / name / "f"),
                      "--baseline-out", str(tmp_path / name / "b")])
    logs = {name: [json.loads(x) for x in (tmp_path / name / "run" / "log.jsonl").read_text().splitlines()]
            for name in ("online", "dumped")}
    for on, off in zip(logs["online"], logs["dumped"]):
        for key in ("fovea/loss", "no_correction/loss", "fovea/hid1", "fovea/kl2"):
            assert off[key] == pytest.approx(on[key], rel=5e-3), key
    for kind in ("f", "b"):   # Adam steps are ~lr whatever the gradient's size: agree to a few lr
        da, db = (Drafter.from_pretrained(tmp_path / name / kind) for name in ("online", "dumped"))
        a, b = da.state_dict(), db.state_dict()
        # the twin (b) is saved without its correction modules: those are compared only where saved
        saved = [k for k in a if da.correction_weights or not k.startswith(CORRECTION_PARTS)]
        assert saved and max(float((a[k] - b[k]).abs().max()) for k in saved) < 5e-3
    meta = json.loads((tmp_path / "dumped" / "f" / "train_config.json").read_text())
    assert meta["dumps"] == str(tmp_path / "d")


def test_acceptance_by_position_is_conditional_on_reaching_the_position():
    rounds = [Round(0, 3, 8, 0), Round(1, 3, 8, 0), Round(3, 3, 8, 0), Round(2, 2, 6, 0)]
    # position 1: 3 of 4 rounds; position 2: of the 3 that reached it, 2; position 3: of the 1 that
    # accepted 2 and drafted 3 levels (the depth-2 round stops), 1
    assert per_position(rounds) == [0.75, 2 / 3, 1.0]
    # the bench's statistic from accept lengths alone (bonus counted) is the same rule on full-depth rounds
    lengths = [1, 2, 4, 3]
    assert acceptance_by_position(lengths) == [0.75, 2 / 3, 0.5, 0.0]
    assert acceptance_by_position(lengths) == per_position([Round(a - 1, max(lengths), 0, 0) for a in lengths])
    assert acceptance_by_position([1, 1]) == [0.0] and acceptance_by_position([]) == []


def test_the_cost_model_reads_the_committed_profile_and_interpolates_the_verify_curve():
    cost = CostModel.from_profile("assets/results/profile/profile.json")
    prof = json.loads(open("assets/results/profile/profile.json").read())["curves"]
    assert cost.draft_step == pytest.approx(prof["drafter_step_ms"]["1"] / prof["target_forward_ms"]["1"])
    assert cost.verify_cost(1) == pytest.approx(1.0) and cost.verify_cost(16) == pytest.approx(
        prof["target_forward_in_steps"]["16"])
    assert cost.verify_cost(12) == pytest.approx((cost.verify_cost(8) + cost.verify_cost(16)) / 2)
    assert cost.verify_cost(64) > cost.verify_cost(32)      # extended beyond the curve
    r = Round(accepted=3, levels=4, nodes=9, corrected=2)
    assert cost.round_cost(r) == pytest.approx(4 * cost.draft_step + 2 * cost.corrected_extra + cost.verify_cost(9))
    with pytest.raises(ValueError, match="No profile"):
        CostModel.from_profile("nope.json")


def test_rebuild_from_dumps_dumps_each_drafter_steps_own_batches_first(tmp_path):
    from fovea.models.bundled import ASSETS
    from fovea.training import drafter_cli, rebuild

    online = rebuild.plan(DEFAULT_TARGET_DIR, ASSETS, tmp_path, 30_000_000)
    steps = rebuild.with_dumps(online, DEFAULT_TARGET_DIR, tmp_path)
    drafters = [s for s in online if s.command == "drafter"]
    assert len(steps) == len(online) + len(drafters)
    for s in drafters:
        i = [x.name for x in steps].index(s.name)
        dumped, trained = steps[i - 1], steps[i]
        assert dumped.name == f"dump_{s.name}" and dumped.command == "dump"
        cfg = run_config.load(None, list(dumped.argv[1:]))
        args = drafter_cli.build_parser().parse_args(trained.argv)
        assert str(args.dumps) == cfg.data.dumps == str(tmp_path / "dumps" / s.name)
        assert cfg.data.seed_offset == args.seed_offset and cfg.data.samples == args.total_steps * args.batch_size
        assert cfg.target.path == str(DEFAULT_TARGET_DIR) and dumped.minutes > 0


def test_a_shared_dump_is_written_once_and_each_drafter_step_reads_it_in_its_own_order(tmp_path):
    """`rebuild --shared-dump N`: one dump before the first drafter step, seeds after every step's range,
    and every drafter step trains from it with a different --dump-shuffle seed."""
    from fovea.models.bundled import ASSETS
    from fovea.training import drafter_cli, rebuild

    online = rebuild.plan(DEFAULT_TARGET_DIR, ASSETS, tmp_path, 30_000_000)
    steps = rebuild.with_shared_dump(online, DEFAULT_TARGET_DIR, tmp_path, 12_800, 30_000_000)
    assert [s.name for s in steps] == ["dump_shared", *[s.name for s in online]]
    cfg = run_config.load(None, list(steps[0].argv[1:]))
    assert cfg.data.samples == 12_800 and cfg.data.dumps == str(tmp_path / "dumps" / "shared")
    used = [int(dict(zip(s.argv, s.argv[1:]))["--seed-offset"]) for s in online]
    assert cfg.data.seed_offset > max(used)
    orders = []
    for s in steps[1:]:
        if s.command != "drafter":
            assert "--dumps" not in s.argv
            continue
        args = drafter_cli.build_parser().parse_args(s.argv)
        assert str(args.dumps) == cfg.data.dumps
        orders.append(args.dump_shuffle)
    assert len(orders) == 4 and len(set(orders)) == 4
    with pytest.raises(SystemExit):
        rebuild.parse_args(["--dry-run", "--shared-dump", "100", "--from-dumps"])
    with pytest.raises(SystemExit):
        drafter_cli.main(["--dump-shuffle", "1", "--run-dir", str(tmp_path / "r")])   # no --dumps to order


def test_rebuild_scales_only_the_drafter_steps_and_keeps_at_least_fifty():
    from fovea.models.bundled import ASSETS
    from fovea.training import rebuild

    steps = rebuild.plan(DEFAULT_TARGET_DIR, ASSETS, Path("runs/x"), 30_000_000)
    half = rebuild.scaled(steps, 0.5)
    tiny = rebuild.scaled(steps, 0.01)
    for s, h, t in zip(steps, half, tiny):
        if s.command != "drafter":
            assert h == s == t
            continue
        total = int(dict(zip(s.argv, s.argv[1:]))["--total-steps"])
        assert int(dict(zip(h.argv, h.argv[1:]))["--total-steps"]) == round(total / 2)
        assert int(dict(zip(t.argv, t.argv[1:]))["--total-steps"]) == 50
    with pytest.raises(SystemExit):
        rebuild.parse_args(["--dry-run", "--scale-steps", "0"])

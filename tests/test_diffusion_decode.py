"""Diffusion decoding on a tiny random-weight denoiser (the bundled architecture's tiny preset, the
shipped tokenizer): the cached prefix equals the full forward, the schedule's invariants, CVC that
never fires changes nothing, BWEC never touches the final block, and training runs end to end."""
import dataclasses
import json
import statistics

import pytest
import torch

from fovea.bench.diffusion import TASK_NAMES, markdown, measure, replay_cvc, replay_gate, summarise, tune
from fovea.data import make_sample, tuning_seeds
from fovea.diffusion import (CanvasConfig, DiffusionDecodeConfig, DiffusionVLM, GateConfig, LatchConfig,
                             ScheduleConfig, diffusion_generate, load_diffusion)
from fovea.models.bundled import DEFAULT_TARGET_DIR, BundledModelConfig, BundledTarget, build_model, load_tokenizer

LENGTH, BLOCK = 24, 8
BLOCKS = LENGTH // BLOCK


def tiny_llava():
    tok = load_tokenizer(DEFAULT_TARGET_DIR)
    sizes = dataclasses.replace(BundledModelConfig.from_name("tiny"), prompt_order="question_first")
    return build_model(sizes, tok, seed=0), tok


@pytest.fixture(scope="module")
def model():
    llava, tok = tiny_llava()
    return DiffusionVLM(llava, tok, CanvasConfig(length=LENGTH)).eval()


@pytest.fixture(scope="module")
def sample():
    return make_sample(tuning_seeds(1)[0], "scene", "describe")


def config(**latch) -> DiffusionDecodeConfig:
    return DiffusionDecodeConfig("test", ScheduleConfig(block_length=BLOCK), latch=LatchConfig(**latch))


def decode(model, sample, cfg, **kw):
    return diffusion_generate(model, sample.image, sample.question, cfg, task="scene/describe", record=True, **kw)


def test_the_cached_prefix_gives_the_full_forward_logits(model, sample):
    canvas = torch.randint(5, 1000, (LENGTH,))
    cache, last, start = model.prefill(sample.image, sample.question)
    cached = model.denoise(cache, last, start, canvas)
    again = model.denoise(cache, last, start, canvas)                  # the cache is left as it was
    ids = torch.tensor([model.prompt_ids(sample.question)])
    with torch.no_grad():
        full = model(ids, torch.ones_like(ids), model.pixels(sample.image), canvas[None])[0]
    keep = torch.arange(full.shape[-1]) != model.canvas.mask_token_id
    assert torch.allclose(cached[:, keep], full[:, keep], atol=1e-4)
    assert torch.equal(cached, again)


def test_left_padding_leaves_a_row_unchanged(model, sample):
    other = make_sample(tuning_seeds(2)[1], "chart", "value")
    a, b = model.prompt_ids(sample.question), model.prompt_ids(other.question)
    width = max(len(a), len(b)) + 3
    prefix = torch.tensor([[0] * (width - len(a)) + a, [0] * (width - len(b)) + b])
    mask = (torch.arange(width)[None] >= torch.tensor([[width - len(a)], [width - len(b)]])).long()
    canvas = torch.randint(5, 1000, (2, LENGTH))
    pixels = torch.cat([model.pixels(sample.image), model.pixels(other.image)])
    with torch.no_grad():
        both = model(prefix, mask, pixels, canvas)
        alone = model(torch.tensor([a]), torch.ones(1, len(a), dtype=torch.long), pixels[:1], canvas[:1])
    assert torch.allclose(both[0], alone[0], atol=1e-4)


def test_the_full_schedule_commits_one_token_a_step_block_by_block(model, sample):
    result = decode(model, sample, config())
    assert result.nfe == LENGTH and result.stopped_by == "schedule"
    before = [False] * LENGTH
    for st in result.steps:
        new = [i for i in range(LENGTH) if st.committed[i] and not before[i]]
        assert len(new) == 1 and new[0] // BLOCK == st.block == st.step // BLOCK
        before = list(st.committed)
    assert model.canvas.mask_token_id not in result.tokens


def test_cvc_and_bwec_that_never_fire_give_exactly_the_full_schedule(model, sample):
    """Thresholds at 1 (a masked position's top-1 probability never reaches it) and more stable steps
    than the canvas has steps (a fully committed span counts as settled, so tau_c = 1 alone may fire)."""
    full = decode(model, sample, config())
    never = decode(model, sample, config(cvc=True, tau_c=1.0, stable_steps=LENGTH + 1, bwec=True, tau_b=1.0))
    assert never.tokens == full.tokens and never.nfe == full.nfe and never.text == full.text
    assert {st.rule for st in never.steps} == {"schedule"}


@pytest.mark.parametrize("task", ["chart/value", "scene/describe", "ocr/top"])
def test_cvc_at_tau_one_fires_only_on_a_committed_span_that_the_full_schedule_keeps(model, task):
    s = make_sample(tuning_seeds(1)[0], *task.split("/"))
    full = diffusion_generate(model, s.image, s.question, config(), task=task, record=True)
    cvc = diffusion_generate(model, s.image, s.question, config(cvc=True, tau_c=1.0, stable_steps=1), task=task,
                             record=True)
    if cvc.stopped_by == "cvc":
        lo, hi = cvc.steps[-1].span
        assert all(cvc.steps[-2].committed[lo:hi]) and cvc.tokens[lo:hi] == full.tokens[lo:hi]
    assert cvc.nfe <= full.nfe


def test_bwec_never_touches_the_final_block(model, sample):
    result = decode(model, sample, config(bwec=True, tau_b=0.0))     # the local rule always holds
    bwec = [st for st in result.steps if st.rule == "bwec"]
    assert [st.block for st in bwec] == list(range(BLOCKS - 1))
    assert result.nfe == (BLOCKS - 1) + BLOCK                           # the final block: one token a step
    assert all(st.rule == "schedule" for st in result.steps if st.block == BLOCKS - 1)


def test_bwec_acts_only_where_it_commits_more_than_the_schedule(model, sample):
    """Blocks of 1 (or a block's last open position) leave BWEC nothing to commit early: such steps are
    the schedule's, and the decode is exactly LATCH without BWEC's."""
    ones = DiffusionDecodeConfig("ones", ScheduleConfig(block_length=1), latch=LatchConfig(bwec=True, tau_b=0.0))
    result = decode(model, sample, ones)
    assert result.nfe == LENGTH and {st.rule for st in result.steps} == {"schedule"}
    plain = decode(model, sample, DiffusionDecodeConfig("plain", ScheduleConfig(block_length=1)))
    assert result.tokens == plain.tokens


def test_cvc_that_always_holds_stops_at_once_and_fills_with_the_argmax(model, sample):
    result = decode(model, sample, config(cvc=True, tau_c=0.0, stable_steps=1))
    assert result.nfe == 1 and result.stopped_by == "cvc"
    assert result.tokens == result.steps[0].prediction


def test_the_gate_and_threshold_unmasking_at_zero(model, sample):
    gate = DiffusionDecodeConfig("g", ScheduleConfig(block_length=BLOCK), gate=GateConfig(threshold=0.0))
    assert decode(model, sample, gate).nfe == 1
    fast = DiffusionDecodeConfig("t", ScheduleConfig(block_length=BLOCK, unmask_threshold=0.0))
    assert decode(model, sample, fast).nfe == BLOCKS                   # a whole block a step


@pytest.mark.parametrize("tau_c,stable", [(0.0, 1), (0.0, 3), (1.0, 1), (1.0, 2), (0.5, 2)])
def test_replaying_cvc_on_a_full_trajectory_matches_a_real_decode(model, sample, tau_c, stable):
    full = decode(model, sample, config())
    real = decode(model, sample, config(cvc=True, tau_c=tau_c, stable_steps=stable))
    assert replay_cvc(full.steps, tau_c, stable) == (real.nfe, real.tokens)


@pytest.mark.parametrize("threshold", [0.0, 0.3, 0.6, 1.0])
def test_replaying_the_gate_on_a_full_trajectory_matches_a_real_decode(model, sample, threshold):
    full = decode(model, sample, config())
    real = decode(model, sample, DiffusionDecodeConfig("gate", ScheduleConfig(block_length=BLOCK),
                                                       gate=GateConfig(threshold=threshold)))
    assert replay_gate(full.steps, threshold) == (real.nfe, real.tokens)


def test_the_bench_tabulates_every_method(model):
    samples = [make_sample(s, "chart", "value") for s in tuning_seeds(2)]
    methods = ["full", "latch", "autoregressive"]
    rows = measure(model, samples, methods, target=BundledTarget(model.llava, model.tokenizer))
    summary = summarise(rows, methods)
    assert summary["full"]["all"]["n"] == 2 and summary["full"]["all"]["nfe"] == LENGTH
    assert summary["latch"]["chart/value"]["speedup"] > 0
    assert summary["autoregressive"]["all"]["nfe"] <= LENGTH and "speedup_vs_autoregressive" in summary["full"]["all"]
    assert "chart/value" in markdown(summary, {"n_per_task": 2, "model": "tiny", "command": "test"})


def test_tune_sweeps_the_block_length_then_replays_cvc_at_the_chosen_one(model):
    result = tune(model, 1, blocks=(BLOCK, LENGTH))
    assert set(result["block_accuracy"]) == {BLOCK, LENGTH}
    best = max(result["block_accuracy"].values())
    assert result["block_accuracy"][result["block_length"]] == best
    assert result["block_length"] == max(b for b, a in result["block_accuracy"].items() if a == best)
    assert statistics.mean(result["full_accuracy"].values()) == pytest.approx(best)
    assert set(result["full_accuracy"]) == set(TASK_NAMES) and result["full_nfe"] == LENGTH
    assert len(result["grid"]) == 24 and all(1 <= g["nfe"] <= LENGTH for g in result["grid"].values())
    assert result["chosen"] is not None or (result["bwec"] == {} and result["chosen_tau_b"] is None)
    gate_nfe = {g["threshold"]: g["nfe"] for g in result["gate"].values()}
    latch = ([g for g in result["bwec"].values() if g["tau_b"] == result["chosen_tau_b"]] or [result["chosen"]])[0]
    assert latch is None and result["chosen_gate"] is None or abs(gate_nfe[result["chosen_gate"]] - latch["nfe"]) == min(
        abs(n - latch["nfe"]) for n in gate_nfe.values())
    assert result["chosen"] is None or result["chosen"]["nfe"] == min(
        g["nfe"] for g in result["grid"].values()
        if all(g[t] >= result["full_accuracy"][t] - 0.02 for t in TASK_NAMES))


def test_on_blocks_of_one_the_tune_decodes_only_the_largest_tau_b(model):
    result = tune(model, 1, blocks=(1,), tau_bs=(0.5, 0.9))
    assert result["block_length"] == 1 and result["full_nfe"] == LENGTH
    assert result["chosen"] is None or (list(result["bwec"]) == ["tau_b=0.9"] and result["chosen_tau_b"] in (None, 0.9))


def test_bwec_tuning_decodes_latch_at_each_tau_b(model):
    from fovea.bench.diffusion import tune_bwec

    samples = [make_sample(s, "scene", "colour") for s in tuning_seeds(2)]
    out = tune_bwec(model, samples, BLOCK, {"tau_c": 0.5, "stable_steps": 1}, (0.5, 1.0))
    assert set(out) == {"tau_b=0.5", "tau_b=1.0"} and [g["tau_b"] for g in out.values()] == [0.5, 1.0]
    for g in out.values():
        assert 1 <= g["nfe"] <= LENGTH and 0.0 <= g["scene/colour"] <= 1.0 and "chart/value" not in g


def test_training_runs_resumes_and_exports_a_loadable_model(tmp_path):
    from fovea.training.diffusion import main

    llava, tok = tiny_llava()
    llava.save_pretrained(str(tmp_path / "target"))
    tok.save_pretrained(str(tmp_path / "target"))
    common = ["--init-from", str(tmp_path / "target"), "--run-dir", str(tmp_path / "run"), "--out",
              str(tmp_path / "out"), "--batch-size", "2", "--canvas-length", "16", "--eval-n", "0", "--threads", "1",
              "--probe-every", "2", "--save-every", "1"]
    main(common + ["--total-steps", "2"])
    main(common + ["--total-steps", "3"])
    log = [json.loads(line) for line in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in log] == [1, 2, 3] and all(r["loss"] > 0 for r in log)
    loaded = load_diffusion(tmp_path / "out")
    assert loaded.canvas.length == 16
    # continuing the export: its steps go on (so do the data seeds), with a new warm-up over the added steps
    more = ["--init-from", str(tmp_path / "out"), "--run-dir", str(tmp_path / "run2"), "--out", str(tmp_path / "out2"),
            "--batch-size", "2", "--canvas-length", "16", "--eval-n", "0", "--threads", "1", "--probe-every", "9",
            "--warmup", "2", "--focus-tasks", "chart/value", "--focus-share", "1.0"]
    main(more + ["--total-steps", "5"])
    log2 = [json.loads(line) for line in (tmp_path / "run2" / "log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in log2] == [4, 5] and log2[0]["lr"] == log2[1]["lr"] / 2   # a new warm-up
    assert json.loads((tmp_path / "out2" / "train_config.json").read_text())["steps"] == 5
    with pytest.raises(SystemExit, match="canvas of 16"):
        main(more[:-4] + ["--canvas-length", "32", "--total-steps", "6"])
    with pytest.raises(SystemExit, match="ends at step 5"):
        main(more[:1] + [str(tmp_path / "out2"), "--run-dir", str(tmp_path / "run3")] + more[4:] + ["--total-steps", "5"])
    s = make_sample(tuning_seeds(1)[0], "ocr", "top")
    assert diffusion_generate(loaded, s.image, s.question, DiffusionDecodeConfig.from_name("latch"),
                              task="ocr/top").nfe <= 16

    from fovea.bench.diffusion import main as bench
    from fovea.bench.report import read_rows

    bench(["--model", str(tmp_path / "out"), "--n", "1", "--methods", "full", "latch", "--threads", "1",
           "--out", str(tmp_path / "bench")])
    results = json.loads((tmp_path / "bench" / "results.json").read_text())
    rows = read_rows(tmp_path / "bench")
    assert results["rows_file"] == "rows.jsonl.gz" and len(rows) == 2 * len(TASK_NAMES)
    assert {r["method"] for r in rows} == {"full", "latch"} and all(r["nfe"] == 16 for r in rows if r["method"] == "full")
    assert results["summary"]["full"]["all"]["n"] == len(TASK_NAMES)


def test_focus_tasks_steer_a_share_of_the_training_batch():
    from fovea.training.diffusion import step_samples

    focus = [("chart", "value"), ("scene", "count")]
    every = step_samples(3, 40, focus, 1.0)
    assert {(s.family, s.task) for s in every} == set(focus)
    half = step_samples(3, 40, focus, 0.5)
    steered = sum((s.family, s.task) in focus for s in half)
    assert 20 <= steered < 40                              # about half steered, plus the plain draws that land there
    plain = step_samples(3, 40)
    assert [s.question for s in step_samples(3, 40, focus, 0.0)] == [s.question for s in plain]
    assert [s.question for s in half if (s.family, s.task) not in focus] == \
        [p.question for s, p in zip(half, plain) if (s.family, s.task) not in focus]


def test_a_bad_mask_token_is_refused():
    llava, tok = tiny_llava()
    with pytest.raises(ValueError, match="mask token"):
        DiffusionVLM(llava, tok, CanvasConfig(mask_token_id=7))


class ScriptedDenoiser:
    """A stand-in denoiser whose every step puts probability `p` on a fixed canvas (a sample's gold
    answer): the schedule then commits the gold answer, and CVC's firing can be checked exactly."""

    def __init__(self, model, gold: list[int], p: float):
        self.canvas, self.tokenizer, self.token_text = model.canvas, model.tokenizer, model.token_text
        self.eos_id, self.device = model.eos_id, torch.device("cpu")
        vocab = len(model.tokenizer)
        rest = (1 - p) / (vocab - 1)
        self.logits = torch.full((len(gold), vocab), rest).scatter_(1, torch.tensor(gold)[:, None], p).log()

    def prefill(self, image, question):
        return None, 0, 0

    def denoise(self, cache, last_id, start, canvas):
        return self.logits.clone()


def test_cvc_at_tau_one_stops_once_the_span_is_committed_and_keeps_the_full_answer(model):
    from fovea.data.scoring import answer_correct
    from fovea.diffusion import answer_canvas

    s = make_sample(tuning_seeds(1)[0], "scene", "colour")
    ids = model.tokenizer(" " + s.answer, add_special_tokens=False)["input_ids"]
    scripted = ScriptedDenoiser(model, answer_canvas(ids, LENGTH, model.eos_id), p=0.6)
    full = diffusion_generate(scripted, s.image, s.question, config(), task="scene/colour", record=True)
    cvc = diffusion_generate(scripted, s.image, s.question, config(cvc=True, tau_c=1.0, stable_steps=2),
                             task="scene/colour", record=True)
    lo, hi = cvc.steps[-1].span
    assert answer_correct(s, full.text) and answer_correct(s, cvc.text)
    assert cvc.stopped_by == "cvc" and cvc.nfe < full.nfe
    assert all(cvc.steps[-2].committed[lo:hi]) and not all(cvc.steps[-3].committed[lo:hi])
    assert replay_cvc(full.steps, 1.0, 2) == (cvc.nfe, cvc.tokens)

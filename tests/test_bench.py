"""Smoke test of `python -m fovea.bench --quick` on the tiny random model: the output files exist
and results.json has the expected schema. Timings and speedups are not checked (random weights)."""
import json

from fovea.analysis import ANALYSES, CONTROL_MODES
import pytest

from fovea.bench import PRESETS, SWEEP_DRAFTERS, TREE_SHAPES, main, shape_name
from fovea.data import FAMILIES

METRICS = {"n", "speedup_ratio_of_medians", "speedup_median_per_question", "tau_with_bonus", "tau_without_bonus",
           "tokens_per_s", "draft_ms", "verify_ms", "commit_ms", "lossless", "acceptance_by_position"}


def test_quick_preset_writes_results_with_the_expected_schema(tmp_path):
    main(["--quick", "--tiny-random", "--out", str(tmp_path)])
    for name in ["results.json", "results.md", "speedup.html", "visual_budget.html", "focus_drift.html",
                 "grounding.html", "k_distribution.html"]:
        assert (tmp_path / name).is_file(), name
    data = json.loads((tmp_path / "results.json").read_text())
    assert data["methods"] == PRESETS["quick"]["methods"]
    assert set(data["families"]) == {*FAMILIES, "all"} == set(data["summary"])
    for fam, per in data["summary"].items():
        assert set(per) == set(data["methods"])
        for m, metrics in per.items():
            assert set(metrics) == METRICS, (fam, m)
            assert metrics["lossless"] is True, (fam, m)     # greedy speculative == greedy autoregressive
    from fovea.bench.report import read_rows

    rows = read_rows(tmp_path)                           # the per-question rows, gzipped beside results.json
    assert data["rows_file"] == "rows.jsonl.gz" and {r["method"] for r in rows} == set(data["methods"])
    assert len(rows) == data["summary"]["all"][data["methods"][0]]["n"] * len(data["methods"])
    analyses = data["analyses"]
    assert set(analyses) == {*ANALYSES, "meta"}
    budget = analyses["visual_budget"]
    assert budget["budgets"] == ["0", "25", "50", "75", "100"] and budget["decode_matches_autoregressive"] is True
    assert {"preferred_share", "mean_accept_length", "early", "late", "per_family", "states"} <= set(budget)
    assert {"mean", "early", "late", "n_pairs", "per_family"} <= set(analyses["focus_drift"])
    assert set(analyses["grounding"]["modes"]) == {"cumulative", *CONTROL_MODES}
    assert "all" in analyses["k_distribution"]["per_family"]
    assert "## Analyses" in (tmp_path / "results.md").read_text()
    gains = data["correction_gain"]      # FOVEA over its ablation, for both drafter contexts
    assert [(g["fovea"], g["ablation"]) for g in gains] == [("fovea", "no_correction"),
                                                           ("fovea_text", "no_correction_text")]
    for g in gains:
        s = data["summary"]["all"]
        assert abs(g["gain"] - s[g["fovea"]]["speedup_ratio_of_medians"]
                   / s[g["ablation"]]["speedup_ratio_of_medians"]) < 1e-9
    assert "What the correction buys" in (tmp_path / "results.md").read_text()


def test_transformers_baselines_are_lossless_and_ranked(tmp_path):
    """The transformers alternatives (prompt lookup, an assistant LM) run through `generate()` on the
    same target, give the autoregressive tokens, and the ranking covers every trained drafter run."""
    main(["--tiny-random", "--n", "3", "--max-new-tokens", "12", "--no-analyses", "--out", str(tmp_path),
          "--methods", "autoregressive", "fovea", "no_correction", "hf_prompt_lookup", "hf_assisted"])
    data = json.loads((tmp_path / "results.json").read_text())
    for m in ("hf_prompt_lookup", "hf_assisted"):
        assert data["summary"]["all"][m]["lossless"] is True, m
    assert {r["method"] for r in data["ranking"]} == {"fovea", "no_correction", "hf_assisted"}
    speeds = [r["mean_speedup"] for r in data["ranking"]]
    assert speeds == sorted(speeds, reverse=True)
    assert "FOVEA ranks" in (tmp_path / "results.md").read_text()


def test_tree_sweep_compares_every_shape_on_tuning_questions(tmp_path):
    """--tree-sweep runs FOVEA and its ablation under every TREE_SHAPES entry, side by side with
    autoregressive decoding on the tuning seeds, all lossless, and names the best shape."""
    main(["--tree-sweep", "--tiny-random", "--n", "2", "--max-new-tokens", "6", "--out", str(tmp_path)])
    data = json.loads((tmp_path / "results.json").read_text())
    names = {shape_name(d, s) for s in TREE_SHAPES for d in SWEEP_DRAFTERS}
    assert set(data["summary"]["all"]) == names | {"autoregressive"}
    assert all(m["lossless"] for m in data["summary"]["all"].values())
    best = data["best"]
    assert (best["depth"], best["top_k"], best["total_tokens"]) in TREE_SHAPES
    pooled = data["summary"]["all"]
    want = max(sum(pooled[shape_name(d, s)]["speedup_ratio_of_medians"] for d in SWEEP_DRAFTERS) for s in TREE_SHAPES)
    assert abs(best["mean_speedup"] * len(SWEEP_DRAFTERS) - want) < 1e-9
    md = (tmp_path / "results.md").read_text()
    assert md.count("\n| ") == len(TREE_SHAPES) + 1 and "tuning questions" in md
    with pytest.raises(SystemExit):
        main(["--tree-sweep", "--tiny-random", "--methods", "fovea"])


@pytest.mark.parametrize("kind", ["trigger", "retrieval", "depth", "controls", "stop"])
def test_pair_sweeps_compare_decode_time_variants_beside_the_twin_on_tuning_questions(tmp_path, kind):
    """--trigger-sweep / --retrieval-sweep / --depth-sweep / --stop-sweep run, per drafter context the pipeline
    has, the twin, FOVEA as the paper runs it and FOVEA@label for each variant (trigger thresholds with the
    correction at every depth; rho and the K bounds; the correction's depth limit; dynamic depth, the twin
    too), all lossless, and name
    the best."""
    from fovea.bench.runner import PAIR_SWEEPS

    labels = [label for label, _ in PAIR_SWEEPS[kind][0]]
    main([f"--{kind}-sweep", "--tiny-random", "--n", "2", "--max-new-tokens", "6", "--out", str(tmp_path)])
    data = json.loads((tmp_path / "results.json").read_text())
    pairs = [tuple(p) for p in data["meta"]["pairs"]]
    assert ("fovea", "no_correction") in pairs and data["meta"]["sweep"] == kind
    swept = (lambda f, t: (f, t)) if PAIR_SWEEPS[kind][3] else (lambda f, t: (f,))   # stop: the twins too
    want = {"autoregressive"} | {n for f, t in pairs for n in (f, t, *[f"{d}@{x}" for d in swept(f, t) for x in labels])}
    assert set(data["summary"]["all"]) == want and all(m["lossless"] for m in data["summary"]["all"].values())
    for f, t in pairs:
        assert all(data["best"][d]["variant"] in labels for d in swept(f, t))
    assert "tuning questions" in (tmp_path / "results.md").read_text()


def test_bench_runs_one_sweep_or_profile_at_a_time():
    with pytest.raises(SystemExit):
        main(["--trigger-sweep", "--retrieval-sweep", "--tiny-random"])


def test_profile_splits_rounds_and_writes_cost_curves(tmp_path):
    """--profile writes the per-stage split, the tracing overhead and the cost curves: a target forward
    per tree size (n = 1 is an autoregressive step) and a drafter step per width, each timed."""
    from fovea.bench.profile import CURVE_NODES, CURVE_WIDTHS

    main(["--profile", "--tiny-random", "--n", "2", "--max-new-tokens", "6", "--out", str(tmp_path)])
    data = json.loads((tmp_path / "profile.json").read_text())
    curves = data["curves"]
    tree_nodes = data["meta"]["tree"]["total_tokens"] + 1      # the profiled tree's own size is on the curve
    assert list(curves["target_forward_ms"]) == [str(n) for n in sorted({*CURVE_NODES, tree_nodes})]
    assert list(curves["drafter_step_ms"]) == [str(w) for w in CURVE_WIDTHS]
    assert all(v > 0 for v in [*curves["target_forward_ms"].values(), *curves["drafter_step_ms"].values()])
    assert curves["target_forward_in_steps"]["1"] == 1.0 and data["compile"] is None
    assert data["profile"]["rounds"] > 0 and set(data["profile"]["per_round_ms"]) >= {"verify", "commit/drafter"}
    md = (tmp_path / "profile.md").read_text()
    assert "Cost curves" in md and "With a free drafter" in md and "torch.compile" not in md and "nan" not in md
    chain = curves["chain_proposal_ms"]
    assert chain["levels"] == 16 and chain["chain_path"] > 0 and chain["level_loop"] > 0
    assert "16-level chain proposal" in md


def test_cost_split_times_each_fovea_setting_beside_its_twin_and_bounds_a_free_correction(tmp_path):
    """--cost-split: every pair of COST_PAIRS decoded interleaved with its own clock; the twins run no
    correction stage, the triggered settings lap their trigger, and taking FOVEA's own stages as free can
    only make it faster."""
    from fovea.bench.profile import COST_PAIRS, CORRECTION_STAGES

    main(["--cost-split", "--tiny-random", "--n", "2", "--max-new-tokens", "6", "--out", str(tmp_path)])
    split = json.loads((tmp_path / "results.json").read_text())["split"]
    assert [(p["fovea"], p["twin"]) for p in split["pairs"]] == list(COST_PAIRS)
    methods = split["methods"]
    for fovea, twin in COST_PAIRS:
        assert methods[twin]["correction_ms_per_round"] == 0 and methods[twin]["corrected_levels_per_round"] == 0
        assert methods[fovea]["correction_ms_per_round"] > 0 and methods[fovea]["corrected_levels_per_round"] > 0
    for name in ("fovea_triggered", "fovea_text_triggered"):   # an untrained head is unsure everywhere
        assert methods[name]["per_round_ms"]["draft/trigger"] > 0
    for m in methods.values():
        assert m["rounds"] > 0 and abs(sum(m["per_round_ms"].values()) - m["round_ms"]) < 1e-6
        assert m["decode_ms_per_token"] == pytest.approx(m["round_ms"] * m["rounds"] / m["tokens"])
    for p in split["pairs"]:
        assert p["speed_ratio_free_correction"] > p["speed_ratio"] > 0
        assert set(p["families"]) == set(split["families"]) and len(split["families"]) == 2   # 2 questions
    fams = split["per_family"]                             # the pooled rounds are the families' rounds
    assert all(sum(fams[f][m]["rounds"] for f in fams) == methods[m]["rounds"] for m in methods)
    assert set(CORRECTION_STAGES) >= {"draft/retrieval", "draft/correction"}
    assert "with a free correction" in (tmp_path / "results.md").read_text()


def test_lever_check_times_threads_and_int8_weights_end_to_end(tmp_path):
    """--lever-check (part of --profile) times autoregressive decoding and the no-correction drafter at
    2 and 1 threads and with int8 block weights, and restores the thread count; the int8 copy keeps the
    original drafter fp32 and its decoding lossless."""
    import torch

    from fovea.bench.profile import int8_drafter
    from fovea.config import FoveaConfig
    from fovea.decoding import fovea, run
    from fovea.pipeline import FoveaPipeline

    threads = torch.get_num_threads()
    main(["--profile", "--lever-check", "--tiny-random", "--n", "2", "--max-new-tokens", "6", "--out", str(tmp_path)])
    assert torch.get_num_threads() == threads
    levers = json.loads((tmp_path / "profile.json").read_text())["levers"]
    assert list(levers["settings"]) == ["2 threads", "1 thread", "int8, 2 threads"]
    assert all(r["speedup"] > 0 and r["tau_with_bonus"] >= 1 for r in levers["settings"].values())
    assert "Levers on the per-level cost" in (tmp_path / "profile.md").read_text()
    pipe = FoveaPipeline.tiny_random(seed=0)
    q = int8_drafter(pipe.drafters["no_correction"])
    assert isinstance(pipe.drafters["no_correction"].blocks[0].o, torch.nn.Linear)
    p = pipe.target.prepare(*pipe.random_example("scene", 3))
    cfg = FoveaConfig().replace(decoding=dict(max_new_tokens=12), correction=dict(enabled=False))
    assert run(pipe.target, fovea(q), p, cfg).tokens == run(pipe.target, None, p, cfg).tokens
    with pytest.raises(SystemExit):
        main(["--lever-check", "--tiny-random"])


def test_extra_drafters_are_named_folders(tmp_path, capsys):
    from fovea.bench.cli import parse_args

    args = parse_args(["--drafters", f"fovea_text={tmp_path}", f"wide={tmp_path}", "--methods", "fovea_text", "wide"])
    assert args.drafters == {"fovea_text": tmp_path, "wide": tmp_path}
    with pytest.raises(SystemExit):
        parse_args(["--methods", "wide"])                        # a drafter NAME only with --drafters
    assert "unknown method(s) ['wide']" in capsys.readouterr().err
    assert parse_args(["--stop-below", "0.1"]).stop_below == 0.1
    with pytest.raises(SystemExit):
        parse_args(["--stop-below", "1.5"])
    assert "--stop-below must be in [0, 1)" in capsys.readouterr().err
    for bad, says in (("fovea_text", "NAME=FOLDER"), ("=x", "NAME=FOLDER"),
                      (f"fovea_text={tmp_path / 'missing'}", "is not a folder")):
        with pytest.raises(SystemExit):
            parse_args(["--drafters", bad])
        assert says in capsys.readouterr().err


def test_a_drafter_named_on_the_command_line_decodes_with_its_trained_settings(tiny_pipeline):
    from fovea.bench.cli import drafter_methods
    from fovea.config import CorrectionConfig
    from fovea.drafter import Drafter

    base = tiny_pipeline.drafters["fovea"]
    pipe = type(tiny_pipeline)(tiny_pipeline.target, {
        "fovea": base, "wide_prop": Drafter(base.cfg, CorrectionConfig(propagate=True, max_depth=2, trigger=0.7))})
    table = drafter_methods(pipe, ["fovea", "wide_prop"])
    assert list(table) == ["wide_prop"]                  # "fovea" keeps its built-in method
    assert table["wide_prop"].drafter == "wide_prop"
    assert table["wide_prop"].overrides["correction"] | {} == {"enabled": True, "propagate": True, "max_depth": 2,
                                                               "use_gate": True, "trigger": 0.7}


def test_ranking_counts_drafters_named_on_the_command_line_and_leaves_out_untrained_methods():
    from fovea.bench.stats import ranking

    summary = {fam: {"autoregressive": {"speedup_ratio_of_medians": 1.0},
                     "prompt_lookup": {"speedup_ratio_of_medians": 1.5},
                     "fovea": {"speedup_ratio_of_medians": 1.2},
                     "my_drafter": {"speedup_ratio_of_medians": 1.3}} for fam in ("scene", "ocr")}
    got = ranking(summary, ["autoregressive", "prompt_lookup", "fovea", "my_drafter"])
    assert [r["method"] for r in got] == ["my_drafter", "fovea"]


def test_acceptance_by_position_is_the_share_accepted_of_the_rounds_that_reached_it():
    from fovea.bench.report import _acceptance_table
    from fovea.bench.stats import acceptance_by_position

    # accept lengths count the bonus: draft tokens accepted per round are 0, 1, 2, 2, 0
    rates = acceptance_by_position([1, 2, 3, 3, 1])
    assert rates == [3 / 5, 2 / 3, 0.0]
    assert acceptance_by_position([1, 1]) == [0.0] and acceptance_by_position([]) == []
    table = _acceptance_table({"fovea": {"acceptance_by_position": rates}, "autoregressive": {}},
                              ["autoregressive", "fovea"], positions=4)
    assert "| fovea | 0.60 | 0.67 | 0.00 | - |" in table


def test_tree_sweep_shapes_are_parsed_and_checked_against_the_tree_ranges(capsys):
    from fovea.bench.cli import parse_args
    from fovea.bench.methods import shape_name, tree_sweep_methods

    args = parse_args(["--tree-sweep", "--shapes", "13,1,13", "9,2,16"])
    assert args.shapes == [(13, 1, 13), (9, 2, 16)]
    methods = tree_sweep_methods(tuple(args.shapes))
    assert len(methods) == 1 + 2 * 2 and shape_name("fovea", (13, 1, 13)) in methods
    assert parse_args(["--tree", "16,1,16"]).tree == (16, 1, 16) and parse_args([]).tree is None
    with pytest.raises(SystemExit):
        parse_args(["--tree", "16,1"])
    assert "DEPTH,TOP_K,NODES" in capsys.readouterr().err
    for bad, says in (("13,1", "DEPTH,TOP_K,NODES"), ("17,1,17", "depth must be"), ("9,0,9", "top_k must be")):
        with pytest.raises(SystemExit):
            parse_args(["--tree-sweep", "--shapes", bad])
        assert says in capsys.readouterr().err


def test_repeats_time_every_question_several_times_and_keep_the_median(tmp_path, capsys):
    """`--repeats 3`: each method decodes each question three times (the tokens are the same each time),
    and a row's wall time is the median of its three timings, all of them kept beside it."""
    import statistics

    from fovea.bench.cli import parse_args
    from fovea.bench.report import read_rows

    main(["--tiny-random", "--n", "2", "--max-new-tokens", "6", "--no-analyses", "--repeats", "3",
          "--methods", "autoregressive", "fovea", "--out", str(tmp_path)])
    data = json.loads((tmp_path / "results.json").read_text())
    assert data["meta"]["repeats"] == 3 and data["summary"]["all"]["fovea"]["lossless"] is True
    rows = read_rows(tmp_path)
    assert len(rows) == 2 * 2
    for r in rows:
        assert len(r["walls"]) == 3 and r["wall_s"] == statistics.median(r["walls"]) and r["identical_to_ar"]
    assert "each question timed 3 times per method" in (tmp_path / "results.md").read_text()
    with pytest.raises(SystemExit):
        parse_args(["--repeats", "0"])
    assert "--repeats must be >= 1" in capsys.readouterr().err


def test_trigger_sets_each_contexts_triggered_method_for_the_run(capsys):
    from fovea.bench.cli import parse_args, with_triggers
    from fovea.methods import METHODS, TRIGGER

    args = parse_args(["--trigger", "text=0.8"])
    assert args.trigger == {"text": 0.8}
    table = with_triggers(METHODS, args.trigger)
    assert table["fovea_text_triggered"].overrides["correction"] == {"max_depth": METHODS["fovea_text_triggered"]
                                                                     .overrides["correction"]["max_depth"], "trigger": 0.8}
    assert table["fovea_triggered"].overrides["correction"]["trigger"] == TRIGGER          # the other context's as shipped
    assert {n for n in METHODS if table[n] != METHODS[n]} == {"fovea_text_triggered"}
    from fovea.bench.methods import STOP_PAIRS, STOP_VARIANTS, pair_sweep_methods

    swept = pair_sweep_methods(STOP_VARIANTS, STOP_PAIRS, True, table)      # the sweeps build on the same table
    assert swept["fovea_text_triggered@stop0.5"].overrides == {"correction": table["fovea_text_triggered"]
                                                               .overrides["correction"], "tree": {"stop_below": 0.5}}
    for bad, says in (("text", "CONTEXT=T"), ("nope=0.5", "CONTEXT=T"), ("full=x", "not a number"), ("full=0", "(0, 1]")):
        with pytest.raises(SystemExit):
            parse_args(["--trigger", bad])
        assert says in capsys.readouterr().err

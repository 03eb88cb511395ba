"""The accumulator folds the one record stream (prefill, rounds or steps) into a run's figures,
and tree records read their tensors as lists; checked on hand-made records and on a real decode."""
import pickle

import pytest
import torch

from fovea.config import FoveaConfig
from fovea.decoding import fovea, generate
from fovea.trace import Accumulator, IterationTrace, NodeRetrieval, PrefillTrace, RetrievalLog, StepTrace


def _round(i, accepted, emitted, root_indices=None, ms=(1.0, 2.0, 0.5), finish=None):
    retrieval = {} if root_indices is None else {0: NodeRetrieval(list(root_indices), [1 / len(root_indices)]
                                                                  * len(root_indices), len(root_indices), 0.5)}
    n = 1 + len(accepted) + 1                      # root, the accepted chain, one rejected sibling
    parents = [-1] + list(range(len(accepted))) + [0]
    return IterationTrace(i, list(range(100, 100 + n)), parents, [0] * n, [0.0] * n, retrieval, accepted, None,
                          emitted, emitted[-1], *ms, finish)


def test_accumulator_folds_prefill_and_rounds():
    acc = Accumulator("fovea")
    acc.add(PrefillTrace(7, ms=4.0))
    acc.add(_round(0, [1, 2], [11, 12, 13], root_indices=range(16)))
    acc.add(_round(1, [], [14], root_indices=range(8, 24), finish="eos"))
    assert acc.tokens == [7, 11, 12, 13, 14]
    assert acc.accept_lengths == [3, 1] and acc.mean_accept_length == 2.0
    assert acc.target_forwards == 3 and acc.finish_reason == "eos" and acc.done
    assert acc.wall_s == pytest.approx((4.0 + 3.5 + 3.5) / 1e3)
    assert acc.tokens_per_s == pytest.approx(5 / acc.wall_s)
    assert acc.focus_drift() == [pytest.approx(1 - 8 / 24)]          # top-16 sets {0..15} vs {8..23}
    assert [(s.iteration, s.node) for s in acc.focus_trajectory()] == [(0, 0), (1, 0)]
    result = acc.result("text")
    assert (result.tokens, result.target_forwards, result.finish_reason) == ([7, 11, 12, 13, 14], 3, "eos")
    assert result.iterations == acc.rounds and result.text == "text"


def test_accumulator_folds_autoregressive_steps_with_no_rounds():
    acc = Accumulator("autoregressive").extend([PrefillTrace(1, 2.0), StepTrace(0, 5, 1.0), StepTrace(1, 6, 1.0, "length")])
    assert acc.tokens == [1, 5, 6] and acc.accept_lengths == [1, 1] and acc.rounds == []
    assert acc.focus_trajectory() == [] and acc.focus_drift() == [] and acc.finish_reason == "length"
    assert acc.result().iterations == acc.steps


def test_round_reads_tensors_as_lists_and_derives_rejected_and_ancestry():
    rec = IterationTrace(0, torch.tensor([9, 8, 7]), torch.tensor([-1, 0, 1]), torch.tensor([0, 1, 2]),
                         torch.tensor([0.0, -0.5, -1.0]), {}, [1], None, [8, 3], 3)
    assert rec.tokens == [9, 8, 7] and rec.parents == [-1, 0, 1] and rec.rejected == [2]
    assert rec.path_to(2) == [0, 1, 2] and rec.ms == 0.0
    clone = pickle.loads(pickle.dumps(rec))
    assert clone.tokens == [9, 8, 7]


def test_retrieval_log_converts_on_read_and_renumbers():
    class Got:                                    # what the retriever returns, two states of width 3
        indices = torch.tensor([[4, 2, -1], [1, 0, 3]])
        weights = torch.tensor([[0.6, 0.4, 0.0], [0.5, 0.3, 0.2]])
        k = torch.tensor([2, 3])
    log = RetrievalLog()
    log.add(torch.tensor([1, 2]), Got(), torch.tensor([0.25, 0.75]))
    log.renumber(torch.tensor([0, 2]), 3)          # node 1 was pruned, node 2 became node 1
    assert list(log) == [1] and log[1] == NodeRetrieval([1, 0, 3], pytest.approx([0.5, 0.3, 0.2]), 3, 0.75)


def test_generate_streams_a_prefill_record_then_rounds_that_fold_to_the_output(tiny_pipeline):
    pipe = tiny_pipeline
    cfg = FoveaConfig().replace(decoding={"max_new_tokens": 10})
    prompt = pipe.target.prepare(*pipe.random_example("scene", 3))
    records = list(generate(pipe.target, fovea(pipe.drafters["fovea"]), prompt, cfg))
    assert isinstance(records[0], PrefillTrace) and all(isinstance(r, IterationTrace) for r in records[1:])
    acc = Accumulator().extend(records)
    assert len(acc.tokens) == 10 and acc.finish_reason == "length"
    assert sum(len(r.emitted) for r in records) == 10 and acc.target_forwards == len(records)
    assert all(r.finish is None for r in records[:-1]) and records[-1].finish == "length"


def test_retrieval_log_keeps_top_tokens_before_and_after_the_correction():
    class Got:
        indices = torch.tensor([[0, 1]])
        weights = torch.tensor([[0.5, 0.5]])
        k = torch.tensor([2])
    before = torch.tensor([[0.0, 3.0, 1.0, 2.0, -1.0, -2.0, -3.0]])     # top: token 1
    after = torch.tensor([[0.0, 1.0, 1.0, 2.0, 5.0, -2.0, -3.0]])       # top: token 4
    log = RetrievalLog()
    # the uncorrected head is kept as (states, head) and run only when the log is read
    log.add(torch.tensor([0]), Got(), torch.tensor([0.5]), after, torch.zeros(1, 3), lambda states: before)
    log.renumber(torch.tensor([0]), 1)
    rec = log[0]
    assert [t for t, _ in rec.top_before] == [1, 3, 2, 0, 4] and [t for t, _ in rec.top_after][0] == 4
    assert rec.top_before[0][1] == pytest.approx(torch.softmax(before[0], -1)[1].item())
    assert rec.flipped is True
    assert NodeRetrieval([0], [1.0], 1, 0.5).flipped is None           # nothing recorded: unknown, not False


def test_decode_records_top5_per_corrected_state_and_the_tree_grows_from_the_corrected_head(tiny_pipeline):
    """The tree's depth-1 children are the top tokens AFTER the correction; an untrained corrector
    starts as the identity (zero last layer), so before == after and nothing flips."""
    pipe = tiny_pipeline
    cfg = FoveaConfig().replace(decoding={"max_new_tokens": 6}, tree=dict(depth=3, top_k=2, total_tokens=6))
    prompt = pipe.target.prepare(*pipe.random_example("scene", 5))
    rounds = [r for r in generate(pipe.target, fovea(pipe.drafters["fovea"]), prompt, cfg)
              if isinstance(r, IterationTrace)]
    root = rounds[0].retrieval[0]
    assert len(root.top_before) == len(root.top_after) == 5
    probs = [p for _, p in root.top_after]
    assert probs == sorted(probs, reverse=True) and 0 < sum(probs) <= 1 + 1e-6
    children = {rounds[0].tokens[c] for c, p in enumerate(rounds[0].parents) if p == 0}
    assert root.top_after[0][0] in children
    assert all(r.flipped is False for it in rounds for r in it.retrieval.values())


class _CountTorchCalls(torch.overrides.TorchFunctionMode):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.calls += 1
        return func(*args, **(kwargs or {}))


def test_a_materialized_record_is_read_without_any_torch_op(tiny_pipeline):
    """The app converts records on its decode thread (app.streaming): reading one afterwards, its
    retrieval log and top tokens included, must not run torch (no second thread ever does)."""
    pipe = tiny_pipeline
    cfg = FoveaConfig().replace(decoding={"max_new_tokens": 8}, tree=dict(depth=3, top_k=2, total_tokens=6))
    prompt = pipe.target.prepare(*pipe.random_example("scene", 7))
    records = [r.materialize() for r in generate(pipe.target, fovea(pipe.drafters["fovea"]), prompt, cfg)]
    rounds = [r for r in records if isinstance(r, IterationTrace)]
    assert rounds and any(len(r.retrieval) for r in rounds)
    with _CountTorchCalls() as mode:
        for r in rounds:
            _ = r.tokens, r.parents, r.depths, r.scores, r.rejected, r.accept_length
            for node, got in r.retrieval.items():
                _ = got.indices, got.weights, got.top_before, got.top_after, got.flipped
    assert mode.calls == 0
    fresh = next(r for r in generate(pipe.target, fovea(pipe.drafters["fovea"]), prompt, cfg)
                 if isinstance(r, IterationTrace))
    with _CountTorchCalls() as mode:                      # an unconverted one does run torch when read
        _ = [got.top_before for got in fresh.retrieval.values()]
    assert mode.calls > 0

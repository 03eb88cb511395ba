"""Config ranges: each ranged field declares its range once, beside its default; the dataclass checks it
and names the field and the range when a value falls outside."""
import pytest

from fovea.config import (DecodingConfig, FoveaConfig, LocalityConfig, Range, RetrievalConfig, TreeConfig,
                          check_ranges, range_of)


def test_a_range_holds_its_closed_ends_and_leaves_out_its_open_ones():
    half_open = Range(0.0, 1.0, open_hi=True)
    assert 0.0 in half_open and 0.99 in half_open and 1.0 not in half_open and -0.01 not in half_open
    assert 1e9 in Range(1) and 0 not in Range(1) and 0.0 not in Range(0.0, open_lo=True)
    assert [r.text for r in (Range(1, 16), Range(0, 1, open_lo=True), Range(1), Range(0, open_lo=True))] == \
        ["in [1, 16]", "in (0, 1]", ">= 1", "> 0"]


def test_on_grid_moves_an_open_end_one_step_inward():
    assert range_of(TreeConfig, "stop_below").on_grid(0.05) == (0.0, 0.95)
    assert range_of(RetrievalConfig, "rho").on_grid(0.05) == (0.05, 1.0)
    assert range_of(RetrievalConfig, "fixed_k").on_grid(1) == (1, None)


@pytest.mark.parametrize("section,change,says", [
    ("tree", {"depth": 17}, "tree.depth must be in [1, 16], got 17"),
    ("tree", {"stop_below": 1.0}, "tree.stop_below must be in [0, 1), got 1.0"),
    ("retrieval", {"rho": 0}, "retrieval.rho must be in (0, 1], got 0"),
    ("retrieval", {"fixed_k": 0}, "retrieval.fixed_k must be >= 1, got 0"),
    ("decoding", {"top_p": 0.0}, "decoding.top_p must be in (0, 1], got 0.0"),
    ("correction", {"max_depth": -2}, "correction.max_depth must be >= -1, got -2"),
])
def test_a_value_outside_its_range_is_refused_with_the_field_and_the_range(section, change, says):
    with pytest.raises(ValueError) as err:
        FoveaConfig().replace(**{section: change})
    assert str(err.value) == says


def test_the_defaults_lie_in_their_ranges_and_fields_without_a_range_have_none():
    for cfg in (RetrievalConfig(), TreeConfig(), DecodingConfig(), LocalityConfig()):
        check_ranges(cfg)
    with pytest.raises(KeyError):
        range_of(DecodingConfig, "temperature")        # > 0 only when sampling: checked on its own

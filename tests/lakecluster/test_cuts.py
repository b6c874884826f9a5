"""Cuts between a column's levels: equal depth, moved to the roundest value within reach."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lakecluster.cuts import MIN_GAP, SLACK, level_cuts, roundest, unit_of


def _days(text: str) -> float:
    return float(np.datetime64(text, "D").astype(np.int64))


def _micros(text: str) -> float:
    return float(np.datetime64(text, "us").astype(np.int64))


def test_yyyymmdd_integers_prefer_a_year_then_a_month_boundary() -> None:
    assert roundest(19931230, 19940103, "number").tolist() == [19940000]
    assert roundest(19940125, 19940210, "number").tolist() == [19940200]
    assert roundest(19940112, 19940115, "number").tolist() == [19940112, 19940113, 19940114, 19940115]


def test_numbers_prefer_the_largest_power_of_ten_also_below_one() -> None:
    assert roundest(-120.0, 35.0, "number").tolist() == [0.0]  # zero is a multiple of every power
    assert roundest(120.0, 350.0, "number").tolist() == [200.0, 300.0]
    assert roundest(-350.0, -120.0, "number").tolist() == [-300.0, -200.0]
    assert np.allclose(roundest(0.123, 0.18, "number"), [0.13, 0.14, 0.15, 0.16, 0.17, 0.18])


def test_dates_prefer_a_year_start_then_a_month_start() -> None:
    assert roundest(_days("1993-12-20"), _days("1994-01-09"), "date").tolist() == [_days("1994-01-01")]
    assert roundest(_days("1994-01-20"), _days("1994-03-09"), "date").tolist() == [
        _days("1994-02-01"), _days("1994-03-01")]  # fmt: skip
    assert roundest(_days("1994-01-02"), _days("1994-01-03"), "date").tolist() == [
        _days("1994-01-02"), _days("1994-01-03")]  # fmt: skip


def test_timestamps_prefer_the_coarsest_calendar_start() -> None:
    assert roundest(_micros("2026-03-31T22:10"), _micros("2026-04-01T01:00"), "timestamp").tolist() == [
        _micros("2026-04-01T00:00")]  # fmt: skip
    assert roundest(_micros("2026-04-01T10:10"), _micros("2026-04-01T11:30"), "timestamp").tolist() == [
        _micros("2026-04-01T11:00")]  # fmt: skip


def test_strings_prefer_the_shortest_value_in_reach() -> None:
    assert roundest("MFGR#1240", "MFGR#2101", "string").tolist() == ["MFGR#2"]
    assert roundest("MFGR#1240", "MFGR#1410", "string").tolist() == ["MFGR#13", "MFGR#14"]
    assert roundest("ASIA", "ASIAN", "string").tolist() == ["ASIA"]


def test_declared_types_map_to_their_roundness() -> None:
    assert [unit_of(t) for t in ("date", "timestamp", "timestamp_ntz", "string", "int", "decimal(10,2)")] == [
        "date", "timestamp", "timestamp", "string", "number", "number"]  # fmt: skip


def _boundaries(values: np.ndarray, k: int = 512) -> tuple[np.ndarray, np.ndarray]:
    quantiles = np.quantile(np.sort(values), np.arange(k) / k, method="inverted_cdf")
    edges, first = np.unique(quantiles, return_index=True)
    return edges, first / k


def _yyyymmdd(days: np.ndarray) -> np.ndarray:
    text = np.datetime_as_string(days.astype("M8[D]"))
    return np.char.replace(text, "-", "").astype(np.int64).astype(np.float64)


def test_seven_levels_of_six_and_a_half_years_of_dates_are_cut_at_year_starts() -> None:
    days = np.random.default_rng(0).integers(_days("1992-01-01"), _days("1998-08-03"), 200_000)
    edges, starts = _boundaries(_yyyymmdd(days))
    cuts = level_cuts(edges, starts, 7, "number")
    assert cuts.tolist() == [19930000, 19940000, 19950000, 19960000, 19970000, 19980000]
    # equal depth would cut inside years
    equal = edges[np.searchsorted(starts, np.arange(1, 7) / 7)]
    assert sum(c % 10000 == 0 for c in equal) == 0


def test_more_levels_than_years_cut_at_every_year_start_and_months_between() -> None:
    days = np.random.default_rng(1).integers(_days("1992-01-01"), _days("1998-08-03"), 200_000)
    edges, starts = _boundaries(days.astype(np.float64))
    cuts = level_cuts(edges, starts, 18, "date").astype(np.int64).astype("M8[D]")
    years = {str(c)[:4] for c in cuts if str(c).endswith("-01-01")}
    assert years == {str(y) for y in range(1993, 1999)}
    assert all(str(c).endswith("-01") for c in cuts), cuts


def test_brand_strings_are_cut_at_manufacturer_boundaries() -> None:
    brands = np.array([f"MFGR#{m}{c}{b:02d}" for m in range(1, 6) for c in range(1, 6) for b in range(1, 41)])
    values = np.random.default_rng(2).choice(brands, 100_000)
    edges, starts = _boundaries(values)
    assert level_cuts(edges, starts, 5, "string").tolist() == ["MFGR#2", "MFGR#3", "MFGR#4", "MFGR#5"]


@settings(max_examples=200, deadline=None)
@given(
    seed=st.integers(0, 2**31),
    levels=st.integers(2, 40),
    scale=st.sampled_from([1.0, 1000.0, 1e6, 0.001]),
    distinct=st.integers(2, 5000),
)
def test_cuts_increase_and_levels_hold_a_quarter_to_twice_their_share(
    seed: int, levels: int, scale: float, distinct: int
) -> None:
    rng = np.random.default_rng(seed)
    values = rng.integers(0, distinct, 50_000) * scale + rng.integers(-5, 5) * scale
    edges, starts = _boundaries(values, 1024)
    cuts = level_cuts(edges, starts, levels, "number")
    assert len(cuts) <= levels - 1
    assert (np.diff(cuts) > 0).all()
    if len(cuts) == 0:
        return
    shares = np.diff(np.concatenate([[0.0], np.searchsorted(np.sort(values), cuts) / len(values), [1.0]]))
    assert (shares > 0).all()
    if distinct >= 50 * levels:  # no single value heavier than a level: the bounds hold (sketch error aside)
        depth = 1 / levels
        assert shares.min() >= (MIN_GAP - 0.05) * depth
        assert shares.max() <= (1 + 2 * SLACK + 0.05) * depth


def test_decimal_cuts_are_the_round_values_themselves() -> None:
    # 3 * 0.1 is 0.30000000000000004: a row equal to 0.3 would fall below the cut
    assert roundest(0.25, 0.35, "number").tolist() == [0.3]
    assert roundest(2.25, 2.35, "number").tolist() == [2.3]
    assert roundest(0.6, 0.65, "number").tolist() == [0.6]


def test_the_largest_doubles_do_not_overflow() -> None:
    big = float(np.finfo(np.float64).max)
    assert roundest(1e307, big, "number").tolist() == [1e308]
    values = np.concatenate([np.random.default_rng(4).uniform(0, 1000, 7000), np.full(3000, big)])
    edges, starts = _boundaries(values)
    cuts = level_cuts(edges, starts, 4, "number")
    assert len(cuts) >= 2 and (np.diff(cuts) > 0).all()


@pytest.mark.parametrize("heavy", [0.8, 0.9, 0.95])
def test_a_two_value_column_is_still_split_however_skewed(heavy: float) -> None:
    values = np.where(np.random.default_rng(5).random(20_000) < heavy, 1.0, 0.0)
    edges, starts = _boundaries(values)
    assert level_cuts(edges, starts, 2, "number").tolist() == [1.0]

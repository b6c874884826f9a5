"""Levels per column, cell-to-file assignment and file splitting (pure functions)."""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from lakecluster.compaction.planner import file_run
from lakecluster.layout import ClusteringLayout, choose_levels, file_plan, layout_fingerprint
from lakecluster.sketches import BoundarySketches, ColumnSketch


@pytest.mark.parametrize("target", [1, 3, 8, 100, 1000, 5000])
def test_levels_multiply_to_about_the_target_and_are_balanced(target: int) -> None:
    levels = choose_levels(target, [1000, 1000, 1000])
    assert target / 2 <= math.prod(levels) <= 1.5 * target
    assert max(levels) - min(levels) <= 1


def test_a_low_cardinality_column_gives_its_budget_to_the_others() -> None:
    levels = choose_levels(1000, [5, 250, 1000])
    assert levels[0] == 5
    assert levels[1] == levels[2] and 800 <= math.prod(levels) <= 1500


def test_weights_shift_resolution_to_the_favoured_column() -> None:
    even = choose_levels(1000, [1000, 1000, 1000])
    weighted = choose_levels(1000, [1000, 1000, 1000], [2, 1, 1])
    assert weighted[0] > even[0] and weighted[1] < even[1]


def _files(cell_rows: list[int], target_files: int) -> tuple[list[int], list[int]]:
    file_of_cell, pieces = file_plan(cell_rows, target_files)
    return file_of_cell.tolist(), pieces.tolist()


def test_cells_become_files_and_small_cells_are_merged_along_the_curve() -> None:
    assert _files([100, 100, 100], 3) == ([0, 1, 2], [1, 1, 1])
    assert _files([30, 30, 30, 100, 20], 2) == ([0, 0, 0, 1, 1], [1, 1])
    assert _files([10, 500, 10], 5) == ([0, 0, 0], [5])  # a heavy cell: pieces, not a sliver of its own


def test_a_group_never_becomes_more_files_than_asked() -> None:
    # Cells of 0.6 files each: each was a file of its own (five files for three), and cells of
    # uneven sizes (round cuts, skew) each added a small file.
    assert _files([60] * 5, 3) == ([0, 0, 1, 2, 2], [1, 1, 1])
    rng = np.random.default_rng(1)
    for _ in range(300):
        rows = rng.integers(1, 400, int(rng.integers(1, 60))).tolist()
        files = int(rng.integers(1, 40))
        file_of_cell, pieces = file_plan(rows, files)
        assert int(pieces.sum()) <= files
        assert (np.diff(file_of_cell) >= 0).all() and (np.diff(file_of_cell) <= 1).all() and file_of_cell[0] == 0
        assert len(pieces) == file_of_cell[-1] + 1 and (pieces >= 1).all()


def test_cuts_move_to_cell_boundaries_within_half_a_file() -> None:
    # 4 files of 100 rows; the cells' boundaries lie 20 rows from two of the equal cuts: those
    # files hold whole cells. The cut at 300 has no boundary within 50 rows: the last two cells
    # are one run written as two pieces.
    file_of_cell, pieces = file_plan([80, 140, 160, 20], 4)
    assert file_of_cell.tolist() == [0, 1, 2, 2] and pieces.tolist() == [1, 1, 2]


def test_cuts_leave_no_sliver_between_them() -> None:
    # Boundaries at 149 and 151: the cuts at 100 and 200 would move to them and leave a file of
    # two rows; the second is dropped (two files, not three with a sliver).
    file_of_cell, pieces = file_plan([149, 2, 149], 3)
    assert pieces.sum() == 2 and min(np.bincount(file_of_cell, weights=[149, 2, 149])) >= 75


def test_run_and_generation_are_read_from_file_names() -> None:
    assert file_run("d_year=1995/part-g02-0a1b2c3d4e5f-abcd-c0000.snappy.parquet") == (2, "0a1b2c3d4e5f")
    assert file_run("d_year=1995/part-s0000000004-abcd-c0000.snappy.parquet") == (0, None)


def test_the_layout_fingerprint_changes_with_columns_their_order_weights_and_curve() -> None:
    base = layout_fingerprint(["a", "b"], {}, "hilbert")
    assert base == layout_fingerprint(["a", "b"], {"a": 1.0}, "hilbert")  # weight 1 is the default
    assert len(base) == 8 and int(base, 16) >= 0
    others = [layout_fingerprint(["b", "a"], {}, "hilbert"), layout_fingerprint(["a"], {}, "hilbert"),
              layout_fingerprint(["a", "b"], {"b": 2.0}, "hilbert"), layout_fingerprint(["a", "b"], {}, "zorder")]
    assert len({base, *others}) == 5


def test_equal_depth_levels_split_rows_evenly_for_a_skewed_column() -> None:
    rng = np.random.default_rng(0)
    values = pa.array(rng.zipf(1.5, 200_000).clip(max=10_000).astype(np.float64))
    sketch = ColumnSketch("numeric", k=400)
    sketch.update(values)
    layout = ClusteringLayout.build(BoundarySketches({"x": sketch}), ["x"], curve="hilbert", target_cells=4)
    b = layout.boundaries[0]
    counts = np.bincount(b.level_of(b.ranks(values), 4), minlength=4)
    # value 1 alone holds ~38% of the rows: it is one level; the rest split the remainder
    assert counts.max() < 0.5 * len(values) and (counts > 0).sum() >= 3


def _dates_table(rows: int = 200_000) -> pa.Table:
    days = np.random.default_rng(3).integers(np.datetime64("1992-01-01").astype(np.int64),
                                             np.datetime64("1998-08-03").astype(np.int64), rows)  # fmt: skip
    yyyymmdd = np.char.replace(np.datetime_as_string(days.astype("M8[D]")), "-", "").astype(np.int64)
    return pa.table({"d": pa.array(days.astype(np.int32), pa.date32()), "ymd": yyyymmdd})


def _levels_of_each_year(layout: ClusteringLayout, table: pa.Table, column: str) -> dict[int, set[int]]:
    level = layout.cell_key(layout.ranks(table.select([column])))[:, -1]
    years = pc.year(table["d"]).to_numpy()
    return {int(y): set(np.unique(level[years == y]).tolist()) for y in np.unique(years)}


@pytest.mark.parametrize(("column", "kind", "types"), [("ymd", "numeric", {}), ("d", "numeric", {"d": "date"})])
def test_round_cuts_give_each_year_its_own_levels(column: str, kind: str, types: dict[str, str]) -> None:
    table = _dates_table()
    sketch = ColumnSketch(kind, k=400)  # type: ignore[arg-type]
    sketch.update(table[column])
    sketches = BoundarySketches({column: sketch})
    layout = ClusteringLayout.build(sketches, [column], curve="hilbert", target_cells=7, column_types=types)
    by_year = _levels_of_each_year(layout, table, column)
    assert [len(levels) for levels in by_year.values()] == [1] * 7
    assert len(set().union(*by_year.values())) == 7  # no level holds two years: a year query reads one level
    equal = ClusteringLayout.build(sketches, [column], curve="hilbert", target_cells=7, round_cuts=False)
    assert sum(len(levels) > 1 for levels in _levels_of_each_year(equal, table, column).values()) >= 5

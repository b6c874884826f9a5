"""Levels per column, cell-to-file assignment and file splitting (pure functions)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from lakecluster.clustering import ClusteringLayout, choose_levels, even_cuts, layout_fingerprint, level_cost
from lakecluster.file_plan import file_plan
from lakecluster.sketches import BoundarySketches, ColumnSketch
from tests.file_names import file_run


@pytest.mark.parametrize("target", [1, 3, 8, 100, 1000, 5000])
def test_levels_multiply_to_about_the_target_and_are_balanced(target: int) -> None:
    levels = choose_levels(target, [1000, 1000, 1000])
    assert target / 2 <= math.prod(levels) <= 1.15 * target
    assert max(levels) - min(levels) <= 1 or target < 2**3  # below 2 levels each, one column takes them


def test_a_column_of_few_values_gets_fewer_levels_than_one_of_many() -> None:
    # its predicates are wide (a region is a fifth of the rows): levels gain it less than a column
    # whose predicates are mostly narrow; the old rule gave the 5-value column all 5 levels
    levels = choose_levels(1000, [5, 250, 1000])
    assert 2 <= levels[0] <= 3 and levels[0] < levels[1] <= levels[2]
    assert 800 <= math.prod(levels) <= 1150
    # a date of 2,557 days sketched into 1,024 boundaries still counts as 2,557 values
    assert choose_levels(1000, [1024, 5, 5, 1000], None, [2557, 5, 5, 1000])[0] > choose_levels(
        1000, [1024, 5, 5, 1000], None, [1024, 5, 5, 1000])[0]  # fmt: skip


@pytest.mark.parametrize(("target", "distinct"), [(50, (5, 250, 1000)), (300, (2557, 5, 5, 1000)),
                                                  (1000, (5, 250, 5, 250, 1000)), (300, (30, 30)),
                                                  (1000, (3, 1_000_000))])  # fmt: skip
def test_levels_are_nearly_the_cheapest_within_the_cell_budget(target: int, distinct: tuple[int, ...]) -> None:
    caps = [min(n, 1024) for n in distinct]
    chosen = choose_levels(target, caps, None, distinct)
    assert math.prod(chosen) <= 1.15 * target and all(1 <= lv <= c for lv, c in zip(chosen, caps, strict=True))

    def cost(levels: tuple[int, ...]) -> float:
        return math.prod(level_cost(lv, n) for lv, n in zip(levels, distinct, strict=True))

    def within(i: int, room: float) -> list[tuple[int, ...]]:  # every level vector with product <= the limit
        if i == len(caps):
            return [()]
        return [(lv, *rest) for lv in range(1, min(caps[i], int(room)) + 1) for rest in within(i + 1, room / lv)]

    best = min(within(0, 1.15 * target), key=cost)
    assert cost(chosen) <= 1.06 * cost(best), (chosen, best)  # the rounded ideal: within 6%


def test_level_cost_falls_with_levels_down_to_one_value_per_level() -> None:
    assert level_cost(1, 1000) == pytest.approx(1.0)
    assert level_cost(1000, 1000) == pytest.approx((1 - 1 / 1000) / math.log(1000))  # only wide predicates left
    costs = [level_cost(lv, 1000) for lv in (1, 2, 10, 100, 1000, 5000)]
    assert all(a > b for a, b in itertools.pairwise(costs[:5])) and costs[-1] == costs[-2]
    assert level_cost(7, 1) == 1.0


def test_weights_shift_resolution_to_the_favoured_column() -> None:
    even = choose_levels(1000, [1000, 1000, 1000])
    weighted = choose_levels(1000, [1000, 1000, 1000], [2, 1, 1])
    assert weighted[0] > even[0] and weighted[1] < even[1]


def _files(cell_rows: list[int], target_files: int) -> tuple[list[int], list[int]]:
    """(run of each cell, files of each run)."""
    file_of_cell, pieces = file_plan(cell_rows, target_files)
    return file_of_cell.tolist(), [len(p) for p in pieces]


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
        file_of_cell, runs = file_plan(rows, files)
        pieces = np.array([len(p) for p in runs])
        assert int(pieces.sum()) <= files
        assert np.bincount(file_of_cell, weights=rows).astype(int).tolist() == [sum(p) for p in runs]
        assert all(max(p) - min(p) <= 1 for p in runs), "a run's files hold equal rows"
        assert (np.diff(file_of_cell) >= 0).all() and (np.diff(file_of_cell) <= 1).all() and file_of_cell[0] == 0
        assert len(pieces) == file_of_cell[-1] + 1 and (pieces >= 1).all()


def test_cuts_move_to_cell_boundaries_within_half_a_file() -> None:
    # 4 files of 100 rows; the cells' boundaries lie 20 rows from two of the equal cuts: those
    # files hold whole cells. The cut at 300 has no boundary within 50 rows: the last two cells
    # are one run written as two pieces.
    file_of_cell, pieces = file_plan([80, 140, 160, 20], 4)
    assert file_of_cell.tolist() == [0, 1, 2, 2] and pieces == [(80,), (140,), (90, 90)]


def test_cuts_leave_no_sliver_between_them() -> None:
    # Boundaries at 149 and 151: the cuts at 100 and 200 would move to them and leave a file of
    # two rows; the second is dropped (two files, not three with a sliver).
    file_of_cell, pieces = file_plan([149, 2, 149], 3)
    assert sum(map(len, pieces)) == 2 and min(np.bincount(file_of_cell, weights=[149, 2, 149])) >= 75


def test_run_and_generation_are_read_from_file_names() -> None:
    assert file_run("d_year=1995/part-g02-0a1b2c3d4e5f-abcd-c0000.snappy.parquet") == (2, "0a1b2c3d4e5f")
    assert file_run("d_year=1995/part-s0000000004-abcd-c0000.snappy.parquet") == (0, None)


def test_the_layout_fingerprint_changes_with_columns_their_order_weights_curve_and_parents() -> None:
    base = layout_fingerprint(["a", "b"], {}, "hilbert")
    assert base == layout_fingerprint(["a", "b"], {"a": 1.0}, "hilbert")  # weight 1 is the default
    assert len(base) == 8 and int(base, 16) >= 0
    others = [layout_fingerprint(["b", "a"], {}, "hilbert"), layout_fingerprint(["a"], {}, "hilbert"),
              layout_fingerprint(["a", "b"], {"b": 2.0}, "hilbert"), layout_fingerprint(["a", "b"], {}, "zorder"),
              layout_fingerprint(["a", "b"], {}, "hilbert", group_by_parents=False)]  # fmt: skip
    assert len({base, *others}) == 6
    # Parents on (the default) keeps the ids files carried before the setting existed: they stay current.
    assert base == layout_fingerprint(["a", "b"], {}, "hilbert", group_by_parents=True) == "3185f55d"
    assert layout_fingerprint(["c_city", "p_brand1"], {"c_city": 2.0}, "zorder") == "e9c2d182"


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


def test_even_cuts_split_each_level_of_the_column() -> None:
    # four parent values; the column's two levels hold values 0 and 2, and 1 and 3: cutting
    # between 1 and 2 gives four cells of a quarter each, equal depth by value would too, but
    # cutting after 0 would leave a cell of half the rows
    mass = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0], [0.0, 1.0]])
    assert even_cuts(mass, 2).tolist() == [2]
    # the column's first level holds parents 0 and 1, its second 2 and 3: equal depth (a cut at 2)
    # leaves two of the four cells empty, a cut at 1 or 3 fills three
    nested = np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [0.0, 1.0]])
    assert even_cuts(nested, 2).tolist() in ([1], [3])
    assert even_cuts(np.ones((5, 1)), 3).tolist() == [1, 3] or even_cuts(np.ones((5, 1)), 3).tolist() == [2, 4]
    assert even_cuts(np.ones((3, 2)), 1).tolist() == [] and even_cuts(np.ones((2, 1)), 5).tolist() == [1]


def _cities(rows: int) -> pa.Table:
    from lakecluster.stream.ssb import CITIES, REGIONS

    pick = np.random.default_rng(5).integers(0, len(CITIES), rows)
    return pa.table({"city": pa.array(CITIES[pick], pa.string()), "region": pa.array(REGIONS[pick // 10], pa.string()),
                     "brand": pa.array(np.random.default_rng(6).integers(0, 1000, rows))})  # fmt: skip


def _files_read(layout: ClusteringLayout, table: pa.Table, files: int, column: str, value: object) -> int:
    from lakecluster.compaction.rewrite_local import file_slices
    from lakecluster.curves import argsort_keys

    cell, key = layout.keys(table.select(list(layout.columns)))
    order = argsort_keys(key)
    slices = file_slices(np.ascontiguousarray(cell[order]).view(f"S{cell.shape[1]}").ravel(), files)
    values = np.asarray(table[column].to_pylist(), dtype=object)[order]
    return sum(min(values[a:b]) <= value <= max(values[a:b]) for a, b in slices)


def test_a_parent_grouping_keeps_files_to_few_regions_and_still_to_a_range_of_cities() -> None:
    from lakecluster.hierarchy import find_parents

    table = _cities(60_000)
    sketches = BoundarySketches({"city": ColumnSketch("string"), "brand": ColumnSketch("numeric")})
    sketches.sketches["city"].update(table["city"])
    sketches.sketches["brand"].update(table["brand"])
    parents = find_parents(table.slice(0, 20_000), ["city", "brand"], ["region"])
    assert set(parents) == {"city"} and parents["city"].parent == "region"
    plain = ClusteringLayout.build(sketches, ["city", "brand"], curve="hilbert", target_cells=40)
    grouped = ClusteringLayout.build(sketches, ["city", "brand"], curve="hilbert", target_cells=40, parents=parents)
    assert not plain.groupings and [g.parent for g in grouped.groupings] == ["region"]
    assert grouped.grouped_by().startswith("city<region:")
    plain_region = sum(_files_read(plain, table, 40, "region", r) for r in ("AFRICA", "ASIA", "EUROPE"))
    grouped_region = sum(_files_read(grouped, table, 40, "region", r) for r in ("AFRICA", "ASIA", "EUROPE"))
    assert grouped_region < 0.8 * plain_region, (grouped_region, plain_region)
    # a city is still found in few files: the grouping splits the city's levels, it does not reorder them
    uk = [_files_read(layout, table, 40, "city", "UNITED KI1") for layout in (grouped, plain)]
    assert uk[0] <= 2 * uk[1], uk
    # every row keyed, the same rows in and out of the key order
    _, key = grouped.keys(table.select(["city", "brand"]))
    assert key.shape[0] == table.num_rows


def _grouped_layout(columns: dict[str, pa.Array], parents: dict, target: int = 40, k: int = 1024) -> ClusteringLayout:
    sketches = BoundarySketches({})
    for name, values in columns.items():
        sketch = ColumnSketch("string" if pa.types.is_string(values.type) else "numeric")
        sketch.update(values)
        sketches.sketches[name] = sketch
    return ClusteringLayout.build(sketches, list(columns), curve="hilbert", target_cells=target, k=k, parents=parents)


def test_groupings_never_take_the_curve_past_its_dimensions_nor_get_one_level() -> None:
    from lakecluster.curves import MAX_COLUMNS
    from lakecluster.hierarchy import find_parents

    table = _cities(20_000)
    columns = {f"city{i}": table["city"] for i in range(MAX_COLUMNS)}
    sample = pa.table({**columns, "region": table["region"]})
    parents = find_parents(sample, list(columns), ["region"])
    assert len(parents) == MAX_COLUMNS
    for target in (1, 300, 10**6):
        layout = _grouped_layout(columns, parents, target=target)
        assert len(layout.columns) + len(layout.groupings) <= MAX_COLUMNS
        assert all(g.levels > 1 for g in layout.groupings)
        _, key = layout.keys(pa.table(columns))  # every row keyed: no dimension error
        assert key.shape[0] == table.num_rows
    # one column, few cells: the region is worth levels beside the city
    assert _grouped_layout({"city": table["city"]}, {"city": parents["city0"]}, target=40).groupings


def test_no_grouping_where_the_boundaries_are_not_the_values_or_the_parent_is_clustered() -> None:
    from lakecluster.hierarchy import Parent, find_parents

    many = np.asarray([f"town{i:04d}" for i in range(3_000)], dtype=object)
    pick = np.tile(np.arange(len(many)), 20)  # 20 rows each: every town is a boundary of 4,096
    towns = pa.array(many[pick], pa.string())
    zone = pa.array(np.asarray(["A", "B", "C"], dtype=object)[(pick * 7919) % 3], pa.string())
    parents = find_parents(pa.table({"town": towns, "zone": zone}), ["town"], ["zone"])
    assert parents["town"].parent == "zone"
    # 3,000 values in 1,024 boundaries: a rank holds several towns of different zones; in 4,096
    # each town is a rank of its own
    from lakecluster.clustering import _usable_parents

    sketch = ColumnSketch("string")
    sketch.update(towns)
    sketches = BoundarySketches({"town": sketch})
    assert _usable_parents(sketches, ["town"], [sketches.boundaries("town", 1024)], parents) == {}
    assert list(_usable_parents(sketches, ["town"], [sketches.boundaries("town", 4096)], parents)) == [0]
    # the parent is a clustering column: it is cut by its own levels
    table = _cities(20_000)
    city_parents = find_parents(table, ["city"], ["region"])
    assert not _grouped_layout({"city": table["city"], "region": table["region"]}, city_parents).groupings
    # a parent found in a sample that saw few of the values
    few = find_parents(table.filter(pc.is_in(table["region"], pa.array(["AFRICA", "ASIA"]))).slice(0, 2_000),
                       ["city"], ["region"])  # fmt: skip
    seen = len(few["city"].child_values) if few else 0
    assert seen < 120 and not _grouped_layout({"city": table["city"]}, few).groupings
    # values alike in their first characters (as the sketch cuts them) with different parents
    clash = Parent("c", "p", np.asarray(["abcX", "abcY"], dtype=object), np.asarray(["p1", "p2"], dtype=object))
    assert clash.truncated(3) is None
    same = Parent("c", "p", np.asarray(["abcX", "abcY", "b"], dtype=object),
                  np.asarray(["p1", "p1", "p2"], dtype=object))  # fmt: skip
    cut = same.truncated(3)
    assert cut is not None and cut.of(np.asarray(["abc", "b"], dtype=object)).tolist() == ["p1", "p2"]


def test_a_number_of_few_values_counts_as_few_values() -> None:
    rng = np.random.default_rng(9)
    prices = pa.array(rng.integers(0, 20, 50_000) * 1.5)  # 20 doubles
    brands = pa.array(np.asarray([f"b{i:03d}" for i in range(1000)], dtype=object)[rng.integers(0, 1000, 50_000)],
                      pa.string())  # fmt: skip
    layout = _grouped_layout({"price": prices, "brand": brands}, {}, target=100)
    # counted as 50,000 values (one per row), the price would take more levels than the brand
    assert layout.levels[0] < layout.levels[1], layout.levels

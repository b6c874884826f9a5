"""The clustering layout: which coarse cell and which curve position each row gets.

A row's sort key has two parts, both curve keys over coordinates taken from the boundary
sketches (never raw values):

* the **cell**: each clustering column cut into ``levels`` ranges of about equal depth, each cut
  moved to the roundest value nearby (``cuts``: a year start, a multiple of 1000, a short string
  prefix), so queries on such units read whole levels; the cells are ordered along the curve.
  Levels are chosen per column (``choose_levels``) so that the number of cells is about the
  number of output files and every column gets its share of the resolution: with equal bits a
  column of 250 distinct values is starved by one of 1000. An output file holds whole cells,
  so a point query on column *i* reads about ``files / levels[i]`` files; with equal levels
  that is the bound ``N^((d-1)/d)``.
* the **fine key**: the curve over full-resolution ranks, ordering rows inside a cell (narrow row
  groups, and the cut points when one cell is larger than a file).

Everything is vectorised over Arrow batches.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lakecluster.curves import MAX_COLUMNS, Curve, bits_for, curve_key
from lakecluster.cuts import Unit, level_cuts, unit_of
from lakecluster.hierarchy import Parent, one_each
from lakecluster.sketches import Boundaries, BoundarySketches, ColumnSketch

# Declared types (``lakecluster.schema``) whose values are integers: a column of them holds no
# more distinct values than its range has integers.
INTEGRAL_TYPES = frozenset({"int", "long", "date"})
FINGERPRINT_CHARS = 8  # hex characters of a layout fingerprint in a file name


def layout_fingerprint(columns: Sequence[str], weights: Mapping[str, float], curve: str,
                       group_by_parents: bool = True) -> str:  # fmt: skip
    """A short, stable id of a clustering layout: its columns in order, each one's weight (1 when not
    given), the curve, and whether string columns are cut by their parents
    (``compaction.group_by_parents``). Files a compaction writes carry it in their names
    (``part-g<g>-<run>-l<id>-``), so ``compact --full`` tells files clustered under the current
    layout from the others. Boundaries, levels and which parents were found are not part of it:
    they follow the data, not the user's choice. Grouping on, the default, leaves the id as it was
    before the setting existed, so files written then count as the current layout."""
    layout: dict[str, object] = {"columns": list(columns), "curve": curve,
                                 "weights": [float(weights.get(c, 1.0)) for c in columns]}  # fmt: skip
    if not group_by_parents:
        layout["parents"] = False
    what = json.dumps(layout, sort_keys=True)
    return hashlib.sha256(what.encode()).hexdigest()[:FINGERPRINT_CHARS]


def level_cost(levels: float, distinct: float) -> float:
    """Expected fraction of a column's levels a predicate on it reads, for ``levels`` equal-depth
    levels of a column of ``distinct`` values.

    The predicate's selectivity is log-uniform between one value and all of them: a query on a
    date is as likely to ask for a year, a month or a day, one on a city for a region, a nation or
    a city. A predicate wider than a level reads its own share of the levels; a narrower one
    still reads a whole level. Integrated over the selectivities, with ``x = ln levels`` and
    ``v = ln distinct``: ``(1 + (v - x - 1) / levels) / v``.
    """
    if distinct <= 1:
        return 1.0
    v = math.log(distinct)
    x = min(math.log(max(levels, 1.0)), v)
    return (1.0 + (v - x - 1.0) * math.exp(-x)) / v


def _level_gain(x: float, v: float) -> float:
    """``-d ln level_cost / d ln levels`` at ``ln levels = x`` for ``ln distinct = v``: what one
    more factor e of levels saves, falling from 1 (one level) to 0 (a level per value)."""
    if x >= v:
        return 0.0
    return (v - x) / (math.exp(x) + v - x - 1.0)


def choose_levels(
    target_cells: float,
    caps: Sequence[int],
    weights: Sequence[float] | None = None,
    distinct: Sequence[float] | None = None,
) -> tuple[int, ...]:
    """Levels per column with product about ``target_cells`` (at most 1.15 times it) that minimise,
    nearly, the weighted product of the columns' :func:`level_cost`.

    That product is the share of the files a query with a predicate on every column reads. A
    column of few values gains little from levels (its predicates are wide), one of many values
    gains much (most of its predicates are narrow), so with equal weights a 5-value column gets
    two or three levels beside a 2,500-value one and columns of equal cardinality get equal
    levels. A weight multiplies its column's term: weight 2 counts the column's predicates twice.
    ``caps`` are the distinct ranks a column has (more levels cannot cut it finer); ``distinct``
    the distinct values it holds (``caps`` when not given; at least ``caps``).
    """
    d = len(caps)
    w = [1.0] * d if weights is None else [float(x) for x in weights]
    if len(w) != d or any(x <= 0 for x in w):
        raise ValueError("one positive weight per column")
    cap = [max(int(c), 1) for c in caps]
    v = [math.log(max(float(n), float(c), 1.0)) for n, c in zip(distinct or cap, cap, strict=True)]
    top = [min(math.log(c), vi) for c, vi in zip(cap, v, strict=True)]
    budget = math.log(max(target_cells, 1.0))
    if sum(top) <= budget:
        ideal = [math.exp(x) for x in top]
    else:
        # Water-filling: each column's ln(levels) grows while its weighted gain exceeds lam; the
        # gains fall as levels grow, so the total falls with lam and a bisection finds the budget.
        def spread(lam: float) -> list[float]:
            out = []
            for wi, vi, hi in zip(w, v, top, strict=True):
                lo_x, hi_x = 0.0, hi
                if wi * _level_gain(hi_x, vi) >= lam:
                    out.append(hi_x)
                    continue
                if wi * _level_gain(0.0, vi) <= lam:
                    out.append(0.0)
                    continue
                for _ in range(50):
                    mid = (lo_x + hi_x) / 2
                    lo_x, hi_x = (mid, hi_x) if wi * _level_gain(mid, vi) > lam else (lo_x, mid)
                out.append(lo_x)
            return out

        low, high = 0.0, max(w)
        for _ in range(60):
            lam = (low + high) / 2
            low, high = (lam, high) if sum(spread(lam)) > budget else (low, lam)
        ideal = [math.exp(x) for x in spread(high)]
    floor = [min(max(1, math.floor(x + 1e-9)), c) for x, c in zip(ideal, cap, strict=True)]
    limit = 1.15 * max(target_cells, 1.0)

    def cost(levels: Sequence[int]) -> float:
        return sum(wi * math.log(level_cost(lv, math.exp(vi))) for wi, lv, vi in zip(w, levels, v, strict=True))

    # The ideal (real-valued) levels rounded, each column down or up: the cheapest within the limit
    # (the floors always are); with many columns, the columns that lost most to the floor rounded
    # up one by one. Either can miss the cheapest whole numbers by a few percent of cost.
    growable = [i for i in range(d) if floor[i] < cap[i] and ideal[i] > floor[i] + 1e-9]
    if len(growable) <= 10:
        best = tuple(floor)
        for mask in range(1, 1 << len(growable)):
            levels = list(floor)
            for bit, i in enumerate(growable):
                if mask >> bit & 1:
                    levels[i] += 1
            if math.prod(levels) <= limit and cost(levels) < cost(best):
                best = tuple(levels)
    else:
        levels = list(floor)
        for i in sorted(growable, key=lambda j: levels[j] / ideal[j]):
            if math.prod(levels) // levels[i] * (levels[i] + 1) <= limit:
                levels[i] += 1
        best = tuple(levels)
    return best


def _distinct(sketch: ColumnSketch, bounds: Boundaries, k: int, integral: bool) -> int:
    """The distinct values ``choose_levels`` counts for a column: a string summary's entries when
    exact (else its values), an integer or date column's integers between its extremes; another
    number's boundaries when far fewer than asked (its quantiles fell on few values), else its values."""
    if sketch.kind == "string" or integral:
        return sketch.distinct_bound(integral)
    return len(bounds) if len(bounds) < k // 2 else sketch.distinct_bound()


COVERED = 0.95  # the share of a column's rows whose values the parent's sample must have seen


def _usable_parents(sketches: BoundarySketches, columns: Sequence[str], bounds: Sequence[Boundaries],
                    parents: Mapping[str, Parent]) -> dict[int, tuple[Parent, np.ndarray]]:  # fmt: skip
    """Per column position, its parent (cut to the sketch's string length) and the parent of each
    of its boundaries, for the columns a parent can group: a string column with an exact sketch,
    whose parent is no clustering column, whose parent's sample saw the values of at least
    ``COVERED`` of its rows, each of whose ranks holds values of one parent (a rank holds several
    values when the column has more than the boundaries asked for), and whose boundaries have at
    least two parents."""
    usable = {}
    for i, c in enumerate(columns):
        parent = parents.get(c)
        b = bounds[i]
        exact = sketches.sketches[c].exact_values()
        if parent is None or parent.parent in columns or b.kind != "string" or len(b) < 2 or exact is None:
            continue
        if b.max_string_chars is not None:
            parent = parent.truncated(b.max_string_chars)
            if parent is None:  # values alike in their first characters have different parents
                continue
        values, counts = exact
        seen = np.isin(values, parent.child_values)
        if counts[seen].sum() < COVERED * max(int(counts.sum()), 1):
            continue
        _, code = np.unique(parent.of(values), return_inverse=True)
        rank = np.clip(np.searchsorted(b.edges.astype(object), values, side="right") - 1, 0, len(b) - 1)
        if one_each(rank, code.ravel().astype(np.int64), len(b)) is None:
            continue  # a rank holding values of two parents
        of_edges = parent.of(b.edges)
        if len(np.unique(of_edges)) > 1:
            usable[i] = (parent, of_edges)
    return usable


@dataclass(frozen=True)
class Grouping:
    """A clustering column's parent (``lakecluster.hierarchy``) as one more dimension of the cell:
    the parent's values, sorted, cut into ``levels`` ranges of about equal depth."""

    index: int  # the clustering column (its position in ``ClusteringLayout.columns``)
    parent: str
    # Per rank of the clustering column, its parent's rank among the parent's sorted values.
    parent_rank: np.ndarray
    values: int  # the parent's distinct values
    levels: int
    level_starts: np.ndarray  # the parent ranks at which levels 1, 2, ... start


@dataclass(frozen=True)
class ClusteringLayout:
    """Everything a task needs to key rows: picklable, shipped to the executors."""

    curve: Curve
    columns: tuple[str, ...]
    boundaries: tuple[Boundaries, ...]
    levels: tuple[int, ...]
    # Per column, the ranks at which its levels 1, 2, ... start (at most ``levels - 1``).
    level_starts: tuple[np.ndarray, ...]
    groupings: tuple[Grouping, ...] = ()

    @classmethod
    def build(
        cls,
        sketches: BoundarySketches,
        columns: Sequence[str],
        *,
        curve: Curve,
        target_cells: float,
        k: int = 1024,
        weights: Mapping[str, float] | None = None,
        column_types: Mapping[str, str] | None = None,
        round_cuts: bool = True,
        parents: Mapping[str, Parent] | None = None,
    ) -> ClusteringLayout:
        """The layout of ``columns`` for about ``target_cells`` cells.

        ``column_types`` are the declared types (``lakecluster.schema``): a date or timestamp column
        is cut at calendar starts (``cuts.unit_of``). ``round_cuts=False`` keeps the cuts at equal
        depth. ``parents`` (``hierarchy.find_parents``) become groupings of the string columns
        whose boundaries are their values (``_usable_parents``); their levels come out of the same
        budget, with the column's weight, and a parent given one level is left out.
        """
        bounds = [sketches.boundaries(c, k) for c in columns]
        caps = [max(len(b), 1) for b in bounds]
        w = [float((weights or {}).get(c, 1.0)) for c in columns]
        types = column_types or {}
        distinct = [_distinct(sketches.sketches[c], b, k, types.get(c) in INTEGRAL_TYPES)
                    for c, b in zip(columns, bounds, strict=True)]  # fmt: skip
        usable = _usable_parents(sketches, columns, bounds, parents or {})
        # at most MAX_COLUMNS dimensions in all (the curves' limit), the first columns' parents kept
        grouped = sorted(usable)[: max(0, MAX_COLUMNS - len(columns))]
        while True:
            parent_values = [len(np.unique(usable[i][1])) for i in grouped]
            chosen = choose_levels(target_cells, caps + parent_values, w + [w[i] for i in grouped],
                                   distinct + parent_values)  # fmt: skip
            # a parent given one level would only add a dimension that is always 0, which breaks
            # the curve's adjacency between cells: choose again without it
            single = {i for i, lv in zip(grouped, chosen[len(columns):], strict=True) if lv == 1}
            if not single:
                break
            grouped = [i for i in grouped if i not in single]
        levels = chosen[: len(columns)]
        starts = []
        for i, (column, b, lv) in enumerate(zip(columns, bounds, levels, strict=True)):
            if round_cuts and lv > 1 and len(b) > 1:
                unit: Unit = "string" if b.kind == "string" else unit_of(types.get(column, "double"))
                cuts = level_cuts(b.edges, b.fractions(), lv, unit)
                bounds[i] = b.including(cuts)
                starts.append(np.searchsorted(bounds[i].edges, cuts).astype(np.int64))
            else:
                equal_depth = b.level_of(np.arange(len(b)), lv)
                starts.append(np.flatnonzero(np.diff(equal_depth)).astype(np.int64) + 1)
        groupings = []
        for i, lv in zip(grouped, chosen[len(columns):], strict=True):
            b = bounds[i]  # with the round cuts added: the ranks the rows get
            parent_of_rank = usable[i][0].of(b.edges)
            values, parent_rank = np.unique(parent_of_rank, return_inverse=True)
            every = np.arange(len(b))
            child_level = np.searchsorted(starts[i], every, side="right")
            # rows per (parent rank, level of the column): what the parent's cuts split
            mass = np.zeros((len(values), levels[i]))
            np.add.at(mass, (parent_rank, child_level), b.mass(every, every))
            groupings.append(Grouping(i, usable[i][0].parent, parent_rank.astype(np.int64), len(values), lv,
                                      even_cuts(mass, lv)))  # fmt: skip
        return cls(curve, tuple(columns), tuple(bounds), levels, tuple(starts), tuple(groupings))

    @property
    def cells(self) -> int:
        """Cells of the grid (groupings included); a grouping's parent being a function of its
        column, fewer of them hold rows."""
        return math.prod(self.levels) * math.prod(g.levels for g in self.groupings)

    def ranks(self, table: pa.Table) -> list[np.ndarray]:
        return [b.ranks(table[c]) for c, b in zip(self.columns, self.boundaries, strict=True)]

    def cell_key(self, ranks: Sequence[np.ndarray]) -> np.ndarray:
        coords = [np.searchsorted(s, r, side="right") for r, s in zip(ranks, self.level_starts, strict=True)]
        coords += [np.searchsorted(g.level_starts, g.parent_rank[ranks[g.index]], side="right") for g in self.groupings]
        bits = [bits_for(lv) for lv in self.levels] + [bits_for(g.levels) for g in self.groupings]
        return curve_key(self.curve, coords, bits)

    def fine_key(self, ranks: Sequence[np.ndarray]) -> np.ndarray:
        coords = [r.astype(np.int64) for r in ranks] + [g.parent_rank[ranks[g.index]] for g in self.groupings]
        bits = [bits_for(max(len(b), 1)) for b in self.boundaries] + [bits_for(g.values) for g in self.groupings]
        return curve_key(self.curve, coords, bits)

    def keys(self, table: pa.Table) -> tuple[np.ndarray, np.ndarray]:
        """(cell key, full sort key = cell key + fine key) as ``(n, bytes)`` uint8 arrays."""
        ranks = self.ranks(table)
        cell = self.cell_key(ranks)
        return cell, np.concatenate([cell, self.fine_key(ranks)], axis=1)

    def describe(self) -> dict[str, object]:
        described: dict[str, object] = {"curve": self.curve, "columns": list(self.columns), "levels": list(self.levels),
                                         "boundaries": [len(b) for b in self.boundaries]}  # fmt: skip
        if self.groupings:
            described["groupings"] = [{"column": self.columns[g.index], "parent": g.parent, "levels": g.levels}
                                      for g in self.groupings]  # fmt: skip
        return described

    def grouped_by(self) -> str:
        """The groupings as ``column<parent:levels`` (empty without any), for logs and commit info."""
        return ",".join(f"{self.columns[g.index]}<{g.parent}:{g.levels}" for g in self.groupings)


MAX_SEARCHED_VALUES = 64  # parents with more values are cut at equal depth, not searched


def even_cuts(mass: np.ndarray, levels: int) -> np.ndarray:
    """Where a parent's ``levels`` start (ranks 1..), given the rows of each of its ranks (in
    order) within each level of its column (``mass[rank, level]``).

    The parent is a function of the column, so most (column level, parent level) cells of an
    equal-depth cut can be empty, leaving fewer, larger cells than the budget paid for; the cuts
    are instead the ones that make the cells most even: the least sum of squared cell masses
    (a dynamic program over contiguous groups of ranks; equal depth past ``MAX_SEARCHED_VALUES``).
    """
    n = mass.shape[0]
    levels = max(1, min(levels, n))
    if levels == 1:
        return np.zeros(0, dtype=np.int64)
    total = mass.sum(axis=1)
    if n > MAX_SEARCHED_VALUES:
        ends = np.cumsum(total) / max(float(total.sum()), 1e-300)
        middle = ends - total / max(float(total.sum()), 1e-300) / 2
        level = np.clip((middle * levels).astype(np.int64), 0, levels - 1)
        return np.flatnonzero(np.diff(level)).astype(np.int64) + 1
    prefix = np.vstack([np.zeros((1, mass.shape[1])), np.cumsum(mass, axis=0)])
    # best[l, e]: least cost of ranks 0..e-1 in l + 1 groups; back[l, e]: where its last group starts
    best = np.full((levels, n + 1), np.inf)
    back = np.zeros((levels, n + 1), dtype=np.int64)
    best[0, 1:] = ((prefix[1:] - prefix[0]) ** 2).sum(axis=1)
    for group in range(1, levels):
        for end in range(group + 1, n + 1):
            starts = np.arange(group, end)
            cost = best[group - 1, starts] + ((prefix[end] - prefix[starts]) ** 2).sum(axis=1)
            at = int(np.argmin(cost))
            best[group, end], back[group, end] = cost[at], starts[at]
    cuts = []
    end = n
    for group in range(levels - 1, 0, -1):
        end = int(back[group, end])
        cuts.append(end)
    return np.asarray(sorted(cuts), dtype=np.int64)


def clustering_depth(actions: pa.Table, paths: Sequence[str] | None, sketches: BoundarySketches, column: str,
                     k: int = 1024) -> float:  # fmt: skip
    """Mean number of the given files (``None``: every file of ``actions``) whose [min, max] of
    ``column`` holds a value (by depth).

    The expected files a point query on ``column`` reads among these files; a well clustered set
    of n files reaches about ``n / levels``, an unclustered one n.
    """
    if paths is None:
        rows = actions
    elif not paths:
        return 0.0
    else:
        rows = actions.filter(pc.is_in(actions["path"], value_set=pa.array(list(paths), pa.string())))
    if f"min.{column}" not in rows.column_names:
        return float(rows.num_rows)
    b = sketches.boundaries(column, k)
    if len(b) == 0:
        return float(rows.num_rows)
    covered = b.mass(b.ranks(rows[f"min.{column}"]), b.ranks(rows[f"max.{column}"]))
    no_stats = rows[f"min.{column}"].is_null().to_numpy(zero_copy_only=False)
    return float(np.where(no_stats, 1.0, covered).sum())  # files without stats must be read


def file_ranges(files: pa.Table, sketches: BoundarySketches, column: str, k: int = 1024) -> tuple[np.ndarray, ...]:
    """Each file's ``[min, max]`` of ``column`` placed by the share of rows below it (0 to 1), by
    the column's boundaries: narrow ranges stacked along the diagonal are a well clustered layout.
    A file without stats for the column spans 0 to 1 (every query on it reads the file); no
    boundaries yet: empty arrays."""
    if f"min.{column}" not in files.column_names or column not in sketches.sketches:
        return np.zeros(0), np.zeros(0)
    b = sketches.boundaries(column, k)
    if len(b) == 0:
        return np.zeros(0), np.zeros(0)
    zero = np.zeros(files.num_rows, dtype=np.int64)
    lo = b.mass(zero, b.ranks(files[f"min.{column}"]) - 1)
    hi = b.mass(zero, b.ranks(files[f"max.{column}"]))
    unknown = files[f"min.{column}"].is_null().to_numpy(zero_copy_only=False)
    return np.where(unknown, 0.0, lo), np.where(unknown, 1.0, hi)

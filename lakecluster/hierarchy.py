"""Parents of string clustering columns: a coarser column each value of it belongs to.

A table often holds a hierarchy flattened: every city has one nation and one region, every brand
one category. A query filtering on the region skips a file by the region's statistics, which are
tight only when the file holds cities of few regions. Sorted by name, the cities of one region are
scattered (ALGERIA, ETHIOPIA and KENYA are African, ARGENTINA and BRAZIL American), so levels cut
on the city's own order mix the regions; a brand's category is its prefix, so the brand's order
already keeps each category together.

A string column's order carries no meaning beyond the statistics it makes tight, so the layout can
also cut it by such a parent (``ClusteringLayout``'s groupings): each city level is split by region
levels, a file then holds the cities of few regions, and still an alphabetical range of them. A
parent is found in a sample of the table's rows: a column with fewer values, one per value of the
child in every sampled row, whose values the child's order does *not* keep together (it forms at
least ``MIN_RUNS_PER_VALUE`` times as many runs as it has values); of several, the one with the
fewest values. Numbers and dates keep their own order: it is the one their queries ask by.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lakecluster.config import Config
from lakecluster.stats_columns import stats_columns

MIN_ROWS_PER_VALUE = 4  # sampled rows per child value before a dependency is believed
MIN_RUNS_PER_VALUE = 2.0  # how scattered a parent must be along the child's order to be worth a dimension


@dataclass(frozen=True)
class Parent:
    """``parent`` is a function of ``column``: ``parent_values[i]`` is the parent of ``child_values[i]``
    (child values sorted, as the sample held them)."""

    column: str
    parent: str
    child_values: np.ndarray
    parent_values: np.ndarray

    def truncated(self, chars: int) -> Parent | None:
        """This parent with the child's values cut to ``chars`` characters (as sketches cut
        strings); None when two values alike in those characters have different parents."""
        cut = np.asarray([v[:chars] for v in self.child_values], dtype=object)
        values, first, inverse = np.unique(cut, return_index=True, return_inverse=True)
        if len(values) == len(cut):
            return Parent(self.column, self.parent, cut, self.parent_values)
        chosen = self.parent_values[first]
        if np.any(chosen[inverse.ravel()] != self.parent_values):
            return None
        return Parent(self.column, self.parent, values, chosen)

    def of(self, values: np.ndarray) -> np.ndarray:
        """The parent of each child value; a value the sample did not hold takes its sorted
        predecessor's (its first neighbour's below the first)."""
        at = np.clip(np.searchsorted(self.child_values, values, side="right") - 1, 0, len(self.child_values) - 1)
        return self.parent_values[at]


def one_each(group: np.ndarray, code: np.ndarray, groups: int) -> np.ndarray | None:
    """The one ``code`` of each of ``groups`` groups (-1 for a group no row is in), given each
    row's ``group`` and ``code``; None when some group holds two codes."""
    low = np.full(groups, np.iinfo(np.int64).max, dtype=np.int64)
    high = np.full(groups, -1, dtype=np.int64)
    np.minimum.at(low, group, code)
    np.maximum.at(high, group, code)
    if np.any((high >= 0) & (low != high)):
        return None
    return high


def _dense(column: pa.ChunkedArray | pa.Array) -> tuple[np.ndarray, pa.Array]:
    """(code of each row, the distinct values sorted) with codes in that sorted order."""
    values = pc.unique(column)
    values = values.take(pc.sort_indices(values))
    return np.asarray(pc.index_in(column, value_set=values).to_numpy(zero_copy_only=False)), values


def find_parents(sample: pa.Table, children: Sequence[str], candidates: Sequence[str]) -> dict[str, Parent]:
    """For each string column in ``children``, its parent among ``candidates`` (see above), if any.

    Rows where the child or a candidate is null do not count for (or against) that pair; a
    candidate that is itself one of ``children`` is skipped (it is cut by its own levels).
    """
    found: dict[str, Parent] = {}
    for child in children:
        ranked = parent_choices(sample, child, [c for c in candidates if c not in children])
        if ranked:
            found[child] = ranked[0]
    return found


def parent_choices(sample: pa.Table, child: str, candidates: Sequence[str]) -> list[Parent]:
    """Every one of ``candidates`` that is a parent of ``child`` (see above), best first: fewest
    values, then the order of ``candidates``. :func:`find_parents` takes the first; without some
    candidates, the first of the others is what it would take (each pair is judged on its own)."""
    if child not in sample.column_names or not pa.types.is_string(sample.schema.field(child).type):
        return []
    found: list[tuple[int, int, Parent]] = []
    for order, other in enumerate(candidates):
        if other == child or other not in sample.column_names:
            continue
        both = sample.select([child, other]).filter(pc.and_(pc.is_valid(sample[child]), pc.is_valid(sample[other])))
        if both.num_rows == 0:
            continue
        codes, child_values = _dense(both[child])
        n = len(child_values)
        if n < 2 or both.num_rows < MIN_ROWS_PER_VALUE * n:
            continue
        parent_codes, parent_values = _dense(both[other])
        p = len(parent_values)
        if not 2 <= p < n:
            continue
        low = one_each(codes, parent_codes, n)  # every child value has rows: none is -1
        if low is None:
            continue  # a child value with two parents
        runs = 1 + int(np.count_nonzero(np.diff(low)))
        if runs < MIN_RUNS_PER_VALUE * p:
            continue  # the child's order already keeps the parent's values together
        values = np.asarray(child_values.to_pylist(), dtype=object)
        parents = np.asarray(parent_values.to_pylist(), dtype=object)[low]
        found.append((p, order, Parent(child, other, values, parents)))
    return [parent for _, _, parent in sorted(found, key=lambda f: f[:2])]


def parent_candidates(config: Config, configuration: Mapping[str, str]) -> list[str]:
    """The columns a clustering column's parent (``lakecluster.hierarchy``) may be, under the
    table's properties ``configuration``: those files carry stats for (only they let a query
    skip), partition columns and floating-point columns aside (a city has no one price)."""
    t = config.table
    data_columns = [c.name for c in t.columns if c.name not in t.partition_by]
    return [c for c in stats_columns(data_columns, configuration) if t.column(c).type not in ("float", "double")]

"""Recommend clustering columns, their weights and the partitioning for a workload of predicates.

Every candidate layout is scored by the files each query of the workload would read once the
table is laid out that way, predicted from a sample of the table's rows (no rewrite is tried):

* a partition of ``b`` bytes holds ``n = max(1, round(b / target_file_bytes))`` files, laid out as
  the compactor lays out a group: each clustering column cut into ``levels`` (``choose_levels``,
  the compactor's own rule, capped by the column's distinct values), at equal depth with each cut
  moved to the roundest value nearby (``cuts.level_cuts``: year starts, brand prefixes);
* a query reads the levels of a clustering column whose range (their sample rows' [min, max], as
  a file's statistics) admits every predicate of the query on that column or on a column in one
  hierarchy with it: a function of it (``d_year`` of ``lo_orderdate``, ``s_region`` of
  ``s_city``) or one it is a function of (``s_nation`` for ``s_region``). A column the query
  filters through no such predicate is read whole;
* the query reads ``max(1, n * prod(share of the partition's rows in the levels read, per
  column))`` files of each partition its predicates on the partition column do not prune (every
  partition without one).

Candidates: every set of the ``MAX_COLUMNS`` columns the workload filters on most often, each with
equal weights and with the weights that minimise the objective (coordinate descent; ``OBJECTIVES``:
the mean, or first the queries reading more than on Delta's equal-bits layout of the table's
columns, ``reference``), partitioned by nothing or by one of the filtered columns with at most
``MAX_PARTITIONS`` values; and the table's current settings, scored the same way. The counts are
estimates of the same model ``lakecluster tune`` and the compactor's layout use, for comparing
candidates, not a promise.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lakecluster.clustering import choose_levels, even_cuts
from lakecluster.cuts import Unit, level_cuts
from lakecluster.errors import LakeclusterError
from lakecluster.hierarchy import parent_choices
from lakecluster.sketches import numeric_values
from lakecluster.workload.queries import Predicate, Query, WorkloadError

MAX_PARTITIONS = 1000
MAX_WEIGHT = 16.0  # a column weighted 16 gets about 16 times the levels of one weighted 1 (choose_levels)
MIN_PARTITION_FILES = 1.0  # a partition smaller than a file is still one file
MIN_ROWS_PER_VALUE = 10  # a column with fewer sampled rows per value determines no other one
# What the search minimises (``Scored.objective``): "mean", the files read on average (the default);
# "no-query-worse", first the share of the queries that read more files than on the equal-bits
# layout Delta's own clustering gives the table's clustering columns, then the mean.
OBJECTIVES = ("mean", "no-query-worse")
RANGE_IDS = 1000  # range ids per column of Delta's Z-order and Hilbert keys (``rangeId.max``)


@dataclass(frozen=True)
class Candidate:
    clustering_columns: tuple[str, ...]
    weights: tuple[float, ...]
    partition_by: tuple[str, ...]
    current: bool = False

    def describe(self) -> dict[str, Any]:
        return {"clustering_columns": list(self.clustering_columns),
                "column_weights": dict(zip(self.clustering_columns, self.weights, strict=True)),
                "partition_by": list(self.partition_by), "current": self.current}  # fmt: skip


@dataclass
class Scored:
    candidate: Candidate
    files: int
    files_read: list[float] = field(default_factory=list)
    weights: list[float] = field(default_factory=list)  # per query, its ``Query.weight``
    # per query, the files it reads on the equal-bits layout of the table's columns (``equal_bits_levels``)
    reference: list[float] = field(default_factory=list)
    objective_kind: str = "mean"  # one of OBJECTIVES

    @property
    def mean_files_read(self) -> float:
        """Files read per query, each query counted ``weight`` times (1 each for a workload file)."""
        weights = self.weights or [1.0] * len(self.files_read)
        return sum(w * f for w, f in zip(weights, self.files_read, strict=True)) / sum(weights)

    @property
    def worse_than_reference(self) -> list[int]:
        """The queries that read more files than on the equal-bits layout (``WorkloadModel.reference``)
        (Delta's ``OPTIMIZE ZORDER BY`` and liquid clustering); a tie is no loss; none when not
        scored against it (no ``reference``)."""
        if not self.reference:
            return []
        return [q for q, (f, r) in enumerate(zip(self.files_read, self.reference, strict=True))
                if f > r + 1e-9]  # fmt: skip

    @property
    def objective(self) -> tuple[float, float]:
        """What the search minimises, smallest first: with ``mean``, the mean files read alone (the
        first term is 0); with ``no-query-worse``, the share of the queries (by weight) that read
        more files than on the equal-bits layout, then the mean."""
        if self.objective_kind == "mean":
            return 0.0, round(self.mean_files_read, 6)
        weights = self.weights or [1.0] * len(self.files_read)  # as mean_files_read counts them
        worse = sum(weights[q] for q in self.worse_than_reference) / max(sum(weights), 1e-300)
        return round(worse, 6), round(self.mean_files_read, 6)


class WorkloadModel:
    """Per query and column, the sample rows of each piece its predicate selects."""

    def __init__(self, queries: Sequence[Query], sample: pa.Table, weights: np.ndarray, table_bytes: int,
                 target_file_bytes: int, parent_candidates: Sequence[str] = (),
                 boundaries: int = 1024, objective: str = OBJECTIVES[0],
                 reference_layout: tuple[Sequence[str], Sequence[str]] | None = None) -> None:  # fmt: skip
        """``parent_candidates``: the sample's columns a string clustering column may be cut by
        too (``compaction.group_by_parents``; none: the model cuts each column by its own levels),
        when it has at most ``boundaries`` values (``sketches.boundaries``), as the compactor does.
        ``objective``: what ``Scored.objective`` of the layouts it scores minimises (``OBJECTIVES``).
        ``reference_layout``: the (clustering columns, partition columns) every layout is compared
        with on the equal-bits layout (``reference``), one bar for candidates of different columns
        (the table's current ones, in ``layout_advice``); None: each layout's own columns."""
        if objective not in OBJECTIVES:
            raise ValueError(f"objective {objective!r} is not one of {', '.join(OBJECTIVES)}")
        self.objective = objective
        self.reference_layout = (None if reference_layout is None
                                 else (tuple(reference_layout[0]), tuple(reference_layout[1])))  # fmt: skip
        if sample.num_rows == 0:
            raise LakeclusterError("the table has no rows to sample: ingest some data before asking for a layout")
        self.queries = list(queries)
        self.sample = sample
        self.weights = np.asarray(weights, dtype=float)
        self.rows = sample.num_rows
        self.table_bytes = table_bytes
        self.target_file_bytes = target_file_bytes
        self.ndv = {c: max(1, pc.count_distinct(sample[c]).as_py()) for c in sample.column_names}
        # pieces[q][column]: the sample's row numbers of each contiguous piece of the column
        self.pieces: list[dict[str, list[np.ndarray]]] = [
            {p.column: self._rows(q, p) for p in q.predicates if p.column in sample.column_names} for q in queries
        ]
        for q, pieces in zip(self.queries, self.pieces, strict=True):
            for column in sample.column_names:
                derived = self._derived(q, column)
                if derived is not None:
                    pieces[column] = derived
        self.parent_candidates = tuple(parent_candidates)
        self._reads: dict[tuple[Any, ...], tuple[float, ...]] = {}  # per layout (``score``), its queries' reads
        self.boundaries = boundaries

    def _derived(self, query: Query, column: str) -> list[np.ndarray] | None:
        """The pieces of ``column`` a query selects through predicates on columns that are a function
        of it (d_year of lo_orderdate, s_region of s_city), for the partitions it prunes: the files
        of a partition by ``column`` hold one value of those columns, and their statistics skip them.
        Each run of adjacent values of ``column`` whose rows the predicates select is one piece;
        None when no predicate on another column depends on it."""
        others = [p for p in query.predicates
                  if p.column != column and p.column in self.sample.column_names and self._depends(p.column, column)]
        if not others:
            return None
        selected = np.ones(self.rows, dtype=bool)
        for p in [*others, *(p for p in query.predicates if p.column == column)]:
            mask = np.zeros(self.rows, dtype=bool)
            for piece in self._rows(query, p):
                mask[piece] = True
            selected &= mask
        if not selected.any():
            return [_NONE]
        codes = self._order(column)
        rows = np.flatnonzero(selected)
        values = np.unique(codes[rows])
        run = np.cumsum(np.r_[0, np.diff(values) > 1])  # the run of adjacent values each selected value is in
        of_row = run[np.searchsorted(values, codes[rows])]
        return [rows[of_row == r].astype(np.int32) for r in range(int(run[-1]) + 1)]

    @functools.cache  # noqa: B019 - one model per command; the cache dies with it
    def _order(self, column: str) -> np.ndarray:
        """Each sample row's value of ``column`` as its rank among the column's distinct values."""
        encoded = pc.dictionary_encode(self.sample[column], null_encoding="encode").combine_chunks()
        ranks = np.asarray(pc.rank(encoded.dictionary, sort_keys="ascending", tiebreaker="dense"))
        return ranks[np.asarray(encoded.indices)]

    @functools.cache  # noqa: B019 - one model per command; the cache dies with it
    def _depends(self, dependent: str, on: str) -> bool:
        """Whether every sampled value of ``on`` comes with one value of ``dependent`` (and ``on`` has
        at least ``MIN_ROWS_PER_VALUE`` rows per value, so that a near-unique column is not taken to
        determine every other one)."""
        if self.ndv[on] * MIN_ROWS_PER_VALUE > self.rows or self.ndv[dependent] <= 1:
            return False
        values = self._order(on).astype(np.int64)
        pairs = np.unique(values * (int(self._order(dependent).max()) + 1) + self._order(dependent))
        return len(pairs) == len(np.unique(values))

    def _rows(self, query: Query, p: Predicate) -> list[np.ndarray]:
        column = self.sample[p.column]
        try:
            if p.kind == "eq":
                return [_selected(pc.equal(column, column_scalar(v, column.type))) for v in p.values] or [_NONE]
            selected = pa.array(np.ones(self.rows, dtype=bool))
            if p.low is not None:
                selected = pc.and_(selected, pc.greater_equal(column, column_scalar(p.low, column.type)))
            if p.high is not None:
                selected = pc.and_(selected, pc.less_equal(column, column_scalar(p.high, column.type)))
            return [_selected(selected)]
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, TypeError) as e:
            raise WorkloadError(f"cannot compare {p.column} ({column.type}) with the query's value: {e}: "
                                f"{query.text}", line=query.line) from None  # fmt: skip

    def usage(self) -> dict[str, float]:
        """How often each column is filtered on, each query counted ``weight`` times; most used
        first (on a tie, the first one the workload names)."""
        used: dict[str, float] = {}
        for q in self.queries:
            for c in sorted(q.columns, key=[p.column for p in q.predicates].index):
                if c in self.sample.column_names:
                    used[c] = used.get(c, 0.0) + q.weight
        return dict(sorted(used.items(), key=lambda kv: -kv[1]))

    def partition_columns(self) -> list[str]:
        return [c for c in self.usage() if self.ndv[c] <= MAX_PARTITIONS]

    def score(self, candidate: Candidate) -> Scored:
        view = self._partitioned(candidate.partition_by)
        cols = candidate.clustering_columns
        # a column with a parent that is no clustering column is cut by it too, out of the same budget
        taken = tuple(sorted({*cols, *candidate.partition_by}))  # never a parent, as in the compactor
        parent = tuple(self._parent(c, taken) for c in cols)
        grouped = [i for i, p in enumerate(parent) if p is not None]
        caps = [self.ndv[c] for c in cols] + [self.ndv[str(parent[i])] for i in grouped]
        weights = list(candidate.weights) + [candidate.weights[i] for i in grouped]
        levels = {int(n): _levels_for(int(n), tuple(caps), tuple(weights)) for n in np.unique(view.files)}
        files_read = self._files_read(cols, candidate.partition_by, parent, levels)
        return Scored(candidate, int(view.files.sum()), list(files_read), weights=[q.weight for q in self.queries],
                      reference=list(self.reference(*(self.reference_layout or (cols, candidate.partition_by)))),
                      objective_kind=self.objective)  # fmt: skip

    @functools.cache  # noqa: B019 - one model per command; the cache dies with it
    def reference(self, cols: tuple[str, ...], partition_by: tuple[str, ...]) -> tuple[float, ...]:
        """Per query, the files it reads when every partition is laid out on ``cols`` as a Z-order or
        Hilbert curve on equal bits of each column's range ids lays it out (``equal_bits_levels``:
        Delta's ``OPTIMIZE ZORDER BY`` and liquid clustering), no column cut by a parent."""
        view = self._partitioned(partition_by)
        caps = tuple(self.ndv[c] for c in cols)
        levels = {int(n): equal_bits_levels(int(n), caps) for n in np.unique(view.files)}
        return self._files_read(cols, partition_by, (None,) * len(cols), levels, rounded=False)

    def _files_read(self, cols: tuple[str, ...], partition_by: tuple[str, ...], parent: tuple[str | None, ...],
                    levels: dict[int, tuple[int, ...]], rounded: bool = True) -> tuple[float, ...]:  # fmt: skip
        """Per query, the files it reads when each partition of ``n`` files is cut into ``levels[n]``
        (the columns', then those of the parents of the columns that have one), at round values
        as the compactor cuts (``rounded``) or at plain equal depth."""
        # weights that lead to the same levels are the same layout: its reads are computed once
        known = (cols, partition_by, parent, tuple(sorted(levels.items())), rounded)
        if known in self._reads:
            return self._reads[known]
        view = self._partitioned(partition_by)
        grouped = [i for i, p in enumerate(parent) if p is not None]
        level_rows = np.array([levels[int(n)] for n in view.files], dtype=np.int64)  # partitions x dimensions
        parent_levels = np.ones((len(view.files), len(cols)), dtype=np.int64)
        for k, i in enumerate(grouped):
            parent_levels[:, i] = level_rows[:, len(cols) + k]
        files_read = []
        for q in range(len(self.queries)):
            fraction = np.ones(len(view.files))
            for i, c in enumerate(cols):
                if not self._filters(q, c) and (parent[i] is None or not self._filters(q, str(parent[i]))):
                    continue
                for lv, plv in {(int(a), int(b)) for a, b in zip(level_rows[:, i], parent_levels[:, i], strict=True)}:
                    at = (level_rows[:, i] == lv) & (parent_levels[:, i] == plv)
                    by = parent[i] if plv > 1 else None
                    fraction[at] *= self._levels_read(q, c, partition_by, lv, by, plv, rounded)[at]
            files_read.append(float(np.maximum(1.0, view.files * fraction)[view.read[q]].sum()))
        self._reads[known] = tuple(files_read)
        return self._reads[known]

    def _parent(self, column: str, taken: tuple[str, ...]) -> str | None:
        """``column``'s parent (``lakecluster.hierarchy``) as the compactor would find it were the
        column a clustering column beside ``taken`` (clustering and partition columns, never parents)."""
        return next((p for p in self._parent_choices(column) if p not in taken), None)

    @functools.cache  # noqa: B019 - one model per command; the cache dies with it
    def _parent_choices(self, column: str) -> tuple[str, ...]:
        """``column``'s possible parents, best first: searched once per column, not once per layout."""
        if self.ndv[column] > self.boundaries:
            return ()  # the compactor groups only a column whose boundaries are its values
        return tuple(p.parent for p in parent_choices(self.sample, column, self.parent_candidates))

    def _related(self, column: str, other: str) -> bool:
        """Whether ``other`` is ``column`` or in one hierarchy with it (a function of it, or it of ``other``)."""
        return other == column or (other in self.sample.column_names
                                   and (self._depends(other, column) or self._depends(column, other)))  # fmt: skip

    def _filters(self, q: int, column: str) -> bool:
        return any(self._related(column, p.column) for p in self.queries[q].predicates)

    @functools.cache  # noqa: B019 - one model per command; the cache dies with it
    def _levels(self, column: str, levels: int, rounded: bool = True) -> np.ndarray:
        """Each sample row's level when ``column`` is cut into ``levels`` as the compactor cuts it: at
        equal depth, each cut moved to the roundest value nearby (``cuts.level_cuts``); not
        ``rounded``: at the values nearest equal depth, as range ids cut it."""
        array = self.sample[column].combine_chunks()
        kind = array.type
        if pa.types.is_string(kind) or pa.types.is_large_string(kind):
            values = np.asarray(pc.fill_null(array, "").to_pylist(), dtype=str)
            unit: Unit = "string"
        else:
            numbers = numeric_values(array)
            values = np.where(np.isnan(numbers), -np.inf, numbers)  # nulls: the first level, as ranks put them
            unit = "date" if pa.types.is_date(kind) else "timestamp" if pa.types.is_timestamp(kind) else "number"
        edges, inverse = np.unique(values, return_inverse=True)
        mass = np.bincount(inverse.ravel(), weights=self.weights, minlength=len(edges))
        starts = np.r_[0.0, np.cumsum(mass)[:-1]] / max(float(mass.sum()), 1e-300)
        if rounded:
            cuts = level_cuts(edges, starts, levels, unit)
        else:
            at = np.searchsorted(starts, np.arange(1, max(levels, 1)) / max(levels, 1), side="left")
            cuts = edges[np.unique(at[(at > 0) & (at < len(edges))])]
        return np.searchsorted(cuts, edges, side="right")[inverse.ravel()].astype(np.int64)

    @functools.cache  # noqa: B019 - one model per command; the cache dies with it
    def _levels_read(self, q: int, column: str, partition_by: tuple[str, ...], levels: int,
                     parent: str | None = None, parent_levels: int = 1,
                     rounded: bool = True) -> np.ndarray:  # fmt: skip
        """Per partition, the share of its rows in the levels of ``column`` query ``q`` reads: a level
        is skipped when, for a predicate on the column or on a column in one hierarchy with it, the
        level's range of that column (its rows' [min, max], as a file's statistics) admits none of
        the values the predicate selects. With a ``parent``, the levels are those of the column
        split by ``parent_levels`` of the parent, as the compactor cuts them."""
        mass, parts, width = self._cells(column, partition_by, levels, parent, parent_levels, rounded)
        read = mass > 0
        for i, p in enumerate(self.queries[q].predicates):
            if not self._related(column, p.column) and (parent is None or not self._related(parent, p.column)):
                continue
            low, high = self._cell_ranges(column, partition_by, levels, p.column, parent, parent_levels, rounded)
            chosen = self._chosen(q, i)
            read &= np.searchsorted(chosen, low, "left") < np.searchsorted(chosen, high, "right")
        share = np.where(read, mass, 0.0).reshape(parts, width).sum(axis=1)
        return share / np.maximum(self._partitioned(partition_by).part_rows, 1e-300)

    @functools.cache  # noqa: B019 - one model per command; the cache dies with it
    def _cell(self, column: str, partition_by: tuple[str, ...], levels: int, parent: str | None = None,
              parent_levels: int = 1, rounded: bool = True) -> tuple[np.ndarray, int]:  # fmt: skip
        """Each sample row's cell (partition x level of ``column``, x level of its parent when it has
        one), and the levels per partition."""
        level = self._levels(column, levels, rounded)
        if parent is not None and parent_levels > 1:
            level = level * parent_levels + self._parent_levels(column, levels, parent, parent_levels)
        width = int(level.max()) + 1
        return self._partitioned(partition_by).codes * width + level, width

    @functools.cache  # noqa: B019 - one model per command; the cache dies with it
    def _parent_levels(self, column: str, levels: int, parent: str, parent_levels: int) -> np.ndarray:
        """Each sample row's level of ``parent`` cut into ``parent_levels`` as the compactor cuts it
        beside ``column``'s ``levels`` (``layout.even_cuts``)."""
        own = self._levels(column, levels)
        ranks = self._order(parent).astype(np.int64)
        ranks -= ranks.min()
        mass = np.zeros((int(ranks.max()) + 1, int(own.max()) + 1))
        np.add.at(mass, (ranks, own), self.weights)
        return np.searchsorted(even_cuts(mass, parent_levels), ranks, side="right").astype(np.int64)

    @functools.cache  # noqa: B019 - one model per command; the cache dies with it
    def _cells(self, column: str, partition_by: tuple[str, ...], levels: int, parent: str | None = None,
               parent_levels: int = 1, rounded: bool = True) -> tuple[np.ndarray, int, int]:  # fmt: skip
        """The rows each cell stands for, the partitions, and the levels per partition."""
        cell, width = self._cell(column, partition_by, levels, parent, parent_levels, rounded)
        parts = len(self._partitioned(partition_by).files)
        return np.bincount(cell, weights=self.weights, minlength=parts * width), parts, width

    @functools.cache  # noqa: B019 - one model per command; the cache dies with it
    def _cell_ranges(self, column: str, partition_by: tuple[str, ...], levels: int, other: str,
                     parent: str | None = None, parent_levels: int = 1,
                     rounded: bool = True) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
        """Per cell, the smallest and largest rank of ``other`` among its rows (a file's min and max
        statistics of that column); the same for every query, so computed once."""
        cell, width = self._cell(column, partition_by, levels, parent, parent_levels, rounded)
        size = len(self._partitioned(partition_by).files) * width
        ranks = self._order(other)
        low = np.full(size, np.iinfo(np.int64).max, dtype=np.int64)
        high = np.full(size, -1, dtype=np.int64)
        np.minimum.at(low, cell, ranks)
        np.maximum.at(high, cell, ranks)
        return low, high

    @functools.cache  # noqa: B019 - one model per command; the cache dies with it
    def _chosen(self, q: int, predicate: int) -> np.ndarray:
        """The ranks of the values predicate number ``predicate`` of query ``q`` selects, sorted."""
        query = self.queries[q]
        p = query.predicates[predicate]
        ranks = self._order(p.column)
        return np.unique(np.concatenate([ranks[rows] for rows in self._rows(query, p)]))

    @functools.cache  # noqa: B019 - one model per command; the cache dies with it
    def _partitioned(self, partition_by: tuple[str, ...]) -> _Partitioned:
        """Files per partition, and per query the partitions read."""
        return _partition_view(self, partition_by)


def _partition_view(model: WorkloadModel, partition_by: tuple[str, ...]) -> _Partitioned:
    """``model``'s files per partition of ``partition_by``, and per query the partitions it reads."""
    if partition_by:
        codes = _codes(model.sample, partition_by)
        parts = int(codes.max()) + 1
    else:
        codes, parts = np.zeros(model.rows, dtype=np.int64), 1
    part_rows = np.bincount(codes, weights=model.weights, minlength=parts)
    share = part_rows / part_rows.sum()
    files = np.maximum(MIN_PARTITION_FILES, np.round(model.table_bytes * share / model.target_file_bytes))
    view = _Partitioned(files, codes, part_rows)
    for pieces in model.pieces:
        read = np.ones(parts, dtype=bool)
        for c in partition_by:
            if c in pieces:  # the partitions none of whose sampled rows match are pruned
                read &= np.bincount(codes[np.concatenate(pieces[c])], minlength=parts) > 0
        view.read.append(read)
    return view


@dataclass
class _Partitioned:
    files: np.ndarray
    codes: np.ndarray  # each sample row's partition
    part_rows: np.ndarray  # rows each partition stands for
    read: list[np.ndarray] = field(default_factory=list)


@functools.lru_cache(maxsize=4096)
def equal_bits_levels(cells: int, caps: tuple[int, ...], range_ids: int = RANGE_IDS) -> tuple[int, ...]:
    """Levels per column of a Z-order or Hilbert curve on equal bits of each column's range ids,
    as Delta's ``OPTIMIZE ZORDER BY`` and liquid clustering lay out ``cells`` files: a column of
    ``cap`` distinct values has ``min(cap, range_ids)`` ids in ``ceil(log2)`` bits, and the curve
    takes the bits most significant first, interleaved in the columns' order, so the first ones
    go to the columns with most ids (a 5-value region's three bits are the last ones). Bits are
    taken while the cells stay within 1.15 times ``cells``, the bound ``choose_levels`` keeps."""
    ids = [max(1, min(int(c), range_ids)) for c in caps]
    bits = [math.ceil(math.log2(n)) if n > 1 else 0 for n in ids]
    levels = [1] * len(caps)
    limit = 1.15 * max(cells, 1)
    for position in range(max(bits, default=0), 0, -1):
        for i, b in enumerate(bits):
            if b >= position:
                more = min(levels[i] * 2, ids[i])
                if math.prod(levels) // levels[i] * more > limit:
                    return tuple(levels)
                levels[i] = more
    return tuple(levels)


@functools.lru_cache(maxsize=65_536)
def _levels_for(cells: int, caps: tuple[int, ...], weights: tuple[float, ...]) -> tuple[int, ...]:
    """``choose_levels``, once per input: the weight search asks for the same levels many times."""
    return choose_levels(cells, caps, weights)


def column_scalar(value: Any, type_: pa.DataType) -> pa.Scalar:
    try:
        return pa.scalar(value).cast(type_)  # '1995-01-01' for a date column, 7 for a float one
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return pa.scalar(value)  # the comparison's own casting rules decide (2.5 against an int column)


def _selected(selected: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Row numbers where ``selected`` is true (null: false), compact for the selective pieces."""
    return np.flatnonzero(np.asarray(pc.fill_null(selected, False).to_numpy(zero_copy_only=False))).astype(np.int32)


_NONE = np.zeros(0, dtype=np.int32)


def _codes(sample: pa.Table, columns: Sequence[str]) -> np.ndarray:
    """A dense partition number per sample row."""
    combined = np.zeros(sample.num_rows, dtype=np.int64)
    for c in columns:
        k = np.asarray(pc.dictionary_encode(sample[c], null_encoding="encode").combine_chunks().indices)
        combined = combined * (int(k.max()) + 1) + k
    _, dense = np.unique(combined, return_inverse=True)
    return dense.astype(np.int64)

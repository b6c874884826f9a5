"""``lakecluster tune --queries/--from-workload`` on a table: a stratified sample of its rows,
the cost model built on it, the candidates ranked, and whether the best is a recommendation."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from lakecluster.hierarchy import parent_candidates
from lakecluster.layout.model import OBJECTIVES, Candidate, Scored, WorkloadModel
from lakecluster.layout.partition_sizes import PartitionSizes
from lakecluster.layout.search import recommend, recommend_weights, why_no_recommendation
from lakecluster.log_stats import partition_array
from lakecluster.schema import ColumnSpec, arrow_type
from lakecluster.table import DeltaLocation, LakeTable, table_properties
from lakecluster.table.file_rows import file_head
from lakecluster.table.live_files import DataFile, data_files, typed_partitions
from lakecluster.workload.queries import Query

MIN_STRATUM_ROWS = 100  # rows sampled from even the smallest partition


def sample_rows(location: DeltaLocation, files: Sequence[DataFile], columns: Sequence[ColumnSpec], limit: int,
                seed: int = 0) -> tuple[pa.Table, np.ndarray]:  # fmt: skip
    """About ``limit`` live rows of ``columns`` from every partition of the table in proportion to
    its rows (at least a few from each), and per row the number of the table's rows it stands for.
    Partition columns among ``columns`` take their values from each file's partition."""
    strata: dict[tuple[tuple[str, str | None], ...], list[DataFile]] = {}
    for f in files:
        strata.setdefault(f.partition, []).append(f)
    total = sum(f.rows for f in files)
    floor = max(1, min(MIN_STRATUM_ROWS, limit // max(1, len(strata))))
    rng = random.Random(seed)
    partition_names = {p for f in files for p, _ in f.partition}
    data = pa.schema([pa.field(c.name, arrow_type(c)) for c in columns if c.name not in partition_names])
    parts, weights = [], []
    for members in strata.values():
        stratum_rows = sum(f.rows for f in members)
        wanted = min(stratum_rows, max(floor, round(limit * stratum_rows / max(total, 1))))
        rng.shuffle(members)
        taken = 0
        for f in members:
            if taken >= wanted:
                break
            piece = file_head(location.fs, location.root, f, min(f.rows, wanted - taken), data)
            value = dict(f.partition)
            parts.append(pa.table({c.name: piece[c.name] if c.name in data.names
                                   else partition_array(c, [value.get(c.name)] * piece.num_rows)
                                   for c in columns}))  # fmt: skip
            taken += piece.num_rows
        if taken:
            weights.append(np.full(taken, stratum_rows / taken))
    if not parts:
        return pa.table({c.name: pa.array([], arrow_type(c)) for c in columns}), np.zeros(0)
    return pa.concat_tables(parts).combine_chunks(), np.concatenate(weights)


@dataclass
class Advice:
    """Candidate layouts for a workload scored on a sample of the table, best first, and why the
    best is not recommended (``withheld``; None: it is)."""

    version: int
    files: list[DataFile]
    sample_rows: int
    ranked: list[Scored]
    withheld: str | None
    actions: pa.Table  # the live files' rows of ``files``: path, typed partition values, min/max of the queried columns

    @property
    def current(self) -> Scored:
        return next(s for s in self.ranked if s.candidate.current)

    @property
    def best(self) -> Scored | None:
        return None if self.withheld else self.ranked[0]

    @property
    def table_bytes(self) -> int:
        return sum(f.size for f in self.files)

    @property
    def table_rows(self) -> int:
        return sum(f.rows for f in self.files)


def current_candidate(columns: Sequence[str], weights: dict[str, float], partition_by: Sequence[str]) -> Candidate:
    """The layout in effect, marked as the current one."""
    return Candidate(tuple(columns), tuple(weights.get(c, 1.0) for c in columns), tuple(partition_by), current=True)


def layout_advice(lake: LakeTable, queries: Sequence[Query], *, current: Candidate, sample_limit: int,
                  partitionings: Sequence[tuple[str, ...]] | None = None,
                  keep_columns: bool = False, min_gain: float = 0.0,
                  objective: str = OBJECTIVES[0]) -> Advice:  # fmt: skip
    """Score the candidate layouts for ``queries`` on a sample of ``lake``'s latest version; with
    ``keep_columns``, only the weights of the current clustering columns (``recommend_weights``).
    The best is withheld when it reads less than ``min_gain`` fewer files than the current layout
    and has no fewer queries worse than on the equal-bits layout (``objective``: ``OBJECTIVES``).

    Raises:
        WorkloadError: a query compares a column with a value of another type.
        LakeclusterError: the table has no rows.
    """
    config = lake.config
    t = config.table
    live = lake.live_files()  # the handle's one view of the live files, kept current from the log
    used = {c for q in queries for c in q.columns}
    parents: list[str] = []
    if config.compaction.group_by_parents:  # the columns the compactor looks for parents among
        parents = parent_candidates(config, table_properties(live.snapshot_with_metadata()[2].configuration))
    wanted = used | set(current.clustering_columns) | set(t.partition_by) | set(parents)
    columns = [c for c in t.columns if c.name in wanted]
    version, rows, _ = live.with_stats(columns)  # the bounds of the columns the queries filter on too
    files = data_files(rows, t.partition_by)
    sample, weights = sample_rows(lake.delta, files, columns, sample_limit)
    target = config.compaction.target_file_bytes
    model = WorkloadModel(queries, sample, weights, sum(f.size for f in files), target, parent_candidates=parents,
                          boundaries=config.sketches.boundaries, objective=objective,
                          reference_layout=(current.clustering_columns, current.partition_by))  # fmt: skip
    ranked = recommend_weights(model, current) if keep_columns else recommend(model, current,
                                                                               partitionings=partitionings)
    withheld = why_no_recommendation(ranked, PartitionSizes.of_data_files(files), target, min_gain=min_gain)
    actions = typed_partitions(rows, [t.column(p) for p in t.partition_by])
    return Advice(version, files, sample.num_rows, ranked, withheld, actions)

"""Clustering depth of the live files, kept as counts of their distinct bounds.

The depth of a column (``layout.clustering_depth``: the files a point query reads, on average over
the column's rows) is a sum over files of the share of rows between the file's min and max, which
splits into a sum over its mins and a sum over its maxes. So the live files' bounds are kept as
counts per distinct value, brought forward by each refresh's removed and added files
(``LiveFiles.changes``): evaluating the depth under new boundaries (the stream moves them with
every micro-batch) costs the distinct bound values, not the files.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lakecluster.sketches import BoundarySketches
from lakecluster.table.live_files import LiveFiles


class BoundCounts:
    """One column's file bounds: how many live files have each min and each max."""

    def __init__(self, column: str, value_type: pa.DataType) -> None:
        self.column = column
        self.files = 0
        self.without_stats = 0  # files without a min (every query reads them)
        self.mins = self._counts(pa.array([], value_type), pa.array([], pa.int64()))
        self.maxes = self._counts(pa.array([], value_type), pa.array([], pa.int64()))

    @staticmethod
    def _counts(values: pa.Array | pa.ChunkedArray, counts: pa.Array | pa.ChunkedArray) -> pa.Table:
        return pa.table({"value": values, "count": counts})

    def update(self, rows: pa.Table, sign: int) -> None:
        """Count ``rows`` (live-file rows) in (``sign`` 1) or out (-1)."""
        if rows.num_rows == 0:
            return
        lo, hi = rows[f"min.{self.column}"], rows[f"max.{self.column}"]
        known = pc.is_valid(lo)
        with_stats = pc.sum(known.cast(pa.int64())).as_py() or 0
        self.files += sign * rows.num_rows
        self.without_stats += sign * (rows.num_rows - with_stats)
        self.mins = self._add(self.mins, lo.filter(known), sign)
        self.maxes = self._add(self.maxes, hi.filter(known), sign)

    def _add(self, counts: pa.Table, values: pa.Array | pa.ChunkedArray, sign: int) -> pa.Table:
        if len(values) == 0:
            return counts
        more = self._counts(values, pa.array(np.full(len(values), sign, dtype=np.int64)))
        merged = pa.concat_tables([counts, more]).group_by("value").aggregate([("count", "sum")])
        merged = merged.filter(pc.not_equal(merged["count_sum"], 0))
        return self._counts(merged["value"], merged["count_sum"]).combine_chunks()

    def depth(self, sketches: BoundarySketches, k: int) -> float:
        """Files a point query on the column reads, under ``sketches``' ``k`` boundaries."""
        b = sketches.boundaries(self.column, k)
        if len(b) == 0:
            return float(self.files)
        ends = np.append(b.fractions(), 1.0)
        hi = (self.maxes["count"].to_numpy() * ends[b.ranks(self.maxes["value"]) + 1]).sum()
        lo = (self.mins["count"].to_numpy() * ends[b.ranks(self.mins["value"])]).sum()
        return float(self.without_stats + hi - lo)


class DepthTracker:
    """The clustering depth of ``columns`` over a :class:`LiveFiles` view, kept current from its changes."""

    def __init__(self, live: LiveFiles, columns: Sequence[str]) -> None:
        self.live = live
        self.columns = tuple(columns)
        self._counts: dict[str, BoundCounts] = {}
        self._seen: tuple[int, int] | None = None  # (full reads, version) the counts describe
        self.rebuilds = 0  # how often the counts were built from all the files
        self._lock = threading.Lock()

    def depths(self, version: int, files: pa.Table, sketches: BoundarySketches, k: int) -> dict[str, float]:
        """The depth per column (those with a sketch) of ``files``, the live files at ``version``."""
        with self._lock:
            self._bring_to(version, files)
            return {c: self._counts[c].depth(sketches, k) if c in self._counts else float(files.num_rows)
                    for c in self.columns if c in sketches.sketches}  # fmt: skip

    def _bring_to(self, version: int, files: pa.Table) -> None:
        reads = self.live.full_reads
        steps = None
        if self._seen is not None and self._seen[0] == reads:
            steps = self.live.changes(reads, self._seen[1], version)
        if steps is None:
            columns = [c for c in self.columns if f"min.{c}" in files.column_names]
            self._counts = {c: BoundCounts(c, files.schema.field(f"min.{c}").type) for c in columns}
            self.rebuilds += 1
            for counts in self._counts.values():
                counts.update(files, 1)
        else:
            for step in steps:
                for counts in self._counts.values():
                    counts.update(step.removed, -1)
                    counts.update(step.added, 1)
        self._seen = (reads, version)

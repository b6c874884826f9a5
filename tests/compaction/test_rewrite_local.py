"""The in-process rewrite's pieces that need no Spark: reading a group's files, cutting the sorted rows into files."""

from __future__ import annotations

import datetime as dt
import itertools
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from lakecluster.clustering import ClusteringLayout
from lakecluster.compaction.planner import Group
from lakecluster.compaction.rewrite import RewriteSpec
from lakecluster.compaction.rewrite_local import file_slices, read_local
from lakecluster.schema import ColumnSpec
from lakecluster.sketches import BoundarySketches
from lakecluster.table.live_files import DataFile


def test_int96_timestamps_outside_the_nanosecond_range_are_read_as_written(tmp_path: Path) -> None:
    # Spark's default Parquet timestamp is INT96; read as nanoseconds, year 9999 would overflow
    when = [dt.datetime(9999, 12, 31, tzinfo=dt.UTC), dt.datetime(1, 1, 1, tzinfo=dt.UTC)]
    pq.write_table(pa.table({"ts": pa.array(when, pa.timestamp("us", tz="UTC")), "n": [1, 2]}),
                   tmp_path / "part-0.parquet", use_deprecated_int96_timestamps=True)  # fmt: skip
    pq.write_table(pa.table({"n": [3]}), tmp_path / "part-1.parquet")  # an older file without the column
    columns = (ColumnSpec("ts", "timestamp"), ColumnSpec("n", "long"))
    group = Group((), tuple(DataFile(f"part-{i}.parquet", 1, 1, (), 0, None) for i in range(2)), 1, "new")
    layout = ClusteringLayout.build(BoundarySketches.empty(columns[1:]), ["n"], curve="hilbert", target_cells=1)
    spec = RewriteSpec.for_columns(str(tmp_path), columns, (), layout, target_files=1, file_prefix="g01-test")
    table = read_local(group, spec).sort_by("n")
    assert table["ts"].to_pylist() == [*when, None]
    assert table["n"].to_pylist() == [1, 2, 3]


def test_file_slices_cover_every_row_once_and_cut_heavy_cells_into_pieces() -> None:
    rng = np.random.default_rng(0)
    for _ in range(200):
        cells = np.sort(rng.choice(np.array([b"a", b"b", b"c", b"d"], dtype="S1"), int(rng.integers(1, 500)),
                                   p=rng.dirichlet(np.ones(4))))  # fmt: skip
        files = int(rng.integers(1, 20))
        slices = file_slices(cells, files)
        assert slices[0][0] == 0 and slices[-1][1] == len(cells)
        assert all(a[1] == b[0] and a[0] < a[1] for a, b in itertools.pairwise(slices))
        target = -(-len(cells) // files)
        assert max(stop - start for start, stop in slices) <= 2 * target

"""The clustering depth kept from each refresh's changes equals the depth computed over every live
file, through appends, rewrites, a log gap and changes too big for the change log."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from lakecluster.clustering import clustering_depth
from lakecluster.sketches import BoundarySketches
from lakecluster.table import LakeTable
from lakecluster.table import live_files as live_files_module
from lakecluster.table.depth import DepthTracker
from lakecluster.table.live_files import LiveFiles
from tests.index.tables import COLUMNS, PARTITION_BY, append, batch, checkpoint_and_clean_up, rewrite_partition

BY_NAME = {c.name: c for c in COLUMNS}
CLUSTERING = ("city", "x", "day", "at", "amount", "id")


def _sketches(*batches: pa.Table) -> BoundarySketches:
    sketches = BoundarySketches.empty([BY_NAME[c] for c in CLUSTERING])
    for b in batches:
        for c in CLUSTERING:
            sketches.sketches[c].update(b[c])
    return sketches


def _expected(files: pa.Table, sketches: BoundarySketches, k: int) -> dict[str, float]:
    return {c: clustering_depth(files, None, sketches, c, k) for c in CLUSTERING}


def test_depth_kept_from_the_changes_equals_the_depth_over_all_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = tmp_path / "t"
    batches = [batch(0, 300, seed=1)]
    append(table, batches[0], 0)
    live = LiveFiles(LakeTable.at(str(table)).delta, [BY_NAME[p] for p in PARTITION_BY],
                     [BY_NAME[c] for c in CLUSTERING])  # fmt: skip
    tracker = DepthTracker(live, CLUSTERING)

    def check(k: int = 64) -> None:
        version, files = live.snapshot()
        sketches = _sketches(*batches)  # the boundaries move with every batch, as the stream's do
        got = tracker.depths(version, files, sketches, k)
        expected = _expected(files, sketches, k)
        assert got == pytest.approx(expected, rel=1e-9, abs=1e-9)
        assert max(expected.values()) > 1, "the layout is unclustered: a point query reads several files"

    check()
    steps = [
        lambda: append(table, batch(300, 200, seed=2), 1, rows_per_file=25),
        lambda: rewrite_partition(table, 1993),
        lambda: append(table, batch(500, 120, seed=3), 2),
        lambda: rewrite_partition(table, 1994),
    ]
    for i, step in enumerate(steps):
        step()
        batches.append(batch(0, 10, seed=10 + i))
        check()
        check(k=16)  # other boundaries over the same files: no recount
    assert (tracker.rebuilds, live.full_reads) == (1, 1), "every step came from its changes alone"

    append(table, batch(620, 100, seed=4), 3)
    append(table, batch(720, 100, seed=5), 4)
    checkpoint_and_clean_up(table)  # a gap in the log: the files are read again, and so are the counts
    check()
    assert (tracker.rebuilds, live.full_reads) == (2, 2)

    monkeypatch.setattr(live_files_module, "CHANGE_LOG_ROWS", 1)  # a change the log does not keep
    append(table, batch(820, 100, seed=6), 5)
    check()
    assert tracker.rebuilds == 3 and live.full_reads == 2


def test_files_without_stats_count_as_read_by_every_query(tmp_path: Path) -> None:
    table = tmp_path / "t"
    data = batch(0, 200, seed=7)
    append(table, data.set_column(data.schema.get_field_index("x"), "x", pa.nulls(200, pa.float64())), 0)
    live = LiveFiles(LakeTable.at(str(table)).delta, [BY_NAME[p] for p in PARTITION_BY],
                     [BY_NAME[c] for c in CLUSTERING])  # fmt: skip
    version, files = live.snapshot()
    sketches = _sketches(data)
    got = DepthTracker(live, CLUSTERING).depths(version, files, sketches, 64)
    assert got == pytest.approx(_expected(files, sketches, 64), rel=1e-9)
    assert got["x"] == files.num_rows

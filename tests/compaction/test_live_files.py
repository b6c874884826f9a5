"""The compactor's live files: kept current from the log's new commits, they equal a fresh read of
the snapshot after appends, rewrites and a checkpoint that made older commits expendable."""

from __future__ import annotations

import logging
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from lakecluster.compaction.loop import Compactor
from lakecluster.config import Config, StorageConfig, load_config
from lakecluster.errors import TableNotFoundError
from lakecluster.schema import ColumnSpec
from lakecluster.table import LakeTable
from lakecluster.table.live_files import LiveFiles, _runs
from lakecluster.table.location import DeltaLocation
from tests.file_names import file_run
from tests.index.tables import COLUMNS, PARTITION_BY, append, batch, checkpoint_and_clean_up, rewrite_partition
from tests.snapshot_files import snapshot_files

BY_NAME = {c.name: c for c in COLUMNS}
STATS = [BY_NAME[n] for n in ("id", "city", "x", "amount", "day", "at", "flag")]


def config_for(table: Path, **extra: str) -> Config:
    columns = "[" + ", ".join(f'{{ name = "{c.name}", type = "{c.type}" }}' for c in COLUMNS) + "]"
    overrides = {"table.path": str(table), "table.columns": columns, "table.partition_by": '["year"]',
                 "table.clustering_columns": '["city"]', "source.kind": "kafka", "source.kafka.topics": '["t"]',
                 **extra}  # fmt: skip
    return load_config(overrides=overrides, environ={})


def live_files(table: Path) -> LiveFiles:
    return LiveFiles(LakeTable.at(str(table)).delta, [BY_NAME[p] for p in PARTITION_BY], STATS)


def fresh(table: Path) -> pa.Table:
    """The live files read from the whole snapshot, sorted by path."""
    live = live_files(table)
    live.refresh()
    assert live.full_reads == 1
    return live.table.sort_by("path")


def test_follows_appends_and_rewrites_exactly_as_a_fresh_read(tmp_path: Path) -> None:
    table = tmp_path / "t"
    first = append(table, batch(0, 200, seed=1), 0)
    live = live_files(table)
    assert live.refresh() == first
    steps = [lambda: append(table, batch(200, 120, seed=2), 1), lambda: rewrite_partition(table, 1993),
             lambda: append(table, batch(320, 80, seed=3), 2)]  # fmt: skip
    for step in steps:
        version = step()
        assert live.refresh() == version
        assert live.table.sort_by("path").equals(fresh(table))
    assert live.full_reads == 1  # every step was applied from its commit alone

    _, files = snapshot_files(DeltaLocation(str(table), StorageConfig()), COLUMNS, PARTITION_BY)
    actions = pa.table(DeltaTable(str(table)).get_add_actions(flatten=True))  # an independent reader
    got = live.table.sort_by("path")
    assert got["path"].to_pylist() == sorted(f.path for f in files)
    by_path = {f.path: f for f in files}
    for i, path in enumerate(got["path"].to_pylist()):
        f = by_path[path]
        assert (got["size"][i].as_py(), got["rows"][i].as_py()) == (f.size, f.rows)
        assert got["partition.year"][i].as_py() == f.partition_values["year"]
        assert (got["generation"][i].as_py(), got["run"][i].as_py()) == file_run(path)
    # Typed min/max as delta-rs reads them from the log: same values, whatever the type.
    expected = actions.sort_by("path")
    for c in STATS:
        for bound in ("min", "max"):
            key = f"{bound}.{c.name}"
            if key in expected.column_names:
                assert got[key].to_pylist() == expected[key].cast(got.schema.field(key).type).to_pylist(), key


@pytest.mark.parametrize("path", [
    "part-g06-0a1b2c3d4e5f-00001-x.c000.zstd.parquet", "year=1993/part-g01-ff-00000-y.parquet",
    "part-00000-5f1e-c000.snappy.parquet", "part-g2/part-00000-a.parquet", "xpart-g03-0a-1.parquet",
    "year=1993/part-g01-notahexrun-00000.parquet", "part-g12-abc-part-g03-def-1.parquet",
])  # fmt: skip
def test_generation_and_run_as_the_planner_reads_file_names(path: str) -> None:
    found = _runs(pa.array([path]))
    assert (found["generation"][0].as_py(), found["run"][0].as_py()) == file_run(path)


def test_generation_and_run_of_many_names_without_a_slash_as_the_planner_reads_them() -> None:
    """Names without ``/`` (an unpartitioned table) are read by a pattern anchored at the start,
    the others by the whole one: the same answers as the planner's, name by name."""
    names = ["part-g06-0a1b2c3d4e5f-00001-x.c000.zstd.parquet", "part-00000-5f1e-c000.snappy.parquet",
             "xpart-g03-0a-1.parquet", "part-g12-abc-part-g03-def-1.parquet", "part-gx-part-g04-0b-1.parquet",
             "part-g01-notahexrun-00000.parquet", "part-g07-l0c-l1d-2.parquet", ""] * 3  # fmt: skip
    paths = pa.array([*names, None])
    for array in (paths, paths.slice(2), pa.chunked_array([paths.slice(0, 5), paths.slice(5)])):
        found = _runs(array)
        wanted = [file_run(p) if p is not None else (0, None) for p in array.to_pylist()]
        assert list(zip(found["generation"].to_pylist(), found["run"].to_pylist(), strict=True)) == wanted


def test_commits_gone_after_a_checkpoint_mean_one_full_read(tmp_path: Path) -> None:
    table = tmp_path / "t"
    append(table, batch(0, 100, seed=1), 0)
    live = live_files(table)
    live.refresh()
    for i in range(1, 4):
        append(table, batch(100 * i, 100, seed=i), i)
    version = checkpoint_and_clean_up(table)
    assert live.refresh() == version
    assert live.full_reads == 2
    assert live.table.sort_by("path").equals(fresh(table))


def test_a_failing_index_sync_is_logged_not_raised(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    table = tmp_path / "t"
    append(table, batch(0, 100, seed=1), 0)
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("x")
    compactor = Compactor(config_for(table, **{"index.path": str(blocker / "index")}))
    with caplog.at_level(logging.WARNING):
        compactor.sync_index()
    assert "index sync failed" in caplog.text
    ranges = compactor.ranges()  # the compactor's depth estimate needs no index
    assert ranges.num_rows == len(snapshot_files(DeltaLocation(str(table), StorageConfig()), COLUMNS, PARTITION_BY)[1])
    assert ranges["min.city"].null_count < ranges.num_rows


def test_the_compactor_refuses_a_missing_table_and_shares_its_view_with_the_monitor(tmp_path: Path) -> None:
    with pytest.raises(TableNotFoundError):
        Compactor(config_for(tmp_path / "nothing"))
    table = tmp_path / "t"
    append(table, batch(0, 100, seed=1), 0)
    compactor = Compactor(config_for(table))
    assert compactor.monitor.table.live_files() is compactor.live
    compactor.plan()
    assert compactor.monitor.observe()
    assert compactor.live.full_reads == 1  # one read of the snapshot for both


def test_an_empty_partition_value_is_null_from_the_log_as_from_the_snapshot(tmp_path: Path) -> None:
    table = str(tmp_path / "t")
    rows = pa.table({"s": pa.array(["", "x"]), "v": pa.array([1, 2], pa.int64())})
    write_deltalake(table, rows, partition_by=["s"])  # delta-rs writes "" for the empty string: Delta's null
    live = LiveFiles(LakeTable.at(table).delta, [ColumnSpec("s", "string")], [ColumnSpec("v", "long")])
    live.refresh()
    write_deltalake(table, rows, partition_by=["s"], mode="append")
    live.refresh()
    assert live.full_reads == 1
    assert sorted(live.table["partition.s"].to_pylist(), key=str) == [None, None, "x", "x"]
    again = LiveFiles(LakeTable.at(table).delta, [ColumnSpec("s", "string")], [ColumnSpec("v", "long")])
    again.refresh()
    assert live.table.sort_by("path").equals(again.table.sort_by("path"))


def test_the_layout_fingerprint_is_read_from_a_compaction_file_name_and_null_elsewhere() -> None:
    paths = ["d_year=1995/part-g01-0a1b2c3d4e5f-l1f2e3d4c-00ab-c00000.snappy.parquet",
             "d_year=1995/part-g02-0a1b2c3d4e5f-00ab-c00000.snappy.parquet",  # before fingerprints
             "part-00000-5f1e-c000.snappy.parquet"]  # fmt: skip
    found = _runs(pa.array(paths))
    assert found["layout"].to_pylist() == ["1f2e3d4c", None, None]
    assert found["run"].to_pylist() == ["0a1b2c3d4e5f", "0a1b2c3d4e5f", None]

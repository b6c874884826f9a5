"""Vacuum deletes a file only when no version within the retention period references it: time
travel to every version within retention still reads the right rows, with two readers."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import pytest
from deltalake import DeltaTable

from lakecluster.compaction.loop import Compactor
from lakecluster.compaction.vacuum import vacuum
from tests.compaction.test_compaction import fill, generator_config, row_multiset
from tests.conftest import duckdb_connection

pytestmark = pytest.mark.integration


def rows_at(table: Path, version: int) -> Counter:
    return row_multiset(DeltaTable(str(table), version=version).to_pyarrow_table())


def test_time_travel_within_retention_survives_vacuum_and_older_files_are_gone(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    table = tmp_path / "t"
    first = generator_config(table, rows=6_000, per_batch=3_000, **{"table.partition_by": "[]"})
    fill(spark, first)
    assert {r.result for r in Compactor(first, spark=spark).run_once()} == {"committed"}
    first_removal_done = time.time()
    versions_before_gap = DeltaTable(str(table)).version()
    removed_early = {p.name for p in table.glob("part-*.parquet")} - {
        Path(u).name for u in DeltaTable(str(table)).file_uris()}  # fmt: skip
    assert removed_early, "the first compaction should have replaced files"

    time.sleep(3)
    second = generator_config(table, rows=12_000, per_batch=3_000, **{"table.partition_by": "[]",
                                                                      "source.generator.seed": "7"})  # fmt: skip
    fill(spark, second)
    first_kept = DeltaTable(str(table)).version()  # every file of this version must survive
    second_removal_start = time.time()
    assert {r.result for r in Compactor(second, spark=spark).run_once()} == {"committed"}
    latest = DeltaTable(str(table)).version()
    expected = {v: rows_at(table, v) for v in range(first_kept, latest + 1)}

    # A retention between the two compactions: the first one's removals are older, the second's newer.
    now = time.time()
    retention_s = (now - first_removal_done + now - second_removal_start) / 2
    assert second_removal_start - first_removal_done > 6, "too little time between the compactions to tell them apart"
    report = vacuum(spark.newSession(), str(table), retention_hours=retention_s / 3600, force=True)

    present = {p.name for p in table.glob("part-*.parquet")}
    assert report.files == len(removed_early) and not removed_early & present, "files outside retention stay"
    for version, rows in expected.items():
        assert rows_at(table, version) == rows, f"time travel to version {version} changed after vacuum"
    with pytest.raises(Exception):  # noqa: B017 - deltalake raises its own OSError/DeltaError subclasses
        DeltaTable(str(table), version=versions_before_gap - 1).to_pyarrow_table()
    count = duckdb_connection().execute(f"SELECT count(*) FROM delta_scan('{table}')").fetchone()
    assert count == (sum(expected[latest].values()),)

"""Vacuum deletes a file only when no version within the retention period references it: time
travel to every version within retention still reads the right rows, with two readers."""

from __future__ import annotations

import json
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


def tombstones(table: Path) -> dict[str, int]:
    """Every path a commit removed, with the time of its removal (ms)."""
    out = {}
    for entry in sorted((table / "_delta_log").glob("*.json")):
        for line in entry.read_text().splitlines():
            action = json.loads(line)
            if "remove" in action:
                out[action["remove"]["path"]] = action["remove"]["deletionTimestamp"]
    return out


def test_time_travel_within_retention_survives_vacuum_and_older_files_are_gone(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    table = tmp_path / "t"
    first = generator_config(table, rows=6_000, per_batch=3_000, **{"table.partition_by": "[]"})
    fill(spark, first)
    assert {r.result for r in Compactor(first, spark=spark).run_once()} == {"committed"}
    first_removal_done = time.time()
    removed_early = set(tombstones(table))
    assert removed_early, "the first compaction should have replaced files"

    time.sleep(3)
    second = generator_config(table, rows=12_000, per_batch=3_000, **{"table.partition_by": "[]",
                                                                      "source.generator.seed": "7"})  # fmt: skip
    fill(spark, second)
    second_removal_start = time.time()
    assert {r.result for r in Compactor(second, spark=spark).run_once()} == {"committed"}
    latest = DeltaTable(str(table)).version()
    expected = {v: rows_at(table, v) for v in range(latest + 1)}  # every version reads before vacuum
    files_of = {v: {Path(u).name for u in DeltaTable(str(table), version=v).file_uris()} for v in expected}
    present_before = {p.name for p in table.glob("part-*.parquet")}

    # A retention between the two compactions: the first one's removals are older, the second's newer.
    now = time.time()
    retention_s = (now - first_removal_done + now - second_removal_start) / 2
    assert second_removal_start - first_removal_done > 6, "too little time between the compactions to tell them apart"
    report = vacuum(spark.newSession(), str(table), retention_hours=retention_s / 3600, force=True)

    present = {p.name for p in table.glob("part-*.parquet")}
    deleted = present_before - present
    assert report.files == len(deleted)
    assert removed_early <= deleted, "files removed before the retention period must go"
    # Delta's rule: a file goes only when a commit removed it longer than the retention ago (the
    # vacuum's own start, logged as VACUUM START, bounds "now" from above).
    started_ms = next(h["timestamp"] for h in DeltaTable(str(table)).history() if h["operation"] == "VACUUM START")
    removed_at = tombstones(table)
    assert deleted <= set(removed_at), "a live file was deleted"
    cutoff_ms = started_ms - retention_s * 1000
    assert all(removed_at[p] <= cutoff_ms for p in deleted), "a file removed within the retention period went"
    # Time travel: every version whose files are all kept reads exactly what it read before.
    intact = [v for v in expected if files_of[v] <= present]
    assert latest in intact
    for version in intact:
        assert rows_at(table, version) == expected[version], f"time travel to version {version} changed"
    for version in set(expected) - set(intact):
        with pytest.raises(Exception):  # noqa: B017 - delta-rs raises its own error types for a missing file
            DeltaTable(str(table), version=version).to_pyarrow_table()
    count = duckdb_connection().execute(f"SELECT count(*) FROM delta_scan('{table}')").fetchone()
    assert count == (sum(expected[latest].values()),)

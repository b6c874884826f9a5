"""Vacuum deletes a file only when no version within the retention period references it: time
travel to every version within retention still reads the right rows, with two readers."""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from lakecluster.compaction.loop import Compactor
from lakecluster.compaction.vacuum import vacuum
from lakecluster.errors import ConfigError, RetentionError
from lakecluster.table import LakeTable
from tests.compaction.test_interop import files_read
from tests.conftest import duckdb_connection
from tests.generated_tables import fill, generator_config, row_multiset

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


def age_first_versions(table: Path, last_version: int, hours: float) -> None:
    """Move versions 0..``last_version`` ``hours`` into the past: their removals' timestamps in the
    log and the modification times of the data files they name (Delta's VACUUM looks at both)."""
    shift_ms = int(hours * 3600 * 1000)
    paths = set()
    for version in range(last_version + 1):
        entry = table / "_delta_log" / f"{version:020d}.json"
        actions = [json.loads(line) for line in entry.read_text().splitlines()]
        for action in actions:
            if "remove" in action:
                action["remove"]["deletionTimestamp"] -= shift_ms
                paths.add(action["remove"]["path"])
            if "add" in action:
                paths.add(action["add"]["path"])
        entry.write_text("".join(json.dumps(a) + "\n" for a in actions))
    for path in paths:
        file = table / path
        if file.exists():
            old = file.stat().st_mtime - hours * 3600
            os.utime(file, (old, old))


def test_time_travel_within_retention_survives_vacuum_and_older_files_are_gone(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    table = tmp_path / "t"
    first = generator_config(table, rows=6_000, per_batch=3_000, **{"table.partition_by": "[]"})
    fill(spark, first)
    assert {r.result for r in Compactor(first, spark=spark).run_once()} == {"committed"}
    first_compaction = DeltaTable(str(table)).version()
    removed_early = set(tombstones(table))
    assert removed_early, "the first compaction should have replaced files"

    second = generator_config(table, rows=12_000, per_batch=3_000, **{"table.partition_by": "[]",
                                                                      "source.generator.seed": "7"})  # fmt: skip
    fill(spark, second)
    assert {r.result for r in Compactor(second, spark=spark).run_once()} == {"committed"}
    removed_late = set(tombstones(table)) - removed_early
    assert removed_late, "the second compaction should have replaced files"
    latest = DeltaTable(str(table)).version()
    assert not list((table / "_delta_log").glob("*.checkpoint.parquet")), "removals must be read from the JSON log"
    # Everything up to the first compaction happened three hours ago; the rest just now.
    age_first_versions(table, first_compaction, hours=3)
    spark._jvm.org.apache.spark.sql.delta.DeltaLog.clearCache()  # the session's snapshots predate the edit
    expected = {v: rows_at(table, v) for v in range(latest + 1)}  # every version reads before vacuum
    files_of = {v: {Path(u).name for u in DeltaTable(str(table), version=v).file_uris()} for v in expected}
    present_before = {p.name for p in table.glob("part-*.parquet")}

    report = vacuum(spark.newSession(), LakeTable.at(str(table)).delta, retention_hours=2, force=True)

    present = {p.name for p in table.glob("part-*.parquet")}
    deleted = present_before - present
    assert report.files == len(deleted)
    # Delta's rule: a file goes only when a commit removed it longer than the retention ago.
    assert deleted == {Path(p).name for p in removed_early}, "exactly the files removed before the retention period"
    assert not deleted & {Path(p).name for p in removed_late}, "a file removed within the retention period went"
    # Time travel: every version whose files are all kept reads exactly what it read before.
    intact = [v for v in expected if files_of[v] <= present]
    assert latest in intact and first_compaction + 1 in intact
    for version in intact:
        assert rows_at(table, version) == expected[version], f"time travel to version {version} changed"
    for version in set(expected) - set(intact):
        with pytest.raises(Exception):  # noqa: B017 - delta-rs raises its own error types for a missing file
            DeltaTable(str(table), version=version).to_pyarrow_table()
    count = duckdb_connection().execute(f"SELECT count(*) FROM delta_scan('{table}')").fetchone()
    assert count == (sum(expected[latest].values()),)

    # Spark SQL after the vacuum: the latest version in full, a point query that still skips by the
    # stats (it opens exactly the files whose min/max admit the value), and time travel.
    spark._jvm.org.apache.spark.sql.delta.DeltaLog.clearCache()
    assert files_read(spark, f"SELECT count(*) FROM delta.`{table}`")[0] == sum(expected[latest].values())
    adds = pa.table(DeltaTable(str(table)).get_add_actions(flatten=True)).to_pylist()
    city = adds[len(adds) // 2]["min.s_city"]
    admitting = sum(1 for a in adds if a["min.s_city"] <= city <= a["max.s_city"])
    rows, read = files_read(spark, f"SELECT count(*) FROM delta.`{table}` WHERE s_city = '{city}'")
    assert rows == DeltaTable(str(table)).to_pyarrow_table(filters=[("s_city", "=", city)]).num_rows > 0
    assert read == admitting < len(adds), (read, admitting, len(adds))
    oldest_intact = min(intact)
    travelled = spark.sql(f"SELECT * FROM delta.`{table}` VERSION AS OF {oldest_intact}").toArrow()
    assert row_multiset(travelled) == expected[oldest_intact]


def test_a_fractional_retention_is_refused_because_delta_rounds_it(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Delta rounds ``RETAIN 0.4 HOURS`` to 0: every file not in the vacuum's snapshot would go,
    including what a concurrent writer has just committed."""
    table = tmp_path / "t"
    config = generator_config(table, rows=2_000, per_batch=1_000, **{"table.partition_by": "[]"})
    fill(spark, config)
    with pytest.raises(RetentionError, match="whole number of hours"):
        vacuum(spark.newSession(), LakeTable.at(str(table)).delta, retention_hours=0.4, force=True)
    with pytest.raises(ConfigError, match=r"vacuum\.retention_hours"):
        generator_config(table, rows=1, per_batch=1, **{"vacuum.retention_hours": "0.5", "vacuum.force": "true"})
    assert DeltaTable(str(table)).history(1)[0]["operation"] != "VACUUM START", "nothing ran"

"""The Delta log of a long-lived table: checkpointed at Delta's cadence, so readers do not replay
every JSON commit, and expired entries removed by Delta's own rules; the table, the index and
the compactor keep working across both."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from deltalake import DeltaTable

from lakecluster.compaction.loop import Compactor
from lakecluster.index.spec import IndexSpec
from lakecluster.index.sync import sync
from lakecluster.table import LakeTable
from tests.conftest import duckdb_connection, read_delta
from tests.generated_tables import fill, generator_config, row_multiset
from tests.index.test_concurrency import assert_sound_and_current

pytestmark = pytest.mark.integration

DAY_S = 86_400


def _commit_versions(log: Path) -> list[int]:
    return sorted(int(p.name[:20]) for p in log.glob("*.json") if p.name[:20].isdigit())


def _checkpoints(log: Path) -> list[int]:
    return sorted(int(p.name[:20]) for p in log.glob("*.checkpoint*.parquet"))


def test_the_log_is_checkpointed_and_expired_entries_go_by_deltas_rules(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    table = tmp_path / "t"
    log = table / "_delta_log"
    settings = {"table.partition_by": "[]", "compaction.max_groups_per_run": "1"}
    fill(spark, generator_config(table, rows=6_000, per_batch=500, **settings))  # create + 12 appends
    assert DeltaTable(str(table)).version() >= 10
    # Delta checkpoints every 10 commits (delta.checkpointInterval): a reader starts from it.
    assert 10 in _checkpoints(log), sorted(p.name for p in log.iterdir())
    assert json.loads((log / "_last_checkpoint").read_text())["version"] >= 10
    spec = IndexSpec.of(LakeTable(generator_config(table, rows=6_000, per_batch=500, **settings)))
    sync(spec)

    # A table that has lived for weeks: a 7-day log retention (a user's choice, set with Delta; it
    # may not be below delta.deletedFileRetentionDuration), and every log entry so far written ten
    # days ago.
    spark.sql(f"ALTER TABLE delta.`{table}` SET TBLPROPERTIES ('delta.logRetentionDuration' = 'interval 7 days')")
    aged_up_to = DeltaTable(str(table)).version()
    then = time.time() - 10 * DAY_S
    for p in log.iterdir():
        if p.name[:20].isdigit():
            # In the order they were written: a commit, its checksum, then a checkpoint of it
            # (Delta's cleanup reads the files' ages in version order).
            written = then + 10 * int(p.name[:20]) + (2 if ".checkpoint" in p.name else p.name.endswith(".crc"))
            os.utime(p, (written, written))
    expected = row_multiset(read_delta(table))

    # More commits, stream and compaction: Delta writes its next checkpoint and cleans up.
    config = generator_config(table, rows=12_000, per_batch=500, **settings)
    fill(spark, config)
    results = Compactor(config, spark=spark).run_once()
    assert any(r.result == "committed" for r in results), results
    expected_rows = row_multiset(read_delta(table))
    assert max(_checkpoints(log)) > aged_up_to

    # Commits older than the retention went, up to a checkpoint that still rebuilds the table;
    # nothing newer went.
    versions = _commit_versions(log)
    assert 0 not in versions, versions
    assert set(range(aged_up_to + 1, DeltaTable(str(table)).version() + 1)) <= set(versions), versions

    # The table reads the same through every reader, from the checkpoint.
    assert row_multiset(read_delta(table)) == expected_rows
    assert sum(expected_rows.values()) == 12_000 and sum(expected.values()) == 6_000
    spark_count = spark.read.format("delta").load(str(table)).count()
    duck_count = duckdb_connection().execute(f"SELECT count(*) FROM delta_scan('{table}')").fetchone()
    assert spark_count == 12_000 and duck_count == (12_000,)
    # The index, last synced before the expired commits went, catches up (rebuilding where a
    # commit it needs is gone) and agrees with the log.
    sync(spec)
    assert_sound_and_current(spec, table)

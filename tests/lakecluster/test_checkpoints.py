"""Readers never catch a log file half written on a local disk: Delta's checkpoints and
``_last_checkpoint`` appear whole (written under a temporary name, then renamed), while delta-rs
and a raw reader poll the log as a stream commits beside them.

Integration test: Spark (delta-spark with lakecluster's LogStore) writes; delta-rs and pyarrow read.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

pytestmark = pytest.mark.integration

CHECKPOINTS = 3  # the old store let readers open 124 half-written files in 20 checkpoints


def _poll_raw(log: Path, stop: threading.Event, failures: list[str], seen: set[str]) -> None:
    """Open every checkpoint the moment it is listed, and ``_last_checkpoint`` each time; one more
    look after ``stop`` (the last checkpoint may land just before it, while this thread waits)."""
    while True:
        last_look = stop.is_set()
        for path in log.glob("*.checkpoint.parquet"):
            if path.name in seen:
                continue
            try:
                pq.read_metadata(path)
                seen.add(path.name)
            except FileNotFoundError:
                continue
            except Exception as e:  # any failure to read a listed file is the finding
                failures.append(f"{path.name}: {type(e).__name__}: {e}")
                seen.add(path.name)
        try:
            json.loads((log / "_last_checkpoint").read_text())
        except FileNotFoundError:
            pass
        except ValueError as e:
            failures.append(f"_last_checkpoint: {e}")
        if last_look:
            return
        time.sleep(0.005)  # often enough to land inside a write of tens of milliseconds


def _poll_delta_rs(table: Path, stop: threading.Event, failures: list[str], loads: list[int]) -> None:
    while not stop.is_set():
        try:
            loads.append(DeltaTable(str(table)).version())
        except Exception as e:  # a reader failing on a listed file is the finding
            if "not a Delta table" not in str(e) and "No files in log segment" not in str(e):
                failures.append(f"delta-rs: {type(e).__name__}: {e}")
        time.sleep(0.1)


def test_readers_polling_the_log_never_open_a_checkpoint_half_written(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    table = tmp_path / "t"
    spark.sql(f"CREATE TABLE delta.`{table}` (id BIGINT, pad STRING) USING delta "
              "TBLPROPERTIES ('delta.checkpointInterval' = '1')")  # fmt: skip
    stop, failures, seen, loads = threading.Event(), [], set(), []
    readers = [threading.Thread(target=_poll_raw, args=(table / "_delta_log", stop, failures, seen)),
               threading.Thread(target=_poll_delta_rs, args=(table, stop, failures, loads))]  # fmt: skip
    for reader in readers:
        reader.start()
    try:
        rows = spark.range(0, 200).selectExpr("id", "repeat('x', 20) AS pad")
        for _ in range(CHECKPOINTS):
            rows.repartition(4).write.format("delta").mode("append").save(str(table))
    finally:
        stop.set()
        for reader in readers:
            reader.join(30)
    assert len(seen) >= CHECKPOINTS, sorted(seen)
    assert loads, "delta-rs never read the table"
    assert failures == []


def test_the_streams_due_checkpoint_is_written_beside_the_next_batch_not_inside_the_commit(  # type: ignore[no-untyped-def]
    spark, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lakecluster.config import load_config
    from lakecluster.faults import PAUSE_ENV
    from lakecluster.stream.job import StreamJob

    # Every other commit is due a checkpoint; each checkpoint write is held for a while, so a batch
    # that waited for its checkpoint would find it written when its commit call returns.
    config = load_config(overrides={
        "table.path": str(tmp_path / "t"), "table.partition_by": "[]", "source.generator.max_rows": "2000",
        "source.generator.max_rows_per_trigger": "500", "stream.progress": "false",
        "stream.trigger_interval_s": "0", "metrics.port": "0",
    }, environ={})  # fmt: skip
    table = Path(config.table.path)
    from lakecluster.table import LakeTable, create_table

    create_table(spark, LakeTable(config).delta, LakeTable(config).spec, properties={"delta.checkpointInterval": "2"})
    monkeypatch.setenv(PAUSE_ENV, "background_checkpoint:1.5")
    at_commit: dict[int, bool] = {}

    def seen(report) -> None:  # type: ignore[no-untyped-def]
        # Called in the micro-batch, right after its commits: the checkpoint of its version is not there yet.
        at_commit[report.table_version] = (table / "_delta_log" / f"{report.table_version:020d}.checkpoint.parquet"
                                           ).exists()  # fmt: skip

    reports = StreamJob(config, spark=spark, available_now=True, on_batch=seen).run()
    due = [v for v in at_commit if v % 2 == 0]
    assert due and not any(at_commit[v] for v in due), at_commit
    # A clean stop leaves the checkpoints that were due (the newest at least: an older one still
    # waiting is covered by it), whole, and every reader reads the table from them.
    newest = max(due)
    assert (table / "_delta_log" / f"{newest:020d}.checkpoint.parquet").exists()
    assert json.loads((table / "_delta_log" / "_last_checkpoint").read_text())["version"] == newest
    assert DeltaTable(str(table)).to_pyarrow_table().num_rows == sum(r.rows for r in reports) == 2000
    assert spark.read.format("delta").load(str(table)).count() == 2000

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
    """Open every checkpoint the moment it is listed, and ``_last_checkpoint`` each time."""
    while not stop.is_set():
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

"""Capture records in the query listener's format (docs/workload.md), written by hand where a test
needs exact contents (what the listener itself writes: tests/workload/test_listener.py)."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any


def record(time_ms: float, execution_id: int = 1, *, filters: list[dict] | None = None,
           partition_filters: list[dict] | None = None, files_read: int | None = 3, **extra: Any) -> dict:  # fmt: skip
    return {"v": 1, "time_ms": int(time_ms), "app_id": "local-1", "app_name": "t", "execution_id": execution_id,
            "query": "collect", "duration_ms": 5, "table": "file:/t", "table_version": 4, "scan": 0, "scans": 1,
            "filters": filters or [], "partition_filters": partition_filters or [], "files_read": files_read,
            "bytes_read": 100, "files_total": 20, **extra}  # fmt: skip


def write(table: Path, time_ms: float, lines: list[Any], *, app: str = "local-1", seq: int = 1) -> Path:
    """A capture file as the listener names it, in the day folder of ``time_ms``."""
    day = dt.datetime.fromtimestamp(time_ms / 1000, dt.UTC).date().isoformat()
    folder = table / "_lakecluster" / "workload" / f"day={day}"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{int(time_ms):013d}-{app}-{seq:06d}-abcdef12.jsonl"
    path.write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines))
    return path


def event_log(location: str, *, data_filters: str, partition_filters: str, files_read: int, start_ms: int) -> bytes:
    """A small Spark event log: one application (``local-17``), one SQL execution whose Delta scan of
    ``location`` pushed these filters and read ``files_read`` files (900 bytes), ended 700 ms after
    ``start_ms`` (events as a real pyspark 4.x log has them; tests/workload/test_eventlog.py reads
    real ones)."""
    sql = "org.apache.spark.sql.execution.ui."
    scan = {"nodeName": "Scan parquet ", "simpleString": "FileScan parquet", "children": [],
            "metadata": {"Location": f"PreparedDeltaFileIndex(1 paths)[{location}]", "ReadSchema": "struct<>",
                         "DataFilters": data_filters, "PartitionFilters": partition_filters},
            "metrics": [{"name": "number of files read", "accumulatorId": 41, "metricType": "sum"},
                        {"name": "size of files read", "accumulatorId": 42, "metricType": "size"}]}  # fmt: skip
    events = [{"Event": "SparkListenerLogStart", "Spark Version": "4.2.0"},
              {"Event": "SparkListenerApplicationStart", "App Name": "dashboards", "App ID": "local-17"},
              {"Event": sql + "SparkListenerSQLExecutionStart", "executionId": 3, "rootExecutionId": 3,
               "description": "count at NativeMethodAccessorImpl.java:0", "sparkPlanInfo": scan, "time": start_ms},
              {"Event": sql + "SparkListenerDriverAccumUpdates", "executionId": 3,
               "accumUpdates": [[41, files_read], [42, 900]]},
              {"Event": sql + "SparkListenerSQLExecutionEnd", "executionId": 3, "time": start_ms + 700,
               "errorMessage": ""}]  # fmt: skip
    return "".join(json.dumps(e) + "\n" for e in events).encode()

"""Capture records in the query listener's format (docs/workload.md), written by hand where a test
needs exact contents (what the listener itself writes: tests/lakecluster/test_workload_listener.py)."""

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

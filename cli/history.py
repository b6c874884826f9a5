"""``lakecluster history``: the table's versions, newest first, as Delta's DESCRIBE HISTORY shows
them and with what lakecluster knows of each: per version the operation, which service wrote it,
files, rows and bytes added and removed, and how long the work behind it took.

Read from the log's commit files alone (no Spark, no snapshot): files and bytes from the add and
remove actions, rows from the added files' stats (removed files' rows when their remove actions
carry stats), the service and duration from the commit's lakecluster metadata.
"""

from __future__ import annotations

import datetime
import json
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from lakecluster.errors import TableNotFoundError
from lakecluster.sizes import human_bytes
from lakecluster.table import LakeTable
from lakecluster.table.deletion_vectors import DeletionVector
from lakecluster.table.metadata import parse_user_metadata

PARALLEL_READS = 16  # commit files read at once (one request each on an object store)


def history(table: LakeTable, limit: int) -> dict[str, Any]:
    """The newest ``limit`` versions of the table, newest first (versions whose commit file log
    cleanup removed are left out).

    Raises:
        TableNotFoundError: there is no table.
    """
    location = table.delta
    latest = location.latest_version()
    if latest is None:
        raise TableNotFoundError(location.uri)
    versions = list(range(latest, max(-1, latest - limit), -1))
    with ThreadPoolExecutor(PARALLEL_READS) as pool:
        commits = list(pool.map(location.commits_of, versions))
    entries = [describe(v, actions) for v, actions in zip(versions, commits, strict=True) if actions is not None]
    adoptions = [a.as_dict() for a in table.adoptions().all()]
    return {"table": location.uri, "latest_version": latest, "versions": entries, "adoptions": adoptions}


def describe(version: int, actions: list[dict]) -> dict[str, Any]:
    """One version: its operation and service, what it added and removed, when and how long."""
    info: dict[str, Any] = next((a["commitInfo"] for a in actions if "commitInfo" in a), {})
    adds = [a["add"] for a in actions if "add" in a]
    removes = [a["remove"] for a in actions if "remove" in a]
    meta = parse_user_metadata(info.get("userMetadata")) or {}
    stamp = info.get("timestamp")
    return {
        "version": version,
        "timestamp": _iso(stamp),
        "operation": info.get("operation"),
        "service": _service(meta, info),
        "files_added": len(adds), "files_removed": len(removes),
        "rows_added": _rows(adds), "rows_removed": _rows(removes),
        "bytes_added": sum(int(a.get("size") or 0) for a in adds),
        "bytes_removed": sum(int(r.get("size") or 0) for r in removes),
        "seconds": _seconds(meta, stamp),
    }  # fmt: skip


def _service(meta: dict[str, Any], info: dict[str, Any]) -> str:
    if meta.get("operation") == "compaction":
        step = ""
        if meta.get("adoption"):  # a step of the re-clustering to a layout the layout loop adopted
            step = (f"; re-cluster to adopted layout {meta['adoption']}, {meta.get('relayout_files_left', '?')} "
                    "file(s) left before it")  # fmt: skip
        return f"compactor (generation {meta.get('generation')}, run {meta.get('run')}{step})"
    if "stream" in meta:
        return f"stream {meta['stream']}, batch {meta.get('batch')}"
    return str(info.get("engineInfo") or "?")


def _rows(actions: list[dict]) -> int | None:
    """Live rows of the files by their stats, less what their deletion vectors delete; None when
    a file has no stats (the count would be a guess)."""
    total = 0
    for action in actions:
        try:
            total += int(json.loads(action["stats"])["numRecords"])
            vector = DeletionVector.of(action.get("deletionVector"))
        except (KeyError, TypeError, ValueError):
            return None
        total -= vector.cardinality if vector is not None else 0
    return total


def _seconds(meta: dict[str, Any], stamp: Any) -> float | None:
    """How long the work behind the version took: a compaction's planning to commit, a
    micro-batch's start to its commit."""
    if meta.get("seconds") is not None:
        try:
            return float(meta["seconds"])
        except (TypeError, ValueError):
            return None
    started = meta.get("started_ms")
    if isinstance(started, int | float) and isinstance(stamp, int | float):
        return round((stamp - started) / 1000, 1)
    return None


def _iso(stamp: Any) -> str | None:
    if not isinstance(stamp, int | float):
        return None
    return datetime.datetime.fromtimestamp(stamp / 1000, datetime.UTC).isoformat(timespec="seconds")


def format_text(data: dict[str, Any]) -> str:
    lines = [f"table {data['table']}: {len(data['versions'])} version(s) shown of {data['latest_version'] + 1}"]
    for e in data["versions"]:
        rows = "" if e["rows_added"] is None and e["rows_removed"] is None else (
            f", rows +{_count(e['rows_added'])} -{_count(e['rows_removed'])}")  # fmt: skip
        took = "" if e["seconds"] is None else f", {e['seconds']:.1f}s"
        lines.append(
            f"{e['version']:>6}  {e['timestamp'] or '-':<25} {e['operation'] or '-':<16} {e['service']}: "
            f"files +{e['files_added']} -{e['files_removed']}{rows}, "
            f"bytes +{human_bytes(e['bytes_added'])} -{human_bytes(e['bytes_removed'])}{took}"
        )
    for a in data.get("adoptions", []):
        gain = a["predicted"].get("gain")
        lines.append(f"layout {a['number']} adopted {_iso(a['time'] * 1000)} by {a['by'] or '?'}: clustering columns "
                     f"{', '.join(a['clustering_columns'])} (weights {', '.join(f'{w:g}' for w in a['weights'])})"
                     + (f", predicted {gain:.0%} fewer files read per captured scan" if gain is not None else ""))
    return "\n".join(lines)


def _count(n: int | None) -> str:
    return "?" if n is None else f"{n:,}"

"""``lakecluster status``: one screen about a table, read without Spark and without writing anything.

Everything comes from what the services leave behind: the Delta log (files, sizes, history of
appends, rewrites and vacuums), the boundary sketches (clustering depth per column, freshness),
the column-stats index manifest (versions behind), the streams' recorded offsets (consumer lag,
when the brokers answer within ``--lag-timeout``).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from lakecluster.compaction.planner import clustering_depth, plan_files, snapshot_files
from lakecluster.config import Config
from lakecluster.errors import LakeclusterError
from lakecluster.index.store import IndexStore
from lakecluster.sketch_store import SketchStore
from lakecluster.table import open_table, parse_user_metadata

HISTORY_LIMIT = 2000  # commits scanned back for the last rewrite, vacuum and stream commits


def _seconds_ago(ms: int | None, now: float) -> float | None:
    return None if ms is None else round(now - ms / 1000, 1)


def table_status(config: Config, *, lag_timeout_s: float = 5.0) -> dict[str, Any]:
    """The status of ``config.table.path`` as plain data (the ``--json`` output)."""
    now = time.time()
    table = open_table(config.table.path)
    version = table.version()
    files, actions = snapshot_files(table, config.table.partition_by)
    sizes = np.array([f.size for f in files], dtype=np.int64)
    cfg = config.compaction
    history = table.history(HISTORY_LIMIT)
    last = {h.get("operation"): h for h in reversed(history)}  # newest entry of each operation
    out: dict[str, Any] = {
        "table": config.table.path,
        "version": version,
        "last_commit_seconds_ago": _seconds_ago(history[0].get("timestamp") if history else None, now),
        "files": len(files),
        "bytes": int(sizes.sum()),
        "rows": sum(f.rows for f in files),
        "small_files": int((sizes < cfg.min_file_bytes).sum()),
        "file_bytes": _percentiles(sizes),
    }

    pending = plan_files(files, version, cfg)  # the files already read, not a second log read
    out["compaction"] = {
        "pending_groups": len(pending.groups),
        "pending_bytes": sum(g.bytes for g in pending.groups),
        "last_rewrite": _operation(last.get("OPTIMIZE"), now),
    }
    vacuum = last.get("VACUUM END")
    out["vacuum"] = {"last_run": _operation(vacuum, now)}

    sketches = SketchStore(config.table.path).latest()
    columns = list(config.table.clustering_columns)
    if sketches is None:
        out["sketches"] = None
        out["clustering"] = None
    else:
        out["sketches"] = {"delta_version": sketches.delta_version, "versions_behind": version - sketches.delta_version}
        paths = [f.path for f in files]
        k = config.sketches.boundaries
        out["clustering"] = {
            c: {"point_query_files": round(clustering_depth(actions, paths, sketches, c, k), 1)} for c in columns
        }

    out["index"] = _index_status(config, version)
    out["streams"] = _streams(history, now)
    if config.source.kind == "kafka":
        out["lag"] = _lag(config, lag_timeout_s)
    return out


def _percentiles(sizes: np.ndarray) -> dict[str, int]:
    points = {"p10": 10, "p50": 50, "p90": 90, "max": 100}
    return {name: int(np.percentile(sizes, p)) if len(sizes) else 0 for name, p in points.items()}


def _operation(entry: dict | None, now: float) -> dict[str, Any] | None:
    if entry is None:
        return None
    return {"version": entry.get("version"), "seconds_ago": _seconds_ago(entry.get("timestamp"), now),
            "metrics": entry.get("operationMetrics") or {}}  # fmt: skip


def _index_status(config: Config, version: int) -> dict[str, Any] | None:
    if not config.index.enabled:
        return None
    try:
        manifest = IndexStore(config.index.resolved_path(config.table)).manifest()
    except LakeclusterError as e:
        return {"error": str(e)}
    if manifest is None:
        return {"delta_version": None, "versions_behind": None}
    return {"delta_version": manifest.delta_version, "versions_behind": version - manifest.delta_version}


def _streams(history: list[dict], now: float) -> dict[str, Any]:
    """The newest commit of every stream the history names (its id is in the commit's metadata)."""
    seen: dict[str, Any] = {}
    for entry in history:  # newest first
        meta = parse_user_metadata(entry.get("userMetadata"))
        stream = meta.get("stream") if meta else None
        if isinstance(stream, str) and stream not in seen:
            seen[stream] = {"version": entry.get("version"), "seconds_ago": _seconds_ago(entry.get("timestamp"), now)}
    return seen


def _lag(config: Config, timeout_s: float) -> dict[str, Any]:
    from dataclasses import replace

    from lakecluster.stream import kafka
    from lakecluster.stream.lag import measure, recorded_offsets

    committed = recorded_offsets(config.table.path, config.stream_id) or {}
    k = replace(config.source.kafka, connect_timeout_s=timeout_s)
    try:
        client = kafka.consumer(k)
        try:
            lags = measure(k, client, committed)
        finally:
            client.close()
    except Exception as e:  # status reports what it can: an unreachable broker is one line of it
        return {"error": str(e).splitlines()[0] if str(e) else type(e).__name__}
    return {"records": sum(lags.values()),
            "partitions": {f"{t}/{p}": n for (t, p), n in sorted(lags.items())}}  # fmt: skip


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError


def _ago(seconds: float | None) -> str:
    if seconds is None:
        return "never"
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f} {unit} ago"
    return f"{seconds:.0f} s ago"


def format_text(s: dict[str, Any]) -> str:
    fb = s["file_bytes"]
    lines = [
        f"table      {s['table']}",
        f"version    {s['version']} (last commit {_ago(s['last_commit_seconds_ago'])})",
        f"files      {s['files']:,} ({human_bytes(s['bytes'])}, {s['rows']:,} rows); {s['small_files']:,} small; "
        f"sizes p10 {human_bytes(fb['p10'])}, p50 {human_bytes(fb['p50'])}, p90 {human_bytes(fb['p90'])}, "
        f"max {human_bytes(fb['max'])}",
    ]
    if s["clustering"] is None:
        lines.append("clustering no boundary sketches yet (the stream writes them)")
    else:
        per_column = ", ".join(f"{c} {v['point_query_files']:g}" for c, v in s["clustering"].items())
        lines.append(f"clustering files a point query reads, per column (of {s['files']:,}): {per_column}")
        sk = s["sketches"]
        lines.append(f"sketches   at version {sk['delta_version']} ({sk['versions_behind']} behind)")
    idx = s["index"]
    if idx is None:
        lines.append("index      off")
    elif "error" in idx:
        lines.append(f"index      unreadable: {idx['error']}")
    elif idx["delta_version"] is None:
        lines.append("index      not built yet")
    else:
        lines.append(f"index      at version {idx['delta_version']} ({idx['versions_behind']} behind)")
    comp = s["compaction"]
    rewrite = comp["last_rewrite"]
    last = "never" if rewrite is None else f"version {rewrite['version']}, {_ago(rewrite['seconds_ago'])}"
    lines.append(f"compaction {comp['pending_groups']} group(s) pending ({human_bytes(comp['pending_bytes'])}); "
                 f"last rewrite {last}")
    vac = s["vacuum"]["last_run"]
    lines.append("vacuum     " + ("never" if vac is None else f"version {vac['version']}, {_ago(vac['seconds_ago'])}"))
    for stream, info in s["streams"].items():
        lines.append(f"stream     {stream}: last commit version {info['version']}, {_ago(info['seconds_ago'])}")
    if "lag" in s:
        lag = s["lag"]
        if "error" in lag:
            lines.append(f"lag        unknown: {lag['error']}")
        else:
            worst = sorted(lag["partitions"].items(), key=lambda kv: -kv[1])[:3]
            lines.append(f"lag        {lag['records']:,} records" + (
                " (most: " + ", ".join(f"{tp} {n:,}" for tp, n in worst) + ")" if lag["records"] else ""))
    return "\n".join(lines)

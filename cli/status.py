"""``lakecluster status``: one screen about a table, read without Spark and without writing anything.

It prints the table's state (:meth:`lakecluster.table.LakeTable.state`, the record the compactor's
gauges show too), with the compaction backlog and the index's state, read from what the services
leave behind (the Delta log, the boundary sketches, the index manifest), and, for a source that has
it, the consumer lag when the brokers answer within ``--lag-timeout``.
"""

from __future__ import annotations

import time
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from lakecluster.cli.stream_progress import batch_progress, format_progress
from lakecluster.compaction.monitor import observe
from lakecluster.layout.auto_layout import pending
from lakecluster.layout.partition_sizes import PartitionSizes
from lakecluster.sizes import human_bytes
from lakecluster.stream.source import Source
from lakecluster.table import Adoption, LakeTable, Operation, TableLayout, TableState


def _seconds_ago(ms: int | None, now: float) -> float | None:
    return None if ms is None else round(now - ms / 1000, 1)


def table_status(table: LakeTable, source: Source, *, lag_timeout_s: float = 5.0) -> dict[str, Any]:
    """The status of the table as plain data (the ``--json`` output).

    The clustering depth is measured on the layout in effect, as the compactor clusters and its
    gauges measure: the newest adopted layout when ``compaction.auto_layout = apply``, the
    configured one otherwise (``clustering_layout`` says which).
    """
    state = observe(table, table.config)  # the table first: a missing or unreachable one fails here, as always
    layout = state.layout if state.layout is not None else table.layout()
    out = status_data(state, time.time())
    out["clustering_layout"] = clustering_layout(layout, out["clustering"])
    _, files = table.live_files().snapshot()
    sizes = PartitionSizes.of_live_files(files, table.config.table.partition_by)
    out["partitions"] = sizes.as_dict(table.config.compaction.target_file_bytes)
    out["layout"] = layout_status(table, files, layout, table.adoption()[0])
    lag = source.measure_lag(table, lag_timeout_s)
    if lag is not None:
        out["lag"] = lag
    return out


def clustering_layout(layout: TableLayout, depths: dict[str, Any] | None) -> dict[str, Any]:
    """Which layout the clustering depth is measured on: its columns, the adoption it comes from
    (None: the configured layout), and its columns the boundary sketches do not cover yet (the
    compactor builds those of an adopted layout from the table at its first round on it)."""
    columns = layout.clustering_columns
    adoption = layout.adoption
    return {"clustering_columns": list(columns), "adoption": None if adoption is None else adoption.number,
            "without_sketches": [c for c in columns if depths is None or c not in depths]}  # fmt: skip


def layout_status(table: LakeTable, files: pa.Table, layout: TableLayout, adoption: Adoption | None) -> dict[str, Any]:
    """The layout loop (``compaction.auto_layout``): the layout in effect, the newest adopted one
    (in effect or not) and the re-clustering's progress, and the compactor's last recommendation
    (``_lakecluster/layout/``)."""
    columns = layout.clustering_columns
    weights = layout.column_weights
    out: dict[str, Any] = {
        "mode": table.config.compaction.auto_layout,
        "in_effect": {"clustering_columns": list(columns), "column_weights": {c: weights.get(c, 1.0) for c in columns},
                      "adopted": layout.is_adopted},
        "adoption": None if adoption is None else adoption.as_dict(),
        "recommendation": table.adoptions().recommendation(),
    }
    if adoption is not None and layout.is_adopted:
        left = files.filter(pc.is_in(files["path"], value_set=pending(files, adoption.fingerprint)))
        out["relayout"] = {"files_left": left.num_rows, "bytes_left": int(pc.sum(left["size"]).as_py() or 0)}
    return out


def status_data(s: TableState, now: float) -> dict[str, Any]:
    """The state as the status's plain data."""
    backlog = s.backlog
    out: dict[str, Any] = {
        "table": s.uri,
        "version": s.version,
        "last_commit_seconds_ago": _seconds_ago(s.last_commit_ms, now),
        "files": s.files,
        "bytes": s.bytes,
        "rows": s.rows,
        "small_files": s.small_files,
        "file_bytes": s.percentiles(),
        "compaction": {
            "pending_groups": backlog.groups if backlog else 0,
            "pending_bytes": backlog.bytes if backlog else 0,
            "last_rewrite": _operation(s.last_rewrite, now),
        },
        "vacuum": {"last_run": _operation(s.last_vacuum, now)},
    }
    if s.sketches_version is None:
        out["sketches"] = out["clustering"] = None
    else:
        out["sketches"] = {"delta_version": s.sketches_version, "versions_behind": s.version - s.sketches_version}
        out["clustering"] = {c: {"point_query_files": round(d, 1)} for c, d in (s.clustering or {}).items()}
    idx = s.index
    if idx is None:
        out["index"] = None
    elif idx.error is not None:
        out["index"] = {"error": idx.error}
    else:
        behind = None if idx.version is None else s.version - idx.version
        out["index"] = {"delta_version": idx.version, "versions_behind": behind}
    out["streams"] = {stream: {"version": c.version, "seconds_ago": _seconds_ago(c.timestamp_ms, now),
                               "last_batch": batch_progress(c)}
                      for stream, c in sorted(s.streams.items(), key=lambda kv: -kv[1].version)}  # fmt: skip
    return out


def _operation(op: Operation | None, now: float) -> dict[str, Any] | None:
    if op is None:
        return None
    return {"version": op.version, "seconds_ago": _seconds_ago(op.timestamp_ms, now), "metrics": dict(op.metrics)}


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
        lines.append(_clustering_line(s))
        sk = s["sketches"]
        lines.append(f"sketches   at version {sk['delta_version']} ({sk['versions_behind']} behind)")
    parts = s.get("partitions")
    if parts and parts["below_one_target_file"]:  # then no layout reads fewer files: say why
        sizes = PartitionSizes(parts["count"], parts["largest_bytes"])
        lines.append(f"layout     {sizes.describe(parts['target_file_bytes'])}")
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
    lines.extend(_layout_lines(s.get("layout")))
    vac = s["vacuum"]["last_run"]
    lines.append("vacuum     " + ("never" if vac is None else f"version {vac['version']}, {_ago(vac['seconds_ago'])}"))
    for stream, info in s["streams"].items():
        lines.append(f"stream     {stream}: last commit version {info['version']}, {_ago(info['seconds_ago'])}")
        lines.extend(format_progress(stream, info["last_batch"]))
    if "lag" in s:
        lag = s["lag"]
        if "error" in lag:
            lines.append(f"lag        unknown: {lag['error']}")
        else:
            worst = sorted(lag["partitions"].items(), key=lambda kv: -kv[1])[:3]
            lines.append(f"lag        {lag['records']:,} records" + (
                " (most: " + ", ".join(f"{tp} {n:,}" for tp, n in worst) + ")" if lag["records"] else ""))
    return "\n".join(lines)


def _clustering_line(s: dict[str, Any]) -> str:
    """The clustering depth per column, on the layout in effect, and which layout that is."""
    per_column = ", ".join(f"{c} {v['point_query_files']:g}" for c, v in s["clustering"].items())
    cl = s.get("clustering_layout")
    if cl is None:  # a status from before clustering_layout
        return f"clustering files a point query reads, per column (of {s['files']:,}): {per_column}"
    which = "the configured layout" if cl["adoption"] is None else f"adopted layout {cl['adoption']}"
    line = f"clustering files a point query reads (of {s['files']:,}), per column of {which}: {per_column}"
    if cl["without_sketches"]:
        line += ("; " if per_column else "") + (f"no boundary sketches of {', '.join(cl['without_sketches'])} yet "
                                                 "(the compactor builds them from the table)")  # fmt: skip
    return line


def _layout_lines(layout: dict[str, Any] | None) -> list[str]:
    if layout is None:
        return []
    now = layout["in_effect"]
    weights = now["column_weights"]
    columns = ", ".join(f"{c} x{w:g}" if len(set(weights.values())) > 1 else c for c, w in weights.items())
    adoption = layout["adoption"]
    origin = "configured"
    if now["adopted"]:
        origin = f"adopted layout {adoption['number']}, {_ago(time.time() - adoption['time'])}"
    lines = [f"layout     {columns} ({origin}); compaction.auto_layout = {layout['mode']}"]
    if adoption is not None and not now["adopted"]:
        why = ("its columns are not data columns of the table as configured" if layout["mode"] == "apply"
               else "compaction.auto_layout is not apply")  # fmt: skip
        lines.append(f"           adopted layout {adoption['number']} ({', '.join(adoption['clustering_columns'])}) is "
                     f"not in effect: {why}")  # fmt: skip
    if "relayout" in layout:
        r = layout["relayout"]
        lines.append(f"           re-clustering: {r['files_left']:,} file(s), {human_bytes(r['bytes_left'])} left" if
                     r["files_left"] else "           re-clustering: done, every compacted file is on this layout")
    rec = layout["recommendation"]
    if rec is not None:
        when = _ago(time.time() - rec["time"])
        best = rec.get("recommended")
        if best is None:
            lines.append(f"           recommended ({when}, {rec['scans']:,} scans): nothing: {rec['decision']}")
        else:
            part = f" | partition_by {', '.join(best['partition_by'])}" if best["partition_by"] else ""
            cur = (rec.get("current") or {}).get("files_read_per_scan", 0.0)
            lines.append(f"           recommended ({when}, {rec['scans']:,} scans): "
                         f"{', '.join(best['clustering_columns'])}{part}; files read per scan {cur:,.1f} -> "
                         f"{best['files_read_per_scan']:,.1f} ({rec['gain']:.0%} fewer with the table's "
                         f"partitioning); {rec['decision']}")  # fmt: skip
    return lines

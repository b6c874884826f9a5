"""``lakecluster workload``: what the query listener captured on the table (docs/workload.md), and
the two settings that turn capture on in another application (``--listener-conf``).

Shapes (columns and operators) are counted per scan of the table; files read are counted per
query (the scans of one query added up: a self-join reads the table twice), with their mean,
median and largest, overall and per UTC day.
"""

from __future__ import annotations

import datetime as dt
import statistics
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from lakecluster.sizes import human_bytes
from lakecluster.workload.capture import Capture, CapturedScan
from lakecluster.workload.eventlog_import import ImportReport


def summary(capture: Capture, *, table: str, since_s: float, top: int) -> dict[str, Any]:
    scans = capture.scans
    queries = _per_query(scans)
    shapes: dict[str, list[CapturedScan]] = defaultdict(list)
    for s in scans:
        shapes[s.shape].append(s)
    days: dict[str, list[int | None]] = defaultdict(list)
    for (day, _), files in queries.items():
        days[day].append(files)
    ranked = sorted(shapes.items(), key=lambda kv: (-len(kv[1]), kv[0]))
    totals = [s.files_total for s in scans if s.files_total is not None]
    return {
        "table": table,
        "folder": capture.folder,
        "window_s": since_s,
        "capture_files": capture.files,
        "capture_bytes": capture.bytes,
        "skipped": capture.skipped,
        "scans": len(scans),
        "queries": len(queries),
        "applications": len({s.app_id for s in scans}),
        "first": iso_ms(scans[0].time_ms) if scans else None,
        "last": iso_ms(scans[-1].time_ms) if scans else None,
        "files_read_per_query": _stats(queries.values()),
        "files_in_table": totals[-1] if totals else None,
        "shapes": [
            {"shape": shape or "(no filter)", "scans": len(group), "share": round(len(group) / len(scans), 4),
             "files_read_per_scan": _stats(s.files_read for s in group), "last": iso_ms(group[-1].time_ms)}
            for shape, group in ranked[:top]
        ],
        "other_shapes": max(0, len(ranked) - top),
        "days": [{"day": day, "queries": len(files), "files_read_per_query": _stats(files)}
                 for day, files in sorted(days.items())],
    }  # fmt: skip


def _per_query(scans: list[CapturedScan]) -> dict[tuple[str, tuple[str, int]], int | None]:
    """Files read by each query ((day, query) -> files; None when a scan's count is unknown)."""
    out: dict[tuple[str, tuple[str, int]], int | None] = {}
    for s in scans:
        key = (_day(s.time_ms), s.query_key)
        seen = out.get(key, 0)
        out[key] = None if seen is None or s.files_read is None else seen + s.files_read
    return out


def _stats(values: Iterable[int | None]) -> dict[str, float | int | None]:
    known = [v for v in values if v is not None]
    if not known:
        return {"mean": None, "p50": None, "max": None}
    return {"mean": round(statistics.fmean(known), 1), "p50": statistics.median(known), "max": max(known)}


def _day(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).date().isoformat()


def iso_ms(ms: int | None) -> str | None:
    """Milliseconds since the epoch as an ISO-8601 UTC time to the second (None stays None)."""
    return None if ms is None else dt.datetime.fromtimestamp(ms / 1000, dt.UTC).isoformat(timespec="seconds")


def _num(v: Any) -> str:
    return "-" if v is None else f"{v:g}" if isinstance(v, float) else f"{v:,}"


def _stats_text(s: dict[str, Any]) -> str:
    return f"mean {_num(s['mean'])}, p50 {_num(s['p50'])}, max {_num(s['max'])}"


def format_text(data: dict[str, Any]) -> str:
    lines = [f"workload of {data['table']}: {data['queries']:,} quer(ies), {data['scans']:,} scan(s) of the table "
             f"by {data['applications']} application(s), {data['first'] or '-'} .. {data['last'] or '-'} "
             f"({data['capture_files']} capture file(s), {human_bytes(data['capture_bytes'])})"]  # fmt: skip
    for s in data["skipped"]:
        lines.append(f"  skipped {s['file']}: {s['reason']}")
    if not data["scans"]:
        lines.append("nothing captured: enable the listener in the applications that read the table "
                     "(lakecluster workload --listener-conf)")  # fmt: skip
        return "\n".join(lines)
    table_files = "" if data["files_in_table"] is None else f" (the table had {data['files_in_table']:,} files)"
    lines.append(f"files read per query: {_stats_text(data['files_read_per_query'])}{table_files}")
    lines.append("top predicate shapes (scans, share, files read per scan):")
    width = max(len(s["shape"]) for s in data["shapes"])
    for s in data["shapes"]:
        lines.append(f"  {s['shape']:<{width}}  {s['scans']:>7,}  {s['share']:>6.1%}  "
                     f"{_stats_text(s['files_read_per_scan'])}")  # fmt: skip
    if data["other_shapes"]:
        lines.append(f"  ... and {data['other_shapes']:,} more shape(s) (--top, --json)")
    lines.append("per day (queries, files read per query):")
    for d in data["days"]:
        lines.append(f"  {d['day']}  {d['queries']:>7,}  {_stats_text(d['files_read_per_query'])}")
    return "\n".join(lines)


def format_listener_conf(conf: dict[str, str]) -> str:
    """One ``key=value`` line per setting, as ``spark-submit --conf`` and ``spark-defaults.conf`` take them."""
    return "\n".join(f"{key}={value}" for key, value in conf.items())


def format_import(report: ImportReport) -> str:
    """What ``--import-eventlog`` did: a line for the whole, one per application, one per log passed over."""
    apps = report.applications
    lines = [f"imported {report.imported_scans:,} scan(s) of {report.imported_executions:,} SQL execution(s) of "
             f"{report.table} from {len(apps)} application(s) into {report.folder} ({report.files} file(s), "
             f"{human_bytes(report.bytes)})"]  # fmt: skip
    for a in apps:
        skipped = "; ".join(f"{reason}: {n:,}" for reason, n in a.skipped.items())
        malformed = f"; {a.malformed_lines:,} malformed line(s) skipped" if a.malformed_lines else ""
        lines.append(f"  {a.app_id or '?'} ({a.app_name or '-'}) {a.log}: {a.executions:,} SQL execution(s), "
                     f"{a.executions_of_table:,} scanned the table ({a.scans:,} scan(s)), {a.imported_executions:,} "
                     f"imported{malformed}" + (f"; skipped: {skipped}" if skipped else ""))  # fmt: skip
    for s in report.skipped_logs:
        lines.append(f"  skipped {s['log']}: {s['reason']}")
    return "\n".join(lines)

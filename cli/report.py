"""``lakecluster report --out DIR``: one HTML page about a table's layout, with plots.

Read-only, like ``status`` (whose numbers it shows first): the file-size histogram, the key
ranges of every file per clustering column (the clustering picture: narrow, stacked bars are a
good layout, long ones are files every query must read), the files a point query reads per
column, and the history of compaction rewrites. The plots are SVG drawn here, so the page needs
no plotting library and opens offline; ``report.json`` beside it holds the same data.
"""

from __future__ import annotations

import datetime
import html
import json
from pathlib import Path
from typing import Any

import numpy as np

from lakecluster import plots
from lakecluster.clustering import file_ranges
from lakecluster.errors import UsageError
from lakecluster.stream.source import Source
from lakecluster.table import LakeTable

from .status import table_status

MAX_FILES_DRAWN = 1500  # key-range plots: an even sample of the files beyond this
HISTORY_LIMIT = 2000  # commits read back for the rewrite history


def collect(table: LakeTable, source: Source) -> dict[str, Any]:
    """Everything the page shows, as plain data."""
    status = table_status(table, source, lag_timeout_s=2.0)
    # The key ranges of the layout in effect, whose depth the status measured (an adopted one
    # when compaction.auto_layout = apply): the live files keep those columns' stats (LakeTable.layout).
    _, files = table.live_files().snapshot()
    sizes = files["size"].to_numpy()
    edges = 2 ** np.arange(10, 35)  # 1 KiB .. 16 GiB
    counts = np.bincount(np.searchsorted(edges, sizes, side="left"), minlength=len(edges) + 1)
    data: dict[str, Any] = {"status": status, "size_histogram": [
        {"up_to_bytes": int(edges[i]) if i < len(edges) else None, "files": int(c)}
        for i, c in enumerate(counts) if c]}  # fmt: skip

    sketches = table.sketches().latest()
    ranges: dict[str, list[tuple[float, float]]] = {}
    if sketches is not None and files.num_rows:
        step = max(1, files.num_rows // MAX_FILES_DRAWN)
        sample = files.take(np.arange(0, files.num_rows, step))
        for column in status["clustering_layout"]["clustering_columns"]:
            lo, hi = file_ranges(sample, sketches, column, table.config.sketches.boundaries)
            if len(lo):
                order = np.lexsort((hi, lo))
                ranges[column] = [(round(float(lo[i]), 5), round(float(hi[i]), 5)) for i in order]
    data["key_ranges"] = ranges

    rewrites = []
    for entry in reversed(table.delta.history(HISTORY_LIMIT)):  # oldest first
        if entry.get("operation") != "OPTIMIZE":
            continue
        m = entry.get("operationMetrics") or {}
        rewrites.append({"version": entry.get("version"), "timestamp_ms": entry.get("timestamp"),
                         "files_removed": int(m.get("numRemovedFiles", 0) or 0),
                         "files_added": int(m.get("numAddedFiles", 0) or 0),
                         "bytes_removed": int(m.get("numRemovedBytes", 0) or 0)})  # fmt: skip
    data["rewrites"] = rewrites
    return data


PAGE, DATA = "index.html", "report.json"


def writable_out(out: Path, *, force: bool, names: tuple[str, ...] = (PAGE, DATA)) -> None:
    """Refuse to replace a file at ``out`` or the files ``names`` in it unless ``force`` (then a
    file at ``out`` goes)."""
    taken = [p for p in (out / n for n in names) if p.exists()] if out.is_dir() else [out] if out.exists() else []
    if taken and not force:
        what = "is a file" if taken == [out] else f"holds an earlier one ({', '.join(p.name for p in taken)})"
        raise UsageError(f"--out {out}", f"{what}; choose another directory or add --force to replace it")
    if out.exists() and not out.is_dir():
        out.unlink()


def write(table: LakeTable, source: Source, out: Path) -> Path:
    """Write ``index.html`` and ``report.json`` into ``out``; returns the page's path."""
    data = collect(table, source)
    out.mkdir(parents=True, exist_ok=True)
    (out / DATA).write_text(json.dumps(data, indent=1, default=str))
    page = out / PAGE
    page.write_text(render(data))
    return page


# -- drawing ---------------------------------------------------------------------------------


def timeline(rewrites: list[dict]) -> str:
    """Files rewritten and written by compaction, cumulative, over time."""
    if not rewrites:
        return "<p>no rewrite in the table's history yet</p>"
    t = [float(r["timestamp_ms"]) for r in rewrites]
    removed = np.cumsum([r["files_removed"] for r in rewrites])
    added = np.cumsum([r["files_added"] for r in rewrites])
    start = datetime.datetime.fromtimestamp(t[0] / 1000, datetime.UTC).strftime("%Y-%m-%d %H:%M")
    end = datetime.datetime.fromtimestamp(t[-1] / 1000, datetime.UTC).strftime("%Y-%m-%d %H:%M")
    series = {f"files rewritten ({int(removed[-1]):,})": (removed.tolist(), plots.BLUE),
              f"files written ({int(added[-1]):,})": (added.tolist(), plots.ORANGE)}  # fmt: skip
    return plots.lines(t, series, "compaction history", f"time (UTC) {start} .. {end}", "files, cumulative",
                       dots=next(iter(series)))  # fmt: skip


def _layout_named(s: dict[str, Any]) -> str:
    cl = s.get("clustering_layout")
    if cl is None:
        return ""
    which = "the configured layout" if cl["adoption"] is None else f"adopted layout {cl['adoption']}"
    return f"Clustering columns of {which}: {', '.join(cl['clustering_columns'])}."


def render(data: dict[str, Any]) -> str:
    s = data["status"]
    clustering = s.get("clustering") or {}
    rows = [("table", s["table"]), ("version", s["version"]), ("files", f"{s['files']:,}"),
            ("bytes", f"{s['bytes']:,}"), ("rows", f"{s['rows']:,}"), ("small files", f"{s['small_files']:,}"),
            ("pending compaction groups", s["compaction"]["pending_groups"])]  # fmt: skip
    summary = "".join(f"<tr><th>{html.escape(str(k))}</th><td>{html.escape(str(v))}</td></tr>" for k, v in rows)
    hist = data["size_histogram"]
    sections = [
        "<h2>File sizes</h2>",
        plots.bars([plots.size_label(h["up_to_bytes"]) for h in hist], [h["files"] for h in hist], "file sizes",
                   "files"),
        "<h2>Files a point query reads, per clustering column</h2>",
        f"<p>{html.escape(_layout_named(s))}</p>",
        f"<p>Out of {s['files']:,} files; a well clustered table reads few.</p>",
        plots.bars(list(clustering), [c["point_query_files"] for c in clustering.values()], "point query files",
                   "files read", plots.GREEN),
        "<h2>Key ranges of the files (the clustering picture)</h2>",
        "<p>One bar per file, from its minimum to its maximum of the column, placed by the share of "
        "rows below it. Short bars stacked along the diagonal: queries on the column skip most files. "
        "Bars across the whole width: files every query on the column must read.</p>",
    ]
    for column, segments in data["key_ranges"].items():
        sections += [f"<h3>{html.escape(column)}</h3>",
                     plots.ranges(segments, f"key ranges of {column}",
                                  f"{column}: position of the file's min..max among all rows (0 to 1)", "files")]
    if not data["key_ranges"]:
        sections.append("<p>no boundary sketches yet: the stream writes them with every micro-batch</p>")
    sections += ["<h2>Compaction history</h2>", timeline(data["rewrites"])]
    return ("<!doctype html><html><head><meta charset='utf-8'><title>lakecluster report</title>"
            "<style>body{font-family:sans-serif;margin:24px;max-width:800px}th{text-align:left;padding-right:16px}"
            "</style></head><body><h1>lakecluster report</h1>"
            f"<table>{summary}</table>{''.join(sections)}</body></html>")  # fmt: skip

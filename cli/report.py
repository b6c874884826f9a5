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

from lakecluster.compaction.planner import snapshot_files
from lakecluster.config import Config
from lakecluster.sketch_store import SketchStore
from lakecluster.table import open_table

from .status import HISTORY_LIMIT, table_status

MAX_FILES_DRAWN = 1500  # key-range plots: an even sample of the files beyond this
WIDTH, HEIGHT, PAD = 720, 260, 48


def collect(config: Config) -> dict[str, Any]:
    """Everything the page shows, as plain data."""
    status = table_status(config, lag_timeout_s=2.0)
    table = open_table(config.table.path)
    files, actions = snapshot_files(table, config.table.partition_by)
    sizes = np.array([f.size for f in files], dtype=np.int64)
    edges = 2 ** np.arange(10, 35)  # 1 KiB .. 16 GiB
    counts = np.bincount(np.searchsorted(edges, sizes, side="left"), minlength=len(edges) + 1)
    data: dict[str, Any] = {"status": status, "size_histogram": [
        {"up_to_bytes": int(edges[i]) if i < len(edges) else None, "files": int(c)}
        for i, c in enumerate(counts) if c]}  # fmt: skip

    sketches = SketchStore(config.table.path).latest()
    ranges: dict[str, list[tuple[float, float]]] = {}
    if sketches is not None and len(files):
        step = max(1, len(files) // MAX_FILES_DRAWN)
        sample = actions.take(np.arange(0, actions.num_rows, step))
        for column in config.table.clustering_columns:
            if column not in sketches.sketches or f"min.{column}" not in sample.column_names:
                continue
            b = sketches.boundaries(column, config.sketches.boundaries)
            if len(b) == 0:
                continue
            zero = np.zeros(sample.num_rows, dtype=np.int64)
            lo = b.mass(zero, b.ranks(sample[f"min.{column}"]) - 1)
            hi = b.mass(zero, b.ranks(sample[f"max.{column}"]))
            unknown = sample[f"min.{column}"].is_null().to_numpy(zero_copy_only=False)
            lo, hi = np.where(unknown, 0.0, lo), np.where(unknown, 1.0, hi)  # no stats: the whole range
            order = np.lexsort((hi, lo))
            ranges[column] = [(round(float(lo[i]), 5), round(float(hi[i]), 5)) for i in order]
    data["key_ranges"] = ranges

    rewrites = []
    for entry in reversed(table.history(HISTORY_LIMIT)):  # oldest first
        if entry.get("operation") != "OPTIMIZE":
            continue
        m = entry.get("operationMetrics") or {}
        rewrites.append({"version": entry.get("version"), "timestamp_ms": entry.get("timestamp"),
                         "files_removed": int(m.get("numRemovedFiles", 0) or 0),
                         "files_added": int(m.get("numAddedFiles", 0) or 0),
                         "bytes_removed": int(m.get("numRemovedBytes", 0) or 0)})  # fmt: skip
    data["rewrites"] = rewrites
    return data


def write(config: Config, out: Path) -> Path:
    """Write ``index.html`` and ``report.json`` into ``out``; returns the page's path."""
    data = collect(config)
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.json").write_text(json.dumps(data, indent=1, default=str))
    page = out / "index.html"
    page.write_text(render(data))
    return page


# -- drawing ---------------------------------------------------------------------------------


def _svg(body: str, title: str, height: int = HEIGHT) -> str:
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
            f'viewBox="0 0 {WIDTH} {height}" role="img" aria-label="{html.escape(title)}">'
            f'<rect width="100%" height="100%" fill="#fff"/>{body}</svg>')  # fmt: skip


def _axes(height: int, x_label: str, y_label: str) -> str:
    bottom = height - PAD
    return (f'<line x1="{PAD}" y1="{bottom}" x2="{WIDTH - 10}" y2="{bottom}" stroke="#333"/>'
            f'<line x1="{PAD}" y1="10" x2="{PAD}" y2="{bottom}" stroke="#333"/>'
            f'<text x="{WIDTH / 2}" y="{height - 10}" text-anchor="middle" font-size="12">{html.escape(x_label)}</text>'
            f'<text x="12" y="{height / 2}" font-size="12" transform="rotate(-90 12 {height / 2})" '
            f'text-anchor="middle">{html.escape(y_label)}</text>')  # fmt: skip


def bars(labels: list[str], values: list[float], title: str, y_label: str, color: str = "#4c78a8") -> str:
    if not values:
        return "<p>no data</p>"
    top = max(values) or 1
    plot_w, plot_h = WIDTH - PAD - 20, HEIGHT - 2 * PAD + 10
    w = plot_w / len(values)
    body = [_axes(HEIGHT, "", y_label)]
    for i, (label, v) in enumerate(zip(labels, values, strict=True)):
        h = plot_h * v / top
        x, y = PAD + i * w + 2, HEIGHT - PAD - h
        body.append(f'<rect x="{x:.1f}" y="{y:.1f}" width="{max(w - 4, 1):.1f}" height="{h:.1f}" fill="{color}">'
                    f'<title>{html.escape(label)}: {v:,.1f}</title></rect>'
                    f'<text x="{x + w / 2 - 2:.1f}" y="{HEIGHT - PAD + 14}" font-size="10" text-anchor="middle">'
                    f'{html.escape(label)}</text>'
                    f'<text x="{x + w / 2 - 2:.1f}" y="{y - 3:.1f}" font-size="10" '
                    f'text-anchor="middle">{v:,.0f}</text>')
    return _svg("".join(body), title)


def key_ranges(column: str, segments: list[tuple[float, float]]) -> str:
    """One horizontal bar per file from its min to its max, in row-fraction coordinates (0..1)."""
    height = 300
    plot_w, plot_h = WIDTH - PAD - 20, height - 2 * PAD + 10
    row = plot_h / max(len(segments), 1)
    body = [_axes(height, f"{column}: position of the file's min..max among all rows (0 to 1)", "files")]
    for i, (lo, hi) in enumerate(segments):
        x = PAD + lo * plot_w
        body.append(f'<rect x="{x:.1f}" y="{10 + i * row:.2f}" width="{max((hi - lo) * plot_w, 1):.1f}" '
                    f'height="{max(row, 0.5):.2f}" fill="#e45756" fill-opacity="0.8"/>')  # fmt: skip
    return _svg("".join(body), f"key ranges of {column}", height)


def timeline(rewrites: list[dict]) -> str:
    if not rewrites:
        return "<p>no rewrite in the table's history yet</p>"
    t = np.array([r["timestamp_ms"] for r in rewrites], dtype=np.float64)
    removed = np.cumsum([r["files_removed"] for r in rewrites])
    added = np.cumsum([r["files_added"] for r in rewrites])
    span = max(t[-1] - t[0], 1.0)
    top = max(float(removed[-1]), 1.0)
    plot_w, plot_h = WIDTH - PAD - 20, HEIGHT - 2 * PAD + 10

    def points(values: np.ndarray) -> str:
        return " ".join(f"{PAD + (ti - t[0]) / span * plot_w:.1f},{HEIGHT - PAD - v / top * plot_h:.1f}"
                        for ti, v in zip(t, values, strict=True))  # fmt: skip

    start = datetime.datetime.fromtimestamp(t[0] / 1000, datetime.UTC).strftime("%Y-%m-%d %H:%M")
    end = datetime.datetime.fromtimestamp(t[-1] / 1000, datetime.UTC).strftime("%Y-%m-%d %H:%M")
    body = [_axes(HEIGHT, f"time (UTC) {start} .. {end}", "files, cumulative"),
            f'<polyline points="{points(removed)}" fill="none" stroke="#4c78a8" stroke-width="2"/>',
            f'<polyline points="{points(added)}" fill="none" stroke="#f58518" stroke-width="2"/>',
            *(f'<circle cx="{p.split(",")[0]}" cy="{p.split(",")[1]}" r="3" fill="#4c78a8"/>'
              for p in points(removed).split()),
            f'<text x="{PAD + 10}" y="24" font-size="12" fill="#4c78a8">files rewritten ({int(removed[-1]):,})</text>',
            f'<text x="{PAD + 10}" y="40" font-size="12" fill="#f58518">files written ({int(added[-1]):,})</text>']
    return _svg("".join(body), "compaction history")


def _size_label(up_to: int | None) -> str:
    if up_to is None:
        return "more"
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if up_to >= scale:
            return f"≤{up_to // scale}{unit}"
    return f"≤{up_to}B"


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
        bars([_size_label(h["up_to_bytes"]) for h in hist], [h["files"] for h in hist], "file sizes", "files"),
        "<h2>Files a point query reads, per clustering column</h2>",
        f"<p>Out of {s['files']:,} files; a well clustered table reads few.</p>",
        bars(list(clustering), [c["point_query_files"] for c in clustering.values()], "point query files",
             "files read", "#54a24b"),
        "<h2>Key ranges of the files (the clustering picture)</h2>",
        "<p>One bar per file, from its minimum to its maximum of the column, placed by the share of "
        "rows below it. Short bars stacked along the diagonal: queries on the column skip most files. "
        "Bars across the whole width: files every query on the column must read.</p>",
    ]
    for column, segments in data["key_ranges"].items():
        sections += [f"<h3>{html.escape(column)}</h3>", key_ranges(column, segments)]
    if not data["key_ranges"]:
        sections.append("<p>no boundary sketches yet: the stream writes them with every micro-batch</p>")
    sections += ["<h2>Compaction history</h2>", timeline(data["rewrites"])]
    return ("<!doctype html><html><head><meta charset='utf-8'><title>lakecluster report</title>"
            "<style>body{font-family:sans-serif;margin:24px;max-width:800px}th{text-align:left;padding-right:16px}"
            "</style></head><body><h1>lakecluster report</h1>"
            f"<table>{summary}</table>{''.join(sections)}</body></html>")  # fmt: skip

"""``lakecluster tune``: the compaction thresholds side by side, predicted on the table as it is.

One row per grid point: groups and bytes the next round would rewrite, its write amplification
(bytes rewritten per byte not yet compacted), the files left, and the files a point query on each
clustering column would read afterwards. ``--out DIR`` adds a page plotting files read against
bytes rewritten, the trade every threshold makes.
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

from lakecluster.compaction.planner import snapshot_files
from lakecluster.compaction.tune import TUNABLE, default_axes, grid, predict, valid
from lakecluster.config import Config
from lakecluster.errors import ConfigError, LakeclusterError
from lakecluster.sketch_store import SketchStore
from lakecluster.table import open_table

from .report import HEIGHT, PAD, WIDTH, _axes, _svg

UNITS = {"KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "KB": 10**3, "MB": 10**6, "GB": 10**9}


def parse_axis(text: str) -> tuple[str, list[int]]:
    """``target_file_bytes=64MiB,128MiB`` (``compaction.`` prefix optional) -> (key, values)."""
    key, sep, values = text.partition("=")
    key = key.strip().removeprefix("compaction.")
    if not sep or key not in TUNABLE:
        raise ConfigError(f"--grid {text}", f"takes KEY=V1,V2,... with KEY one of {', '.join(TUNABLE)}")
    out = []
    for raw in values.split(","):
        v = raw.strip()
        unit = next((u for u in UNITS if v.endswith(u)), None)
        try:
            out.append(int(float(v[: -len(unit)]) * UNITS[unit]) if unit else int(v))
        except ValueError:
            raise ConfigError(f"--grid {text}", f"{v!r} is not a whole number (units: {', '.join(UNITS)})") from None
    return key, out


def tune(config: Config, axes_text: list[str]) -> dict[str, Any]:
    axes = dict(parse_axis(a) for a in axes_text) if axes_text else default_axes(config.compaction)
    table = open_table(config.table.path)
    sketches = SketchStore(config.table.path).latest()
    if sketches is None:
        raise LakeclusterError("no boundary sketches yet: run the stream first (it writes them with every micro-batch)")
    files, actions = snapshot_files(table, config.table.partition_by)
    candidates = grid(config.compaction, axes)
    current = predict(config, config.compaction, files, actions, sketches, table.version())
    new_bytes = sum(f.size for f in files if f.generation == 0)
    rows = []
    for cfg in candidates:
        if not valid(config, cfg):
            continue
        p = predict(config, cfg, files, actions, sketches, table.version())
        amplification = round(p.write_amplification(new_bytes), 2)
        rows.append({"settings": {k: p.settings[k] for k in axes}, "groups": p.groups,
                     "bytes_rewritten": p.bytes_rewritten, "write_amplification": amplification,
                     "files_after": p.files_after, "point_query_files": p.point_query_files,
                     "current": all(getattr(cfg, k) == getattr(config.compaction, k) for k in axes)})  # fmt: skip
    return {"table": config.table.path, "version": table.version(), "files": len(files), "new_bytes": new_bytes,
            "axes": axes, "current": {"settings": {k: current.settings[k] for k in axes},
                                      "point_query_files": current.point_query_files}, "grid": rows}  # fmt: skip


def format_text(data: dict[str, Any]) -> str:
    keys = list(data["axes"])
    columns = list(data["current"]["point_query_files"])
    head = [*keys, "groups", "MB rewritten", "write amp.", "files after", *[f"reads {c}" for c in columns]]
    lines = [f"{data['table']} at version {data['version']}: {data['files']:,} files, "
             f"{data['new_bytes'] / 1e6:,.1f} MB not yet compacted; predicted for the next round:", ""]  # fmt: skip
    table = [head]
    for r in data["grid"]:
        table.append([*(f"{r['settings'][k]:,}" for k in keys), str(r["groups"]), f"{r['bytes_rewritten'] / 1e6:,.1f}",
                      f"{r['write_amplification']:.2f}", f"{r['files_after']:,}",
                      *(f"{r['point_query_files'][c]:,.1f}" for c in columns)])  # fmt: skip
        if r["current"]:
            table[-1][0] = "*" + table[-1][0]
    widths = [max(len(row[i]) for row in table) for i in range(len(head))]
    lines += ["  ".join(cell.rjust(w) for cell, w in zip(row, widths, strict=True)) for row in table]
    lines.append("\n* the current settings")
    return "\n".join(lines)


def write_page(data: dict[str, Any], out: Path) -> Path:
    """A scatter of mean point-query files against MB rewritten, one dot per grid point."""
    rows = data["grid"]
    xs = [r["bytes_rewritten"] / 1e6 for r in rows]
    ys = [sum(r["point_query_files"].values()) / max(len(r["point_query_files"]), 1) for r in rows]
    x_top, y_top = max(xs, default=1.0) or 1.0, max(ys, default=1.0) or 1.0
    plot_w, plot_h = WIDTH - PAD - 20, HEIGHT - 2 * PAD + 10
    dots = []
    for r, x, y in zip(rows, xs, ys, strict=True):
        label = ", ".join(f"{k}={v:,}" for k, v in r["settings"].items())
        cx, cy = PAD + x / x_top * plot_w * 0.95, HEIGHT - PAD - y / y_top * plot_h * 0.95
        colour = "#e45756" if r["current"] else "#4c78a8"
        dots.append(f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="5" fill="{colour}"><title>{html.escape(label)}: '
                    f'{x:,.1f} MB, {y:,.1f} files</title></circle>')  # fmt: skip
    svg = _svg(_axes(HEIGHT, "MB the next round rewrites", "files a point query reads (mean of the columns)")
               + "".join(dots), "tune")  # fmt: skip
    out.mkdir(parents=True, exist_ok=True)
    page = out / "tune.html"
    page.write_text("<!doctype html><html><head><meta charset='utf-8'><title>lakecluster tune</title></head>"
                    "<body style='font-family:sans-serif'><h1>lakecluster tune</h1><p>One dot per setting "
                    "(hover for it); red: the current one. Lower is better skipping, left is less rewriting.</p>"
                    f"{svg}<pre>{html.escape(format_text(data))}</pre></body></html>")  # fmt: skip
    return page

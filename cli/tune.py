"""``lakecluster tune``: the compaction thresholds side by side, predicted on the table as it is;
with ``--queries``, the layouts (clustering columns, weights, partitioning) scored on a workload.

One row per threshold grid point: groups and bytes the next round would rewrite, its write amplification
(bytes rewritten per byte not yet compacted), the files left, and the files a point query on each
clustering column would read afterwards. ``--out DIR`` adds a page plotting files read against
bytes rewritten, the trade every threshold makes.
"""

from __future__ import annotations

import html
import logging
import statistics
import time
from pathlib import Path
from typing import Any

import pyarrow as pa

from lakecluster import plots
from lakecluster.cli.workload import iso_ms
from lakecluster.compaction.table_sketches import table_parents
from lakecluster.compaction.tune import TUNABLE, default_axes, grid, predict, valid
from lakecluster.config import Config
from lakecluster.errors import LakeclusterError, UsageError
from lakecluster.hierarchy import Parent
from lakecluster.layout.advise import Advice, current_candidate, layout_advice
from lakecluster.layout.model import OBJECTIVES, Candidate, Scored
from lakecluster.layout.partition_sizes import PartitionSizes
from lakecluster.layout.search import MIN_GAIN, gain
from lakecluster.sizes import human_bytes, human_duration, mebibytes
from lakecluster.suggest import did_you_mean
from lakecluster.table import LakeTable, table_properties
from lakecluster.table.live_files import data_files, typed_partitions
from lakecluster.workload.capture import read_capture
from lakecluster.workload.captured import CapturedQuery, captured_queries, too_little
from lakecluster.workload.queries import Query, WorkloadError, parse_workload

log = logging.getLogger(__name__)

SHOWN_CANDIDATES = 12
SHOWN_QUERIES = 20

UNITS = {"KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "KB": 10**3, "MB": 10**6, "GB": 10**9}


def parse_axis(text: str) -> tuple[str, list[int]]:
    """``target_file_bytes=64MiB,128MiB`` (``compaction.`` prefix optional) -> (key, values)."""
    key, sep, values = text.partition("=")
    key = key.strip().removeprefix("compaction.")
    if not sep or key not in TUNABLE:
        raise UsageError("--grid", f"{text!r} is not KEY=V1,V2,... with KEY one of {', '.join(TUNABLE)}"
                         f"{did_you_mean(key, TUNABLE)}")
    out = []
    for raw in values.split(","):
        v = raw.strip()
        unit = next((u for u in UNITS if v.endswith(u)), None)
        try:
            out.append(int(float(v[: -len(unit)]) * UNITS[unit]) if unit else int(v))
        except ValueError:
            raise UsageError("--grid", f"{v!r} in {text!r} is not a whole number (units: {', '.join(UNITS)})") from None
    return key, out


def tune(lake: LakeTable, axes_text: list[str]) -> dict[str, Any]:
    """The grid of thresholds (``--grid``, default ``default_axes``) predicted on the table."""
    config = lake.config
    axes = dict(parse_axis(a) for a in axes_text) if axes_text else default_axes(config.compaction)
    sketches = lake.sketches().latest()
    if sketches is None:
        raise LakeclusterError("no boundary sketches yet: run the stream first (it writes them with every micro-batch)")
    t = config.table
    version, rows, metadata = lake.live_files().with_stats(t.columns)
    files = data_files(rows, t.partition_by)
    actions = typed_partitions(rows, [t.column(p) for p in t.partition_by])
    candidates = grid(config.compaction, axes)
    parents: dict[str, Parent] = {}
    if config.compaction.group_by_parents:  # as the compactor finds them; without, when it cannot
        configuration = table_properties(metadata.configuration)
        try:
            parents = table_parents(config, lake, rows, version, configuration)
        except (OSError, pa.ArrowException) as e:
            log.warning("the predictions leave out the layout's parent columns: the table's sample could not be "
                        "read: %s", e)  # fmt: skip
    current = predict(config, config.compaction, files, actions, sketches, version, parents)
    new_bytes = sum(f.size for f in files if f.generation == 0)
    rows = []
    for cfg in candidates:
        if not valid(config, cfg):
            continue
        p = predict(config, cfg, files, actions, sketches, version, parents)
        amplification = round(p.write_amplification(new_bytes), 2)
        rows.append({"settings": {k: p.settings[k] for k in axes}, "groups": p.groups,
                     "bytes_rewritten": p.bytes_rewritten, "write_amplification": amplification,
                     "files_after": p.files_after, "point_query_files": p.point_query_files,
                     "current": all(getattr(cfg, k) == getattr(config.compaction, k) for k in axes)})  # fmt: skip
    return {"table": lake.uri, "version": version, "files": len(files), "new_bytes": new_bytes,
            "axes": axes, "current": {"settings": {k: current.settings[k] for k in axes},
                                      "point_query_files": current.point_query_files}, "grid": rows,
            "no_difference": _grid_ties(rows, PartitionSizes.of_data_files(files))}  # fmt: skip


def _grid_ties(rows: list[dict[str, Any]], sizes: PartitionSizes) -> str | None:
    """Why no grid point reads fewer files than another (None when they differ)."""
    if not rows:
        return None
    smallest_target = min(r["settings"]["target_file_bytes"] for r in rows)
    if sizes.below_one_file(smallest_target):
        return sizes.describe(smallest_target)
    reads = {tuple(sorted(r["point_query_files"].items())) for r in rows}
    if len(reads) == 1:
        return "every setting predicts the same files read per point query: the grid does not tell them apart"
    return None


def setting_text(key: str, value: int) -> str:
    """A threshold's value as the table shows it: sizes in binary units, counts as numbers."""
    return human_bytes(value) if key.endswith("_bytes") else f"{value:,}"


def format_text(data: dict[str, Any]) -> str:
    keys = list(data["axes"])
    columns = list(data["current"]["point_query_files"])
    head = [*keys, "groups", "rewritten", "write amp.", "files after", *[f"reads {c}" for c in columns]]
    lines = [f"{data['table']} at version {data['version']}: {data['files']:,} files, "
             f"{human_bytes(data['new_bytes'])} not yet compacted; predicted for the next round:", ""]  # fmt: skip
    table = [head]
    for r in data["grid"]:
        table.append([*(setting_text(k, r["settings"][k]) for k in keys), str(r["groups"]),
                      human_bytes(r["bytes_rewritten"]),
                      f"{r['write_amplification']:.2f}", f"{r['files_after']:,}",
                      *(f"{r['point_query_files'][c]:,.1f}" for c in columns)])  # fmt: skip
        if r["current"]:
            table[-1][0] = "*" + table[-1][0]
    widths = [max(len(row[i]) for row in table) for i in range(len(head))]
    lines += ["  ".join(cell.rjust(w) for cell, w in zip(row, widths, strict=True)) for row in table]
    lines.append("\n* the current settings")
    if data.get("no_difference"):
        lines.append(f"no setting reads fewer files than another: {data['no_difference']}")
    return "\n".join(lines)


def grid_svg(data: dict[str, Any]) -> str:
    """A scatter of mean point-query files against MiB rewritten, one dot per grid point."""
    points = []
    for r in data["grid"]:
        x = mebibytes(r["bytes_rewritten"])
        y = sum(r["point_query_files"].values()) / max(len(r["point_query_files"]), 1)
        label = ", ".join(f"{k}={setting_text(k, v)}" for k, v in r["settings"].items())
        points.append((x, y, f"{label}: {human_bytes(r['bytes_rewritten'])}, {y:,.1f} files", bool(r["current"])))
    return plots.scatter(points, "tune", "MiB the next round rewrites",
                         "files a point query reads (mean of the columns)")  # fmt: skip


def write_page(out: Path, thresholds: dict[str, Any] | None, workload: dict[str, Any] | None) -> Path:
    """``out/tune.html``: the threshold grid's plot and table, and the workload's candidate layouts."""
    body = []
    if thresholds is not None:
        body.append("<h2>Thresholds</h2><p>One dot per setting (hover for it); red: the current one. Lower is "
                    f"better skipping, left is less rewriting.</p>{grid_svg(thresholds)}"
                    f"<pre>{html.escape(format_text(thresholds))}</pre>")  # fmt: skip
    if workload is not None and workload["candidates"]:
        body.append("<h2>Layouts for the workload</h2><p>Mean files a query of the workload reads, per candidate "
                    f"layout; red: the current one.</p>{advice_svg(workload)}"
                    f"<pre>{html.escape(format_advice(workload))}</pre>")  # fmt: skip
    out.mkdir(parents=True, exist_ok=True)
    page = out / "tune.html"
    page.write_text("<!doctype html><html><head><meta charset='utf-8'><title>lakecluster tune</title></head>"
                    f"<body style='font-family:sans-serif'><h1>lakecluster tune</h1>{''.join(body)}</body></html>")
    return page


def advise(lake: LakeTable, queries_path: str, sample_limit: int, *, keep_columns: bool = False,
           min_gain: float = MIN_GAIN, objective: str = OBJECTIVES[0]) -> dict[str, Any]:  # fmt: skip
    """Candidate layouts for the workload in ``queries_path``, scored on a sample of the table;
    ``keep_columns``: only the weights of the table's clustering columns (``recommend_weights``);
    ``min_gain``: the share fewer files per query a layout must read to be recommended (unless it
    has fewer queries worse than the equal-bits layout); ``objective``: ``advise.OBJECTIVES``."""
    config = lake.config
    try:
        lines = Path(queries_path).read_text(encoding="utf-8-sig").splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise WorkloadError(f"cannot read the workload file: {e}").in_file(f"--queries {queries_path}") from None
    try:
        queries = parse_workload(lines, config.table.columns)
        advice = layout_advice(lake, queries, current=_current(config), sample_limit=sample_limit,
                               keep_columns=keep_columns, min_gain=min_gain, objective=objective)  # fmt: skip
    except WorkloadError as e:
        raise e.in_file(queries_path) from None
    return {"workload": queries_path, "queries": len(queries), "keep_columns": keep_columns, "objective": objective,
            **_advice_data(lake, queries, advice)}


def advise_captured(lake: LakeTable, since_s: float | None, sample_limit: int, *, keep_columns: bool = False,
                    min_gain: float = MIN_GAIN, objective: str = OBJECTIVES[0]) -> dict[str, Any]:  # fmt: skip
    """Candidate layouts for the workload the query listener captured (``--from-workload``): one query
    per distinct set of predicates, weighted by its scans (``workload.captured``); ``keep_columns``:
    only the weights of the table's clustering columns."""
    config = lake.config
    since = config.compaction.auto_layout_window_s if since_s is None else since_s
    capture = read_capture(lake, config.workload, since_s=since)
    now_ms = time.time() * 1000
    captured = captured_queries(capture.scans, [c.name for c in config.table.columns],
                                half_life_s=config.compaction.auto_layout_half_life_s, now_ms=now_ms)  # fmt: skip
    queries = [c.query for c in captured]
    source = {"workload": f"captured workload of the last {human_duration(since)} ({lake.paths.workload})",
              "from_workload": True, "since_s": since, "half_life_s": config.compaction.auto_layout_half_life_s,
              "scans": len(capture.scans), "queries": len(queries), "objective": objective,
              "capture_files": capture.files, "skipped": capture.skipped,
              "first_scan": iso_ms(capture.scans[0].time_ms) if capture.scans else None,
              "last_scan": iso_ms(capture.scans[-1].time_ms) if capture.scans else None}  # fmt: skip
    withheld = too_little(capture, captured, config.compaction, now_ms=now_ms)
    if withheld is not None:
        return {**source, "table": lake.uri, "recommended": None, "no_recommendation": withheld, "candidates": [],
                "current": None, "gain": None, "query_text": [q.text for q in queries],
                "shapes": _shapes(captured, None, None)}
    advice = layout_advice(lake, queries, current=_current(config), sample_limit=sample_limit,
                           keep_columns=keep_columns, min_gain=min_gain, objective=objective)  # fmt: skip
    data = {"keep_columns": keep_columns, **_advice_data(lake, queries, advice)}
    data["shapes"] = _shapes(captured, data["current"], data["recommended"])
    return {**source, **data}


def _shapes(captured: list[CapturedQuery], current: dict[str, Any] | None,
            best: dict[str, Any] | None) -> list[dict[str, Any]]:  # fmt: skip
    """Per captured query (costliest now first): scans, share, files read (observed and predicted)."""
    scans = sum(c.scans for c in captured) or 1
    weight = sum(c.query.weight for c in captured) or 1.0
    out = []
    for i, c in enumerate(captured):
        mean = c.mean_files_read
        out.append({"query": c.query.text, "shape": c.shape, "scans": c.scans, "share": round(c.scans / scans, 4),
                    "weight": round(c.query.weight / weight, 4),
                    "observed_files_read": None if mean is None else round(mean, 2),
                    "predicted_files_read": None if current is None else current["files_read"][i],
                    "recommended_files_read": None if best is None else best["files_read"][i]})  # fmt: skip
    return out


def _current(config: Config) -> Candidate:
    t = config.table
    return current_candidate(t.clustering_columns, config.compaction.weights(), t.partition_by)


def _advice_data(lake: LakeTable, queries: list[Query], advice: Advice) -> dict[str, Any]:
    def row(s: Scored) -> dict[str, Any]:
        return {**s.candidate.describe(), "files": s.files, "mean_files_read": round(s.mean_files_read, 2),
                "median_files_read": statistics.median(s.files_read), "max_files_read": max(s.files_read),
                "files_read": [round(x, 1) for x in s.files_read],
                "equal_bits_files_read": [round(x, 1) for x in s.reference],
                "worse_than_equal_bits": len(s.worse_than_reference)}  # fmt: skip

    best = advice.best
    return {"table": lake.uri, "version": advice.version, "query_text": [q.text for q in queries],
            "query_weights": [q.weight for q in queries], "sample_rows": advice.sample_rows,
            "table_rows": advice.table_rows, "table_bytes": advice.table_bytes,
            "target_file_bytes": lake.config.compaction.target_file_bytes,
            "candidates": [row(s) for s in advice.ranked], "recommended": None if best is None else row(best),
            "no_recommendation": advice.withheld, "current": row(advice.current),
            "gain": gain(advice.ranked[0], advice.current)}  # fmt: skip


def _layout(c: dict[str, Any]) -> str:
    weights = c["column_weights"]
    uneven = len(set(weights.values())) > 1
    cols = ", ".join(f"{k} x{v:g}" if uneven else k for k, v in weights.items())
    return cols + (f" | partition_by {', '.join(c['partition_by'])}" if c["partition_by"] else "")


def format_advice(data: dict[str, Any]) -> str:
    captured = data.get("from_workload", False)
    if captured:
        span = f", {data['first_scan']} .. {data['last_scan']}" if data["first_scan"] else ""
        decay = (f"its scans, a scan {human_duration(data['half_life_s'])} old half a fresh one" if data["half_life_s"]
                 else "its scans")
        head = (f"{data['workload']}: {data['scans']:,} scan(s) in {data['queries']:,} distinct quer(ies) (each "
                f"weighs {decay}){span}")  # fmt: skip
    else:
        head = f"{data['workload']}: {data['queries']} queries"
    if not data["candidates"]:  # too little captured to score anything
        return f"{head}; {data['table']}\n\nno recommendation: {data['no_recommendation']}; keep the current settings"
    lines = [f"{head}; {data['table']} at version {data['version']}, "
             f"{human_bytes(data['table_bytes'])}, sampled {data['sample_rows']:,} of {data['table_rows']:,} rows; "
             f"target {human_bytes(data['target_file_bytes'])} per file", "",
             ("candidate weights of the current clustering columns" if data.get("keep_columns")
              else "candidate layouts") + ", best first (files a " + ("scan" if captured else "query")
             + " of the workload reads):"]  # fmt: skip
    table = [["", "clustering columns (x weight) | partitioning", "files", "mean", "median", "max", "worse"]]
    shown = data["candidates"][:SHOWN_CANDIDATES]
    if not any(c["current"] for c in shown):
        shown.append(data["current"])
    for rank, c in enumerate(shown, start=1):
        mark = "*" if c["current"] else str(data["candidates"].index(c) + 1 if c in data["candidates"] else rank)
        table.append([mark, _layout(c), f"{c['files']:,}", f"{c['mean_files_read']:,.1f}",
                      f"{c['median_files_read']:,.1f}", f"{c['max_files_read']:,.1f}",
                      str(c["worse_than_equal_bits"])])  # fmt: skip
    widths = [max(len(r[i]) for r in table) for i in range(len(table[0]))]
    lines += ["  " + "  ".join(cell.ljust(w) if i == 1 else cell.rjust(w) for i, (cell, w) in
                               enumerate(zip(r, widths, strict=True))) for r in table]  # fmt: skip
    best, now = data["recommended"], data["current"]
    lines.append("  * the current settings; worse: queries that would read more files than on the equal-bits "
                 "layout of the current clustering columns (Delta's OPTIMIZE ZORDER BY, liquid clustering)"
                 + (", ranked first by fewest" if data.get("objective") == "no-query-worse" else ""))
    if captured:
        lines += ["", "captured queries, costliest now first (scans, their share of the scans and of the "
                  "weight, files a scan read: observed now, predicted for the current layout, for the "
                  "recommended one):"]  # fmt: skip
        for shape in data["shapes"][:SHOWN_QUERIES]:
            observed = "-" if shape["observed_files_read"] is None else f"{shape['observed_files_read']:,.1f}"
            after = "" if shape["recommended_files_read"] is None else f" -> {shape['recommended_files_read']:,.1f}"
            lines.append(f"  {shape['scans']:>7,} {shape['share']:>6.1%} {shape['weight']:>6.1%}  observed "
                         f"{observed:>7}, predicted {shape['predicted_files_read']:,.1f}{after}  "
                         f"{shape['query']}")  # fmt: skip
        if len(data["shapes"]) > SHOWN_QUERIES:
            lines.append(f"  ... {len(data['shapes']) - SHOWN_QUERIES} more in --json")
    if best is None:
        lines += ["", f"no recommendation: {data['no_recommendation']}; keep the current settings"]
        return "\n".join(lines)
    if best["current"]:
        lines += ["", "the current settings read the fewest files of the candidates: keep them"]
        return "\n".join(lines)
    unit = "scan" if captured else "query"
    fewer = now["worse_than_equal_bits"] - best["worse_than_equal_bits"]
    change = (f"{data['gain']:.1%} fewer files read per {unit}" if data["gain"] >= 0
              else f"{-data['gain']:.1%} more files read per {unit}")
    if fewer > 0:
        change += f", {fewer} fewer quer(ies) reading more than on the equal-bits layout"
    lines += ["", f"recommended settings ({change} than the current ones):", "  [table]",
              f"  partition_by = {best['partition_by']!r}".replace("'", '"'),
              f"  clustering_columns = {best['clustering_columns']!r}".replace("'", '"')]  # fmt: skip
    if len(set(best["column_weights"].values())) > 1:
        lines += ["  [compaction.column_weights]", *(f"  {k} = {v:g}" for k, v in best["column_weights"].items())]
    elif len(set(now["column_weights"].values())) > 1:
        lines.append("  (and no [compaction.column_weights]: equal weights)")
    if not captured:
        lines += ["", "files read per query, current -> recommended (on the equal-bits layout):"]
        for i, text in enumerate(data["query_text"][:SHOWN_QUERIES]):
            lines.append(f"  {now['files_read'][i]:>9,.1f} -> {best['files_read'][i]:<9,.1f} "
                         f"({best['equal_bits_files_read'][i]:,.1f}) {text}")  # fmt: skip
        if data["queries"] > SHOWN_QUERIES:
            lines.append(f"  ... {data['queries'] - SHOWN_QUERIES} more in --json")
    lines += ["", "partition_by applies to a new table (it must match an existing one); column weights apply to "
              "the next rewrites (docs/tuning.md)."]  # fmt: skip
    return "\n".join(lines)


def advice_svg(data: dict[str, Any]) -> str:
    """Bars: mean files read per candidate layout (the current one red)."""
    shown = data["candidates"][:SHOWN_CANDIDATES]
    if not any(c["current"] for c in shown):
        shown = [*shown, data["current"]]
    return plots.hbars([_layout(c) for c in shown], [c["mean_files_read"] for c in shown],
                       [bool(c["current"]) for c in shown], "workload", " files per query")  # fmt: skip

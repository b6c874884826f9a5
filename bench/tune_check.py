"""``lakecluster tune`` checked against what compaction then really does.

    python bench/tune_check.py

The real stream (built-in SSB-like generator, one unpartitioned table) ingests ``--rows`` rows in
micro-batches of ``--batch-rows``. For every setting of a grid of thresholds (target file size x
largest group) a copy of that table gets tune's prediction (``compaction.tune.predict``)
and then one real compaction round (planner, Spark rewrite, Delta commit) with the same setting.
Compared per setting: MB rewritten, files after the round, files a point query on each clustering
column reads (from the files' min/max in the Delta log, measured against the boundary sketches
the same way for both), and for a workload of WHERE clauses (``--queries``, default: a built-in
mix of point, range and compound queries) the files each query reads as ``tune --queries``
predicts them for the table's layout and as the compacted table's stats say.

Prints a table per part, draws docs/img/tune_check.svg (files a point query reads per target size,
predicted and real, one line per group limit) and writes the "Tuning" section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.ingest import write_section  # noqa: E402

WORKLOAD = """\
s_city = 'UNITED KI1'
c_city = 'CHINA    3'
p_brand = 'MFGR#2221'
p_brand LIKE 'MFGR#22%'
s_city IN ('UNITED KI1', 'UNITED KI5') AND p_brand BETWEEN 'MFGR#2221' AND 'MFGR#2228'
c_city = 'UNITED ST0' AND s_city = 'UNITED ST9'
d_year = 1994 AND p_brand = 'MFGR#1110'
lo_quantity < 10
"""


DEFAULTS = {"rows": 300_000, "batch_rows": 30_000, "target_bytes": 400_000, "queries": None}


def config_for(table: Path, rows: int, batch_rows: int, **settings: str) -> Any:
    from lakecluster.config import load_config

    overrides = {"table.path": str(table), "table.partition_by": "[]", "source.generator.max_rows": str(rows),
                 "source.generator.max_rows_per_trigger": str(batch_rows), "stream.trigger_interval_s": "0",
                 "stream.progress": "false", "metrics.port": "0", "index.sync_after_compaction": "false",
                 "compaction.max_groups_per_run": "1000", **settings}  # fmt: skip
    return load_config(overrides=overrides, environ={})


def files_matching(actions: pa.Table, predicates: Any) -> int:
    """Files whose min/max in the log may hold a row matching every predicate (what a reader reads)."""
    from lakecluster.layout.model import column_scalar

    keep = np.ones(actions.num_rows, dtype=bool)
    for p in predicates:
        lo, hi = actions[f"min.{p.column}"], actions[f"max.{p.column}"]
        if p.kind == "eq":
            hit = np.zeros(actions.num_rows, dtype=bool)
            for v in p.values:
                s = column_scalar(v, lo.type)
                hit |= np.asarray(pc.fill_null(pc.and_(pc.less_equal(lo, s), pc.greater_equal(hi, s)), True))
        else:
            hit = np.ones(actions.num_rows, dtype=bool)
            if p.low is not None:
                hit &= np.asarray(pc.fill_null(pc.greater_equal(hi, column_scalar(p.low, hi.type)), True))
            if p.high is not None:
                hit &= np.asarray(pc.fill_null(pc.less_equal(lo, column_scalar(p.high, lo.type)), True))
        keep &= hit
    return int(keep.sum())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=300_000)
    p.add_argument("--batch-rows", type=int, default=30_000)
    p.add_argument("--target-bytes", type=int, default=400_000, help="the middle target_file_bytes of the grid")
    p.add_argument("--queries", help="a workload file (one WHERE clause per line); default: a built-in mix")
    p.add_argument("--no-write", action="store_true", help="do not update docs/benchmarks.md and docs/img")
    args = p.parse_args()


    from lakecluster.clustering import clustering_depth
    from lakecluster.compaction.loop import Compactor
    from lakecluster.compaction.tune import predict
    from lakecluster.config import SparkConfig
    from lakecluster.layout.advise import sample_rows
    from lakecluster.layout.model import Candidate, WorkloadModel
    from lakecluster.spark import get_session
    from lakecluster.stream.job import StreamJob
    from lakecluster.table import LakeTable
    from lakecluster.workload.queries import parse_workload
    from tests.snapshot_files import snapshot_files

    spark = get_session(SparkConfig(master="local[2]", conf={"spark.sql.shuffle.partitions": "2"}))
    work = Path(tempfile.mkdtemp(prefix="lakecluster-tune-check-"))
    base = work / "base"
    t = args.target_bytes
    started = time.monotonic()
    StreamJob(config_for(base, args.rows, args.batch_rows), spark=spark, available_now=True).run()
    ingest_s = time.monotonic() - started
    workload_text = Path(args.queries).read_text() if args.queries else WORKLOAD

    columns = config_for(base, args.rows, args.batch_rows).table.columns
    table_bytes = sum(f.size for f in snapshot_files(LakeTable.at(str(base)).delta, columns, [])[1])
    # One group of every new file, or groups of a third of the table (more, shallower runs to read).
    group_limits = (1 << 30, max(t * 2, table_bytes // 3))
    grid = [{"compaction.target_file_bytes": str(size), "compaction.min_file_bytes": str(size // 2),
             "compaction.max_group_bytes": str(limit)}
            for size in (t // 2, t, t * 2) for limit in group_limits]  # fmt: skip
    rows: list[dict[str, Any]] = []
    for i, settings in enumerate(grid):
        table = work / f"s{i}"
        shutil.copytree(base, table)
        config = config_for(table, args.rows, args.batch_rows, **settings)
        location = LakeTable.at(str(table)).delta
        live, files = snapshot_files(location, config.table.columns, [])
        actions = live.actions
        sketches = LakeTable.at(str(table)).sketches().latest()
        assert sketches is not None, "the stream wrote no sketches"
        predicted = predict(config, config.compaction, files, actions, sketches, live.metadata.version)
        new_bytes = sum(f.size for f in files if f.generation == 0)
        Compactor(config, spark=spark).run_once()
        after_live, after = snapshot_files(location, config.table.columns, [])
        after_actions = after_live.actions
        live = {f.path for f in after}
        rewritten = sum(f.size for f in files if f.path not in live)
        depth = {c: clustering_depth(after_actions, [f.path for f in after], sketches, c, config.sketches.boundaries)
                 for c in config.table.clustering_columns}  # fmt: skip
        queries = parse_workload(workload_text.splitlines(), config.table.columns)
        sample, weights = sample_rows(location, after, config.table.columns, 200_000)
        model = WorkloadModel(queries, sample, weights, sum(f.size for f in after), config.compaction.target_file_bytes)
        modelled = model.score(Candidate(config.table.clustering_columns,
                                         tuple(1.0 for _ in config.table.clustering_columns), ()))  # fmt: skip
        real_reads = [files_matching(after_actions, q.predicates) for q in queries]
        amplification = rewritten / new_bytes if new_bytes else 0.0
        workload = zip(queries, modelled.files_read, real_reads, strict=True)
        rows.append({
            "target_file_bytes": int(settings["compaction.target_file_bytes"]),
            "max_group_bytes": int(settings["compaction.max_group_bytes"]),
            "mb_rewritten": (predicted.bytes_rewritten / 1e6, rewritten / 1e6),
            "write_amplification": (predicted.write_amplification(new_bytes), amplification),
            "files_after": (predicted.files_after, len(after)),
            "depth": {c: (predicted.point_query_files[c], round(v, 1)) for c, v in depth.items()},
            "workload": [(q.text, round(m, 1), r) for q, m, r in workload],
        })  # fmt: skip
        print(f"setting {i + 1}/{len(grid)} done", flush=True)
    shutil.rmtree(work, ignore_errors=True)
    section = report(rows, args, ingest_s)
    print(section)
    if not args.no_write:
        svg = REPO / "docs" / "img" / "tune_check.svg"
        svg.parent.mkdir(exist_ok=True)
        svg.write_text(plot(rows))
        write_section(REPO / "docs" / "benchmarks.md", "## Tuning:", section)


def report(rows: list[dict[str, Any]], args: argparse.Namespace, ingest_s: float) -> str:
    cols = list(rows[0]["depth"])
    command = "python bench/tune_check.py" + "".join(
        f" --{k.replace('_', '-')} {v}" for k, v in vars(args).items() if v != DEFAULTS.get(k) and k != "no_write")
    out = ["## Tuning: `lakecluster tune` predicted, then compacted for real\n",
           f"`{command}` — {args.rows:,} generator rows streamed in micro-batches of {args.batch_rows:,} "
           f"({ingest_s:.0f} s) into one unpartitioned table; per setting a copy gets tune's prediction, then "
           "one real compaction round. Each cell: predicted / real. Point-query files: mean files whose "
           "min/max holds a value of the column, by depth (docs/tuning.md).\n",
           "| target_file_bytes | max_group_bytes | MB rewritten | write amp. | files after | "
           + " | ".join(f"point {c}" for c in cols) + " |",
           "|---:|---:|---:|---:|---:|" + "---:|" * len(cols)]  # fmt: skip
    for r in rows:
        pair = lambda v, f="{:,.1f}": f"{f.format(v[0])} / {f.format(v[1])}"  # noqa: E731
        out.append(f"| {r['target_file_bytes']:,} | {r['max_group_bytes']:,} | {pair(r['mb_rewritten'])} | "
                   f"{pair(r['write_amplification'], '{:.2f}')} | {pair(r['files_after'], '{:,}')} | "
                   + " | ".join(pair(r["depth"][c]) for c in cols) + " |")  # fmt: skip
    mid = next((r for r in rows if r["target_file_bytes"] == args.target_bytes), rows[0])  # the middle size
    out += ["", f"Workload (`tune --queries`), files each query reads after the round at target_file_bytes "
            f"{mid['target_file_bytes']:,} in one group: predicted / real "
            "(the log's min/max).", "", "| query | predicted | real |", "|---|---:|---:|"]  # fmt: skip
    out += [f"| `{text}` | {m:,.1f} | {r:,} |" for text, m, r in mid["workload"]]
    ratios = [m / r for row in rows for _, m, r in row["workload"] if r]
    depth_ratios = [p / a for row in rows for p, a in row["depth"].values() if a]
    out += ["", f"Over all settings: predicted / real files read per workload query, median "
            f"{np.median(ratios):.2f} (range {min(ratios):.2f}-{max(ratios):.2f}); point-query depth, median "
            f"{np.median(depth_ratios):.2f} (range {min(depth_ratios):.2f}-{max(depth_ratios):.2f}). "
            "![files read per target file size, predicted and real](img/tune_check.svg)", ""]  # fmt: skip
    return "\n".join(out)


def plot(rows: list[dict[str, Any]]) -> str:
    """Mean point-query files per target file size, one line per group limit: dashed predicted, solid real."""
    width, height, pad = 640, 320, 60
    sizes = sorted({r["target_file_bytes"] for r in rows})
    limits = sorted({r["max_group_bytes"] for r in rows}, reverse=True)
    colours = ["#4c78a8", "#f58518", "#54a24b"]
    mean = {(r["target_file_bytes"], r["max_group_bytes"], k): float(np.mean([v[k] for v in r["depth"].values()]))
            for r in rows for k in (0, 1)}  # fmt: skip
    y_top = max(mean.values()) * 1.15 or 1.0

    def xy(size: int, value: float) -> tuple[float, float]:
        x = pad + (sizes.index(size) + 0.5) / len(sizes) * (width - 2 * pad)
        return x, height - pad - value / y_top * (height - 2 * pad)

    parts = [f'<line x1="{pad}" y1="{height - pad}" x2="{width - pad}" y2="{height - pad}" stroke="#333"/>',
             f'<line x1="{pad}" y1="{pad / 2}" x2="{pad}" y2="{height - pad}" stroke="#333"/>',
             f'<text x="{width / 2}" y="{height - 14}" text-anchor="middle" font-size="12">'
             "compaction.target_file_bytes</text>",
             f'<text x="16" y="{height / 2}" font-size="12" transform="rotate(-90 16 {height / 2})" '
             f'text-anchor="middle">files a point query reads (0 to {y_top:.0f})</text>']  # fmt: skip
    for size in sizes:
        x, _ = xy(size, 0)
        parts.append(f'<text x="{x:.0f}" y="{height - pad + 16}" text-anchor="middle" font-size="11">{size:,}</text>')
    for i, limit in enumerate(limits):
        colour = colours[i % len(colours)]
        for k, dash in ((0, ' stroke-dasharray="5 4"'), (1, "")):
            points = " ".join("{:.1f},{:.1f}".format(*xy(s, mean[(s, limit, k)])) for s in sizes)
            parts.append(f'<polyline points="{points}" fill="none" stroke="{colour}" stroke-width="2"{dash}/>')
        label = "one group" if limit >= 1 << 30 else f"groups up to {limit / 1e6:,.1f} MB"
        parts.append(f'<text x="{width - pad}" y="{pad / 2 + 14 * (i + 1)}" text-anchor="end" font-size="12" '
                     f'fill="{colour}">{label}</text>')  # fmt: skip
    parts.append(f'<text x="{pad + 8}" y="{pad / 2 + 14}" font-size="12">dashed: predicted by tune, solid: real</text>')
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'font-family="sans-serif">{"".join(parts)}</svg>\n')  # fmt: skip


if __name__ == "__main__":
    main()

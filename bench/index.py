"""Column-stats index: bytes and time to get one column's per-file stats, and pruning end to end.

    python bench/index.py --files 100000 --columns 32 --e2e-rows 400000

1. A synthetic Delta table of ``--files`` add actions × ``--columns`` columns with full stats
   (one partition column ``part`` + long/int/double/string/date/timestamp/decimal columns), written
   as ``_delta_log/00000000000000000000.json`` directly: the data files do not exist (nothing here
   reads them). The index is built from it (``rebuild``, i.e. ``get_add_actions``).
2. One column's min/max/null count for every file, three ways: from the index (``read_column``,
   p50/p95 over ``--reads`` reads cycling through the columns), from the whole Delta log with
   delta-rs (``DeltaTable(...).get_add_actions(flatten=True)``), and from Parquet footers
   (``--sample`` real files of the same width, extrapolated to ``--files``). Bytes are what the
   process read from files (``rchar`` of /proc/self/io), all from the page cache.
3. End to end: the SSB-like generator streamed into a table (Spark), clustered by the compactor,
   indexed; the query ``s_city = 'UNITED KI1' AND d_year >= 1995`` (and two more) run by DuckDB
   over all files vs over the files ``prune`` keeps (the prune time included), and by Spark through
   ``read_candidates``.
Prints a markdown table and rewrites the "## Index" section of docs/benchmarks.md (unless --no-write).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.ingest import write_section  # noqa: E402

TYPES = ["long", "integer", "double", "string", "date", "timestamp", "decimal(12,2)"]


def rchar() -> int:
    """Bytes this process has read through read()/pread() so far (page cache included)."""
    with open("/proc/self/io") as f:
        return int(next(line for line in f if line.startswith("rchar:")).split()[1])


def column_names(n: int) -> list[tuple[str, str]]:
    return [("part", "integer")] + [(f"c{i:02d}_{TYPES[i % len(TYPES)].split('(')[0]}", TYPES[i % len(TYPES)])
                                    for i in range(n - 1)]  # fmt: skip


def synthetic_log(root: Path, files: int, ncols: int, seed: int = 1) -> int:
    """Write version 0 of a Delta table with ``files`` add actions with stats; returns the log size."""
    rng = np.random.default_rng(seed)
    cols = column_names(ncols)
    schema = {"type": "struct", "fields": [{"name": n, "type": t, "nullable": True, "metadata": {}} for n, t in cols]}
    meta = {"id": "00000000-0000-0000-0000-000000000001", "format": {"provider": "parquet", "options": {}},
            "schemaString": json.dumps(schema), "partitionColumns": ["part"], "configuration": {},
            "createdTime": 1700000000000}  # fmt: skip
    parts = rng.integers(0, 50, files)
    order = np.arange(files)
    mins: list[list[str]] = []
    maxs: list[list[str]] = []
    for name, tp in cols[1:]:
        lo = order * 1000 + rng.integers(0, 500, files)  # loosely clustered by file number
        hi = lo + rng.integers(0, 5000, files)
        if tp in ("long", "integer"):
            fmt = [str(int(v)) for v in lo], [str(int(v)) for v in hi]
        elif tp == "double":
            fmt = [repr(v / 7.0) for v in lo], [repr(v / 7.0) for v in hi]
        elif tp == "string":
            fmt = [f'"CITY{v:012d}"' for v in lo], [f'"CITY{v:012d}"' for v in hi]
        elif tp == "date":
            days = np.datetime64("1990-01-01") + (lo // 100000).astype("timedelta64[D]")
            days_hi = np.datetime64("1990-01-01") + (hi // 100000).astype("timedelta64[D]")
            fmt = [f'"{d}"' for d in days.astype(str)], [f'"{d}"' for d in days_hi.astype(str)]
        elif tp == "timestamp":
            ts = (np.datetime64("2020-01-01T00:00:00", "ms") + lo.astype("timedelta64[ms]")).astype(str)
            ts_hi = (np.datetime64("2020-01-01T00:00:00", "ms") + hi.astype("timedelta64[ms]")).astype(str)
            fmt = [f'"{t}Z"' for t in ts], [f'"{t}Z"' for t in ts_hi]
        else:
            fmt = [f"{v // 100}.{v % 100:02d}" for v in lo], [f"{v // 100}.{v % 100:02d}" for v in hi]
        mins.append([f'"{name}":{v}' for v in fmt[0]])
        maxs.append([f'"{name}":{v}' for v in fmt[1]])
    nulls = ",".join(f'"{n}":0' for n, _ in cols[1:])
    with open(root / "_delta_log" / f"{0:020d}.json", "w") as out:
        out.write(json.dumps({"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}}) + "\n")
        out.write(json.dumps({"metaData": meta}) + "\n")
        for i in range(files):
            stats = (f'{{"numRecords":{1000 + i % 7},"minValues":{{{",".join(m[i] for m in mins)}}},'
                     f'"maxValues":{{{",".join(m[i] for m in maxs)}}},"nullCount":{{{nulls}}}}}')  # fmt: skip
            add = {"path": f"part={parts[i]}/part-{i:06d}-9f8c2a1b7d3e4f56a0b1c2d3e4f5a6b7-c000.snappy.parquet",
                   "partitionValues": {"part": str(parts[i])}, "size": 100_000_000 + i, "modificationTime": 0,
                   "dataChange": True, "stats": stats}  # fmt: skip
            out.write(json.dumps({"add": add}) + "\n")
    return (root / "_delta_log" / f"{0:020d}.json").stat().st_size


def timed(fn):  # type: ignore[no-untyped-def]
    before, start = rchar(), time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start, rchar() - before


def bench_stats(files: int, ncols: int, reads: int, sample: int, workdir: Path) -> dict:
    from deltalake import DeltaTable

    from lakecluster.index.spec import IndexSpec
    from lakecluster.index.sync import rebuild, store_for
    from lakecluster.table import LakeTable

    root = workdir / "wide"
    (root / "_delta_log").mkdir(parents=True)
    started = time.perf_counter()
    log_bytes = synthetic_log(root, files, ncols)
    gen_s = time.perf_counter() - started
    spec = IndexSpec(LakeTable.at(str(root)), str(root / "_lakecluster" / "index"), max_columns=ncols)
    _, build_s, _ = timed(lambda: rebuild(spec))
    store = store_for(spec)
    manifest = store.manifest()
    assert manifest is not None and len(manifest.indexed) == ncols
    index_bytes = sum(p.stat().st_size for p in (root / "_lakecluster" / "index").glob("*.parquet"))
    names = [n for n in manifest.indexed if n != "part"]
    times, nbytes, meta_bytes = [], [], []
    for j in range(reads):
        read, secs, b = timed(lambda j=j: store.read_column(names[j % len(names)]))
        assert read.rows.num_rows == files
        times.append(secs)
        nbytes.append(b)
        meta_bytes.append(read.bytes_read)
    col = names[3]

    def from_log() -> pa.Table:
        t = pa.table(DeltaTable(str(root)).get_add_actions(flatten=True))
        return t.select(["path", f"min.{col}", f"max.{col}", f"null_count.{col}"])

    log_runs = [timed(from_log) for _ in range(3)]
    assert log_runs[0][0].num_rows == files
    footer = footers(sample, ncols, workdir, col_index=4)
    return {
        "files": files, "columns": ncols, "log_bytes": log_bytes, "generate_s": gen_s, "build_s": build_s,
        "index_bytes": index_bytes, "index_p50_s": statistics.median(times),
        "index_p95_s": float(np.percentile(times, 95)), "index_bytes_read": int(statistics.median(nbytes)),
        "index_bytes_meta": int(statistics.median(meta_bytes)),
        "log_s": statistics.median(r[1] for r in log_runs),
        "log_bytes_read": int(statistics.median(r[2] for r in log_runs)),
        "footer_s": footer["seconds"] * files / sample, "footer_bytes": int(footer["bytes"] * files / sample),
        "sample": sample, "reads": reads,
    }  # fmt: skip


def footers(sample: int, ncols: int, workdir: Path, col_index: int) -> dict:
    """Read one column's stats from ``sample`` real Parquet footers of ``ncols`` columns."""
    rng = np.random.default_rng(3)
    d = workdir / "footers"
    d.mkdir()
    table = pa.table({f"c{i:02d}": rng.integers(0, 10**9, 1000) for i in range(ncols)})
    paths = []
    for i in range(sample):
        p = d / f"part-{i:06d}.snappy.parquet"
        pq.write_table(table, p)
        paths.append(p)

    def read_all() -> int:
        found = 0
        for p in paths:
            st = pq.read_metadata(p).row_group(0).column(col_index).statistics
            found += st.min is not None
        return found

    found, secs, nbytes = timed(read_all)
    assert found == sample
    return {"seconds": secs, "bytes": nbytes}


# ---------------------------------------------------------------------------------------------
# End to end on the clustered SSB-like table

QUERIES = [
    "s_city = 'UNITED KI1' AND d_year >= 1995",
    "p_brand = 'MFGR#2221'",
    "c_city IN ('CHINA    1', 'JAPAN    3') AND lo_quantity < 10",
]


def bench_e2e(rows: int, workdir: Path) -> dict:
    from lakecluster.compaction.loop import Compactor
    from lakecluster.config import SparkConfig, load_config
    from lakecluster.index.prune import prune
    from lakecluster.index.spec import IndexSpec
    from lakecluster.spark import get_session
    from lakecluster.stream.job import StreamJob
    from lakecluster.table import LakeTable
    from tests.conftest import duckdb_connection

    table = workdir / "ssb"
    overrides = {
        "table.path": str(table), "source.generator.max_rows": str(rows),
        "source.generator.max_rows_per_trigger": str(max(rows // 8, 1)), "stream.progress": "false",
        "stream.trigger_interval_s": "0", "metrics.port": "0", "compaction.target_file_bytes": "262144",
        "compaction.min_file_bytes": "65536", "compaction.min_input_files": "2", "compaction.max_groups_per_run": "100",
    }  # fmt: skip
    config = load_config(overrides=overrides, environ={})
    spark = get_session(SparkConfig(conf={"spark.sql.shuffle.partitions": "2"}))
    started = time.perf_counter()
    StreamJob(config, spark=spark, available_now=True).run()
    Compactor(config, spark=spark).run_once()
    build_s = time.perf_counter() - started
    spec = IndexSpec.of(LakeTable(config))
    con = duckdb_connection()
    everything = prune(spec, "d_year IS NOT NULL OR d_year IS NULL")
    out = [one_query(spark, con, spec, table, everything, where) for where in QUERIES]
    spark.stop()
    return {"rows": rows, "build_s": build_s, "queries": out}


def one_query(spark, con, spec, table: Path, everything, where: str) -> dict:  # type: ignore[no-untyped-def]
    from lakecluster.index.prune import prune
    from lakecluster.index.reader import read_candidates

    def duck(paths: list[str]) -> tuple:
        files = ", ".join(f"'{table / p}'" for p in paths)
        sql = f"SELECT count(*), sum(lo_revenue) FROM read_parquet([{files}], hive_partitioning=true) WHERE {where}"
        return con.execute(sql).fetchone()

    def pruned_duck() -> tuple:
        r = prune(spec, where, index="stored")
        return duck(r.paths) if r.paths else (0, None)

    def spark_count(result) -> int:  # type: ignore[no-untyped-def]
        return read_candidates(spark, spec, result).where(where).count()

    result = prune(spec, where)
    full = [timed(lambda: duck(everything.paths)) for _ in range(5)]
    pruned = [timed(pruned_duck) for _ in range(5)]
    spark_full = [timed(lambda: spark_count(everything)) for _ in range(3)]
    spark_pruned = [timed(lambda: spark_count(prune(spec, where, index="stored"))) for _ in range(3)]
    assert full[0][0] == pruned[0][0], (where, full[0][0], pruned[0][0])
    assert spark_full[0][0] == spark_pruned[0][0] == full[0][0][0]
    return {
        "where": where, "files": result.files_total, "kept": result.files.num_rows, "rows": full[0][0][0],
        "duck_full_s": statistics.median(t for _, t, _ in full),
        "duck_pruned_s": statistics.median(t for _, t, _ in pruned),
        "spark_full_s": statistics.median(t for _, t, _ in spark_full),
        "spark_pruned_s": statistics.median(t for _, t, _ in spark_pruned),
    }  # fmt: skip


def render(s: dict, e: dict | None, command: str) -> str:
    mb = 1e6
    ratio = s["log_bytes_read"] / max(s["index_bytes_read"], 1)
    lines = [
        "## Index: column-stats index and data skipping\n",
        f"`{command}` — synthetic Delta log of {s['files']:,} add actions × {s['columns']} columns with stats "
        f"(log {s['log_bytes'] / mb:,.0f} MB, one JSON commit; data files not written); index built in "
        f"{s['build_s']:.1f} s ({s['index_bytes'] / mb:,.1f} MB on disk). One column's min/max/null count for every "
        "file; bytes = what the process read (`rchar`), warm page cache; index: median and p95 over "
        f"{s['reads']} reads cycling through the columns.\n",
        "| source | time | bytes read | vs index bytes |",
        "|---|---:|---:|---:|",
        f"| **index** `read_column` (p50 / p95) | {s['index_p50_s'] * 1e3:.1f} / {s['index_p95_s'] * 1e3:.1f} ms | "
        f"{s['index_bytes_read'] / mb:.2f} MB | 1× |",
        f"| Delta log, delta-rs `get_add_actions(flatten=True)` | {s['log_s'] * 1e3:,.0f} ms | "
        f"{s['log_bytes_read'] / mb:,.1f} MB | {s['log_bytes_read'] / max(s['index_bytes_read'], 1):,.0f}× |",
        f"| Parquet footers ({s['sample']} read, extrapolated) | {s['footer_s'] * 1e3:,.0f} ms | "
        f"{s['footer_bytes'] / mb:,.1f} MB | {s['footer_bytes'] / max(s['index_bytes_read'], 1):,.0f}× |",
        "",
        f"Targets: ≥ 10× fewer bytes than the full-log read — **{ratio:,.0f}×**; "
        f"p50 under 100 ms — **{s['index_p50_s'] * 1e3:.1f} ms**. The index's own accounting (footer + the "
        f"column's row groups) says {s['index_bytes_meta'] / mb:.2f} MB per read.\n",
    ]  # fmt: skip
    if e:
        lines += [
            f"End to end: {e['rows']:,} SSB-like rows streamed and clustered by the compactor (256 KiB target files), "
            f"built in {e['build_s']:.0f} s; each query 5× with DuckDB (`read_parquet` over the file list; the pruned "
            "time includes `prune`) and 3× with Spark through `read_candidates`, medians.\n",
            "| where | files | kept | rows | DuckDB all | DuckDB pruned | Spark all | Spark pruned |",
            "|---|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for q in e["queries"]:
            lines.append(
                f"| `{q['where']}` | {q['files']} | {q['kept']} | {q['rows']:,} | {q['duck_full_s'] * 1e3:.0f} ms | "
                f"{q['duck_pruned_s'] * 1e3:.0f} ms | {q['spark_full_s']:.2f} s | {q['spark_pruned_s']:.2f} s |"
            )
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--files", type=int, default=100_000)
    p.add_argument("--columns", type=int, default=32)
    p.add_argument("--reads", type=int, default=25)
    p.add_argument("--sample", type=int, default=500, help="Parquet footers actually read (then extrapolated)")
    p.add_argument("--e2e-rows", type=int, default=400_000, help="SSB-like rows for the end-to-end part (0: skip)")
    p.add_argument("--no-write", action="store_true", help="do not update docs/benchmarks.md")
    args = p.parse_args()
    command = (f"python bench/index.py --files {args.files} --columns {args.columns} --reads {args.reads} "
               f"--sample {args.sample} --e2e-rows {args.e2e_rows}")  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        s = bench_stats(args.files, args.columns, args.reads, args.sample, Path(tmp))
        print(json.dumps(s))
        e = bench_e2e(args.e2e_rows, Path(tmp)) if args.e2e_rows else None
    section = render(s, e, command)
    print(section)
    if e:
        print(json.dumps(e))
    if not args.no_write:
        write_section(REPO / "docs" / "benchmarks.md", "## Index", section)


if __name__ == "__main__":
    main()

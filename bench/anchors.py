"""Delta's own clustering beside lakecluster's compactor: ``OPTIMIZE ... ZORDER BY`` and liquid
clustering (``CLUSTER BY`` + ``OPTIMIZE ... FULL``), on the same rows, in one run.

    python bench/anchors.py --rows 1000000 --files 1000

The rows of bench/skipping.py (s_city and c_city 250 values each, p_brand 1000 values sharing the
prefix "MFGR#") are written as ``--files`` random appends (what a stream leaves), and copied once
per layout. Each copy is rewritten by one method, with the same target file size (input bytes /
``--files``): Delta's ZORDER, Delta's liquid clustering, lakecluster's compactor. Then Spark SQL
runs point queries (20 values per column) and range queries (20 ranges of 1% of a column's values)
on every copy, and the files each query read are taken from Spark's own scan metric
(``numFiles`` of the file scan), not from an estimate. Rewrite throughput is MB of input per second
of the rewrite, commit included.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.ingest import write_section  # noqa: E402
from bench.skipping import COLUMNS, lakecluster_compactor, make_table, write_random_files  # noqa: E402
from tests.spark_scans import files_scanned  # noqa: E402 - the counting the interop test uses


def scan_files(spark: Any, sql: str) -> int:
    """Files Spark's file scans read for ``sql`` (their ``numFiles`` metric, summed over the plan)."""
    frame = spark.sql(sql)
    frame.collect()
    return files_scanned(frame)


def queries(table: pa.Table, seed: int = 5) -> list[tuple[str, str, str]]:
    """(kind, column, predicate): 20 point values and 20 ranges of 1% of the values, per column."""
    rng = np.random.default_rng(seed)
    out = []
    for c in COLUMNS:
        values = np.unique(table[c].to_numpy(zero_copy_only=False))
        width = max(1, len(values) // 100)
        for v in rng.choice(values, 20, replace=False):
            out.append(("point", c, f"{c} = '{v}'"))
        for i in rng.integers(0, len(values) - width, 20):
            out.append(("range", c, f"{c} BETWEEN '{values[i]}' AND '{values[i + width - 1]}'"))
    return out


def files_read(spark: Any, path: Path, qs: list[tuple[str, str, str]]) -> dict[tuple[str, str], float]:
    """Mean files read per (kind, column)."""
    sums: dict[tuple[str, str], list[int]] = {}
    for kind, column, predicate in qs:
        n = scan_files(spark, f"SELECT count(*) FROM delta.`{path}` WHERE {predicate}")
        sums.setdefault((kind, column), []).append(n)
    return {k: float(np.mean(v)) for k, v in sums.items()}


def live_files(spark: Any, path: Path) -> int:
    return int(spark.sql(f"DESCRIBE DETAIL delta.`{path}`").collect()[0]["numFiles"])


def delta_zorder(spark: Any, source: Path, path: Path, target: int, columns: Sequence[str] = COLUMNS) -> float:
    """Seconds of ``OPTIMIZE ... ZORDER BY`` on a copy of ``source`` at ``path``."""
    shutil.copytree(source, path)
    spark.conf.set("spark.databricks.delta.optimize.maxFileSize", str(target))
    started = time.perf_counter()
    spark.sql(f"OPTIMIZE delta.`{path}` ZORDER BY ({', '.join(columns)})").collect()
    return time.perf_counter() - started


def delta_liquid(spark: Any, source: Path, path: Path, target: int, columns: Sequence[str] = COLUMNS) -> float:
    """Seconds of liquid clustering (``CLUSTER BY``, ``OPTIMIZE ... FULL``) on a copy of ``source``."""
    shutil.copytree(source, path)
    spark.conf.set("spark.databricks.delta.optimize.maxFileSize", str(target))
    spark.sql(f"ALTER TABLE delta.`{path}` CLUSTER BY ({', '.join(columns)})").collect()
    started = time.perf_counter()
    spark.sql(f"OPTIMIZE delta.`{path}` FULL").collect()
    return time.perf_counter() - started


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--files", type=int, default=1000)
    p.add_argument("--no-write", action="store_true")
    args = p.parse_args()
    command = f"python bench/anchors.py --rows {args.rows} --files {args.files}"

    from lakecluster.config import SparkConfig
    from lakecluster.spark import get_session

    spark = get_session(SparkConfig(master="local[2]"))
    table = make_table(args.rows, zipf=False)
    qs = queries(table)
    rows: list[tuple[str, int, dict[tuple[str, str], float], float | None]] = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        warm, small = work / "warm-up", make_table(20_000, False)
        write_random_files(small, 20, warm / "random")
        lakecluster_compactor(spark, small, 20, warm / "random", warm)  # JVM and workers warm before timing
        source = work / "random"
        in_bytes = write_random_files(table, args.files, source)
        target = max(1, in_bytes // args.files)
        print(f"{args.rows:,} rows in {args.files} files, {in_bytes / 1e6:.0f} MB; target {target:,} bytes", flush=True)
        rows.append(("random (stream order)", live_files(spark, source), files_read(spark, source, qs), None))
        for label, method in (
            ("Delta OPTIMIZE ZORDER BY (delta-spark 4.4.0)", delta_zorder),
            ("Delta liquid clustering, OPTIMIZE FULL (delta-spark 4.4.0)", delta_liquid),
        ):
            path = work / label.split()[1].lower()
            seconds = method(spark, source, path, target)
            rows.append((label, live_files(spark, path), files_read(spark, path, qs), seconds))
            print(f"{label}: {seconds:.1f} s", flush=True)
        _, seconds = lakecluster_compactor(spark, table, args.files, source, work / "lc")
        path = work / "lc" / "lakecluster"
        rows.append(("**lakecluster compactor** (Hilbert)", live_files(spark, path), files_read(spark, path, qs),
                     seconds))  # fmt: skip

    mb = in_bytes / 1e6
    out = [f"## Anchors: Delta ZORDER and liquid clustering beside lakecluster\n\n`{command}` — the same "
           f"{args.rows:,} SSB-like rows ({mb:.0f} MB in {args.files} random files) rewritten by each method to "
           f"a target of {target:,} bytes per file. Files read: Spark SQL's own scan metric (`numFiles`), mean "
           "over 20 point queries (`col = v`) and 20 range queries (1% of the column's values) per column. "
           "Throughput: MB of input per second of rewrite, commit included, Spark `local[2]`.\n\n"
           "| layout | files | point s_city | point c_city | point p_brand | range s_city | range c_city | "
           "range p_brand | point mean × N^(2/3) | rewrite MB/s |\n"
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n"]  # fmt: skip
    for label, n, read, secs in rows:
        points = [read[("point", c)] for c in COLUMNS]
        ranges = [read[("range", c)] for c in COLUMNS]
        rate = "" if secs is None else f"{mb / secs:.2f}"
        cells = " | ".join(f"{v:.0f}" for v in points + ranges)
        out.append(f"| {label} | {n} | {cells} | {np.mean(points) / n ** (2 / 3):.2f} | {rate} |\n")
    section = "".join(out)
    print(section)
    if not args.no_write:
        write_section(REPO / "docs" / "benchmarks.md", "## Anchors", section)


if __name__ == "__main__":
    main()

"""Test helpers: per-file stats exactly as the project's writer makes them, and DuckDB as the
brute-force oracle of which files hold a matching row."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping, Sequence
from decimal import Decimal

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from lakecluster import predicate as P
from lakecluster.index.prune import evaluate
from lakecluster.index.stats import from_log_actions
from lakecluster.parquet_files import delta_stats
from lakecluster.schema import ColumnSpec, arrow_schema


def spark_like(stats: str, columns: Sequence[ColumnSpec]) -> str:
    """Stats as Delta-Spark may write them, worst case: strings cut to 32 characters (the max
    without a tie-breaker, so below the true max) and timestamp maxima cut to milli-seconds."""
    raw = json.loads(stats, parse_float=Decimal)
    for col in columns:
        for side in ("minValues", "maxValues"):
            v = raw.get(side, {}).get(col.name)
            if v is None:
                continue
            if col.type == "string":
                raw[side][col.name] = v[:32]
            elif col.type == "timestamp" and side == "maxValues":
                ts = dt.datetime.fromisoformat(v.replace("Z", "+00:00"))
                raw[side][col.name] = ts.replace(microsecond=ts.microsecond // 1000 * 1000).strftime(
                    "%Y-%m-%dT%H:%M:%S.%fZ"
                )
    return json.dumps(raw, default=str)


def nan_counts(tables: Sequence[pa.Table], columns: Sequence[ColumnSpec]) -> dict[str, dict[str, int]]:
    return {
        f"f{i}": {
            c.name: int(pc.sum(pc.fill_null(pc.is_nan(t[c.name]), False).cast(pa.int64())).as_py() or 0)
            for c in columns
            if c.is_floating
        }
        for i, t in enumerate(tables)
    }


def index_rows_of(
    tables: Sequence[pa.Table], columns: Sequence[ColumnSpec], *, spark: bool = False, scan_nans: bool = False
) -> pa.Table:
    """Index rows of files f0, f1, ... holding ``tables``, through the incremental (log) path."""
    adds = []
    for i, t in enumerate(tables):
        stats = delta_stats(t)
        adds.append(
            {
                "path": f"f{i}",
                "size": 100,
                "partitionValues": {},
                "stats": spark_like(stats, columns) if spark else stats,
            }
        )
    return from_log_actions(adds, columns, [], nan_counts(tables, columns) if scan_nans else None)


def candidates(rows: pa.Table, columns: Sequence[ColumnSpec], expr: P.Expr, n_files: int) -> set[str]:
    files = pa.array([f"f{i}" for i in range(n_files)])
    by_column = {c: rows.filter(pc.equal(rows["column"], c)) for c in P.columns_of(expr)}
    mask, _ = evaluate(expr, columns, by_column, files)
    return {f for f, keep in zip(files.to_pylist(), mask.tolist(), strict=True) if keep}


def matching_files(tables: Sequence[pa.Table], columns: Sequence[ColumnSpec], expr: P.Expr) -> set[str]:
    """Brute force: the files with a row DuckDB says satisfies the predicate."""
    schema = arrow_schema(tuple(columns))
    data = pa.concat_tables(
        [
            t.cast(schema).append_column("_file", pa.array([f"f{i}"] * t.num_rows, pa.string()))
            for i, t in enumerate(tables)
        ]
    )
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    con.register("t", data)
    return {r[0] for r in con.execute(f"SELECT DISTINCT _file FROM t WHERE {P.to_sql(expr)}").fetchall()}


def files_of(rows_per_file: Sequence[Mapping[str, list]], columns: Sequence[ColumnSpec]) -> list[pa.Table]:
    schema = arrow_schema(tuple(columns))
    return [
        pa.table({c.name: pa.array(r[c.name], schema.field(c.name).type) for c in columns}, schema=schema)
        for r in rows_per_file
    ]

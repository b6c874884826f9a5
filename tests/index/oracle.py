"""Test helpers: per-file stats exactly as the project's writer makes them, and DuckDB as the
brute-force oracle of which files hold a matching row."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from lakecluster import predicate as P
from lakecluster.index.prune import evaluate
from lakecluster.index.stats import ENTRY_FIELDS, FILE_FIELDS, FILE_ROWS, from_log_actions
from lakecluster.schema import ColumnSpec, arrow_schema
from tests.parquet_writes import delta_stats


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
    return from_log_actions(adds, columns, [], 0, nan_counts(tables, columns) if scan_nans else None)


def split_rows(rows: pa.Table) -> tuple[pa.Table, dict[str, pa.Table]]:
    """Index rows (``ROW_SCHEMA``) as what ``prune`` evaluates: the live files (fid, file,
    partition, size_bytes, value_count) and each column's entries."""
    is_file = pc.equal(rows["column"], FILE_ROWS)
    files = rows.filter(pc.and_(is_file, pc.invert(pc.fill_null(rows["deleted"], False))))
    entries = rows.filter(pc.invert(is_file))
    by_column = {name: entries.filter(pc.equal(entries["column"], name)).select(["fid", *ENTRY_FIELDS])
                 for name in pc.unique(entries["column"]).to_pylist()}  # fmt: skip
    return files.select(["fid", *FILE_FIELDS]), by_column


def candidates(rows: pa.Table, columns: Sequence[ColumnSpec], expr: P.Expr, n_files: int) -> set[str]:
    files, entries = split_rows(rows)
    assert files.num_rows == n_files
    by_column = {c: entries[c] for c in P.columns_of(expr) if c in entries}
    mask, _ = evaluate(expr, columns, by_column, files)
    return set(files["file"].filter(pa.array(mask)).to_pylist())


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
    # Copied into a DuckDB table: a filter pushed into a scan of the Arrow table itself compares
    # NaN otherwise (DuckDB 1.4.4 kept a row whose f is null for ``NOT (f > NaN)``).
    con.register("arrow_rows", data)
    con.execute("CREATE TABLE t AS SELECT * FROM arrow_rows")
    return {r[0] for r in con.execute(f"SELECT DISTINCT _file FROM t WHERE {to_sql(expr)}").fetchall()}


def files_of(rows_per_file: Sequence[Mapping[str, list]], columns: Sequence[ColumnSpec]) -> list[pa.Table]:
    schema = arrow_schema(tuple(columns))
    return [
        pa.table({c.name: pa.array(r[c.name], schema.field(c.name).type) for c in columns}, schema=schema)
        for r in rows_per_file
    ]


def sql_literal(col: ColumnSpec, value: Any) -> str:
    """A predicate's value as a DuckDB SQL literal of its column's type."""
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if col.type == "string":
        return "'" + str(value).replace("'", "''") + "'"
    if col.is_floating:
        if value != value:
            return "CAST('NaN' AS DOUBLE)"
        if value in (float("inf"), float("-inf")):
            return f"CAST('{'-' if value < 0 else ''}Infinity' AS DOUBLE)"
        return f"CAST({float(value)!r} AS DOUBLE)"  # a double, as Spark types a float column's literal
    if col.type == "date":
        return f"DATE '{value.isoformat()}'"
    if col.type == "timestamp":
        return f"TIMESTAMP '{value.astimezone(dt.UTC).strftime('%Y-%m-%d %H:%M:%S.%f')}'"
    return str(value)


def to_sql(expr: P.Expr) -> str:
    """A predicate as the WHERE clause DuckDB evaluates it by (the oracle's second opinion)."""
    if isinstance(expr, P.And | P.Or):
        joiner = " AND " if isinstance(expr, P.And) else " OR "
        return "(" + joiner.join(to_sql(i) for i in expr.items) + ")"
    if isinstance(expr, P.Not):
        return f"(NOT {to_sql(expr.item)})"
    name = f'"{expr.column.name}"'
    neg = "NOT " if getattr(expr, "negated", False) else ""
    if isinstance(expr, P.Compare):
        return f"({name} {expr.op} {sql_literal(expr.column, expr.value)})"
    if isinstance(expr, P.InList):
        return f"({name} {neg}IN ({', '.join(sql_literal(expr.column, v) for v in expr.values)}))"
    if isinstance(expr, P.Between):
        lo, hi = sql_literal(expr.column, expr.low), sql_literal(expr.column, expr.high)
        return f"({name} {neg}BETWEEN {lo} AND {hi})"
    if isinstance(expr, P.IsNull):
        return f"({name} IS {neg}NULL)"
    return f"({name} {neg}LIKE {sql_literal(expr.column, expr.pattern)} ESCAPE '\\')"

"""Real Delta tables for the index tests, written with the project's own writer (no Spark)."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import numpy as np
import pyarrow as pa
from deltalake import DeltaTable

from lakecluster.compaction.commit import commit_rewrite
from lakecluster.compaction.planner import Group, snapshot_files
from lakecluster.parquet_files import write_files
from lakecluster.schema import ColumnSpec, arrow_schema
from lakecluster.table import TableSpec, commit_appends, open_or_create

COLUMNS = (
    ColumnSpec("id", "long"),
    ColumnSpec("city", "string"),
    ColumnSpec("year", "int"),
    ColumnSpec("x", "double"),
    ColumnSpec("amount", "decimal(10,2)"),
    ColumnSpec("day", "date"),
    ColumnSpec("at", "timestamp"),
    ColumnSpec("flag", "boolean"),
)
PARTITION_BY = ("year",)


def spec(path: Path) -> TableSpec:
    return TableSpec(str(path), arrow_schema(COLUMNS), PARTITION_BY)


def batch(start: int, n: int, seed: int) -> pa.Table:
    """Rows with nulls and NaN; city values share prefixes; ids are start..start+n-1."""
    rng = np.random.default_rng(seed)
    ids = np.arange(start, start + n)
    cities = np.array(["", "LONDON", "LONDONDERRY", "LYON", "PARIS", "PARMA", "x" * 40], dtype=object)
    x = rng.normal(size=n)
    x[rng.random(n) < 0.1] = np.nan
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "city": pa.array(cities[rng.integers(0, len(cities), n)], pa.string(), mask=rng.random(n) < 0.1),
            "year": pa.array(1992 + ids % 3, pa.int32()),
            "x": pa.array(x),
            "amount": pa.array([Decimal(int(v)) / 100 for v in rng.integers(-(10**6), 10**6, n)], pa.decimal128(10, 2)),
            "day": pa.array(np.datetime64("1995-01-01") + rng.integers(0, 900, n).astype("timedelta64[D]")),
            "at": pa.array(
                np.datetime64("2020-01-01T00:00:00", "us") + rng.integers(0, 10**12, n).astype("timedelta64[us]"),
                pa.timestamp("us", tz="UTC"),
            ),
            "flag": pa.array(rng.random(n) < 0.5),
        },
        schema=arrow_schema(COLUMNS),
    )


def append(path: Path, data: pa.Table, batch_id: int, rows_per_file: int = 40) -> int:
    table = open_or_create(spec(path))
    files = write_files(
        str(path), data, partition_by=PARTITION_BY, prefix=f"s{batch_id:010d}", max_rows_per_file=rows_per_file
    )
    return commit_appends(
        table,
        spec(path),
        files,
        app_id="test",
        app_version=batch_id,
        metadata={"lakecluster.operation": "stream-append"},
    )


def rewrite_partition(path: Path, year: int) -> int:
    """A compaction-style commit: the partition's files replaced by one file (dataChange=false)."""
    table = DeltaTable(str(path))
    files, _ = snapshot_files(table, PARTITION_BY)
    chosen = tuple(f for f in files if f.partition_values["year"] == str(year))
    import pyarrow.parquet as pq

    data = pa.concat_tables([pq.read_table(path / f.path) for f in chosen])
    data = data.append_column("year", pa.array([year] * data.num_rows, pa.int32())).select([c.name for c in COLUMNS])
    written = write_files(
        str(path),
        data.cast(arrow_schema(COLUMNS)),
        partition_by=PARTITION_BY,
        prefix="g01-test",
        max_rows_per_file=10**9,
    )
    group = Group(chosen[0].partition, chosen, 1, "test")
    return commit_rewrite(
        table, spec(path), group, written, metadata={"lakecluster.operation": "compaction"}, attempts=3
    )

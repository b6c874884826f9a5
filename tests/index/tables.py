"""Real Delta tables for the index tests, written by delta-rs (no Spark): the index must follow any
Delta writer's log, and these tests stay fast."""

from __future__ import annotations

import shutil
import time
from decimal import Decimal
from pathlib import Path

import numpy as np
import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, Transaction
from deltalake.exceptions import TableNotFoundError
from deltalake.transaction import AddAction, RemoveAction

from lakecluster.config import StorageConfig
from lakecluster.index.spec import IndexSpec
from lakecluster.parquet_files import WrittenFile
from lakecluster.schema import ColumnSpec, arrow_schema
from lakecluster.table import LakeTable
from lakecluster.table.location import DeltaLocation
from tests.parquet_writes import write_files
from tests.snapshot_files import snapshot_files

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


FIXTURES = Path(__file__).parent / "fixtures"


def fixture_copy(name: str, tmp_path: Path) -> tuple[Path, IndexSpec]:
    """The table and index kept under ``fixtures/<name>``, copied to ``tmp_path/t`` (tests may
    change it), and the spec of its index."""
    table = tmp_path / "t"
    shutil.copytree(FIXTURES / name, table)
    return table, IndexSpec.for_location(LakeTable.at(str(table)))


def open_or_create(path: Path) -> DeltaTable:
    try:
        return DeltaTable(str(path))
    except TableNotFoundError:
        return DeltaTable.create(str(path), arrow_schema(COLUMNS), mode="ignore", partition_by=list(PARTITION_BY))


def _adds(files: list[WrittenFile], data_change: bool) -> list[AddAction]:
    now_ms = int(time.time() * 1000)
    return [AddAction(f.path, f.size, dict(f.partition_values), now_ms, data_change, f.stats) for f in files]


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
    table = open_or_create(path)
    files = write_files(
        str(path), data, partition_by=PARTITION_BY, prefix=f"s{batch_id:010d}", max_rows_per_file=rows_per_file
    )
    table.create_write_transaction(
        _adds(files, True), mode="append", schema=arrow_schema(COLUMNS), partition_by=list(PARTITION_BY),
        commit_properties=CommitProperties(app_transactions=[Transaction("test", batch_id)], max_commit_retries=20),
    )  # fmt: skip
    table.update_incremental()
    return table.version()


def rewrite_partition(path: Path, year: int) -> int:
    """A compaction-style commit: the partition's files replaced by one file (dataChange=false)."""
    table = DeltaTable(str(path))
    _, files = snapshot_files(DeltaLocation(str(path), StorageConfig()), COLUMNS, PARTITION_BY)
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
    now_ms = int(time.time() * 1000)
    removes = [RemoveAction(f.path, False, now_ms, f.size, f.partition_values) for f in chosen]
    table.create_write_transaction(
        [*removes, *_adds(written, False)], mode="append", schema=arrow_schema(COLUMNS),
        partition_by=list(PARTITION_BY), commit_properties=CommitProperties(max_commit_retries=0),
    )  # fmt: skip
    table.update_incremental()
    return table.version()


def checkpoint_and_clean_up(path: Path, keep_from: int = 1) -> int:
    """A checkpoint at the latest version, then the JSON commits from ``keep_from`` up to it deleted,
    as Delta's log cleanup does once a checkpoint covers them; returns the version."""
    table = DeltaTable(str(path))
    table.create_checkpoint()
    for version in range(keep_from, table.version()):
        (path / "_delta_log" / f"{version:020d}.json").unlink()
    return table.version()

"""What each Spark task does with its part of a micro-batch, in one pass over Arrow batches.

Splits valid rows from quarantined ones, writes both as Parquet files (with Delta stats) and
builds the boundary sketches of the valid rows. Emits one small metadata row per written file and
per column sketch; the driver commits the files and merges the sketches.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from lakecluster.curves import argsort_keys
from lakecluster.layout import ClusteringLayout
from lakecluster.parquet_files import WrittenFile, write_files
from lakecluster.schema import ColumnSpec, arrow_schema
from lakecluster.sketches import ColumnSketch, sketch_kind
from lakecluster.stream.parse import RecordParser

OUTPUT_DDL = (
    "kind string, path string, size bigint, num_records bigint, partition_values string, "
    "stats string, column string, sketch binary"
)
OUTPUT_SCHEMA = pa.schema([
    ("kind", pa.string()), ("path", pa.string()), ("size", pa.int64()), ("num_records", pa.int64()),
    ("partition_values", pa.string()), ("stats", pa.string()), ("column", pa.string()),
    ("sketch", pa.binary()),
])  # fmt: skip
QUARANTINE_SCHEMA = pa.schema([
    ("raw_key", pa.binary()), ("raw_value", pa.binary()), ("topic", pa.string()),
    ("partition", pa.int32()), ("offset", pa.int64()), ("kafka_timestamp", pa.timestamp("us", tz="UTC")),
    ("reason", pa.string()), ("quarantined_at", pa.timestamp("us", tz="UTC")), ("stream_batch_id", pa.int64()),
])  # fmt: skip


@dataclass(frozen=True)
class TaskSpec:
    table_uri: str
    quarantine_uri: str
    columns: tuple[ColumnSpec, ...]
    partition_by: tuple[str, ...]
    sketch_columns: tuple[ColumnSpec, ...]
    sketch_k: int
    exact_strings: tuple[str, ...]  # string columns whose global sketch is still in exact form
    batch_id: int
    write_table: bool
    write_quarantine: bool
    build_sketches: bool
    max_rows_per_file: int
    parse_json: bool  # raw Kafka records in, parsed here; else rows already typed (generator)
    layout: ClusteringLayout | None = None  # cluster on write: sort rows by the curve key first

    @property
    def file_prefix(self) -> str:
        return f"s{self.batch_id:010d}"


def run_task(spec: TaskSpec, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    schema = arrow_schema(spec.columns)
    valid_parts: list[pa.Table] = []
    bad_parts: list[pa.Table] = []
    sketches = {c.name: _new_sketch(c, spec) for c in spec.sketch_columns}
    now = pa.scalar(dt.datetime.now(dt.UTC), pa.timestamp("us", tz="UTC"))
    parser = RecordParser(spec.columns) if spec.parse_json else None
    for batch in batches:
        table = pa.Table.from_batches([batch])
        if parser is not None:
            parsed = parser.parse(batch.column("value"))
            is_valid = parsed.valid
            is_bad = pc.invert(is_valid)
            if spec.write_quarantine and is_bad.true_count:
                bad_parts.append(_quarantine_rows(table.filter(is_bad), parsed.reasons.filter(is_bad), now,
                                                  spec.batch_id))  # fmt: skip
            table = parsed.table.filter(is_valid)
        valid = pa.Table.from_arrays([table[c.name].cast(schema.field(c.name).type) for c in spec.columns],
                                     schema=schema)  # fmt: skip
        if spec.build_sketches:
            for name, sketch in sketches.items():
                sketch.update(valid[name])
        if spec.write_table and valid.num_rows:
            valid_parts.append(valid)

    rows: list[dict] = []
    if valid_parts:
        data = pa.concat_tables(valid_parts)
        if spec.layout is not None and data.num_rows > 1:
            # Rows in curve order: narrow row groups now, and files cut along the key when a task
            # has more rows than one file.
            data = data.take(pa.array(argsort_keys(spec.layout.keys(data)[1])))
        files = write_files(spec.table_uri, data, partition_by=spec.partition_by,
                            prefix=spec.file_prefix, max_rows_per_file=spec.max_rows_per_file)  # fmt: skip
        rows.extend(_file_row("table", f) for f in files)
    if bad_parts:
        files = write_files(spec.quarantine_uri, pa.concat_tables(bad_parts), partition_by=(),
                            prefix=spec.file_prefix, max_rows_per_file=spec.max_rows_per_file)  # fmt: skip
        rows.extend(_file_row("quarantine", f) for f in files)
    if spec.build_sketches:
        rows.extend({"kind": "sketch", "column": name, "sketch": s.to_bytes()} for name, s in sketches.items())
    yield pa.RecordBatch.from_pylist(rows, schema=OUTPUT_SCHEMA)


def _new_sketch(col: ColumnSpec, spec: TaskSpec) -> ColumnSketch:
    kind = sketch_kind(col)
    if kind == "string" and col.name not in spec.exact_strings:
        # The global sketch has left the exact form: go to KLL at the first value, on the
        # executors, rather than shipping an exact summary the driver would have to expand.
        return ColumnSketch(kind, k=spec.sketch_k, exact_limit=0)
    return ColumnSketch(kind, k=spec.sketch_k)


def _file_row(kind: str, f: WrittenFile) -> dict:
    return {"kind": kind, "path": f.path, "size": f.size, "num_records": f.num_records,
            "partition_values": json.dumps(f.partition_values), "stats": f.stats}  # fmt: skip


def _quarantine_rows(bad: pa.Table, reasons: pa.Array, now: pa.Scalar, batch_id: int) -> pa.Table:
    n = bad.num_rows
    return pa.Table.from_arrays(
        [
            bad["key"], bad["value"], bad["topic"], bad["partition"].cast(pa.int32()),
            bad["offset"], bad["timestamp"].cast(pa.timestamp("us", tz="UTC")), reasons,
            pc.fill_null(pa.nulls(n, now.type), now),
            pc.fill_null(pa.nulls(n, pa.int64()), batch_id),
        ],
        schema=QUARANTINE_SCHEMA,
    )  # fmt: skip

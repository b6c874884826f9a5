"""What each Spark task does with its part of a micro-batch, in one pass over Arrow batches.

Input: Kafka records (``key``, ``value``, ``topic``, ``partition``, ``offset``, ``timestamp``,
``headers``) from Spark's Kafka source, or typed rows from the generator. Output: one row per
record, either a typed table row or a quarantine row (its raw bytes, where it came from, why),
plus one summary row per task holding the task's boundary sketches and counts. The driver persists
this output and writes the table and the quarantine from it, so records are parsed once.
"""

from __future__ import annotations

import datetime as dt
import pickle
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lakecluster.layout import ClusteringLayout
from lakecluster.schema import ColumnSpec, arrow_schema, spark_sql_type
from lakecluster.sketches import ColumnSketch, sketch_kind
from lakecluster.stream.parse import ParseLimits, RecordParser

KIND, KEY, CODE, REASON, SUMMARY = "_lc_kind", "_lc_key", "_lc_code", "_lc_reason", "_lc_summary"
ROW, QUARANTINE, SUMMARY_ROW = 0, 1, 2
SOURCE_FIELDS = (
    ("raw_key", pa.binary(), "binary"),
    ("raw_value", pa.binary(), "binary"),
    ("topic", pa.string(), "string"),
    ("partition", pa.int32(), "int"),
    ("offset", pa.int64(), "bigint"),
    ("kafka_timestamp", pa.timestamp("us", tz="UTC"), "timestamp"),
    ("headers", pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())])),
     "array<struct<key:string,value:binary>>"),
)  # fmt: skip
_QUARANTINE_EXTRA = (
    ("reason_code", pa.string(), "string"),
    ("reason", pa.string(), "string"),
    ("quarantined_at", pa.timestamp("us", tz="UTC"), "timestamp"),
    ("stream_id", pa.string(), "string"),
    ("stream_batch_id", pa.int64(), "bigint"),
)
QUARANTINE_SCHEMA = pa.schema([(n, t) for n, t, _ in (*SOURCE_FIELDS, *_QUARANTINE_EXTRA)])
QUARANTINE_DDL = ", ".join(f"`{n}` {ddl}" for n, _, ddl in (*SOURCE_FIELDS, *_QUARANTINE_EXTRA))


@dataclass(frozen=True)
class TaskSpec:
    """Everything a task needs, shipped to the executors with the closure."""

    columns: tuple[ColumnSpec, ...]
    sketch_columns: tuple[ColumnSpec, ...]
    sketch_k: int
    sketch_max_string_chars: int
    build_sketches: bool
    parse_json: bool  # raw Kafka records in, parsed here; else rows already typed (generator)
    limits: ParseLimits
    layout: ClusteringLayout | None = None  # cluster on write: the curve key of every valid row
    # Quarantined records below these offsets were committed by an earlier incarnation of the
    # stream (docs/exactly-once.md): they are not quarantined twice.
    quarantine_floor: dict[tuple[str, int], int] = field(default_factory=dict)


@dataclass
class TaskSummary:
    """Counts and sketches of one task's records; merged on the driver."""

    rows: int = 0
    quarantined: int = 0
    codes: Counter[str] = field(default_factory=Counter)
    value_bytes: int = 0
    # Kafka record timestamps in whole seconds -> records (end-to-end delay at commit time).
    timestamp_seconds: Counter[int] = field(default_factory=Counter)
    sketches: dict[str, bytes] = field(default_factory=dict)

    def merge(self, other: TaskSummary) -> None:
        self.rows += other.rows
        self.quarantined += other.quarantined
        self.codes.update(other.codes)
        self.value_bytes += other.value_bytes
        self.timestamp_seconds.update(other.timestamp_seconds)


def output_schema(spec: TaskSpec) -> pa.Schema:
    fields = [pa.field(c.name, f.type) for c, f in zip(spec.columns, arrow_schema(spec.columns), strict=True)]
    return pa.schema([
        *fields, pa.field(KIND, pa.int8()), pa.field(KEY, pa.binary()), pa.field(CODE, pa.string()),
        pa.field(REASON, pa.string()), *(pa.field(n, t) for n, t, _ in SOURCE_FIELDS), pa.field(SUMMARY, pa.binary()),
    ])  # fmt: skip


def output_ddl(spec: TaskSpec) -> str:
    cols = ", ".join(f"`{c.name}` {spark_sql_type(c)}" for c in spec.columns)
    source = ", ".join(f"`{n}` {ddl}" for n, _, ddl in SOURCE_FIELDS)
    return f"{cols}, {KIND} tinyint, {KEY} binary, {CODE} string, {REASON} string, {source}, {SUMMARY} binary"


def run_task(spec: TaskSpec, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    schema = output_schema(spec)
    sketches = {c.name: _new_sketch(c, spec) for c in spec.sketch_columns} if spec.build_sketches else {}
    parser = RecordParser(spec.columns, spec.limits) if spec.parse_json else None
    summary = TaskSummary()
    for batch in batches:
        if batch.num_rows == 0:
            continue
        out = _parse(spec, parser, batch, schema, summary)
        valid = out.filter(pc.equal(out[KIND], ROW))
        for name, sketch in sketches.items():
            sketch.update(valid[name])
        yield from out.to_batches()
    summary.sketches = {name: s.to_bytes() for name, s in sketches.items()}
    row = dict.fromkeys(schema.names)
    row.update({KIND: SUMMARY_ROW, SUMMARY: pickle.dumps(summary, protocol=pickle.HIGHEST_PROTOCOL)})
    yield pa.RecordBatch.from_pylist([row], schema=schema)


def _parse(spec: TaskSpec, parser: RecordParser | None, batch: pa.RecordBatch, schema: pa.Schema,
           summary: TaskSummary) -> pa.Table:  # fmt: skip
    n = batch.num_rows
    source = pa.Table.from_batches([batch])
    if parser is None:  # typed rows (the generator): every row is valid
        typed = source.select([c.name for c in spec.columns])
        codes = pa.nulls(n, pa.string())
        reasons = codes
    else:
        values = source["value"].combine_chunks()
        summary.value_bytes += int(pc.sum(pc.binary_length(values)).as_py() or 0)
        parsed = parser.parse(values)
        typed, codes, reasons = parsed.table, parsed.codes, parsed.reasons
        ts = source["timestamp"].combine_chunks().cast(pa.timestamp("us", tz="UTC")).cast(pa.int64())
        seconds = np.asarray(ts.fill_null(0).to_numpy(zero_copy_only=False)) // 1_000_000
        summary.timestamp_seconds.update(dict(zip(*np.unique(seconds, return_counts=True), strict=True)))
    is_bad = pc.is_valid(codes).to_numpy(zero_copy_only=False)
    kind = np.where(is_bad, QUARANTINE, ROW).astype(np.int8)
    if spec.quarantine_floor and parser is not None and is_bad.any():
        kind = np.where(is_bad & _below_floor(source, spec.quarantine_floor), -1, kind).astype(np.int8)
    good = kind == ROW
    summary.rows += int(good.sum())
    summary.quarantined += int((kind == QUARANTINE).sum())
    if (kind == QUARANTINE).any():
        counts = pc.value_counts(codes.filter(pa.array(kind == QUARANTINE)))
        summary.codes.update({d["values"]: d["counts"] for d in counts.to_pylist()})
    key = pa.nulls(n, pa.binary())
    if spec.layout is not None and good.any():
        key = _keys(spec.layout, typed, good)
    arrays: list[pa.Array] = [typed[c.name].combine_chunks() for c in spec.columns]
    arrays += [pa.array(kind, pa.int8()), key, codes, reasons]
    bad_mask = pa.array(kind == QUARANTINE)
    for name, typ, _ in SOURCE_FIELDS:
        arrays.append(_source_column(source, name, typ, bad_mask, n))
    arrays.append(pa.nulls(n, pa.binary()))
    out = pa.Table.from_arrays(arrays, schema=schema)
    return out.filter(pa.array(kind >= 0)) if (kind < 0).any() else out


def _source_column(source: pa.Table, name: str, typ: pa.DataType, bad: pa.BooleanArray, n: int) -> pa.Array:
    """Kafka metadata of quarantined records (null on table rows: they do not need it)."""
    origin = {"raw_key": "key", "raw_value": "value", "kafka_timestamp": "timestamp"}.get(name, name)
    if origin not in source.column_names:
        return pa.nulls(n, typ)
    column = source[origin].combine_chunks().cast(typ)
    if name == "headers":  # the sink sends no headers as an empty list (``empty_headers_not_null``)
        bad = pc.and_(bad, pc.greater(pc.list_value_length(column), 0))
    return pc.if_else(bad, column, pa.nulls(n, typ))


def _below_floor(source: pa.Table, floor: dict[tuple[str, int], int]) -> np.ndarray:
    """Rows whose offset is below the floor recorded for their topic-partition.

    One pass per topic-partition present in the batch (a task usually reads one), however many
    partitions the floor has recorded over the stream's life."""
    topics = source["topic"].combine_chunks().dictionary_encode()
    names = topics.dictionary.to_pylist()
    topic_ids = topics.indices.fill_null(-1).to_numpy(zero_copy_only=False)  # -1: no topic
    partitions = source["partition"].to_numpy(zero_copy_only=False)
    offsets = source["offset"].to_numpy(zero_copy_only=False)
    below = np.zeros(len(offsets), dtype=bool)
    pairs = {(int(t), int(p)) for t, p in np.unique(np.stack([topic_ids, partitions], axis=1), axis=0) if t >= 0}
    for topic_id, partition in pairs:
        limit = floor.get((names[topic_id], int(partition)))
        if limit is not None:
            below |= (topic_ids == topic_id) & (partitions == partition) & (offsets < limit)
    return below


def _keys(layout: ClusteringLayout, typed: pa.Table, good: np.ndarray) -> pa.Array:
    """Curve keys (cell + fine key bytes) of the valid rows; null elsewhere."""
    from lakecluster.curves import key_array

    rows = typed.filter(pa.array(good))
    _cell, full = layout.keys(rows)
    keys = key_array(full).cast(pa.binary())
    positions = np.full(len(good), -1, dtype=np.int64)
    positions[good] = np.arange(int(good.sum()))
    return keys.take(pa.array(np.where(positions < 0, None, positions)))  # type: ignore[call-overload]


def _new_sketch(col: ColumnSpec, spec: TaskSpec) -> ColumnSketch:
    return ColumnSketch(sketch_kind(col), k=spec.sketch_k, max_string_chars=spec.sketch_max_string_chars)


def summaries(rows: list[bytes]) -> tuple[TaskSummary, dict[str, ColumnSketch]]:
    """Merge the tasks' summary rows: totals, and one sketch per column."""
    total = TaskSummary()
    merged: dict[str, ColumnSketch] = {}
    for blob in rows:
        part: TaskSummary = pickle.loads(blob)
        total.merge(part)
        for name, data in part.sketches.items():
            sketch = ColumnSketch.from_bytes(data)
            if name in merged:
                merged[name].merge(sketch)
            else:
                merged[name] = sketch
    return total, merged


def now_utc() -> dt.datetime:
    return dt.datetime.now(dt.UTC)

"""What each Spark task does with its part of a micro-batch, in one pass over Arrow batches.

Input: Kafka records (``key``, ``value``, ``topic``, ``partition``, ``offset``, ``timestamp``,
``headers``) from Spark's Kafka source, or typed rows from the generator. Output, when the task
writes its own files (``TaskSpec.files``, ``stream/task_files.py``): one row per file it wrote into
the table or the quarantine, plus one summary row holding the task's boundary sketches and counts;
the driver commits the files. Otherwise: one row per record, either a typed table row or a
quarantine row (its raw bytes, where it came from, why), plus the summary row; the driver persists
this output and writes the table and the quarantine from it. Either way records are parsed once.
"""

from __future__ import annotations

import datetime as dt
import json
import pickle
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lakecluster.clustering import ClusteringLayout
from lakecluster.parquet_files import WrittenFile
from lakecluster.schema import ColumnSpec, arrow_schema, arrow_type, spark_sql_type
from lakecluster.sketches import ColumnSketch, sketch_kind
from lakecluster.stream.parse import ParseLimits, RecordParser
from lakecluster.stream.task_files import BufferedFiles, TaskFiles

KIND, KEY, CODE, REASON, SUMMARY = "_lc_kind", "_lc_key", "_lc_code", "_lc_reason", "_lc_summary"
# Columns a JVM decoder (stream/avro.py) adds beside the raw record.
DECODED_CODE, DECODED_REASON, DECODED_SCHEMA_ID = "_lc_avro_code", "_lc_avro_reason", "_lc_schema_id"
# The length of a decoded record's value: only a quarantined record's raw key and value cross to the task.
DECODED_VALUE_BYTES = "_lc_value_bytes"
ROW, QUARANTINE, SUMMARY_ROW, TABLE_FILE, QUARANTINE_FILE = 0, 1, 2, 3, 4
# One row per file a task wrote (``TaskSpec.files``), and the summary row.
FILE_SCHEMA = pa.schema([
    (KIND, pa.int8()), ("path", pa.string()), ("size", pa.int64()), ("partition_values", pa.string()),
    ("num_records", pa.int64()), ("stats", pa.string()), (SUMMARY, pa.binary()),
])  # fmt: skip
FILE_DDL = (f"{KIND} tinyint, path string, size bigint, partition_values string, num_records bigint, stats string, "
            f"{SUMMARY} binary")  # fmt: skip
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
    files: TaskFiles | None = None  # the task writes the batch's files itself
    # Kafka records decoded in the JVM (Avro, stream/avro.py): their typed columns, reason code and
    # reason ride beside the raw record; nothing is parsed here.
    decoded: bool = False


PHASES = ("read", "parse", "write")  # a task's phases, as TaskSummary.phase_ns counts them


@dataclass
class TaskSummary:
    """Counts and sketches of one task's records; merged on the driver."""

    rows: int = 0
    quarantined: int = 0
    codes: Counter[str] = field(default_factory=Counter)
    value_bytes: int = 0
    # Kafka record timestamps in whole seconds -> records (end-to-end delay at commit time).
    timestamp_seconds: Counter[int] = field(default_factory=Counter)
    # Records per writer schema id (Avro), quarantined ones included.
    schema_ids: Counter[int] = field(default_factory=Counter)
    # JSON records carrying a value in a field that is no column: (field, kind) -> records.
    unseen: Counter[tuple[str, str]] = field(default_factory=Counter)
    # Records quarantined as type_mismatch, by the field whose value had another type.
    mismatched: Counter[str] = field(default_factory=Counter)
    sketches: dict[str, bytes] = field(default_factory=dict)
    # Nanoseconds the task spent per phase: "read" (waiting for the source's next Arrow batch),
    # "parse" (parsing, keying, sketching), "write" (writing the table's and quarantine's files).
    phase_ns: Counter[str] = field(default_factory=Counter)

    def merge(self, other: TaskSummary) -> None:
        self.rows += other.rows
        self.quarantined += other.quarantined
        self.codes.update(other.codes)
        self.value_bytes += other.value_bytes
        self.timestamp_seconds.update(other.timestamp_seconds)
        self.schema_ids.update(other.schema_ids)
        self.unseen.update(other.unseen)
        self.mismatched.update(other.mismatched)
        self.phase_ns.update(other.phase_ns)

    def phases_ms(self) -> dict[str, int]:
        """Milliseconds per phase, summed over the tasks merged into this summary."""
        return {phase: self.phase_ns[phase] // 1_000_000 for phase in PHASES}


def output_schema(spec: TaskSpec) -> pa.Schema:
    fields = [pa.field(c.name, f.type) for c, f in zip(spec.columns, arrow_schema(spec.columns), strict=True)]
    return pa.schema([
        *fields, pa.field(KIND, pa.int8()), pa.field(KEY, pa.binary()), pa.field(CODE, pa.string()),
        pa.field(REASON, pa.string()), *(pa.field(n, t) for n, t, _ in SOURCE_FIELDS), pa.field(SUMMARY, pa.binary()),
    ])  # fmt: skip


def output_ddl(spec: TaskSpec) -> str:
    if spec.files is not None:
        return FILE_DDL
    cols = ", ".join(f"`{c.name}` {spark_sql_type(c)}" for c in spec.columns)
    source = ", ".join(f"`{n}` {ddl}" for n, _, ddl in SOURCE_FIELDS)
    return f"{cols}, {KIND} tinyint, {KEY} binary, {CODE} string, {REASON} string, {source}, {SUMMARY} binary"


def run_task(spec: TaskSpec, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    schema = output_schema(spec)
    sketches = {c.name: _new_sketch(c, spec) for c in spec.sketch_columns} if spec.build_sketches else {}
    # JSON records: the top-level fields that are no column are counted too (stream/schema_evolution.py).
    parser = RecordParser(spec.columns, spec.limits, count_unseen=True) if spec.parse_json else None
    summary = TaskSummary()
    files = _TaskWriters(spec) if spec.files is not None else None
    phase = summary.phase_ns
    clock = time.perf_counter_ns
    last = clock()
    for batch in batches:
        read = clock()
        phase["read"] += read - last  # the source's fetch and the JVM's Arrow conversion happen in next()
        if batch.num_rows == 0:
            last = clock()
            continue
        out = _parse(spec, parser, batch, schema, summary)
        valid = out.filter(pc.equal(out[KIND], ROW))
        for name, sketch in sketches.items():
            sketch.update(valid[name])
        parsed = clock()
        phase["parse"] += parsed - read
        if files is None:
            yield from out.to_batches()  # time spent downstream of the yield is not this task's
        else:
            files.add(valid, out)
            phase["write"] += clock() - parsed
        last = clock()
    summary.sketches = {name: s.to_bytes() for name, s in sketches.items()}
    if files is not None:
        closing = clock()
        closed = list(files.close())
        phase["write"] += clock() - closing
        blob = pickle.dumps(summary, protocol=pickle.HIGHEST_PROTOCOL)
        yield from closed
        yield pa.RecordBatch.from_pylist([{KIND: SUMMARY_ROW, SUMMARY: blob}], schema=FILE_SCHEMA)
        return
    blob = pickle.dumps(summary, protocol=pickle.HIGHEST_PROTOCOL)
    row = dict.fromkeys(schema.names)
    row.update({KIND: SUMMARY_ROW, SUMMARY: blob})
    yield pa.RecordBatch.from_pylist([row], schema=schema)


class _TaskWriters:
    """The table's and the quarantine's files of one task (``TaskSpec.files``)."""

    def __init__(self, spec: TaskSpec) -> None:
        files = spec.files
        assert files is not None
        self.files = files
        self.stream_id, self.batch_id = files.stream_id, files.batch_id
        self.columns = [c.name for c in spec.columns]
        data = arrow_schema(spec.columns)
        data_schema = pa.schema([f for f in data if f.name not in files.partition_by])
        sort_key = KEY if spec.layout is not None else None
        self.table = BufferedFiles(files.table_uri, files, data_schema, files.partition_by, sort_key,
                                   files.table_stats_columns)  # fmt: skip
        self.quarantine = BufferedFiles(files.quarantine_uri, files, QUARANTINE_SCHEMA, (), None,
                                        files.quarantine_stats_columns)  # fmt: skip

    def add(self, valid: pa.Table, out: pa.Table) -> None:
        if self.files.write_table and valid.num_rows:
            self.table.add(valid.select([*self.columns, KEY] if self.table.sort_key else self.columns))
        bad = out.filter(pc.equal(out[KIND], QUARANTINE))
        if self.files.write_quarantine and bad.num_rows:
            n = bad.num_rows
            extra = {
                "reason_code": bad[CODE], "reason": bad[REASON],
                "quarantined_at": pa.array([now_utc()] * n, pa.timestamp("us", tz="UTC")),
                "stream_id": pa.array([self.stream_id] * n, pa.string()),
                "stream_batch_id": pa.array([self.batch_id] * n, pa.int64()),
            }  # fmt: skip
            self.quarantine.add(pa.table(
                [bad[name] if name not in extra else extra[name] for name in QUARANTINE_SCHEMA.names],
                schema=QUARANTINE_SCHEMA,
            ))  # fmt: skip

    def close(self) -> Iterator[pa.RecordBatch]:
        rows = [_file_row(TABLE_FILE, f) for f in self.table.close()]
        rows += [_file_row(QUARANTINE_FILE, f) for f in self.quarantine.close()]
        if rows:
            yield pa.RecordBatch.from_pylist(rows, schema=FILE_SCHEMA)


def _file_row(kind: int, f: WrittenFile) -> dict:
    return {KIND: kind, "path": f.path, "size": f.size, "partition_values": json.dumps(f.partition_values),
            "num_records": f.num_records, "stats": f.stats}  # fmt: skip


def written_files(rows: list) -> tuple[list[WrittenFile], list[WrittenFile]]:
    """The table's and the quarantine's files, from the tasks' file rows."""
    table: list[WrittenFile] = []
    quarantine: list[WrittenFile] = []
    for r in rows:
        f = WrittenFile(r["path"], int(r["size"]), json.loads(r["partition_values"]), int(r["num_records"]),
                        r["stats"])  # fmt: skip
        (table if r[KIND] == TABLE_FILE else quarantine).append(f)
    return table, quarantine


def _parse(spec: TaskSpec, parser: RecordParser | None, batch: pa.RecordBatch, schema: pa.Schema,
           summary: TaskSummary) -> pa.Table:  # fmt: skip
    n = batch.num_rows
    source = pa.Table.from_batches([batch])
    if parser is None and not spec.decoded:  # typed rows (the generator): every row is valid
        # A column the rows lack (another writer's, which the stream writes with add_columns) is null.
        names = set(source.column_names)
        typed = pa.table({c.name: source[c.name] if c.name in names else pa.nulls(n, arrow_type(c))
                          for c in spec.columns})  # fmt: skip
        codes = pa.nulls(n, pa.string())
        reasons = codes
    else:
        if parser is not None:
            values = source["value"].combine_chunks()
            summary.value_bytes += int(pc.sum(pc.binary_length(values)).as_py() or 0)
            parsed = parser.parse(values)
            typed, codes, reasons = parsed.table, parsed.codes, parsed.reasons
            summary.unseen.update(parsed.unseen)
        else:
            summary.value_bytes += int(pc.sum(source[DECODED_VALUE_BYTES]).as_py() or 0)
            columns = [source[c.name].cast(arrow_type(c)) for c in spec.columns]
            typed = pa.table(columns, schema=arrow_schema(spec.columns))
            codes, reasons = source[DECODED_CODE].combine_chunks(), source[DECODED_REASON].combine_chunks()
            ids = pc.value_counts(source[DECODED_SCHEMA_ID].combine_chunks().drop_null()).to_pylist()
            summary.schema_ids.update({d["values"]: d["counts"] for d in ids})
        ts = source["timestamp"].combine_chunks().cast(pa.timestamp("us", tz="UTC")).cast(pa.int64())
        seconds = np.asarray(ts.fill_null(0).to_numpy(zero_copy_only=False)) // 1_000_000
        summary.timestamp_seconds.update(dict(zip(*np.unique(seconds, return_counts=True), strict=True)))
    is_bad = pc.is_valid(codes).to_numpy(zero_copy_only=False)
    kind = np.where(is_bad, QUARANTINE, ROW).astype(np.int8)
    if spec.quarantine_floor and (parser is not None or spec.decoded) and is_bad.any():
        kind = np.where(is_bad & _below_floor(source, spec.quarantine_floor), -1, kind).astype(np.int8)
    good = kind == ROW
    summary.rows += int(good.sum())
    summary.quarantined += int((kind == QUARANTINE).sum())
    if (kind == QUARANTINE).any():
        counts = pc.value_counts(codes.filter(pa.array(kind == QUARANTINE)))
        summary.codes.update({d["values"]: d["counts"] for d in counts.to_pylist()})
        summary.mismatched.update(_mismatched_fields(codes, reasons, kind == QUARANTINE))
    key = pa.nulls(n, pa.binary())
    if spec.layout is not None and good.any():
        key = _keys(spec.layout, typed, good)
    arrays: list[pa.Array] = [typed[c.name].combine_chunks() for c in spec.columns]
    arrays += [pa.array(kind, pa.int8()), key, codes, reasons]
    bad_mask = pa.array(kind == QUARANTINE)
    any_bad = bool((kind == QUARANTINE).any())
    for name, typ, _ in SOURCE_FIELDS:
        # Without a quarantined record the columns are all null: no copy of the raw values.
        arrays.append(_source_column(source, name, typ, bad_mask, n) if any_bad else pa.nulls(n, typ))
    arrays.append(pa.nulls(n, pa.binary()))
    out = pa.Table.from_arrays(arrays, schema=schema)
    return out.filter(pa.array(kind >= 0)) if (kind < 0).any() else out


def _mismatched_fields(codes: pa.Array, reasons: pa.Array, quarantined: np.ndarray) -> dict[str, int]:
    """Quarantined type mismatches by field, from their reasons (``field <name>: ...``)."""
    mismatch = pc.and_(pa.array(quarantined), pc.equal(codes, "type_mismatch").fill_null(False))
    if not pc.any(mismatch).as_py():
        return {}
    names = pc.extract_regex(reasons.filter(mismatch), r"^field (?P<name>.+?): ").field("name")
    return {d["values"]: d["counts"] for d in pc.value_counts(names.drop_null()).to_pylist()}


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

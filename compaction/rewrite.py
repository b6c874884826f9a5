"""Rewrite one group with Spark: key every row, cut the curve into files by cell, sort, write.

1. read the group's Parquet files (partition values come from the Delta log, not from paths);
2. one ``mapInArrow`` pass computes each row's cell key and full sort key (``ClusteringLayout``);
3. the rows per cell (a few thousand numbers) come back to the driver, which assigns cells to
   output files along the curve (``file_plan``);
4. rows are shuffled by output file, sorted by key inside each task, and written; a file with
   more rows than a file is cut into equal pieces along the key, so a heavy value never
   makes one giant file.
The input is cached between 3 and 4, so the group is read once.
"""

from __future__ import annotations

import functools
import json
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from lakecluster.compaction.planner import Group
from lakecluster.config import StorageConfig
from lakecluster.curves import key_array
from lakecluster.layout import ClusteringLayout, file_plan
from lakecluster.parquet_files import FileWriter, WrittenFile, data_file_path
from lakecluster.schema import ColumnSpec, arrow_schema
from lakecluster.spark import read_data_files
from lakecluster.storage import filesystem
from lakecluster.uris import normalize

CELL, KEY, FILE = "_lc_cell", "_lc_key", "_lc_file"
OUTPUT_DDL = "path string, size bigint, num_records bigint, partition_values string, stats string"
_OUTPUT_SCHEMA = pa.schema([("path", pa.string()), ("size", pa.int64()), ("num_records", pa.int64()),
                            ("partition_values", pa.string()), ("stats", pa.string())])  # fmt: skip


@dataclass(frozen=True)
class RewriteSpec:
    table_uri: str
    columns: tuple[ColumnSpec, ...]
    partition_by: tuple[str, ...]
    layout: ClusteringLayout
    target_files: int  # output files the group becomes (about its bytes / compaction.target_file_bytes)
    file_prefix: str  # "g<generation>-<run id>", see planner.file_run
    storage: StorageConfig = field(default_factory=StorageConfig)  # executors build their own filesystem
    stats_columns: tuple[str, ...] | None = None  # the data columns output files carry stats for; None: all


def _key_task(layout: ClusteringLayout, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    for batch in batches:
        table = pa.Table.from_batches([batch])
        cell, key = layout.keys(table)
        yield pa.RecordBatch.from_arrays(
            [*batch.columns, key_array(cell).cast(pa.binary()), key_array(key).cast(pa.binary())],
            names=[*batch.schema.names, CELL, KEY],
        )


def _write_task(
    spec: RewriteSpec,
    file_rows: dict[int, int],
    file_pieces: dict[int, int],
    partition: dict[str, str | None],
    batches: Iterator[pa.RecordBatch],
) -> Iterator[pa.RecordBatch]:
    """Write this task's rows (sorted by file, then key) as files, streaming: one batch in memory.

    A file id with more rows than a file should hold is cut into ``file_pieces`` equal pieces
    along the key; the row counts per file id are known from the planning step.
    """
    fs, root = filesystem(spec.table_uri, spec.storage)
    schema = arrow_schema(spec.columns)
    token = uuid.uuid4().hex[:16]
    written: list[WrittenFile] = []
    writer: FileWriter | None = None
    current: tuple[int, int] | None = None  # (file id, piece)
    seen: dict[int, int] = {}
    n = 0
    for batch in batches:
        if batch.num_rows == 0:
            continue
        table = pa.Table.from_batches([batch])
        file_ids = table[FILE].to_numpy()
        starts = np.flatnonzero(np.r_[True, file_ids[1:] != file_ids[:-1]])
        ends = np.r_[starts[1:], len(file_ids)]
        for start, end in zip(starts, ends, strict=True):
            fid = int(file_ids[start])
            total, k = file_rows[fid], file_pieces[fid]
            pos = seen.get(fid, 0)
            seen[fid] = pos + int(end - start)
            # cut points of the file's pieces, in the file's own row numbering
            cuts = [(total * i) // k for i in range(1, k)]
            offset = int(start)
            while offset < end:
                row = pos + (offset - int(start))
                piece = sum(1 for c in cuts if c <= row)
                if current != (fid, piece):
                    if writer is not None:
                        written.append(writer.close())
                    name = f"part-{spec.file_prefix}-{token}-c{n:05d}.snappy.parquet"
                    n += 1
                    writer = FileWriter(fs, root, data_file_path(spec.partition_by, partition, name),
                                        data_schema(schema, spec.partition_by), partition,
                                        spec.stats_columns)  # fmt: skip
                    current = (fid, piece)
                next_cut = next((c for c in cuts if c > row), None)
                stop = int(end) if next_cut is None else min(int(end), int(start) + next_cut - pos)
                assert writer is not None
                writer.write(_data_columns(table.slice(offset, stop - offset), schema, spec.partition_by))
                offset = stop
    if writer is not None:
        written.append(writer.close())
    rows = [{"path": f.path, "size": f.size, "num_records": f.num_records,
             "partition_values": json.dumps(f.partition_values), "stats": f.stats} for f in written]  # fmt: skip
    yield pa.RecordBatch.from_pylist(rows, schema=_OUTPUT_SCHEMA)


def data_schema(schema: pa.Schema, partition_by: Sequence[str]) -> pa.Schema:
    """Data files hold the non-partition columns (Delta keeps partition values in the log)."""
    return pa.schema([f for f in schema if f.name not in partition_by])


def _data_columns(piece: pa.Table, schema: pa.Schema, partition_by: Sequence[str]) -> pa.Table:
    fields = [f for f in schema if f.name not in partition_by]
    return pa.Table.from_arrays([piece[f.name].combine_chunks().cast(f.type) for f in fields],
                                schema=pa.schema(fields))  # fmt: skip


def read_group(spark: SparkSession, table_uri: str, columns: Sequence[ColumnSpec],
               partition_by: Sequence[str], paths: Sequence[str]) -> DataFrame:  # fmt: skip
    base = normalize(table_uri)
    return read_data_files(spark, base, paths, [c for c in columns if c.name not in partition_by])


def rewrite(spark: SparkSession, group: Group, spec: RewriteSpec) -> list[WrittenFile]:
    df = read_group(spark, spec.table_uri, spec.columns, spec.partition_by, [f.path for f in group.files])
    key_ddl = ", ".join(f"`{n}` {t}" for n, t in df.dtypes) + f", {CELL} binary, {KEY} binary"
    keyed = df.mapInArrow(functools.partial(_key_task, spec.layout), key_ddl).persist(StorageLevel.MEMORY_AND_DISK)
    try:
        counts = sorted((bytes(r[CELL]), int(r["count"])) for r in keyed.groupBy(CELL).count().collect())
        if not counts:
            return []
        # Files from the rows actually read: files of other writers may carry no stats (no row
        # count), and sizing by a count of 0 would make a file per row.
        plan, plan_pieces = file_plan([c for _, c in counts], spec.target_files)
        file_of_cell = plan.tolist()
        rows_per_file: dict[int, int] = {}
        for (_, c), f in zip(counts, file_of_cell, strict=True):
            rows_per_file[f] = rows_per_file.get(f, 0) + c
        file_pieces = dict(enumerate(plan_pieces.tolist()))
        mapping = spark.createDataFrame(
            [(cell, f) for (cell, _), f in zip(counts, file_of_cell, strict=True)], f"{CELL} binary, {FILE} int"
        )
        tasks = max(1, min(len(file_pieces), 2 * spark.sparkContext.defaultParallelism))
        arranged = (
            keyed.join(F.broadcast(mapping), CELL).drop(CELL).repartition(tasks, FILE).sortWithinPartitions(FILE, KEY)
        )
        write = functools.partial(_write_task, spec, rows_per_file, file_pieces, group.partition_values)
        out = arranged.mapInArrow(write, OUTPUT_DDL).collect()
    finally:
        keyed.unpersist()
    return [WrittenFile(r["path"], int(r["size"]), json.loads(r["partition_values"]), int(r["num_records"]),
                        r["stats"]) for r in out]  # fmt: skip

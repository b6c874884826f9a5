"""Rewrite one group with Spark: key every row, cut the curve into files by cell, sort, write.

1. read the group's Parquet files (partition values come from the Delta log, not from paths);
2. one ``mapInArrow`` pass computes each row's cell key and full sort key (``ClusteringLayout``);
3. the rows per cell (a few thousand numbers) come back to the driver, which assigns cells to
   output files along the curve (``assign_files``);
4. rows are shuffled by output file, sorted by key inside each task, and written; a file with
   more rows than the target is cut into equal pieces along the key, so a heavy value never
   makes one giant file.
The input is cached between 3 and 4, so the group is read once.
"""

from __future__ import annotations

import functools
import itertools
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from lakecluster.compaction.planner import Group
from lakecluster.curves import key_array
from lakecluster.layout import ClusteringLayout, assign_files, pieces
from lakecluster.parquet_files import WrittenFile, filesystem, write_files
from lakecluster.schema import ColumnSpec, arrow_schema, spark_ddl

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
    target_rows: int
    file_prefix: str  # "g<generation>-<run id>", see planner.file_run


def _key_task(layout: ClusteringLayout, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    for batch in batches:
        table = pa.Table.from_batches([batch])
        cell, key = layout.keys(table)
        yield pa.RecordBatch.from_arrays(
            [*batch.columns, key_array(cell).cast(pa.binary()), key_array(key).cast(pa.binary())],
            names=[*batch.schema.names, CELL, KEY],
        )


def _write_task(spec: RewriteSpec, file_pieces: dict[int, int], partition: dict[str, str | None],
                batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:  # fmt: skip
    batches = list(batches)
    if not batches:
        return
    table = pa.Table.from_batches(batches)
    schema = arrow_schema(spec.columns)
    file_ids = table[FILE].to_numpy()
    starts = np.flatnonzero(np.r_[True, file_ids[1:] != file_ids[:-1]])
    ends = np.r_[starts[1:], len(file_ids)]
    rows = []
    for start, end in zip(starts, ends, strict=True):
        n = int(end - start)
        k = file_pieces[int(file_ids[start])]
        cuts = [start + (n * i) // k for i in range(k + 1)]
        for a, b in itertools.pairwise(cuts):
            piece = table.slice(int(a), int(b - a))
            data = pa.Table.from_arrays([_column(piece, f, partition) for f in schema], schema=schema)
            for f in write_files(spec.table_uri, data, partition_by=spec.partition_by, prefix=spec.file_prefix,
                                 max_rows_per_file=max(data.num_rows, 1)):  # fmt: skip
                rows.append({"path": f.path, "size": f.size, "num_records": f.num_records,
                             "partition_values": json.dumps(f.partition_values), "stats": f.stats})  # fmt: skip
    yield pa.RecordBatch.from_pylist(rows, schema=_OUTPUT_SCHEMA)


def _column(piece: pa.Table, field: pa.Field, partition: dict[str, str | None]) -> pa.Array:
    if field.name in partition:
        value = partition[field.name]
        text = pa.array([value] * piece.num_rows, pa.string())
        return text.cast(field.type)
    return piece[field.name].combine_chunks().cast(field.type)


def read_group(spark: SparkSession, table_uri: str, columns: Sequence[ColumnSpec],
               partition_by: Sequence[str], paths: Sequence[str]) -> DataFrame:  # fmt: skip
    _fs, root = filesystem(table_uri)
    base = table_uri.rstrip("/") if "://" in table_uri else root
    data_columns = tuple(c for c in columns if c.name not in partition_by)
    return spark.read.schema(spark_ddl(data_columns)).parquet(*[f"{base}/{p}" for p in paths])


def rewrite(spark: SparkSession, group: Group, spec: RewriteSpec) -> list[WrittenFile]:
    df = read_group(spark, spec.table_uri, spec.columns, spec.partition_by, [f.path for f in group.files])
    key_ddl = ", ".join(f"`{n}` {t}" for n, t in df.dtypes) + f", {CELL} binary, {KEY} binary"
    keyed = df.mapInArrow(functools.partial(_key_task, spec.layout), key_ddl).persist(StorageLevel.MEMORY_AND_DISK)
    try:
        counts = sorted((bytes(r[CELL]), int(r["count"])) for r in keyed.groupBy(CELL).count().collect())
        if not counts:
            return []
        file_of_cell = assign_files([c for _, c in counts], spec.target_rows)
        rows_per_file: dict[int, int] = {}
        for (_, c), f in zip(counts, file_of_cell, strict=True):
            rows_per_file[f] = rows_per_file.get(f, 0) + c
        file_pieces = {f: pieces(r, spec.target_rows) for f, r in rows_per_file.items()}
        mapping = spark.createDataFrame(
            [(cell, f) for (cell, _), f in zip(counts, file_of_cell, strict=True)], f"{CELL} binary, {FILE} int"
        )
        tasks = max(1, min(len(file_pieces), 2 * spark.sparkContext.defaultParallelism))
        arranged = (
            keyed.join(F.broadcast(mapping), CELL).drop(CELL).repartition(tasks, FILE).sortWithinPartitions(FILE, KEY)
        )
        write = functools.partial(_write_task, spec, file_pieces, group.partition_values)
        out = arranged.mapInArrow(write, OUTPUT_DDL).collect()
    finally:
        keyed.unpersist()
    return [WrittenFile(r["path"], int(r["size"]), json.loads(r["partition_values"]), int(r["num_records"]),
                        r["stats"]) for r in out]  # fmt: skip

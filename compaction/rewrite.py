"""Rewrite one group with Spark: key every row, cut the curve into files by cell, sort, write.

1. read the group's files through Delta's reader (deletion vectors applied; partition values from
   the Delta log, not from paths);
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
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from lakecluster import delta_txn
from lakecluster.clustering import ClusteringLayout
from lakecluster.compaction.planner import Group
from lakecluster.config import StorageConfig
from lakecluster.curves import key_array
from lakecluster.errors import UnsupportedTableError
from lakecluster.file_plan import file_plan
from lakecluster.parquet_files import FileWriter, WrittenFile, data_file_path
from lakecluster.schema import ColumnSpec
from lakecluster.storage import filesystem
from lakecluster.table.delta_schema import DeltaSchema
from lakecluster.table.file_rows import RowTracking
from lakecluster.table.live_files import DataFile
from lakecluster.uris import normalize

CELL, KEY, FILE = "_lc_cell", "_lc_key", "_lc_file"
OUTPUT_DDL = "path string, size bigint, num_records bigint, partition_values string, stats string"
_OUTPUT_SCHEMA = pa.schema([("path", pa.string()), ("size", pa.int64()), ("num_records", pa.int64()),
                            ("partition_values", pa.string()), ("stats", pa.string())])  # fmt: skip


@dataclass(frozen=True)
class RewriteSpec:
    """How a group is rewritten: read and written in the table's schema at the version it was
    planned on (``table_schema``: every column, whoever added it, by physical name), keyed by ``layout``."""

    table_uri: str
    table_schema: DeltaSchema
    layout: ClusteringLayout
    target_files: int  # output files the group becomes (about its bytes / compaction.target_file_bytes)
    file_prefix: str  # "g<generation>-<run id>", see ``live_files.DataFile``
    storage: StorageConfig = field(default_factory=StorageConfig)  # executors build their own filesystem
    # The data columns output files carry stats for, by physical name; None: all.
    stats_columns: tuple[str, ...] | None = None
    # Row tracking's columns, which the output files hold every row's id and commit version in.
    row_tracking: RowTracking | None = None
    # What a task of the rewrite in Spark tasks may hold for sorting and writing, and where it
    # spills the rest ("": Spark's local directory, else the system's temporary one).
    task_memory_bytes: int = 512 << 20
    spill_dir: str = ""

    @classmethod
    def for_columns(cls, table_uri: str, columns: Sequence[ColumnSpec], partition_by: Sequence[str],
                    layout: ClusteringLayout, **settings: Any) -> RewriteSpec:  # fmt: skip
        """A spec for a table of exactly ``columns``, without column mapping."""
        return cls(table_uri, DeltaSchema.of_columns(columns, partition_by), layout, **settings)

    @property
    def partition_by(self) -> tuple[str, ...]:
        return self.table_schema.partition_by

    @property
    def schema(self) -> pa.Schema:
        """The data files' columns (partition columns left out), by physical name; with row
        tracking, its two columns after them."""
        schema = self.table_schema.data_schema()
        if self.row_tracking is None:
            return schema
        return pa.schema([*schema, pa.field(self.row_tracking.row_id, pa.int64()),
                          pa.field(self.row_tracking.commit_version, pa.int64())])  # fmt: skip

    def key_input(self, table: pa.Table) -> pa.Table:
        """The layout's columns of rows of :attr:`schema`, under the layout's (logical) names."""
        physical = [self.table_schema.physical(c) for c in self.layout.columns]
        return table.select(physical).rename_columns(list(self.layout.columns))

    @property
    def key_schema(self) -> pa.Schema:
        """The fields of :attr:`schema` the layout reads."""
        return pa.schema([self.schema.field(self.table_schema.physical(c)) for c in self.layout.columns])

    def logged_partition(self, values: Mapping[str, str | None]) -> dict[str, str | None]:
        """A group's partition values keyed as the log keys them (physical names under column mapping)."""
        return {self.table_schema.physical(k): v for k, v in values.items()}


def _key_task(spec: RewriteSpec, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    for batch in batches:
        table = pa.Table.from_batches([batch])
        cell, key = spec.layout.keys(spec.key_input(table))
        yield pa.RecordBatch.from_arrays(
            [*batch.columns, key_array(cell).cast(pa.binary()), key_array(key).cast(pa.binary())],
            names=[*batch.schema.names, CELL, KEY],
        )


def _write_task(
    spec: RewriteSpec,
    file_pieces: dict[int, tuple[int, ...]],
    partition: dict[str, str | None],
    batches: Iterator[pa.RecordBatch],
) -> Iterator[pa.RecordBatch]:
    """Write this task's rows (sorted by file, then key) as files, streaming: one batch in memory.

    A file id (a run of cells) is written as the files of ``file_pieces``' rows, cut along the key.
    """
    fs, root = filesystem(spec.table_uri, spec.storage)
    schema = spec.schema
    logged = spec.logged_partition(partition)
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
            pos = seen.get(fid, 0)
            seen[fid] = pos + int(end - start)
            # cut points of the file's pieces, in the file's own row numbering
            cuts = np.cumsum(file_pieces[fid])[:-1].tolist()
            offset = int(start)
            while offset < end:
                row = pos + (offset - int(start))
                piece = sum(1 for c in cuts if c <= row)
                if current != (fid, piece):
                    if writer is not None:
                        written.append(writer.close())
                    name = f"part-{spec.file_prefix}-{token}-c{n:05d}.snappy.parquet"
                    n += 1
                    writer = FileWriter(fs, root, data_file_path(spec.partition_by, partition, name), schema,
                                        logged, spec.stats_columns)  # fmt: skip
                    current = (fid, piece)
                next_cut = next((c for c in cuts if c > row), None)
                stop = int(end) if next_cut is None else min(int(end), int(start) + next_cut - pos)
                assert writer is not None
                writer.write(_data_columns(table.slice(offset, stop - offset), schema))
                offset = stop
    if writer is not None:
        written.append(writer.close())
    rows = [{"path": f.path, "size": f.size, "num_records": f.num_records,
             "partition_values": json.dumps(f.partition_values), "stats": f.stats} for f in written]  # fmt: skip
    yield pa.RecordBatch.from_pylist(rows, schema=_OUTPUT_SCHEMA)


def _data_columns(piece: pa.Table, schema: pa.Schema) -> pa.Table:
    return pa.Table.from_arrays([piece[f.name].combine_chunks().cast(f.type) for f in schema], schema=schema)


def read_group(spark: SparkSession, spec: RewriteSpec, files: Sequence[DataFile]) -> DataFrame:
    """The group's live rows, read by Delta's reader (deletion vectors applied, column mapping
    resolved), its data columns under their physical names.

    Raises:
        UnsupportedTableError: a nested column under column mapping (Delta's reader names its
            fields by their logical names, the files by their physical ones).
    """
    table = spec.table_schema
    if spec.row_tracking is not None:
        raise UnsupportedTableError(f"{spec.table_uri}: rewriting a table with row tracking with Spark's reader is "
                                    "not supported")  # fmt: skip
    if table.mapping != "none" and any(pa.types.is_nested(f.type) for f in spec.schema):
        raise UnsupportedTableError(f"{spec.table_uri}: rewriting nested columns under column mapping with Spark's "
                                    "reader is not supported")  # fmt: skip
    frame = delta_txn.files_frame(spark, normalize(spec.table_uri), [f.logged() for f in files])
    return frame.select(*[F.col(f"`{c.name}`").alias(c.physical) for c in table.columns
                          if c.name not in table.partition_by])  # fmt: skip


def rewrite(spark: SparkSession, group: Group, spec: RewriteSpec) -> list[WrittenFile]:
    df = read_group(spark, spec, group.files)
    key_ddl = ", ".join(f"`{n}` {t}" for n, t in df.dtypes) + f", {CELL} binary, {KEY} binary"
    keyed = df.mapInArrow(functools.partial(_key_task, spec), key_ddl).persist(StorageLevel.MEMORY_AND_DISK)
    try:
        counts = sorted((bytes(r[CELL]), int(r["count"])) for r in keyed.groupBy(CELL).count().collect())
        if not counts:
            return []
        # Files from the rows actually read: files of other writers may carry no stats (no row
        # count), and sizing by a count of 0 would make a file per row.
        plan, plan_pieces = file_plan([c for _, c in counts], spec.target_files)
        file_of_cell = plan.tolist()
        file_pieces = dict(enumerate(plan_pieces))
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

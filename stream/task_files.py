"""Files a micro-batch task writes itself: its valid rows into the table, its bad records into quarantine.

The task that parses a part of the batch also writes it (``stream.write_in_tasks``): rows are
buffered up to ``stream.write_buffer_bytes``, sorted by their curve key (cluster on write), split
by partition values and by ``stream.max_records_per_file``, and written with ``FileWriter`` (Delta
stats included). Nothing is committed here: the task reports each file, and the driver commits
them all in one Delta transaction per table (``stream/append.py``). Files of a task attempt that
failed, or of a batch that crashed before its commit, are never referenced; vacuum removes them
after the retention period.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from lakecluster.config import StorageConfig
from lakecluster.parquet_files import (
    FileWriter,
    WrittenFile,
    data_file_path,
    partition_value_string,
    split_by_partition,
)
from lakecluster.storage import filesystem


@dataclass(frozen=True)
class TaskFiles:
    """Where and how a task writes (shipped to the executors with the task)."""

    table_uri: str
    quarantine_uri: str
    partition_by: tuple[str, ...]
    max_records_per_file: int  # 0: one file per flush and partition
    buffer_bytes: int
    storage: StorageConfig
    stream_id: str
    batch_id: int
    write_table: bool = True
    write_quarantine: bool = True
    table_stats_columns: tuple[str, ...] | None = None  # columns with file stats; None: all
    quarantine_stats_columns: tuple[str, ...] | None = None


class BufferedFiles:
    """Rows of one table gathered across a task's Arrow batches, written out when the buffer is full.

    ``sort_key`` names a column to sort each flush by (then dropped), so files cut from one flush
    cover narrow ranges of the curve; partition columns are written into the directory names, as
    Delta wants, and every row of a partition keeps its key order.
    """

    def __init__(self, uri: str, files: TaskFiles, schema: pa.Schema, partition_by: tuple[str, ...],
                 sort_key: str | None, stats_columns: tuple[str, ...] | None = None) -> None:  # fmt: skip
        self.uri = uri
        self.stats_columns = stats_columns
        self.files = files
        self.schema = schema  # columns written, the sort key excluded
        self.partition_by = partition_by
        self.sort_key = sort_key
        self.buffered: list[pa.Table] = []
        self.buffered_bytes = 0
        self.written: list[WrittenFile] = []
        self._token = uuid.uuid4().hex[:20]
        self._count = 0

    def add(self, rows: pa.Table) -> None:
        if rows.num_rows == 0:
            return
        self.buffered.append(rows)
        self.buffered_bytes += rows.nbytes
        if self.buffered_bytes >= self.files.buffer_bytes:
            self.flush()

    def flush(self) -> None:
        if not self.buffered:
            return
        rows = pa.concat_tables(self.buffered)
        self.buffered, self.buffered_bytes = [], 0
        if self.sort_key is not None:
            rows = rows.take(pc.sort_indices(rows, [(self.sort_key, "ascending")])).drop_columns([self.sort_key])
        fs, root = filesystem(self.uri, self.files.storage)
        per_file = self.files.max_records_per_file or rows.num_rows
        for values, part in split_by_partition(rows, self.partition_by):
            strings = {k: partition_value_string(v) for k, v in values.items()}
            for start in range(0, part.num_rows, per_file):
                name = f"part-{self._token}-c{self._count:04d}.snappy.parquet"
                self._count += 1
                writer = FileWriter(fs, root, data_file_path(self.partition_by, strings, name), self.schema, strings,
                                    self.stats_columns)  # fmt: skip
                writer.write(part.slice(start, per_file).select(self.schema.names))
                self.written.append(writer.close())

    def close(self) -> Iterator[WrittenFile]:
        self.flush()
        yield from self.written

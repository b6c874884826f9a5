"""Writing Parquet data files into a table directory for tests, as lakecluster's writers do."""

from __future__ import annotations

import uuid
from collections.abc import Collection, Sequence

import pyarrow as pa
import pyarrow.fs as pafs

from lakecluster.parquet_files import (
    FileWriter,
    StatsAccumulator,
    WrittenFile,
    data_file_path,
    partition_value_string,
    split_by_partition,
)


def write_files(table_dir: str, data: pa.Table, *, partition_by: Sequence[str], prefix: str,
                max_rows_per_file: int) -> list[WrittenFile]:  # fmt: skip
    """``data`` as files ``part-<prefix>-<token>-cNNNN`` of at most ``max_rows_per_file`` rows under
    the local table directory, one set per partition; what a Delta add action needs of each."""
    fs = pafs.LocalFileSystem()
    token = uuid.uuid4().hex[:16]
    written: list[WrittenFile] = []
    for values, part in split_by_partition(data, partition_by):
        strings = {k: partition_value_string(v) for k, v in values.items()}
        for start in range(0, part.num_rows, max_rows_per_file):
            rel = data_file_path(partition_by, strings, f"part-{prefix}-{token}-c{len(written):04d}.snappy.parquet")
            writer = FileWriter(fs, table_dir, rel, part.schema, strings)
            writer.write(part.slice(start, max_rows_per_file))
            written.append(writer.close())
    return written


def delta_stats(table: pa.Table, columns: Collection[str] | None = None) -> str:
    """Delta per-file stats JSON of ``table`` as the writers compute them, in one piece."""
    acc = StatsAccumulator(table.schema, columns)
    acc.update(table)
    return acc.json()

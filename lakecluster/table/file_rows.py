"""The live rows of a table's data files, as the log says they are: a file's deletion vector
applied (its deleted rows never come back), columns a file lacks read as null, Spark's INT96
timestamps read as micro-seconds, every column cast to the type asked for.

Everything that reads rows out of data files with pyarrow goes through here: the compactor's
rewrites (in its process and in Spark tasks), the samples of ``tune`` and of the layout's parent
columns, the sketches built from the table. Files without a deletion vector are scanned together
as one dataset; a file with one is scanned alone, its batches in file order, so each row's
position in the file is known and the vector's rows are dropped (``deletion_vectors.live_mask``).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import pyarrow as pa
import pyarrow.dataset as pds
import pyarrow.parquet as pq

from lakecluster.table.deletion_vectors import DeletionVector, live_mask
from lakecluster.uris import data_file

BATCH_ROWS = 128 * 1024
_PARQUET = pds.ParquetFileFormat(read_options=pds.ParquetReadOptions(coerce_int96_timestamp_unit="us"))


class FileRef(Protocol):
    """A data file as the log names it: its path (relative to the table, as in ``add.path``) and
    its deletion vector (the compactor's ``DataFile`` is one)."""

    @property
    def path(self) -> str: ...

    @property
    def deletion_vector(self) -> DeletionVector | None: ...


@dataclass(frozen=True)
class LiveFile:
    """A :class:`FileRef` of its own."""

    path: str
    deletion_vector: DeletionVector | None = None


def dataset(fs: Any, root: str, paths: Sequence[str], schema: pa.Schema) -> pds.Dataset:
    """The data files at ``paths`` (add paths, relative to the table root ``root``) as one dataset
    of ``schema`` (a column a file lacks reads as nulls). Deletion vectors are not applied: for
    files that have none."""
    return pds.dataset([data_file(root, p) for p in paths], schema=schema, format=_PARQUET, filesystem=fs)


def live_batches(fs: Any, root: str, files: Sequence[FileRef], schema: pa.Schema, *,
                 columns: Sequence[str] | None = None,
                 batch_rows: int = BATCH_ROWS) -> Iterator[pa.RecordBatch]:  # fmt: skip
    """The live rows of ``files`` in order, as batches of ``schema`` (or of its ``columns``)."""
    start = 0
    while start < len(files):
        if files[start].deletion_vector is not None:
            yield from _vector_file(fs, root, files[start], schema, columns, batch_rows)
            start += 1
            continue
        end = start
        while end < len(files) and files[end].deletion_vector is None:
            end += 1
        scanner = dataset(fs, root, [f.path for f in files[start:end]], schema).scanner(
            columns=list(columns) if columns is not None else None, batch_size=batch_rows, use_threads=False)
        yield from (b for b in scanner.to_batches() if b.num_rows)
        start = end


def _vector_file(fs: Any, root: str, file: FileRef, schema: pa.Schema, columns: Sequence[str] | None,
                 batch_rows: int) -> Iterator[pa.RecordBatch]:  # fmt: skip
    assert file.deletion_vector is not None
    deleted = file.deletion_vector.rows(fs, root)
    scanner = dataset(fs, root, [file.path], schema).scanner(
        columns=list(columns) if columns is not None else None, batch_size=batch_rows, use_threads=False)
    position = 0
    # Without threads a one-file scan yields its batches in file order: positions count up.
    for batch in scanner.to_batches():
        n = batch.num_rows
        if n:
            keep = live_mask(deleted, position, n)
            position += n
            if keep.all():
                yield batch
            elif keep.any():
                yield batch.filter(pa.array(keep))


def read_live(fs: Any, root: str, files: Sequence[FileRef], schema: pa.Schema, *,
              columns: Sequence[str] | None = None) -> pa.Table:  # fmt: skip
    """Every live row of ``files``, as one table of ``schema`` (or of its ``columns``)."""
    if all(f.deletion_vector is None for f in files):  # one scan, threaded
        return dataset(fs, root, [f.path for f in files], schema).to_table(
            columns=list(columns) if columns is not None else None, use_threads=True)
    target = schema if columns is None else pa.schema([schema.field(c) for c in columns])
    return pa.Table.from_batches(list(live_batches(fs, root, files, schema, columns=columns)), schema=target)


def file_head(fs: Any, root: str, file: FileRef, rows: int, schema: pa.Schema) -> pa.Table:
    """The first ``rows`` live rows of one data file as ``schema`` (its columns, in its types; a
    column the file lacks, written before the column existed, is null), holding no more memory
    than they need. Only the file's first pages are decoded: a dataset scan decodes a whole row
    group first, about ten times slower on SSB's wide files."""
    deleted = file.deletion_vector.rows(fs, root) if file.deletion_vector is not None else None
    pieces: list[pa.Table] = []
    taken = position = 0
    with fs.open_input_file(data_file(root, file.path)) as source:
        parquet = pq.ParquetFile(source, coerce_int96_timestamp_unit="us")
        present = [f.name for f in schema if f.name in parquet.schema_arrow.names]
        # Enough rows that a few deleted ones leave ``rows`` live (a heavily deleted file reads on).
        for batch in parquet.iter_batches(batch_size=max(rows, 1), columns=present) if rows > 0 else ():
            n = batch.num_rows
            if deleted is not None:
                batch = batch.filter(pa.array(live_mask(deleted, position, n)))
            position += n
            batch = batch.slice(0, rows - taken)
            taken += batch.num_rows
            columns = [batch.column(f.name).cast(f.type) if f.name in present else pa.nulls(batch.num_rows, f.type)
                       for f in schema]  # fmt: skip
            pieces.append(_copied(pa.Table.from_arrays(columns, schema=schema)))
            if taken >= rows:
                break
    return pa.concat_tables(pieces) if pieces else schema.empty_table()


def _copied(table: pa.Table) -> pa.Table:
    """``table`` in buffers of its own: a slice of a larger batch keeps the whole batch alive."""
    return table.combine_chunks().take(pa.array(range(table.num_rows), pa.int64()))

"""The live rows of a table's data files, as the log says they are: a file's deletion vector
applied (its deleted rows never come back), columns a file lacks read as null, Spark's INT96
timestamps read as micro-seconds, every column cast to the type asked for.

Everything that reads rows out of data files with pyarrow goes through here: the compactor's
rewrites (in its process and in Spark tasks), the samples of ``tune`` and of the layout's parent
columns, the sketches built from the table. ``live_batches`` reads one file at a time, its batches in file
order, so each row's position in the file is known: a deletion vector's rows are dropped
(``deletion_vectors.live_mask``), and on a table with row tracking a row's id is its file's base
row id plus its position, unless the file holds it (:class:`RowTracking`). ``read_live`` reads
files without a deletion vector as one threaded dataset scan (small groups, whole).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pds
import pyarrow.parquet as pq

from lakecluster.errors import UnsupportedTableError
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
    base_row_id: int | None = None
    default_row_commit_version: int | None = None


@dataclass(frozen=True)
class RowTracking:
    """The columns a row-tracking table's files may hold each row's id and commit version in
    (``delta.rowTracking.materialized*ColumnName``). Where a file holds none (or a null), the row's
    id is its file's ``baseRowId`` plus its position in the file, and its commit version the file's
    ``defaultRowCommitVersion`` (Delta protocol, "Row Tracking"). Read with them, each row carries
    its own: a rewrite that moves it keeps both."""

    row_id: str
    commit_version: str


def dataset(fs: Any, root: str, paths: Sequence[str], schema: pa.Schema) -> pds.Dataset:
    """The data files at ``paths`` (add paths, relative to the table root ``root``) as one dataset
    of ``schema`` (a column a file lacks reads as nulls). Deletion vectors are not applied: for
    files that have none."""
    return pds.dataset([data_file(root, p) for p in paths], schema=schema, format=_PARQUET, filesystem=fs)


def live_batches(fs: Any, root: str, files: Sequence[FileRef], schema: pa.Schema, *,
                 columns: Sequence[str] | None = None, batch_rows: int = BATCH_ROWS,
                 row_tracking: RowTracking | None = None) -> Iterator[pa.RecordBatch]:  # fmt: skip
    """The live rows of ``files`` in order, as batches of ``schema`` (or of its ``columns``) of at
    most ``batch_rows`` rows; with ``row_tracking`` (whose columns ``schema`` then has), each row's
    id and commit version filled in.

    Each file is read alone, a batch of pages at a time (``ParquetFile.iter_batches``): a dataset
    scan decodes whole row groups ahead of its batches, and on SSB's wide rows held 500 MiB more
    than the batches it gave (``docs/operations.md``, "Sizing")."""
    target = schema if columns is None else pa.schema([schema.field(c) for c in columns])
    for file in files:
        yield from _one_file(fs, root, file, target, batch_rows, row_tracking)


def _one_file(fs: Any, root: str, file: FileRef, schema: pa.Schema, batch_rows: int,
              row_tracking: RowTracking | None) -> Iterator[pa.RecordBatch]:  # fmt: skip
    deleted = file.deletion_vector.rows(fs, root) if file.deletion_vector is not None else None
    position = 0
    with fs.open_input_file(data_file(root, file.path)) as source:
        parquet = pq.ParquetFile(source, coerce_int96_timestamp_unit="us")
        names = set(parquet.schema_arrow.names)
        present = [f.name for f in schema if f.name in names]
        # Batches come in file order: positions count up.
        for batch in parquet.iter_batches(batch_size=max(batch_rows, 1), columns=present, use_threads=False):
            n = batch.num_rows
            if not n:
                continue
            batch = _conformed(batch, schema, names)
            if row_tracking is not None:
                batch = _tracked(batch, file, row_tracking, position)
            keep = live_mask(deleted, position, n) if deleted is not None else None
            position += n
            if keep is None or keep.all():
                yield batch
            elif keep.any():
                yield batch.filter(pa.array(keep))


def _conformed(batch: pa.RecordBatch, schema: pa.Schema, present: set[str]) -> pa.RecordBatch:
    """``batch`` as ``schema``: its columns cast to the types asked for, a column the file lacks
    (written before the column was added) null."""
    columns = [batch.column(f.name) if f.name in present else pa.nulls(batch.num_rows, f.type) for f in schema]
    cast = [c if c.type == f.type else c.cast(f.type) for c, f in zip(columns, schema, strict=True)]
    return pa.RecordBatch.from_arrays(cast, schema=schema)


def _tracked(batch: pa.RecordBatch, file: FileRef, tracking: RowTracking, position: int) -> pa.RecordBatch:
    """``batch`` with its rows' ids and commit versions where the file holds none: the file's base
    row id plus each row's position, and the file's default commit version."""
    names = batch.schema.names
    base = getattr(file, "base_row_id", None)
    version = getattr(file, "default_row_commit_version", None)
    ids = batch.column(tracking.row_id)
    if ids.null_count:
        if base is None:
            raise UnsupportedTableError(f"{file.path} has rows without a row id and no baseRowId: its rows' ids "
                                        "cannot be kept")  # fmt: skip
        fresh = pa.array(np.arange(position, position + batch.num_rows, dtype=np.int64) + base)
        batch = batch.set_column(names.index(tracking.row_id), tracking.row_id, pc.coalesce(ids, fresh))
    versions = batch.column(tracking.commit_version)
    if versions.null_count:
        if version is None:
            raise UnsupportedTableError(f"{file.path} has rows without a commit version and no "
                                        "defaultRowCommitVersion: they cannot be kept")  # fmt: skip
        batch = batch.set_column(names.index(tracking.commit_version), tracking.commit_version,
                                 pc.coalesce(versions, pa.scalar(version, pa.int64())))  # fmt: skip
    return batch


def read_live(fs: Any, root: str, files: Sequence[FileRef], schema: pa.Schema, *,
              columns: Sequence[str] | None = None, row_tracking: RowTracking | None = None) -> pa.Table:  # fmt: skip
    """Every live row of ``files``, as one table of ``schema`` (or of its ``columns``); with
    ``row_tracking``, each row's id and commit version filled in (``live_batches``)."""
    if all(f.deletion_vector is None for f in files) and row_tracking is None:  # one scan, threaded
        return dataset(fs, root, [f.path for f in files], schema).to_table(
            columns=list(columns) if columns is not None else None, use_threads=True)
    target = schema if columns is None else pa.schema([schema.field(c) for c in columns])
    batches = live_batches(fs, root, files, schema, columns=columns, row_tracking=row_tracking)
    return pa.Table.from_batches(list(batches), schema=target)


def file_head(fs: Any, root: str, file: FileRef, rows: int, schema: pa.Schema) -> pa.Table:
    """The first ``rows`` live rows of one data file as ``schema`` (its columns, in its types; a
    column the file lacks, written before the column existed, is null), holding no more memory
    than they need. Only the file's first pages are decoded: a dataset scan decodes a whole row
    group first, about ten times slower on SSB's wide files."""
    pieces: list[pa.Table] = []
    taken = 0
    # Batches of ``rows``: enough that a few deleted ones leave ``rows`` live (a heavily deleted file reads on).
    for batch in _one_file(fs, root, file, schema, rows, None) if rows > 0 else ():
        batch = batch.slice(0, rows - taken)
        taken += batch.num_rows
        pieces.append(_copied(pa.Table.from_batches([batch])))
        if taken >= rows:
            break
    return pa.concat_tables(pieces) if pieces else schema.empty_table()


def _copied(table: pa.Table) -> pa.Table:
    """``table`` in buffers of its own: a slice of a larger batch keeps the whole batch alive."""
    return table.combine_chunks().take(pa.array(range(table.num_rows), pa.int64()))

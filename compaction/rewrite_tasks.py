"""Rewrite a large group with Spark tasks that run the local rewrite's pyarrow/numpy code.

The same layout as the other two rewrites (``rewrite_local.py``, ``rewrite.py``), in two Spark
jobs whose tasks read and write Parquet with pyarrow, so no row crosses between the JVM and Python
one by one and nothing is cached:

1. **count**: one task per slice of the group's files reads only the clustering columns and
   returns the rows per cell (a few thousand numbers); the driver assigns cells to output files
   along the curve (``file_plan``);
2. **shuffle and write**: the same slices are read whole, a batch at a time; each batch's rows are
   keyed, split by output file and shipped as Arrow IPC blobs (zstd-compressed buffers) through
   Spark's shuffle (one record per output file per batch); each reducer concatenates its files'
   blobs in input order, sorts them by key and writes them, a file with more rows than the target
   cut into equal pieces.

A reducer holds the rows of the output files it writes (about ``compaction.target_file_bytes``
decoded, times the files per reducer) while it sorts them, and writes each file a row group at a
time in key order (``FileWriter.write_rows``), never a sorted copy of it; a mapper holds one batch.
"""

from __future__ import annotations

import functools
import itertools
import json
import uuid
from collections.abc import Iterable, Iterator, Sequence

import numpy as np
import pyarrow as pa
from pyspark.sql import SparkSession

from lakecluster.clustering import file_plan
from lakecluster.compaction.planner import Group
from lakecluster.compaction.rewrite import RewriteSpec
from lakecluster.curves import argsort_keys
from lakecluster.parquet_files import FileWriter, WrittenFile, data_file_path
from lakecluster.storage import filesystem
from lakecluster.table.file_rows import live_batches
from lakecluster.table.live_files import DataFile

SLICE_BYTES = 64 << 20  # input bytes a task reads (its files' sizes on storage)
BATCH_ROWS = 256 * 1024  # rows a mapper keys and splits at a time
REDUCER_BYTES = 128 << 20  # input bytes whose rows one reducer sorts and writes
_KEY = "_lc_key"
# Rows cross the shuffle as Arrow IPC with zstd-compressed buffers: about a third of their decoded
# size (SSB's rows), compressed as fast as they are copied, so Spark pickles, compresses, writes
# and reads a third of the bytes (docs/benchmarks.md, "Production size").
_SHUFFLED = pa.ipc.IpcWriteOptions(compression="zstd")


def _cells(spec: RewriteSpec, table: pa.Table) -> tuple[np.ndarray, np.ndarray]:
    """(cell as fixed-width bytes, full sort key rows) of every row."""
    cell, key = spec.layout.keys(spec.key_input(table))
    return np.ascontiguousarray(cell).view(f"S{max(cell.shape[1], 1)}").ravel(), key


def _count_task(spec: RewriteSpec, files: Sequence[DataFile]) -> tuple[np.ndarray, np.ndarray]:
    """(distinct cells, rows of each) of these files' live rows, read column-pruned."""
    fs, root = filesystem(spec.table_uri, spec.storage)
    target = spec.key_schema
    table = pa.Table.from_batches(list(live_batches(fs, root, files, spec.schema, columns=target.names)),
                                  schema=target)  # fmt: skip
    if table.num_rows == 0:
        return np.zeros(0, dtype="S1"), np.zeros(0, dtype=np.int64)
    cells, _ = _cells(spec, table)
    distinct, counts = np.unique(cells, return_counts=True)
    return distinct, counts.astype(np.int64)


def _merge_counts(parts: Iterable[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """The counts of all tasks, one per distinct cell, cells in curve (byte) order."""
    nonempty = [(c, n) for c, n in parts if len(c)]
    if not nonempty:
        return np.zeros(0, dtype="S1"), np.zeros(0, dtype=np.int64)
    cells = np.concatenate([c for c, _ in nonempty])
    distinct, inverse = np.unique(cells, return_inverse=True)
    return distinct, np.bincount(inverse, weights=np.concatenate([n for _, n in nonempty]),
                                 minlength=len(distinct)).astype(np.int64)  # fmt: skip


def _batches(batches: Iterable[pa.RecordBatch], rows: int) -> Iterator[pa.Table]:
    """The batches' rows as contiguous tables of at least ``rows`` rows (the last one fewer). A
    dataset's batches end where its files do: a slice of a thousand small stream files, split file
    by file, would send a record per file and output file (600,000 for 1,000 into 1,000)."""
    pending: list[pa.RecordBatch] = []
    count = 0
    for batch in batches:
        if batch.num_rows:
            pending.append(batch)
            count += batch.num_rows
        if count >= rows:
            yield pa.Table.from_batches(pending).combine_chunks()
            pending, count = [], 0
    if pending:
        yield pa.Table.from_batches(pending).combine_chunks()


def _split_task(spec: RewriteSpec, cells: np.ndarray, file_of_cell: np.ndarray, slice_no: int,
                inputs: Sequence[DataFile]) -> Iterator[tuple[int, tuple[int, int, bytes]]]:  # fmt: skip
    """(output file, (slice, batch, Arrow IPC of the batch's live rows for that file, with their key))."""
    fs, root = filesystem(spec.table_uri, spec.storage)
    scanned = live_batches(fs, root, inputs, spec.schema, batch_rows=BATCH_ROWS, row_tracking=spec.row_tracking)
    for batch_no, table in enumerate(_batches(scanned, BATCH_ROWS)):
        cell, key = _cells(spec, table)
        files = file_of_cell[np.searchsorted(cells, cell)]
        order = np.argsort(files, kind="stable")
        bounds = np.flatnonzero(np.r_[True, np.diff(files[order]) != 0, True])
        keys = pa.FixedSizeBinaryArray.from_buffers(pa.binary(key.shape[1]), len(key),
                                                    [None, pa.py_buffer(np.ascontiguousarray(key))])  # fmt: skip
        # One gather of the batch in output-file order, then a slice per file (no copy).
        table = table.append_column(_KEY, keys).take(pa.array(order))
        for start, end in itertools.pairwise(bounds):
            sink = pa.BufferOutputStream()
            with pa.ipc.new_stream(sink, table.schema, options=_SHUFFLED) as writer:
                writer.write_table(table.slice(start, end - start))
            yield int(files[order[start]]), (slice_no, batch_no, sink.getvalue().to_pybytes())


def _write_task(spec: RewriteSpec, file_pieces: dict[int, int], partition: dict[str, str | None], token: str,
                records: Iterator[tuple[int, tuple[int, int, bytes]]]) -> Iterator[dict]:  # fmt: skip
    """Each output file of this reducer, sorted by key and written (in pieces when it is too big)."""
    by_file: dict[int, list[tuple[int, int, bytes]]] = {}
    for fid, blob in records:
        by_file.setdefault(fid, []).append(blob)
    fs, root = filesystem(spec.table_uri, spec.storage)
    for fid in sorted(by_file):
        # Input order (slice, batch), then a stable sort: the order the local rewrite gives.
        blobs = sorted(by_file.pop(fid), key=lambda b: (b[0], b[1]))
        table = pa.concat_tables([pa.ipc.open_stream(b[2]).read_all() for b in blobs])
        del blobs
        key = table[_KEY].combine_chunks()
        width = key.type.byte_width
        matrix = np.frombuffer(key.buffers()[1], dtype=np.uint8, count=len(key) * width,
                               offset=key.offset * width).reshape(len(key), width)  # fmt: skip
        order = argsort_keys(matrix)
        table = table.drop_columns([_KEY])
        k = file_pieces[fid]
        cuts = [(table.num_rows * i) // k for i in range(k + 1)]
        for piece, (start, end) in enumerate(itertools.pairwise(cuts)):
            name = f"part-{spec.file_prefix}-{token}-c{fid:05d}-{piece:03d}.snappy.parquet"
            writer = FileWriter(fs, root, data_file_path(spec.partition_by, partition, name), table.schema,
                                spec.logged_partition(partition), spec.stats_columns)  # fmt: skip
            writer.write_rows(table, order[start:end])
            f = writer.close()
            yield {"path": f.path, "size": f.size, "num_records": f.num_records,
                   "partition_values": json.dumps(f.partition_values), "stats": f.stats}  # fmt: skip


def input_slices(group: Group, max_bytes: int = SLICE_BYTES) -> list[list[DataFile]]:
    """The group's files in order, cut into runs of about ``max_bytes`` (a task each)."""
    slices: list[list[DataFile]] = [[]]
    size = 0
    for f in group.files:
        if slices[-1] and size + f.size > max_bytes:
            slices.append([])
            size = 0
        slices[-1].append(f)
        size += f.size
    return [s for s in slices if s]


def rewrite_in_tasks(spark: SparkSession, group: Group, spec: RewriteSpec) -> list[WrittenFile]:
    """Rewrite ``group`` as files laid out by ``spec.layout`` in Spark tasks; nothing is committed here."""
    sc = spark.sparkContext
    slices = input_slices(group)
    inputs = sc.parallelize(list(enumerate(slices)), len(slices))
    cells, counts = _merge_counts(inputs.map(lambda s: _count_task(spec, s[1])).collect())
    if len(cells) == 0:
        return []
    file_of_cell, plan_pieces = file_plan(counts, spec.target_files)
    rows_per_file = np.bincount(file_of_cell, weights=counts).astype(np.int64)
    file_pieces = dict(enumerate(plan_pieces.tolist()))
    files = len(rows_per_file)
    # Contiguous runs of output files per reducer, about REDUCER_BYTES of input each (a reducer
    # holds its files' rows while it sorts them), and at least one per core.
    reducers = max(1, min(files, max(2 * sc.defaultParallelism, -(-group.bytes // REDUCER_BYTES))))
    split = functools.partial(_split_task, spec, cells, file_of_cell)
    write = functools.partial(_write_task, spec, file_pieces, group.partition_values, uuid.uuid4().hex[:16])
    out = (
        inputs.flatMap(lambda s: split(s[0], s[1]))
        .partitionBy(reducers, lambda fid: fid * reducers // files)
        .mapPartitions(write)
        .collect()
    )
    return [WrittenFile(r["path"], int(r["size"]), json.loads(r["partition_values"]), int(r["num_records"]),
                        r["stats"]) for r in sorted(out, key=lambda r: r["path"])]  # fmt: skip


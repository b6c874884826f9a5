"""Rewrite a large group with Spark tasks that run the local rewrite's pyarrow/numpy code.

The same layout as the other two rewrites (``rewrite_local.py``, ``rewrite.py``), in two Spark
jobs whose tasks read and write Parquet with pyarrow, so no row crosses between the JVM and Python
one by one and nothing is cached:

1. **count**: one task per slice of the group's files reads only the clustering columns and
   returns the rows per cell (a few thousand numbers), a sample of the rows' sort keys and the
   decoded size of a few thousand whole rows; the driver assigns cells to output files along the
   curve (``file_plan``) and cuts each file's key range into runs a task can sort within
   ``compaction.task_memory_bytes`` (``runs.py``);
2. **shuffle and write**: the same slices are read whole, a batch at a time; each batch's rows are
   keyed, split by run and shipped as Arrow IPC blobs (each one zstd frame) through Spark's
   shuffle (one record per run per batch); each reducer keeps the blobs it receives in memory up
   to a quarter of ``task_memory_bytes`` and spills the rest to local disk (``spill.py``), then
   writes its files run by run: a run's blobs in input order, sorted by key, written a row group
   at a time in key order (``FileWriter.write_rows``); a file with more rows than the target is
   cut into equal pieces.

A reducer holds one run decoded (about a quarter of ``task_memory_bytes``; a run the estimate got
wrong is cut again by quantiles of its own keys), whatever the target file size and however many
files it writes; a mapper holds one batch (an eighth of ``task_memory_bytes`` decoded, copied about
four times as it is keyed, gathered and encoded); the driver, counts per cell and a bounded sample
of keys. Tasks allocate from jemalloc (``arrow_memory``), which hands freed pages back.
"""

from __future__ import annotations

import functools
import itertools
import json
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
from pyspark.sql import SparkSession

from lakecluster import metrics
from lakecluster.arrow_memory import use_returning_pool
from lakecluster.compaction.planner import Group
from lakecluster.compaction.rewrite import RewriteSpec
from lakecluster.compaction.runs import MAX_SAMPLES, RunPlan, as_rows, plan_runs
from lakecluster.compaction.spill import BlobStore, spill_directory
from lakecluster.curves import argsort_keys, key_array
from lakecluster.file_plan import file_plan
from lakecluster.parquet_files import FileWriter, WrittenFile, data_file_path
from lakecluster.storage import filesystem
from lakecluster.table.file_rows import live_batches
from lakecluster.table.live_files import DataFile

SLICE_BYTES = 64 << 20  # input bytes a task reads (its files' sizes on storage)
BATCH_ROWS = 256 * 1024  # rows a mapper keys and splits at a time, at most
MAPPER_SHARE = 8  # a mapper's batch is at most this share of compaction.task_memory_bytes (decoded)
REDUCER_BYTES = 128 << 20  # input bytes one reducer writes the files of (and at least one reducer per core)
SIZE_SAMPLE_ROWS = 8192  # whole rows of each slice decoded to estimate a row's decoded bytes
MAX_SPLITS = 6  # times a run found over its budget is cut again (past that: sorted as it is)
_KEY = "_lc_key"
# Rows cross the shuffle as an Arrow IPC stream compressed whole with zstd: about a third of their
# decoded size (SSB's rows), so Spark pickles, compresses, writes and reads a third of the bytes
# (docs/benchmarks.md, "Production size"). One frame per blob, not IPC's own compression of each
# buffer: a batch's part of one run is a few hundred rows at production size, and zstd per column
# buffer took three times as long for the same bytes.
_CODEC = "zstd"
_LENGTH = 8  # bytes of the uncompressed stream's length, before the frame
_Record = tuple[int, tuple[int, int, int, int, bytes]]  # (run, (slice, batch, rows, decoded bytes, blob))


def _cells(spec: RewriteSpec, table: pa.Table) -> tuple[np.ndarray, np.ndarray]:
    """(cell as fixed-width bytes, full sort key rows) of every row."""
    cell, key = spec.layout.keys(spec.key_input(table))
    return as_rows(cell), key


@dataclass(frozen=True)
class Counted:
    """What the count pass found in one slice: its distinct cells and their rows, every
    ``stride``-th row's full sort key, and the decoded bytes of a sample of whole rows."""

    cells: np.ndarray
    counts: np.ndarray
    samples: np.ndarray
    sample_bytes: int
    sample_rows: int


def _count_task(spec: RewriteSpec, files: Sequence[DataFile], stride: int = 1,
                max_samples: int = MAX_SAMPLES) -> Counted:  # fmt: skip
    """The cells and the keys of every ``stride``-th of these files' live rows (read column-pruned;
    at most ``max_samples`` keys: more rows than the files' stats say take a longer stride), and
    the decoded size of a few thousand whole rows."""
    use_returning_pool()
    fs, root = filesystem(spec.table_uri, spec.storage)
    target = spec.key_schema
    table = pa.Table.from_batches(list(live_batches(fs, root, files, spec.schema, columns=target.names)),
                                  schema=target)  # fmt: skip
    if table.num_rows == 0:
        return Counted(np.zeros(0, dtype="S1"), np.zeros(0, dtype=np.int64), np.zeros(0, dtype="S1"), 0, 0)
    cells, key = _cells(spec, table)
    distinct, counts = np.unique(cells, return_counts=True)
    whole = next(live_batches(fs, root, files, spec.schema, batch_rows=SIZE_SAMPLE_ROWS,
                              row_tracking=spec.row_tracking), None)  # fmt: skip
    stride = max(stride, -(-len(key) // max(1, max_samples)))
    return Counted(distinct, counts.astype(np.int64), as_rows(key[::stride]),
                   whole.nbytes if whole is not None else 0, whole.num_rows if whole is not None else 0)


def _merge_counts(parts: Iterable[Counted]) -> tuple[np.ndarray, np.ndarray]:
    """The counts of all tasks, one per distinct cell, cells in curve (byte) order."""
    nonempty = [p for p in parts if len(p.cells)]
    if not nonempty:
        return np.zeros(0, dtype="S1"), np.zeros(0, dtype=np.int64)
    cells = np.concatenate([p.cells for p in nonempty])
    distinct, inverse = np.unique(cells, return_inverse=True)
    return distinct, np.bincount(inverse, weights=np.concatenate([p.counts for p in nonempty]),
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
            table, pending, count = pa.Table.from_batches(pending).combine_chunks(), [], 0
            yield table  # its batches no longer held while it is split
            del table
    if pending:
        yield pa.Table.from_batches(pending).combine_chunks()


def _split_task(spec: RewriteSpec, runs: RunPlan, batch_rows: int, slice_no: int,
                inputs: Sequence[DataFile]) -> Iterator[_Record]:  # fmt: skip
    """Each batch's live rows of each run, with their key: ``(run, (slice, batch, rows, decoded
    bytes, Arrow IPC))``."""
    use_returning_pool()
    fs, root = filesystem(spec.table_uri, spec.storage)
    scanned = live_batches(fs, root, inputs, spec.schema, batch_rows=batch_rows, row_tracking=spec.row_tracking)
    for batch_no, table in enumerate(_batches(scanned, batch_rows)):
        yield from _split_batch(spec, runs, slice_no, batch_no, table)
        del table  # not held while the next batch is read


def _split_batch(spec: RewriteSpec, runs: RunPlan, slice_no: int, batch_no: int, table: pa.Table) -> Iterator[_Record]:
    _, key = _cells(spec, table)
    for run, part in _parted(table.append_column(_KEY, key_array(key)), runs.run_of(as_rows(key))):
        yield run, (slice_no, batch_no, part.num_rows, part.nbytes, _ipc(part))


def _parted(table: pa.Table, part: np.ndarray) -> Iterator[tuple[int, pa.Table]]:
    """The rows of each part (in input order within it): one gather in part order, then a slice
    per part (no copy)."""
    order = np.argsort(part, kind="stable")
    bounds = np.flatnonzero(np.r_[True, np.diff(part[order]) != 0, True])
    table = table.take(pa.array(order))
    for start, end in itertools.pairwise(bounds):
        yield int(part[order[start]]), table.slice(start, end - start)


def _ipc(table: pa.Table) -> bytes:
    """``table`` as an Arrow IPC stream compressed as one zstd frame, after its length."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    stream = sink.getvalue()
    return stream.size.to_bytes(_LENGTH, "little") + pa.compress(stream, codec=_CODEC, asbytes=True)


def _decode(blob: bytes) -> pa.Table:
    size = int.from_bytes(blob[:_LENGTH], "little")
    stream = pa.decompress(memoryview(blob)[_LENGTH:], decompressed_size=size, codec=_CODEC)
    return pa.ipc.open_stream(stream).read_all()


def _key_rows(table: pa.Table) -> np.ndarray:
    """The sort key of every row of a decoded blob, as an ``(n, width)`` uint8 matrix."""
    key = table[_KEY].combine_chunks()
    width = key.type.byte_width
    return np.frombuffer(key.buffers()[1], dtype=np.uint8, count=len(key) * width,
                         offset=key.offset * width).reshape(len(key), width)  # fmt: skip


def _sorted_parts(store: BlobStore, run: int, budget: int, spill_dir: str,
                  depth: int = 0) -> Iterator[tuple[pa.Table, np.ndarray]]:  # fmt: skip
    """The run's rows in key order (equal keys in input order) as (table, row order) parts in
    sequence, each of about ``budget`` decoded bytes at most: a run over the budget is cut again by
    quantiles of its own keys into runs spilled to disk, which are sorted one by one."""
    entries = store.entries(run)
    total = sum(e.nbytes for e in entries)
    if total <= budget or len(entries) <= 1 or depth >= MAX_SPLITS:
        tables = [_decode(blob) for _, blob in store.blobs(run)]
        store.drop(run)
        table = pa.concat_tables(tables) if tables else None
        if table is not None and table.num_rows:
            yield table.drop_columns([_KEY]), argsort_keys(_key_rows(table))
        return
    sample, first, uniform = [], None, True
    for _, blob in store.blobs(run):
        keys = as_rows(_key_rows(_decode(blob)))
        if len(keys):
            first = keys[0] if first is None else first
            uniform = uniform and bool(np.all(keys == first))
            sample.append(keys[:: max(1, len(keys) // 1024)])
    if uniform:  # one key throughout: input order is key order, written a blob at a time
        for _, blob in store.blobs(run):
            table = _decode(blob)
            yield table.drop_columns([_KEY]), np.arange(table.num_rows)
        store.drop(run)
        return
    keys = np.sort(np.concatenate(sample))
    parts = max(2, -(-total * 2 // budget))
    cuts = np.unique(keys[(np.arange(1, parts) * len(keys)) // parts])
    with BlobStore(spill_dir, 0) as inner:
        for entry, blob in store.blobs(run):
            table = _decode(blob)
            rows = as_rows(_key_rows(table))
            # Keys below the first cut, equal to it, between it and the next, ...: a key that
            # holds most of the run (a cut falls on it) is a sub-run of its own, written as it is.
            below_or_at = np.searchsorted(cuts, rows, side="left") + np.searchsorted(cuts, rows, side="right")
            for sub, part in _parted(table, below_or_at):
                inner.add(sub, entry.order, part.num_rows, part.nbytes, _ipc(part))
        store.drop(run)
        for sub in inner.runs():
            yield from _sorted_parts(inner, sub, budget, spill_dir, depth + 1)
        store.spilled_bytes += inner.spilled_bytes


def _write_task(spec: RewriteSpec, runs: RunPlan, file_pieces: dict[int, tuple[int, ...]],
                partition: dict[str, str | None], token: str,
                records: Iterator[_Record]) -> Iterator[dict]:  # fmt: skip
    """Each output file of this reducer, written run by run in key order (in pieces when it is
    too big), then one record of the bytes it spilled."""
    use_returning_pool()
    spill_dir = spill_directory(spec.spill_dir)
    fs, root = filesystem(spec.table_uri, spec.storage)
    with BlobStore(spill_dir, spec.task_memory_bytes // 4) as store:
        for run, (slice_no, batch_no, rows, nbytes, blob) in records:
            store.add(run, (slice_no, batch_no), rows, nbytes, blob)
        # Runs in key order, so a file's runs follow one another.
        for fid, mine in itertools.groupby(store.runs(), key=lambda r: int(runs.file_of_run[r])):

            def piece_writer(piece: int, schema: pa.Schema, fid: int = fid) -> FileWriter:
                name = f"part-{spec.file_prefix}-{token}-c{fid:05d}-{piece:03d}.snappy.parquet"
                return FileWriter(fs, root, data_file_path(spec.partition_by, partition, name), schema,
                                  spec.logged_partition(partition), spec.stats_columns)  # fmt: skip

            yield from _write_file(spec, store, list(mine), file_pieces[fid], piece_writer, spill_dir)
        yield {"spilled_bytes": store.spilled_bytes}


def _write_file(spec: RewriteSpec, store: BlobStore, runs: Sequence[int], pieces: tuple[int, ...],
                piece_writer: Callable[[int, pa.Schema], FileWriter], spill_dir: str) -> Iterator[dict]:  # fmt: skip
    """One run of cells (``file_plan``) written in key order as files of ``pieces`` rows, its runs
    of keys (``runs``) sorted one at a time."""
    ends = np.cumsum(pieces).tolist()  # rows written when each piece ends
    piece, done, writer = 0, 0, None
    received = sum(e.rows for r in runs for e in store.entries(r))
    if received != ends[-1]:  # the count pass and this one read different rows: commit nothing
        raise RewriteCountsError(f"a run of cells holds {received:,} rows, {ends[-1]:,} were counted")
    for run in runs:
        for table, order in _sorted_parts(store, run, spec.task_memory_bytes // 2, spill_dir):
            start = 0
            while start < len(order):
                while writer is None and ends[piece] == done:  # a piece of no rows
                    piece += 1
                writer = writer or piece_writer(piece, table.schema)
                take = min(len(order) - start, ends[piece] - done)
                writer.write_rows(table, order[start : start + take])
                start, done = start + take, done + take
                if done == ends[piece]:
                    yield _described(writer.close())
                    writer, piece = None, piece + 1


class RewriteCountsError(RuntimeError):
    """The rows a reducer received are not the rows the count pass counted for them."""


def _described(f: WrittenFile) -> dict:
    return {"path": f.path, "size": f.size, "num_records": f.num_records,
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
    # Keys sampled in proportion to the rows (the files' stats), at most MAX_SAMPLES in all even
    # where files carry no row count.
    stride = max(1, -(-max(group.rows, 1) // MAX_SAMPLES))
    per_task = max(1, MAX_SAMPLES // len(slices))
    counted = inputs.map(lambda s: _count_task(spec, s[1], stride, per_task)).collect()
    cells, counts = _merge_counts(counted)
    if len(cells) == 0:
        return []
    file_of_cell, plan_pieces = file_plan(counts, spec.target_files)
    file_pieces = dict(enumerate(plan_pieces))
    files = len(plan_pieces)
    sampled = [c for c in counted if len(c.samples)]
    samples = np.concatenate([c.samples for c in sampled])
    per_row = sum(c.sample_bytes for c in counted) / max(1, sum(c.sample_rows for c in counted))
    runs = plan_runs(cells, counts, file_of_cell, samples, bytes_per_row=per_row, run_bytes=spec.task_memory_bytes // 4)
    # Contiguous files per reducer, about REDUCER_BYTES of input each, and at least one per core.
    reducers = max(1, min(files, max(2 * sc.defaultParallelism, -(-group.bytes // REDUCER_BYTES))))
    file_of_run = runs.file_of_run
    # A batch is keyed, gathered by run and encoded: about four copies of it at once.
    batch_rows = int(min(BATCH_ROWS, max(1024, spec.task_memory_bytes // MAPPER_SHARE / max(per_row, 1.0))))
    split = functools.partial(_split_task, spec, runs, batch_rows)
    write = functools.partial(_write_task, spec, runs, file_pieces, group.partition_values, uuid.uuid4().hex[:16])
    out = (
        inputs.flatMap(lambda s: split(s[0], s[1]))
        .partitionBy(reducers, lambda run: int(file_of_run[run]) * reducers // files)
        .mapPartitions(write)
        .collect()
    )
    metrics.COMPACTION_SPILLED_BYTES.inc(sum(r["spilled_bytes"] for r in out if "spilled_bytes" in r))
    written = sorted((r for r in out if "path" in r), key=lambda r: r["path"])
    return [WrittenFile(r["path"], int(r["size"]), json.loads(r["partition_values"]), int(r["num_records"]),
                        r["stats"]) for r in written]  # fmt: skip

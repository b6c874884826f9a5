"""The index's rows, from Delta add actions: a file row per data file (its path, partition and
counts, under its file number) and an entry per (column, file) with the column's stats.

Two sources feed the same encoder, so an incrementally kept index equals a rebuilt one:
``add_action_parts`` takes delta-rs's ``get_add_actions(flatten=True)`` (a rebuild, vectorised)
and ``from_log_actions`` takes the ``add`` actions of the JSON commits the sync reads (a handful of
files per commit). Both are normalised the conservative way before encoding:

* timestamp maxima that are whole milli-seconds are widened by 999 µs: Delta readers and writers
  keep stats at milli-second precision and Delta-Spark truncates the maximum;
* string maxima of ``STRING_PREFIX`` characters or more may be truncated prefixes (Delta-Spark
  and lakecluster keep 32 characters): they are widened to ``max + 0xFF``, above every string with that prefix;
* float columns' stats are exact doubles of the stored values (a ``float`` column's JSON text is
  rounded to float32 first);
* the log has no NaN counts: ``nan_count`` is null (unknown: NaN possible) unless the sync is told
  to count NaN in the files themselves (``index.nan_counts = "scan"``);
* partition columns get exact stats from the partition values (min = max = the value).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from lakecluster.index.encoding import PREFIX_END, encode_array, family
from lakecluster.index.file_ids import file_ids
from lakecluster.log_stats import partition_array
from lakecluster.parquet_files import HIVE_NULL
from lakecluster.schema import ColumnSpec, arrow_type
from lakecluster.stats_columns import STRING_PREFIX
from lakecluster.table.snapshot import parse_stats
from lakecluster.uris import data_file

# One schema for two kinds of rows, keyed by (column, fid): a file row (column "") per data file,
# with its path, partition and counts, or a tombstone of it (deleted); and an entry per indexed
# column and file, with the column's stats. Fields a kind does not use are null.
FILE_ROWS = ""
ROW_SCHEMA = pa.schema([
    ("column", pa.string()), ("fid", pa.int64()), ("deleted", pa.bool_()),
    ("file", pa.string()), ("partition", pa.string()), ("size_bytes", pa.int64()), ("value_count", pa.int64()),
    ("null_count", pa.int64()), ("nan_count", pa.int64()), ("min", pa.binary()), ("max", pa.binary()),
])  # fmt: skip
KEY = [("column", "ascending"), ("fid", "ascending")]
FILE_FIELDS = ("file", "partition", "size_bytes", "value_count")
ENTRY_FIELDS = ("null_count", "nan_count", "min", "max")
# What readers see: one row per (column, file), a file's facts beside the column's stats.
VIEW_SCHEMA = pa.schema([
    ("column", pa.string()), ("partition", pa.string()), ("file", pa.string()), ("deleted", pa.bool_()),
    ("value_count", pa.int64()), ("null_count", pa.int64()), ("nan_count", pa.int64()),
    ("min", pa.binary()), ("max", pa.binary()), ("size_bytes", pa.int64()),
])  # fmt: skip
VIEW_KEY = [("column", "ascending"), ("partition", "ascending"), ("file", "ascending")]


def empty_rows() -> pa.Table:
    return ROW_SCHEMA.empty_table()


def partition_keys(values: Mapping[str, pa.Array], partition_by: Sequence[str], n: int) -> pa.Array:
    """``col=value/col2=value`` per file, from typed partition values (both sources agree on them)."""
    if not partition_by:
        return pa.repeat(pa.scalar("", pa.string()), n)
    parts = [pc.binary_join_element_wise(f"{name}=", values[name].cast(pa.string()).fill_null(HIVE_NULL), "")
             for name in partition_by]  # fmt: skip
    return pc.binary_join_element_wise(*parts, "/")


def _normalise(col: ColumnSpec, lo: pa.Array, hi: pa.Array) -> tuple[pa.Array, pa.Array]:
    if col.type == "float":
        lo, hi = lo.cast(pa.float32()), hi.cast(pa.float32())
    if col.type == "timestamp" and len(hi):
        micros = hi.cast(pa.timestamp("us", tz="UTC")).cast(pa.int64())
        whole_ms = pc.equal(pc.multiply(pc.divide(micros, 1000), 1000), micros)
        hi = pc.if_else(whole_ms, pc.add(micros, 999), micros).cast(pa.timestamp("us", tz="UTC"))
    enc_lo, enc_hi = encode_array(col, lo), encode_array(col, hi)
    # A string of STRING_PREFIX characters has at least as many bytes: when no maximum has that
    # many bytes (the offsets tell, no text is read), none is widened.
    if family(col) == "string" and len(hi) and (pc.max(pc.binary_length(enc_hi)).as_py() or 0) >= STRING_PREFIX:
        maybe_cut = pc.greater_equal(pc.utf8_length(hi.cast(pa.string())), STRING_PREFIX)
        widened = pc.binary_join_element_wise(enc_hi, pa.scalar(PREFIX_END, pa.binary()), b"")
        enc_hi = pc.if_else(maybe_cut, widened, enc_hi)
    return enc_lo, enc_hi


def file_rows(files: pa.Table, fids: np.ndarray, *, deleted: bool = False) -> pa.Table:
    """A file row per file (``files``: file, partition, size_bytes, value_count), or its tombstone."""
    n = files.num_rows
    null_int, null_bin = pa.nulls(n, pa.int64()), pa.nulls(n, pa.binary())
    return pa.table({
        "column": pa.repeat(pa.scalar(FILE_ROWS, pa.string()), n), "fid": pa.array(fids, pa.int64()),
        "deleted": pa.repeat(pa.scalar(deleted), n), "file": files["file"], "partition": files["partition"],
        "size_bytes": files["size_bytes"], "value_count": files["value_count"],
        "null_count": null_int, "nan_count": null_int, "min": null_bin, "max": null_bin,
    }, schema=ROW_SCHEMA)  # fmt: skip


Stats = Mapping[str, tuple[pa.Array, pa.Array, pa.Array, pa.Array]]  # column -> null counts, NaN counts, min, max


def index_rows(columns: Sequence[ColumnSpec], files: pa.Table, stats: Stats, seed: int) -> pa.Table:
    """A file row per file and an entry per (column, file), sorted by the key: ``files`` has file,
    partition, size_bytes, value_count; ``stats[name]`` is (null counts, NaN counts, minima,
    maxima) aligned with ``files``; files are numbered under ``seed`` (``file_ids``)."""
    return pa.concat_tables(list(index_parts(columns, files, stats, seed)))


def index_parts(columns: Sequence[ColumnSpec], files: pa.Table, stats: Stats, seed: int, *,
                fids: np.ndarray | None = None) -> Iterator[pa.Table]:  # fmt: skip
    """:func:`index_rows` a column at a time, in the key's order (the file rows, then the columns
    by name), each part sorted by file number: a writer can take them one by one, never holding
    every row. ``fids``: the files' numbers under ``seed``, when already computed."""
    n = files.num_rows
    if fids is None:
        fids = file_ids(files["file"], seed)
    order = pa.array(np.argsort(fids, kind="stable"))
    fids = fids[order.to_numpy()]
    by_name = {c.name: c for c in columns}
    null_str, null_int = pa.nulls(n, pa.string()), pa.nulls(n, pa.int64())
    for name in sorted([FILE_ROWS, *by_name]):
        if name == FILE_ROWS:
            yield file_rows(files.take(order), fids)
            continue
        col = by_name[name]
        nulls, nans, lo, hi = (a.take(order) for a in stats[name])
        enc_lo, enc_hi = _normalise(col, lo, hi)
        yield pa.table({
            "column": pa.repeat(pa.scalar(name, pa.string()), n), "fid": pa.array(fids, pa.int64()),
            "deleted": pa.nulls(n, pa.bool_()), "file": null_str, "partition": null_str, "size_bytes": null_int,
            "value_count": null_int, "null_count": nulls.cast(pa.int64()), "nan_count": nans.cast(pa.int64()),
            "min": enc_lo, "max": enc_hi,
        }, schema=ROW_SCHEMA)  # fmt: skip


def tombstones(removed: Sequence[tuple[str, str]], seed: int) -> pa.Table:
    """Rows that delete each removed (file, partition key): a tombstone file row; the file's
    entries are then dead wherever they are."""
    n = len(removed)
    if not n:
        return empty_rows()
    files = pa.table({"file": pa.array([f for f, _ in removed], pa.string()),
                      "partition": pa.array([p for _, p in removed], pa.string()),
                      "size_bytes": pa.nulls(n, pa.int64()), "value_count": pa.nulls(n, pa.int64())})  # fmt: skip
    return file_rows(files, file_ids(files["file"], seed), deleted=True).sort_by(KEY)


def _partition_stats(col: ColumnSpec, values: pa.Array, counts: pa.Array) -> tuple[pa.Array, ...]:
    zero = pa.scalar(0, pa.int64())
    nulls = pc.if_else(pc.is_null(values), counts, zero)
    if family(col) == "float":
        nans = pc.if_else(pc.fill_null(pc.is_nan(values.cast(pa.float64())), False), counts, zero)
    else:
        nans = pa.nulls(len(values), pa.int64())
    return nulls, nans, values, values


def add_action_parts(actions: pa.Table, columns: Sequence[ColumnSpec], partition_by: Sequence[str], seed: int,
                     nan_counts: Mapping[str, Mapping[str, int]] | None = None, *,
                     fids: np.ndarray | None = None) -> Iterator[pa.Table]:  # fmt: skip
    """Index rows of every live file, from ``DeltaTable.get_add_actions(flatten=True)`` (or the
    same columns read by ``lakecluster.table.snapshot``), as :func:`index_parts`: a column at a
    time, in the key's order."""
    n = actions.num_rows

    def col_or_nulls(name: str, tp: pa.DataType) -> pa.Array | pa.ChunkedArray:
        # As read (in chunks): the parts take each array into file-number order, one copy.
        if name in actions.column_names:
            return actions[name].cast(tp)
        return pa.nulls(n, tp)

    parts = {p: col_or_nulls(f"partition.{p}", arrow_type(c)) for c in columns for p in partition_by if p == c.name}
    value_count = col_or_nulls("num_records", pa.int64())
    files = pa.table({"file": actions["path"], "partition": partition_keys(parts, partition_by, n),
                      "size_bytes": actions["size_bytes"].cast(pa.int64()),
                      "value_count": value_count})  # fmt: skip
    stats = {}
    # The paths as Python strings only for NaN counts scanned from the files (once, not per column).
    paths = files["file"].to_pylist() if nan_counts is not None else []
    unknown = pa.nulls(n, pa.int64())  # the NaN counts of every column that has none
    for col in columns:
        if col.name in partition_by:
            stats[col.name] = _partition_stats(col, parts[col.name], value_count)
            continue
        tp = arrow_type(col)
        nans = _nan_array(col, n, paths, nan_counts) if family(col) == "float" and nan_counts is not None else unknown
        stats[col.name] = (col_or_nulls(f"null_count.{col.name}", pa.int64()), nans,
                           col_or_nulls(f"min.{col.name}", tp), col_or_nulls(f"max.{col.name}", tp))  # fmt: skip
    return index_parts(columns, files, stats, seed, fids=fids)


def _nan_array(col: ColumnSpec, n: int, paths: list[str],
               nan_counts: Mapping[str, Mapping[str, int]] | None) -> pa.Array:  # fmt: skip
    """The NaN count of each of ``n`` files (``paths``: needed only with ``nan_counts``); null: unknown."""
    if family(col) != "float" or nan_counts is None:
        return pa.nulls(n, pa.int64())
    return pa.array([nan_counts.get(p, {}).get(col.name) for p in paths], pa.int64())


# ---------------------------------------------------------------------------------------------
# The incremental source: add actions as they appear in the JSON commits (``log_stats`` decodes
# their values, as it does for the compactor's live-file view).


def from_log_actions(adds: Sequence[Mapping[str, Any]], columns: Sequence[ColumnSpec], partition_by: Sequence[str],
                     seed: int, nan_counts: Mapping[str, Mapping[str, int]] | None = None, *,
                     physical: Mapping[str, str] | None = None) -> pa.Table:  # fmt: skip
    """Index rows of the files added by ``add`` actions read from the log; their stats texts are
    parsed together, as the snapshot reader parses a checkpoint's (``snapshot.parse_stats``).
    ``physical``: the columns' names in the log's stats and partition values (column mapping)."""
    n = len(adds)
    if n == 0:
        return empty_rows()
    logged = {c.name: (physical or {}).get(c.name, c.name) for c in columns}
    stats_columns = [c for c in columns if c.name not in partition_by]
    texts = pa.array([a.get("stats") for a in adds], pa.string())
    as_logged = parse_stats(texts, [replace(c, name=logged[c.name]) for c in stats_columns], True)
    parsed = {"num_records": as_logged["num_records"]}
    for c in stats_columns:
        for kind in ("null_count", "min", "max"):
            parsed[f"{kind}.{c.name}"] = as_logged[f"{kind}.{logged[c.name]}"]
    value_count = parsed["num_records"]
    parts = {c.name: partition_array(c, [(a.get("partitionValues") or {}).get(logged[c.name]) for a in adds])
             for c in columns if c.name in partition_by}  # fmt: skip
    paths = [a["path"] for a in adds]
    files = pa.table({"file": pa.array(paths, pa.string()),
                      "partition": partition_keys(parts, partition_by, n),
                      "size_bytes": pa.array([int(a.get("size") or 0) for a in adds], pa.int64()),
                      "value_count": value_count})  # fmt: skip
    stats = {}
    for col in columns:
        if col.name in partition_by:
            stats[col.name] = _partition_stats(col, parts[col.name], value_count)
            continue
        stats[col.name] = (parsed[f"null_count.{col.name}"], _nan_array(col, n, paths, nan_counts),
                           parsed[f"min.{col.name}"], parsed[f"max.{col.name}"])  # fmt: skip
    return index_rows(columns, files, stats, seed)


def scan_nan_counts(fs: pafs.FileSystem, root: str, paths: Sequence[str],
                    columns: Sequence[ColumnSpec]) -> dict[str, dict[str, int]]:  # fmt: skip
    """NaN count per file and float column, read from the files themselves (``nan_counts = "scan"``);
    ``root`` is the table's directory in ``fs``.

    Reads only the float columns of each file; one loop per file, vectorised inside.
    """
    floats = [c.name for c in columns if family(c) == "float"]
    if not floats or not paths:
        return {}
    out: dict[str, dict[str, int]] = {}
    for path in paths:
        pf = pq.ParquetFile(fs.open_input_file(data_file(root, path)))
        present = [c for c in floats if c in pf.schema_arrow.names]
        data = pf.read(columns=present)
        out[path] = {c: int(pc.sum(pc.fill_null(pc.is_nan(data[c]), False).cast(pa.int64())).as_py() or 0)
                     for c in present}  # fmt: skip
    return out

"""Writing Parquet data files into a Delta table directory, with the stats Delta wants per file
(reading rows back is ``table/file_rows.py``'s).

Runs inside Spark tasks (``mapInArrow``), so one pass over the data writes the files, computes
their stats, and (in the stream) feeds the boundary sketches. Files are grouped by partition
values, written Hive-style (``col=value/part-....parquet``) without the partition columns, as
Delta expects, with micro-second timestamps.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import math
import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from lakecluster.stats_columns import string_max, string_min

HIVE_NULL = "__HIVE_DEFAULT_PARTITION__"
ROW_GROUP_ROWS = 128 * 1024


@dataclass(frozen=True)
class WrittenFile:
    """A data file written into the table directory, ready to become a Delta add action."""

    path: str  # relative to the table root, '/'-separated
    size: int
    partition_values: dict[str, str | None]
    num_records: int
    stats: str  # Delta stats JSON


def partition_value_string(value: Any) -> str | None:
    """A partition value in the Delta log's string form (protocol: "Partition Value Serialization"),
    spelled as delta-spark's writer spells it, so files of one partition group together whoever
    wrote them: an empty string is null, decimals in plain notation, floats as Java spells them."""
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dt.datetime):
        return _iso_utc(value)
    if isinstance(value, dt.date):
        return f"{value.year:04d}-{value.month:02d}-{value.day:02d}"
    if isinstance(value, Decimal):
        return format(value, "f")
    if isinstance(value, float | np.floating):
        return _java_float(value)
    return str(value)


def _partition_value(scalar: pa.Scalar) -> Any:
    """A partition column's value; a float keeps its width, which its spelling depends on."""
    value = scalar.as_py()
    if value is not None and pa.types.is_float32(scalar.type):
        return np.float32(value)
    return value


def _java_float(value: float | np.floating) -> str:
    """A float as Java's ``Float.toString``/``Double.toString`` (Spark's cast to string) spells it:
    the shortest digits, ``1.5``, ``100.0``; ``1.0E20`` and ``1.0E-5`` outside [0.001, 10^7)."""
    x = float(value)
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    if x == 0:
        return "-0.0" if math.copysign(1.0, x) < 0 else "0.0"
    if 1e-3 <= abs(x) < 1e7:
        return np.format_float_positional(value, unique=True, trim="0")
    mantissa, exponent = np.format_float_scientific(value, unique=True, trim="0").split("e")
    return f"{mantissa}E{int(exponent)}"


def _iso_utc(ts: dt.datetime) -> str:
    """``YYYY-MM-DDTHH:MM:SS.ffffffZ`` with a four-digit year (``strftime`` drops the zeros of years < 1000)."""
    u = ts.astimezone(dt.UTC)
    return f"{u.year:04d}-{u.month:02d}-{u.day:02d}T{u.hour:02d}:{u.minute:02d}:{u.second:02d}.{u.microsecond:06d}Z"


_SAFE_SEGMENT = re.compile(r"^[A-Za-z0-9_.+-]{1,100}$")


def _path_segment(name: str, value: str | None) -> str:
    """Directory name of a partition: ``col=value`` when the value is URI-safe, else a digest.

    Delta add paths are URIs, and readers disagree on decoding them (delta-rs 1.6 takes them
    literally, Spark and DuckDB percent-decode), so paths only ever hold characters that need no
    encoding. Readers take partition values from the log, never from the directory name.
    """
    if value is None:
        return f"{name}={HIVE_NULL}"
    if _SAFE_SEGMENT.match(value):
        return f"{name}={value}"
    return f"{name}=_h{hashlib.sha1(value.encode()).hexdigest()[:16]}"


def split_by_partition(table: pa.Table, partition_by: Sequence[str]) -> list[tuple[dict[str, Any], pa.Table]]:
    """Groups of rows with equal partition values (vectorised: one sort, then slices)."""
    if not partition_by or table.num_rows == 0:
        return [({}, table)] if table.num_rows else []
    codes = np.zeros(table.num_rows, dtype=np.int64)
    for name in partition_by:
        encoded = pc.dictionary_encode(table[name]).combine_chunks()
        idx = encoded.indices.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64) + 1
        codes = codes * (len(encoded.dictionary) + 1) + idx
        # Renumbered densely after each column: the next product stays below rows x values, far
        # from int64's limit however many columns partition the table.
        codes = np.unique(codes, return_inverse=True)[1].astype(np.int64).ravel()
    order = np.argsort(codes, kind="stable")
    sorted_codes = codes[order]
    starts = np.flatnonzero(np.r_[True, sorted_codes[1:] != sorted_codes[:-1]])
    ends = np.r_[starts[1:], len(order)]
    table = table.take(pa.array(order))
    groups = []
    for s, e in zip(starts, ends, strict=True):
        part = table.slice(int(s), int(e - s))
        values = {name: _partition_value(part[name][0]) for name in partition_by}
        groups.append((values, part.drop_columns(list(partition_by))))
    return groups


def _json_literal(value: Any) -> str | None:
    """JSON text for a stats value; None when it cannot be represented (NaN, infinity)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else None
    if isinstance(value, Decimal):
        return str(value) if value.is_finite() else None
    if isinstance(value, int):
        return str(value)
    if isinstance(value, dt.datetime):
        return json.dumps(_iso_utc(value))
    if isinstance(value, dt.date):
        return json.dumps(f"{value.year:04d}-{value.month:02d}-{value.day:02d}")
    # Non-ASCII characters as UTF-8, as Delta-Spark (Jackson) writes them: DuckDB's and delta-rs's
    # Delta readers mis-read escaped surrogate pairs of the last planes (U+10FFFF, the tie-breaker
    # of a cut max, as \udbff\udfff) and then skip files that hold the value a query asks for.
    return json.dumps(value, ensure_ascii=False)


def _floor_ms(ts: dt.datetime) -> dt.datetime:
    return ts.replace(microsecond=ts.microsecond - ts.microsecond % 1000)


def _ceil_ms(ts: dt.datetime) -> dt.datetime | None:
    """Up to the next whole millisecond; None past the last one a timestamp has (9999-12-31T23:59:59.999)."""
    floored = _floor_ms(ts)
    if floored == ts:
        return floored
    try:
        return floored + dt.timedelta(milliseconds=1)
    except OverflowError:
        return None


class StatsAccumulator:
    """Delta per-file stats (numRecords, minValues, maxValues, nullCount) built batch by batch.

    A file written in pieces gets the same stats as one :meth:`update` with all its rows, without
    holding them in memory. Timestamps are widened to whole milliseconds (min down, max up)
    because Delta readers parse stats at millisecond precision; a narrower range would let them
    skip files wrongly. String bounds are cut as Delta-Spark cuts them (``stats_columns.string_max``).
    Spark orders NaN above every number, so a column holding NaN keeps its minimum (Arrow's, which
    skips NaN, is then the true one) and gets no maximum: ``x > 5`` reads the file, ``x < 1`` may
    skip it. A column with an infinite bound gets no min/max at all. Only ``columns`` get stats
    (all when None; see :func:`lakecluster.stats_columns.stats_columns`).
    """

    def __init__(self, schema: pa.Schema, columns: Collection[str] | None = None) -> None:
        self.schema = schema
        # A struct's stats are nested objects of its fields' in Delta's: none are written for it.
        self.names = [f.name for f in schema
                      if (columns is None or f.name in columns) and not pa.types.is_struct(f.type)]
        self.rows = 0
        self.nulls = dict.fromkeys(self.names, 0)
        self.mins: dict[str, Any] = {}
        self.maxs: dict[str, Any] = {}
        self.unrepresentable: set[str] = set()
        self.with_nan: set[str] = set()

    def update(self, table: pa.Table | pa.RecordBatch) -> None:
        self.rows += table.num_rows
        for name in self.names:
            column = table.column(name)
            self.nulls[name] += column.null_count
            if (name in self.unrepresentable or column.null_count == len(column)
                    or pa.types.is_nested(column.type) or pa.types.is_binary(column.type)):  # fmt: skip
                continue
            if pa.types.is_floating(column.type) and pc.any(pc.is_nan(column)).as_py():
                self.with_nan.add(name)
            mm = pc.min_max(column)
            lo, hi = mm["min"].as_py(), mm["max"].as_py()
            if _json_literal(lo) is None or _json_literal(hi) is None:
                self.unrepresentable.add(name)
                continue
            self.mins[name] = lo if name not in self.mins else min(self.mins[name], lo)
            self.maxs[name] = hi if name not in self.maxs else max(self.maxs[name], hi)

    def json(self) -> str:
        mins: list[str] = []
        maxs: list[str] = []
        nulls = [f"{json.dumps(n, ensure_ascii=False)}:{self.nulls[n]}" for n in self.names]
        for name in self.names:
            if name in self.unrepresentable or name not in self.mins:
                continue
            lo, hi = self.mins[name], self.maxs[name]
            if isinstance(lo, dt.datetime) and isinstance(hi, dt.datetime):
                lo, hi = _floor_ms(lo), _ceil_ms(hi)
                if hi is None:  # no upper bound can be written: no bounds at all
                    continue
            elif isinstance(lo, str) and isinstance(hi, str):
                lo, hi = string_min(lo), string_max(hi)
            key = json.dumps(name, ensure_ascii=False)
            mins.append(f"{key}:{_json_literal(lo)}")
            if name not in self.with_nan and hi is not None:  # None: a string max too long to cut
                maxs.append(f"{key}:{_json_literal(hi)}")
        return (
            f'{{"numRecords":{self.rows},"minValues":{{{",".join(mins)}}},'
            f'"maxValues":{{{",".join(maxs)}}},"nullCount":{{{",".join(nulls)}}}}}'
        )


def footer_statistics(schema: pa.Schema) -> bool | list[str]:
    """The columns whose min/max go into the Parquet footer: all but floating-point ones.

    pyarrow leaves NaN out of a column chunk's min and max, and Spark, which orders NaN above
    every number, then skips row groups that hold the NaN a query asks for (``x > 5``).
    """
    floats = {f.name for f in schema if pa.types.is_floating(f.type)}
    if not floats:
        return True
    return [f.name for f in schema if f.name not in floats and not pa.types.is_nested(f.type)]


class FileWriter:
    """One Parquet data file written batch by batch, with its Delta stats; bounded memory."""

    def __init__(self, fs: pafs.FileSystem, root: str, rel: str, schema: pa.Schema,
                 partition_values: dict[str, str | None],
                 stats_columns: Collection[str] | None = None) -> None:  # fmt: skip
        self.fs = fs
        self.full = f"{root}/{rel}"
        self.rel = rel
        self.partition_values = partition_values
        directory = self.full.rsplit("/", 1)[0]
        fs.create_dir(directory, recursive=True)
        self.stats = StatsAccumulator(schema, stats_columns)
        self._writer = pq.ParquetWriter(self.full, schema, filesystem=fs, compression="snappy",
                                        coerce_timestamps="us", write_statistics=footer_statistics(schema))  # fmt: skip

    def write(self, table: pa.Table) -> None:
        if table.num_rows:
            self._writer.write_table(table, row_group_size=ROW_GROUP_ROWS)
            self.stats.update(table)

    def write_rows(self, table: pa.Table, indices: np.ndarray) -> None:
        """The rows of ``table`` at ``indices``, in that order, taken a row group at a time: a
        sorted copy of a whole file's rows (a GiB for a 128 MiB file) is never held, and taking
        from a table of several chunks does not concatenate them first. Each take passes over
        every chunk: for tables of a few chunks, not one per small input file."""
        for start in range(0, len(indices), ROW_GROUP_ROWS):
            self.write(table.take(pa.array(indices[start : start + ROW_GROUP_ROWS])))

    def close(self) -> WrittenFile:
        self._writer.close()
        size = self.fs.get_file_info(self.full).size
        return WrittenFile(self.rel, int(size or 0), self.partition_values, self.stats.rows, self.stats.json())


def data_file_path(partition_by: Sequence[str], values: dict[str, str | None], name: str) -> str:
    """``col=value/.../name`` relative to the table root (see ``_path_segment``)."""
    directory = "/".join(_path_segment(k, values[k]) for k in partition_by)
    return f"{directory}/{name}" if directory else name

"""JSON record values -> typed Arrow columns, with a coded reason for every record that does not fit.

Two paths, one set of rules (``docs/records.md``):

* the fast path works on a whole block of values. Vectorised checks first set aside what must not
  reach a native parser (null, over the size limit, not valid UTF-8, a byte order mark, NUL bytes,
  line breaks, and records with more brackets than the depth limit, whose exact depth is then
  measured). The rest goes to Arrow's C++ JSON reader with the declared schema (``pyarrow.json``),
  which is already strict about JSON kinds (an integer column rejects ``"12"`` and ``1.5``, a
  string column rejects ``12``). A block that Arrow rejects loses its valid-but-unreadable records
  at once (a regex), then is bisected, so a bad record costs O(log n) re-reads of shrinking blocks,
  not a row-by-row pass; blocks of 16 records or fewer go to the exact path whole. Rules Arrow does
  not check (required fields, a JSON null, decimal precision, calendar dates, the timestamp range,
  float overflow, string length) are checked on the columns it read;
* the exact path, :func:`parse_one`, decides single records the fast path set aside: the
  malformed ones (to give the code and reason) and the rare valid forms Arrow does not read
  (``"NaN"`` for a double, a value spanning several lines, nanosecond timestamps).

The fast path never accepts a record the exact path would reject, and gives the same values;
``tests/stream/test_parse.py`` and ``test_parse_fuzz.py`` check the two paths agree.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import decimal
import functools
import json
import math
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pa_json

from lakecluster.schema import ColumnSpec, arrow_schema, arrow_type

MAX_RECORD_BYTES_DEFAULT = 1 << 20
MAX_DEPTH_DEFAULT = 64
MAX_STRING_CHARS_DEFAULT = 32_768
# Python's json module recurses once per nesting level and shares the interpreter's recursion
# limit (1000) with the caller's frames; 512 leaves room for a deep Spark worker stack.
MAX_DEPTH_CEILING = 512
# Every block handed to Arrow must stay far below 2 GiB (32-bit offsets) once wrapped.
MAX_RECORD_BYTES_CEILING = 1 << 30


class ReasonCode(StrEnum):
    """Why a record was quarantined: a stable, bounded label (``docs/records.md`` lists them)."""

    NULL_VALUE = "null_value"
    TOO_LARGE = "too_large"
    BAD_ENCODING = "bad_encoding"
    INVALID_UTF8 = "invalid_utf8"
    TOO_DEEP = "too_deep"
    NOT_JSON = "not_json"
    NOT_OBJECT = "not_object"
    MISSING_REQUIRED = "missing_required"
    TYPE_MISMATCH = "type_mismatch"
    OUT_OF_RANGE = "out_of_range"
    INVALID_DATE = "invalid_date"
    INVALID_TIMESTAMP = "invalid_timestamp"
    STRING_TOO_LONG = "string_too_long"
    PARSER_ERROR = "parser_error"
    NOT_AVRO = "not_avro"
    UNKNOWN_SCHEMA_ID = "unknown_schema_id"
    AVRO_DECODE = "avro_decode"


REASON_CODES: tuple[str, ...] = tuple(code.value for code in ReasonCode)


@dataclass(frozen=True)
class ParseLimits:
    """Bounds on one record; a record over any of them is quarantined with its own code."""

    max_record_bytes: int = MAX_RECORD_BYTES_DEFAULT
    max_depth: int = MAX_DEPTH_DEFAULT
    max_string_chars: int = MAX_STRING_CHARS_DEFAULT

    def __post_init__(self) -> None:
        bounds = {
            "max_record_bytes": MAX_RECORD_BYTES_CEILING,
            "max_depth": MAX_DEPTH_CEILING,
            "max_string_chars": MAX_RECORD_BYTES_CEILING,
        }
        for name, ceiling in bounds.items():
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= ceiling:
                raise ValueError(f"{name} must be an integer in 1..{ceiling}, got {value!r}")


DEFAULT_LIMITS = ParseLimits()


@dataclass(frozen=True)
class Parsed:
    """``table`` has one row per input value; rows whose ``codes`` is not null are all null."""

    table: pa.Table
    codes: pa.StringArray
    reasons: pa.StringArray
    # Top-level fields of valid records that are no column, with their JSON kind (``field_kind``),
    # counted in the records that carry a non-null value (RecordParser's ``count_unseen``).
    unseen: dict[tuple[str, str], int] = dataclasses.field(default_factory=dict)

    @property
    def valid(self) -> pa.BooleanArray:
        return pc.is_null(self.codes)


class Outcome(NamedTuple):
    """One record's fate: a typed row, or a code and a reason."""

    row: dict[str, Any] | None
    code: ReasonCode | None
    reason: str | None


_INT_RANGE = {"int": (-(2**31), 2**31 - 1), "long": (-(2**63), 2**63 - 1)}
_FLOAT_WORDS = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}
_FLOAT32_MAX = float(np.finfo(np.float32).max)
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
# Python's datetime (and so every reader of the table in Python) holds years 1..9999 only.
_MIN_TS_US = (dt.datetime(1, 1, 1, tzinfo=dt.UTC) - _EPOCH) // dt.timedelta(microseconds=1)
_MAX_TS_US = (dt.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=dt.UTC) - _EPOCH) // dt.timedelta(microseconds=1)
_BLOCK_BYTES = 32 << 20
# A failed block this small goes to the exact path whole: an Arrow read with its checks costs about
# 1 ms whatever the block's size, the exact path about 0.1 ms a record.
_EXACT_BELOW = 16
_OPEN = pa.scalar(b'{"v":')
_CLOSE = pa.scalar(b"}\n")
_BOMS = (  # longest first: the UTF-32-LE mark starts with the UTF-16-LE one
    (b"\xff\xfe\x00\x00", "UTF-32"),
    (b"\x00\x00\xfe\xff", "UTF-32"),
    (b"\xef\xbb\xbf", "UTF-8"),
    (b"\xff\xfe", "UTF-16"),
    (b"\xfe\xff", "UTF-16"),
)
_BOM_MARKS = tuple(mark for mark, _ in _BOMS)


class RecordParser:
    """Parses blocks of Kafka record values into the declared columns (fast path + exact path)."""

    def __init__(
        self, columns: Sequence[ColumnSpec], limits: ParseLimits = DEFAULT_LIMITS, *, count_unseen: bool = False
    ) -> None:
        self.columns = tuple(columns)
        self.limits = limits
        self.count_unseen = count_unseen
        self.schema = arrow_schema(self.columns)
        # Arrow's JSON reader has no date conversion: dates are read as strings, then cast.
        self._read_schema = pa.schema(
            [pa.field(c.name, pa.string() if c.type == "date" else arrow_type(c)) for c in self.columns]
        )
        explicit = pa.schema([pa.field("v", pa.struct(list(self._read_schema)))])
        self._parse_options = pa_json.ParseOptions(explicit_schema=explicit, unexpected_field_behavior="ignore")
        # Counting fields that are no column: Arrow infers their types in the same read (nothing
        # more to do for records without such fields). A block whose unknown fields change kind
        # between records fails that read and is read again ignoring them (not counted).
        self._infer_options = pa_json.ParseOptions(explicit_schema=explicit, unexpected_field_behavior="infer")
        self._known = {c.name for c in self.columns}
        self._required = [c.name for c in self.columns if c.required]
        self._strings = [c.name for c in self.columns if c.type == "string"]
        self._dates = [c.name for c in self.columns if c.type == "date"]
        self._timestamps = [c.name for c in self.columns if c.type == "timestamp"]
        self._floats = [c.name for c in self.columns if c.is_floating]
        # decimal(38, s) is bounded by Arrow's type itself; narrower ones need a check
        self._decimals = [(c.name, *c.decimal) for c in self.columns if c.decimal and c.decimal[0] < 38]

    def parse(self, values: pa.Array) -> Parsed:
        """Parse Kafka record values (binary, may hold nulls) into the declared columns."""
        values = _as_binary(values)
        n = len(values)
        codes: dict[int, str] = {}
        reasons: dict[int, str] = {}
        fast, slow, sizes = self._route(values, codes, reasons)
        pieces: list[tuple[np.ndarray, pa.Table]] = []
        unseen: Counter[tuple[str, str]] = Counter()
        self._read_blocks(values, fast, sizes, pieces, slow, unseen)
        slow_rows: list[dict[str, Any]] = []
        slow_ok: list[int] = []
        for i in sorted(slow):
            outcome = self._parse_exact(values[i].as_py())
            if outcome.row is not None:
                slow_rows.append(outcome.row)
                slow_ok.append(i)
            else:
                codes[i], reasons[i] = outcome.code, outcome.reason  # type: ignore[assignment]
        if slow_ok:
            pieces.append(self._rows_to_table(slow_ok, slow_rows, codes, reasons))
        return Parsed(self._assemble(pieces, n), _sparse_strings(codes, n), _sparse_strings(reasons, n), dict(unseen))

    def _route(self, values: pa.BinaryArray, codes: dict[int, str],
               reasons: dict[int, str]) -> tuple[np.ndarray, list[int], np.ndarray]:  # fmt: skip
        """Decide null, too large and too deep records; split the rest between Arrow (indices)
        and the exact path (list), with vectorised checks over the block's bytes."""
        limits = self.limits
        offsets, data = _offsets_and_data(values)
        sizes = np.diff(offsets)
        present = values.is_valid().to_numpy(zero_copy_only=False)
        too_large = present & (sizes > limits.max_record_bytes)
        # Values no native parser may see, for the exact path: not UTF-8, a byte order mark, or
        # a NUL byte (UTF-16/32 text, which Python's json.loads would otherwise decode), or a line
        # break (Arrow reads one record per line; a raw break inside a JSON string is invalid and
        # must not be papered over).
        exact = np.zeros(len(values), dtype=bool)
        exact[_invalid_utf8_rows(values)] = True
        exact |= pc.starts_with(values, "\ufeff").fill_null(False).to_numpy(zero_copy_only=False)
        control = np.flatnonzero(data < 0x0E)
        control = control[np.isin(data[control], (0x00, 0x0A, 0x0D))]
        exact[_record_of(offsets, control)] = True
        exact &= present & ~too_large
        for i in np.flatnonzero(~present).tolist():
            codes[i], reasons[i] = ReasonCode.NULL_VALUE, _NULL_REASON
        for i in np.flatnonzero(too_large).tolist():
            codes[i], reasons[i] = ReasonCode.TOO_LARGE, _too_large_reason(int(sizes[i]), limits)
        fast = present & ~too_large & ~exact
        # More opening brackets than the depth limit (inside strings too: a cheap upper bound on
        # the depth) -> measure the real depth before any parser recurses into the value.
        brackets = np.bincount(_record_of(offsets, np.flatnonzero((data | 0x20) == 0x7B)), minlength=len(values))
        for i in np.flatnonzero(fast & (brackets > limits.max_depth)).tolist():
            depth = _depth(values[i].as_py())
            if depth > limits.max_depth:
                fast[i] = False
                codes[i], reasons[i] = ReasonCode.TOO_DEEP, _too_deep_reason(depth, limits)
        return np.flatnonzero(fast), np.flatnonzero(exact).tolist(), sizes

    def _parse_exact(self, value: bytes | None) -> Outcome:
        try:
            return parse_one(value, self.columns, self.limits)
        except Exception as exc:  # a parser bug must cost one record, not stop the stream for good
            return Outcome(None, ReasonCode.PARSER_ERROR, f"parser error: {type(exc).__name__}")

    def _rows_to_table(self, idx: list[int], rows: list[dict[str, Any]], codes: dict[int, str],
                       reasons: dict[int, str]) -> tuple[np.ndarray, pa.Table]:  # fmt: skip
        try:
            return np.asarray(idx), pa.Table.from_pylist(rows, schema=self.schema)
        except (pa.ArrowException, ValueError, TypeError, OverflowError):
            pass
        # Some row does not convert (a parser bug): find it rather than lose the whole batch.
        keep_idx, tables = [], []
        for i, row in zip(idx, rows, strict=True):
            try:
                tables.append(pa.Table.from_pylist([row], schema=self.schema))
                keep_idx.append(i)
            except (pa.ArrowException, ValueError, TypeError, OverflowError) as exc:
                codes[i], reasons[i] = ReasonCode.PARSER_ERROR, f"parser error: {type(exc).__name__}"
        table = pa.concat_tables(tables) if tables else self.schema.empty_table()
        return np.asarray(keep_idx, dtype=np.int64), table

    def _read_blocks(self, values: pa.Array, idx: np.ndarray, sizes: np.ndarray, out: list, slow: list[int],
                     unseen: Counter[tuple[str, str]]) -> None:  # fmt: skip
        """Read ``values[idx]`` with Arrow; bisect blocks it rejects, leaving small ones to the exact path."""
        stack = [(block, True) for block in _split_by_bytes(idx, sizes, _BLOCK_BYTES)[::-1]]
        while stack:
            block, fresh = stack.pop()
            read = self._try_read(values.take(pa.array(block)), unseen)
            if read is not None:
                keep, table = self._check_and_convert(*read, int(sizes[block].max()))
                if keep is not None:
                    slow.extend(block[~keep].tolist())
                    block = block[keep]
                out.append((block, table))
                continue
            if len(block) <= _EXACT_BELOW:
                slow.extend(block.tolist())
                continue
            if fresh:
                # Valid forms Arrow cannot read may be common (a producer writing "NaN" for every
                # missing price): set them all aside at once rather than bisecting to each.
                known = self._unreadable_forms(values.take(pa.array(block)))
                if known.any():
                    slow.extend(block[known].tolist())
                    stack.append((block[~known], False))
                    continue
            half = len(block) // 2
            stack.extend(((block[half:], False), (block[:half], False)))

    def _unreadable_forms(self, values: pa.Array) -> np.ndarray:
        """Values holding a valid form Arrow's reader rejects: a float word as a string, or a
        timestamp with more than 6 fraction digits (anywhere in the value: a false match only
        costs the exact path)."""
        patterns = []
        if self._floats:
            patterns.append(r'"(?:NaN|-?Infinity)"')
        if self._timestamps:
            patterns.append(r"[0-9]:[0-9]{2}[.,][0-9]{7}")
        if not patterns:
            return np.zeros(len(values), dtype=bool)
        found = pc.match_substring_regex(values, "|".join(patterns))
        return found.fill_null(False).to_numpy(zero_copy_only=False)

    def _try_read(self, values: pa.Array, unseen: Counter[tuple[str, str]]) -> tuple[pa.Table, np.ndarray] | None:
        """The block's rows, and which values were a JSON null; None when Arrow rejects the block.
        With ``count_unseen``, the non-null values of fields that are no column are added to
        ``unseen`` by field and kind (records later found invalid included: a bound, not a count)."""
        # Each value becomes the line {"v":<value>}: the concatenated data buffer is
        # newline-delimited JSON in which a line yields one row or the read fails. An empty value,
        # a non-object, or two objects in one value cannot shift rows against records.
        lines = pc.binary_join_element_wise(_OPEN, values, _CLOSE, pa.scalar(b""))
        offsets, _ = _offsets_and_data(lines)
        data = lines.buffers()[2][offsets[0] : offsets[-1]]
        table = _read_json(data, self._infer_options) if self.count_unseen else None
        if table is None:
            table = _read_json(data, self._parse_options)
        if table is None or table.num_rows != len(values):
            return None
        struct = table["v"].combine_chunks()
        read = pa.Table.from_struct_array(struct)
        if read.num_columns > len(self._read_schema):
            for name in read.column_names:
                if name not in self._known:
                    present = len(read) - read[name].null_count
                    if present:
                        unseen[(name, field_kind(read.schema.field(name).type))] += present
            read = read.select(self._read_schema.names)
        return read, struct.is_null().to_numpy(zero_copy_only=False)

    def _check_and_convert(self, table: pa.Table, null: np.ndarray, longest: int) -> tuple[np.ndarray | None, pa.Table]:
        """Rows Arrow read that break a rule it does not check (None when all pass), and the
        passing rows in the target schema."""
        bad = null.copy()  # Arrow reads the value null as a row of nulls; it is no object
        for name in (*self._strings, *self._dates):
            # Arrow rejects lone surrogate escapes and its input is valid UTF-8; checked anyway
            # (it is cheap) because no invalid string may ever reach the table.
            bad[_invalid_utf8_rows(table[name].combine_chunks())] = True
        if longest > self.limits.max_string_chars:  # a value no longer in bytes holds no longer string
            for name in self._strings:
                too_long = pc.greater(pc.utf8_length(table[name]), self.limits.max_string_chars)
                bad |= too_long.fill_null(False).to_numpy(zero_copy_only=False)
        for name in self._required:
            bad |= table[name].is_null().to_numpy(zero_copy_only=False)
        for name, precision, scale in self._decimals:
            # Arrow does not check the precision: 100000000 lands in a decimal(10,2) column.
            wide = pa.decimal128(38, scale)
            limit = pa.scalar(decimal.Decimal(10) ** (precision - scale), wide)
            too_big = pc.greater_equal(pc.abs(table[name].cast(wide)), limit).fill_null(False)
            bad |= too_big.to_numpy(zero_copy_only=False)
        for name in self._dates:
            text = table[name].combine_chunks()

            def dates_cast(a: int, b: int, t: pa.Array = text) -> bool:
                return _casts_to_date(t.slice(a, b - a))

            bad[_bisect_failures(len(text), dates_cast)] = True
            # The cast reads year 0000, which no Python date (nor the exact path) holds.
            bad |= pc.starts_with(text, "0000").fill_null(False).to_numpy(zero_copy_only=False)
        for name in self._timestamps:
            micros = table[name].cast(pa.int64())
            outside = pc.or_(pc.less(micros, _MIN_TS_US), pc.greater(micros, _MAX_TS_US)).fill_null(False)
            bad |= outside.to_numpy(zero_copy_only=False)
        for name in self._floats:
            # Infinity is a valid input, but Arrow also reads 1e300 into a float, and an integer
            # literal of 400 digits into a double, as inf: the exact path tells them apart.
            bad |= pc.is_inf(table[name]).fill_null(False).to_numpy(zero_copy_only=False)
        keep = None
        if bad.any():
            keep = ~bad
            table = table.filter(pa.array(keep))
        return keep, self._to_target(table)

    def _assemble(self, pieces: list[tuple[np.ndarray, pa.Table]], n: int) -> pa.Table:
        """One row per input value, in input order; rows of rejected records are all null."""
        rows = [p[0] for p in pieces]
        tables = [t for _, t in pieces]
        covered = np.concatenate(rows) if rows else np.empty(0, dtype=np.int64)
        missing = np.setdiff1d(np.arange(n), covered, assume_unique=True)
        if len(missing):
            rows.append(missing)
            tables.append(pa.table({f.name: pa.nulls(len(missing), f.type) for f in self.schema}, schema=self.schema))
        if not tables:
            return self.schema.empty_table()
        order = np.concatenate(rows)
        inverse = np.empty(n, dtype=np.int64)
        inverse[order] = np.arange(n)
        return pa.concat_tables(tables).take(pa.array(inverse))

    def _to_target(self, table: pa.Table) -> pa.Table:
        arrays = []
        for field in self.schema:
            column = table[field.name]
            if column.type != field.type:
                column = column.cast(pa.date32())
            arrays.append(column)
        return pa.Table.from_arrays(arrays, schema=self.schema)


def _read_json(data: pa.Buffer, options: pa_json.ParseOptions) -> pa.Table | None:
    """Newline-delimited JSON ``data`` read in one block; None when Arrow rejects it."""
    read_options = pa_json.ReadOptions(use_threads=False, block_size=max(1 << 20, data.size + 1))
    try:
        return pa_json.read_json(pa.BufferReader(data), read_options=read_options, parse_options=options)
    except pa.ArrowException:
        return None


def field_kind(arrow: pa.DataType) -> str:
    """The column type a JSON field of values Arrow inferred as ``arrow`` becomes (docs/records.md,
    "Schema evolution"): ``long``, ``double``, ``boolean`` or ``string``; ``object`` or ``array``
    for nested values, which no column takes."""
    if pa.types.is_integer(arrow):
        return "long"
    if pa.types.is_floating(arrow):
        return "double"
    if pa.types.is_boolean(arrow):
        return "boolean"
    if pa.types.is_struct(arrow):
        return "object"
    if pa.types.is_list(arrow) or pa.types.is_large_list(arrow):
        return "array"
    return "string"  # strings, and strings Arrow took for timestamps


def _as_binary(values: pa.Array | pa.ChunkedArray) -> pa.BinaryArray:
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    return values if pa.types.is_binary(values.type) else values.cast(pa.binary())


def _offsets_and_data(values: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """Offsets of a binary/string array, rebased to 0, and the bytes they index."""
    raw = np.frombuffer(values.buffers()[1], dtype=np.int32)[values.offset : values.offset + len(values) + 1]
    buffer = values.buffers()[2]
    data = np.frombuffer(buffer, dtype=np.uint8) if buffer is not None else np.empty(0, dtype=np.uint8)
    return raw - raw[0], data[raw[0] : raw[-1]]


def _record_of(offsets: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """Index of the record holding each byte position."""
    return np.searchsorted(offsets[1:], positions, side="right")


def _bisect_failures(n: int, passes: Callable[[int, int], bool]) -> list[int]:
    """Rows ``i`` of ``[0, n)`` where ``passes(i, i + 1)`` is false, given that ``passes(a, b)``
    holds when every row of ``[a, b)`` passes: ranges that fail are halved until single rows."""
    failed = []
    stack = [(0, n)] if n else []
    while stack:
        a, b = stack.pop()
        if passes(a, b):
            continue
        if b - a == 1:
            failed.append(a)
        else:
            mid = (a + b) // 2
            stack.extend(((mid, b), (a, mid)))
    return failed


def _invalid_utf8_rows(values: pa.Array) -> list[int]:
    """Non-null values of a binary or string array that are not valid UTF-8."""
    view = pa.Array.from_buffers(pa.string(), len(values), values.buffers()[:3], offset=values.offset)

    def passes(a: int, b: int) -> bool:
        try:
            view.slice(a, b - a).validate(full=True)
        except pa.ArrowInvalid:
            return False
        return True

    return _bisect_failures(len(values), passes)


def _casts_to_date(text: pa.Array) -> bool:
    # Arrow's string -> date32 cast reads exactly YYYY-MM-DD and rejects impossible days
    # (2023-02-30); pc.strptime would roll them over to the next month.
    try:
        text.cast(pa.date32())
    except pa.ArrowInvalid:
        return False
    return True


def _split_by_bytes(idx: np.ndarray, sizes: np.ndarray, limit: int) -> list[np.ndarray]:
    if not len(idx):
        return []
    group = np.cumsum(sizes[idx].astype(np.int64) + 8) // limit
    return np.split(idx, np.flatnonzero(np.diff(group)) + 1)


def _sparse_strings(by_row: dict[int, str], n: int) -> pa.StringArray:
    column = np.full(n, None, dtype=object)
    if by_row:
        column[list(by_row)] = [str(v) for v in by_row.values()]
    return pa.array(column, pa.string())


_NULL_REASON = "record has no value (null)"


def _too_large_reason(size: int, limits: ParseLimits) -> str:
    return f"record is {size} bytes, over the limit of {limits.max_record_bytes}"


def _too_deep_reason(depth: int, limits: ParseLimits) -> str:
    return f"nested {depth} levels deep, over the limit of {limits.max_depth}"


def _depth(value: bytes) -> int:
    """Deepest nesting of arrays and objects, outside JSON strings (a record object is depth 1).

    Exact for valid JSON. For invalid JSON it is at least the depth a parser reaches before it
    finds the error: up to there the text is valid, so strings are tracked the same way.
    """
    data = np.frombuffer(value, dtype=np.uint8)
    if not len(data):
        return 0
    inside = np.zeros(len(data), dtype=bool)
    quotes = data == 0x22
    if quotes.any():
        # A quote is escaped when an odd run of backslashes precedes it.
        pos = np.arange(len(data))
        last_other = np.maximum.accumulate(np.where(data == 0x5C, -1, pos))
        run_before = np.concatenate(([0], (pos - last_other)[:-1]))
        real = quotes & (run_before % 2 == 0)
        inside = np.cumsum(real) % 2 == 1  # from an opening quote up to its closing one
    folded = data | 0x20  # '[' -> '{', ']' -> '}'
    step = ((folded == 0x7B) & ~inside).astype(np.int64) - ((folded == 0x7D) & ~inside)
    return max(int(np.cumsum(step).max()), 0)


def parse_one(value: bytes | None, columns: Sequence[ColumnSpec], limits: ParseLimits = DEFAULT_LIMITS) -> Outcome:
    """The exact rules for one record: a typed row, or the code and reason it is quarantined for."""
    if value is None:
        return Outcome(None, ReasonCode.NULL_VALUE, _NULL_REASON)
    if len(value) > limits.max_record_bytes:
        return Outcome(None, ReasonCode.TOO_LARGE, _too_large_reason(len(value), limits))
    if value.startswith(_BOM_MARKS):
        encoding = next(encoding for mark, encoding in _BOMS if value.startswith(mark))
        return Outcome(None, ReasonCode.BAD_ENCODING, f"not UTF-8 JSON: starts with a {encoding} byte order mark")
    if b"\x00" in value:
        return Outcome(None, ReasonCode.BAD_ENCODING, "not UTF-8 JSON: holds NUL bytes (as UTF-16 and UTF-32 text do)")
    try:
        text = value.decode("utf-8")  # strict: no overlong forms, no encoded surrogates
    except UnicodeDecodeError as exc:
        return Outcome(None, ReasonCode.INVALID_UTF8, f"not valid UTF-8 at byte {exc.start}")
    if value.count(b"[") + value.count(b"{") > limits.max_depth:
        depth = _depth(value)
        if depth > limits.max_depth:
            return Outcome(None, ReasonCode.TOO_DEEP, _too_deep_reason(depth, limits))
    try:
        # A Python hook per integer is slow: only used when some integer may be too long for int().
        parse_int = _parse_int if _LONG_DIGITS.search(text) else None
        obj = json.loads(text, parse_float=decimal.Decimal, parse_int=parse_int, parse_constant=_float_constant)
    except ValueError:
        return Outcome(None, ReasonCode.NOT_JSON, "not valid JSON")
    except RecursionError:  # only when the caller's stack is already deep: the depth was checked
        return Outcome(None, ReasonCode.TOO_DEEP, "nested too deep for the parser")
    if not isinstance(obj, dict):
        return Outcome(None, ReasonCode.NOT_OBJECT, "JSON value is not an object")
    row: dict[str, Any] = {}
    errors: list[tuple[ReasonCode, str]] = []
    for col in columns:
        if col.name not in obj or obj[col.name] is None:
            row[col.name] = None
            if col.required:
                absent = col.name not in obj
                what = f"missing required field {col.name}" if absent else f"required field {col.name} is null"
                errors.append((ReasonCode.MISSING_REQUIRED, what))
            continue
        raw = obj[col.name]
        typed, code = _convert(raw, col, limits)
        if code is not None:
            errors.append((code, _field_error(col, raw, code, limits)))
        row[col.name] = typed
    if errors:
        return Outcome(None, errors[0][0], "; ".join(text for _, text in errors))
    return Outcome(row, None, None)


class _BigInt(decimal.Decimal):
    """An integer literal too long for ``int()`` (Python caps it, and it is quadratic): out of
    range of every integer column, and exact for decimal ones."""


def _parse_int(text: str) -> int | decimal.Decimal:
    return int(text) if len(text) <= _INT_DIGITS else _BigInt(text)


_INT_DIGITS = 1000  # well below Python's cap of 4300 digits
_LONG_DIGITS = re.compile(f"[0-9]{{{_INT_DIGITS + 1}}}")


def _float_constant(name: str) -> float:
    # Not strict JSON, but what Python's json.dumps writes for non-finite floats; Arrow reads it too.
    return _FLOAT_WORDS[name]


_ISO_DATE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")
# The numeric strings Arrow reads into a decimal column: sign, digits with a point, exponent.
_DECIMAL_TEXT = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


@functools.lru_cache(maxsize=4096)
def _column_type(col: ColumnSpec) -> tuple[str, tuple[int, int] | None]:
    # ColumnSpec.decimal matches a regex on every call; the exact path asks once per field.
    return col.type, col.decimal


def _convert(raw: Any, col: ColumnSpec, limits: ParseLimits) -> tuple[Any, ReasonCode | None]:
    """The column's value for a non-null JSON value, or a code saying why it has none."""
    t, dec = _column_type(col)
    if t == "string":
        if not isinstance(raw, str):
            return None, ReasonCode.TYPE_MISMATCH
        if not _is_unicode(raw):
            return None, ReasonCode.INVALID_UTF8
        if len(raw) > limits.max_string_chars:
            return None, ReasonCode.STRING_TOO_LONG
        return raw, None
    if t == "boolean":
        return (raw, None) if isinstance(raw, bool) else (None, ReasonCode.TYPE_MISMATCH)
    if isinstance(raw, bool):  # bool is an int in Python, never a number in JSON
        return None, ReasonCode.TYPE_MISMATCH
    if t in _INT_RANGE:
        low, high = _INT_RANGE[t]
        if isinstance(raw, int):
            return (raw, None) if low <= raw <= high else (None, ReasonCode.OUT_OF_RANGE)
        return None, ReasonCode.OUT_OF_RANGE if isinstance(raw, _BigInt) else ReasonCode.TYPE_MISMATCH
    if t in ("float", "double"):
        return _to_float(raw, single=t == "float")
    if dec:
        return _to_decimal(raw, *dec)
    if t == "date":
        if not isinstance(raw, str):
            return None, ReasonCode.TYPE_MISMATCH
        if not _ISO_DATE.fullmatch(raw):  # fromisoformat also reads week dates (2024-W01-1)
            return None, ReasonCode.INVALID_DATE
        try:
            return dt.date.fromisoformat(raw), None
        except ValueError:  # no such day (2023-02-30), or year 0000
            return None, ReasonCode.INVALID_DATE
    if t == "timestamp":
        return _to_timestamp(raw)
    raise AssertionError(f"unhandled column type {t}")


def _is_unicode(text: str) -> bool:
    # json.loads turns a lone surrogate escape ("\ud800") into a str no UTF-8 encoder accepts.
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _to_float(raw: Any, single: bool) -> tuple[float | None, ReasonCode | None]:
    if isinstance(raw, str):
        word = _FLOAT_WORDS.get(raw)
        return (word, None) if word is not None else (None, ReasonCode.TYPE_MISMATCH)
    if isinstance(raw, float):  # a bare NaN / Infinity constant
        return raw, None
    if not isinstance(raw, int | decimal.Decimal):
        return None, ReasonCode.TYPE_MISMATCH
    number = float(decimal.Decimal(raw))  # float(int) raises for ints above ~1e308; Decimal gives inf
    if not math.isfinite(number) or (single and abs(number) > _FLOAT32_MAX and _rounds_to_inf32(number)):
        return None, ReasonCode.OUT_OF_RANGE
    return number, None


def _rounds_to_inf32(number: float) -> bool:
    with np.errstate(over="ignore"):
        return bool(np.isinf(np.float32(number)))


def _to_decimal(raw: Any, precision: int, scale: int) -> tuple[decimal.Decimal | None, ReasonCode | None]:
    if isinstance(raw, str):
        if not _DECIMAL_TEXT.fullmatch(raw):
            return None, ReasonCode.TYPE_MISMATCH
        raw = decimal.Decimal(raw)
    if not isinstance(raw, int | decimal.Decimal):
        return None, ReasonCode.TYPE_MISMATCH
    value = decimal.Decimal(raw)
    try:
        quantized = value.quantize(decimal.Decimal(1).scaleb(-scale), context=decimal.Context(prec=100))
    except decimal.InvalidOperation:  # more digits than any decimal(38, s) holds
        return None, ReasonCode.OUT_OF_RANGE
    if quantized != value or abs(quantized) >= decimal.Decimal(10) ** (precision - scale):
        return None, ReasonCode.OUT_OF_RANGE  # would be rounded, or does not fit the precision
    return quantized, None


def _to_timestamp(raw: Any) -> tuple[dt.datetime | None, ReasonCode | None]:
    if not isinstance(raw, str):
        return None, ReasonCode.TYPE_MISMATCH
    if not raw.isascii():
        return None, ReasonCode.INVALID_TIMESTAMP
    try:
        ts = dt.datetime.fromisoformat(raw)  # rejects impossible days (2023-02-30T00:00:00Z)
    except ValueError:
        return None, ReasonCode.INVALID_TIMESTAMP
    if ts.tzinfo is None:
        ts = ts.replace(tzinfo=dt.UTC)  # no offset: UTC, as Arrow and the docs say
    try:
        return ts.astimezone(dt.UTC), None
    except OverflowError:  # the offset moves it outside years 1..9999
        return None, ReasonCode.INVALID_TIMESTAMP


def _field_error(col: ColumnSpec, raw: Any, code: ReasonCode, limits: ParseLimits) -> str:
    if code is ReasonCode.STRING_TOO_LONG:
        return f"field {col.name}: string of {len(raw)} characters, over the limit of {limits.max_string_chars}"
    if code is ReasonCode.INVALID_UTF8:
        return f"field {col.name}: string holds a lone surrogate, not valid UTF-8: {_excerpt(raw)}"
    return f"field {col.name}: expected {col.type}, got {_kind(raw)} {_excerpt(raw)}"


def _kind(raw: Any) -> str:
    if isinstance(raw, bool):
        return "boolean"
    if isinstance(raw, int | float | decimal.Decimal):
        return "number"
    if isinstance(raw, str):
        return "string"
    return "array" if isinstance(raw, list) else "object"


def _excerpt(raw: Any) -> str:
    # json.dumps escapes every non-ASCII character (lone surrogates too): the reason is valid UTF-8.
    if isinstance(raw, str) and len(raw) > 200:
        raw = raw[:200]  # no need to escape a megabyte to show 80 characters of it
    text = str(raw) if isinstance(raw, decimal.Decimal | float) else json.dumps(raw, default=str)
    return text if len(text) <= 80 else text[:77] + "..."

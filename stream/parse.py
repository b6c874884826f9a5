"""JSON record values -> typed Arrow columns, with a reason for every record that does not fit.

Two paths, one set of rules (``docs/records.md``):

* the fast path hands a whole block of values to Arrow's C++ JSON reader with the declared
  schema (``pyarrow.json``), which is already strict about JSON kinds (an integer column rejects
  ``"12"`` and ``1.5``, a string column rejects ``12``). A block that Arrow rejects is bisected,
  so a bad record costs O(log n) re-reads of shrinking blocks, not a row-by-row pass;
* the exact path, :func:`parse_one`, decides single records Arrow could not: the malformed ones
  (to give the reason) and the rare valid forms Arrow does not read (``"NaN"`` for a double, a
  decimal written as a string, a value spanning several lines).

Arrow never accepts a record the exact path would reject; ``tests/stream/test_parse.py`` checks
the two paths agree.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pa_json

from lakecluster.schema import ColumnSpec, arrow_schema, arrow_type

_INT_RANGE = {"int": (-(2**31), 2**31 - 1), "long": (-(2**63), 2**63 - 1)}
_FLOAT_WORDS = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


@dataclass(frozen=True)
class Parsed:
    """``table`` has one row per input value (nulls where ``reasons`` is not null)."""

    table: pa.Table
    reasons: pa.StringArray

    @property
    def valid(self) -> pa.BooleanArray:
        return pc.is_null(self.reasons)


class RecordParser:
    def __init__(self, columns: Sequence[ColumnSpec]) -> None:
        self.columns = tuple(columns)
        self.schema = arrow_schema(self.columns)
        # Arrow's JSON reader has no date conversion: dates are read as strings, then cast.
        self._read_schema = pa.schema(
            [pa.field(c.name, pa.string() if c.type == "date" else arrow_type(c)) for c in self.columns]
        )
        self._parse_options = pa_json.ParseOptions(
            explicit_schema=pa.schema([pa.field("v", pa.struct(list(self._read_schema)))]),
            unexpected_field_behavior="ignore",
        )
        self._required = [c.name for c in self.columns if c.required]
        self._dates = [c.name for c in self.columns if c.type == "date"]
        # decimal(38, s) is bounded by Arrow's type itself; narrower ones need a check
        self._decimals = [(c.name, *c.decimal) for c in self.columns if c.decimal and c.decimal[0] < 38]

    def parse(self, values: pa.Array) -> Parsed:
        """Parse Kafka record values (binary, may hold nulls) into the declared columns."""
        values = values.cast(pa.binary()) if not pa.types.is_binary(values.type) else values
        n = len(values)
        # Values Arrow must not see: null, or holding a line break (Arrow reads one record per
        # line; a raw break inside a JSON string is invalid and must not be papered over).
        fast = pc.and_(pc.is_valid(values), pc.invert(pc.fill_null(_has_line_break(values), True)))
        fast_idx = np.flatnonzero(fast.to_numpy(zero_copy_only=False))
        pieces: list[tuple[np.ndarray, pa.Table]] = []
        slow: list[int] = np.flatnonzero(~fast.to_numpy(zero_copy_only=False)).tolist()
        self._read_blocks(values, fast_idx, pieces, slow)
        reasons: list[str | None] = [None] * n
        slow_rows: list[dict[str, Any]] = []
        slow_ok: list[int] = []
        for i in sorted(slow):
            row, reason = parse_one(values[i].as_py(), self.columns)
            if reason is None:
                slow_rows.append(row)  # type: ignore[arg-type]
                slow_ok.append(i)
            else:
                reasons[i] = reason
        if slow_ok:
            pieces.append((np.asarray(slow_ok), pa.Table.from_pylist(slow_rows, schema=self.schema)))
        return Parsed(self._assemble(pieces, n), pa.array(reasons, pa.string()))

    def _read_blocks(self, values: pa.Array, idx: np.ndarray, out: list, slow: list[int]) -> None:
        """Read ``values[idx]`` with Arrow; bisect blocks it rejects down to single records."""
        stack = [idx] if len(idx) else []
        while stack:
            block = stack.pop()
            table = self._try_read(values.take(pa.array(block)))
            if table is not None:
                keep = self._post_checks(table)
                if keep is not None:
                    slow.extend(block[~keep].tolist())
                    block, table = block[keep], table.filter(pa.array(keep))
                out.append((block, table))
            elif len(block) == 1:
                slow.append(int(block[0]))
            else:
                half = len(block) // 2
                stack.extend((block[half:], block[:half]))

    def _try_read(self, values: pa.Array) -> pa.Table | None:
        # Each value becomes the line {"v":<value>}: the concatenated data buffer is
        # newline-delimited JSON in which a line yields one row or the read fails. An empty value,
        # a non-object, or two objects in one value cannot shift rows against records.
        lines = pc.binary_join_element_wise(_OPEN, values, _CLOSE, pa.scalar(b""))
        offsets = np.frombuffer(lines.buffers()[1], dtype=np.int32)[lines.offset : lines.offset + len(lines) + 1]
        data = lines.buffers()[2][offsets[0] : offsets[-1]]
        try:
            table = pa_json.read_json(
                pa.BufferReader(data),
                read_options=pa_json.ReadOptions(use_threads=False, block_size=max(1 << 20, data.size + 1)),
                parse_options=self._parse_options,
            )
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return None
        if table.num_rows != len(values):
            return None
        return pa.Table.from_struct_array(table["v"].combine_chunks())

    def _post_checks(self, table: pa.Table) -> np.ndarray | None:
        """Rows Arrow read but that break a rule it does not check; None when all pass."""
        bad = np.zeros(table.num_rows, dtype=bool)
        for name in self._required:
            bad |= table[name].is_null().to_numpy(zero_copy_only=False)
        for name, precision, scale in self._decimals:
            # Arrow does not check the precision: 100000000 lands in a decimal(10,2) column.
            wide = pa.decimal128(38, scale)
            limit = pa.scalar(decimal.Decimal(10) ** (precision - scale), wide)
            too_big = pc.greater_equal(pc.abs(table[name].cast(wide)), limit).fill_null(False)
            bad |= too_big.to_numpy(zero_copy_only=False)
        for name in self._dates:
            text = table[name]
            day = pc.strptime(text, format="%Y-%m-%d", unit="s", error_is_null=True)
            is_iso = pc.match_substring_regex(text, r"^\d{4}-\d{2}-\d{2}$")
            ok = pc.and_kleene(pc.is_valid(day), is_iso).fill_null(False)
            bad |= pc.is_valid(text).to_numpy(zero_copy_only=False) & ~ok.to_numpy(zero_copy_only=False)
        if not bad.any():
            return None
        return ~bad

    def _assemble(self, pieces: list[tuple[np.ndarray, pa.Table]], n: int) -> pa.Table:
        """One row per input value, in input order; rows of rejected records are all null."""
        rows = [p[0] for p in pieces]
        tables = [self._to_target(t) for _, t in pieces]
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
                column = pc.strptime(column, format="%Y-%m-%d", unit="s").cast(pa.date32())
            arrays.append(column)
        return pa.Table.from_arrays(arrays, schema=self.schema)


_OPEN = pa.scalar(b'{"v":')
_CLOSE = pa.scalar(b"}\n")


def _has_line_break(values: pa.Array) -> pa.BooleanArray:
    return pc.or_(pc.match_substring(values, "\n"), pc.match_substring(values, "\r"))


def parse_one(value: bytes | None, columns: Sequence[ColumnSpec]) -> tuple[dict[str, Any] | None, str | None]:
    """The exact rules for one record: (typed row, None) or (None, reason)."""
    if value is None:
        return None, "record has no value (null)"
    try:
        obj = json.loads(value, parse_float=decimal.Decimal, parse_constant=_float_constant)
    except (ValueError, UnicodeDecodeError):
        return None, "not valid JSON"
    if not isinstance(obj, dict):
        return None, "JSON value is not an object"
    row: dict[str, Any] = {}
    errors = []
    for col in columns:
        if col.name not in obj or obj[col.name] is None:
            row[col.name] = None
            if col.required:
                errors.append(f"{'missing required field' if col.name not in obj else 'required field'} "
                              f"{col.name}{'' if col.name not in obj else ' is null'}")  # fmt: skip
            continue
        raw = obj[col.name]
        typed = _convert(raw, col)
        if typed is _INVALID:
            errors.append(f"field {col.name}: expected {col.type}, got {_kind(raw)} {_excerpt(raw)}")
        row[col.name] = typed
    if errors:
        return None, "; ".join(errors)
    return row, None


_INVALID = object()


def _float_constant(name: str) -> float:
    # Not strict JSON, but what Python's json.dumps writes for non-finite floats; Arrow reads it too.
    return _FLOAT_WORDS[name]


def _convert(raw: Any, col: ColumnSpec) -> Any:
    t = col.type
    if t == "string":
        return raw if isinstance(raw, str) else _INVALID
    if t == "boolean":
        return raw if isinstance(raw, bool) else _INVALID
    if isinstance(raw, bool):  # bool is an int in Python, never a number in JSON
        return _INVALID
    if t in _INT_RANGE:
        low, high = _INT_RANGE[t]
        return raw if isinstance(raw, int) and low <= raw <= high else _INVALID
    if col.is_floating:
        if isinstance(raw, str):
            return _FLOAT_WORDS.get(raw, _INVALID)
        if isinstance(raw, float):  # a bare NaN / Infinity constant
            return raw
        if isinstance(raw, int | decimal.Decimal):
            f = float(raw)
            return f if math.isfinite(f) else _INVALID
        return _INVALID
    dec = col.decimal
    if dec:
        return _to_decimal(raw, *dec)
    if t == "date":
        if not isinstance(raw, str) or len(raw) != 10:
            return _INVALID
        try:
            return dt.date.fromisoformat(raw)
        except ValueError:
            return _INVALID
    if t == "timestamp":
        return _to_timestamp(raw)
    raise AssertionError(f"unhandled column type {t}")


def _to_decimal(raw: Any, precision: int, scale: int) -> Any:
    if isinstance(raw, str):
        try:
            raw = decimal.Decimal(raw)
        except decimal.InvalidOperation:
            return _INVALID
    if not isinstance(raw, int | decimal.Decimal):
        return _INVALID
    value = decimal.Decimal(raw)
    if not value.is_finite():
        return _INVALID
    try:
        quantized = value.quantize(decimal.Decimal(1).scaleb(-scale), context=decimal.Context(prec=100))
    except decimal.InvalidOperation:  # more digits than any decimal(38, s) holds
        return _INVALID
    if quantized != value or abs(quantized) >= decimal.Decimal(10) ** (precision - scale):
        return _INVALID  # would be rounded, or does not fit the precision
    return quantized


def _to_timestamp(raw: Any) -> Any:
    if not isinstance(raw, str):
        return _INVALID
    try:
        ts = dt.datetime.fromisoformat(raw)
    except ValueError:
        return _INVALID
    if ts.tzinfo is None:
        ts = ts.replace(tzinfo=dt.UTC)  # no offset: UTC, as Arrow and the docs say
    return ts.astimezone(dt.UTC)


def _kind(raw: Any) -> str:
    if isinstance(raw, bool):
        return "boolean"
    if isinstance(raw, int | float | decimal.Decimal):
        return "number"
    if isinstance(raw, str):
        return "string"
    return "array" if isinstance(raw, list) else "object"


def _excerpt(raw: Any) -> str:
    text = str(raw) if isinstance(raw, decimal.Decimal | float) else json.dumps(raw, default=str)
    return text if len(text) <= 80 else text[:77] + "..."

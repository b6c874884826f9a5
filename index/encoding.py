"""Order-preserving binary encodings of column values: min/max of every type in one binary column.

Comparing two encodings byte-wise gives the same answer as comparing the values under SQL
(Spark/DuckDB) semantics, exactly, so one vectorised binary comparison serves every type:

* strings: their UTF-8 bytes (byte order is code-point order, which is how Spark and Parquet
  order strings). Valid UTF-8 never holds byte 0xFF, so ``s + b"\\xff"`` is a strict upper
  bound of every string starting with ``s`` (used for prefixes and truncated maxima);
* integers, dates (days), timestamps (micro-seconds, UTC) and decimals (unscaled, at the
  column's scale): 16-byte big-endian two's complement with the sign bit flipped;
* floats: the IEEE-754 bits of the double value, sign-flipped so byte order is numeric order;
  -0.0 is encoded as 0.0 (SQL: -0.0 = 0.0) and every NaN as eight 0xFF bytes, above +infinity,
  because Spark and DuckDB order NaN above every other value and NaN = NaN;
* booleans: one byte, false < true.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lakecluster.schema import ColumnSpec

NAN_KEY = b"\xff" * 8
PREFIX_END = b"\xff"  # appended to a string: above every string with that prefix
_SIGN = np.uint64(1 << 63)
EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def family(col: ColumnSpec) -> str:
    """``string``, ``boolean``, ``float`` or ``integer`` (integers, dates, timestamps, decimals)."""
    if col.type in ("string", "boolean"):
        return col.type
    if col.is_floating:
        return "float"
    return "integer"


def scale(col: ColumnSpec) -> int:
    dec = col.decimal
    return dec[1] if dec else 0


def _with_nulls(source: pa.Array, encoded: pa.Array) -> pa.Array:
    if source.null_count == 0:
        return encoded
    return pc.if_else(pc.is_valid(source), encoded, pa.scalar(None, pa.binary()))


def _fixed(raw: np.ndarray, width: int) -> pa.Array:
    """Binary values of ``width`` bytes each, back to back in ``raw``: the bytes used as they are
    (no copy), beside offsets counting in steps of ``width``."""
    n = raw.size // width
    if (n + 1) * width >= 1 << 31:  # beyond binary's 32-bit offsets: through Arrow's cast
        fixed = pa.FixedSizeBinaryArray.from_buffers(pa.binary(width), n, [None, pa.py_buffer(raw.tobytes())])
        return fixed.cast(pa.large_binary()).cast(pa.binary())
    offsets = np.arange(0, (n + 1) * width, width, dtype=np.int32)
    return pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(np.ascontiguousarray(raw))])


def _int128(hi: np.ndarray, lo: np.ndarray) -> pa.Array:
    words = np.empty((len(hi), 2), dtype=">u8")
    words[:, 0] = hi.astype(np.int64).view(np.uint64) ^ _SIGN
    words[:, 1] = lo.view(np.uint64) if lo.dtype != np.uint64 else lo
    return _fixed(words.view(np.uint8), 16)


def _integers(arr: pa.Array) -> np.ndarray:
    """int64 values of an integer, date or timestamp array (nulls as 0; the mask is kept apart)."""
    if pa.types.is_timestamp(arr.type):
        arr = arr.cast(pa.timestamp("us", tz=arr.type.tz)).cast(pa.int64())
    elif pa.types.is_date32(arr.type):
        arr = arr.cast(pa.int32())
    return arr.cast(pa.int64()).fill_null(0).to_numpy(zero_copy_only=False)


def encode_array(col: ColumnSpec, arr: pa.Array) -> pa.Array:
    """Vectorised encoding of ``arr`` (the column's Arrow type) into order-preserving binary."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    kind = family(col)
    if len(arr) == 0:
        return pa.array([], pa.binary())
    if kind == "string":
        return arr.cast(pa.string()).cast(pa.binary())
    if kind == "boolean":
        raw = arr.fill_null(False).to_numpy(zero_copy_only=False).astype(np.uint8)
        return _with_nulls(arr, _fixed(raw, 1))
    if kind == "float":
        values = arr.cast(pa.float64()).fill_null(0.0).to_numpy(zero_copy_only=False).copy()
        values[values == 0.0] = 0.0  # -0.0 -> 0.0
        bits = values.view(np.uint64)
        enc = np.where(bits & _SIGN, ~bits, bits | _SIGN)
        enc[np.isnan(values)] = np.uint64(0xFFFFFFFFFFFFFFFF)
        return _with_nulls(arr, _fixed(enc.astype(">u8").view(np.uint8), 8))
    if pa.types.is_decimal(arr.type):
        arr = arr.cast(pa.decimal128(38, arr.type.scale))
        words = np.frombuffer(arr.buffers()[1], dtype="<i8").reshape(-1, 2)[arr.offset : arr.offset + len(arr)]
        enc = _int128(words[:, 1].copy(), words[:, 0].copy())
    else:
        values = _integers(arr)
        enc = _int128(values >> 63, values)
    return _with_nulls(arr, enc)


def encode_value(col: ColumnSpec, value: Any) -> bytes:
    """Encoding of one exact value: str, bool, float, or int (unscaled decimal, days, micro-seconds)."""
    kind = family(col)
    if kind == "string":
        return str(value).encode()
    if kind == "boolean":
        return b"\x01" if value else b"\x00"
    if kind == "float":
        return encode_array(col, pa.array([float(value)], pa.float64()))[0].as_py()
    v = int(value)
    if not -(1 << 127) <= v < 1 << 127:
        raise OverflowError(f"{value} does not fit in 128 bits")
    return ((v + (1 << 127)) % (1 << 128)).to_bytes(16, "big")


def decode_array(col: ColumnSpec, enc: pa.Array) -> pa.Array:
    """The typed values back (for display and the compactor's ranges). A string bound widened
    with 0xFF decodes to its prefix."""
    from lakecluster.schema import arrow_type

    if isinstance(enc, pa.ChunkedArray):
        enc = enc.combine_chunks()
    kind = family(col)
    target = arrow_type(col)
    if len(enc) == 0:
        return pa.array([], target)
    valid = pc.is_valid(enc)
    if kind == "string":
        trimmed = pc.replace_substring_regex(enc.cast(pa.binary()), pattern="\\xff+$", replacement="")
        return trimmed.cast(pa.string())
    width = {"boolean": 1, "float": 8}.get(kind, 16)
    filled = enc.fill_null(b"\x00" * width).cast(pa.binary(width))
    raw = np.frombuffer(filled.buffers()[1], dtype=np.uint8)[filled.offset * width : (filled.offset + len(enc)) * width]
    if kind == "boolean":
        out: pa.Array = pa.array(raw.astype(bool))
    elif kind == "float":
        e = raw.view(">u8").astype(np.uint64)
        bits = np.where(e & _SIGN, e ^ _SIGN, ~e)
        out = pa.array(bits.view(np.float64)).cast(target)
    else:
        words = raw.view(">u8").reshape(-1, 2).astype(np.uint64)
        hi = (words[:, 0] ^ _SIGN).view(np.int64)
        lo = words[:, 1]
        if col.decimal:
            le = np.empty((len(enc), 2), dtype="<u8")
            le[:, 0], le[:, 1] = lo, hi.view(np.uint64)
            out = pa.Array.from_buffers(pa.decimal128(38, scale(col)), len(enc), [None, pa.py_buffer(le.tobytes())])
        else:
            out = pa.array(lo.view(np.int64))
        out = _from_int64(col, out)
    return pc.if_else(valid, out.cast(target), pa.scalar(None, target))


def _from_int64(col: ColumnSpec, arr: pa.Array) -> pa.Array:
    if col.type == "date":
        return arr.cast(pa.int32()).cast(pa.date32())
    if col.type == "timestamp":
        return arr.cast(pa.timestamp("us", tz="UTC"))
    return arr


def exact_value(col: ColumnSpec, value: Any) -> Any:
    """A Python value of the column's type as the exact value ``encode_value`` takes."""
    if col.type == "date":
        return (value - dt.date(1970, 1, 1)).days
    if col.type == "timestamp":
        if value.tzinfo is None:
            value = value.replace(tzinfo=dt.UTC)
        delta = value - EPOCH
        return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
    if col.decimal:
        return int(Decimal(value).scaleb(scale(col)))
    return value

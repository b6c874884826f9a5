"""What the Delta log says about a data file, as typed values of a column.

An ``add`` action carries its stats as JSON text (``minValues``, ``maxValues``: numbers, ISO dates
and timestamps, strings) and its partition values as strings (``partitionValues``, protocol
"Partition Value Serialization"). The compactor's live-file view and the column-stats index both
read them, and must read them the same way: conservatively, so that a bound that cannot be read
is unknown (which only ever keeps a file) and a decimal bound is rounded outward.
"""

from __future__ import annotations

import datetime as dt
from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from lakecluster.schema import ColumnSpec, arrow_type


def typed_stat(col: ColumnSpec, value: Any, upper: bool) -> Any:
    """A stats JSON value as a Python value of the column's type; None when it cannot be read
    (then the bound is unknown, which only ever keeps a file). ``upper``: a maximum (decimals
    are rounded up to the column's scale, minima down)."""
    if value is None:
        return None
    try:
        if col.type == "string":
            return value if isinstance(value, str) else None
        if col.type == "boolean":
            return value if isinstance(value, bool) else None
        if col.type in ("int", "long"):
            return int(value) if not isinstance(value, bool) and Decimal(value) == int(value) else None
        if col.is_floating:
            return float(value)
        if col.decimal:
            quantum = Decimal(1).scaleb(-col.decimal[1])
            return Decimal(value).quantize(quantum, rounding=ROUND_CEILING if upper else ROUND_FLOOR)
        if col.type == "date":
            return dt.date.fromisoformat(value)
        if col.type == "timestamp":
            ts = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
            return ts if ts.tzinfo else ts.replace(tzinfo=dt.UTC)
    except (ValueError, TypeError, ArithmeticError):
        return None
    return None


def partition_array(col: ColumnSpec, strings: list[str | None]) -> pa.Array:
    """Typed partition values from the log's text; an empty string is null (Delta protocol)."""
    tp = arrow_type(col)
    strings = [None if s == "" else s for s in strings]
    raw = pa.array(strings, pa.string())
    if col.type == "timestamp":
        return pa.array([None if s is None else typed_stat(col, s.replace(" ", "T"), False) for s in strings], tp)
    if col.type == "boolean":
        return pc.equal(pc.utf8_lower(raw), "true")
    return raw.cast(tp)

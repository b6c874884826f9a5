"""Constants of a column type, as lakecluster compares them, and as the capture format writes them.

One exact Python value per constant, whatever it was read from (a where-clause, a captured scan, a
Spark event log): integers and decimals as ``Decimal``, floating-point numbers as ``float`` (NaN
and the infinities included), dates as ``date``, timestamps as UTC-aware ``datetime`` (one without
a zone, ``timestamp_ntz``, read as UTC), strings as ``str``, booleans as ``bool``.

The capture format (docs/workload.md) writes a constant of Spark type ``kind`` as JSON:
integers as numbers; floating-point numbers as numbers, NaN and the infinities as the strings
``"NaN"``, ``"Infinity"``, ``"-Infinity"``; decimals as exact plain strings (``"12.50"``); dates
as ``yyyy-mm-dd``; timestamps as Java's ``Instant.toString`` (UTC, ``Z``, a fraction of 0, 3 or 6
digits) and ``timestamp_ntz`` as ``LocalDateTime.toString`` (seconds only when not zero);
booleans as ``true``/``false``. ``WorkloadListener.java`` writes it, the event-log import writes
it (:func:`encode`), the capture's reader reads it (:func:`decode`), and a test holds the Java
writer to :func:`encode`'s output for every type.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable
from decimal import Decimal, InvalidOperation
from typing import Any

from lakecluster.schema import ColumnSpec

INTEGERS = ("tinyint", "smallint", "int", "bigint")  # Spark's integer types, as a capture record names them
_DECIMAL_KIND = re.compile(r"^decimal\(\s*(\d+)\s*,\s*(\d+)\s*\)$")
_FRACTION = re.compile(r"\.(\d+)")


class LiteralError(ValueError):
    """A constant that is not a value of its type."""


def column_of(name: str, kind: str) -> ColumnSpec | None:
    """The column a capture record's Spark type ``kind`` is, as lakecluster declares columns; None
    for a type data skipping does not use (binary, nested, intervals)."""
    if kind in ("tinyint", "smallint", "int"):
        return ColumnSpec(name, "int")
    if kind == "bigint":
        return ColumnSpec(name, "long")
    if kind in ("timestamp", "timestamp_ntz"):
        return ColumnSpec(name, "timestamp")
    m = _DECIMAL_KIND.match(kind)
    if m:
        return ColumnSpec(name, f"decimal({m.group(1)},{m.group(2)})")
    if kind in ("string", "float", "double", "boolean", "date"):
        return ColumnSpec(name, kind)
    return None


def exact_number(text: str) -> Decimal:
    """An integer or decimal constant written as ``text``, exactly.

    Raises:
        LiteralError: not a finite number.
    """
    try:
        value = Decimal(text.strip())
    except InvalidOperation:
        raise LiteralError("expected a number") from None
    if not value.is_finite():
        raise LiteralError("expected a finite number")
    return value


def parse_date(text: str) -> dt.date:
    try:
        return dt.date.fromisoformat(text.strip())
    except ValueError:
        raise LiteralError("expected yyyy-mm-dd") from None


def parse_timestamp(text: str) -> dt.datetime:
    """A timestamp written ``yyyy-mm-dd[ hh:mm:ss[.ffffff]][+hh:mm|Z]`` (a ``T`` too), as UTC; one
    without a zone is read as UTC.

    Raises:
        LiteralError: not such a timestamp, or finer than micro-seconds.
    """
    raw = text.strip().replace("Z", "+00:00")
    m = _FRACTION.search(raw)
    if m and len(m.group(1)) > 6:
        raise LiteralError("at most micro-second precision (6 fractional digits)")
    try:
        value = dt.datetime.fromisoformat(raw)
    except ValueError:
        try:
            d = dt.date.fromisoformat(raw)
        except ValueError:
            raise LiteralError("expected yyyy-mm-dd[ hh:mm:ss[.ffffff]][+hh:mm]") from None
        value = dt.datetime(d.year, d.month, d.day)
    return value.replace(tzinfo=dt.UTC) if value.tzinfo is None else value.astimezone(dt.UTC)


def decode(kind: str, recorded: Any) -> Any:
    """The exact value of a constant of Spark type ``kind`` as a capture record writes it.

    Raises:
        LiteralError: the recorded value is not one of that type, or the type is not recorded.
    """
    reader = _READERS.get(kind) or (_decimal if _DECIMAL_KIND.match(kind) else None)
    if reader is None:
        raise LiteralError(f"constants of type {kind} are not recorded")
    return reader(recorded)


def encode(kind: str, value: Any) -> Any:
    """The capture format of the exact value ``value`` of Spark type ``kind`` (:func:`decode`'s
    inverse), or of a Python value the exact one is made of (an ``int``, a naive ``datetime``).

    Raises:
        LiteralError: the type is not recorded.
    """
    if kind == "string" or kind == "boolean":
        return value
    if kind in INTEGERS:
        return int(value)
    if kind in ("float", "double"):
        number = float(value)
        if number != number:
            return "NaN"
        if number in (float("inf"), float("-inf")):
            return "Infinity" if number > 0 else "-Infinity"
        return number
    if _DECIMAL_KIND.match(kind):
        return format(Decimal(value), "f")
    if kind == "date":
        return value.isoformat()
    if kind == "timestamp":
        instant = value.astimezone(dt.UTC) if value.tzinfo is not None else value
        return instant.strftime("%Y-%m-%dT%H:%M:%S") + _fraction(instant.microsecond) + "Z"
    if kind == "timestamp_ntz":
        local = value.replace(tzinfo=None)
        text = local.strftime("%Y-%m-%dT%H:%M")
        if local.second or local.microsecond:
            text += f":{local.second:02d}" + _fraction(local.microsecond)
        return text
    raise LiteralError(f"constants of type {kind} are not recorded")


def _fraction(micros: int) -> str:
    """Java's ISO-8601 fraction: none, milliseconds or microseconds."""
    if micros == 0:
        return ""
    return f".{micros // 1000:03d}" if micros % 1000 == 0 else f".{micros:06d}"


def _string(v: Any) -> str:
    if not isinstance(v, str):
        raise LiteralError(f"expected a string, got {v!r}")
    return v


def _integer(v: Any) -> Decimal:
    if isinstance(v, bool) or not isinstance(v, int):
        raise LiteralError(f"expected a whole number, got {v!r}")
    return Decimal(v)


def _decimal(v: Any) -> Decimal:
    return exact_number(_string(v))


def _float(v: Any) -> float:
    if isinstance(v, str) and v in ("NaN", "Infinity", "-Infinity"):
        return float(v.lower().replace("infinity", "inf"))
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise LiteralError(f"expected a number, got {v!r}")
    return float(v)


def _bool(v: Any) -> bool:
    if not isinstance(v, bool):
        raise LiteralError(f"expected true or false, got {v!r}")
    return v


def _timestamp(v: Any) -> dt.datetime:
    return parse_timestamp(_string(v))


_READERS: dict[str, Callable[[Any], Any]] = {
    "string": _string, "boolean": _bool, "float": _float, "double": _float,
    "date": lambda v: parse_date(_string(v)), "timestamp": _timestamp, "timestamp_ntz": _timestamp,
    **dict.fromkeys(INTEGERS, _integer),
}  # fmt: skip

"""Column types of a lakecluster table, and their Spark, Arrow and Delta forms.

One small vocabulary (``string``, ``int``, ``long``, ``float``, ``double``, ``boolean``, ``date``,
``timestamp``, ``decimal(p,s)``) is used in the config; everything else is derived from it so the
three type systems cannot drift apart.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import pyarrow as pa

SIMPLE_TYPES = ("string", "int", "long", "float", "double", "boolean", "date", "timestamp")
_DECIMAL = re.compile(r"^decimal\(\s*(\d+)\s*,\s*(\d+)\s*\)$")


@dataclass(frozen=True)
class ColumnSpec:
    """One declared column: its name, type and whether records must carry it."""

    name: str
    type: str
    required: bool = False

    @property
    def decimal(self) -> tuple[int, int] | None:
        m = _DECIMAL.match(self.type)
        return (int(m.group(1)), int(m.group(2))) if m else None

    @property
    def is_numeric(self) -> bool:
        return self.type in ("int", "long", "float", "double") or self.decimal is not None

    @property
    def is_floating(self) -> bool:
        return self.type in ("float", "double")


def validate_type(type_name: str) -> str | None:
    """Return an error message if ``type_name`` is not a supported column type."""
    if type_name in SIMPLE_TYPES:
        return None
    m = _DECIMAL.match(type_name)
    if m:
        precision, scale = int(m.group(1)), int(m.group(2))
        if not 1 <= precision <= 38 or scale > precision:
            return f"decimal precision must be 1..38 and scale <= precision, got {type_name}"
        return None
    return f"unknown type '{type_name}'; known: {', '.join(SIMPLE_TYPES)}, decimal(p,s)"


def spark_sql_type(col: ColumnSpec) -> str:
    """The Spark SQL DDL name of the column's type."""
    return {"int": "int", "long": "bigint"}.get(col.type, col.type)


def arrow_type(col: ColumnSpec) -> pa.DataType:
    dec = col.decimal
    if dec:
        return pa.decimal128(*dec)
    return {
        "string": pa.string(),
        "int": pa.int32(),
        "long": pa.int64(),
        "float": pa.float32(),
        "double": pa.float64(),
        "boolean": pa.bool_(),
        "date": pa.date32(),
        # Micro-seconds in UTC: what Delta stores and what Spark writes with TIMESTAMP_MICROS.
        "timestamp": pa.timestamp("us", tz="UTC"),
    }[col.type]


def arrow_schema(columns: tuple[ColumnSpec, ...]) -> pa.Schema:
    """Arrow schema of the table; every field nullable, as Delta writers expect."""
    return pa.schema([pa.field(c.name, arrow_type(c), nullable=True) for c in columns])


def spark_ddl(columns: tuple[ColumnSpec, ...]) -> str:
    return ", ".join(f"`{c.name}` {spark_sql_type(c)}" for c in columns)

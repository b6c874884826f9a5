"""A table's schema as its log says it at a version: every column (whoever added it), its type,
and the name its data files hold it by.

Under column mapping (``delta.columnMapping.mode`` ``name`` or ``id``) every column, nested ones
too, has a physical name and an id: data files name columns by the physical names and carry the
ids as Parquet field ids, and the log keys stats and partition values by the physical names. A
rename changes only the logical name; a dropped column stays in old files under its physical
name. Without column mapping the physical name is the logical one.

:meth:`DeltaSchema.data_schema` is the Arrow schema of the table's data files (partition columns
left out, physical names, field ids), what a rewrite reads its input files with and writes its
output files in: every column comes through, whatever added it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from lakecluster.errors import UnsupportedTableError
from lakecluster.schema import ColumnSpec, arrow_schema

PHYSICAL_NAME = "delta.columnMapping.physicalName"
COLUMN_ID = "delta.columnMapping.id"
FIELD_ID = b"PARQUET:field_id"

_PRIMITIVES: dict[str, pa.DataType] = {
    "string": pa.string(), "long": pa.int64(), "integer": pa.int32(), "short": pa.int16(), "byte": pa.int8(),
    "float": pa.float32(), "double": pa.float64(), "boolean": pa.bool_(), "binary": pa.binary(),
    "date": pa.date32(), "timestamp": pa.timestamp("us", tz="UTC"), "timestamp_ntz": pa.timestamp("us"),
}  # fmt: skip
_DECIMAL = re.compile(r"^decimal\(\s*(\d+)\s*,\s*(\d+)\s*\)$")


@dataclass(frozen=True)
class Column:
    """One top-level column of the table."""

    name: str  # logical: what queries and the configuration call it
    physical: str  # what data files and the log's stats call it
    field: pa.Field  # in physical names (nested fields too), with its Parquet field id under column mapping
    delta_type: Any  # the type as the schema's JSON has it


@dataclass(frozen=True)
class DeltaSchema:
    """The columns of a table's ``schemaString``, its partition columns and its column mapping mode."""

    columns: tuple[Column, ...]
    partition_by: tuple[str, ...]
    mapping: str  # "none", "name" or "id"

    @classmethod
    def of(cls, schema_string: str, partition_by: Sequence[str], configuration: Mapping[str, str]) -> DeltaSchema:
        """The schema of a ``metaData`` action.

        Raises:
            UnsupportedTableError: a column type lakecluster cannot read and write (variant, ...).
        """
        mapping = configuration.get("delta.columnMapping.mode", "none")
        fields = json.loads(schema_string).get("fields", [])
        columns = []
        for f in fields:
            arrow = _field(f, mapping != "none", f["name"])
            columns.append(Column(f["name"], arrow.name, arrow, f["type"]))
        return cls(tuple(columns), tuple(partition_by), mapping)

    @classmethod
    def of_columns(cls, columns: Sequence[ColumnSpec], partition_by: Sequence[str]) -> DeltaSchema:
        """The schema of a table of exactly ``columns`` (declared: no column mapping)."""
        return cls(tuple(Column(c.name, c.name, f, c.type) for c, f in zip(columns, arrow_schema(tuple(columns)),
                                                                        strict=True)), tuple(partition_by), "none")

    @property
    def names(self) -> list[str]:
        return [c.name for c in self.columns]

    def column(self, name: str) -> Column:
        for c in self.columns:
            if c.name == name:
                return c
        raise KeyError(name)

    def physical(self, name: str) -> str:
        """The column's name in data files and the log's stats and partition values."""
        return self.column(name).physical

    def data_schema(self) -> pa.Schema:
        """The data files' schema: every column but the partition columns, by physical name."""
        return pa.schema([c.field for c in self.columns if c.name not in self.partition_by])


def _field(f: Mapping[str, Any], mapped: bool, path: str) -> pa.Field:
    meta = f.get("metadata") or {}
    name = str(meta.get(PHYSICAL_NAME, f["name"])) if mapped else str(f["name"])
    metadata = {FIELD_ID: str(meta[COLUMN_ID]).encode()} if mapped and COLUMN_ID in meta else None
    return pa.field(name, _type(f["type"], mapped, path), nullable=bool(f.get("nullable", True)), metadata=metadata)


def _type(t: Any, mapped: bool, path: str) -> pa.DataType:
    if isinstance(t, str):
        if t in _PRIMITIVES:
            return _PRIMITIVES[t]
        if m := _DECIMAL.match(t):
            return pa.decimal128(int(m.group(1)), int(m.group(2)))
        raise UnsupportedTableError(f"column {path} is of type {t}, which lakecluster does not rewrite")
    kind = t.get("type")
    if kind == "struct":
        return pa.struct([_field(f, mapped, f"{path}.{f['name']}") for f in t.get("fields", [])])
    if kind == "array":
        return pa.list_(pa.field("element", _type(t["elementType"], mapped, f"{path}.element"),
                                 nullable=bool(t.get("containsNull", True))))  # fmt: skip
    if kind == "map":
        key = pa.field("key", _type(t["keyType"], mapped, f"{path}.key"), nullable=False)
        value = pa.field("value", _type(t["valueType"], mapped, f"{path}.value"),
                         nullable=bool(t.get("valueContainsNull", True)))  # fmt: skip
        return pa.map_(key, value)
    raise UnsupportedTableError(f"column {path} is of type {json.dumps(t)}, which lakecluster does not rewrite")

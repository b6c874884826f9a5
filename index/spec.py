"""What the index covers: the table, where the index lives, which columns, how it is laid out."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa

from lakecluster.errors import StatsIndexError
from lakecluster.index.store import GC_GRACE_S_DEFAULT
from lakecluster.schema import ColumnSpec
from lakecluster.table import LakeTable


@dataclass(frozen=True)
class IndexSpec:
    """The index of ``table``, kept under ``index_path`` with these settings."""

    table: LakeTable
    index_path: str
    columns: tuple[str, ...] = ()  # requested columns; empty: every column up to max_columns
    clustering_columns: tuple[str, ...] = ()  # always indexed, and first
    max_columns: int = 32
    row_group_rows: int = 262_144  # a million-file rebuild writes 16x fewer row groups than at 16,384
    max_segments: int = 8
    nan_counts: str = "assume"  # "assume": NaN possible in float columns; "scan": count them in the files
    gc_grace_s: float = GC_GRACE_S_DEFAULT  # unreferenced index files are kept this long (store.py)

    @classmethod
    def of(cls, table: LakeTable) -> IndexSpec:
        """The index the table's configuration (``[index]``, the clustering columns) describes."""
        c, t = table.config.index, table.config.table
        return cls(table, table.paths.index, tuple(c.columns), tuple(t.clustering_columns), c.max_columns,
                   c.row_group_rows, c.max_segments, c.nan_counts, c.gc_grace_s)  # fmt: skip

    @classmethod
    def for_location(cls, table: LakeTable) -> IndexSpec:
        """Defaults for a table known only by its location (``LakeTable.at``): no clustering
        columns, the index under ``<table>/_lakecluster/index``."""
        return cls(table, table.paths.index)

    @property
    def table_uri(self) -> str:
        return self.table.uri

    def fingerprint(self) -> dict:
        """The settings an existing index must have been built with; a change means a rebuild."""
        return {"columns": list(self.columns), "clustering_columns": list(self.clustering_columns),
                "max_columns": self.max_columns, "nan_counts": self.nan_counts}  # fmt: skip

    def indexed(self, table_columns: Sequence[ColumnSpec], partition_by: Sequence[str]) -> tuple[ColumnSpec, ...]:
        """Clustering and partition columns always (partition stats are free), then the requested
        columns (or every column but booleans, in schema order) until ``max_columns`` is reached.

        Booleans are left out unless named: Delta's checkpoints keep no boolean bounds in their
        stats structs, so indexing one means reading every file's stats text (most of a
        million-file rebuild), and two values skip little unless the table is clustered on them.
        """
        by_name = {c.name: c for c in table_columns}
        chosen: list[str] = [n for n in (*self.clustering_columns, *partition_by) if n in by_name]
        for name in self.columns or tuple(n for n, c in by_name.items() if c.type != "boolean"):
            if name not in chosen and len(chosen) < self.max_columns:
                chosen.append(name)
        return tuple(by_name[n] for n in dict.fromkeys(chosen))


def column_type_name(t: pa.DataType) -> str:
    """The lakecluster type name (``lakecluster.schema``) of an Arrow type read from a Delta schema."""
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return "string"
    if pa.types.is_decimal(t):
        return f"decimal({t.precision},{t.scale})"
    if pa.types.is_timestamp(t):
        return "timestamp"
    simple = {pa.int8(): "int", pa.int16(): "int", pa.int32(): "int", pa.int64(): "long", pa.float32(): "float",
              pa.float64(): "double", pa.bool_(): "boolean", pa.date32(): "date"}  # fmt: skip
    if t in simple:
        return simple[t]
    raise StatsIndexError(f"the index does not support column type {t}")


def table_columns(schema: pa.Schema) -> tuple[ColumnSpec, ...]:
    """Columns of a Delta table's schema that the index can cover (nested/binary ones are left out)."""
    out = []
    for f in schema:
        try:
            out.append(ColumnSpec(f.name, column_type_name(f.type)))
        except StatsIndexError:
            continue
    return tuple(out)


_DELTA_TYPES = {"long": "long", "integer": "int", "short": "int", "byte": "int", "float": "float", "double": "double",
                "string": "string", "boolean": "boolean", "date": "date", "timestamp": "timestamp",
                "timestamp_ntz": "timestamp"}  # fmt: skip


def schema_string_columns(schema_string: str) -> tuple[ColumnSpec, ...]:
    """:func:`table_columns` of a Delta ``schemaString`` (the log's JSON schema), without delta-rs."""
    out = []
    for f in json.loads(schema_string).get("fields", []):
        kind = f.get("type")
        if not isinstance(kind, str):
            continue  # nested
        if kind.startswith("decimal("):
            out.append(ColumnSpec(f["name"], kind.replace(" ", "")))
        elif kind in _DELTA_TYPES:
            out.append(ColumnSpec(f["name"], _DELTA_TYPES[kind]))
    return tuple(out)

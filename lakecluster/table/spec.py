"""What a Delta table lakecluster writes must look like: columns, types, partitioning; creating it.

Checks read through delta-rs (no JVM, so a schema mismatch fails in a second, before Spark
starts); creation goes through delta-spark, so Delta itself writes the table's first commit.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa
from deltalake import DeltaTable

from lakecluster.errors import SchemaMismatchError, TableNotFoundError
from lakecluster.schema import ColumnSpec, arrow_schema, spark_sql_type
from lakecluster.table.location import DeltaLocation

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@dataclass(frozen=True)
class TableSpec:
    """What a Delta table must look like: its schema (Arrow and Spark DDL) and partitioning."""

    schema: pa.Schema
    ddl: str
    partition_by: tuple[str, ...] = ()

    @classmethod
    def of_columns(cls, columns: Sequence[ColumnSpec], partition_by: Sequence[str] = ()) -> TableSpec:
        """A table of declared columns; ``required`` columns are NOT NULL in the Delta schema."""
        ddl = ", ".join(f"`{c.name}` {spark_sql_type(c)}" + (" NOT NULL" if c.required else "") for c in columns)
        return cls(arrow_schema(tuple(columns)), ddl, tuple(partition_by))


def _type_name(t: pa.DataType) -> str:
    # delta-rs hands back timestamps with tz "UTC", strings as large/view strings, and names list
    # items "element" where Arrow says "item": compare the types, not those spellings.
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_list_view(t):
        return f"list<{_type_name(t.value_type)}>"
    if pa.types.is_struct(t):
        return "struct<" + ",".join(f"{f.name}:{_type_name(f.type)}" for f in t) + ">"
    if pa.types.is_timestamp(t):
        return "timestamp"
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return "string"
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_binary_view(t):
        return "binary"
    return str(t)


def schema_differences(spec: TableSpec, table: DeltaTable) -> list[str]:
    """How the existing table differs from the spec in ways the stream cannot follow (columns,
    types, partitioning); a nullable column the table has beside the declared ones is no difference."""
    actual = pa.schema(table.schema().to_arrow())
    expected = spec.schema
    diffs = []
    actual_types = {f.name: _type_name(f.type) for f in actual}
    for f in expected:
        if f.name not in actual_types:
            diffs.append(f"column '{f.name}' is missing from the table")
        elif actual_types[f.name] != _type_name(f.type):
            diffs.append(
                f"column '{f.name}' is {actual_types[f.name]} in the table, {_type_name(f.type)} in the config"
            )
    # A nullable column another writer added is followed: the stream writes null into it.
    diffs.extend(f"table has column '{f.name}' (NOT NULL) that the config does not declare: the stream cannot "
                 "write it" for f in actual if f.name not in set(expected.names) and not f.nullable)  # fmt: skip
    partitions = tuple(table.metadata().partition_columns)
    if partitions != spec.partition_by:
        diffs.append(f"table is partitioned by {list(partitions)}, config says {list(spec.partition_by)}")
    return diffs


def check_schema(location: DeltaLocation, spec: TableSpec) -> DeltaTable | None:
    """The existing table if it matches ``spec``; None if there is no table yet.

    Raises:
        SchemaMismatchError: the table exists and differs from ``spec`` (every difference named).
    """
    try:
        table = location.open()
    except TableNotFoundError:
        return None
    diffs = schema_differences(spec, table)
    if diffs:
        raise SchemaMismatchError(location.uri, diffs)
    return table


def create_table(spark: SparkSession, location: DeltaLocation, spec: TableSpec, *,
                 properties: dict[str, str] | None = None) -> None:  # fmt: skip
    """Create the table with delta-spark unless it exists; a concurrent creator may win the race."""
    from delta.tables import DeltaTable as SparkDeltaTable
    from pyspark.sql.types import StructType

    if check_schema(location, spec) is not None:
        return
    schema = StructType.fromDDL(spec.ddl)
    assert isinstance(schema, StructType)
    builder = SparkDeltaTable.createIfNotExists(spark).location(location.uri).addColumns(schema)
    if spec.partition_by:
        builder = builder.partitionedBy(*spec.partition_by)
    for key, value in (properties or {}).items():
        builder = builder.property(key, value)
    try:
        builder.execute()
    except Exception:
        # Another process created it first (version 0 exists): fine if it matches the spec.
        if check_schema(location, spec) is None:
            raise

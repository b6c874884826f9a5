"""The Delta tables lakecluster writes: what they must look like, opening, checking, creating.

Reads and checks go through delta-rs (``deltalake``): no JVM, so a command fails in a second on a
missing table or a schema mismatch, before Spark starts. Creation and every write go through
delta-spark, so Delta itself writes the log (stats, schema enforcement, checkpoints).
"""

from __future__ import annotations

import contextlib
import json
import os
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError as DeltaRsTableNotFound

from lakecluster import storage
from lakecluster.errors import SchemaMismatchError, TableNotFoundError, TableNotWritableError
from lakecluster.schema import ColumnSpec, arrow_schema, spark_sql_type
from lakecluster.uris import is_local, normalize

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# commitInfo.userMetadata of every lakecluster commit is a JSON object under this key.
METADATA_KEY = "lakecluster"


@dataclass(frozen=True)
class TableSpec:
    """What a Delta table must look like: its location, schema (Arrow and Spark DDL), partitioning."""

    uri: str
    schema: pa.Schema
    ddl: str
    partition_by: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "uri", normalize(self.uri))

    @classmethod
    def of_columns(cls, uri: str, columns: Sequence[ColumnSpec], partition_by: Sequence[str] = ()) -> TableSpec:
        """A table of declared columns; ``required`` columns are NOT NULL in the Delta schema."""
        ddl = ", ".join(f"`{c.name}` {spark_sql_type(c)}" + (" NOT NULL" if c.required else "") for c in columns)
        return cls(uri, arrow_schema(tuple(columns)), ddl, tuple(partition_by))


def open_table(uri: str, *, version: int | None = None) -> DeltaTable:
    """The Delta table at ``uri`` (delta-rs); :class:`TableNotFoundError` when there is none."""
    uri = normalize(uri)
    try:
        return DeltaTable(uri, version=version, storage_options=storage.delta_options(uri))
    except DeltaRsTableNotFound:
        raise TableNotFoundError(uri) from None


def table_exists(uri: str) -> bool:
    try:
        open_table(uri)
    except TableNotFoundError:
        return False
    return True


def check_writable(uri: str) -> None:
    """Fail early, with the path in the message, if the location cannot be written.

    Leaves nothing behind: Delta refuses to create a table in a directory that already holds
    other files, so a probe of a location without a table removes what it created.
    """
    fs, root = storage.filesystem(uri)
    created: list[str] = []
    if is_local(uri):
        path = root
        while not os.path.exists(path):
            created.append(path)
            path = os.path.dirname(path)
    probe = f"{root}/.lakecluster-write-probe-{uuid.uuid4().hex}"
    try:
        fs.create_dir(root, recursive=True)
        with fs.open_output_stream(probe) as out:
            out.write(b"ok")
        fs.delete_file(probe)
    except (OSError, pa.ArrowException) as e:
        raise TableNotWritableError(f"table location {uri} is not writable: {e}") from e
    finally:
        for path in created:  # deepest first
            with contextlib.suppress(OSError):
                os.rmdir(path)


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
    """How the existing table differs from the spec (columns, types, partitioning)."""
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
    diffs.extend(f"table has column '{n}' that the config does not declare" for n in actual.names
                 if n not in set(expected.names))  # fmt: skip
    partitions = tuple(table.metadata().partition_columns)
    if partitions != spec.partition_by:
        diffs.append(f"table is partitioned by {list(partitions)}, config says {list(spec.partition_by)}")
    return diffs


def check_schema(spec: TableSpec) -> DeltaTable | None:
    """The existing table if it matches ``spec``; None if there is no table yet."""
    try:
        table = open_table(spec.uri)
    except TableNotFoundError:
        return None
    diffs = schema_differences(spec, table)
    if diffs:
        raise SchemaMismatchError(spec.uri, diffs)
    return table


def create_table(spark: SparkSession, spec: TableSpec, *, properties: dict[str, str] | None = None) -> None:
    """Create the table with delta-spark unless it exists; a concurrent creator may win the race."""
    from delta.tables import DeltaTable as SparkDeltaTable
    from pyspark.sql.types import StructType

    if check_schema(spec) is not None:
        return
    schema = StructType.fromDDL(spec.ddl)
    assert isinstance(schema, StructType)
    builder = SparkDeltaTable.createIfNotExists(spark).location(spec.uri).addColumns(schema)
    if spec.partition_by:
        builder = builder.partitionedBy(*spec.partition_by)
    for key, value in (properties or {}).items():
        builder = builder.property(key, value)
    try:
        builder.execute()
    except Exception:
        # Another process created it first (version 0 exists): fine if it matches the spec.
        if check_schema(spec) is None:
            raise


def commit_metadata(table: DeltaTable, *, newest_first: bool = True, limit: int | None = None) -> Iterator[dict]:
    """(version, operation, lakecluster metadata) of commits that carry lakecluster metadata."""
    history = table.history(limit)
    for entry in history if newest_first else reversed(history):
        meta = parse_user_metadata(entry.get("userMetadata"))
        if meta is not None:
            yield {"version": entry.get("version"), "operation": entry.get("operation"), **meta}


def parse_user_metadata(text: Any) -> dict | None:
    if not isinstance(text, str) or METADATA_KEY not in text:
        return None
    try:
        data = json.loads(text)
    except ValueError:
        return None
    inner = data.get(METADATA_KEY) if isinstance(data, dict) else None
    return inner if isinstance(inner, dict) else None


def user_metadata(**fields: Any) -> str:
    return json.dumps({METADATA_KEY: fields}, sort_keys=True, separators=(",", ":"))


def last_commit_of(table: DeltaTable, predicate: Any, *, page: int = 200) -> dict | None:
    """The newest commit whose lakecluster metadata satisfies ``predicate``, scanning back.

    Reads commit infos newest first, in growing pages, until one matches or the log's history
    (within log retention) is exhausted.
    """
    limit = page
    seen = 0
    while True:
        history = table.history(limit)
        for entry in history[seen:]:
            meta = parse_user_metadata(entry.get("userMetadata"))
            if meta is not None and predicate(meta):
                return {"version": entry.get("version"), **meta}
        if len(history) < limit:
            return None
        seen, limit = len(history), limit * 4


def wait_for_version(uri: str, version: int, timeout_s: float) -> DeltaTable:
    """The table once it reaches ``version`` (tests and tools), or TimeoutError."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            table = open_table(uri)
            if table.version() >= version:
                return table
        except TableNotFoundError:
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"{uri} did not reach version {version} within {timeout_s:.0f}s")
        time.sleep(0.2)


def partition_columns(table: DeltaTable) -> Sequence[str]:
    return list(table.metadata().partition_columns)

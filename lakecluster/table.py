"""Delta table access through delta-rs: create or open, check the schema, commit files.

Spark computes and writes the Parquet files; the Delta transaction log is written here, on the
driver only (delta-rs panics in forked processes, and Spark's Python workers are forked).
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.fs as pafs
from deltalake import CommitProperties, DeltaTable, Transaction
from deltalake.exceptions import TableNotFoundError
from deltalake.transaction import AddAction

from lakecluster.errors import SchemaMismatchError, TableError, TableNotWritableError
from lakecluster.parquet_files import WrittenFile, filesystem

MAX_COMMIT_RETRIES = 20


@dataclass(frozen=True)
class TableSpec:
    """What a Delta table must look like: its location, Arrow schema and partition columns."""

    uri: str
    schema: pa.Schema
    partition_by: tuple[str, ...] = ()
    name: str | None = None


def check_writable(uri: str) -> None:
    """Fail early, with the path in the message, if the table location cannot be written."""
    fs, root = filesystem(uri)
    probe = f"{root}/_lakecluster/.write-probe-{uuid.uuid4().hex}"
    try:
        fs.create_dir(f"{root}/_lakecluster", recursive=True)
        with fs.open_output_stream(probe) as out:
            out.write(b"ok")
        fs.delete_file(probe)
    except (OSError, pa.ArrowException) as e:
        raise TableNotWritableError(f"table location {uri} is not writable: {e}") from e


def _type_name(t: pa.DataType) -> str:
    # delta-rs hands back timestamps with tz "UTC" and strings as large/view strings.
    if pa.types.is_timestamp(t):
        return "timestamp"
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return "string"
    return str(t)


def schema_differences(expected: pa.Schema, actual: pa.Schema) -> list[str]:
    diffs = []
    actual_types = {f.name: _type_name(f.type) for f in actual}
    for f in expected:
        if f.name not in actual_types:
            diffs.append(f"column '{f.name}' is missing from the table")
        elif actual_types[f.name] != _type_name(f.type):
            diffs.append(
                f"column '{f.name}' is {actual_types[f.name]} in the table, {_type_name(f.type)} in the config"
            )
    expected_names = set(expected.names)
    diffs.extend(f"table has column '{name}' that the config does not declare" for name in actual.names
                 if name not in expected_names)  # fmt: skip
    return diffs


def open_or_create(spec: TableSpec) -> DeltaTable:
    """Open the table, creating it if absent; raise if its schema or partitioning disagrees."""
    try:
        table = DeltaTable(spec.uri)
    except TableNotFoundError:
        check_writable(spec.uri)
        try:
            return DeltaTable.create(
                spec.uri, spec.schema, mode="ignore", partition_by=list(spec.partition_by) or None, name=spec.name
            )
        except OSError as e:
            raise TableNotWritableError(f"cannot create Delta table at {spec.uri}: {e}") from e
    actual = pa.schema(table.schema().to_arrow())
    diffs = schema_differences(spec.schema, actual)
    partitions = tuple(table.metadata().partition_columns)
    if partitions != spec.partition_by:
        diffs.append(f"table is partitioned by {list(partitions)}, config says {list(spec.partition_by)}")
    if diffs:
        raise SchemaMismatchError(spec.uri, diffs)
    return table


def add_actions(files: Iterable[WrittenFile], *, data_change: bool = True) -> list[AddAction]:
    now_ms = int(time.time() * 1000)
    return [AddAction(f.path, f.size, dict(f.partition_values), now_ms, data_change, f.stats) for f in files]


def commit_appends(
    table: DeltaTable,
    spec: TableSpec,
    files: Sequence[WrittenFile],
    *,
    app_id: str,
    app_version: int,
    metadata: Mapping[str, str] | None = None,
) -> int:
    """Append ``files`` in one commit, recording (app_id, app_version) as a Delta app transaction.

    The app transaction is what makes a replayed micro-batch idempotent: callers check
    :func:`committed_version` first. Appends never conflict with each other or with compaction
    (which only removes files and re-adds their rows), so delta-rs can retry on a newer snapshot.
    Returns the new table version.
    """
    try:
        table.create_write_transaction(
            add_actions(files),
            mode="append",
            schema=spec.schema,
            partition_by=list(spec.partition_by) or None,
            commit_properties=CommitProperties(
                app_transactions=[Transaction(app_id, app_version)],
                custom_metadata=dict(metadata or {}),
                max_commit_retries=MAX_COMMIT_RETRIES,
            ),
        )
    except OSError as e:
        raise TableError(f"commit to {spec.uri} failed: {e}") from e
    table.update_incremental()
    return table.version()


def committed_version(table: DeltaTable, app_id: str) -> int | None:
    """The last app-transaction version committed under ``app_id`` (after refreshing), or None."""
    table.update_incremental()
    return table.transaction_version(app_id)


def referenced_paths(table: DeltaTable) -> set[str]:
    actions = table.get_add_actions(flatten=True)
    return set(pa.table(actions)["path"].to_pylist()) if actions.num_rows else set()


def remove_orphans(table: DeltaTable, uri: str, *, name_prefix: str, min_age_s: float = 0.0) -> list[str]:
    """Delete data files named ``part-<name_prefix>...`` that the log does not reference.

    Used by a writer on start-up for its own leftovers (files written by an attempt that crashed
    before its commit); the name prefix keeps it away from other writers' files in flight.
    """
    fs, root = filesystem(uri)
    selector = pafs.FileSelector(root, recursive=True, allow_not_found=True)
    referenced = referenced_paths(table)
    removed = []
    for info in fs.get_file_info(selector):
        if info.type != pafs.FileType.File:
            continue
        rel = os.path.relpath(info.path, root).replace(os.sep, "/")
        if rel.startswith("_") or not os.path.basename(rel).startswith(f"part-{name_prefix}"):
            continue
        # min_age_s spares files another process with the same prefix may be writing right now
        old_enough = info.mtime is None or time.time() - info.mtime.timestamp() >= min_age_s
        if rel not in referenced and old_enough:
            fs.delete_file(info.path)
            removed.append(rel)
    return removed

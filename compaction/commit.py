"""Commit a rewrite atomically, beside a busy stream, and never twice — through Delta itself.

One Delta transaction (delta-spark's ``OptimisticTransaction``, reached through py4j) removes the
group's input files and adds the output files, all with ``dataChange=false``, as operation
``OPTIMIZE`` with its operation metrics; lakecluster's own details (curve, columns, levels,
generation, attempt id) go into ``userMetadata``. Delta's conflict checker does the rest: stream
appends never conflict with it, a concurrent transaction that removed one of our input files makes
it fail (``ConcurrentDeleteDeleteException``), and the LogStore makes the commit itself atomic
between processes (``lakecluster/jvm/ConditionalCreateLogStore.java``).

Before committing, every output file must exist with the size its writer reported, and every input
file must still be live in the snapshot the transaction starts from (Delta checks removes against
concurrent commits, not against older ones). If the commit call fails in a way that leaves the
outcome unknown (the log entry may have been written), the log is read for the attempt id before
anything is decided: a rewrite that landed is never reported as failed, and output files are never
deleted here — unreferenced files are vacuum's job, after the retention period.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql import SparkSession

from lakecluster import delta_txn, storage
from lakecluster.compaction.planner import Group
from lakecluster.errors import CompactionConflictError, TableError
from lakecluster.faults import fail_point
from lakecluster.parquet_files import WrittenFile
from lakecluster.table import METADATA_KEY, open_table, parse_user_metadata, user_metadata

log = logging.getLogger(__name__)

_CONFLICTS = ("ConcurrentDeleteDeleteException", "ConcurrentDeleteReadException", "ConcurrentTransactionException",
              "MetadataChangedException", "ProtocolChangedException")  # fmt: skip


@dataclass(frozen=True)
class CommitResult:
    version: int
    attempt: str
    resolved_from_log: bool = False  # the commit call failed, but the log shows it landed


def _remove_json(f: Any, now_ms: int) -> str:
    return json.dumps({"remove": {
        "path": f.path, "deletionTimestamp": now_ms, "dataChange": False, "extendedFileMetadata": True,
        "partitionValues": dict(f.partition_values), "size": f.size,
    }})  # fmt: skip


def verify_outputs(table_uri: str, written: Sequence[WrittenFile]) -> None:
    """Every output file exists with the size its writer reported (or the rewrite is abandoned)."""
    fs, root = storage.filesystem(table_uri)
    infos = fs.get_file_info([f"{root}/{f.path}" for f in written])
    for f, info in zip(written, infos, strict=True):
        if info.size is None or info.size != f.size:
            raise CompactionConflictError(
                f"output file {f.path} is missing or has {info.size} bytes instead of {f.size}; "
                "the rewrite is abandoned (nothing was committed)"
            )


def _live_at(table_uri: str, version: int, paths: Sequence[str]) -> list[str]:
    """Which of ``paths`` are not live at ``version``."""
    table = open_table(table_uri, version=version)
    actions = table.get_add_actions(flatten=True)
    live = set(actions.column("path").to_pylist()) if actions.num_rows else set()
    return [p for p in paths if p not in live]


def find_attempt(table_uri: str, attempt: str, after_version: int) -> int | None:
    """The version whose commit carries this attempt id, if one after ``after_version`` does."""
    table = open_table(table_uri)
    newer = table.version() - after_version
    if newer <= 0:
        return None
    for entry in table.history(newer):
        meta = parse_user_metadata(entry.get("userMetadata"))
        if meta is not None and meta.get("attempt") == attempt:
            return int(entry["version"])
    return None


def commit_rewrite(
    spark: SparkSession,
    table_uri: str,
    group: Group,
    written: Sequence[WrittenFile],
    *,
    metadata: Mapping[str, str],
    zorder_by: Sequence[str] = (),
    gone_since: Callable[[int, Sequence[str]], list[str]] | None = None,
) -> CommitResult:
    """Swap the group's files for ``written`` in one Delta transaction; returns the new version.

    ``gone_since(version, paths)`` names the paths not live at ``version`` (answering from a later
    version is conservative: a file removed since then is named too); by default a snapshot of the
    table at the transaction's read version answers.
    """
    verify_outputs(table_uri, written)
    jvm = spark._jvm  # type: ignore[attr-defined]
    assert jvm is not None
    delta = jvm.org.apache.spark.sql.delta
    attempt = uuid.uuid4().hex
    delta_log = delta.DeltaLog.forTable(spark._jsparkSession, table_uri)  # type: ignore[attr-defined]
    txn = delta_log.startTransaction()
    read_version = int(txn.readVersion())
    inputs = [f.path for f in group.files]
    gone = gone_since(read_version, inputs) if gone_since is not None else _live_at(table_uri, read_version, inputs)
    if gone:
        raise CompactionConflictError(
            f"{len(gone)} input file(s) of the group are no longer in the table at version {read_version} "
            f"(another compactor rewrote them), e.g. {gone[0]}; the rewrite is abandoned"
        )
    now_ms = int(time.time() * 1000)
    lines = [_remove_json(f, now_ms) for f in group.files]
    lines += [delta_txn.add_json(f, now_ms, data_change=False) for f in written]
    sizes = sorted(f.size for f in written) or [0]
    delta_txn.register_metrics(spark, txn, {
        "numRemovedFiles": len(group.files), "numAddedFiles": len(written),
        "numRemovedBytes": sum(f.size for f in group.files), "numAddedBytes": sum(f.size for f in written),
        "minFileSize": sizes[0], "maxFileSize": sizes[-1], "p50FileSize": sizes[len(sizes) // 2],
        "p25FileSize": sizes[len(sizes) // 4], "p75FileSize": sizes[(3 * len(sizes)) // 4],
    })  # fmt: skip
    operation = getattr(delta, "DeltaOperations$Optimize")(
        delta_txn.seq(jvm, []), delta_txn.seq(jvm, list(zorder_by)), False, jvm.scala.Option.empty(), False
    )
    meta_text = user_metadata(**dict(metadata), attempt=attempt)
    previous = spark.conf.get("spark.databricks.delta.commitInfo.userMetadata", None)
    # A transaction takes its userMetadata from this setting of the thread's active session; the
    # compactor runs on its own session (SparkSession.newSession), so the stream's commits never
    # pick it up.
    jvm.org.apache.spark.sql.SparkSession.setActiveSession(spark._jsparkSession)  # type: ignore[attr-defined]
    spark.conf.set("spark.databricks.delta.commitInfo.userMetadata", meta_text)
    try:
        tags = delta_txn.scala_map(jvm, {METADATA_KEY + ".attempt": attempt})
        version = int(txn.commit(delta_txn.actions(jvm, lines), operation, tags))
        # The commit landed but its answer may not reach us (a connection reset): tests fail here.
        fail_point("compaction_after_commit_call")
        return CommitResult(version, attempt)
    except Exception as e:
        text = str(e)
        first = delta_txn.first_line(text)
        if any(name in text for name in _CONFLICTS):
            raise CompactionConflictError(f"another commit conflicted with the rewrite: {first}") from None
        landed = find_attempt(table_uri, attempt, read_version)
        if landed is not None:
            log.warning("commit call failed (%s) but attempt %s is in the log at version %d", first, attempt,
                        landed)  # fmt: skip
            return CommitResult(landed, attempt, resolved_from_log=True)
        raise TableError(f"compaction commit to {table_uri} failed (nothing was committed): {first}") from e
    finally:
        if previous is None:
            spark.conf.unset("spark.databricks.delta.commitInfo.userMetadata")
        else:
            spark.conf.set("spark.databricks.delta.commitInfo.userMetadata", previous)


"""Commit the files a micro-batch's tasks wrote: one Delta transaction per table, exactly once.

The transaction is delta-spark's own (``OptimisticTransaction``), as operation ``WRITE`` (append)
with the stream's app transaction ``(stream id, txn version)``, its ``userMetadata`` and Delta's
write metrics (``numFiles``, ``numOutputBytes``, ``numOutputRows``): to every reader, the log, the
history and the conflict checker, it is the commit ``df.write.format("delta").mode("append")
.option("txnAppId", ...).option("txnVersion", ...)`` makes. Inside the transaction:

* a txn version already recorded for the stream means the batch was committed before a restart:
  nothing is committed (Delta's own rule for idempotent writes);
* a table whose schema or features the task-written files do not honour (``append_blocker``) is
  not committed to: the sink writes that batch with Delta's writer instead;
* a second writer of the same stream id that commits first makes this commit fail (Delta's
  ``ConcurrentTransactionException``).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql import SparkSession

from lakecluster import delta_txn
from lakecluster.errors import TableError
from lakecluster.faults import fail_point
from lakecluster.parquet_files import WrittenFile

log = logging.getLogger(__name__)


class AppendBlocked(Exception):
    """The table needs Delta's own writer (its schema or features changed since the batch began)."""


@dataclass(frozen=True)
class AppendTarget:
    """A table the stream appends to, with the schema its task-written files have."""

    uri: str
    fields: tuple[dict, ...]  # the declared schema, as the log writes it
    partition_by: tuple[str, ...]

    @classmethod
    def of(cls, spark: SparkSession, uri: str, ddl: str, partition_by: Sequence[str]) -> AppendTarget:
        return cls(uri, delta_txn.expected_fields(spark._jvm, ddl), tuple(partition_by))  # type: ignore[attr-defined]

    def facts(self, spark: SparkSession) -> delta_txn.TableFacts:
        """What the newest snapshot says about the table."""
        jvm: Any = spark._jvm  # type: ignore[attr-defined]
        return delta_txn.TableFacts.of_transaction(jvm, _snapshot(spark, self.uri))

    def blocker(self, facts: delta_txn.TableFacts) -> str | None:
        """Why a snapshot with these facts cannot take task-written files (None: it can)."""
        return delta_txn.append_blocker(facts, self.fields, self.partition_by)

    @property
    def data_columns(self) -> list[str]:
        """The columns of its data files (partition values live in the log)."""
        return [f["name"] for f in self.fields if f["name"] not in self.partition_by]


@dataclass(frozen=True)
class Appended:
    version: int | None  # None: the txn version was already committed, nothing was
    files: int
    bytes: int


def commit_append(
    spark: SparkSession,
    target: AppendTarget,
    files: Sequence[WrittenFile],
    *,
    app_id: str,
    txn_version: int,
    user_metadata: str,
) -> Appended:
    """Append ``files`` with the app transaction ``(app_id, txn_version)``, once."""
    jvm = spark._jvm  # type: ignore[attr-defined]
    assert jvm is not None
    delta = jvm.org.apache.spark.sql.delta
    txn = delta.DeltaLog.forTable(spark._jsparkSession, target.uri).startTransaction()  # type: ignore[attr-defined]
    if int(txn.txnVersion(app_id)) >= txn_version:
        return Appended(None, 0, 0)
    blocker = delta_txn.append_blocker(delta_txn.TableFacts.of_transaction(jvm, txn), target.fields,
                                       target.partition_by)  # fmt: skip
    if blocker is not None:
        raise AppendBlocked(blocker)
    now_ms = int(time.time() * 1000)
    lines = [delta_txn.add_json(f, now_ms, data_change=True) for f in files]
    lines.append(json.dumps({"txn": {"appId": app_id, "version": txn_version, "lastUpdated": now_ms}}))
    size = sum(f.size for f in files)
    delta_txn.register_metrics(spark, txn, {
        "numFiles": len(files), "numOutputBytes": size, "numOutputRows": sum(f.num_records for f in files),
    })  # fmt: skip
    some = jvm.scala.Some
    none = jvm.scala.Option.empty()
    operation = getattr(delta, "DeltaOperations$Write")(
        jvm.org.apache.spark.sql.SaveMode.Append, some(delta_txn.seq(jvm, list(target.partition_by))), none,
        some(user_metadata), none, none, none, none, none,
    )  # fmt: skip
    try:
        version = int(txn.commit(delta_txn.actions(jvm, lines), operation))
        fail_point("stream_after_append_call")
        return Appended(version, len(files), size)
    except Exception as e:
        text = str(e)
        first = delta_txn.first_line(text)
        if "MetadataChangedException" in text or "ProtocolChangedException" in text:
            raise AppendBlocked(f"the table's metadata changed during the batch: {first}") from None
        landed = _recorded_txn(spark, target.uri, app_id)
        if landed >= txn_version:
            log.warning("append to %s failed (%s) but txn %d of %s is in the log", target.uri, first,
                        txn_version, app_id)  # fmt: skip
            return Appended(-1, len(files), size)
        raise TableError(f"append to {target.uri} failed (nothing was committed): {first}") from e


def _recorded_txn(spark: SparkSession, uri: str, app_id: str) -> int:
    found = _snapshot(spark, uri).transactions().get(app_id)
    return int(found.get()) if found.isDefined() else -1


def _snapshot(spark: SparkSession, uri: str) -> Any:
    """The table's newest snapshot (Delta reads only the commits since the one it holds)."""
    jvm: Any = spark._jvm  # type: ignore[attr-defined]
    delta_log = jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, uri)  # type: ignore[attr-defined]
    return delta_log.update(False, jvm.scala.Option.empty(), jvm.scala.Option.empty())


"""A micro-batch's append: the files its tasks wrote, committed to one table exactly once — a plan
for the commit protocol (``lakecluster.commit``).

The commit is operation ``WRITE`` (append) with the stream's app transaction ``(stream id, txn
version)``, its ``userMetadata`` and Delta's write metrics (``numFiles``, ``numOutputBytes``,
``numOutputRows``): to every reader, the log, the history and the conflict checker, it is the
commit ``df.write.format("delta").mode("append").option("txnAppId", ...).option("txnVersion", ...)``
makes. On the transaction's snapshot:

* a txn version already recorded for the stream means the batch was committed before a restart:
  nothing is committed (Delta's own rule for idempotent writes);
* a table whose schema or features the task-written files do not honour (``append_blocker``) is
  not committed to: the sink writes that batch with Delta's writer instead (:class:`AppendBlocked`);
* a second writer of the same stream id that commits first makes this commit fail (Delta's
  ``ConcurrentTransactionException``); a commit call that fails without saying whether it landed
  is resolved from the log by the app transaction.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from lakecluster import delta_txn
from lakecluster.checkpoints import BackgroundCheckpoints
from lakecluster.commit import Committed, Transaction, commit
from lakecluster.parquet_files import WrittenFile
from lakecluster.table import DeltaLocation

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


class AppendBlocked(Exception):
    """The table needs Delta's own writer (its schema or features changed since the batch began)."""


@dataclass(frozen=True)
class AppendTarget:
    """A table the stream appends to, with the schema its task-written files have."""

    location: DeltaLocation
    fields: tuple[dict, ...]  # the declared schema, as the log writes it
    partition_by: tuple[str, ...]

    @classmethod
    def of(cls, spark: SparkSession, location: DeltaLocation, ddl: str, partition_by: Sequence[str]) -> AppendTarget:
        return cls(location, delta_txn.expected_fields(spark._jvm, ddl), tuple(partition_by))  # type: ignore[attr-defined]

    def facts(self, spark: SparkSession) -> delta_txn.TableFacts:
        """What the newest snapshot says about the table."""
        return table_facts(spark, self.location)

    def blocker(self, facts: delta_txn.TableFacts) -> str | None:
        """Why a snapshot with these facts cannot take task-written files (None: it can)."""
        return delta_txn.append_blocker(facts, self.fields, self.partition_by)

    @property
    def data_columns(self) -> list[str]:
        """The columns of its data files (partition values live in the log)."""
        return [f["name"] for f in self.fields if f["name"] not in self.partition_by]


def table_facts(spark: SparkSession, location: DeltaLocation) -> delta_txn.TableFacts:
    """What the newest snapshot of the table at ``location`` says about it (delta-spark's)."""
    jvm: Any = spark._jvm  # type: ignore[attr-defined]
    delta_log = jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession,  # type: ignore[attr-defined]
                                                                 location.uri)  # fmt: skip
    snapshot = delta_log.update(False, jvm.scala.Option.empty(), jvm.scala.Option.empty())
    return delta_txn.TableFacts.of_transaction(jvm, snapshot)


class KnownFacts:
    """The facts of the tables a stream appends to, read again only when a table's version has
    moved since: a version's metadata and protocol never change (and the commit checks them
    again on its own snapshot, whatever these say)."""

    def __init__(self) -> None:
        self._seen: dict[str, tuple[int, delta_txn.TableFacts]] = {}  # table uri -> (version, facts)

    def of(self, spark: SparkSession, target: AppendTarget, version: int | None) -> delta_txn.TableFacts:
        """``target``'s facts at ``version`` (None: unknown, read them)."""
        seen = self._seen.get(target.location.uri)
        if version is not None and seen is not None and seen[0] == version:
            return seen[1]
        facts = target.facts(spark)
        if version is not None:
            self._seen[target.location.uri] = (version, facts)
        return facts


@dataclass(frozen=True)
class AppendCommit:
    """The commit of one micro-batch's files to one table (a :class:`~lakecluster.commit.CommitPlan`)."""

    target: AppendTarget
    files: Sequence[WrittenFile]
    app_id: str
    txn_version: int
    details: Mapping[str, Any]  # the batch's userMetadata fields
    fail_point: str = "stream_after_append_call"

    @property
    def location(self) -> DeltaLocation:
        return self.target.location

    @property
    def what(self) -> str:
        return f"txn {self.txn_version} of {self.app_id}"

    def precheck(self, txn: Transaction) -> bool:
        if txn.app_version(self.app_id) >= self.txn_version:
            return False
        blocker = self.target.blocker(txn.facts())
        if blocker is not None:
            raise AppendBlocked(blocker)
        return True

    def actions(self, now_ms: int) -> list[str]:
        txn = {"txn": {"appId": self.app_id, "version": self.txn_version, "lastUpdated": now_ms}}
        return [*(delta_txn.add_json(f, now_ms, data_change=True) for f in self.files), json.dumps(txn)]

    def operation(self, jvm: Any) -> Any:
        some, none = jvm.scala.Some, jvm.scala.Option.empty()
        write = getattr(jvm.org.apache.spark.sql.delta, "DeltaOperations$Write")
        # userMetadata (4th) stays empty: the protocol sets it for every commit the same way.
        return write(jvm.org.apache.spark.sql.SaveMode.Append, some(delta_txn.seq(jvm, list(self.target.partition_by))),
                     none, none, none, none, none, none, none)  # fmt: skip

    def metrics(self) -> dict[str, int]:
        return {"numFiles": len(self.files), "numOutputBytes": sum(f.size for f in self.files),
                "numOutputRows": sum(f.num_records for f in self.files)}  # fmt: skip

    def metadata(self) -> Mapping[str, Any]:
        return self.details

    def refused(self, text: str) -> Exception | None:
        if "MetadataChangedException" in text or "ProtocolChangedException" in text:
            return AppendBlocked(f"the table's metadata changed during the batch: {delta_txn.first_line(text)}")
        return None

    def landed_in(self, actions: Sequence[dict]) -> bool:
        return any(isinstance(t := a.get("txn"), dict) and t.get("appId") == self.app_id
                   and t.get("version") == self.txn_version for a in actions)  # fmt: skip


@dataclass(frozen=True)
class Appended:
    version: int | None  # None: the txn version was already committed, nothing was
    files: int
    bytes: int


def commit_append(spark: SparkSession, target: AppendTarget, files: Sequence[WrittenFile], *, app_id: str,
                  txn_version: int, details: Mapping[str, Any],
                  checkpoints: BackgroundCheckpoints | None = None) -> Appended:  # fmt: skip
    """Append ``files`` with the app transaction ``(app_id, txn_version)``, once.

    Raises:
        AppendBlocked: the table needs Delta's own writer; nothing was committed.
        TableError: the commit failed (nothing was committed, or the log could not tell).
    """
    committed: Committed = commit(spark, AppendCommit(target, files, app_id, txn_version, details),
                                  checkpoints=checkpoints)  # fmt: skip
    if committed.version is None:
        return Appended(None, 0, 0)
    return Appended(committed.version, len(files), sum(f.size for f in files))

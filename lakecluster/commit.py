"""One commit protocol for every writer of lakecluster: the stream's appends (table and quarantine)
and the compactor's rewrites. (Vacuum is Delta's own ``VACUUM``.)

Every commit goes through delta-spark's own ``OptimisticTransaction``, reached through py4j, so
Delta writes the log: conflict checks, checkpoints, row tracking, in-commit timestamps, and the
LogStore that makes the commit atomic between processes. (A writer may have its checkpoints
written beside it instead of inside the commit call: ``checkpoints``, ``lakecluster/checkpoints.py``.)
A writer describes its commit as a :class:`CommitPlan`; :func:`commit` does the same steps for all
of them:

1. start a transaction: the snapshot it reads is the newest one (Delta reads only new commits);
2. ``precheck`` it: is this commit still wanted (an app transaction already recorded means a
   replay: nothing is committed), still possible (inputs still live, a table the files fit)?
3. the plan's actions, its operation metrics and its ``userMetadata`` (always through the
   session's ``spark.databricks.delta.commitInfo.userMetadata``, on the calling thread's session);
4. commit;
5. when the commit call fails, a failure the plan recognises (a conflict) means nothing was
   committed; any other leaves the outcome unknown, and one resolver reads the commits after the
   snapshot for the plan's own mark (its app transaction, its attempt id) before anything is
   decided: a commit that landed is never reported as failed, nor made twice.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from lakecluster import delta_txn
from lakecluster.errors import TableError
from lakecluster.faults import fail_point, pause_point
from lakecluster.table import DeltaLocation, LogGap, parse_user_metadata, user_metadata

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from lakecluster.checkpoints import BackgroundCheckpoints

log = logging.getLogger(__name__)

USER_METADATA_CONF = "spark.databricks.delta.commitInfo.userMetadata"


@dataclass(frozen=True)
class Committed:
    """What became of a commit: its version, or ``None`` when the plan needed none (a replay)."""

    version: int | None
    resolved_from_log: bool = False  # the commit call failed, but the log shows it landed


class Transaction:
    """The started transaction a plan's precheck sees: its snapshot, through py4j."""

    def __init__(self, jvm: Any, txn: Any) -> None:
        self.jvm = jvm
        self.txn = txn
        self.read_version = int(txn.readVersion())

    def app_version(self, app_id: str) -> int:
        """The newest txn version the snapshot recorded for ``app_id`` (-1: none); the transaction
        then conflicts with any concurrent commit of ``app_id`` (Delta's idempotent writes).

        Delta 4.4's ``txnVersion`` reconstructs the snapshot's state for it, a Spark job (about a
        second on 2 cores) on every new snapshot, that is on every micro-batch. The snapshot's
        checksum file (``.crc``, written on commit with its set transactions, see
        ``spark.databricks.delta.setTransactionsInCrc.writeOnCommit``) holds the same answer: it is
        read from there when present, and the app id is registered as read exactly as
        ``txnVersion`` does, so the conflict check is the same.
        """
        recorded = self._checksum_transactions()
        if recorded is None:
            return int(self.txn.txnVersion(app_id))
        self.txn.readTxn().addOne(app_id)
        return recorded.get(app_id, -1)

    def _checksum_transactions(self) -> dict[str, int] | None:
        """appId -> version from the snapshot's checksum; None when it has no checksum or no
        set transactions in it (too many to keep there, or written without them)."""
        checksum = self.txn.snapshot().checksumOpt()
        if not checksum.isDefined():
            return None
        kept = checksum.get().setTransactions()
        if not kept.isDefined():
            return None
        converters = self.jvm.scala.jdk.javaapi.CollectionConverters
        return {str(t.appId()): int(t.version()) for t in converters.asJava(kept.get())}

    def facts(self) -> delta_txn.TableFacts:
        """Schema, partitioning, properties and writer features of the snapshot."""
        return delta_txn.TableFacts.of_transaction(self.jvm, self.txn)


class CommitPlan(Protocol):
    """One writer's commit: what it adds and removes, how it is marked, and when it is refused."""

    @property
    def location(self) -> DeltaLocation:
        """The table committed to."""
        ...

    @property
    def what(self) -> str:
        """The commit, for messages: ``txn 7 of stream-x``, ``rewrite attempt 3f2a...``."""
        ...

    @property
    def fail_point(self) -> str:
        """Where tests make the commit call fail after the commit landed (``lakecluster.faults``)."""
        ...

    def precheck(self, txn: Transaction) -> bool:
        """Whether to commit on this snapshot: False when nothing needs committing (the commit
        was made before); raises when the commit must not be made (the reason in the error)."""
        ...

    def actions(self, now_ms: int) -> Sequence[str]:
        """The commit's actions as Delta log JSON lines (``add``, ``remove``, ``txn``)."""
        ...

    def operation(self, jvm: Any) -> Any:
        """The Delta operation recorded in the commit info (``WRITE``, ``OPTIMIZE``)."""
        ...

    def metrics(self) -> Mapping[str, int]:
        """Operation metrics Delta records with the operation."""
        ...

    def metadata(self) -> Mapping[str, Any]:
        """lakecluster's fields of the commit's ``userMetadata``."""
        ...

    def refused(self, text: str) -> Exception | None:
        """The error to raise when a failed commit call's text means nothing was committed (a
        conflict the plan knows); None: the outcome is unknown."""
        ...

    def landed_in(self, actions: Sequence[dict]) -> bool:
        """Whether a commit's actions are this commit (its app transaction, its attempt id)."""
        ...


def commit(spark: SparkSession, plan: CommitPlan, *, checkpoints: BackgroundCheckpoints | None = None) -> Committed:
    """Make ``plan``'s commit once, following the protocol above.

    With ``checkpoints``, a Delta checkpoint the commit is due is written by them, beside the
    caller, instead of inside the commit call (``lakecluster/checkpoints.py``).

    Returns:
        The committed version (or ``None``: the precheck found it made before).

    Raises:
        Exception: what the plan's precheck raises, or its ``refused`` error for a conflict.
        TableError: the commit failed and the log shows it did not land (or cannot tell).
    """
    jvm: Any = spark._jvm  # type: ignore[attr-defined]
    delta_log = jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession,  # type: ignore[attr-defined]
                                                                 plan.location.uri)  # fmt: skip
    txn = Transaction(jvm, delta_log.startTransaction())
    if not plan.precheck(txn):
        return Committed(None)
    pause_point("commit_transaction_started")  # tests: another writer commits inside the transaction
    detached = checkpoints is not None and checkpoints.detach_hook(txn.txn)
    lines = plan.actions(int(time.time() * 1000))
    delta_txn.register_metrics(spark, txn.txn, plan.metrics())
    with _user_metadata(spark, user_metadata(**dict(plan.metadata()))):
        try:
            version = int(txn.txn.commit(delta_txn.actions(jvm, lines), plan.operation(jvm),
                                         delta_txn.scala_map(jvm, {})))  # fmt: skip
            if detached:
                assert checkpoints is not None
                checkpoints.committed(delta_log, txn.txn, plan.location.uri, version)
            # The commit landed but its answer may not reach us (a connection reset): tests fail here.
            fail_point(plan.fail_point)
            return Committed(version)
        except Exception as e:
            text = str(e)
            first = delta_txn.first_line(text)
            refusal = plan.refused(text)
            if refusal is not None:
                raise refusal from None
            landed, certain = _find(plan, txn.read_version)
            if landed is not None:
                log.warning("commit call failed (%s) but %s is in the log at version %d", first, plan.what, landed)
                return Committed(landed, resolved_from_log=True)
            outcome = "nothing was committed" if certain else "the log could not tell whether it landed"
            raise TableError(f"{plan.what} to {plan.location.uri} failed ({outcome}): {first}") from e


def marked(actions: Sequence[dict], key: str, value: str) -> bool:
    """Whether a commit's actions carry ``key`` = ``value`` in lakecluster's ``userMetadata`` (a
    plan's own mark, for :meth:`CommitPlan.landed_in`)."""
    for action in actions:
        info = action.get("commitInfo")
        if isinstance(info, dict):
            meta = parse_user_metadata(info.get("userMetadata"))
            return meta is not None and meta.get(key) == value
    return False


def _find(plan: CommitPlan, after: int) -> tuple[int | None, bool]:
    """The outcome-unknown resolver: (the version of the plan's commit after ``after``, or None;
    whether the answer is certain: False when commits it needed are gone from the log)."""
    try:
        commits = plan.location.commits_after(after)
    except LogGap:
        return None, False
    for offset, actions in enumerate(commits, start=1):
        if plan.landed_in(actions):
            return after + offset, True
    return None, True


@contextlib.contextmanager
def _user_metadata(spark: SparkSession, text: str) -> Iterator[None]:
    """``text`` as the userMetadata of the transactions this thread commits meanwhile.

    A transaction takes it from this setting of the thread's active session; each service
    commits on a session of its own (the compactor's is ``SparkSession.newSession``), so another
    service's commits never pick it up.
    """
    jvm: Any = spark._jvm  # type: ignore[attr-defined]
    previous = spark.conf.get(USER_METADATA_CONF, None)
    jvm.org.apache.spark.sql.SparkSession.setActiveSession(spark._jsparkSession)  # type: ignore[attr-defined]
    spark.conf.set(USER_METADATA_CONF, text)
    try:
        yield
    finally:
        if previous is None:
            spark.conf.unset(USER_METADATA_CONF)
        else:
            spark.conf.set(USER_METADATA_CONF, previous)

"""Delta checkpoints written beside a writer, not in the middle of its commit.

Delta writes a checkpoint every ``delta.checkpointInterval`` commits (10 by default) inside the
commit call, after the commit file landed: a post-commit hook (``CheckpointHook``) on the
committing thread. The commit is visible before the checkpoint is written, but the writer waits
for it: the stream's next micro-batch starts seconds late every tenth batch (a checkpoint of a
small table took 2-6 s on 2 cores in bench/freshness.py, the freshness p99's tail). (At those
versions Delta's commit also computes the new snapshot's state for its commit statistics, a Spark
job of about a second that stays in the commit.)

A writer that hands its commits a :class:`BackgroundCheckpoints` takes the hook out of the
transaction before committing (``postCommitHooks`` is the transaction's own list, filled when it
starts) and, when the committed version is one Delta would have checkpointed, writes that same
checkpoint on a thread of its own while the writer goes on. Nothing about the log changes:

- the checkpoint is Delta's own (``DeltaLog.checkpoint`` of the snapshot at that version, what the
  hook calls), written through the table's LogStore, which never shows a reader a partial file;
- one that is never written (the process dies, the write fails) costs readers only a longer
  replay of JSON commits until the next one; Delta itself treats a failed checkpoint the same way;
- the thread writes one checkpoint at a time; a version due while one is being written replaces
  any older one still waiting (the newer checkpoint covers it).

:meth:`BackgroundCheckpoints.close` waits a bounded time for the one in flight, so a writer that
stops cleanly leaves the checkpoint it was due.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Any

from lakecluster.faults import pause_point

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)


def _scala_none(jvm: Any) -> Any:
    return getattr(getattr(jvm.scala, "None$"), "MODULE$")


class BackgroundCheckpoints:
    """Delta checkpoints of the versions a writer commits, written on one thread beside it."""

    def __init__(self, spark: SparkSession, name: str = "delta-checkpoints") -> None:
        self.spark = spark
        self.name = name
        self._lock = threading.Condition()
        self._pending: dict[str, int] = {}  # table uri -> newest version due
        self._thread: threading.Thread | None = None
        self._closed = False

    def detach_hook(self, txn: Any) -> bool:
        """Take Delta's checkpoint hook out of the started transaction ``txn``; False when the
        table checkpoints another way (then the hook stays and Delta checkpoints in the commit)."""
        jvm: Any = self.spark._jvm  # type: ignore[attr-defined]
        if self._manifest_checkpoints(jvm, txn):
            return False
        hook = getattr(getattr(jvm.org.apache.spark.sql.delta.hooks, "CheckpointHook$"), "MODULE$")
        hooks = txn.postCommitHooks()
        if not hooks.contains(hook):
            return False
        hooks.subtractOne(hook)
        return True

    @staticmethod
    def _manifest_checkpoints(jvm: Any, txn: Any) -> bool:
        """Whether the table writes its checkpoints as commits of their own (Delta's adaptive
        metadata tables): those are left to Delta's hook."""
        try:
            feature = getattr(getattr(jvm.org.apache.spark.sql.delta, "AdaptiveMetadataTableFeature$"), "MODULE$")
            return bool(txn.snapshot().protocol().isFeatureSupported(feature))
        except Exception:  # a Delta without the feature
            return False

    def committed(self, delta_log: Any, txn: Any, uri: str, version: int) -> None:
        """``txn`` (hook detached) committed ``version`` of the table at ``uri``: queue the
        checkpoint Delta would have written in the commit, if one is due."""
        interval = int(delta_log.checkpointInterval(txn.metadata()))
        if version <= 0 or interval <= 0 or version % interval:
            return
        with self._lock:
            if self._closed:
                return
            self._pending[uri] = max(version, self._pending.get(uri, -1))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
                self._thread.start()
            self._lock.notify_all()

    def _run(self) -> None:
        while True:
            with self._lock:
                while not self._pending and not self._closed:
                    self._lock.wait()
                if not self._pending:
                    return
                uri, version = self._pending.popitem()
            self._write(uri, version)

    def _write(self, uri: str, version: int) -> None:
        pause_point("background_checkpoint")
        jvm: Any = self.spark._jvm  # type: ignore[attr-defined]
        try:
            session = self.spark._jsparkSession  # type: ignore[attr-defined]
            jvm.org.apache.spark.sql.SparkSession.setActiveSession(session)
            delta_log = jvm.org.apache.spark.sql.delta.DeltaLog.forTable(session, uri)
            if delta_log.checkpointExistsAtVersion(version):
                return
            none = _scala_none(jvm)
            # At a checkpoint version Delta's commit computed the new snapshot's state already (its
            # commit statistics); checkpointing that same snapshot reads it from Spark's cache.
            snapshot = delta_log.unsafeVolatileSnapshot()
            if int(snapshot.version()) != version:
                snapshot = delta_log.getSnapshotAt(version, none, none, none, False)
            delta_log.checkpoint(snapshot, none)
            log.debug("checkpoint of %s at version %d written", uri, version)
        except Exception as e:  # a checkpoint not written: readers replay more commits, nothing is lost
            text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            log.warning("the Delta checkpoint of %s at version %d was not written (readers replay the commits "
                        "since the previous one until the next): %s", uri, version, text)  # fmt: skip

    def close(self, timeout_s: float) -> bool:
        """Write what is due and stop the thread, waiting at most ``timeout_s``; True when nothing
        is left (what is still running after that is left to finish or die with the process)."""
        with self._lock:
            self._closed = True
            self._lock.notify_all()
            thread = self._thread
        if thread is None:
            return True
        thread.join(timeout_s)
        if thread.is_alive():
            log.warning("a Delta checkpoint was still being written at the stop; it is left unfinished "
                        "(readers replay the commits since the previous one)")  # fmt: skip
            return False
        return True

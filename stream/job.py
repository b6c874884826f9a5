"""The streaming query's lifecycle: checks before Spark starts, one writer per stream, resume,
supervision (transient faults retried with backoff, fatal ones raised), clean stop."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any, NoReturn

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery

from lakecluster import metrics, progress, shutdown
from lakecluster.checkpoints import BackgroundCheckpoints
from lakecluster.config import Config
from lakecluster.errors import FatalServiceError, LakeclusterError, LeaseLostError
from lakecluster.health import HEALTH
from lakecluster.lease import Lease
from lakecluster.retry import FAULT_KINDS, Backoff, classify, first_line
from lakecluster.spark import get_session
from lakecluster.stream import resume
from lakecluster.stream.batch_task import QUARANTINE_DDL, QUARANTINE_SCHEMA
from lakecluster.stream.parse import REASON_CODES
from lakecluster.stream.sink import BatchReport, StreamSink
from lakecluster.stream.source import Source, open_source
from lakecluster.table import LakeTable, TableSpec, check_schema, create_table, stream_identity

log = logging.getLogger(__name__)


class _StopGate:
    """Lets a stop request wait for the micro-batch in progress instead of interrupting it."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._busy = False
        self.stopping = False

    def enter(self) -> None:
        with self._cond:
            if self.stopping:
                raise _StopRequested
            self._busy = True

    def leave(self) -> None:
        with self._cond:
            self._busy = False
            self._cond.notify_all()

    def request_stop(self, timeout: float | None = None) -> None:
        with self._cond:
            self.stopping = True
            self._cond.wait_for(lambda: not self._busy, timeout=timeout)

    def close(self) -> None:
        """No micro-batch starts after this one; callable from inside a micro-batch (it does not wait)."""
        with self._cond:
            self.stopping = True


class _StopRequested(Exception):
    """Raised into a micro-batch that would start after a stop was requested (it is replayed)."""


class _QuietStopRequested(logging.Filter):
    """py4j logs every exception of a Python callback (the micro-batch) with its trace. A failed
    batch fails the query, and the service reports it once, as one line; a requested stop is no
    failure at all. The trace stays visible at DEBUG (``--log-level DEBUG``)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and isinstance(record.exc_info[1], _StopRequested):
            return False
        if record.getMessage().startswith("There was an exception while executing the Python Proxy"):
            return logging.getLogger().isEnabledFor(logging.DEBUG)
        return True


logging.getLogger("py4j.clientserver").addFilter(_QuietStopRequested())


QUARANTINE_SPEC = TableSpec(QUARANTINE_SCHEMA, QUARANTINE_DDL)


def preflight(table: LakeTable, source: Source) -> None:
    """What can be checked before Spark starts: storage writable, the table's schema, the source
    (a broker answers, the topics exist)."""
    table.delta.check_writable()
    check_schema(table.delta, table.spec)
    if source.quarantines:
        table.quarantine.check_writable()
    source.check()


class StreamJob:
    """``lakecluster stream``: run the query until stopped, ``max_batches`` or caught up."""

    def __init__(
        self,
        config: Config,
        *,
        table: LakeTable | None = None,
        source: Source | None = None,
        spark: SparkSession | None = None,
        available_now: bool = False,
        max_batches: int | None = None,
        on_batch: Callable[[BatchReport], None] | None = None,
        index_sync: Callable[[LakeTable], object] | None = None,
    ) -> None:
        """A stream of ``config``'s source into its table.

        Args:
            config: the validated configuration.
            table: the table's handle (default: one built from ``config``).
            source: the source (default: ``open_source(config)``).
            spark: a session to run on (default: one built from ``spark.*`` at the start).
            available_now: process what the source holds at the start, then stop.
            max_batches: stop after this many micro-batches that read records.
            on_batch: called with every micro-batch's report.
            index_sync: brings the table's column-stats index up to date; called after every batch
                that committed rows when ``index.sync_after_stream`` is set.

        Raises:
            ConfigError: the source cannot honour the configuration.
        """
        self.config = config
        self.table = table or LakeTable(config)
        self.source = source or open_source(config)
        self.index_sync = index_sync
        self.available_now = available_now
        self.max_batches = max_batches
        self.on_batch = on_batch
        self._gate = _StopGate()
        self._spark = spark
        self._checkpoints: BackgroundCheckpoints | None = None
        self._lease: Lease | None = None  # held while the query runs
        self.reports: list[BatchReport] = []
        self.restarts = 0
        # Called once the tables exist and the query runs (``lakecluster run`` starts its compactor).
        self.on_started: Callable[[], None] | None = None
        HEALTH.register(HEALTH_NAME)
        # Every labelled series exists from the start, so rates and sums over them work at 0.
        for code in REASON_CODES:
            metrics.STREAM_QUARANTINED.labels(code)
        for kind in FAULT_KINDS:
            metrics.SERVICE_FAILURES.labels(HEALTH_NAME, kind)
        metrics.SERVICE_RESTARTS.labels(HEALTH_NAME)

    def _check_lease(self) -> None:
        """Before each commit: a process whose lease is lost (or not renewed in time) commits nothing."""
        if self._lease is not None and not self._lease.valid():
            self._gate.close()
            raise LeaseLostError(f"the stream's lease {self._lease.uri} is lost: this micro-batch is not committed")

    def _handle_batch(self, sink: StreamSink) -> Callable[[DataFrame, int], None]:
        def handle(df: DataFrame, batch_id: int) -> None:
            self._gate.enter()
            try:
                sink(df, batch_id)
            finally:
                self._gate.leave()

        return handle

    def _record(self, report: BatchReport) -> None:
        self.reports.append(report)
        HEALTH.ready(HEALTH_NAME)  # a micro-batch committed (or found committed already)
        if not report.skipped:
            observe_batch(report)
            if self.max_batches is not None and sum(not r.skipped for r in self.reports) >= self.max_batches:
                # Closed here, inside the batch: a watcher polling for the count would let the next
                # micro-batch start (and commit) before it noticed.
                self._gate.close()
        self.source.committed(report.offsets)
        if self.on_batch is not None:
            self.on_batch(report)

    def total_lag(self) -> int | None:
        """Records the source holds that the table has not committed, as last measured (None: unknown)."""
        return self.source.lag()

    def request_stop(self) -> None:
        """Finish the micro-batch in progress, then stop (safe from a signal handler thread); a
        micro-batch still running after ``stream.stop_timeout_s`` is abandoned (it is replayed)."""
        self._gate.request_stop(self.config.stream.stop_timeout_s)

    @property
    def stopping(self) -> bool:
        return self._gate.stopping

    def run(self) -> list[BatchReport]:
        """Check, create the tables, take the stream's lease and run the query until it stops.

        Returns:
            The report of every micro-batch, in order.

        Raises:
            LakeclusterError: a check before Spark starts failed (storage, schema, source), the
                lease is held by another process (``LeaseHeldError``), or a fault retrying
                cannot fix stopped the stream (``FatalServiceError``).
        """
        self._follow_identity()
        table, source = self.table, self.source
        preflight(table, source)
        spark = self._spark or get_session(self.config.spark, self.config.storage, s3=table.uses_s3)
        with progress.phase("opening the table"):
            # Before anything else writes under the table's directory: Delta creates a table only
            # where no other files are.
            create_table(spark, table.delta, table.spec)
            if source.quarantines:
                create_table(spark, table.quarantine, QUARANTINE_SPEC)
            lease = Lease.acquire(table.paths.lease(), f"stream {table.stream_id} into {table.uri}",
                                  storage=table.storage)  # fmt: skip
            stream_identity.write_record(self.config, table.paths.streams, table.stream_id)
        source.start(table)
        # A checkpoint a commit is due is written beside the next micro-batch, not before it starts.
        self._checkpoints = BackgroundCheckpoints(spark, name="stream-delta-checkpoints")
        try:
            # Also at a forced exit (shutdown.py): a restart need not wait for the lease to expire.
            self._lease = lease
            with shutdown.released_on_forced_exit(lease.release):
                self._supervise(spark, lease)
        finally:
            # A stop (a signal, a lost lease) does not wait long for it: a checkpoint left unwritten
            # costs readers a longer replay, and the stop keeps its bound.
            self._checkpoints.close(min(2.0, self.config.stream.stop_timeout_s) if self._gate.stopping
                                    else self.config.stream.stop_timeout_s)  # fmt: skip
            source.stop()
            lease.release()
        return self.reports

    def _follow_identity(self) -> None:
        """Continue the stream the table knows this source as (``lakecluster/table/stream_identity.py``):
        a table copied, restored or moved keeps its streams, whatever its path is spelled now.

        Raises:
            ConfigError: (``stream.id``) the table holds a stream this one may be under another id.
        """
        fs, streams = self.table.filesystem(self.table.paths.streams)
        location = self.table.delta

        def last_commit(stream_id: str) -> dict | None:
            return location.last_commit_of(lambda meta: meta.get("stream") == stream_id)

        resolved = stream_identity.resolve(self.config, stream_identity.read_records(fs, streams), last_commit)
        if resolved != self.table.paths.stream_id:  # every path of the stream (checkpoint, lease) under it
            log.warning("the table's stream of this source is %s (its id is derived from the table's path as it "
                        "was written when it began); continuing it", resolved)  # fmt: skip
            self.table.continue_stream(resolved)
            self.config = replace(self.config, stream=replace(self.config.stream, id=resolved))

    def _after_commit(self) -> Callable[[], object] | None:
        """The index sync after each batch, when ``index.sync_after_stream`` asks for it."""
        index, sync, table = self.config.index, self.index_sync, self.table
        if sync is None or not (index.enabled and index.sync_after_stream):
            return None
        return lambda: sync(table)

    def _start(self, spark: SparkSession) -> StreamingQuery:
        table, source = self.table, self.source
        start = resume.prepare(table, quarantine=source.quarantines, configured_offsets=source.configured_offsets(),
                               complete_offsets=source.resume_offsets())  # fmt: skip
        sink = StreamSink(table, source, spark, start, on_batch=self._record, after_commit=self._after_commit(),
                          checkpoints=self._checkpoints, before_commit=self._check_lease)  # fmt: skip
        writer = (
            source.frame(spark, start.starting_offsets if start.resumed_from == "table" else None)
            .writeStream.foreachBatch(self._handle_batch(sink))
            .option("checkpointLocation", table.paths.checkpoint)
            .queryName(f"lakecluster-stream-{table.stream_id}")
        )
        if self.available_now:
            writer = writer.trigger(availableNow=True)
        else:
            writer = writer.trigger(processingTime=f"{self.config.stream.trigger_interval_s} seconds")
        return writer.start()

    def _supervise(self, spark: SparkSession, lease: Lease) -> None:
        backoff = Backoff(self.config.retry)
        while True:
            if not lease.valid():  # lost during a retry's wait: start nothing
                self._lost(lease)
            query = self._start(spark)
            metrics.STREAM_PROGRESS.set(time.time())
            if self.on_started is not None:
                started, self.on_started = self.on_started, None
                started()
            progress_at_start = len(self.reports)
            failure = self._watch(query, lease)
            if failure is None:
                return
            if len(self.reports) > progress_at_start and backoff.in_episode:
                log.warning("stream recovered after %.0fs", backoff.reset())
            kind = classify(failure)
            delay = backoff.next_delay(kind)
            metrics.SERVICE_FAILURES.labels("stream", kind).inc()
            if delay is None:
                HEALTH.failed(HEALTH_NAME, f"{kind} fault: {first_line(failure)}")
                raise FatalServiceError(f"the stream stopped for good ({kind} fault): {first_line(failure)}")
            if backoff.attempts == 1:
                log.warning("stream failed (%s fault), retrying with backoff: %s", kind, first_line(failure))
            else:
                log.info("stream retry %d in %.1fs: %s", backoff.attempts, delay, first_line(failure))
            self.restarts += 1
            metrics.SERVICE_RESTARTS.labels("stream").inc()
            deadline = time.monotonic() + delay
            while time.monotonic() < deadline:
                if self._gate.stopping or not lease.valid():
                    break
                time.sleep(min(0.2, max(0.0, deadline - time.monotonic())))
            if self._gate.stopping and lease.valid():
                return

    def _watch(self, query: StreamingQuery, lease: Lease) -> str | None:
        """Wait for the query to end; None when it ended by a stop or ran out of work, else the failure."""
        source_wait = SourceWait(self.config.stream.source_wait_warning_s)
        try:
            while query.isActive:
                if self._gate.stopping or not lease.valid():  # stopping: also once max_batches ran (_record)
                    break
                try:
                    query.awaitTermination(0.2)  # type: ignore[arg-type]  # seconds; a float works
                except Exception:
                    break
                if source_wait.observe(query) == IDLE:
                    HEALTH.ready(HEALTH_NAME)  # nothing to read yet: the source is idle, the stream is up
        finally:
            source_wait.end()
            if query.isActive:
                if lease.lost.is_set():
                    # Another process may hold it now: no waiting for the micro-batch in flight
                    # (its commit checks the lease first and fails; a replay skips what it did commit).
                    self._gate.close()
                else:
                    # Abandoned after the timeout: its files were never committed (vacuum deletes
                    # them), and a commit it made is skipped when the batch is replayed.
                    self._gate.request_stop(self.config.stream.stop_timeout_s)
                query.stop()
        if lease.lost.is_set():
            self._lost(lease)
        exc = query.exception()
        if exc is None or self._gate.stopping:
            return None
        return _error_text(exc)

    @staticmethod
    def _lost(lease: Lease) -> NoReturn:
        HEALTH.failed(HEALTH_NAME, f"lost the stream's lease {lease.uri}")
        raise FatalServiceError(f"lost the stream's lease {lease.uri}: another process took it over, or it "
                                "could not be renewed in time (the log says which)")  # fmt: skip


HEALTH_NAME = "stream"


def observe_batch(report: BatchReport) -> None:
    """A micro-batch's report into the stream's metrics."""
    metrics.STREAM_BATCHES.inc()
    metrics.STREAM_ROWS.inc(report.rows)
    metrics.STREAM_RECORDS_READ.inc(report.rows + report.quarantined)
    for code, n in report.codes.items():
        metrics.STREAM_QUARANTINED.labels(code).inc(n)
    metrics.STREAM_FILES.inc(report.files)
    metrics.STREAM_BYTES_WRITTEN.inc(report.bytes_written)
    metrics.STREAM_INPUT_BYTES.inc(report.value_bytes)
    metrics.STREAM_BATCH_SECONDS.observe(report.seconds)
    metrics.TABLE_VERSION.set(report.table_version)
    metrics.STREAM_LAST_BATCH.set(report.committed_at or time.time())
    if report.rows or report.quarantined:
        metrics.STREAM_LAST_COMMIT.set(report.committed_at or time.time())
        metrics.STREAM_PROGRESS.set(report.committed_at or time.time())
    if report.sketches_at is not None:
        metrics.STREAM_SKETCHES_UPDATED.set(report.sketches_at)
    # Records without a broker timestamp (0) have no delay to measure.
    stamped = {s: n for s, n in report.timestamp_seconds.items() if s > 0}
    if stamped and report.committed_at:
        delays = [max(0.0, report.committed_at - s) for s in stamped]
        metrics.STREAM_DELAY.observe_many(delays, stamped.values())


# Spark's status message when a trigger found no new data in the source.
IDLE = "Waiting for data to arrive"


class SourceWait:
    """Reports a micro-batch stuck getting its source's offsets: Spark's Kafka source blocks while
    the brokers are unreachable (and fails only after several minutes), so without this an outage
    shows as nothing at all. Logged once per episode, counted, and a gauge is 1 meanwhile."""

    def __init__(self, warning_s: float) -> None:
        self.warning_s = warning_s
        self.since: float | None = None
        self.reported = False
        self._next_look = 0.0

    def observe(self, query: StreamingQuery) -> str | None:
        """Look at the query (at most once a second); returns its status message (None: not
        looked, or no status)."""
        now = time.monotonic()
        if now < self._next_look:
            return None
        self._next_look = now + 1.0
        try:
            status = query.status
        except Exception as e:  # the query ended meanwhile: the loop sees it next
            log.debug("no status from the query: %s", e)
            return None
        message = str(status.get("message", ""))
        waiting = bool(status.get("isTriggerActive")) and message.startswith("Getting offsets")
        if not waiting:
            if self.reported:
                log.warning("the stream's source answered again after %.0fs", now - (self.since or now))
            self.end()
            return message
        if self.since is None:
            self.since = now
        if not self.reported and now - self.since >= self.warning_s:
            self.reported = True
            metrics.STREAM_SOURCE_WAITS.inc()
            metrics.STREAM_WAITING.set(1)
            log.warning("the stream has waited %.0fs for its source (%s): are the brokers reachable?",
                        now - self.since, status.get("message"))  # fmt: skip
        return message

    def end(self) -> None:
        self.since, self.reported = None, False
        metrics.STREAM_WAITING.set(0)


def _error_text(exc: Any) -> str:
    """The failure's message and the JVM stack trace (with its causes), for classify()."""
    message = exc.getMessage() if hasattr(exc, "getMessage") else ""
    return f"{exc}\n{message}"


def progress_printer(start: float | None = None, lag: Callable[[], int | None] | None = None,
                     ) -> Callable[[BatchReport], None]:  # fmt: skip
    """A line per micro-batch on stdout: its rows, rows/s, files and quarantined records, the totals,
    and the consumer lag (records not yet committed) when ``lag`` knows it."""
    t0 = start or time.monotonic()
    totals = {"rows": 0, "quarantined": 0, "files": 0}

    def show(r: BatchReport) -> None:
        totals["rows"] += r.rows
        totals["quarantined"] += r.quarantined
        totals["files"] += r.files
        rate = r.rows / r.seconds if r.seconds > 0 else 0.0
        elapsed = time.monotonic() - t0
        behind = lag() if lag is not None else None
        print(
            f"batch {r.batch_id:>6}  rows {r.rows:>9,}  rows/s {rate:>10,.0f}  files {r.files:>4}  "
            f"quarantined {r.quarantined:>6}  | total rows {totals['rows']:,} files {totals['files']:,} "
            f"quarantined {totals['quarantined']:,}  version {r.table_version}"
            + (f"  lag {behind:,}" if behind is not None else "")
            + f"  elapsed {elapsed:,.0f}s"
            + ("  (replayed, already committed)" if r.skipped else ""),
            flush=True,
        )

    return show


__all__ = ["LakeclusterError", "StreamJob", "preflight", "progress_printer"]

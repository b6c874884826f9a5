"""The streaming query's lifecycle: checks before Spark starts, one writer per stream, resume,
supervision (transient faults retried with backoff, fatal ones raised), clean stop."""

from __future__ import annotations

import json
import logging
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery

from lakecluster import metrics, storage
from lakecluster.config import Config
from lakecluster.errors import FatalServiceError, LakeclusterError
from lakecluster.health import HEALTH
from lakecluster.lease import Lease
from lakecluster.retry import FAULT_KINDS, Backoff, classify, first_line
from lakecluster.spark import get_session
from lakecluster.stream import kafka, resume
from lakecluster.stream.batch_task import QUARANTINE_DDL, QUARANTINE_SCHEMA
from lakecluster.stream.generator_source import FORMAT_NAME as GENERATOR_FORMAT
from lakecluster.stream.generator_source import GeneratorDataSource
from lakecluster.stream.lag import LagMonitor, recorded_offsets
from lakecluster.stream.parse import REASON_CODES
from lakecluster.stream.sink import BatchReport, StreamSink, table_spec
from lakecluster.table import TableSpec, check_schema, check_writable, create_table
from lakecluster.uris import join

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


def quarantine_spec(config: Config) -> TableSpec:
    return TableSpec(config.table.resolved_quarantine_path, QUARANTINE_SCHEMA, QUARANTINE_DDL)


def lease_uri(config: Config) -> str:
    return join(config.stream_home, "lease")


def preflight(config: Config) -> list[tuple[str, int]]:
    """What can be checked before Spark starts: storage writable, table schema, broker and topics.

    Returns the source's topic-partitions (empty for the generator).
    """
    check_writable(config.table.path)
    check_schema(table_spec(config))
    if config.source.kind != "kafka":
        return []
    check_writable(config.table.resolved_quarantine_path)
    k = config.source.kafka
    client = kafka.consumer(k)
    try:
        return kafka.partitions(k, client)
    finally:
        client.close()


def source_frame(spark: SparkSession, config: Config, starting_offsets: str | None) -> DataFrame:
    if config.source.kind == "kafka":
        start = starting_offsets or config.source.kafka.starting_offsets
        return spark.readStream.format("kafka").options(**kafka.reader_options(config.source.kafka, start)).load()
    g = config.source.generator
    options = {
        "columns": [asdict(c) for c in config.table.columns], "seed": g.seed, "brand_skew": g.brand_skew,
        "scale_factor": g.scale_factor,
        "rows_per_second": g.rows_per_second, "partitions": g.partitions, "max_rows": g.max_rows,
        "max_rows_per_trigger": g.max_rows_per_trigger, "starting_offsets": starting_offsets,
    }  # fmt: skip
    spark.dataSource.register(GeneratorDataSource)
    return spark.readStream.format(GENERATOR_FORMAT).option("config", json.dumps(options)).load()


class StreamJob:
    """``lakecluster stream``: run the query until stopped, ``max_batches`` or caught up."""

    def __init__(
        self,
        config: Config,
        *,
        spark: SparkSession | None = None,
        available_now: bool = False,
        max_batches: int | None = None,
        on_batch: Callable[[BatchReport], None] | None = None,
    ) -> None:
        self.config = config
        self.available_now = available_now
        self.max_batches = max_batches
        self.on_batch = on_batch
        self._gate = _StopGate()
        self._spark = spark
        self.reports: list[BatchReport] = []
        self.restarts = 0
        # Called once the tables exist and the query runs (``lakecluster run`` starts its compactor).
        self.on_started: Callable[[], None] | None = None
        self.lag: LagMonitor | None = None
        HEALTH.register(HEALTH_NAME)
        # Every labelled series exists from the start, so rates and sums over them work at 0.
        for code in REASON_CODES:
            metrics.STREAM_QUARANTINED.labels(code)
        for kind in FAULT_KINDS:
            metrics.SERVICE_FAILURES.labels(HEALTH_NAME, kind)
        metrics.SERVICE_RESTARTS.labels(HEALTH_NAME)

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
        if not report.skipped:
            observe_batch(report)
        if self.lag is not None:
            self.lag.committed(report.offsets)
        if self.on_batch is not None:
            self.on_batch(report)

    def total_lag(self) -> int | None:
        """Records in the topics not yet committed to the table, as last measured (Kafka only)."""
        latest = self.lag.latest if self.lag is not None else None
        return sum(latest.values()) if latest is not None else None

    def request_stop(self) -> None:
        """Finish the micro-batch in progress, then stop (safe from a signal handler thread)."""
        self._gate.request_stop()

    @property
    def stopping(self) -> bool:
        return self._gate.stopping

    def run(self) -> list[BatchReport]:
        storage.configure(self.config.storage)
        partitions = preflight(self.config)
        spark = self._spark or get_session(self.config.spark, self.config.storage, s3=self.config.uses_s3)
        # Before anything else writes under the table's directory: Delta creates a table only
        # where no other files are.
        create_table(spark, table_spec(self.config))
        if self.config.source.kind == "kafka":
            create_table(spark, quarantine_spec(self.config))
        lease = Lease.acquire(lease_uri(self.config), f"stream {self.config.stream_id} into {self.config.table.path}")
        if self.config.source.kind == "kafka":
            recorded = recorded_offsets(self.config.table.path, self.config.stream_id)
            self.lag = LagMonitor(self.config.source.kafka, self.config.stream.lag_interval_s, recorded)
            self.lag.start()
        try:
            self._supervise(spark, partitions, lease)
        finally:
            if self.lag is not None:
                self.lag.stop()
            lease.release()
        return self.reports

    def _start(self, spark: SparkSession, partitions: list[tuple[str, int]]) -> StreamingQuery:
        c = self.config
        checkpoint = c.checkpoint

        def complete(recorded: str) -> str:
            return kafka.starting_offsets_json(kafka.parse_offsets(recorded), partitions)

        start = resume.prepare(
            stream_id=c.stream_id, checkpoint=checkpoint, table_uri=c.table.path,
            quarantine_uri=c.table.resolved_quarantine_path if c.source.kind == "kafka" else None,
            configured_offsets=c.source.kafka.starting_offsets if c.source.kind == "kafka" else "",
            complete_offsets=complete if c.source.kind == "kafka" else None,
        )  # fmt: skip
        sink = StreamSink(c, spark, start, on_batch=self._record)
        writer = (
            source_frame(spark, c, start.starting_offsets if start.resumed_from == "table" else None)
            .writeStream.foreachBatch(self._handle_batch(sink))
            .option("checkpointLocation", checkpoint)
            .queryName(f"lakecluster-stream-{c.stream_id}")
        )
        if self.available_now:
            writer = writer.trigger(availableNow=True)
        else:
            writer = writer.trigger(processingTime=f"{c.stream.trigger_interval_s} seconds")
        return writer.start()

    def _supervise(self, spark: SparkSession, partitions: list[tuple[str, int]], lease: Lease) -> None:
        backoff = Backoff(self.config.retry)
        while True:
            query = self._start(spark, partitions)
            HEALTH.ready(HEALTH_NAME)
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
                if self._gate.stopping:
                    return
                time.sleep(min(0.2, max(0.0, deadline - time.monotonic())))
            if self.available_now and not self.reports:
                pass  # an availableNow run retries until it has processed what was available

    def _watch(self, query: StreamingQuery, lease: Lease) -> str | None:
        """Wait for the query to end; None when it ended by a stop or ran out of work, else the failure."""
        source_wait = SourceWait(self.config.stream.source_wait_warning_s)
        try:
            while query.isActive:
                if self._gate.stopping or lease.lost.is_set():
                    break
                if self.max_batches is not None and sum(not r.skipped for r in self.reports) >= self.max_batches:
                    self._gate.request_stop()
                    break
                try:
                    query.awaitTermination(0.2)  # type: ignore[arg-type]  # seconds; a float works
                except Exception:
                    break
                source_wait.observe(query)
        finally:
            source_wait.end()
            if query.isActive:
                self._gate.request_stop()
                query.stop()
        if lease.lost.is_set():
            HEALTH.failed(HEALTH_NAME, f"lost the stream's lease {lease.uri}")
            raise FatalServiceError(f"lost the stream's lease {lease.uri} to another process")
        exc = query.exception()
        if exc is None or self._gate.stopping:
            return None
        return _error_text(exc)


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


class SourceWait:
    """Reports a micro-batch stuck getting its source's offsets: Spark's Kafka source blocks while
    the brokers are unreachable (and fails only after several minutes), so without this an outage
    shows as nothing at all. Logged once per episode, counted, and a gauge is 1 meanwhile."""

    def __init__(self, warning_s: float) -> None:
        self.warning_s = warning_s
        self.since: float | None = None
        self.reported = False
        self._next_look = 0.0

    def observe(self, query: StreamingQuery) -> None:
        now = time.monotonic()
        if now < self._next_look:
            return
        self._next_look = now + 1.0
        try:
            status = query.status
        except Exception as e:  # the query ended meanwhile: the loop sees it next
            log.debug("no status from the query: %s", e)
            return
        waiting = bool(status.get("isTriggerActive")) and str(status.get("message", "")).startswith("Getting offsets")
        if not waiting:
            if self.reported:
                log.warning("the stream's source answered again after %.0fs", now - (self.since or now))
            self.end()
            return
        if self.since is None:
            self.since = now
        if not self.reported and now - self.since >= self.warning_s:
            self.reported = True
            metrics.STREAM_SOURCE_WAITS.inc()
            metrics.STREAM_WAITING.set(1)
            log.warning("the stream has waited %.0fs for its source (%s): are the brokers reachable?",
                        now - self.since, status.get("message"))  # fmt: skip

    def end(self) -> None:
        self.since, self.reported = None, False
        metrics.STREAM_WAITING.set(0)


def _error_text(exc: Any) -> str:
    """The failure's message and the JVM stack trace (with its causes), for classify()."""
    message = exc.getMessage() if hasattr(exc, "getMessage") else ""
    return f"{exc}\n{message}"


def install_signal_handlers(job: Any, *, what: str = "micro-batch") -> None:
    """First SIGTERM / Ctrl-C: finish the current work, then stop. A second one: stop at once."""
    seen = {"n": 0}

    def handler(signum: int, frame: Any) -> None:
        seen["n"] += 1
        if seen["n"] > 1:
            log.warning("second %s: stopping now", signal.Signals(signum).name)
            import os

            os._exit(130)
        log.warning("received %s: stopping after the current %s", signal.Signals(signum).name, what)
        threading.Thread(target=job.request_stop, daemon=True).start()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)


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


__all__ = ["LakeclusterError", "StreamJob", "install_signal_handlers", "preflight", "progress_printer"]

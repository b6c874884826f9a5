"""The streaming query's lifecycle: checks before Spark starts, the query, progress, clean stop."""

from __future__ import annotations

import json
import logging
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame, SparkSession

from lakecluster.config import Config
from lakecluster.spark import get_session
from lakecluster.stream import kafka_client
from lakecluster.stream.generator_source import FORMAT_NAME as GENERATOR_FORMAT
from lakecluster.stream.kafka_source import FORMAT_NAME as KAFKA_FORMAT
from lakecluster.stream.sink import BatchReport, StreamSink, table_spec
from lakecluster.table import check_writable, open_or_create

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

    def request_stop(self) -> None:
        with self._cond:
            self.stopping = True
            while self._busy:
                self._cond.wait()


class _StopRequested(Exception):
    """Raised into a micro-batch that would start after a stop was requested (it is replayed)."""


def preflight(config: Config) -> None:
    """Everything that can be checked before Spark starts: table location and schema, broker, topics."""
    check_writable(config.table.path)
    open_or_create(table_spec(config))
    if config.source.kind == "kafka":
        check_writable(config.table.resolved_quarantine_path)
        cfg = kafka_source_options(config)
        consumer = kafka_client.connect(cfg)
        try:
            kafka_client.resolve_topics(consumer, cfg)
        finally:
            consumer.close()


def kafka_source_options(config: Config) -> dict[str, Any]:
    k = config.source.kafka
    return {
        "bootstrap_servers": k.bootstrap_servers, "topics": list(k.topics), "topic_pattern": k.topic_pattern,
        "starting_offsets": k.starting_offsets, "max_offsets_per_trigger": k.max_offsets_per_trigger,
        "options": dict(k.options), "connect_retries": k.connect_retries,
        "connect_backoff_s": k.connect_backoff_s, "request_timeout_s": k.request_timeout_s,
        "fail_on_data_loss": k.fail_on_data_loss,
    }  # fmt: skip


def source_frame(spark: SparkSession, config: Config) -> DataFrame:
    if config.source.kind == "kafka":
        options = kafka_source_options(config)
        return spark.readStream.format(KAFKA_FORMAT).option("config", json.dumps(options)).load()
    g = config.source.generator
    options = {
        "columns": [asdict(c) for c in config.table.columns], "seed": g.seed, "brand_skew": g.brand_skew,
        "rows_per_second": g.rows_per_second, "partitions": g.partitions, "max_rows": g.max_rows,
        "max_rows_per_trigger": g.max_rows_per_trigger,
    }  # fmt: skip
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
        if self.on_batch is not None:
            self.on_batch(report)

    def request_stop(self) -> None:
        """Finish the micro-batch in progress, then stop (safe from a signal handler thread)."""
        self._gate.request_stop()

    def run(self) -> list[BatchReport]:
        preflight(self.config)
        spark = self._spark or get_session(self.config.spark)
        sink = StreamSink(self.config, on_batch=self._record)
        writer = (
            source_frame(spark, self.config)
            .writeStream.foreachBatch(self._handle_batch(sink))
            .option("checkpointLocation", self.config.stream.resolved_checkpoint(self.config.table))
            .queryName(f"lakecluster-stream-{self.config.stream.app_id}")
        )
        if self.available_now:
            writer = writer.trigger(availableNow=True)
        else:
            writer = writer.trigger(processingTime=f"{self.config.stream.trigger_interval_s} seconds")
        query = writer.start()
        try:
            while query.isActive:
                if self._gate.stopping:
                    break
                if self.max_batches is not None and len(self.reports) >= self.max_batches:
                    self._gate.request_stop()
                    break
                try:
                    query.awaitTermination(0.2)
                except StreamingQueryException:
                    # A batch that started after a stop request raised _StopRequested into the
                    # query (it is replayed on restart); any other failure is raised below.
                    break
        finally:
            if query.isActive:
                self._gate.request_stop()
                query.stop()
        exc = query.exception()
        if exc is not None and not self._gate.stopping:
            raise _unwrap(exc)
        return self.reports


def _unwrap(exc: Any) -> Exception:
    """Turn a StreamingQueryException that wraps one of ours into our own error class."""
    from lakecluster import errors

    text = str(exc)
    for name in ("BrokerUnavailableError", "TopicNotFoundError", "DataLossError", "SourceError",
                 "SchemaMismatchError", "TableNotWritableError", "TableError"):  # fmt: skip
        if f"{name}:" in text or f"errors.{name}" in text:
            line = next((ln for ln in text.splitlines() if f"{name}:" in ln), text)
            return errors.LakeclusterError(line.strip())
    return errors.LakeclusterError(f"streaming query failed: {text.splitlines()[0] if text else exc!r}")


def install_signal_handlers(job: StreamJob) -> None:
    """SIGTERM and Ctrl-C finish the current micro-batch, then stop the query."""

    def handler(signum: int, frame: Any) -> None:
        log.warning("received %s: stopping after the current micro-batch", signal.Signals(signum).name)
        threading.Thread(target=job.request_stop, daemon=True).start()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)


def progress_printer(start: float | None = None) -> Callable[[BatchReport], None]:
    t0 = start or time.monotonic()
    totals = {"rows": 0, "quarantined": 0, "files": 0}

    def show(r: BatchReport) -> None:
        totals["rows"] += r.rows
        totals["quarantined"] += r.quarantined
        totals["files"] += r.files
        rate = r.rows / r.seconds if r.seconds > 0 else 0.0
        elapsed = time.monotonic() - t0
        print(
            f"batch {r.batch_id:>6}  rows {r.rows:>9,}  rows/s {rate:>10,.0f}  files {r.files:>4}  "
            f"quarantined {r.quarantined:>6}  | total rows {totals['rows']:,} files {totals['files']:,} "
            f"quarantined {totals['quarantined']:,}  version {r.table_version}  elapsed {elapsed:,.0f}s"
            + ("  (replayed, already committed)" if r.skipped else ""),
            flush=True,
        )

    return show

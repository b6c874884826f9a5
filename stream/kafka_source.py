"""Kafka as a stream's source: Spark's Kafka source reads JSON records, kafka-python checks the
cluster before Spark starts and measures lag (``kafka.py``, ``lag.py``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from lakecluster.config import Config, KafkaSourceConfig
from lakecluster.stream import kafka
from lakecluster.stream.lag import LagMonitor, measure, recorded_offsets

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from lakecluster.table import LakeTable


class KafkaSource:
    """``[source.kafka]``: topics (or a pattern) of one Kafka cluster, as JSON or Avro records."""

    kind = "kafka"
    quarantines = True

    def __init__(self, config: Config) -> None:
        section = config.source.selected
        assert isinstance(section, KafkaSourceConfig)
        self.settings = section
        self.lag_interval_s = config.stream.lag_interval_s
        self.partitions: list[tuple[str, int]] = []  # every topic-partition, as found by check()
        self.monitor: LagMonitor | None = None  # measures lag while the stream runs (``start``)

    def describe(self) -> str:
        return f"kafka {self.settings.bootstrap_servers}"

    def check(self) -> None:
        client = kafka.consumer(self.settings)  # an unreachable broker: one line, now
        try:
            self.partitions = kafka.partitions(self.settings, client)
        finally:
            client.close()

    def configured_offsets(self) -> str:
        return self.settings.starting_offsets

    def resume_offsets(self) -> Callable[[str], str]:
        # Spark's source wants an offset for every partition it subscribes to: new ones start at the beginning.
        return lambda recorded: kafka.starting_offsets_json(kafka.parse_offsets(recorded), self.partitions)

    def frame(self, spark: SparkSession, starting_offsets: str | None) -> DataFrame:
        options = kafka.reader_options(self.settings, starting_offsets or self.settings.starting_offsets)
        return spark.readStream.format("kafka").options(**options).load()

    def start(self, table: LakeTable) -> None:
        self.monitor = LagMonitor(self.settings, self.lag_interval_s, recorded_offsets(table))
        self.monitor.start()

    def committed(self, offsets: str | None) -> None:
        if self.monitor is not None:
            self.monitor.committed(offsets)

    def stop(self) -> None:
        if self.monitor is not None:
            self.monitor.stop()

    def lag(self) -> int | None:
        latest = self.monitor.latest if self.monitor is not None else None
        return sum(latest.values()) if latest is not None else None

    def measure_lag(self, table: LakeTable, timeout_s: float) -> dict[str, Any]:
        committed = recorded_offsets(table) or {}
        settings = dataclasses.replace(self.settings, connect_timeout_s=timeout_s)
        try:
            client = kafka.consumer(settings, report_waiting=False)  # one line of the status screen
            try:
                lags = measure(settings, client, committed)
            finally:
                client.close()
        except Exception as e:  # status reports what it can: an unreachable broker is one line of it
            return {"error": str(e).splitlines()[0] if str(e) else type(e).__name__}
        return {"records": sum(lags.values()),
                "partitions": {f"{t}/{p}": n for (t, p), n in sorted(lags.items())}}  # fmt: skip

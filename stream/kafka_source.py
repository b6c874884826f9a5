"""Kafka as a Spark streaming source, on kafka-python (Spark's own connector jar is unavailable).

Offsets are ``{"topic": {"partition": next_offset}}`` JSON dicts in the Spark checkpoint, so a
restarted query resumes exactly where the last committed micro-batch ended. Each micro-batch
becomes one Spark task per Kafka partition with new records.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from kafka import KafkaConsumer, TopicPartition
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from lakecluster.config import parse_starting_offsets
from lakecluster.stream import kafka_client

FORMAT_NAME = "lakecluster_kafka"
log = logging.getLogger(__name__)

Offsets = dict[str, dict[str, int]]


class _PartitionRange(InputPartition):
    def __init__(self, topic: str, partition: int, start: int, end: int) -> None:
        super().__init__((topic, partition, start, end))
        self.topic, self.partition, self.start, self.end = topic, partition, start, end


class KafkaDataSource(DataSource):
    """``spark.readStream.format("lakecluster_kafka").option("config", json)``."""

    @classmethod
    def name(cls) -> str:
        return FORMAT_NAME

    def schema(self) -> str:
        return kafka_client.RAW_DDL

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return KafkaStreamReader(json.loads(self.options["config"]))


def _flatten(offsets: Offsets) -> dict[TopicPartition, int]:
    return {TopicPartition(t, int(p)): int(o) for t, parts in offsets.items() for p, o in parts.items()}


def _nest(offsets: dict[TopicPartition, int]) -> Offsets:
    out: Offsets = {}
    for tp, o in sorted(offsets.items()):
        out.setdefault(tp.topic, {})[str(tp.partition)] = int(o)
    return out


class KafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, cfg: dict[str, Any]) -> None:
        self.cfg = cfg
        self._consumer: KafkaConsumer | None = None
        self._available_now: dict[TopicPartition, int] | None = None

    @property
    def consumer(self) -> KafkaConsumer:
        if self._consumer is None:
            self._consumer = kafka_client.connect(self.cfg)
        return self._consumer

    def _partitions(self) -> list[TopicPartition]:
        topics = kafka_client.resolve_topics(self.consumer, self.cfg)
        return kafka_client.topic_partitions(self.consumer, topics)

    def _ends(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        return kafka_client.end_offsets(self.consumer, tps, float(self.cfg["request_timeout_s"]))

    def initialOffset(self) -> dict:
        tps = self._partitions()
        starting = parse_starting_offsets(self.cfg["starting_offsets"])
        begin = kafka_client.beginning_offsets(self.consumer, tps)
        end = self._ends(tps)
        out: dict[TopicPartition, int] = {}
        for tp in tps:
            if starting == "latest":
                out[tp] = end[tp]
            elif starting == "earliest":
                out[tp] = begin[tp]
            else:
                assert isinstance(starting, dict)
                o = starting.get(tp.topic, {}).get(tp.partition, -2)
                out[tp] = begin[tp] if o == -2 else end[tp] if o == -1 else min(max(o, begin[tp]), end[tp])
        return _nest(out)

    def prepareForTriggerAvailableNow(self) -> None:
        self._available_now = self._ends(self._partitions())

    def getDefaultReadLimit(self) -> ReadLimit:
        limit = self.cfg.get("max_offsets_per_trigger")
        return ReadMaxRows(int(limit)) if limit else ReadAllAvailable()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        current = _flatten(start)
        if self._available_now is not None:
            ends = dict(self._available_now)
        else:
            ends = self._ends(self._partitions())
        # Partitions that appeared since the last batch (new topic matching a pattern, or added
        # partitions) start from their beginning, as Spark's Kafka source does.
        new = [tp for tp in ends if tp not in current]
        if new:
            current.update(kafka_client.beginning_offsets(self.consumer, new))
        target = {tp: max(ends.get(tp, o), o) for tp, o in current.items()}
        if isinstance(limit, ReadMaxRows):
            target = _apply_limit(current, target, limit.max_rows)
        return _nest(target)

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        begin = _flatten(start)
        out: list[InputPartition] = []
        for tp, stop in sorted(_flatten(end).items()):
            first = begin.get(tp, 0)
            if stop > first:
                out.append(_PartitionRange(tp.topic, tp.partition, first, stop))
        return out

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, _PartitionRange)
        yield from kafka_client.read_range(
            self.cfg, partition.topic, partition.partition, partition.start, partition.end
        )

    def commit(self, end: dict) -> None:
        pass

    def stop(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None


def _apply_limit(
    current: dict[TopicPartition, int], target: dict[TopicPartition, int], limit: int
) -> dict[TopicPartition, int]:
    """Spread ``limit`` records over the partitions in proportion to their backlog."""
    lag = {tp: target[tp] - current[tp] for tp in current}
    total = sum(lag.values())
    if total <= limit:
        return target
    out = {}
    for tp, o in current.items():
        out[tp] = o + (lag[tp] * limit) // total
    # Rounding down can leave the whole batch empty with many partitions; always move forward.
    if all(out[tp] == current[tp] for tp in current):
        busiest = max(lag, key=lambda tp: lag[tp])
        out[busiest] = current[busiest] + min(lag[busiest], limit)
    return out

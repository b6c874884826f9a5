"""kafka-python helpers shared by the driver (offsets, topics) and the executors (reading ranges)."""

from __future__ import annotations

import logging
import re
import socket
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
from kafka import KafkaConsumer, TopicPartition
from kafka import __version__ as kafka_version
from kafka.errors import KafkaConfigurationError, KafkaError, OffsetOutOfRangeError

from lakecluster.errors import (
    BrokerUnavailableError,
    ConfigError,
    DataLossError,
    SourceError,
    TopicNotFoundError,
)
from lakecluster.stream.kafka_batches import Records, Transactions, decode

log = logging.getLogger(__name__)

RAW_SCHEMA = pa.schema(
    [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", pa.timestamp("us", tz="UTC")),
    ]
)
RAW_DDL = "key binary, value binary, topic string, partition int, offset bigint, timestamp timestamp"
_BATCH_RECORDS = 50_000


def consumer_settings(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """KafkaConsumer keyword arguments: ours, then the user's pass-through client options."""
    timeout_ms = int(float(cfg["request_timeout_s"]) * 1000)
    settings: dict[str, Any] = {
        "bootstrap_servers": [s.strip() for s in cfg["bootstrap_servers"].split(",")],
        "enable_auto_commit": False,
        "auto_offset_reset": "none",
        "request_timeout_ms": max(timeout_ms, 1000) + 5000,
        "consumer_timeout_ms": 1000,
    }
    for key, value in cfg.get("options", {}).items():
        settings[key] = _coerce(value)
    return settings


def _coerce(value: str) -> Any:
    # Client options arrive as strings from config/env; kafka-python wants ints/bools for some.
    if value.lower() in ("true", "false"):
        return value.lower() == "true"
    try:
        return int(value)
    except ValueError:
        return value


def connect(cfg: Mapping[str, Any]) -> KafkaConsumer:
    """A consumer connected to the cluster, retrying with exponential backoff, else a clear error."""
    retries = int(cfg["connect_retries"])
    backoff = float(cfg["connect_backoff_s"])
    last: Exception | None = None
    for attempt in range(retries + 1):
        try:
            _probe_tcp(cfg["bootstrap_servers"])
            consumer = KafkaConsumer(**consumer_settings(cfg))
            consumer.topics()  # forces a metadata round trip
            return consumer
        except KafkaConfigurationError as e:
            raise ConfigError("source.kafka.options", f"rejected by the Kafka client: {e}") from e
        except (KafkaError, OSError) as e:
            last = e
            if attempt < retries:
                delay = backoff * 2**attempt
                log.warning("Kafka at %s not reachable (%s); retry %d/%d in %.1fs",
                            cfg["bootstrap_servers"], e, attempt + 1, retries, delay)  # fmt: skip
                time.sleep(delay)
    raise BrokerUnavailableError(
        f"no Kafka broker reachable at {cfg['bootstrap_servers']} after {retries + 1} attempts: {last}"
    )


def _probe_tcp(bootstrap_servers: str, timeout_s: float = 3.0) -> None:
    """Fail fast when no bootstrap address accepts a TCP connection.

    Without it, a client pointed at a dead address waits a full request timeout per attempt.
    """
    errors = []
    for server in bootstrap_servers.split(","):
        host, _, port = server.strip().rpartition(":")
        try:
            socket.create_connection((host.strip("[]") or "localhost", int(port)), timeout=timeout_s).close()
            return
        except (OSError, ValueError) as e:
            errors.append(f"{server.strip()}: {e}")
    raise OSError("; ".join(errors))


def resolve_topics(consumer: KafkaConsumer, cfg: Mapping[str, Any]) -> list[str]:
    existing = consumer.topics()
    if cfg.get("topic_pattern"):
        pattern = re.compile(cfg["topic_pattern"])
        topics = sorted(t for t in existing if pattern.fullmatch(t))
        if not topics:
            raise TopicNotFoundError(f"no topic matches pattern {cfg['topic_pattern']!r} at {cfg['bootstrap_servers']}")
        return topics
    missing = [t for t in cfg["topics"] if t not in existing]
    if missing:
        raise TopicNotFoundError(
            f"topic(s) {', '.join(missing)} not found at {cfg['bootstrap_servers']}; "
            f"existing: {', '.join(sorted(existing)) or '(none)'}"
        )
    return list(cfg["topics"])


def topic_partitions(consumer: KafkaConsumer, topics: Sequence[str]) -> list[TopicPartition]:
    tps = []
    for topic in topics:
        parts = consumer.partitions_for_topic(topic) or set()
        tps.extend(TopicPartition(topic, p) for p in sorted(parts))
    return tps


def end_offsets(consumer: KafkaConsumer, tps: Sequence[TopicPartition], timeout_s: float) -> dict[TopicPartition, int]:
    """The true end (high-water mark) of each partition.

    ListOffsets alone is not trusted: some Kafka-protocol brokers (tansu 0.6) answer "latest" with
    the base offset of the last record batch + 1. The high-water mark carried by a fetch response
    is right everywhere, so we fetch once from just below the reported end and keep the larger.
    """
    if not tps:
        return {}
    reported = consumer.end_offsets(list(tps))
    consumer.assign(list(tps))
    for tp in tps:
        consumer.seek(tp, max(reported[tp] - 1, 0))
    deadline = time.monotonic() + timeout_s
    pending = {tp for tp in tps if reported[tp] > 0}
    while pending and time.monotonic() < deadline:
        consumer.poll(timeout_ms=200, max_records=1)
        pending = {tp for tp in pending if consumer.highwater(tp) is None}
    out = {}
    for tp in tps:
        hw = consumer.highwater(tp)
        out[tp] = max(reported[tp], hw if hw is not None else 0)
    consumer.unsubscribe()
    return out


def beginning_offsets(consumer: KafkaConsumer, tps: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
    return consumer.beginning_offsets(list(tps)) if tps else {}


def read_range(cfg: Mapping[str, Any], topic: str, partition: int, start: int, end: int) -> Iterator[pa.RecordBatch]:
    """Records with ``start <= offset < end`` of one partition, as Arrow batches (executor side).

    Offsets may have gaps (transaction markers, compacted topics): reading stops when the
    consumer's position reaches ``end``, not after a record count. Fetched record batches are
    decoded in bulk (``kafka_batches``), never one ``ConsumerRecord`` at a time.
    """
    if end <= start:
        return
    consumer = KafkaConsumer(**consumer_settings(cfg))
    tp = TopicPartition(topic, partition)
    try:
        _decode_in_bulk(consumer)
        consumer.assign([tp])
        consumer.seek(tp, start)
        timeout = float(cfg["request_timeout_s"])
        last_progress = time.monotonic()
        pending: list[Records] = []
        rows = 0
        position = start
        while position < end:
            try:
                fetched = consumer.poll(timeout_ms=500, max_records=1000)
            except OffsetOutOfRangeError as e:
                if cfg.get("fail_on_data_loss", True):
                    raise DataLossError(
                        f"{topic}[{partition}] offsets {start}..{end} are no longer on the broker "
                        "(retention?); set source.kafka.fail_on_data_loss=false to skip them"
                    ) from e
                log.warning("%s[%d]: offsets from %d lost; skipping to the earliest", topic, partition, position)
                earliest = consumer.beginning_offsets([tp])[tp]
                consumer.seek(tp, earliest)
                position = earliest
                continue
            for chunk in fetched.get(tp, []):
                kept = chunk.below(end)
                if len(kept):
                    pending.append(kept)
                    rows += len(kept)
            moved = consumer.position(tp)
            if moved != position:  # records, or only transaction markers / compacted-away offsets
                last_progress = time.monotonic()
            position = moved
            while rows >= _BATCH_RECORDS:
                full = Records.concat(pending)
                yield _batch(full.slice(0, _BATCH_RECORDS), topic, partition)
                pending = [full.slice(_BATCH_RECORDS, len(full))]
                rows = len(pending[0])
            if position < end and time.monotonic() - last_progress > timeout:
                raise SourceError(
                    f"{topic}[{partition}]: no progress reading offsets {position}..{end} for {timeout:.0f}s"
                )
        if rows:
            yield _batch(Records.concat(pending), topic, partition)
    finally:
        consumer.close()


_TIMESTAMP = pa.timestamp("us", tz="UTC")
_MAX_MS = (2**63 - 1) // 1000  # later millisecond timestamps do not fit int64 microseconds


def _batch(records: Records, topic: str, partition: int) -> pa.RecordBatch:
    n = len(records)
    ms = records.timestamps
    unknown = (ms < 0) | (ms > _MAX_MS)  # -1: the producer set none
    has_unknown = bool(unknown.any())
    micros = np.where(unknown, 0, ms) * 1000 if has_unknown else ms * 1000
    validity = pa.py_buffer(np.packbits(~unknown, bitorder="little")) if has_unknown else None
    return pa.RecordBatch.from_arrays(
        [
            records.keys,
            records.values,
            pa.repeat(pa.scalar(topic, pa.string()), n),
            pa.array(np.full(n, partition, np.int32)),
            pa.array(records.offsets),
            pa.Array.from_buffers(_TIMESTAMP, n, [validity, pa.py_buffer(micros)]),
        ],
        schema=RAW_SCHEMA,
    )


class _BulkPartitionRecords:
    """Stands in for kafka-python's ``Fetcher.PartitionRecords``: one partition's fetch response.

    kafka-python's class yields a ``ConsumerRecord`` per record, decoded in pure Python; this one
    decodes the whole response with ``kafka_batches.decode`` and ``take`` hands it back as a
    single ``Records`` chunk, so ``poll`` returns ``{tp: [Records, ...]}``. The fetcher uses only
    the attributes and methods below (it advances the position to ``next_fetch_offset``).
    """

    def __init__(
        self,
        fetch_offset: int,
        tp: TopicPartition,
        records: Any,
        key_deserializer: Any = None,
        value_deserializer: Any = None,
        check_crcs: bool = True,
        isolation_level: Any = 0,
        aborted_transactions: Any = None,
        metric_aggregator: Any = None,
        on_drain: Any = lambda _: None,
    ) -> None:
        self.fetch_offset = fetch_offset
        self.topic_partition = tp
        self.leader_epoch = -1
        self.next_fetch_offset = fetch_offset
        self.bytes_read = 0
        self.records_read = 0
        self.metric_aggregator = metric_aggregator
        self.on_drain = on_drain
        self._records = records
        self._check_crcs = check_crcs
        read_committed = int(isolation_level) == _READ_COMMITTED
        self._transactions = Transactions.from_response(aborted_transactions) if read_committed else None

    def __bool__(self) -> bool:
        return self._records is not None

    def drain(self) -> None:
        if self._records is not None:
            self._records = None
            if self.metric_aggregator:
                self.metric_aggregator.record(self.topic_partition, self.bytes_read, self.records_read)
            self.on_drain(self)

    def take(self, n: int | None = None) -> list[Records]:
        if self._records is None:
            return []
        tp = self.topic_partition
        decoded = decode(
            self._records._buffer,  # MemoryRecords: the response's raw bytes
            self.fetch_offset,
            check_crcs=self._check_crcs,
            transactions=self._transactions,
            where=f"{tp.topic}[{tp.partition}]",
        )
        self.next_fetch_offset = decoded.next_offset
        if decoded.leader_epoch >= 0:
            self.leader_epoch = decoded.leader_epoch
        self.records_read = len(decoded.records)
        self.bytes_read = self._records.size_in_bytes()
        self.drain()
        return [decoded.records] if len(decoded.records) else []


_READ_COMMITTED = 1  # kafka-python's IsolationLevel.READ_COMMITTED


def _decode_in_bulk(consumer: KafkaConsumer) -> None:
    """Make the consumer's fetcher hand back bulk-decoded ``Records`` instead of ConsumerRecords.

    Relies on kafka-python internals (``KafkaConsumer._fetcher`` creating ``self.PartitionRecords``
    from a ``MemoryRecords`` with a ``_buffer``), checked here so a different version fails clearly.
    """
    fetcher = getattr(consumer, "_fetcher", None)
    original = getattr(fetcher, "PartitionRecords", None)
    if not (isinstance(original, type) and hasattr(original, "take") and hasattr(fetcher, "_parse_fetched_data")):
        raise SourceError(
            f"kafka-python {kafka_version} is not supported by lakecluster's batch decoder (tested with 3.0.x)"
        )
    fetcher.PartitionRecords = _BulkPartitionRecords  # type: ignore[union-attr]

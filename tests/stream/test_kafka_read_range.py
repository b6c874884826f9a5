"""read_range through a real broker returns exactly what a plain kafka-python KafkaConsumer returns."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka import KafkaConsumer, KafkaProducer, TopicPartition, codec
from kafka.errors import KafkaError

from lakecluster.errors import SourceError
from lakecluster.stream import kafka_client
from lakecluster.stream.kafka_batches import CorruptBatchError
from lakecluster.stream.kafka_client import RAW_SCHEMA, read_range
from tests.broker import Broker

pytestmark = pytest.mark.integration

Row = tuple[Any, ...]  # (offset, timestamp ms or None, key, value)


def _topic() -> str:
    return f"raw_{uuid.uuid4().hex[:8]}"


def cfg(broker: Broker, **extra: Any) -> dict[str, Any]:
    return {"bootstrap_servers": broker.bootstrap, "request_timeout_s": 10.0, **extra}


def produce(
    broker: Broker, topic: str, records: list[tuple[bytes | None, bytes | None, list[Any]]], **producer: Any
) -> None:
    settings: dict[str, Any] = {"bootstrap_servers": broker.bootstrap, "linger_ms": 5, "acks": "all"} | producer
    p = KafkaProducer(**settings)
    try:
        for key, value, headers in records:
            p.send(topic, key=key, value=value, headers=headers or None, partition=0)
        p.flush(timeout=30)
    finally:
        p.close()


def ours(config: dict[str, Any], topic: str, start: int, end: int) -> list[Row]:
    rows: list[Row] = []
    for batch in read_range(config, topic, 0, start, end):
        assert batch.schema == RAW_SCHEMA
        assert set(batch.column("topic").to_pylist()) == {topic} and set(batch.column("partition").to_pylist()) == {0}
        for r in batch.to_pylist():
            ts = r["timestamp"]
            rows.append((r["offset"], None if ts is None else round(ts.timestamp() * 1000), r["key"], r["value"]))
    return rows


def consumer_rows(broker: Broker, topic: str, start: int, end: int, **options: Any) -> list[Row]:
    """The reference: a plain KafkaConsumer over the same range."""
    tp = TopicPartition(topic, 0)
    c = KafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False, **options)
    try:
        c.assign([tp])
        c.seek(tp, start)
        rows: list[Row] = []
        while c.position(tp) < end:
            for r in c.poll(timeout_ms=500).get(tp, []):
                if r.offset < end:
                    rows.append((r.offset, r.timestamp if r.timestamp >= 0 else None, r.key, r.value))
        return rows
    finally:
        c.close()


def end_offset(broker: Broker, topic: str) -> int:
    c = KafkaConsumer(bootstrap_servers=broker.bootstrap)
    try:
        return kafka_client.end_offsets(c, [TopicPartition(topic, 0)], 10)[TopicPartition(topic, 0)]
    finally:
        c.close()


def varied_records(n: int) -> list[tuple[bytes | None, bytes | None, list[Any]]]:
    """Null keys, tombstones, empty values, headers, and lengths across the varint size steps."""
    out: list[tuple[bytes | None, bytes | None, list[Any]]] = []
    for i in range(n):
        key = None if i % 5 == 0 else f"key-{i}".encode()
        value: bytes | None = b"v" * [0, 1, 63, 64, 200, 8191, 8192, 20_000][i % 8]
        if i % 7 == 3 and key is not None:
            value = None  # tombstone
        headers = [("h", b"x"), ("empty", b"")] if i % 3 == 0 else []
        out.append((key, value, headers))
    return out


@pytest.fixture(scope="module")
def varied(broker: Broker) -> Iterator[tuple[str, list[Row]]]:
    """One topic with varied records (several producer batches) and what a KafkaConsumer reads."""
    topic = _topic()
    broker.create_topic(topic, 1)
    records = varied_records(600)
    produce(broker, topic, records[:300], batch_size=16_384)
    produce(broker, topic, records[300:], batch_size=200_000, linger_ms=50)
    end = end_offset(broker, topic)
    assert end == 600
    yield topic, consumer_rows(broker, topic, 0, end)


def test_whole_partition_matches_kafka_consumer(broker: Broker, varied: tuple[str, list[Row]]) -> None:
    topic, expected = varied
    rows = ours(cfg(broker), topic, 0, 600)
    assert rows == expected
    assert len(rows) == 600
    values = [r[3] for r in rows]
    assert None in values and b"" in values and b"v" * 20_000 in values, "tombstones, empty and large values kept"
    assert None in [r[2] for r in rows], "null keys kept"


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(start=st.integers(0, 600), length=st.integers(1, 300))
def test_any_sub_range_matches_kafka_consumer(
    broker: Broker, varied: tuple[str, list[Row]], start: int, length: int
) -> None:
    topic, everything = varied
    end = min(start + length, 600)
    assert ours(cfg(broker), topic, start, end) == [r for r in everything if start <= r[0] < end]


def test_batches_are_bounded(broker: Broker, varied: tuple[str, list[Row]], monkeypatch: pytest.MonkeyPatch) -> None:
    topic, everything = varied
    monkeypatch.setattr(kafka_client, "_BATCH_RECORDS", 64)
    batches = list(read_range(cfg(broker), topic, 0, 0, 600))
    assert [b.num_rows for b in batches[:-1]] == [64] * (len(batches) - 1)
    assert 0 < batches[-1].num_rows <= 64
    assert [o for b in batches for o in b.column("offset").to_pylist()] == [r[0] for r in everything]


def test_empty_range_reads_nothing(broker: Broker, varied: tuple[str, list[Row]]) -> None:
    topic, _ = varied
    assert list(read_range(cfg(broker), topic, 0, 10, 10)) == []


def test_large_value(broker: Broker) -> None:
    topic = _topic()
    broker.create_topic(topic, 1)
    big = bytes(range(256)) * (1536 * 4)  # 1.5 MiB
    try:
        produce(broker, topic, [(b"big", big, []), (b"after", b"small", [])], max_request_size=4 * 2**20)
        expected_size = len(big)
    except KafkaError:  # the broker's message size limit: fall back to 100 KB
        topic = _topic()
        broker.create_topic(topic, 1)
        big = big[:100_000]
        produce(broker, topic, [(b"big", big, []), (b"after", b"small", [])])
        expected_size = 100_000
    rows = ours(cfg(broker, options={"max_partition_fetch_bytes": "65536"}), topic, 0, 2)
    assert rows == consumer_rows(broker, topic, 0, 2)
    assert len(rows[0][3]) == expected_size and rows[1][3] == b"small"


CODECS = {"gzip": codec.has_gzip, "snappy": codec.has_snappy, "lz4": codec.has_lz4, "zstd": codec.has_zstd}


@pytest.mark.parametrize("compression", sorted(CODECS))
def test_compressed_batches(broker: Broker, compression: str) -> None:
    # The codec libraries are runtime dependencies (pyproject.toml): a missing one is a failure.
    assert CODECS[compression](), f"no {compression} library installed for kafka-python"
    topic = _topic()
    broker.create_topic(topic, 1)
    records = varied_records(300)
    produce(broker, topic, records, compression_type=compression, batch_size=100_000, linger_ms=50)
    assert ours(cfg(broker), topic, 0, 300) == consumer_rows(broker, topic, 0, 300)
    assert ours(cfg(broker), topic, 17, 251) == consumer_rows(broker, topic, 17, 251)


def test_transactions_markers_are_skipped_and_offsets_have_gaps(broker: Broker) -> None:
    topic = _topic()
    broker.create_topic(topic, 1)
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id=f"tx-{topic}")
    try:
        producer.init_transactions()  # the pinned tansu broker supports transactions
        for txn, outcome in enumerate(["commit", "abort", "commit"]):
            producer.begin_transaction()
            for i in range(5):
                producer.send(topic, key=f"{txn}-{i}".encode(), value=outcome.encode(), partition=0)
            if outcome == "commit":
                producer.commit_transaction()
            else:
                producer.abort_transaction()
    finally:
        producer.close()
    end = end_offset(broker, topic)
    expected = consumer_rows(broker, topic, 0, end)
    assert ours(cfg(broker), topic, 0, end) == expected
    offsets = [r[0] for r in expected]
    assert len(offsets) >= 10 and offsets[-1] < end - 1, "the committed records, then a marker"
    assert offsets != list(range(len(offsets))), "markers leave gaps in the offsets"
    # A range ending on / starting after a marker.
    marker = next(o for o in range(end) if o not in offsets)
    assert ours(cfg(broker), topic, 0, marker + 1) == [r for r in expected if r[0] <= marker]
    assert ours(cfg(broker), topic, marker, end) == [r for r in expected if r[0] > marker]
    committed = consumer_rows(broker, topic, 0, end, isolation_level="read_committed")
    read_committed = cfg(broker, options={"isolation_level": "read_committed"})
    assert ours(read_committed, topic, 0, end) == committed
    # tansu (memory storage) drops an aborted transaction's records; a Kafka broker keeps them and
    # reports them as aborted, which the decoder's unit tests cover.
    assert {r[3] for r in committed} == {b"commit"}


def test_idempotent_producer(broker: Broker) -> None:
    topic = _topic()
    broker.create_topic(topic, 1)
    produce(broker, topic, varied_records(100), enable_idempotence=True)
    assert ours(cfg(broker), topic, 0, 100) == consumer_rows(broker, topic, 0, 100)


def test_corrupt_fetched_batch_raises(
    broker: Broker, varied: tuple[str, list[Row]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A byte flipped in a batch the broker really sent fails the CRC check inside read_range."""
    topic, _ = varied
    real = kafka_client.decode

    def flip_a_byte(buffer: Any, *args: Any, **kwargs: Any) -> Any:
        corrupt = bytearray(buffer)
        corrupt[len(corrupt) // 2] ^= 0x40
        return real(bytes(corrupt), *args, **kwargs)

    monkeypatch.setattr(kafka_client, "decode", flip_a_byte)
    with pytest.raises(CorruptBatchError, match=rf"{topic}\[0\].*CRC"):
        list(read_range(cfg(broker), topic, 0, 0, 600))


def test_no_progress_times_out(broker: Broker, varied: tuple[str, list[Row]]) -> None:
    """Also what a fetch past the end of the log gives on tansu (a Kafka broker answers
    OFFSET_OUT_OF_RANGE there, which read_range turns into DataLossError as before)."""
    topic, _ = varied
    batches = read_range(cfg(broker, request_timeout_s=1.0), topic, 0, 590, 605)  # 600 is the end
    with pytest.raises(SourceError, match="no progress"):
        list(batches)

"""The Kafka fixture is a real broker: what goes in comes out, transactions and restarts behave as Kafka's.

Read back with a plain kafka-python consumer, so these tests check the broker and the fixture's
producer, not lakecluster's reader.
"""

from __future__ import annotations

import struct
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.errors import KafkaTimeoutError, RequestTimedOutError

from tests.services.kafka import COMPRESSIONS, KafkaBroker, KafkaServiceError, Message
from tests.services.ports import is_listening

pytestmark = pytest.mark.integration

# (partition, key, value, headers) as a consumer sees a record.
Seen = tuple[int, bytes | None, bytes | None, list[tuple[str, bytes]]]

# Kafka's record-batch header: the codec is in the low 3 bits of the attributes (magic v2).
_BATCH_HEADER = struct.Struct(">qiibIh")
_CODEC_IDS = {"gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def _topic() -> str:
    return f"t-{uuid.uuid4().hex[:10]}"


def consume_all(broker: KafkaBroker, topic: str, *, isolation_level: str = "read_uncommitted") -> list[Seen]:
    """Every record of ``topic`` from offset 0 to the end, partition by partition, in offset order."""
    ends = broker.end_offsets(topic, isolation_level=isolation_level)
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False,
                             isolation_level=isolation_level, consumer_timeout_ms=10_000)  # fmt: skip
    out: list[Seen] = []
    try:
        for partition, end in sorted(ends.items()):
            tp = TopicPartition(topic, partition)
            consumer.assign([tp])
            consumer.seek(tp, 0)
            deadline = time.monotonic() + 30
            while consumer.position(tp) < end:
                assert time.monotonic() < deadline, f"{topic}[{partition}] stuck at {consumer.position(tp)} < {end}"
                for records in consumer.poll(timeout_ms=500).values():
                    out.extend((r.partition, r.key, r.value, list(r.headers)) for r in records if r.offset < end)
    finally:
        consumer.close()
    return out


def batch_codecs(broker: KafkaBroker, topic: str) -> set[int]:
    """The compression codec ids of every record batch the broker stored on disk for ``topic``."""
    codecs = set()
    for segment in broker.data_dir.glob(f"{topic}-*/*.log"):
        data, pos = segment.read_bytes(), 0
        while pos + _BATCH_HEADER.size <= len(data):
            _, length, _, magic, _, attributes = _BATCH_HEADER.unpack_from(data, pos)
            assert magic == 2, f"unexpected record batch format v{magic} in {segment}"
            codecs.add(attributes & 0x07)
            pos += 12 + length
    return codecs


def messages(n: int, partitions: int, tag: str) -> list[Message]:
    """Keys, headers (several, repeated names, empty values), null keys and values, large values."""
    out = []
    for i in range(n):
        headers = [("h", f"{tag}-{i}".encode()), ("h", b""), ("trace", uuid.uuid4().bytes)][: i % 4]
        key = None if i % 7 == 3 else f"key-{i}".encode()
        tombstone = i % 11 == 5 and key is not None  # kafka-python refuses a record with neither
        value = None if tombstone else (f"{tag}:{i}:".encode() * (1 + i % 50))
        out.append(Message(value=value, key=key, partition=i % partitions, headers=headers))
    return out


def by_partition(sent: list[Message]) -> list[Seen]:
    """What a consumer reading partition by partition must see for ``sent``."""
    ordered = sorted(enumerate(sent), key=lambda im: (im[1].partition or 0, im[0]))
    return [(m.partition or 0, m.key, m.value, list(m.headers)) for _, m in ordered]


@pytest.mark.parametrize("compression", COMPRESSIONS)
def test_keys_and_headers_read_back_identical_in_every_compression(kafka: KafkaBroker, compression: str) -> None:
    topic = _topic()
    kafka.create_topic(topic, 3)
    sent = messages(400, 3, compression)
    written = kafka.produce(topic, sent, compression=compression, batch_size=64 * 1024)
    assert sorted({p for p, _ in written}) == [0, 1, 2]
    assert kafka.end_offsets(topic) == {0: 134, 1: 133, 2: 133}
    assert consume_all(kafka, topic) == by_partition(sent)
    assert batch_codecs(kafka, topic) == {_CODEC_IDS[compression]}, "the broker stored batches in another codec"


def test_old_partition_value_pairs_still_produce(kafka: KafkaBroker) -> None:
    """The (partition, value) form the stream tests use: key str(i), null values allowed."""
    topic = _topic()
    kafka.create_topic(topic, 2)
    kafka.produce(topic, [(1, b"a"), (0, b"b"), (1, None)])
    assert consume_all(kafka, topic) == [(0, b"1", b"b", []), (1, b"0", b"a", []), (1, b"2", None, [])]


def test_committed_transaction_visible_aborted_not(kafka: KafkaBroker) -> None:
    topic = _topic()
    kafka.create_topic(topic, 3)
    committed = [Message(f"c{i}".encode(), f"k{i}".encode(), i % 3, [("txn", b"commit")]) for i in range(30)]
    aborted = [Message(f"a{i}".encode(), f"k{i}".encode(), i % 3, [("txn", b"abort")]) for i in range(30)]
    kafka.produce(topic, committed[:15], transactional=True)
    kafka.produce(topic, aborted, transactional=True, abort=True)
    kafka.produce(topic, committed[15:], transactional=True, compression="zstd")

    assert consume_all(kafka, topic, isolation_level="read_committed") == by_partition(committed)
    # The aborted records are in the log (a read_uncommitted consumer sees them), just not committed.
    everything = consume_all(kafka, topic)
    assert sorted(everything) == sorted(by_partition(committed) + by_partition(aborted))
    # Per partition: 5 + 10 + 5 records, and each transaction's control marker takes an offset.
    assert kafka.end_offsets(topic) == dict.fromkeys(range(3), 23)
    assert kafka.end_offsets(topic, isolation_level="read_committed") == dict.fromkeys(range(3), 23)


def test_open_transaction_holds_back_read_committed(kafka: KafkaBroker) -> None:
    """The last stable offset stops at an open transaction; commit releases it."""
    topic = _topic()
    kafka.create_topic(topic, 1)
    kafka.produce(topic, [Message(b"before", partition=0)])
    producer = KafkaProducer(bootstrap_servers=kafka.bootstrap, transactional_id=f"open-{topic}")
    try:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send(topic, value=b"pending", partition=0)
        producer.flush()
        assert kafka.end_offsets(topic) == {0: 2}
        assert kafka.end_offsets(topic, isolation_level="read_committed") == {0: 1}
        producer.commit_transaction()
    finally:
        producer.close()
    assert kafka.end_offsets(topic, isolation_level="read_committed") == {0: 3}
    assert [v for _, _, v, _ in consume_all(kafka, topic, isolation_level="read_committed")] == [b"before", b"pending"]


# -- lifecycle: a broker of their own, so the session broker is never taken down ----------------


@pytest.fixture(scope="module")
def own_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    broker = KafkaBroker(tmp_path_factory.mktemp("kafka-lifecycle"))
    try:
        yield broker.start()
    finally:
        broker.stop()


def _fill(broker: KafkaBroker, partitions: int = 2) -> tuple[str, list[Seen]]:
    topic = _topic()
    broker.create_topic(topic, partitions)
    broker.produce(topic, messages(200, partitions, topic), compression="lz4")
    return topic, consume_all(broker, topic)


def test_stop_then_start_on_same_port_keeps_data(own_broker: KafkaBroker) -> None:
    topic, before = _fill(own_broker)
    assert len(before) == 200
    port, pid = own_broker.port, own_broker.pid
    own_broker.stop()
    assert not own_broker.running and not is_listening(port), "the broker is down"
    own_broker.start()
    assert (own_broker.port, own_broker.bootstrap) == (port, f"127.0.0.1:{port}")
    assert own_broker.pid != pid, "a new process"
    assert consume_all(own_broker, topic) == before
    own_broker.produce(topic, [Message(b"after restart", partition=0)])
    assert own_broker.end_offsets(topic)[0] == 101


def test_kill_then_start_recovers_acknowledged_records(own_broker: KafkaBroker) -> None:
    """SIGKILL (no clean shutdown): what acks=all acknowledged is still there after log recovery."""
    topic, before = _fill(own_broker)
    own_broker.kill()
    assert not own_broker.running
    own_broker.start()
    assert consume_all(own_broker, topic) == before


def test_paused_broker_times_out_clients_and_resumes(own_broker: KafkaBroker) -> None:
    topic, _ = _fill(own_broker, partitions=1)
    producer = KafkaProducer(bootstrap_servers=own_broker.bootstrap, acks="all", request_timeout_ms=1500,
                             delivery_timeout_ms=3000, max_block_ms=3000, retries=0)  # fmt: skip
    try:
        producer.send(topic, value=b"warm", partition=0).get(timeout=10)  # metadata and connection up
        own_broker.pause()
        try:
            start = time.monotonic()
            with pytest.raises((KafkaTimeoutError, RequestTimedOutError)):
                producer.send(topic, value=b"while paused", partition=0).get(timeout=10)
            assert time.monotonic() - start < 10
        finally:
            own_broker.resume()
    finally:
        producer.close(timeout=5)
    own_broker.produce(topic, [Message(b"after resume", partition=0)])
    values = [v for _, _, v, _ in consume_all(own_broker, topic)]
    assert values[-1] == b"after resume" and b"warm" in values


def test_start_failure_reports_the_log(tmp_path: Path) -> None:
    """A broker that cannot start fails within the bound and shows why (its log), not a bare timeout."""
    broker = KafkaBroker(tmp_path / "bad")
    broker.format_storage()
    broker.config_file.write_text(broker.config_file.read_text() + "num.io.threads=not-a-number\n")
    started = time.monotonic()
    with pytest.raises(KafkaServiceError, match=r"(?s)exited with code.*last lines.*not-a-number"):
        broker.start(timeout_s=60)
    assert not broker.running
    assert time.monotonic() - started < 60

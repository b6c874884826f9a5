"""What real producers send, read by Spark's Kafka source: compressed batches, transactions, keys and
headers, and a cluster that takes only SASL logins (its ``kafka.*`` settings must reach Spark)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from lakecluster.config import load_config
from lakecluster.errors import KafkaLoginError
from lakecluster.stream.job import StreamJob
from lakecluster.table import LakeTable
from tests.conftest import read_delta
from tests.services.kafka import COMPRESSIONS, SASL_USERS, KafkaBroker, Message, plain_jaas_config
from tests.stream import kafka_records as kr

pytestmark = pytest.mark.integration


def _topic() -> str:
    return f"producers_{uuid.uuid4().hex[:8]}"


def _messages(records: list[kr.Produced], tag: str) -> list[Message]:
    """Each record with a key and two headers (one binary) that say where it came from."""
    def message(i: int, r: kr.Produced) -> Message:
        headers = [("batch", tag.encode()), ("seq", i.to_bytes(4, "big"))]
        return Message(r.value, key=f"{tag}-{i}".encode(), partition=r.partition, headers=headers)

    return [message(i, r) for i, r in enumerate(records)]


def test_compressed_and_transactional_batches_land_once_aborted_ones_never(
    spark, broker: KafkaBroker, tmp_path: Path
) -> None:
    topic = _topic()
    broker.create_topic(topic, 3)
    landed: list[kr.Produced] = []
    sent: dict[tuple[int, int], tuple[kr.Produced, Message]] = {}  # (partition, offset) -> what was sent there

    def send(records: list[kr.Produced], tag: str, **how: object) -> None:
        messages = _messages(records, tag)
        written = broker.produce(topic, messages, batch_size=16 * 1024, **how)  # type: ignore[arg-type]
        sent.update(zip(written, zip(records, messages, strict=True), strict=True))

    # One producer per compression codec, every one with malformed records among the valid ones.
    for n, codec in enumerate(COMPRESSIONS):
        records = kr.build(n * 1_000, 120, partitions=3, seed=20 + n)
        send(records, codec, compression=codec)
        landed += records
    committed = kr.build(10_000, 80, partitions=3, seed=30)
    send(committed, "committed", transactional=True, compression="lz4")
    landed += committed
    # Valid and malformed records in a transaction that aborts: neither the table nor the quarantine
    # may ever see them, though they sit in the log between committed ones.
    aborted = kr.build(20_000, 80, partitions=3, seed=31)
    send(aborted, "aborted", transactional=True, abort=True, compression="zstd")
    after = kr.build(30_000, 60, partitions=3, seed=32, with_malformed=False)
    send(after, "after", transactional=True)
    landed += after

    table = tmp_path / "orders"
    config = load_config(kr.write_config(tmp_path / "c.toml", bootstrap=broker.bootstrap, topic=topic, table=table))
    assert config.source.kafka.isolation_level == "read_committed"  # the default under test
    StreamJob(config, spark=spark, available_now=True).run()

    assert kr.table_rows(read_delta(table)) == kr.expected_rows(landed)
    quarantine = read_delta(LakeTable(config).quarantine.uri).to_pylist()
    expected_bad = {at: (r, m) for at, (r, m) in sent.items() if r.reason and dict(m.headers)["batch"] != b"aborted"}
    assert {(q["partition"], q["offset"]) for q in quarantine} == set(expected_bad)
    for q in quarantine:
        record, message = expected_bad[(q["partition"], q["offset"])]
        assert record.reason in q["reason"]
        assert (q["topic"], q["raw_value"], q["raw_key"]) == (topic, record.value, message.key)
        assert [(h["key"], h["value"]) for h in q["headers"]] == list(message.headers)

    # Spark SQL reads the quarantine table too, headers included.
    through_spark = spark.sql(
        f"SELECT partition, offset, raw_key, headers FROM delta.`{LakeTable(config).quarantine.uri}`"
    ).collect()
    assert {(r["partition"], r["offset"], bytes(r["raw_key"])) for r in through_spark} == {
        (p, o, m.key) for (p, o), (_, m) in expected_bad.items()
    }
    for r in through_spark:
        message = expected_bad[(r["partition"], r["offset"])][1]
        assert [(h["key"], bytes(h["value"])) for h in r["headers"]] == list(message.headers)

    # read_uncommitted reaches Spark's consumer: the same topic read that way shows the aborted records.
    dirty_table = tmp_path / "dirty"
    uncommitted = 'isolation_level = "read_uncommitted"'
    dirty = load_config(kr.write_config(tmp_path / "d.toml", bootstrap=broker.bootstrap, topic=topic,
                                        table=dirty_table, kafka_extra=uncommitted))  # fmt: skip
    StreamJob(dirty, spark=spark, available_now=True).run()
    assert kr.table_rows(read_delta(dirty_table)) == kr.expected_rows(landed + aborted)


def _sasl_config(tmp_path: Path, broker: KafkaBroker, topic: str, password: str) -> Path:
    jaas = plain_jaas_config(next(iter(SASL_USERS)), password).replace('"', '\\"')
    options = (
        "[source.kafka.options]\n"
        '"security.protocol" = "SASL_PLAINTEXT"\n'
        '"sasl.mechanism" = "PLAIN"\n'
        f'"sasl.jaas.config" = "{jaas}"\n'
    )
    return kr.write_config(tmp_path / f"sasl-{password}.toml", bootstrap=broker.sasl_bootstrap, topic=topic,
                           table=tmp_path / "orders", kafka_extra=options)  # fmt: skip


def test_a_sasl_only_listener_is_read_with_the_configured_login(spark, broker: KafkaBroker, tmp_path: Path) -> None:
    topic = _topic()
    broker.create_topic(topic, 2)
    records = kr.build(0, 150, partitions=2, seed=40, with_malformed=False)
    broker.produce(topic, [(r.partition, r.value) for r in records])
    password = next(iter(SASL_USERS.values()))

    config = load_config(_sasl_config(tmp_path, broker, topic, password))
    assert config.source.kafka.bootstrap_servers == broker.sasl_bootstrap
    StreamJob(config, spark=spark, available_now=True).run()
    assert kr.table_rows(read_delta(tmp_path / "orders")) == kr.expected_rows(records)

    # A wrong password is refused before Spark starts, in the broker's words, naming the setting to check.
    wrong = load_config(_sasl_config(tmp_path, broker, topic, "not-the-password"))
    with pytest.raises(KafkaLoginError) as refused:
        StreamJob(wrong, spark=spark, available_now=True).run()
    message = str(refused.value)
    assert "refused the SASL login of user 'lakecluster' (PLAIN over SASL_PLAINTEXT)" in message, message
    assert "Invalid username or password" in message and "source.kafka.options sasl.jaas.config" in message, message
    assert password not in message and "not-the-password" not in message

"""Kafka -> Delta through a real broker: valid rows land once, malformed ones are quarantined."""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path

import pytest

from lakecluster.config import load_config
from lakecluster.health import HEALTH
from lakecluster.stream.job import SourceWait, StreamJob
from lakecluster.table import LakeTable
from tests.conftest import duckdb_connection, read_delta
from tests.services.kafka import KafkaBroker as Broker
from tests.stream import kafka_records as kr

pytestmark = pytest.mark.integration


def _topic() -> str:
    return f"orders_{uuid.uuid4().hex[:8]}"


def test_stream_lands_valid_rows_once_and_quarantines_the_rest(spark, broker: Broker, tmp_path: Path) -> None:
    topic = _topic()
    broker.create_topic(topic, 3)
    first = kr.build(0, 700, partitions=3, seed=1)
    broker.produce(topic, [(r.partition, r.value) for r in first])
    table = tmp_path / "orders"
    config = load_config(kr.write_config(tmp_path / "c.toml", bootstrap=broker.bootstrap, topic=topic, table=table))

    reports = StreamJob(config, spark=spark, available_now=True).run()

    assert len(reports) >= 3, "max_offsets_per_trigger=200 over ~713 records must take several batches"
    assert kr.table_rows(read_delta(table)) == kr.expected_rows(first)
    quarantine = read_delta(LakeTable(config).quarantine.uri).to_pylist()
    expected_bad = {(p, o): r for p, o, r in kr.with_offsets(first) if r.reason}
    assert {(q["partition"], q["offset"]) for q in quarantine} == set(expected_bad)
    for q in quarantine:
        expected = expected_bad[(q["partition"], q["offset"])]
        assert expected.reason in q["reason"], (q["reason"], expected.reason)
        assert q["raw_value"] == expected.value
        assert q["topic"] == topic
        assert q["headers"] is None, "a record sent without headers has none in the quarantine"

    # Restart from the checkpoint after more records arrive: only the new ones are added.
    second = kr.build(10_000, 300, partitions=3, seed=2, with_malformed=False)
    broker.produce(topic, [(r.partition, r.value) for r in second])
    StreamJob(config, spark=spark, available_now=True).run()
    assert kr.table_rows(read_delta(table)) == kr.expected_rows(first + second)
    assert len(read_delta(LakeTable(config).quarantine.uri)) == len(expected_bad)


def test_duckdb_reads_the_same_table(spark, broker: Broker, tmp_path: Path) -> None:
    topic = _topic()
    broker.create_topic(topic, 2)
    records = kr.build(0, 400, partitions=2, seed=3, with_malformed=False)
    broker.produce(topic, [(r.partition, r.value) for r in records])
    table = tmp_path / "orders"
    config = load_config(kr.write_config(tmp_path / "c.toml", bootstrap=broker.bootstrap, topic=topic, table=table))
    StreamJob(config, spark=spark, available_now=True).run()

    con = duckdb_connection()
    through_duckdb = con.execute(f"SELECT * FROM delta_scan('{table}')").fetch_arrow_table()
    assert kr.table_rows(through_duckdb) == kr.expected_rows(records)
    assert kr.table_rows(read_delta(table)) == kr.expected_rows(records)


def test_max_batches_stops_after_that_many_batches_when_the_next_follows_at_once(  # type: ignore[no-untyped-def]
    spark, broker: Broker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    topic = _topic()
    broker.create_topic(topic, 1)
    records = kr.build(0, 1000, partitions=1, seed=5, with_malformed=False)
    broker.produce(topic, [(r.partition, r.value) for r in records])
    table = tmp_path / "orders"
    cfg = kr.write_config(tmp_path / "c.toml", bootstrap=broker.bootstrap, topic=topic, table=table, max_offsets=100)
    # No trigger interval: the next micro-batch starts as soon as one ends; the thread watching the
    # query is slow to look (as on a loaded machine, where it waited on the JVM for seconds).
    config = load_config(cfg, overrides={"stream.trigger_interval_s": "0"}, environ={})
    observe = SourceWait.observe
    monkeypatch.setattr(SourceWait, "observe", lambda self, query: (time.sleep(3), observe(self, query))[1])

    reports = StreamJob(config, spark=spark, max_batches=2).run()

    assert [r.rows for r in reports if not r.skipped] == [100, 100]
    assert read_delta(table).num_rows == 200


def test_a_stream_on_an_empty_topic_turns_ready_without_a_batch(spark, broker: Broker, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Ready means the stream is up: a first micro-batch committed, or a source with nothing to
    read (an empty topic runs no micro-batch at all)."""
    topic = _topic()
    broker.create_topic(topic, 1)
    table = tmp_path / "orders"
    cfg = kr.write_config(tmp_path / "c.toml", bootstrap=broker.bootstrap, topic=topic, table=table)
    config = load_config(cfg, overrides={"stream.trigger_interval_s": "0.5"}, environ={})
    HEALTH.reset()
    job = StreamJob(config, spark=spark)
    assert HEALTH.snapshot()["stream"]["ready"] is False, "registered, not ready before it runs"
    runner = threading.Thread(target=job.run, daemon=True)
    runner.start()
    try:
        deadline = time.monotonic() + 120
        while not HEALTH.snapshot()["stream"]["ready"] and runner.is_alive() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert HEALTH.snapshot()["stream"]["ready"], "the stream on an empty topic never turned ready"
        assert not [r for r in job.reports if r.rows], "ready before any row: idle, not a batch"
    finally:
        job.request_stop()
        runner.join(timeout=120)
        HEALTH.reset()
    assert not runner.is_alive()

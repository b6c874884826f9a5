"""Consumer lag: the brokers' end offsets minus the offsets the table committed, per partition."""

from __future__ import annotations

import re
import uuid
from pathlib import Path

import pytest

from lakecluster import metrics
from lakecluster.config import load_config
from lakecluster.stream import kafka
from lakecluster.stream.job import StreamJob, progress_printer
from lakecluster.stream.lag import lag, measure, recorded_offsets
from lakecluster.table import LakeTable
from tests.conftest import read_delta
from tests.services.kafka import KafkaBroker as Broker
from tests.stream import kafka_records as kr


def test_lag_counts_from_the_committed_offset_or_the_start_of_the_log() -> None:
    ends = {("a", 0): 100, ("a", 1): 50, ("a", 2): 70, ("b", 0): 9}
    starts = {("a", 0): 0, ("a", 1): 20, ("a", 2): 0, ("b", 0): 4}
    committed = {"a": {0: 60, 1: 10}}  # a/1 committed below what Kafka still keeps; a/2 and b/0 never read
    assert lag(ends, starts, committed) == {("a", 0): 40, ("a", 1): 30, ("a", 2): 70, ("b", 0): 5}
    assert lag({("a", 0): 5}, {("a", 0): 0}, {"a": {0: 7}}) == {("a", 0): 0}


def _gauge(topic: str, partition: int) -> float | None:
    labels = {"topic": topic, "partition": str(partition)}
    return metrics.REGISTRY.get_sample_value("lakecluster_stream_lag_records", labels)


@pytest.mark.integration
def test_stream_exports_its_lag_and_the_table_tells_it_after_a_stop(spark, broker: Broker, tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    topic = f"lag_{uuid.uuid4().hex[:8]}"
    broker.create_topic(topic, 3)
    first = kr.build(0, 600, partitions=3, seed=11, with_malformed=False)
    broker.produce(topic, [(r.partition, r.value) for r in first])
    table = tmp_path / "orders"
    path = kr.write_config(tmp_path / "c.toml", bootstrap=broker.bootstrap, topic=topic, table=table)
    config = load_config(path, overrides={"stream.lag_interval_s": "0.2"})
    client = kafka.consumer(config.source.kafka)
    try:
        # Nothing committed yet: every record of every partition is lag.
        assert recorded_offsets(LakeTable(config)) is None
        produced = {p: sum(r.partition == p for r in first) for p in range(3)}
        assert measure(config.source.kafka, client, {}) == {(topic, p): n for p, n in produced.items()}

        job = StreamJob(config, spark=spark, available_now=True)
        job.on_batch = progress_printer(lag=job.total_lag)  # what `lakecluster stream` prints
        job.run()
        assert len(read_delta(table)) == len(first)
        batch_lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("batch")]
        assert batch_lines, "no progress line"
        found = [re.search(r"  lag ([\d,]+)", ln) for ln in batch_lines]
        shown = [int(m.group(1).replace(",", "")) for m in found if m]
        # Once the monitor has measured (every 0.2 s here), every line tells the lag.
        assert shown and all(found[found.index(next(m for m in found if m)):]), batch_lines
        assert all(0 <= n <= len(first) for n in shown)
        monitor = job.source.monitor  # type: ignore[attr-defined]  # the Kafka source's lag monitor
        assert monitor is not None and monitor.latest is not None, "the monitor measured while the stream ran"
        assert job.total_lag() == sum(monitor.latest.values())
        assert monitor.measure_once() == {(topic, p): 0 for p in range(3)}
        assert [_gauge(topic, p) for p in range(3)] == [0.0, 0.0, 0.0]

        # Records arriving while the stream is stopped: the table's recorded offsets tell the lag.
        more = [r for r in kr.build(10_000, 90, partitions=3, seed=12, with_malformed=False) if r.partition != 2]
        broker.produce(topic, [(r.partition, r.value) for r in more])
        expected = {(topic, p): sum(r.partition == p for r in more) for p in range(3)}
        assert expected[(topic, 2)] == 0 and expected[(topic, 0)] > 0
        committed = recorded_offsets(LakeTable(config))
        assert committed == {topic: produced}
        assert measure(config.source.kafka, client, committed) == expected
    finally:
        client.close()

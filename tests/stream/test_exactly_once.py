"""Exactly once that does not depend on the checkpoint: the table records what each stream read."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
import uuid
from dataclasses import replace
from pathlib import Path

import pytest

from lakecluster.config import load_config
from lakecluster.errors import LeaseHeldError
from lakecluster.stream import resume
from lakecluster.stream.job import StreamJob
from lakecluster.table import LakeTable
from tests.conftest import read_delta
from tests.services.kafka import KafkaBroker
from tests.stream import kafka_records as kr

pytestmark = pytest.mark.integration


def _topic(kafka: KafkaBroker, partitions: int = 3) -> str:
    name = f"eo_{uuid.uuid4().hex[:8]}"
    kafka.create_topic(name, partitions)
    return name


def _quarantined(path: str) -> list[tuple[int, int]]:
    return sorted((q["partition"], q["offset"]) for q in read_delta(path).to_pylist())


def test_lost_checkpoint_resumes_exactly_from_the_offsets_in_the_table(spark, kafka: KafkaBroker,
                                                                       tmp_path: Path) -> None:  # fmt: skip
    topic = _topic(kafka)
    first = kr.build(0, 600, partitions=3, seed=21)
    kafka.produce(topic, [(r.partition, r.value) for r in first])
    table = tmp_path / "orders"
    config = load_config(kr.write_config(tmp_path / "c.toml", bootstrap=kafka.bootstrap, topic=topic, table=table,
                                         max_offsets=150))  # fmt: skip

    partial = StreamJob(config, spark=spark, max_batches=2).run()
    assert sum(r.rows for r in partial) < 600, "the first run must stop part-way"
    second = kr.build(10_000, 300, partitions=3, seed=22)
    kafka.produce(topic, [(r.partition, r.value) for r in second])
    shutil.rmtree(LakeTable(config).paths.checkpoint)  # the checkpoint is lost mid-way

    StreamJob(config, spark=spark, available_now=True).run()

    rows = kr.table_rows(read_delta(table))
    assert rows == kr.expected_rows(first + second), "rows lost or duplicated after the checkpoint was lost"
    expected_bad = sorted((p, o) for p, o, r in kr.with_offsets(first + second) if r.reason)
    assert _quarantined(LakeTable(config).quarantine.uri) == expected_bad
    marker = json.loads((Path(LakeTable(config).paths.checkpoint) / resume.MARKER).read_text())
    assert marker["resumed_from"] == "table"
    assert marker["txn_base"] > max(r.txn_version for r in partial), "txn versions must continue, not restart"


def test_two_streams_from_different_topics_into_one_table_both_land_in_full(spark, kafka: KafkaBroker,
                                                                            tmp_path: Path) -> None:  # fmt: skip
    table = tmp_path / "orders"
    topics = [_topic(kafka, 2), _topic(kafka, 2)]
    records = {t: kr.build(i * 100_000, 250, partitions=2, seed=30 + i) for i, t in enumerate(topics)}
    configs = [
        load_config(kr.write_config(tmp_path / f"c{i}.toml", bootstrap=kafka.bootstrap, topic=t, table=table))
        for i, t in enumerate(topics)
    ]
    assert LakeTable(configs[0]).stream_id != LakeTable(configs[1]).stream_id
    for t in topics:
        kafka.produce(t, [(r.partition, r.value) for r in records[t]])
    for c in configs:
        StreamJob(c, spark=spark, available_now=True).run()
    more = {t: kr.build(50_000 + i * 100_000, 100, partitions=2, seed=40 + i, with_malformed=False)
            for i, t in enumerate(topics)}  # fmt: skip
    for t in topics:
        kafka.produce(t, [(r.partition, r.value) for r in more[t]])
    for c in reversed(configs):
        StreamJob(c, spark=spark, available_now=True).run()

    everything = [r for t in topics for r in records[t] + more[t]]
    assert kr.table_rows(read_delta(table)) == kr.expected_rows(everything)
    bad = [r for r in everything if r.reason]
    assert len(read_delta(LakeTable(configs[0]).quarantine.uri)) == len(bad)
    # Each stream keeps its own sketches; readers merge them: every valid row is counted once.
    merged = LakeTable.at(str(table)).sketches().latest()
    assert merged is not None
    city = merged.sketches["city"]
    assert city.n + city.nulls == len(kr.expected_rows(everything))


def test_a_second_writer_of_the_same_stream_is_refused_and_a_killed_holder_frees_it(spark, kafka: KafkaBroker,
                                                                                   tmp_path: Path) -> None:  # fmt: skip
    topic = _topic(kafka, 1)
    records = kr.build(0, 50, partitions=1, seed=5, with_malformed=False)
    kafka.produce(topic, [(r.partition, r.value) for r in records])
    table = tmp_path / "orders"
    config = load_config(kr.write_config(tmp_path / "c.toml", bootstrap=kafka.bootstrap, topic=topic, table=table))
    StreamJob(config, spark=spark, available_now=True).run()  # creates the table

    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sys, time
        from lakecluster.config import StorageConfig
        from lakecluster.lease import Lease
        lease = Lease.acquire({LakeTable(config).paths.lease()!r}, "stream {LakeTable(config).stream_id} (test holder)",
                              storage=StorageConfig())
        print("held", flush=True)
        time.sleep(600)
    """)], stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(LeaseHeldError, match=rf"already running: pid {holder.pid} "):
            StreamJob(config, spark=spark, available_now=True).run()
    finally:
        holder.kill()
        holder.wait()
    # The kernel released the killed holder's lock: the stream starts again at once.
    more = kr.build(1000, 20, partitions=1, seed=6, with_malformed=False)
    kafka.produce(topic, [(r.partition, r.value) for r in more])
    StreamJob(replace(config), spark=spark, available_now=True).run()
    assert kr.table_rows(read_delta(table)) == kr.expected_rows(records + more)

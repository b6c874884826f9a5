"""Services ride out transient faults (broker down, storage unwritable) and stop for good, non-zero,
on faults retrying cannot fix."""

from __future__ import annotations

import contextlib
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from deltalake import DeltaTable

from lakecluster import metrics
from lakecluster.compaction.background import BackgroundCompactor
from lakecluster.config import Config, load_config
from lakecluster.stream.job import StreamJob
from lakecluster.table import LakeTable
from tests.conftest import lakecluster_cmd, read_delta, subprocess_env
from tests.services.kafka import KafkaBroker
from tests.stream import kafka_records as kr

pytestmark = pytest.mark.integration

OUTAGE_S = 20  # the broker is down this long: 4 x the source wait warning
FAST_RETRY = {"retry.initial_backoff_s": "0.5", "retry.max_backoff_s": "3", "metrics.port": "0"}


def _config(tmp_path: Path, kafka: KafkaBroker, topic: str, **extra: str) -> Config:
    path = kr.write_config(tmp_path / "c.toml", bootstrap=kafka.bootstrap, topic=topic, table=tmp_path / "orders",
                           max_offsets=400)  # fmt: skip
    return load_config(path, overrides={**FAST_RETRY, **extra}, environ={})


def _wait(what: str, condition: Callable[[], bool], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f}s waiting for {what}")
        time.sleep(0.5)


def _rows(table: Path) -> int:
    try:
        return read_delta(table).num_rows
    except Exception:
        return 0


def _transient_failures(service: str) -> float:
    labels = {"service": service, "kind": "transient"}
    return metrics.REGISTRY.get_sample_value("lakecluster_service_failures_total", labels) or 0


@contextlib.contextmanager
def running(job: StreamJob) -> Iterator[StreamJob]:
    errors: list[BaseException] = []

    def target() -> None:
        try:
            job.run()
        except BaseException as e:
            errors.append(e)

    thread = threading.Thread(target=target)
    thread.start()
    try:
        yield job
    finally:
        job.request_stop()
        thread.join(timeout=180)
    assert not thread.is_alive(), "the stream did not stop"
    assert not errors, errors


def test_stream_rides_out_a_broker_outage(spark, kafka: KafkaBroker, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    topic = f"down_{uuid.uuid4().hex[:8]}"
    kafka.create_topic(topic, 2)
    config = _config(tmp_path, kafka, topic, **{"stream.trigger_interval_s": "1", "stream.source_wait_warning_s": "5"})
    table = Path(config.table.path)
    before = kr.build(0, 300, partitions=2, seed=51)
    after = kr.build(10_000, 300, partitions=2, seed=52)
    kafka.produce(topic, [(r.partition, r.value) for r in before])
    waits_before = metrics.REGISTRY.get_sample_value("lakecluster_stream_source_waits_total") or 0
    with running(StreamJob(config, spark=spark)) as job:
        _wait("the first records", lambda: _rows(table) == len(kr.expected_rows(before)), 180)
        down_at = time.monotonic()
        kafka.stop()
        try:
            # Spark's Kafka source blocks (it fails only after minutes): the wait is reported.
            waiting = "lakecluster_stream_waiting_for_source"
            _wait("the wait for the source to be reported", lambda: metrics.REGISTRY.get_sample_value(waiting) == 1, 50)
            time.sleep(max(0.0, OUTAGE_S - (time.monotonic() - down_at)))
        finally:
            kafka.start()
        kafka.produce(topic, [(r.partition, r.value) for r in after])
        expected = len(kr.expected_rows(before + after))
        _wait("the records produced after the outage", lambda: _rows(table) == expected, 300)
    assert kr.table_rows(read_delta(table)) == kr.expected_rows(before + after)
    bad = sorted((p, o) for p, o, r in kr.with_offsets(before + after) if r.reason)
    quarantined = read_delta(LakeTable(config).quarantine.uri).to_pylist()
    assert sorted((q["partition"], q["offset"]) for q in quarantined) == bad
    assert job.reports, "no batch was committed"
    assert (metrics.REGISTRY.get_sample_value("lakecluster_stream_source_waits_total") or 0) > waits_before
    assert metrics.REGISTRY.get_sample_value("lakecluster_stream_waiting_for_source") == 0, "the wait is over"


def test_stream_and_compactor_ride_out_an_unwritable_table_log(spark, kafka: KafkaBroker, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    topic = f"ro_{uuid.uuid4().hex[:8]}"
    kafka.create_topic(topic, 2)
    # One unpartitioned table and no scheduled vacuum: the compactor's only log writes are its
    # compaction commits, and the first wave's small files are a group waiting for it.
    config = _config(tmp_path, kafka, topic, **{
        "stream.trigger_interval_s": "0.5", "compaction.interval_s": "1", "compaction.min_input_files": "2",
        "compaction.target_file_bytes": "20000", "compaction.min_file_bytes": "10000",
        "table.partition_by": "[]", "vacuum.interval_s": "0",
    })  # fmt: skip
    table = Path(config.table.path)
    waves = [kr.build(i * 10_000, 150, partitions=2, seed=60 + i, with_malformed=False) for i in range(3)]
    kafka.produce(topic, [(r.partition, r.value) for r in waves[0]])

    failures = _transient_failures
    failures_before = {s: failures(s) for s in ("stream", "compactor")}
    compactor = BackgroundCompactor(config, spark)
    with running(StreamJob(config, spark=spark)):
        _wait("the first wave", lambda: _rows(table) == 150, 180)
        assert len(DeltaTable(str(table)).file_uris()) >= 2, "the first wave should leave files to compact"
        log_dir = table / "_delta_log"
        version_at_fault = DeltaTable(str(table)).version()
        # Immutable: not even root can create files in it. Every commit fails meanwhile.
        subprocess.run(["chattr", "+i", str(log_dir)], check=True)
        try:
            kafka.produce(topic, [(r.partition, r.value) for r in waves[1]])
            compactor.start()  # its first commit meets the fault
            _wait("the compactor to meet the fault", lambda: failures("compactor") > failures_before["compactor"], 180)
            _wait("the stream to meet the fault", lambda: failures("stream") > failures_before["stream"], 120)
            assert _rows(table) == 150, "a commit went through an unwritable log"
            assert DeltaTable(str(table)).version() == version_at_fault
        finally:
            subprocess.run(["chattr", "-i", str(log_dir)], check=True)
        kafka.produce(topic, [(r.partition, r.value) for r in waves[2]])
        _wait("every wave", lambda: _rows(table) == 450, 300)
        _wait("a compaction committed after the fault",
              lambda: any(h["operation"] == "OPTIMIZE" and h["version"] > version_at_fault
                          for h in DeltaTable(str(table)).history()), 180)  # fmt: skip
        compactor.stop(timeout_s=300)
    assert compactor.failure is None, compactor.failure
    assert kr.table_rows(read_delta(table)) == kr.expected_rows([r for w in waves for r in w])


def test_offsets_gone_from_the_broker_stop_the_stream_with_a_non_zero_exit(spark, kafka: KafkaBroker,  # type: ignore[no-untyped-def]
                                                                          tmp_path: Path) -> None:  # fmt: skip
    from kafka import TopicPartition

    topic = f"lost_{uuid.uuid4().hex[:8]}"
    kafka.create_topic(topic, 1)
    records = kr.build(0, 400, partitions=1, seed=70, with_malformed=False)
    kafka.produce(topic, [(r.partition, r.value) for r in records])
    cfg = kr.write_config(tmp_path / "c.toml", bootstrap=kafka.bootstrap, topic=topic, table=tmp_path / "orders",
                          max_offsets=100)  # fmt: skip
    args = ["--config", str(cfg), "--set=metrics.port=0", "--set=stream.trigger_interval_s=1"]
    first = StreamJob(load_config(cfg, overrides={"stream.trigger_interval_s": "1"}, environ={}), spark=spark,
                      max_batches=1).run()  # the stream's first run, in this process
    assert sum(r.rows for r in first) == 100
    with kafka.admin() as admin:  # retention removes what the stream has not read yet
        admin.delete_records({TopicPartition(topic, 0): 300})
    lost = subprocess.run(lakecluster_cmd(*args, "stream", "--available-now"), capture_output=True, text=True,
                          env=subprocess_env(), timeout=300)  # fmt: skip
    assert lost.returncode == 1, lost.stdout[-2000:] + lost.stderr[-3000:]
    last = lost.stderr.strip().splitlines()[-1]
    assert last.startswith("lakecluster: FatalServiceError: the stream stopped for good (fatal fault)"), last
    assert "data may have been lost" in last or "DATA_LOSS" in last, last
    assert "Traceback" not in lost.stderr and "\tat org.apache" not in lost.stderr, lost.stderr[-3000:]


def _live_files(table: Path) -> list[str]:
    try:
        return DeltaTable(str(table)).get_add_actions(flatten=True).column("path").to_pylist()
    except Exception:  # no table yet
        return []


def test_run_exits_non_zero_when_its_compactor_is_dead_for_good(tmp_path: Path) -> None:
    table = tmp_path / "t"
    args = [f"--set=table.path={table}", "--set=table.partition_by=[]", "--set=metrics.port=0",
            "--set=stream.trigger_interval_s=1", "--set=source.generator.rows_per_second=1000",
            "--set=compaction.interval_s=2", "--set=compaction.min_input_files=2",
            "--set=compaction.target_file_bytes=100000", "--set=compaction.min_file_bytes=50000",
            "--set=retry.initial_backoff_s=0.5", "--set=retry.max_backoff_s=2", "--set=retry.give_up_after_s=5",
            "--set=stream.progress=true"]  # fmt: skip
    proc = subprocess.Popen(lakecluster_cmd(*args, "run"), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=subprocess_env(), start_new_session=True)  # fmt: skip
    try:
        try:
            _wait("the stream's first committed files", lambda: len(_live_files(table)) >= 2, 400)
        except AssertionError:
            proc.kill()
            out, err = proc.communicate()
            raise AssertionError(out[-2000:] + err[-3000:]) from None
        # The stream's files turn to garbage as they land (a bad disk, a broken writer): every
        # rewrite reading them fails, and no retry can help.
        corrupted: set[str] = set()
        deadline = time.monotonic() + 400
        while proc.poll() is None and time.monotonic() < deadline:
            for path in set(_live_files(table)) - corrupted:
                if not path.startswith("part-g"):  # the compactor's own outputs stay readable
                    (table / path).write_bytes(b"not parquet at all" * 100)
                    corrupted.add(path)
            time.sleep(0.5)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 1, out[-2000:] + err[-3000:]
    assert "the compactor stopped" in err.strip().splitlines()[-1], err[-3000:]
    assert out.count("batch ") >= 1, "the stream should have run before the compactor died"

"""A stream process that dies at any point loses no row and duplicates none after a restart."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
import uuid
from pathlib import Path

import pytest
from deltalake import DeltaTable

from lakecluster.config import load_config
from lakecluster.stream.job import StreamJob
from lakecluster.table import LakeTable
from tests.conftest import lakecluster_cmd, read_delta, subprocess_env
from tests.services.kafka import KafkaBroker as Broker
from tests.services.process import group_alive
from tests.stream import kafka_records as kr

pytestmark = pytest.mark.integration


def _wait_for_version(table: Path, version: int, proc: subprocess.Popen[bytes], timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, "the stream exited before it could be killed"
        try:
            if DeltaTable(str(table)).version() >= version:
                return
        except Exception:
            pass
        time.sleep(0.2)
    raise AssertionError(f"table did not reach version {version} within {timeout}s")


# Deaths: anywhere (SIGKILL of the process group mid-run); after the quarantine commit but before
# the table's, with the checkpoint lost too (the restart resumes from the table's offsets and must
# not quarantine the same records twice); after the table commit, before the sketches.
CRASHES = ["sigkill-mid-run", "after_quarantine_commit:1+lost-checkpoint", "after_table_commit:2"]


@pytest.mark.parametrize("crash", CRASHES)
def test_crash_and_restart_is_exactly_once(spark, broker: Broker, tmp_path: Path, crash: str) -> None:  # type: ignore[no-untyped-def]
    topic = f"crash_{uuid.uuid4().hex[:8]}"
    broker.create_topic(topic, 3)
    records = kr.build(0, 600, partitions=3, seed=11)
    broker.produce(topic, [(r.partition, r.value) for r in records])
    table = tmp_path / "orders"
    cfg = kr.write_config(tmp_path / "c.toml", bootstrap=broker.bootstrap, topic=topic, table=table, max_offsets=200)
    log = open(tmp_path / "first.log", "wb")

    if crash == "sigkill-mid-run":
        proc = subprocess.Popen(lakecluster_cmd("--config", str(cfg), "stream"), stdout=log,
                                stderr=subprocess.STDOUT, env=subprocess_env(), start_new_session=True)  # fmt: skip
        _wait_for_version(table, 2, proc)
        os.killpg(proc.pid, signal.SIGKILL)  # the driver and its JVM, mid-run
        proc.wait(timeout=30)
    else:
        env = subprocess_env(LAKECLUSTER_TEST_CRASH_AT=crash.split("+")[0])
        proc = subprocess.Popen(lakecluster_cmd("--config", str(cfg), "stream", "--available-now"), stdout=log,
                                stderr=subprocess.STDOUT, env=env, start_new_session=True)  # fmt: skip
        assert proc.wait(timeout=300) == 137, (tmp_path / "first.log").read_text()[-3000:]
        os.killpg(proc.pid, signal.SIGKILL) if group_alive(proc.pid) else None
    log.close()
    if crash.endswith("+lost-checkpoint"):
        shutil.rmtree(LakeTable(load_config(cfg)).paths.checkpoint)
    partial = kr.table_rows(read_delta(table))
    assert len(partial) < len(kr.expected_rows(records)), "the crash came after everything was ingested"
    assert len(partial) == len(set(partial)), "duplicates before the restart"

    # The restart: the same stream (its checkpoint, or none) in another process, this one.
    StreamJob(load_config(cfg, environ={}), spark=spark, available_now=True).run()

    assert kr.table_rows(read_delta(table)) == kr.expected_rows(records)
    quarantine = read_delta(str(table) + "_quarantine").to_pylist()
    expected_bad = {(p, o) for p, o, r in kr.with_offsets(records) if r.reason}
    assert sorted((q["partition"], q["offset"]) for q in quarantine) == sorted(expected_bad)
    # The sketches count every valid row once: a batch whose sketches the crash cut off
    # (after_table_commit) is sketched on restart, and none is sketched twice.
    sketches = LakeTable.at(str(table)).sketches().latest()
    assert sketches is not None
    city = sketches.sketches["city"]
    assert city.n + city.nulls == len(kr.expected_rows(records))

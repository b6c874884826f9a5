"""``lakecluster stream`` as a user runs it: the built-in default, clean stops, a missing topic.

Integration tests: the stop test runs Spark, the topic test a real Kafka broker.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from lakecluster.table import LakeTable
from tests.cli.conftest import run_cli, tree
from tests.conftest import lakecluster_cmd, read_delta, subprocess_env
from tests.services.kafka import KafkaBroker
from tests.services.ports import free_port
from tests.services.process import group_gone_within

pytestmark = pytest.mark.integration


# How the stop arrives here: as systemd (KillMode=control-group) and `timeout` send it, to every
# process of the group, the JVM and the Python workers included. Ctrl-C in a terminal (SIGINT to
# the foreground group) is tested on `compact` in tests/cli/test_progress.py; docker/k8s signal the
# main process only: `run` and `compact` are stopped that way in tests/lakecluster/test_metrics.py
# and tests/compaction/test_reload.py.
def test_stream_with_defaults_runs_the_generator_and_a_stop_signal_stops_cleanly(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        lakecluster_cmd("--set", "source.generator.rows_per_second=2000", "--set", "stream.trigger_interval_s=1",
                        "--set", f"metrics.port={free_port()}", "stream"),
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=subprocess_env(),
        start_new_session=True,
    )  # fmt: skip
    assert proc.stdout is not None
    lines: list[str] = []
    deadline = time.monotonic() + 240
    while sum(line.startswith("batch") for line in lines) < 2 and time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
    os.killpg(proc.pid, signal.SIGTERM)
    rest, _ = proc.communicate(timeout=120)
    output = "".join(lines) + rest
    assert proc.returncode == 0, output[-3000:]
    batch_lines = [ln for ln in output.splitlines() if ln.startswith("batch")]
    assert len(batch_lines) >= 2, output[-3000:]
    assert all(w in batch_lines[0] for w in ("rows", "rows/s", "files", "quarantined"))
    assert "stopped after" in output
    assert "Traceback" not in output
    assert group_gone_within(proc.pid, 30), "the JVM or a Python worker outlived the driver"

    path = tmp_path / "lakecluster-data" / "lineorder"  # the default table.path, relative to the cwd
    keys = sorted(read_delta(path).column("lo_orderkey").to_pylist())
    # The generator's offsets are its order keys: a clean stop leaves exactly a prefix, once.
    assert keys == list(range(len(keys))) and len(keys) > 0
    assert LakeTable.at(str(path)).sketches().latest() is not None


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ('source.kafka.topics=["no_such_topic"]', "topic(s) no_such_topic not found on {bootstrap}; create them or "
                                                   "fix source.kafka.topics"),
        ("source.kafka.topic_pattern=no_such_.*", "no topic on {bootstrap} matches pattern 'no_such_.*'"),
    ],
    ids=["topics", "topic_pattern"],
)  # fmt: skip
def test_missing_topic_is_named_before_spark_starts(kafka: KafkaBroker, tmp_path: Path, setting: str,
                                                    message: str) -> None:  # fmt: skip
    table = tmp_path / "t"
    proc = run_cli("--set", "source.kind=kafka", "--set", f"source.kafka.bootstrap_servers={kafka.bootstrap}",
                   "--set", setting, "--set", f"table.path={table}", "--set", "metrics.port=0", "stream",
                   cwd=tmp_path)  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr == f"lakecluster: TopicNotFoundError: {message.format(bootstrap=kafka.bootstrap)}\n"
    assert tree(tmp_path) == []
